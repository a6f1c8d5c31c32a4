"""NadarayaWatsonClassifier (FAVOR# Sec. 5.2): contract, exactness, stability, accuracy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernelkit.estimators import NadarayaWatsonClassifier
from kernelkit.estimators._methods import DATA_DEPENDENT, FEATURE_MAPS, resolve_method
from kernelkit.estimators.nadaraya_watson import log_features
from kernelkit.features import HyperbolicRF

METHODS = ["trig", "positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf"]


def _expected_failed_checks(est):
    failed = {}
    if not est.exact and est.fit_on == "batch" and resolve_method(est.method) in DATA_DEPENDENT:
        failed["check_methods_subset_invariance"] = (
            "fit_on='batch' (the FAVOR# App. B.2 protocol) fits the data-dependent "
            "feature parameters on the query batch, so a prediction depends on the other "
            "queries by design; fit_on='train' passes this check."
        )
    return failed


@parametrize_with_checks(
    [
        NadarayaWatsonClassifier(),
        NadarayaWatsonClassifier(fit_on="batch"),
        NadarayaWatsonClassifier(exact=True),
        NadarayaWatsonClassifier(method="trig"),
        NadarayaWatsonClassifier(method="positive", n_components=32),
        NadarayaWatsonClassifier(method="hyperbolic", n_components=16),
        NadarayaWatsonClassifier(method="gerf", fit_on="train"),
        NadarayaWatsonClassifier(method="saderf", fit_on="train"),
        NadarayaWatsonClassifier(method="aderf", fit_on="train"),
        NadarayaWatsonClassifier(method="aderf", fit_on="batch"),
    ],
    expected_failed_checks=_expected_failed_checks,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


# ---------------------------------------------------------------- data
def _split(loader, n_test=40, seed=0):
    X, y = loader(return_X_y=True)
    idx = np.random.default_rng(seed).permutation(len(X))
    te, tr = idx[:n_test], idx[n_test:]
    sc = StandardScaler().fit(X[tr])
    return sc.transform(X[tr]), y[tr], sc.transform(X[te]), y[te]


def _direct_exact(Xtr, ytr, Xte, sigma):
    """r* = sum_i exp(-sigma^2 |u* - u_i|^2 / 2) r_i, straight from the paper's formula."""
    classes = np.unique(ytr)
    K = np.exp(-0.5 * cdist(sigma * Xte, sigma * Xtr, "sqeuclidean"))
    r = np.stack([K[:, ytr == c].sum(axis=1) for c in classes], axis=1)
    return classes[r.argmax(axis=1)], r


# ---------------------------------------------------------------- exact kernel
@pytest.mark.parametrize("loader", [load_iris, load_wine])
@pytest.mark.parametrize("sigma", [0.1, 0.5, 2.0])
def test_exact_matches_direct_numpy(loader, sigma):
    Xtr, ytr, Xte, _ = _split(loader)
    clf = NadarayaWatsonClassifier(exact=True, sigma=sigma).fit(Xtr, ytr)
    pred, r = _direct_exact(Xtr, ytr, Xte, sigma)
    np.testing.assert_array_equal(clf.predict(Xte), pred)
    np.testing.assert_allclose(clf.predict_proba(Xte), r / r.sum(1, keepdims=True), rtol=1e-10)
    np.testing.assert_allclose(clf.decision_function(Xte), r / r.sum(1, keepdims=True), rtol=1e-10)


def test_exact_large_sigma_is_one_nearest_neighbour():
    Xtr, ytr, Xte, _ = _split(load_wine)
    clf = NadarayaWatsonClassifier(exact=True, sigma=1e4).fit(Xtr, ytr)
    knn = KNeighborsClassifier(1).fit(Xtr, ytr)
    np.testing.assert_array_equal(clf.predict(Xte), knn.predict(Xte))


@pytest.mark.parametrize("loader", [load_iris, load_wine])
def test_exact_accuracy_is_high(loader):
    Xtr, ytr, Xte, yte = _split(loader)
    assert NadarayaWatsonClassifier(exact=True, sigma=1.0).fit(Xtr, ytr).score(Xte, yte) > 0.85


