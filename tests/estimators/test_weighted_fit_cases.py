"""Sample weights and the data-dependent (FAVOR++ / FAVOR#) feature maps in the estimators.

GERF, SADERF, ADERF and SDERF read their data through its first and second moments. Every
estimator fits them on the weighted moments (``sum_i p_i x_i``, ``sum_i p_i x_i x_i^T``,
``p_i = w_i / sum_j w_j``), so an integer weight ``k`` is the row repeated ``k`` times
and a zero weight drops the row for the map as for the solve: the weighted fit is the
model of the repeated (or remaining) rows. Checked for ``RandomFeatureRidge``,
``RandomFeatureGPRegressor`` and ``RandomFeatureGPClassifier`` with the symmetric
data-dependent maps (GERF, SDERF; the asymmetric SADERF and ADERF define no kernel
``phi(x)^T phi(x')`` for them), given as the map or as a ``RandomFeatures`` method, in
memory and on Dask; and for ``NadarayaWatsonClassifier`` with all four.

Tolerances. The two fits differ only in round-off: the moments are sums of the same
terms in another order and grouping (relative ``n eps``), the map's parameters move by
that times the fit's condition number ``kappa`` and ``d`` (the ``d x d`` eigenproblem;
GERF ``kappa = 1``, SDERF ``|N| / min gap`` of the eigenvalues of ``N``, as in
``tests/features/test_row_order_fit_cases.py``), and a ridge / GP solve of ``A =
Phi^T W Phi + alpha I`` amplifies relative errors of its inputs by ``cond(A)``. So
predictions agree to ``100 cond(A) eps (1 + n d kappa)`` times their scale (the factor
100 for the sums of ``O(n D^2)`` products, as in ``test_sample_weight_cases.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
    RandomFeatures,
)
from kernelkit.features import GERF, SDERF
from kernelkit.features.favor import moments

EPS = np.finfo(np.float64).eps
SYMMETRIC = {"gerf": GERF, "sderf": SDERF}
NW_METHODS = ["gerf", "saderf", "aderf", "sderf"]


def _data(n=50, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * [1.0, 0.5, 2.0] + [0.3, -0.2, 0.1]  # anisotropic
    y = np.sin(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.standard_normal(n)
    k = rng.integers(0, 4, n)  # integer weights, zeros included
    k[0] = 3
    return X, y, k


def _labels(y):
    return np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))  # three classes


def _map(method: str, form: str):
    if form == "map":
        return SYMMETRIC[method](n_features=40, random_state=1)
    return RandomFeatures(method=method, n_components=40, random_state=1)


def _kappa(method: str, X) -> float:
    if method != "sderf":
        return 1.0
    mom = moments(X, X)
    cross = np.outer(mom.mean_x, mom.mean_y)
    ev = np.linalg.eigvalsh(mom.second_x + mom.second_y + cross + cross.T)
    gaps = np.diff(ev)
    gaps = gaps[gaps > 1e-5 * ev.max()]
    return float(ev.max() / gaps.min()) if gaps.size else 1.0


def _tol(est, Xr, method, alpha):
    """``100 cond(A) eps (1 + n d kappa)`` (module docstring), ``A`` of the reference."""
    Phi = est.feature_map_.transform(Xr)
    A = Phi.T @ Phi + alpha * np.eye(Phi.shape[1])
    n, d = Xr.shape
    return 100 * np.linalg.cond(A) * EPS * (1 + n * d * _kappa(method, Xr))


def _fit(est, X, t, w, path):
    if path == "dask":
        da = pytest.importorskip("dask.array")
        return est.fit(da.from_array(X, chunks=17), da.from_array(t, chunks=17), sample_weight=w)
    return est.fit(X, t, sample_weight=w)


def _regressors(fm):
    return [
        (RandomFeatureRidge(fm, alpha=0.5), 0.5),
        (RandomFeatureGPRegressor(fm, noise=0.2), 0.2),
    ]


@pytest.mark.parametrize("path", ["memory", "dask"])
@pytest.mark.parametrize("form", ["map", "random_features"])
@pytest.mark.parametrize("method", list(SYMMETRIC))
@pytest.mark.parametrize("which", [0, 1], ids=["ridge", "gp"])
def test_regressors_integer_weights_are_repeated_rows(which, method, form, path):
    """Weight ``k`` = the row repeated ``k`` times (zero: removed), the map included: the
    fitted map's parameters and the predictions (and GP standard deviations) are those of
    the unweighted fit of the repeated rows."""
    X, y, k = _data()
    est, alpha = _regressors(_map(method, form))[which]
    Xr, yr = np.repeat(X, k, axis=0), np.repeat(y, k)
    ref = clone(est).fit(Xr, yr)
    got = _fit(clone(est), X, y, k.astype(float), path)
    Xq = np.random.default_rng(9).standard_normal((11, 3))
    tol = _tol(ref, Xr, method, alpha)
    np.testing.assert_allclose(got.predict(Xq), ref.predict(Xq), rtol=0, atol=tol)
    inner = getattr(ref.feature_map_, "feature_map_", ref.feature_map_)
    inner_got = getattr(got.feature_map_, "feature_map_", got.feature_map_)
    np.testing.assert_allclose(inner_got.A_, inner.A_, rtol=0, atol=tol)
    if isinstance(est, RandomFeatureGPRegressor):
        s1 = got.predict(Xq, return_std=True)[1]
        s0 = ref.predict(Xq, return_std=True)[1]
        np.testing.assert_allclose(s1, s0, rtol=0, atol=tol)


@pytest.mark.parametrize("path", ["memory", "dask"])
@pytest.mark.parametrize("method", list(SYMMETRIC))
@pytest.mark.parametrize("which", [0, 1], ids=["ridge", "gp"])
def test_regressors_zero_weights_are_dropped_rows(which, method, path):
    """0/1 weights = the rows of weight 1 alone (the map fitted on them only)."""
    X, y, _ = _data()
    keep = (np.arange(len(y)) % 3 != 0).astype(float)
    est, alpha = _regressors(_map(method, "map"))[which]
    ref = clone(est).fit(X[keep > 0], y[keep > 0])
    got = _fit(clone(est), X, y, keep, path)
    Xq = np.random.default_rng(8).standard_normal((11, 3))
    tol = _tol(ref, X[keep > 0], method, alpha)
    np.testing.assert_allclose(got.predict(Xq), ref.predict(Xq), rtol=0, atol=tol)


@pytest.mark.parametrize("path", ["memory", "dask"])
@pytest.mark.parametrize("form", ["map", "random_features"])
@pytest.mark.parametrize("method", list(SYMMETRIC))
def test_gp_classifier_integer_and_zero_weights(method, form, path):
    """``RandomFeatureGPClassifier``: integer weights (zeros included) = the repeated rows,
    in the latent means and the probabilities. ``B_c`` has Milios noise variances of at
    least ``0.0068 / 3`` (``alpha = 0.01``, weights <= 3), so ``cond(B_c) < 1e5`` here
    (as in ``test_sample_weight_cases.py``); times the map's ``1 + n d kappa``."""
    X, y, k = _data()
    labels = _labels(y)
    est = RandomFeatureGPClassifier(_map(method, form), n_samples=100, random_state=0)
    Xr, lr = np.repeat(X, k, axis=0), np.repeat(labels, k)
    ref = clone(est).fit(Xr, lr)
    got = _fit(clone(est), X, labels, k.astype(float), path)
    Xq = np.random.default_rng(9).standard_normal((11, 3))
    tol = 1e5 * 100 * EPS * (1 + Xr.size * _kappa(method, Xr))
    for a, b in zip(got.predict_latent(Xq), ref.predict_latent(Xq), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=tol * max(1.0, np.abs(b).max()))
    np.testing.assert_allclose(got.predict_proba(Xq), ref.predict_proba(Xq), rtol=0, atol=tol)


