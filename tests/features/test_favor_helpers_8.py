"""Defects a new-user hunt found in the FAVOR# helpers and maps: ``moments(X,
key_weights=w)`` dropped the weights, ``fit_derf`` took diagonal moments for the maps that
need full ones, ``HyperbolicRF.log_objective`` gave FAVOR+'s value, ``GERF(A=-1e308)``
gave NaN features, and ``moments`` took NaN, negative or wrong-length weights."""

import numpy as np
import pytest

from kernelkit.features import GERF, HyperbolicRF, PositiveRF
from kernelkit.features.favor import fit_derf, moments

rng = np.random.default_rng(0)
X = rng.standard_normal((30, 4)) * 0.5
Y = rng.standard_normal((20, 4)) * 0.5 + 0.1
w = rng.random(30)
w /= w.sum()


def test_key_weights_apply_when_y_is_omitted():
    m = moments(X, key_weights=w)
    np.testing.assert_allclose(m.mean_y, w @ X, rtol=1e-14)
    np.testing.assert_allclose(m.second_y, (X * w[:, None]).T @ X, rtol=1e-13)
    np.testing.assert_allclose(m.mean_x, X.mean(0), rtol=1e-14)  # queries unweighted
    ref = moments(X, X, key_weights=w)
    for f in ("mean_x", "second_x", "mean_y", "second_y"):
        np.testing.assert_allclose(getattr(m, f), getattr(ref, f), rtol=1e-13)


@pytest.mark.parametrize("name", ["aderf", "sderf"])
def test_full_moment_maps_refuse_diagonal_moments(name):
    with pytest.raises(ValueError, match="full=True"):
        fit_derf(name, moments(X, Y, full=False))


def test_diagonal_moments_still_fit_gerf_and_saderf():
    for name in ("gerf", "saderf"):
        fit_derf(name, moments(X, Y, full=False))


def test_hyperbolic_log_objective_is_its_own_second_moment():
    h = HyperbolicRF(16, random_state=0).fit(X, Y=Y)
    K = h.exact_kernel(X, Y)
    expected = np.mean(np.log(h.n_features * h.variance(X, Y) + K**2))
    assert h.log_objective(X, Y) == pytest.approx(expected, rel=1e-10)
    favor_plus = PositiveRF(16, random_state=0).fit(X, Y=Y).log_objective(X, Y)
    assert h.log_objective(X, Y) < favor_plus  # antithetic pairs: a smaller second moment


@pytest.mark.parametrize("A", [-1e308, -np.finfo(np.float64).max])
def test_gerf_a_beyond_the_float_range_is_named(A):
    with pytest.raises(ValueError, match="A"):
        GERF(8, A=A, random_state=0).fit(X)


def test_gerf_a_at_the_lower_limit_gives_no_nan():
    # the variance may exceed float64 there (+inf), but nothing is NaN
    g = GERF(8, A=-1e300, random_state=0).fit(X)
    for out in (g.transform(X), g.approx_kernel(X), g.variance(X)):
        assert not np.any(np.isnan(out))


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        (np.r_[np.nan, np.full(19, 1 / 19)], "key_weights"),
        (np.r_[-0.5, np.full(19, 1.5 / 19)], "key_weights"),
        (np.full(7, 1 / 7), "key_weights"),
    ],
    ids=["nan", "negative", "length"],
)
def test_moment_weights_are_checked_by_name(weights, match):
    with pytest.raises(ValueError, match=match):
        moments(X, Y, key_weights=weights)


def test_query_weights_are_checked_by_name():
    with pytest.raises(ValueError, match="query_weights"):
        moments(X, Y, query_weights=np.full(30, -1 / 30))
