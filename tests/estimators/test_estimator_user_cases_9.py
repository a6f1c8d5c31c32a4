"""New-user cases: estimators use the parameter values they were fitted with (a
set_params after fit waits for the next fit, never an unchecked value at predict time);
ClusteredHybridRF.redraw checks the values it redraws with; weighted fits of a Pipeline
feature map with pandas output."""

import numpy as np
import pytest
import sklearn
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
)
from kernelkit.features import GERF, ClusteredHybridRF, TrigRF


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    return X, (X[:, 0] > 0).astype(int)


@pytest.mark.parametrize("bad", [{"sigma": -1.0}, {"sigma": float("nan")}, {"exact": False}])
def test_nadaraya_watson_exact_predicts_with_its_fitted_parameters(bad):
    X, y = _data()
    nw = NadarayaWatsonClassifier(exact=True).fit(X, y)
    ref = nw.predict_proba(X[:5])
    nw.set_params(**bad)
    np.testing.assert_array_equal(nw.predict_proba(X[:5]), ref)


@pytest.mark.parametrize("bad", [{"sigma": -1.0}, {"n_components": 0}, {"sampler": "nope"}])
def test_nadaraya_watson_batch_fit_predicts_with_its_fitted_parameters(bad):
    X, y = _data()
    kw = dict(method="sderf", fit_on="batch", n_components=16, random_state=0)
    nw = NadarayaWatsonClassifier(**kw).fit(X, y)
    ref = nw.predict_proba(X[:5])
    nw.set_params(**bad)
    np.testing.assert_array_equal(nw.predict_proba(X[:5]), ref)


def test_gp_classifier_probabilities_follow_the_fitted_draws():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 2))
    y = np.digitize(X[:, 0], [-0.4, 0.4])  # 3 classes
    clf = RandomFeatureGPClassifier(TrigRF(16), n_samples=4, random_state=0).fit(X, y)
    ref = clf.predict_proba(X)
    clf.set_params(n_samples=1000)
    np.testing.assert_array_equal(clf.predict_proba(X), ref)
    clf.set_params(n_samples="many")
    np.testing.assert_array_equal(clf.predict_proba(X), ref)


@pytest.mark.parametrize("mixture", ["zero_one", "gaussian"])
@pytest.mark.parametrize(
    "bad, name", [({"n_lambda": -1}, "n_lambda"), ({"n_features": 0}, "n_features")]
)
def test_clustered_hybrid_redraw_checks_its_parameters_by_name(mixture, bad, name):
    X = np.random.default_rng(0).standard_normal((30, 3)) * 0.5
    c = ClusteredHybridRF(4, n_lambda=2, mixture=mixture, random_state=0).fit(X)
    Z = c.transform(X)
    c.set_params(**bad)
    with pytest.raises(ValueError, match=name):
        c.redraw(1)
    c.set_params(n_lambda=2, n_features=4)
    np.testing.assert_array_equal(c.transform(X), Z)  # the failed redraw changed nothing


@pytest.mark.parametrize("est_cls", [RandomFeatureRidge, RandomFeatureGPClassifier])
def test_weighted_fit_of_a_pandas_output_pipeline_map(est_cls):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((80, 3))
    y = np.sin(X[:, 0]) if est_cls is RandomFeatureRidge else (X[:, 0] > 0).astype(int)
    w = rng.integers(1, 3, 80)

    def pipe():
        return make_pipeline(StandardScaler(), GERF(n_features=32, random_state=0))

    method = "predict" if est_cls is RandomFeatureRidge else "predict_proba"
    ref = est_cls(pipe(), random_state=0).fit(X, y, sample_weight=w)
    with sklearn.config_context(transform_output="pandas"):
        got = est_cls(pipe(), random_state=0).fit(X, y, sample_weight=w)
        got = getattr(got, method)(X)  # in the context the map was fitted in
    got2 = est_cls(pipe().set_output(transform="pandas"), random_state=0)
    got2 = getattr(got2.fit(X, y, sample_weight=w), method)(X)
    for pred in (got, got2):
        np.testing.assert_allclose(pred, getattr(ref, method)(X), atol=1e-10)


@pytest.mark.parametrize(
    "make, prefix",
    [
        (lambda fm: RandomFeatureRidge(fm, alpha=1e-17, solver="dual"), "RandomFeatureRidge"),
        (
            lambda fm: RandomFeatureGPRegressor(fm, noise=1e-17, solver="dual"),
            "RandomFeatureGPRegressor",
        ),
    ],
)
def test_solver_failures_name_the_estimator_and_its_parameter(make, prefix):
    from kernelkit.features import RandomFourierFeatures

    rng = np.random.default_rng(0)
    X = np.repeat(rng.standard_normal((5, 2)), 20, axis=0)  # 5 distinct rows, 100 samples
    est = make(RandomFourierFeatures(n_features=400, random_state=0))
    name = "alpha" if prefix == "RandomFeatureRidge" else "noise"
    with pytest.raises(np.linalg.LinAlgError, match=rf"^{prefix}\({name}=1e-17\): Cholesky"):
        est.fit(X, np.sin(X[:, 0]))
