"""``sample_weight`` in the estimators' ``fit`` and ``score``, as scikit-learn users expect.

* ``RandomFeatureRidge``: weighted least squares, scikit-learn's ``Ridge`` convention
  (``alpha`` not scaled by the weights; weighted centring with ``fit_intercept``),
  checked against ``sklearn.linear_model.Ridge`` on the same features;
* ``RandomFeatureGPRegressor`` / ``RandomFeatureGPClassifier``: the noise of row ``i``
  divided by ``w_i``, checked against the posterior written out in NumPy;
* ``NadarayaWatsonClassifier``: weighted kernel sums, checked against the exact kernel
  and against the features, in NumPy;
* for all of them: integer weights equal repeated rows (zero weights: removed rows), on
  every fit path (in memory primal / dual, blocked, Dask); scikit-learn's validation;
  torch and Dask weights; weighted ``score``; metadata routing in a ``Pipeline``.

Tolerances. Every comparison is of two computations of the same quantity that differ
only in round-off. A ridge / GP solve of ``A = Phi^T W Phi + alpha I`` (D x D) by
Cholesky has a relative error of about ``cond(A) * eps``; the tests compute ``cond(A)``
and use ``_solve_tol`` below (a factor 100 for the sums of the O(n D^2) products and the
different summation orders). Sums of at most a few hundred positive terms (kernel sums,
probabilities) agree to ``n * eps``; ``1e-12`` covers them with a margin of > 100.
"""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.metrics import accuracy_score, r2_score
from sklearn.model_selection import KFold, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import kernelkit.estimators._chunked as chunked
from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
)
from kernelkit.estimators._methods import FEATURE_MAPS
from kernelkit.features import RandomFourierFeatures

EPS = np.finfo(np.float64).eps
NW_METHODS = ["trig", "positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf"]
assert set(NW_METHODS) <= set(FEATURE_MAPS)


def _data(n=60, d=3, seed=0, offset=0.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.standard_normal(n) + offset
    k = rng.integers(0, 4, n)  # integer weights, zeros included
    k[0] = 2  # at least one positive weight
    return X, y, k


def _labels(y):
    return np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))  # three classes


def _fm(D=40, seed=1):
    return RandomFourierFeatures(n_features=D, lengthscale=1.0, random_state=seed)


def _solve_tol(Phi, w, alpha):
    """``100 cond(A) eps`` for ``A = Phi^T W Phi + alpha I`` (module docstring)."""
    A = Phi.T @ (Phi * w[:, None]) + alpha * np.eye(Phi.shape[1])
    return 100 * np.linalg.cond(A) * EPS


# ====================================================================== ridge
@pytest.mark.parametrize("solver", ["primal", "dual"])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("targets", [1, 2])
def test_ridge_matches_sklearn_ridge_on_the_features(solver, fit_intercept, targets):
    """``min sum_i w_i |y_i - phi_i^T b - c|^2 + alpha |b|^2``: scikit-learn's ``Ridge``
    fitted on ``phi(X)`` with the same weights (real, non-integer, zeros included) gives
    the same coefficients and intercept."""
    X, y, _ = _data(offset=3.0)
    w = np.random.default_rng(5).uniform(0, 3, len(y))
    w[:7] = 0.0
    Y = y if targets == 1 else np.column_stack([y, -2 * y + 1])
    alpha = 0.3
    est = RandomFeatureRidge(_fm(), alpha=alpha, fit_intercept=fit_intercept, solver=solver)
    est.fit(X, Y, sample_weight=w)
    Phi = est.feature_map_.transform(X)
    ref = Ridge(alpha=alpha, fit_intercept=fit_intercept, solver="cholesky")
    ref.fit(Phi, Y, sample_weight=w)
    tol = _solve_tol(Phi, w, alpha)
    coef = est.coef_ if targets == 1 else est.coef_.T  # Ridge: (T, D)
    np.testing.assert_allclose(coef, ref.coef_, rtol=0, atol=tol * np.abs(ref.coef_).max())
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=tol, atol=tol)
    np.testing.assert_allclose(est.predict(X), ref.predict(Phi), rtol=tol, atol=tol)