# ---------------------------------------------------------------- random features
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("fit_on", ["batch", "train"])
def test_stabilised_scores_equal_direct_random_feature_estimate(method, fit_on):
    """decision_function == normalised (K_hat R) with K_hat from the feature map itself."""
    Xtr, ytr, Xte, _ = _split(load_iris)
    sigma, M, seed = 0.7, 32, 3
    clf = NadarayaWatsonClassifier(
        method=method, n_components=M, sigma=sigma, random_state=seed, fit_on=fit_on
    ).fit(Xtr, ytr)
    fm = FEATURE_MAPS[method](
        n_features=M // 2 if method == "hyperbolic" else M,  # M output columns
        kernel="gaussian",
        lengthscale=1 / sigma,
        sampler="orthogonal",
        random_state=seed,
    )
    if method in DATA_DEPENDENT and fit_on == "batch":
        fm.fit(Xte, Y=Xtr)  # x side: queries, y side: training points
    else:
        fm.fit(Xtr)
    R = (ytr[:, None] == np.unique(ytr)[None, :]).astype(float)
    r = fm.approx_kernel(Xte, Xtr) @ R
    np.testing.assert_allclose(
        clf.decision_function(Xte), r / np.abs(r).sum(1, keepdims=True), rtol=1e-8, atol=1e-12
    )
    np.testing.assert_array_equal(clf.predict(Xte), np.unique(ytr)[r.argmax(1)])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("loader", [load_iris, load_wine])
def test_random_features_agree_with_exact_at_large_M(method, loader):
    Xtr, ytr, Xte, _ = _split(loader)
    exact = NadarayaWatsonClassifier(exact=True, sigma=0.5).fit(Xtr, ytr).predict(Xte)
    agree = [
        np.mean(
            NadarayaWatsonClassifier(method=method, n_components=4096, sigma=0.5, random_state=s)
            .fit(Xtr, ytr)
            .predict(Xte)
            == exact
        )
        for s in range(3)
    ]
    assert np.mean(agree) >= 0.9, agree


def test_accuracy_iris_and_digits():
    Xtr, ytr, Xte, yte = _split(load_iris)
    acc = np.mean(
        [
            NadarayaWatsonClassifier(n_components=128, sigma=1.0, random_state=s)
            .fit(Xtr, ytr)
            .score(Xte, yte)
            for s in range(5)
        ]
    )
    assert acc > 0.85
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    idx = np.random.default_rng(0).permutation(len(X))
    te, tr = idx[:400], idx[400:]
    assert (
        NadarayaWatsonClassifier(exact=True, sigma=1.0).fit(X[tr], y[tr]).score(X[te], y[te]) > 0.95
    )
    sderf = NadarayaWatsonClassifier(n_components=1024, sigma=1.0, random_state=0)
    assert sderf.fit(X[tr], y[tr]).score(X[te], y[te]) > 0.75


@pytest.mark.parametrize("method", ["saderf", "aderf"])
def test_asymmetric_methods_accepted(method):
    Xtr, ytr, Xte, yte = _split(load_wine)
    clf = NadarayaWatsonClassifier(method=method, n_components=128, sigma=0.5, random_state=0)
    assert clf.fit(Xtr, ytr).score(Xte, yte) > 0.8


@pytest.mark.parametrize("method", ["trig", "positive", "hyperbolic"])
def test_fit_on_irrelevant_without_data_dependent_parameters(method):
    Xtr, ytr, Xte, _ = _split(load_iris)
    a = NadarayaWatsonClassifier(method=method, random_state=1).fit(Xtr, ytr)
    b = NadarayaWatsonClassifier(method=method, random_state=1, fit_on="batch").fit(Xtr, ytr)
    np.testing.assert_array_equal(a.decision_function(Xte), b.decision_function(Xte))
    assert a.feature_map_ is not None


def test_batch_mode_fits_on_queries_train_mode_on_training_set():
    Xtr, ytr, Xte, _ = _split(load_iris)
    batch = NadarayaWatsonClassifier(random_state=0, fit_on="batch").fit(Xtr, ytr)
    train = NadarayaWatsonClassifier(random_state=0).fit(Xtr, ytr)  # the default
    assert train.fit_on == "train"
    assert batch.feature_map_ is None and train.feature_map_ is not None
    np.testing.assert_allclose(
        train.feature_map_.A_,
        FEATURE_MAPS["sderf"](
            n_features=64, kernel="gaussian", sampler="orthogonal", random_state=0
        )
        .fit(Xtr)
        .A_,
    )
    # row-wise in train mode, batch-dependent in batch mode
    np.testing.assert_allclose(train.decision_function(Xte[:5]), train.decision_function(Xte)[:5])
    assert not np.allclose(batch.decision_function(Xte[:5]), batch.decision_function(Xte)[:5])


# ---------------------------------------------------------------- seeds
@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_predictions(method):
    Xtr, ytr, Xte, _ = _split(load_wine)

    def dec(rs):
        return (
            NadarayaWatsonClassifier(method=method, n_components=16, random_state=rs)
            .fit(Xtr, ytr)
            .decision_function(Xte)
        )

    np.testing.assert_array_equal(dec(5), dec(5))
    assert not np.allclose(dec(5), dec(6))
    clf = NadarayaWatsonClassifier(method=method, n_components=16).fit(Xtr, ytr)  # None
    np.testing.assert_array_equal(clf.decision_function(Xte), clf.decision_function(Xte))
    gen = NadarayaWatsonClassifier(
        method=method, n_components=16, random_state=np.random.default_rng(0)
    )
    np.testing.assert_array_equal(gen.fit(Xtr, ytr).predict(Xte), gen.predict(Xte))


