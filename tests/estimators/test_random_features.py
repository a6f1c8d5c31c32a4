"""RandomFeatures: scikit-learn contract, kernel approximation, dtypes, backends, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernelkit.estimators import RandomFeatures
from kernelkit.features import GERF, SDERF, HyperbolicRF, PositiveRF, TrigRF
from kernelkit.kernels import gaussian_kernel, softmax_kernel

SYMMETRIC = ["trig", "positive", "hyperbolic", "gerf", "sderf"]


@parametrize_with_checks(
    [
        RandomFeatures(),
        RandomFeatures(method="trig", n_components=32),
        RandomFeatures(method="positive", sampler="orthogonal", n_components=40),
        RandomFeatures(method="hyperbolic", kernel="softmax", n_components=16),
        RandomFeatures(method="GERF", lengthscale=2.0, n_components=24),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# ---------------------------------------------------------------- kernel approximation
@pytest.mark.slow
@pytest.mark.parametrize("method", SYMMETRIC)
def test_gram_matrix_error_matches_variance_and_decreases(method):
    """E ||Z Z^T - K||_F^2 = sum_ij Var K_hat_ij for i.i.d. features (unbiasedness).

    Per seed, r = ||Z Z^T - K||_F^2 / sum Var; its mean over seeds must be 1 within
    4 standard errors, and the relative Frobenius error must fall ~ M^{-1/2} (at least
    2x from M = 64 to M = 1024; expected 4x). Small norms keep the tails light.
    """
    X = np.random.default_rng(0).normal(size=(40, 5)) * 0.25
    K = gaussian_kernel(X, X)
    rel = {}
    for M in (64, 1024):
        ratios, errs = [], []
        for seed in range(40):
            rf = RandomFeatures(method=method, n_components=M, random_state=seed).fit(X)
            Z = rf.transform(X)
            err2 = float(((Z @ Z.T - K) ** 2).sum())
            ratios.append(err2 / float(rf.feature_map_.variance(X).sum()))
            errs.append(np.sqrt(err2) / np.linalg.norm(K))
        ratios = np.asarray(ratios)
        se = ratios.std(ddof=1) / np.sqrt(len(ratios))
        assert abs(ratios.mean() - 1.0) < 4.0 * se + 0.05, (M, ratios.mean(), se)
        rel[M] = float(np.mean(errs))
    assert rel[1024] < 0.5 * rel[64], rel
    assert rel[1024] < 0.06


@pytest.mark.parametrize("method", SYMMETRIC)
def test_orthogonal_features_approximate_the_kernel(method):
    X = np.random.default_rng(1).normal(size=(60, 4)) * 0.4
    K = gaussian_kernel(X, X, lengthscale=1.5)
    errs = []
    for seed in range(5):
        Z = RandomFeatures(
            method=method,
            n_components=2048,
            lengthscale=1.5,
            sampler="orthogonal",
            random_state=seed,
        ).fit_transform(X)
        errs.append(np.linalg.norm(Z @ Z.T - K) / np.linalg.norm(K))
    assert np.mean(errs) < 0.05


def test_softmax_kernel():
    X = np.random.default_rng(2).normal(size=(30, 3)) * 0.3
    Z = RandomFeatures(
        method="sderf", kernel="softmax", n_components=4096, random_state=0
    ).fit_transform(X)
    K = softmax_kernel(X, X)
    assert np.linalg.norm(Z @ Z.T - K) / np.linalg.norm(K) < 0.05


# ---------------------------------------------------------------- mapping to feature maps
@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("trig", TrigRF),
        ("Positive", PositiveRF),
        ("favor+", PositiveRF),
        ("HYPERBOLIC", HyperbolicRF),
        ("gerf", GERF),
        ("favor++", GERF),
        ("SDERF", SDERF),
        ("favor#", SDERF),
    ],
)
def test_method_names_and_same_features_as_map(name, cls):
    X = np.random.default_rng(3).normal(size=(25, 6))
    rf = RandomFeatures(method=name, n_components=20, lengthscale=2.0, random_state=7).fit(X)
    assert type(rf.feature_map_) is cls
    M = 10 if cls is HyperbolicRF else 20  # n_components is the number of output columns
    fm = cls(n_features=M, kernel="gaussian", lengthscale=2.0, random_state=7).fit(X)
    np.testing.assert_allclose(rf.transform(X), fm.transform(X), rtol=1e-12, atol=0)
    assert rf.transform(X).shape == (25, 20)
    names = rf.get_feature_names_out()
    assert len(names) == 20 and names[0] == "randomfeatures0"


@pytest.mark.parametrize("method", ["saderf", "ADERF"])
def test_asymmetric_methods_map_queries_and_keys(method):
    """Asymmetric maps: transform is the query side, transform_y the key side; the pair
    fitted on (X, Y) estimates K(X, Y) without bias (mean over seeds within 4 s.e.)."""
    rng = np.random.default_rng(5)
    X, Y = rng.normal(size=(20, 3)) * 0.4, rng.normal(size=(15, 3)) * 0.4 + 0.2
    K = gaussian_kernel(X, Y)
    ests, variances = [], []
    for seed in range(30):
        rf = RandomFeatures(method=method, n_components=64, random_state=seed).fit(X, Y=Y)
        assert not rf.feature_map_.symmetric
        ests.append(rf.transform(X) @ rf.transform_y(Y).T)
        variances.append(rf.feature_map_.variance(X, Y))
    err = np.mean(ests, axis=0) - K
    se = np.sqrt(np.mean(variances, axis=0) / len(ests))
    assert np.all(np.abs(err) < 4.5 * se + 1e-12)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"method": "nope"}, "Unknown method"),
        ({"method": 3}, "method"),
        ({"kernel": "laplace"}, "kernel"),
        ({"n_components": 0}, "n_components"),
        ({"lengthscale": -1.0}, "lengthscale"),
        ({"lengthscale": float("nan")}, "lengthscale"),
        ({"sampler": "yes"}, "sampler"),
    ],
)
def test_bad_parameters(params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        RandomFeatures(**params).fit(np.ones((4, 2)))


def test_data_dependent_parameters_fitted_on_fit_data_only():
    rng = np.random.default_rng(4)
    X, X2 = rng.normal(size=(50, 3)), rng.normal(size=(20, 3)) * 3.0
    rf = RandomFeatures(n_components=16, random_state=0).fit(X)
    A = rf.feature_map_.A_.copy()
    full = rf.transform(np.vstack([X, X2]))
    np.testing.assert_allclose(full[50:], rf.transform(X2))  # row-wise map
    np.testing.assert_array_equal(rf.feature_map_.A_, A)


# ---------------------------------------------------------------- dtypes, input types
@pytest.mark.parametrize("method", SYMMETRIC)
def test_float32_preserved(method):
    X = np.random.default_rng(5).normal(size=(20, 4))
    Z32 = RandomFeatures(method=method, n_components=32, random_state=0).fit_transform(
        X.astype(np.float32)
    )
    Z64 = RandomFeatures(method=method, n_components=32, random_state=0).fit_transform(X)
    assert Z32.dtype == np.float32 and Z64.dtype == np.float64
    np.testing.assert_allclose(Z32, Z64, rtol=2e-4, atol=2e-5)


def test_integer_input_promoted_to_float64():
    X = np.arange(12).reshape(6, 2)
    assert RandomFeatures(n_components=8, random_state=0).fit_transform(X).dtype == np.float64


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_sparse_input_rejected(fmt):
    X = sp.random(10, 4, density=0.5, format=fmt, random_state=0)
    with pytest.raises(TypeError, match=r"[Ss]parse"):
        RandomFeatures().fit(X)
    rf = RandomFeatures(n_components=8, random_state=0).fit(X.toarray())
    with pytest.raises(TypeError, match=r"[Ss]parse"):
        rf.transform(X)


def test_pandas_feature_names():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(np.random.default_rng(0).normal(size=(10, 3)), columns=["a", "b", "c"])
    rf = RandomFeatures(n_components=8, random_state=0).fit(df)
    np.testing.assert_array_equal(rf.feature_names_in_, ["a", "b", "c"])
    out = rf.set_output(transform="pandas").transform(df)
    assert list(out.columns) == [f"randomfeatures{i}" for i in range(8)]


def test_in_a_pipeline_with_a_linear_model():
    from sklearn.datasets import make_moons
    from sklearn.linear_model import RidgeClassifier

    X, y = make_moons(400, noise=0.1, random_state=0)
    pipe = make_pipeline(
        StandardScaler(),
        RandomFeatures(n_components=256, lengthscale=0.5, random_state=0),
        RidgeClassifier(),
    )
    assert pipe.fit(X, y).score(X, y) > 0.95


# ---------------------------------------------------------------- large norms
@pytest.mark.parametrize("method", SYMMETRIC)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gaussian_kernel_finite_for_huge_norms(method, dtype):
    X = (np.random.default_rng(6).normal(size=(30, 8)) * 1e3).astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        Z = RandomFeatures(method=method, n_components=64, random_state=0).fit_transform(X)
    assert np.isfinite(Z).all() and Z.dtype == dtype


@pytest.mark.parametrize("method", ["positive", "hyperbolic"])
def test_softmax_kernel_positive_features_stay_finite(method):
    # exp(w.x - |x|^2/2) <= exp(|w|^2/2): bounded (underflow, not overflow, at large norms)
    X = np.random.default_rng(7).normal(size=(10, 4)) * 100.0
    Z = RandomFeatures(
        method=method, kernel="softmax", n_components=16, random_state=0
    ).fit_transform(X)
    assert np.isfinite(Z).all()


@pytest.mark.parametrize("method", ["trig", "gerf", "sderf"])
def test_softmax_kernel_overflow_is_a_clear_error(method):
    # trig features carry exp(|x|^2 / 2) (overflow at |x| ~ 38 in float64); the fitted
    # GERF / SDERF reach ~exp(|x|^2 / 2) near w ~ x as well
    X = np.random.default_rng(7).normal(size=(10, 4)) * 100.0
    rf = RandomFeatures(method=method, kernel="softmax", n_components=16, random_state=0)
    with pytest.raises(ValueError, match=r"non-finite features.*lengthscale"):
        rf.fit_transform(X)
    # the stabilised representation stays usable
    base, log_scale = rf.feature_map_.transform_scaled(X)
    assert np.isfinite(base).all() and np.isfinite(log_scale).all()


def test_nan_and_wrong_shape_errors():
    rf = RandomFeatures(n_components=8, random_state=0).fit(np.ones((5, 3)))
    with pytest.raises(ValueError, match="NaN"):
        rf.transform(np.full((2, 3), np.nan))
    with pytest.raises(ValueError, match="features"):
        rf.transform(np.ones((2, 4)))


# ---------------------------------------------------------------- torch
@pytest.mark.torch
@pytest.mark.parametrize("method", SYMMETRIC)
def test_torch_tensors(torch, method):
    X = np.random.default_rng(8).normal(size=(12, 5))
    rf = RandomFeatures(method=method, n_components=16, random_state=0).fit(X)
    for dtype in (torch.float32, torch.float64):
        Zt = rf.transform(torch.asarray(X, dtype=dtype))
        assert isinstance(Zt, torch.Tensor) and Zt.dtype == dtype
        np.testing.assert_allclose(
            Zt.numpy(), rf.transform(X), rtol=1e-4 if dtype == torch.float32 else 1e-10, atol=1e-6
        )
    # fitting on a tensor gives the same features as fitting on the array
    rf_t = RandomFeatures(method=method, n_components=16, random_state=0).fit(torch.asarray(X))
    assert rf_t.n_features_in_ == 5
    np.testing.assert_allclose(rf_t.transform(X), rf.transform(X), rtol=1e-10)
    with pytest.raises(ValueError, match="features"):
        rf.transform(torch.ones((2, 3), dtype=torch.float64))


# ---------------------------------------------------------------- every method, "auto"
from kernelkit.estimators._methods import METHODS, auto_candidates  # noqa: E402
from kernelkit.kernels import polynomial_kernel  # noqa: E402

ALL = [(name, k) for name, m in METHODS.items() for k in m.kernels]


def _exact(kernel, X, Y, lengthscale, degree, coef0):
    if kernel == "gaussian":
        return gaussian_kernel(X, Y, lengthscale=lengthscale)
    if kernel == "softmax":
        return softmax_kernel(X / lengthscale, Y / lengthscale)
    return polynomial_kernel(X / lengthscale, Y / lengthscale, degree=degree, coef0=coef0)


@pytest.mark.parametrize(("method", "kernel"), ALL, ids=[f"{m}-{k}" for m, k in ALL])
def test_every_method_builds_the_map_of_its_kernel(method, kernel):
    """Every map is reachable by name, its output fits in n_components (unless the map's
    smallest output is larger), and its exact kernel is the requested one: lengthscale,
    degree and coef0 reach it the same way for every family."""
    rng = np.random.default_rng(9)
    X, Y = 0.3 * rng.normal(size=(15, 4)), 0.3 * rng.normal(size=(11, 4))
    if method == "srf":  # eq. 57 on the unit sphere
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    params = dict(kernel=kernel, n_components=72, lengthscale=1.3, degree=3, coef0=0.7)
    rf = RandomFeatures(method=method, random_state=0, **params).fit(X, Y=Y)
    fm = rf.feature_map_
    assert isinstance(fm, METHODS[method].cls) and rf.method_ == method
    Z, Zy = rf.transform(X), rf.transform_y(Y)
    assert Z.shape[1] == fm.output_dim == Zy.shape[1]
    assert fm.output_dim <= 72 or fm.n_features == 1
    np.testing.assert_allclose(np.real(Z @ np.conj(Zy).T), fm.approx_kernel(X, Y), atol=1e-10)
    if method != "srf":
        ref = _exact(kernel, X, Y, 1.3, 3, 0.7)
        np.testing.assert_allclose(fm.exact_kernel(X, Y), ref, rtol=1e-10)


def test_method_unknown_for_kernel():
    with pytest.raises(ValueError, match="estimates the kernels"):
        RandomFeatures(method="rademacher", kernel="gaussian").fit(np.ones((4, 2)))
    with pytest.raises(ValueError, match="estimates the kernels"):
        RandomFeatures(method="sderf", kernel="polynomial").fit(np.ones((4, 2)))


def test_hyperbolic_n_components_is_the_output_dimension():
    X = np.random.default_rng(3).normal(size=(10, 4))
    rf = RandomFeatures(method="hyperbolic", n_components=64, random_state=0).fit(X)
    assert rf.feature_map_.n_features == 32 and rf.transform(X).shape == (10, 64)


@pytest.mark.parametrize("kernel", ["gaussian", "softmax", "polynomial"])
def test_auto_keeps_the_lowest_analytic_relative_variance(kernel):
    rng = np.random.default_rng(10)
    X = 0.4 * rng.normal(size=(300, 5))
    rf = RandomFeatures(
        method="auto", kernel=kernel, n_components=64, auto_sample_size=40, random_state=0
    ).fit(X)
    est = rf.variance_estimates_
    assert set(est) == set(auto_candidates(kernel))
    finite = {k: v for k, v in est.items() if np.isfinite(v)}
    assert rf.method_ == min(finite, key=finite.get)
    assert isinstance(rf.feature_map_, METHODS[rf.method_].cls)
    assert rf.feature_map_.n_features_in_ == 5
    assert rf.transform(X).shape[1] == rf.feature_map_.output_dim
    # an estimate is the mean over distinct sample pairs of (Var + bias^2) / K^2 of that
    # candidate (bias: of a Maclaurin map's truncated series), fitted on the sample with
    # the same seed: recompute one independently
    sample_rng = np.random.default_rng(0)
    seed = int(sample_rng.integers(0, 2**31 - 1))
    S = X[np.sort(sample_rng.choice(300, size=40, replace=False))]
    name = min(finite, key=finite.get)
    fm = rf._make_map(name, seed).fit(S)
    K = fm.exact_kernel(S)
    rel = (fm.variance(S) + (fm.expected_kernel(S) - K) ** 2) / K**2
    off = ~np.eye(40, dtype=bool)
    assert est[name] == pytest.approx(rel[off].mean(), rel=1e-8)


def test_auto_prefers_fitted_positive_features_where_they_win():
    """Softmax kernel on centred data of norm ~1.4: the fitted dense-exponential maps
    (FAVOR#) beat trig and FAVOR+ by orders of magnitude in relative variance, as in
    FAVOR# Fig. 2; on small norms the Maclaurin series wins (few degrees suffice)."""
    rng = np.random.default_rng(11)
    X = 0.5 * rng.normal(size=(200, 8))
    rf = RandomFeatures(method="auto", kernel="softmax", n_components=64, random_state=0).fit(X)
    est = rf.variance_estimates_
    assert rf.method_ in ("gerf", "saderf", "aderf", "sderf")
    assert est[rf.method_] < 0.05 * min(est["trig"], est["positive"])
    X = 0.1 * rng.normal(size=(200, 8))
    rf = RandomFeatures(method="auto", kernel="softmax", n_components=64, random_state=0).fit(X)
    assert rf.method_ == "optimized_maclaurin"


def test_auto_with_sparse_input_compares_projection_maps_only():
    X = sp.random(60, 6, density=0.4, format="csr", random_state=0)
    rf = RandomFeatures(method="auto", n_components=32, random_state=0).fit(X)
    assert all(METHODS[m].cls.accepts_sparse for m in rf.variance_estimates_)
    assert rf.transform(X).shape == (60, rf.feature_map_.output_dim)


@pytest.mark.parametrize("method", ["trig", "positive", "rff", "tensor_sketch"])
def test_sparse_input_accepted_by_projection_methods(method):
    X = sp.random(30, 5, density=0.5, format="csr", random_state=1)
    kernel = "polynomial" if method == "tensor_sketch" else "gaussian"
    rf = RandomFeatures(method=method, kernel=kernel, n_components=16, random_state=0)
    np.testing.assert_allclose(rf.fit(X).transform(X), rf.fit(X.toarray()).transform(X.toarray()))


def test_the_issue_pipeline_with_a_feature_map():
    """``Pipeline([("rf", SDERF(64)), ("clf", RidgeClassifier())]).fit(X, y)`` works: a
    Pipeline's target never lands in the kernel's second data set."""
    from sklearn.datasets import make_moons
    from sklearn.linear_model import RidgeClassifier
    from sklearn.pipeline import Pipeline

    X, y = make_moons(300, noise=0.1, random_state=0)
    pipe = Pipeline(
        [("rf", SDERF(64, kernel="gaussian", random_state=0)), ("clf", RidgeClassifier())]
    )
    assert pipe.fit(X, y).score(X, y) > 0.85


@parametrize_with_checks(
    [
        RandomFeatures(method="auto", n_components=16),
        RandomFeatures(method="rff", n_components=16),
        RandomFeatures(method="tensor_srht", kernel="polynomial", n_components=16),
        RandomFeatures(method="saderf", n_components=16),
    ]
)
def test_sklearn_compatible_more_methods(estimator, check):
    check(estimator)