def test_ridge_scalar_weight_is_alpha_divided():
    """scikit-learn's convention: ``alpha`` is not scaled by the weights, so a constant
    weight ``c`` is the penalty ``alpha / c`` (and ``Ridge`` agrees)."""
    X, y, _ = _data()
    a = RandomFeatureRidge(_fm(), alpha=0.6).fit(X, y, sample_weight=3.0)
    b = RandomFeatureRidge(_fm(), alpha=0.2).fit(X, y)
    Phi = a.feature_map_.transform(X)
    tol = _solve_tol(Phi, np.full(len(y), 3.0), 0.6)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=tol, atol=tol)
    ref = Ridge(alpha=0.6).fit(Phi, y, sample_weight=3.0)
    np.testing.assert_allclose(a.predict(X), ref.predict(Phi), rtol=tol, atol=tol)


def _repeat(X, y, k):
    return np.repeat(X, k, axis=0), np.repeat(y, k, axis=0)


@pytest.mark.parametrize("path", ["primal", "dual", "blocked", "dask"])
@pytest.mark.parametrize(
    "est",
    [
        RandomFeatureRidge(_fm(), alpha=0.5),
        RandomFeatureRidge(_fm(), alpha=0.5, fit_intercept=False),
        RandomFeatureGPRegressor(_fm(), noise=0.2),
        RandomFeatureGPRegressor(_fm(), noise=0.2, normalize_y=True),
    ],
    ids=["ridge", "ridge-no-intercept", "gp", "gp-normalize_y"],
)
def test_integer_weights_equal_repeated_rows_regressors(est, path, monkeypatch):
    """Weight ``k`` = the row repeated ``k`` times, ``0`` = the row removed, on every fit
    path (``y`` offset by 1e3: the weighted centring of the statistics keeps its
    digits). The reference is the unweighted in-memory fit of the repeated rows."""
    X, y, k = _data(offset=1e3)
    Xr, yr = _repeat(X, y, k)
    ref = clone(est).set_params(solver="primal").fit(Xr, yr)
    est = clone(est).set_params(solver="dual" if path == "dual" else "primal")
    if path == "blocked":  # every in-memory primal fit reduces row blocks
        monkeypatch.setattr(chunked, "STREAM_ENTRIES", 1)
    if path == "dask":
        da = pytest.importorskip("dask.array")
        est.fit(da.from_array(X, chunks=17), da.from_array(y, chunks=23), sample_weight=k)
    else:
        est.fit(X, y, sample_weight=k)
    assert est.n_samples_seen_ == len(X)  # rows given, not the weights' sum
    Xq = np.random.default_rng(9).standard_normal((11, 3))
    Phi = ref.feature_map_.transform(Xr)
    # the predictions are ~1e3: the solve's relative error times the offset
    tol = _solve_tol(Phi, np.ones(len(yr)), 0.2) * 1e3
    np.testing.assert_allclose(est.predict(Xq), ref.predict(Xq), rtol=0, atol=tol)
    if isinstance(est, RandomFeatureGPRegressor):
        _, s1 = est.predict(Xq, return_std=True)
        _, s0 = ref.predict(Xq, return_std=True)
        np.testing.assert_allclose(s1, s0, rtol=0, atol=tol)


def test_gp_regressor_weights_scale_the_noise():
    """``B = Phi^T W Phi / noise + I``, ``mu = phi^T B^-1 Phi^T W y / noise``: the noise of
    row ``i`` is ``noise / w_i``, written out in NumPy (primal and dual agree with it)."""
    X, y, _ = _data()
    w = np.random.default_rng(2).uniform(0.1, 4, len(y))
    noise = 0.3
    Xq = np.random.default_rng(3).standard_normal((8, 3))
    for solver in ("primal", "dual"):
        est = RandomFeatureGPRegressor(_fm(D=80), noise=noise, solver=solver)
        est.fit(X, y, sample_weight=w)
        Phi, Pq = est.feature_map_.transform(X), est.feature_map_.transform(Xq)
        B = Phi.T @ (Phi * (w / noise)[:, None]) + np.eye(Phi.shape[1])
        mean = Pq @ np.linalg.solve(B, Phi.T @ (w * y) / noise)
        var = np.einsum("ij,ji->i", Pq, np.linalg.solve(B, Pq.T))
        tol = 100 * np.linalg.cond(B) * EPS
        m, s = est.predict(Xq, return_std=True)
        np.testing.assert_allclose(m, mean, rtol=0, atol=tol * np.abs(mean).max())
        np.testing.assert_allclose(s**2, var, rtol=0, atol=tol)