# ---------------------------------------------------------------- numerical stability
@pytest.mark.parametrize("method", [*METHODS, "exact"])
@pytest.mark.parametrize("sigma", [1e-3, 1e2, 1e4])
def test_no_nan_for_large_sigma_and_norms(method, sigma):
    Xtr, ytr, Xte, _ = _split(load_wine)
    Xtr, Xte = Xtr * 100.0, Xte * 100.0
    kw = {"exact": True} if method == "exact" else {"method": method}
    clf = NadarayaWatsonClassifier(sigma=sigma, n_components=32, random_state=0, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        clf.fit(Xtr, ytr)
        dec, proba, pred = clf.decision_function(Xte), clf.predict_proba(Xte), clf.predict(Xte)
    assert np.isfinite(dec).all() and np.isfinite(proba).all()
    np.testing.assert_allclose(proba.sum(1), 1.0)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(1)], pred)
    if method in ("exact", "sderf") and sigma >= 1e2:  # nearest-neighbour regime
        knn = KNeighborsClassifier(1).fit(Xtr, ytr).predict(Xte)
        assert np.mean(pred == knn) > (0.99 if method == "exact" else 0.5)


def test_positive_scores_are_not_lost_to_underflow():
    """At sigma = 30 every kernel value underflows in a direct computation; the
    stabilised scores still pick the nearest training point's class."""
    Xtr = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    ytr = np.array([0, 1, 2])
    Xte = np.array([[9.0, 1.0], [1.0, 8.0], [0.5, 0.5]])
    for method in ["positive", "gerf", "sderf", "aderf", "saderf", "hyperbolic"]:
        clf = NadarayaWatsonClassifier(
            method=method, sigma=30.0, n_components=256, random_state=0
        ).fit(Xtr, ytr)
        assert np.isfinite(clf.decision_function(Xte)).all()
    exact = NadarayaWatsonClassifier(exact=True, sigma=30.0).fit(Xtr, ytr)
    np.testing.assert_array_equal(exact.predict(Xte), [1, 2, 0])


def test_hyperbolic_log_features_are_exact():
    X = np.random.default_rng(0).normal(size=(20, 3))
    fm = HyperbolicRF(n_features=8, kernel="gaussian", lengthscale=0.5, random_state=0).fit(X)
    np.testing.assert_allclose(log_features(fm, X, "x"), np.log(fm.transform(X)), rtol=1e-10)
    big = X * 1e3  # base of transform_scaled underflows here, the exact logs do not
    assert np.isfinite(log_features(fm, big, "x")).all()


def test_predict_proba_with_negative_scores():
    class Fixed(NadarayaWatsonClassifier):
        def _scores(self, X):
            return np.array([[-1.0, -2.0, -3.0], [0.0, 0.0, 0.0], [1.0, -1.0, 2.0]])

    clf = Fixed(method="trig").fit(np.eye(3), [0, 1, 2])
    P = clf.predict_proba(np.eye(3))
    np.testing.assert_allclose(P, [[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [1 / 3, 0, 2 / 3]])
    np.testing.assert_array_equal(P.argmax(1), clf.predict(np.eye(3)))
    np.testing.assert_allclose(clf.decision_function(np.eye(3))[2], [0.25, -0.25, 0.5])


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"method": "foo"}, "Unknown method"),
        ({"sigma": 0.0}, "sigma"),
        ({"sigma": np.inf}, "sigma"),
        ({"n_components": 0}, "n_components"),
        ({"fit_on": "test"}, "fit_on"),
        ({"exact": "no"}, "exact"),
    ],
)
def test_bad_parameters(params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        NadarayaWatsonClassifier(**params).fit(np.eye(3), [0, 1, 1])


@pytest.mark.parametrize("method", ["gerf", "saderf", "aderf", "sderf"])
def test_default_predictions_do_not_depend_on_the_batch(method):
    """With the default fit_on="train", a point's scores are the same alone, in a batch
    and in another batch (scikit-learn's subset invariance)."""
    Xtr, ytr, Xte, _ = _split(load_iris)
    clf = NadarayaWatsonClassifier(method=method, n_components=32, random_state=0).fit(Xtr, ytr)
    whole = clf.predict_proba(Xte)
    alone = np.vstack([clf.predict_proba(Xte[i : i + 1]) for i in range(5)])
    np.testing.assert_allclose(alone, whole[:5], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(clf.predict_proba(Xte[::-1])[::-1], whole, rtol=1e-10, atol=1e-12)
