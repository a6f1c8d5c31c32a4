"""Positivity, degenerate data and large norms (FAVOR# Sec. 4; the design's
"overflow-prone norms get a correct finite result")."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from favor_helpers import (
    ALL_MAPS,
    DERF_MAPS,
    FITTED_MAPS,
    POSITIVE_MAPS,
    assert_unbiased,
    exact_kernel,
    make_xy,
)

from kernelkit.features import SADERF, SDERF, TrigRF


def _name(cls):
    return cls.__name__


# ------------------------------------------------------------------ positivity
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("cls", POSITIVE_MAPS, ids=_name)
def test_positive_maps_have_positive_features(cls, kernel, backend):
    X, Y = make_xy(50, n=30, m=30, scale=1.5)
    fm = cls(n_features=500, kernel=kernel, random_state=0).fit(
        backend.asarray(X), Y=backend.asarray(Y)
    )
    assert fm.positive
    P = backend.to_numpy(fm.transform(backend.asarray(X)))
    S = backend.to_numpy(fm.transform_y(backend.asarray(Y)))
    assert P.shape == (30, fm.output_dim) and S.shape == (30, fm.output_dim)
    assert np.all(P > 0) and np.all(S > 0)
    assert np.all(fm.approx_kernel(X, Y) > 0)
    base, log_scale = fm.transform_scaled(X)
    assert np.all(base > 0) and np.all(base <= 1.0) and np.all(np.isfinite(log_scale))
    np.testing.assert_allclose(base.max(axis=1), 1.0)  # documented row normalisation


def test_trig_features_take_both_signs():
    X, _ = make_xy(51)
    fm = TrigRF(n_features=500, random_state=0).fit(X)
    assert not fm.positive
    P = fm.transform(X)
    assert (P < 0).any() and (P > 0).any()


@pytest.mark.parametrize("cls", DERF_MAPS, ids=_name)
def test_log_transform_is_log_of_features_and_finite_at_huge_norms(cls):
    X, Y = make_xy(52, n=20, m=20)
    fm = cls(n_features=300, random_state=0).fit(X, Y=Y)
    np.testing.assert_allclose(fm.log_transform(X), np.log(fm.transform(X)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        fm.log_transform_y(Y), np.log(fm.transform_y(Y)), rtol=1e-10, atol=1e-12
    )
    huge = 1e3 * X / np.linalg.norm(X, axis=1, keepdims=True)  # |x| = 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        raw = fm.transform(huge)
    assert not np.all(np.isfinite(raw) & (raw > 0))  # the raw features do break down ...
    L = fm.log_transform(huge)  # ... their logarithms do not
    assert np.all(np.isfinite(L)) and L.shape == (20, 300)
    assert np.all(np.isfinite(fm.log_transform_y(huge)))
    base, log_scale = fm.transform_scaled(huge)
    assert np.all(np.isfinite(base)) and np.all(np.isfinite(log_scale))


# ------------------------------------------------------------------ degenerate data
def _degenerate_cases():
    rng = np.random.default_rng(53)
    u = rng.standard_normal(6)
    u /= np.linalg.norm(u)
    v = rng.standard_normal(6)
    v /= np.linalg.norm(v)
    X, Y = make_xy(54)
    Xz, Yz = X.copy(), Y.copy()
    Xz[:, [1, 4]] = 0.0
    Yz[:, [1, 4]] = 0.0
    Xz[:, 2] = 0.0  # zero in X only
    return {
        "fewer_points_than_dims": (
            0.4 * rng.standard_normal((3, 10)),
            0.4 * rng.standard_normal((3, 10)) + 0.1,
        ),
        "zero_columns": (Xz, Yz),
        "all_zero_X": (np.zeros_like(X), Y),
        "rank_one": (np.outer(rng.uniform(-1, 1, 30), u), np.outer(rng.uniform(-1, 1, 25), v)),
        "rank_one_same_direction": (
            np.outer(rng.uniform(-1, 1, 30), u),
            np.outer(rng.uniform(-1, 1, 25), u),
        ),
        "single_point": (X[:1], Y[:1]),
    }


DEGENERATE = _degenerate_cases()


@pytest.mark.parametrize("case", sorted(DEGENERATE))
@pytest.mark.parametrize("cls", FITTED_MAPS, ids=_name)
def test_degenerate_data_fits_are_finite_and_unbiased(cls, case):
    X, Y = DEGENERATE[case]
    d = X.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no silent divide-by-zero in the fit
        fm = cls(n_features=100_000, random_state=1).fit(X, Y=Y)
    assert np.all(np.isfinite(fm.A_)) and np.all(8 * fm.A_ < 1) and np.all(fm.A_ <= 0)
    for B in (fm.B_x_, fm.B_y_):
        assert B is None or np.all(np.isfinite(B))
    if fm.B_x_ is not None:
        # any B~2 = B~1^{-T} keeps the estimator unbiased (FAVOR# Thm 4.2)
        np.testing.assert_allclose(fm.B_x_.T @ fm.B_y_, np.eye(d), atol=1e-9)
    assert np.isfinite(fm.log_objective(X, Y))
    Xe, Ye = X[:3], Y[:3]
    K_hat = fm.approx_kernel(Xe, Ye)
    assert np.all(np.isfinite(K_hat))
    assert_unbiased(K_hat, exact_kernel(Xe, Ye), fm.variance(Xe, Ye), label=f"{case}")


# ------------------------------------------------------------------ large norms
def _direction(d=6):
    return np.ones(d) / np.sqrt(d)


@pytest.mark.parametrize("norm", [30.0, 40.0])
@pytest.mark.parametrize("cls", [SADERF, SDERF], ids=_name)
def test_softmax_large_query_norm_accurate(cls, norm):
    """|x| ~ 30-40, |y| ~ 0.2: K = e^{x.y} ~ e^2 is representable; the fitted maps are
    accurate (small relative variance) although the raw features over/underflow."""
    rng = np.random.default_rng(55)
    X = norm * _direction() + 0.3 * rng.standard_normal((20, 6))
    Y = 0.05 * _direction() + 0.1 * rng.standard_normal((20, 6))
    fm = cls(n_features=200_000, random_state=2).fit(X, Y=Y)
    Xe, Ye = X[:3], Y[:3]
    K = exact_kernel(Xe, Ye)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # approx_kernel itself must not overflow
        K_hat = fm.approx_kernel(Xe, Ye)
        V = fm.variance(Xe, Ye)
    assert_unbiased(K_hat, K, V, power=0.05, label=f"{cls.__name__} |x|={norm}")


def test_softmax_raw_features_overflow_where_kernel_is_representable():
    """The regime above is real: raw SDERF features at |x| = 40 overflow to inf."""
    rng = np.random.default_rng(55)
    X = 40.0 * _direction() + 0.3 * rng.standard_normal((20, 6))
    Y = 0.05 * _direction() + 0.1 * rng.standard_normal((20, 6))
    fm = SDERF(n_features=20_000, random_state=2).fit(X, Y=Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.isinf(fm.transform(X[:3])).any()
    assert np.all(np.isfinite(fm.log_transform(X[:3])))
    assert np.all(np.isfinite(fm.approx_kernel(X[:3], Y[:3])))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_large_norm_float32_and_float64(dtype, backend):
    """Same regime in float32: exp(log-scale) overflows at 88.7 there, not at 709."""
    rng = np.random.default_rng(56)
    X = 30.0 * _direction() + 0.3 * rng.standard_normal((20, 6))
    Y = 0.05 * _direction() + 0.1 * rng.standard_normal((20, 6))
    fm = SDERF(n_features=200_000, random_state=3).fit(X, Y=Y)
    Xe, Ye = backend.asarray(X[:3], dtype), backend.asarray(Y[:3], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        K_hat = backend.to_numpy(fm.approx_kernel(Xe, Ye))
    assert backend.dtype_name(fm.approx_kernel(Xe, Ye)) == dtype
    K = exact_kernel(X[:3], Y[:3])
    V = fm.variance(X[:3], Y[:3])
    # float32 rounding of the inputs moves x.y by ~|x||y| 6e-8: negligible next to the SE
    assert_unbiased(K_hat, K, V, power=0.05, label=dtype)


@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_gaussian_far_apart_points_underflow_to_zero(cls):
    """|x - y| ~ 60: the Gaussian kernel underflows to 0; estimates stay finite and ~0."""
    rng = np.random.default_rng(57)
    X = 30 * _direction() + 0.3 * rng.standard_normal((5, 6))
    Y = -30 * _direction() + 0.3 * rng.standard_normal((5, 6))
    fm = cls(n_features=2000, kernel="gaussian", random_state=1).fit(X, Y=Y)
    assert np.all(exact_kernel(X, Y, "gaussian") == 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        K_hat = fm.approx_kernel(X, Y)
        V = fm.variance(X, Y)
    assert np.all(np.isfinite(K_hat)) and np.all(np.isfinite(V)) and np.all(V >= 0)
    if fm.positive:
        assert np.all(K_hat >= 0) and np.all(K_hat < 1e-300)
    else:  # random Fourier features: |K_hat - 0| within a few SE (Var ~ 1/M)
        assert np.all(np.abs(K_hat) < 6 * np.sqrt(V))


def test_gaussian_clustered_far_from_origin_sderf_accurate():
    """x, y ~ 30 e + noise: SDERF adapts its rotation and stays accurate for
    K = exp(-|x - y|^2 / 2) although every raw feature underflows for PositiveRF."""
    rng = np.random.default_rng(58)
    X = 30 * _direction() + 0.3 * rng.standard_normal((20, 6))
    Y = 30 * _direction() + 0.3 * rng.standard_normal((20, 6))
    fm = SDERF(n_features=200_000, kernel="gaussian", random_state=4).fit(X, Y=Y)
    K = exact_kernel(X[:3], Y[:3], "gaussian")
    assert_unbiased(fm.approx_kernel(X[:3], Y[:3]), K, fm.variance(X[:3], Y[:3]), power=0.05)