# ====================================================================== GP classifier
@pytest.mark.parametrize("path", ["primal", "dual", "blocked", "dask"])
def test_integer_weights_equal_repeated_rows_gp_classifier(path, monkeypatch):
    """The Milios noise of row ``i`` divided by ``w_i`` in every class GP: the weighted
    fit equals the fit of the repeated rows (latent means, variances, probabilities)."""
    X, y, k = _data()
    labels = _labels(y)
    Xr, lr = _repeat(X, labels, k)
    est = RandomFeatureGPClassifier(_fm(), n_samples=200, random_state=0)
    ref = clone(est).set_params(solver="primal").fit(Xr, lr)
    est.set_params(solver="dual" if path == "dual" else "primal")
    if path == "blocked":
        monkeypatch.setattr(chunked, "STREAM_ENTRIES", 1)
    if path == "dask":
        da = pytest.importorskip("dask.array")
        est.fit(da.from_array(X, chunks=17), labels, sample_weight=da.from_array(k, chunks=9))
    else:
        est.fit(X, labels, sample_weight=k)
    Xq = np.random.default_rng(9).standard_normal((11, 3))
    # B_c has noise variances >= 0.0068 / 3 (Milios, alpha = 0.01, weights <= 3):
    # its condition number is at most ~1 + 3 |Phi|^2 / 0.0068, here < 1e5
    tol = 1e5 * 100 * EPS
    for a, b in zip(est.predict_latent(Xq), ref.predict_latent(Xq), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(1.0, np.abs(b).max()))
    np.testing.assert_allclose(est.predict_proba(Xq), ref.predict_proba(Xq), rtol=0, atol=tol)