@pytest.mark.parametrize("method", NW_METHODS)
def test_nadaraya_watson_integer_and_zero_weights(method):
    """``NadarayaWatsonClassifier`` (``fit_on="train"``): integer weights = the repeated
    rows, 0/1 weights = the kept rows, for every data-dependent map (its moments are
    the weighted ones). Probabilities are ratios of sums of a few hundred positive
    terms: ``n eps`` each, times the map's ``1 + n d kappa`` (ADERF's ``kappa``, the
    condition of ``M + lambda I``, is below 1e3 for this full-rank data)."""
    X, y, k = _data()
    labels = _labels(y)
    est = NadarayaWatsonClassifier(method=method, n_components=64, fit_on="train", random_state=0)
    Xq = np.random.default_rng(9).standard_normal((11, 3))
    kappa = 1e3 if method in ("aderf", "saderf") else _kappa(method, X)
    tol = 100 * EPS * X.size * (1 + X.size * kappa)
    ref = clone(est).fit(np.repeat(X, k, axis=0), np.repeat(labels, k))
    got = clone(est).fit(X, labels, sample_weight=k)
    np.testing.assert_allclose(got.predict_proba(Xq), ref.predict_proba(Xq), rtol=0, atol=tol)
    keep = (np.arange(len(y)) % 3 != 0).astype(float)
    ref = clone(est).fit(X[keep > 0], labels[keep > 0])
    got = clone(est).fit(X, labels, sample_weight=keep)
    np.testing.assert_allclose(got.predict_proba(Xq), ref.predict_proba(Xq), rtol=0, atol=tol)


@pytest.mark.parametrize("path", ["memory", "dask"])
def test_weights_reach_the_map(path):
    """The weights change the map itself: SDERF fitted with weights that stress one
    region has other parameters than the unweighted fit (by far more than round-off)."""
    X, y, _ = _data()
    w = np.where(X[:, 0] > 0, 5.0, 0.2)
    est = RandomFeatureRidge(SDERF(n_features=40, random_state=1), alpha=0.5)
    plain = clone(est).fit(X, y)
    got = _fit(clone(est), X, y, w, path)
    assert np.abs(got.feature_map_.A_ - plain.feature_map_.A_).max() > 1e-3


def test_dask_all_zero_weights_are_the_weights_error():
    """On Dask, the map's weighted moments are reduced before the statistics: all-zero
    weights are still the ``sample_weight`` error, and a negative weight is named with
    its chunk."""
    da = pytest.importorskip("dask.array")
    X, y, _ = _data()
    est = RandomFeatureRidge(SDERF(n_features=40, random_state=1))
    dX, dy = da.from_array(X, chunks=17), da.from_array(y, chunks=17)
    with pytest.raises(ValueError, match="sample_weight: the weights are all zero"):
        clone(est).fit(dX, dy, sample_weight=da.zeros(len(y), chunks=17))
    bad = np.ones(len(y))
    bad[20] = -1.0
    with pytest.raises(ValueError, match="sample_weight: chunk 1 has negative"):
        clone(est).fit(dX, dy, sample_weight=bad)
