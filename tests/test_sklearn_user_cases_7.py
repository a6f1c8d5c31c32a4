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
from sklearn.base import clone
from sklearn.pipeline import make_pipeline, make_union
from sklearn.preprocessing import StandardScaler

from kernelkit.estimators import (
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
    RandomFeatures,
)
from kernelkit.features import SDERF, OptimizedMaclaurin, RandomMaclaurin
from kernelkit.features.favor import moments

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


# ------------------------------------------------------------ weights and a Pipeline map
OFFSET = np.array([3.0, -1.0, 0.5])  # the offset the pipelines' scalers remove
EPS = np.finfo(np.float64).eps


def _weighted_data(n=50, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * [1.0, 0.5, 2.0] + OFFSET
    y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.standard_normal(n)
    k = rng.integers(0, 4, n)  # integer weights, zeros included
    k[0] = 3
    return X, y, k


def _kappa(fm, X) -> float:
    """The condition of the fit of the maps in ``fm`` (a pipeline or a union of them) on
    the rows they see (``X`` through the steps before them), the largest: 1 for GERF,
    ``|N| / min gap`` of the eigenvalues of SDERF's ``N``, as in
    ``tests/estimators/test_weighted_fit_cases.py``."""
    if hasattr(fm, "transformer_list"):
        return max(_kappa(part, X) for _, part in fm.transformer_list)
    if hasattr(fm, "steps"):
        return _kappa(fm.steps[-1][1], fm[:-1].transform(X))
    if not isinstance(fm, SDERF):
        return 1.0
    Z = X
    mom = moments(Z, Z)
    cross = np.outer(mom.mean_x, mom.mean_y)
    ev = np.linalg.eigvalsh(mom.second_x + mom.second_y + cross + cross.T)
    gaps = np.diff(ev)
    gaps = gaps[gaps > 1e-5 * ev.max()]
    return float(ev.max() / gaps.min()) if gaps.size else 1.0


def _tol(ref, Xr, alpha) -> float:
    """``100 cond(A) eps (1 + n d kappa)``, ``A = Phi^T Phi + alpha I`` of the reference."""
    Phi = ref.feature_map_.transform(Xr)
    cond = np.linalg.cond(Phi.T @ Phi + alpha * np.eye(Phi.shape[1]))
    n, d = Xr.shape
    return 100 * cond * EPS * (1 + n * d * _kappa(ref.feature_map_, Xr))


def _pipeline_maps():
    # the user guide's advice: centre (or standardise) in the estimator's feature_map
    # pipeline before a data-dependent map
    return {
        "scaler-sderf": make_pipeline(StandardScaler(), SDERF(n_features=40)),
        "centre-random_features": make_pipeline(
            StandardScaler(with_std=False), RandomFeatures(method="gerf", n_components=40)
        ),
    }


@pytest.mark.parametrize("name", list(_pipeline_maps()))
@pytest.mark.parametrize(
    "est",
    [RandomFeatureRidge(alpha=0.5), RandomFeatureGPRegressor(noise=0.2)],
    ids=["ridge", "gp"],
)
def test_integer_weights_with_a_pipeline_feature_map_are_repeated_rows(est, name):
    """estimators.md: an integer weight is the row repeated, for every feature map, and a
    ``feature_map`` may be a ``Pipeline`` (``StandardScaler`` then a map). With a
    pipeline the weights reached neither the scaler nor the FAVOR# map inside it (both
    fitted on the rows unweighted): predictions 0.1 to 0.5 away from the fit of the
    repeated rows. Now each step that takes ``sample_weight`` gets it, and a kernelkit map
    inside is fitted on the weighted moments of the rows the steps before it return.

    Tolerance: as in ``tests/estimators/test_weighted_fit_cases.py``, the two fits differ
    by the order of the sums (the scaler's mean and variance, the map's moments: relative
    ``n eps``), amplified by the map's eigenproblem (``d`` times the condition ``kappa``
    of SDERF's fit) and by the solve's ``cond(A)``: ``100 cond(A) eps (1 + n d kappa)``.
    The scalers' means are weighted sums of 50 numbers of order 3: ``1e-12`` bounds
    their ``n eps`` rounding."""
    X, y, k = _weighted_data()
    est = clone(est).set_params(feature_map=_pipeline_maps()[name], random_state=0)
    Xr, yr = np.repeat(X, k, axis=0), np.repeat(y, k)
    ref = clone(est).fit(Xr, yr)
    got = clone(est).fit(X, y, sample_weight=k.astype(float))
    tol = _tol(ref, Xr, 0.5 if isinstance(est, RandomFeatureRidge) else 0.2)
    scaler = ref.feature_map_.steps[0][1]
    np.testing.assert_allclose(got.feature_map_.steps[0][1].mean_, scaler.mean_, atol=1e-12)
    Xq = np.random.default_rng(9).standard_normal((11, 3)) + OFFSET
    np.testing.assert_allclose(got.predict(Xq), ref.predict(Xq), rtol=0, atol=tol)


def test_integer_weights_with_a_feature_union_map_are_repeated_rows():
    """``_output_maps`` takes a ``FeatureUnion`` as ``feature_map`` (each part a map or a
    pipeline ending in one): with weights its parts were fitted on the rows unweighted,
    predictions 9 away from the fit of the repeated rows. Each part is now fitted as a
    map or a pipeline is. Tolerance as above, with the largest ``kappa`` of the parts."""
    X, y, k = _weighted_data(seed=2)
    union = make_union(
        make_pipeline(StandardScaler(), SDERF(n_features=24)),
        make_pipeline(StandardScaler(with_std=False), SDERF(n_features=24, lengthscale=2.0)),
    )
    est = RandomFeatureRidge(union, alpha=0.5, random_state=0)
    Xr, yr = np.repeat(X, k, axis=0), np.repeat(y, k)
    ref = clone(est).fit(Xr, yr)
    got = clone(est).fit(X, y, sample_weight=k.astype(float))
    for (_, part), (_, ref_part) in zip(
        got.feature_map_.transformer_list, ref.feature_map_.transformer_list, strict=True
    ):  # weighted sums of 50 numbers of order 3: 1e-12 bounds their rounding
        np.testing.assert_allclose(part.steps[0][1].mean_, ref_part.steps[0][1].mean_, atol=1e-12)
    Xq = np.random.default_rng(9).standard_normal((11, 3)) + OFFSET
    np.testing.assert_allclose(got.predict(Xq), ref.predict(Xq), rtol=0, atol=_tol(ref, Xr, 0.5))


def test_integer_weights_with_a_pipeline_feature_map_gp_classifier():
    """The same for ``RandomFeatureGPClassifier`` (its ``feature_map`` is fitted by the
    same code): the probabilities of the weighted fit are those of the repeated rows, to
    ``100 cond(B_c) eps (1 + n d kappa)`` with ``cond(B_c) < 1e5`` (``alpha = 0.01``,
    weights <= 3, as in ``tests/estimators/test_weighted_fit_cases.py``)."""
    X, y, k = _weighted_data(seed=1)
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    fm = _pipeline_maps()["scaler-sderf"]
    est = RandomFeatureGPClassifier(fm, alpha=0.01, random_state=0)
    Xr = np.repeat(X, k, axis=0)
    ref = clone(est).fit(Xr, np.repeat(labels, k))
    got = clone(est).fit(X, labels, sample_weight=k)
    n, d = Xr.shape
    tol = 100 * 1e5 * EPS * (1 + n * d * _kappa(ref.feature_map_, Xr))
    Xq = np.random.default_rng(9).standard_normal((11, 3)) + OFFSET
    np.testing.assert_allclose(got.predict_proba(Xq), ref.predict_proba(Xq), rtol=0, atol=tol)


# ----------------------------------------------------- the Gaussian kernel of large rows
def _gaussian_maps():
    from kernelkit.estimators._methods import METHODS

    out = {}
    for name, m in METHODS.items():
        if "gaussian" in m.kernels:
            kw = {} if m.style == "rff" else {"kernel": "gaussian"}
            out[name] = (m.cls, kw)
    return out


@pytest.mark.parametrize("name", list(_gaussian_maps()))
def test_exact_kernel_of_rows_whose_squared_norm_overflows(name):
    """Rows of norm ~2^530 (1e160) over the lengthscale: the Gaussian kernel is 1 for
    equal rows and 0 for the others, and ``kernelkit.kernels.gaussian_kernel`` says so;
    ``exact_kernel`` (and ``expected_kernel``) of the maps formed ``x^T y - |x|^2 / 2 -
    |y|^2 / 2`` as ``inf - inf``: NaN, without a warning; the Maclaurin maps rescaled the
    rows, but the rounding of ``|x|^2 + |y|^2 - 2 x^T y`` for equal rows, times the
    scale, gave 0 for 1 (their ``expected_kernel`` is the truncated series, 0 here, and
    is not compared). The entries are
    small integers times a power of two, so the reference is exact (0 or 1), and so must
    the maps' values be."""
    from kernelkit.features import FeatureMap
    from kernelkit.kernels import gaussian_kernel

    cls, kw = _gaussian_maps()[name]
    rng = np.random.default_rng(8)
    base = rng.integers(-3, 4, (5, 3)).astype(float)
    base[1] = base[0]  # a duplicate: kernel 1 off the diagonal
    fm = cls(16, random_state=0, **kw).fit(base)
    for X, l in ((base * math.ldexp(1.0, 530), 1.0), (base, math.ldexp(1.0, -530))):
        fm.set_params(lengthscale=l).fit(base * l)  # data of the lengthscale's size
        ref = gaussian_kernel(X, X, lengthscale=l)
        np.testing.assert_array_equal(ref, (np.abs(base[:, None] - base[None]).sum(-1) == 0))
        np.testing.assert_array_equal(fm.exact_kernel(X), ref)
        if type(fm).expected_kernel is FeatureMap.expected_kernel:  # the exact kernel
            np.testing.assert_array_equal(fm.expected_kernel(X), ref)