# ====================================================================== Nadaraya-Watson
def _exact_weighted_nw(Xq, X, labels, w, sigma, n_classes):
    """``sum_i w_i K(q, x_i) r_i / sum_i w_i K(q, x_i)`` with the Gaussian kernel."""
    K = np.exp(-0.5 * sigma**2 * ((Xq[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    num = (K * w) @ np.eye(n_classes)[labels]
    return num / num.sum(axis=1, keepdims=True)


def test_nadaraya_watson_exact_is_the_weighted_kernel_estimate():
    """``exact=True``: ``predict_proba`` is the weighted Nadaraya-Watson estimate with the
    exact Gaussian kernel, computed directly."""
    X, y, _ = _data(n=50)
    labels = _labels(y)
    w = np.random.default_rng(4).uniform(0, 2, len(y))
    w[:5] = 0.0
    Xq = np.random.default_rng(5).standard_normal((9, 3))
    est = NadarayaWatsonClassifier(exact=True, sigma=1.3).fit(X, labels, sample_weight=w)
    ref = _exact_weighted_nw(Xq, X, labels, w, 1.3, 3)
    np.testing.assert_allclose(est.predict_proba(Xq), ref, rtol=0, atol=1e-12)
    assert (est.predict(Xq) == np.argmax(ref, axis=1)).all()


@pytest.mark.parametrize("method", ["trig", "positive", "sderf"])
def test_nadaraya_watson_features_are_the_weighted_feature_sums(method):
    """Random features: ``decision_function`` is ``P S^T W R`` (queries ``P``, training
    features ``S`` of the centred inputs, ``W = diag(w)``) normalised per row, computed
    directly from the fitted map's features."""
    X, y, _ = _data(n=50)
    labels = _labels(y)
    w = np.random.default_rng(4).uniform(0, 2, len(y))
    w[:5] = 0.0
    Xq = np.random.default_rng(5).standard_normal((9, 3))
    est = NadarayaWatsonClassifier(method=method, n_components=32, sigma=1.3, random_state=0)
    est.fit(X, labels, sample_weight=w)
    np.testing.assert_allclose(est.X_mean_, np.average(X, axis=0, weights=w), atol=1e-15)
    fm = est.feature_map_
    P, S = fm.transform(Xq - est.X_mean_), fm.transform_y(X - est.X_mean_)
    scores = P @ S.T @ (w[:, None] * np.eye(3)[labels])
    ref = scores / np.abs(scores).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(est.decision_function(Xq), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("fit_on", ["train", "batch"])
@pytest.mark.parametrize("method", [*NW_METHODS, "exact"])
def test_integer_weights_equal_repeated_rows_nadaraya_watson(method, fit_on):
    """Weight ``k`` = the point repeated ``k`` times for the exact kernel and every
    feature map: the centre is the weighted mean and the data-dependent maps (GERF,
    SADERF, ADERF, SDERF) are fitted on the weighted FAVOR# moments (per query batch
    too, ``fit_on="batch"``). Inputs offset by 2: the centre matters."""
    X, y, k = _data(n=40)
    X = X + 2.0
    labels = _labels(y)
    Xr, lr = _repeat(X, labels, k)
    params = dict(sigma=1.3, random_state=0, fit_on=fit_on, n_components=32)
    params.update(exact=True) if method == "exact" else params.update(method=method)
    est = NadarayaWatsonClassifier(**params).fit(X, labels, sample_weight=k)
    ref = NadarayaWatsonClassifier(**params).fit(Xr, lr)
    Xq = np.random.default_rng(6).standard_normal((10, 3)) + 2.0
    np.testing.assert_allclose(
        est.decision_function(Xq), ref.decision_function(Xq), rtol=0, atol=1e-12
    )


def test_nadaraya_watson_zero_weight_label_stays_a_class():
    """A class whose points all have weight 0 stays in ``classes_`` (scikit-learn's
    classifiers keep it) with probability 0."""
    X, y, _ = _data(n=30)
    labels = _labels(y)
    w = np.where(labels == 2, 0.0, 1.0)
    est = NadarayaWatsonClassifier(exact=True).fit(X, labels, sample_weight=w)
    assert est.classes_.tolist() == [0, 1, 2]
    assert np.all(est.predict_proba(X)[:, 2] == 0.0)


# ====================================================================== all estimators
def _estimators():
    return [
        RandomFeatureRidge(_fm()),
        RandomFeatureGPRegressor(_fm()),
        RandomFeatureGPClassifier(_fm(), n_samples=50, random_state=0),
        NadarayaWatsonClassifier(random_state=0),
        NadarayaWatsonClassifier(exact=True),
    ]


def _target(est, y):
    return _labels(y) if "Classifier" in type(est).__name__ else y


_IDS = ["ridge", "gp", "gp-classifier", "nw", "nw-exact"]


@pytest.mark.parametrize("est", _estimators(), ids=_IDS)
def test_weights_are_used_not_ignored(est):
    """A weighted fit differs from the unweighted one, and unit weights equal none."""
    X, y, _ = _data()
    t = _target(est, y)
    w = np.where(np.arange(len(y)) % 2 == 0, 5.0, 0.2)
    f = "predict_proba" if hasattr(est, "predict_proba") else "predict"
    plain = getattr(clone(est).fit(X, t), f)(X)
    ones = getattr(clone(est).fit(X, t, sample_weight=np.ones(len(y))), f)(X)
    weighted = getattr(clone(est).fit(X, t, sample_weight=w), f)(X)
    np.testing.assert_allclose(ones, plain, rtol=0, atol=1e-9)  # cond(A) eps, A as above
    assert np.abs(weighted - plain).max() > 1e-3


@pytest.mark.parametrize("est", _estimators(), ids=_IDS)
@pytest.mark.parametrize(
    ("weights", "match"),
    [
        (lambda n: -np.ones(n), "sample_weight: Negative values"),
        (lambda n: np.zeros(n), "sample_weight: .*non-zero"),
        (lambda n: np.ones(n - 1), r"sample_weight.*shape"),
        (lambda n: np.ones((n, 1)), "sample_weight: .*1D"),
        (lambda n: np.r_[np.nan, np.ones(n - 1)], "sample_weight contains NaN"),
        (lambda n: np.r_[np.inf, np.ones(n - 1)], "sample_weight contains infinity"),
        (lambda n: ["a"] * n, "sample_weight: could not convert"),
        # scikit-learn's _check_sample_weight broadcasts a scalar without checking it
        (lambda n: np.nan, "sample_weight contains NaN or infinity, got nan"),
        (lambda n: np.inf, "sample_weight contains NaN or infinity, got inf"),
        (lambda n: -2.0, "sample_weight: Negative values"),
    ],
    ids=[
        "negative",
        "all-zero",
        "length",
        "2-D",
        "nan",
        "inf",
        "strings",
        "scalar-nan",
        "scalar-inf",
        "scalar-negative",
    ],
)
def test_invalid_weights_are_a_value_error_naming_sample_weight(est, weights, match):
    X, y, _ = _data(n=20)
    with pytest.raises(ValueError, match=match):
        clone(est).fit(X, _target(est, y), sample_weight=weights(len(y)))


@pytest.mark.parametrize("est", _estimators()[:3], ids=_IDS[:3])
def test_dask_weights(est):
    """Dask ``X`` with Dask weights in other chunks (rechunked to ``X``'s rows), NumPy
    weights, and rows filtered by a mask (unknown chunk sizes): the in-memory weighted
    fit; bad weights are a ``ValueError`` naming ``sample_weight`` (checked chunk by
    chunk); an iterable of blocks with weights is refused."""
    da = pytest.importorskip("dask.array")
    X, y, _ = _data(n=90)
    t = _target(est, y)
    w = np.random.default_rng(7).uniform(0, 2, len(y))
    f = "predict_proba" if hasattr(est, "predict_proba") else "predict"
    mask = np.arange(len(y)) % 3 != 0
    ref = getattr(clone(est).fit(X, t, sample_weight=w), f)(X)
    ref_mask = getattr(clone(est).fit(X[mask], t[mask], sample_weight=w[mask]), f)(X)
    dX, dt, dw = da.from_array(X, chunks=20), da.from_array(t, chunks=20), da.from_array(w, 13)
    tol = 1e-9  # the solve's cond(A) eps (< 1e6 eps here), summed in another order
    for weights in (dw, w):
        got = getattr(clone(est).fit(dX, dt, sample_weight=weights), f)(X)
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol)
    dm = da.from_array(mask, chunks=20)
    got = clone(est).fit(dX[dm], dt[dm], sample_weight=dw[dm])  # unknown chunk sizes
    np.testing.assert_allclose(getattr(got, f)(X), ref_mask, rtol=0, atol=tol)
    bad = w.copy()
    bad[50] = -1.0
    # row 50 is in X's chunk 2 (rows 40-59; its chunk 3 of 13 rows): the weights are
    # rechunked to X's rows and named by them
    with pytest.raises(ValueError, match="sample_weight: chunk 2 has negative"):
        clone(est).fit(dX, dt, sample_weight=da.from_array(bad, chunks=13))
    with pytest.raises(ValueError, match="sample_weight: the weights are all zero"):
        clone(est).fit(dX, dt, sample_weight=da.zeros(len(y), chunks=13))
    with pytest.raises(ValueError, match="sample_weight has 89 rows, expected 90"):
        clone(est).fit(dX, dt, sample_weight=w[1:])
    with pytest.raises(ValueError, match="sample_weight is not supported with an iterable"):
        clone(est).fit([(X[:40], t[:40]), (X[40:], t[40:])], None, sample_weight=w)


@pytest.mark.parametrize("est", _estimators(), ids=_IDS)
def test_torch_weights(est):
    """Torch ``X``, ``y`` and weights (one that requires grad, too): the NumPy fit."""
    torch = pytest.importorskip("torch")
    X, y, _ = _data()
    t = _target(est, y)
    w = np.random.default_rng(8).uniform(0, 2, len(y))
    f = "predict_proba" if hasattr(est, "predict_proba") else "predict"
    ref = getattr(clone(est).fit(X, t, sample_weight=w), f)(X)
    tw = torch.tensor(w, requires_grad=True)
    got = getattr(clone(est).fit(torch.tensor(X), torch.tensor(t), sample_weight=tw), f)(X)
    np.testing.assert_array_equal(got, ref)  # the same float64 values, the same operations


@pytest.mark.parametrize("est", _estimators(), ids=_IDS)
def test_float32_X_takes_weights(est):
    """float32 ``X``: the weights are validated in float64, the dtype of the sums that use
    them (not rounded to ``X``'s dtype), and the fit equals the one of the same values in
    float64 to the float32 round-off of the features (``1e-4``: ``D`` features of ~1e-7
    relative error each, through a solve of condition number < 1e3)."""
    X, y, _ = _data()
    X = X.astype(np.float32)
    t = _target(est, y)
    w = np.random.default_rng(8).uniform(0, 2, len(y))
    f = "predict_proba" if hasattr(est, "predict_proba") else "predict"
    got = getattr(clone(est).fit(X, t, sample_weight=w), f)(X)
    ref = getattr(clone(est).fit(X.astype(np.float64), t, sample_weight=w), f)(X)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)
    # the float64 weights are used as given: float32-rounded weights are other weights
    w32 = w.astype(np.float32)
    got32 = getattr(clone(est).fit(X, t, sample_weight=w32), f)(X)
    assert not np.array_equal(got, got32)
    same = getattr(clone(est).fit(X, t, sample_weight=w32.astype(np.float64)), f)(X)
    np.testing.assert_array_equal(got32, same)  # the same float64 values


@pytest.mark.parametrize("est", _estimators(), ids=_IDS)
def test_score_is_weighted(est):
    """``score(X, y, sample_weight)``: scikit-learn's weighted R^2 / accuracy."""
    X, y, _ = _data()
    t = _target(est, y)
    est = clone(est).fit(X[:40], t[:40])
    w = np.random.default_rng(1).uniform(0, 2, 20)
    metric = accuracy_score if "Classifier" in type(est).__name__ else r2_score
    pred = est.predict(X[40:])
    expected = metric(t[40:], pred, sample_weight=w)
    assert est.score(X[40:], t[40:], sample_weight=w) == pytest.approx(expected, abs=1e-15)
    assert expected != pytest.approx(metric(t[40:], pred), abs=1e-6)  # the weights matter


@pytest.mark.parametrize("est", _estimators(), ids=_IDS)
def test_metadata_routing_in_a_pipeline(est):
    """``set_fit_request(sample_weight=True)`` in a ``Pipeline`` and
    ``cross_val_score(..., params={"sample_weight": w})``: each fold is fitted and scored
    with its rows' weights, as the same loop written by hand."""
    X, y, _ = _data(n=60)
    t = _target(est, y)
    w = np.random.default_rng(3).uniform(0.1, 2, len(y))
    cv = KFold(3, shuffle=True, random_state=0)
    with sklearn.config_context(enable_metadata_routing=True):
        step = clone(est).set_fit_request(sample_weight=True).set_score_request(sample_weight=True)
        pipe = Pipeline(
            [("scale", StandardScaler().set_fit_request(sample_weight=False)), ("est", step)]
        )
        got = cross_val_score(pipe, X, t, cv=cv, params={"sample_weight": w})
    expected = []
    for train, test in cv.split(X):
        scaler = StandardScaler().fit(X[train])
        model = clone(est).fit(scaler.transform(X[train]), t[train], sample_weight=w[train])
        expected.append(model.score(scaler.transform(X[test]), t[test], sample_weight=w[test]))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    unweighted = cross_val_score(clone(pipe), X, t, cv=cv)
    assert np.abs(got - unweighted).max() > 1e-6  # the weights reached fit and score


def test_nadaraya_watson_pickled_before_sample_weights_predicts_unweighted():
    # a model pickled by a version without sample weights has no _log_w attribute: it
    # must load and predict as fitted (the class default None: unweighted), bitwise
    import pickle

    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 4))
    y = (X[:, 0] > 0).astype(int)
    clf = NadarayaWatsonClassifier(n_components=32, random_state=0).fit(X, y)
    expected = clf.predict_proba(X)
    del clf.__dict__["_log_w"]
    old = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(old.predict_proba(X), expected)
