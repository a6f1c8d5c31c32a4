"""A demanding scikit-learn user's cases: inputs of every scale, checked by invariances.

Every kernel of kernelkit divides its inputs by ``lengthscale`` (or multiplies them by
``sqrt(gamma)``), so scaling the data and the lengthscale together by one power of two
changes no kernel value, no variance and, with the same seed, no estimate: the scaled
computation is the unscaled one on exactly scaled numbers. The Maclaurin maps broke that
invariance where their coefficients ``a_n = 1 / (n! l^(2n))`` (or ``gamma^n``) left
float64 for data measured in large units, as a user with raw inputs near 1e100 meets it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelkit.estimators import RandomFeatures
from kernelkit.features import OptimizedMaclaurin, RandomMaclaurin

# 2^300 ~ 2e90: a_2 = 1 / (2 l^4) = 2^-1201 underflows to 0 in float64 (and r^(2n) of
# inputs of this size overflows for n >= 4), while 1 / l^2 = 2^-600 and the scaled
# inputs x / l are ordinary numbers
SCALE = math.ldexp(1.0, 300)


def _points(n, d, seed):
    return 0.5 * np.random.default_rng(seed).standard_normal((n, d))


def _maclaurin_params(kernel, scale):
    if kernel == "polynomial":
        return {"kernel": "polynomial", "degree": 3, "gamma": scale**-2}
    return {"kernel": kernel, "lengthscale": scale}


# Tolerance of the scaled-against-unscaled comparisons: with a power-of-two scale every
# product x sqrt(s) is the unscaled input exactly, so the two computations differ at
# most by the branches that form row scales in log space (exp and log of values of order
# 1-10, a few ulps each, times at most ten degrees): below 1e-13 relative; 1e-11 leaves
# margin and is still 1e9 times below the errors of the defect (tens of percent).
RTOL = 1e-11


@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "polynomial"])
def test_random_maclaurin_is_invariant_under_scaling_data_and_lengthscale(kernel):
    """``RandomMaclaurin`` drew its degrees from a measure on the degrees with
    ``a_n > 0``: with ``lengthscale = 2^300`` every ``a_n`` of degree 2 and up underflowed
    to 0, so every feature went to degree 1 while ``expected_kernel`` and ``variance`` kept
    the whole series: the estimate was off by hundreds of its standard deviations, without
    a warning. Scaled data and lengthscale must give the unscaled map's values."""
    X, Y = _points(7, 3, 1), _points(5, 3, 2)
    ref = RandomMaclaurin(64, random_state=0, **_maclaurin_params(kernel, 1.0)).fit(X)
    fm = RandomMaclaurin(64, random_state=0, **_maclaurin_params(kernel, SCALE))
    fm.fit(X * SCALE)
    np.testing.assert_array_equal(fm.degree_measure_, ref.degree_measure_)
    np.testing.assert_array_equal(fm.n_features_per_degree_, ref.n_features_per_degree_)
    Xs, Ys = X * SCALE, Y * SCALE
    for method in ("approx_kernel", "expected_kernel", "variance"):
        np.testing.assert_allclose(
            getattr(fm, method)(Xs, Ys), getattr(ref, method)(X, Y), rtol=RTOL, atol=0
        )


@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "polynomial"])
def test_optimized_maclaurin_fits_data_in_large_units(kernel):
    """``OptimizedMaclaurin.fit`` formed its pair sums with ``a_n r^(2n)`` (``r`` the
    largest row norm): for data and lengthscale near 2^300 that is 0 * inf, and the fit
    raised "overflow ... scale the inputs down" on a problem that is the unscaled one.
    It now fits the allocation the unscaled data gets, and the same estimates."""
    X, Y = _points(30, 3, 3), _points(5, 3, 4)
    ref = OptimizedMaclaurin(32, random_state=0, **_maclaurin_params(kernel, 1.0)).fit(X)
    fm = OptimizedMaclaurin(32, random_state=0, **_maclaurin_params(kernel, SCALE))
    fm.fit(X * SCALE)
    np.testing.assert_array_equal(fm.n_features_per_degree_, ref.n_features_per_degree_)
    assert fm.degree_ == ref.degree_
    Xs, Ys = X * SCALE, Y * SCALE
    for method in ("approx_kernel", "expected_kernel", "variance"):
        np.testing.assert_allclose(
            getattr(fm, method)(Xs, Ys), getattr(ref, method)(X, Y), rtol=RTOL, atol=0
        )


@pytest.mark.parametrize("method", ["random_maclaurin", "optimized_maclaurin"])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "polynomial"])
def test_random_features_maclaurin_methods_on_data_in_large_units(method, kernel):
    """The same through ``RandomFeatures`` (``lengthscale`` for every kernel, ``gamma = 1 /
    l^2`` for the polynomial one), as in a ``Pipeline`` on raw data: the transform of the
    scaled data is that of the unscaled data."""
    X = _points(40, 4, 5)
    kw = {"method": method, "kernel": kernel, "n_components": 33, "random_state": 0}
    ref = RandomFeatures(lengthscale=1.0, **kw).fit(X)
    rf = RandomFeatures(lengthscale=SCALE, **kw).fit(X * SCALE)
    np.testing.assert_allclose(rf.transform(X * SCALE), ref.transform(X), rtol=RTOL, atol=0)


@pytest.mark.parametrize("cls", [RandomMaclaurin, OptimizedMaclaurin])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("power", [-540, -535, 540])
def test_maclaurin_maps_at_lengthscales_whose_square_leaves_float64(cls, kernel, power):
    """``lengthscale = 2^power`` with the data scaled by it: the maps formed ``s = 1 /
    l^2`` as Python floats, and ``l^2 = 2^(2 power)`` underflows to 0 (``power = -540``:
    ``ZeroDivisionError``), is subnormal (-535: ``s = inf``, NaN estimates without a
    warning) or overflows (540: ``OverflowError``), while ``1 / l`` and the scaled inputs
    are ordinary numbers, and the projection maps (which divide by ``l``) give the
    unscaled values. The Maclaurin maps now scale their inputs by ``1 / l`` once, as
    those do."""
    scale = math.ldexp(1.0, power)
    X, Y = _points(12, 3, 6), _points(4, 3, 7)
    ref = cls(16, kernel=kernel, random_state=0).fit(X)
    fm = cls(16, kernel=kernel, lengthscale=scale, random_state=0).fit(X * scale)
    Xs, Ys = X * scale, Y * scale
    np.testing.assert_allclose(fm.transform(Xs), ref.transform(X), rtol=RTOL, atol=0)
    for method in ("approx_kernel", "exact_kernel", "expected_kernel", "variance"):
        np.testing.assert_allclose(
            getattr(fm, method)(Xs, Ys), getattr(ref, method)(X, Y), rtol=RTOL, atol=0
        )
