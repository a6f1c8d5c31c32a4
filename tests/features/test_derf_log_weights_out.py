"""``derf_log_weights(..., out=...)``: a NumPy ``W_x`` written into the caller's buffer is
the same array as without it, for every fitted map (the transform reads it from there)."""

import numpy as np
import pytest

from kernelkit import features
from kernelkit.features import favor


@pytest.mark.parametrize("name", ["GERF", "SADERF", "ADERF", "SDERF"])
def test_out_buffer_gives_the_same_weights(name):
    rng = np.random.default_rng(3)
    X, Y = rng.normal(size=(200, 5)) / 3, rng.normal(size=(150, 5)) / 3
    fm = getattr(features, name)(n_features=16, random_state=0).fit(X, Y=Y)
    params, W = fm._parameters(), fm._projections()
    W_x, W_y, const = favor.derf_log_weights(params, W)
    buf = np.full((5, 16), np.nan)
    W_x2, W_y2, const2 = favor.derf_log_weights(params, W, out=buf)
    np.testing.assert_array_equal(W_x2, W_x)
    np.testing.assert_array_equal(W_y2, W_y)
    np.testing.assert_array_equal(const2, const)
    if W_x2 is buf:  # one matrix product (SDERF's rotation, ADERF's B_x): written there
        assert name in ("SDERF", "ADERF")
    else:  # diagonal forms: the buffer is left alone
        assert np.isnan(buf).all()
    if params.symmetric:  # one map for both sides (documented: the same object)
        assert W_y2 is W_x2
    else:  # only the x side goes into the buffer
        assert W_y2 is not buf


def test_out_buffer_of_another_shape_is_ignored():
    rng = np.random.default_rng(4)
    fm = features.SDERF(n_features=8, random_state=0).fit(rng.normal(size=(50, 3)) / 3)
    buf = np.zeros((3, 9))
    W_x, _, _ = favor.derf_log_weights(fm._parameters(), fm._projections(), out=buf)
    assert W_x is not buf and W_x.shape == (3, 8)
    assert not buf.any()


def test_transform_matches_the_exact_kernel_after_the_in_place_build():
    # the built constants hold W_x in place: the features still estimate the kernel,
    # within 5 standard errors of the analytic variance (mean over 8 seeds)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 4)) / 2
    exact = np.exp(X @ X.T)
    maps = [features.SDERF(n_features=512, random_state=s).fit(X) for s in range(8)]
    est = np.mean([fm.approx_kernel(X) for fm in maps], axis=0)
    se = np.sqrt(np.mean([fm.variance(X) for fm in maps], axis=0) / len(maps))
    assert np.all(np.abs(est - exact) <= 5 * se + 1e-12)
    assert np.max(np.abs(est - exact) / se) > 0.1  # not a degenerate comparison
