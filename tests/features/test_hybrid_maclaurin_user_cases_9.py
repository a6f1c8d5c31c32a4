"""New-user cases: the Maclaurin maps' variances at powers past float64 (inf with the
contract's warning, a finite log_relative_variance; a bare OverflowError before);
OptimizedMaclaurin names p_max when no degree up to it has a term; the bipolar hybrids
are exact at y = x whatever other rows share the call."""

import warnings

import numpy as np
import pytest

from kernelkit.features import (
    AngularHybridRF,
    NormalizedGaussianHybridRF,
    OptimizedMaclaurin,
    RandomMaclaurin,
)


@pytest.mark.parametrize(
    "kw", [{"degree": 10, "coef0": 1e20}, {"degree": 80, "coef0": 100.0}, {"degree": 1000}]
)
def test_random_maclaurin_variance_past_float64(kw):
    X = 0.5 * np.random.default_rng(8).standard_normal((6, 3))
    kw = {"gamma": 1e-3, **kw} if "coef0" not in kw else kw
    fm = RandomMaclaurin(64, kernel="polynomial", random_state=0, **kw).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the contract's overflow warning
        V = fm.variance(X)
    assert not np.any(np.isnan(V))
    # +inf where even the relative variance leaves float64 (degree 1000: 1 / mu(n) ~ 2^n)
    assert not np.any(np.isnan(fm.log_relative_variance(X)))


def test_optimized_maclaurin_variance_at_a_high_degree():
    X = 0.5 * np.random.default_rng(8).standard_normal((6, 3))
    fm = OptimizedMaclaurin(
        400, kernel="polynomial", degree=1000, gamma=1e-3, p_min=160, p_max=160, random_state=0
    ).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert not np.any(np.isnan(fm.variance(X)))
    assert np.all(np.isfinite(fm.log_relative_variance(X)))


def test_optimized_maclaurin_names_p_max_without_terms():
    X = np.random.default_rng(0).standard_normal((20, 3))
    fm = OptimizedMaclaurin(10000, kernel="polynomial", degree=3, coef0=0.0, p_max=2)
    with pytest.raises(ValueError, match=r"p_max=2: .*lowest is 3"):
        fm.fit(X)


@pytest.mark.parametrize("cls", [AngularHybridRF, NormalizedGaussianHybridRF])
def test_bipolar_hybrids_are_exact_at_equal_rows_in_a_batch(cls):
    rng = np.random.default_rng(5)
    U = rng.standard_normal((50, 6))
    U *= 1.5 / np.linalg.norm(U, axis=1, keepdims=True)
    fm = cls(16, 8, random_state=0).fit(U)
    np.testing.assert_array_equal(np.diag(fm.variance(U, U)), 0.0)
    assert np.all(np.isneginf(np.diag(fm.log_relative_variance(U, U))))
