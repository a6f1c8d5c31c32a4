"""``n_jobs`` of the random-feature ridge / GP estimators (scikit-learn's convention): the
threads change nothing but round-off, 0 is rejected, the feature map inherits it; and the
estimators' fit path does not reach into kernelkit.distributions."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
from sklearn.base import clone

import kernelkit.estimators as estimators
from kernelkit.estimators import (
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
)
from kernelkit.features import GaussianSketch, RandomFourierFeatures


def _data(n=2500, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


MAPS = [
    RandomFourierFeatures(n_features=64, lengthscale=1.5, random_state=0),
    GaussianSketch(n_features=32, degree=2, complex=True, random_state=1),
]


def _outputs(est, X):
    if isinstance(est, RandomFeatureGPClassifier):
        return [est.predict_proba(X)]
    if isinstance(est, RandomFeatureGPRegressor):
        return list(est.predict(X, return_std=True))
    return [est.predict(X), est.coef_, np.atleast_1d(est.intercept_)]


ESTIMATORS = [
    RandomFeatureRidge(alpha=0.3, random_state=0),
    RandomFeatureRidge(alpha=0.3, solver="dual", random_state=0),
    RandomFeatureGPRegressor(noise=0.2, normalize_y=True, random_state=0),
    RandomFeatureGPClassifier(n_samples=100, random_state=0),
]


@pytest.mark.parametrize("fm", [None, *MAPS], ids=["default", "rff", "complex-sketch"])
@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: repr(e))
def test_one_and_two_threads_give_the_same_model(est, fm):
    X, y = _data(n=400)
    if isinstance(est, RandomFeatureGPClassifier):
        y = (y > 0).astype(int) + (X[:, 2] > 0.5)
    fits = [clone(est).set_params(feature_map=fm, n_jobs=k).fit(X, y) for k in (1, 2)]
    assert fits[1].feature_map_.n_jobs == 2
    for a, b in zip(_outputs(fits[0], X[:50]), _outputs(fits[1], X[:50]), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("fm", MAPS, ids=["rff", "complex-sketch"])
def test_blocked_in_memory_fit_same_model_on_one_and_two_threads(fm, monkeypatch):
    """The row-block reduction of a large primal fit: one block vs two, same model."""
    import kernelkit.estimators._chunked as chunked

    monkeypatch.setattr(chunked, "STREAM_ENTRIES", 1000)
    X, y = _data()
    Y = np.column_stack([y, np.cos(X[:, 1])])
    for est in (RandomFeatureRidge(fm, alpha=0.3), RandomFeatureGPRegressor(fm, noise=0.2)):
        one, two = (clone(est).set_params(n_jobs=k).fit(X, Y) for k in (1, 2))
        assert chunked.use_blocked_statistics(one.feature_map_, X, "auto")
        assert one.n_samples_seen_ == two.n_samples_seen_ == len(X)
        np.testing.assert_allclose(two.predict(X[:100]), one.predict(X[:100]), atol=1e-10)


@pytest.mark.parametrize(
    "cls", [RandomFeatureRidge, RandomFeatureGPRegressor, RandomFeatureGPClassifier]
)
def test_bad_n_jobs_is_rejected_by_name(cls):
    X, y = _data(n=60)
    y = (y > 0).astype(int)
    with pytest.raises(ValueError, match=r"'n_jobs' parameter .* Got 0 instead"):
        cls(n_jobs=0).fit(X, y)
    with pytest.raises(TypeError, match="n_jobs"):
        cls(n_jobs=1.5).fit(X, y)
    assert cls(n_jobs=-1).fit(X, y).feature_map_.n_jobs == -1


def test_feature_map_keeps_its_own_n_jobs_and_seed():
    X, y = _data(n=80)
    fm = RandomFourierFeatures(n_features=16, n_jobs=3)
    est = RandomFeatureRidge(fm, n_jobs=2, random_state=5).fit(X, y)
    assert est.feature_map_.n_jobs == 3 and est.feature_map_.random_state == 5
    assert fm.n_jobs == 3 and fm.random_state is None  # the given map is not modified
    est = RandomFeatureRidge(RandomFourierFeatures(n_features=16)).fit(X, y)
    assert est.feature_map_.n_jobs is None


def test_estimators_do_not_import_distributions():
    """Layers: estimators use kernelkit._backend and features, never distributions."""
    for path in pathlib.Path(estimators.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any("distributions" in name for name in names), (path.name, names)
