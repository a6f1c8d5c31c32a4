"""The feature maps in the workflows a user builds around them: model selection with
process-parallel searches, column transformers and unions with pandas output, persistence,
refits, random streams, and the kernel-ridge workflow against scikit-learn's
``KernelRidge`` with the exact kernel.

Every expected value is an exact reference: the same seed gives the same random draw, so
features are compared with a fresh fit of the same configuration (to the last bit, or to
round-off where the computation differs), and the kernel-ridge predictions with the exact
kernel's within a bound derived from the map's analytic variance.
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pandas as pd
import pytest
from favor_helpers import PUBLIC_MAPS

from kernelkit.features import SDERF

MAPS = PUBLIC_MAPS
IDS = [cls.__name__ for cls in MAPS]

#: small configurations: the hybrids' output grows like n_features * n_lambda * d
SMALL = {
    "AngularHybridRF": {"n_features": 4, "n_lambda": 2},
    "GaussianHybridRF": {"n_features": 4, "n_lambda": 2},
    "NormalizedGaussianHybridRF": {"n_features": 4, "n_lambda": 2},
    "ClusteredHybridRF": {"n_features": 8, "n_clusters": 2},
}


def _small(cls, **kw):
    return cls(**{"n_features": 16, **SMALL.get(cls.__name__, {}), **kw})


def _data(seed=0, n=30, d=4):
    rng = np.random.default_rng(seed)
    return 0.35 * rng.standard_normal((n, d))


# ---------------------------------------------------------------------- failed refits
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_a_failed_refit_keeps_the_fitted_map(cls):
    """A refit on bad data (another width, named columns, a NaN) raises and leaves the
    map as fitted before: same width, same column names, same features (it used to keep
    the new width or names with the old draw, so the old data was refused and data of the
    new width failed inside a matrix product)."""
    X = pd.DataFrame(_data(), columns=list("abcd"))
    bad = pd.DataFrame(_data(1, n=25, d=6), columns=list("uvwxyz"))
    bad.iloc[-1, 0] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # e.g. the biased-sampler warnings
        fm = _small(cls, random_state=0).fit(X)
        Z = fm.transform(X)
        with pytest.raises(ValueError, match="NaN"):
            fm.fit(bad)
        assert fm.n_features_in_ == 4
        assert list(fm.feature_names_in_) == list("abcd")
        np.testing.assert_array_equal(fm.transform(X), Z)
        with pytest.raises(ValueError, match="expecting 4 features"):
            fm.transform(bad.fillna(0.0).to_numpy())


def test_a_failed_first_fit_leaves_the_map_unfitted():
    bad = _data(1, d=6)
    bad[-1, 0] = np.inf
    fm = SDERF(8, random_state=0)
    with pytest.raises(ValueError, match="NaN or infinity"):
        fm.fit(bad)
    assert not hasattr(fm, "n_features_in_")
    with pytest.raises(Exception, match="not fitted"):
        fm.transform(bad[:, :4])


def test_a_refit_failing_on_a_late_dask_chunk_keeps_the_fitted_map():
    """The FAVOR# fit reads every chunk's moments: a NaN in the last chunk is found after
    the first chunks were read."""
    X = _data(0, n=300, d=5)
    bad = _data(1, n=300, d=5)
    bad[250, 1] = np.nan
    fm = SDERF(8, random_state=0).fit(X)
    Z = fm.transform(X)
    with pytest.raises(ValueError, match="NaN"):
        SDERF(8, random_state=0).fit(da.from_array(bad, chunks=100))
    with pytest.raises(ValueError, match="NaN"):
        fm.fit(da.from_array(bad, chunks=100))
    np.testing.assert_array_equal(fm.transform(X), Z)
