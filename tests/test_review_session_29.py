"""Review of session 29's changes: older pickles of the estimators that now keep fitted
values, pair_statistics with NumPy scalar and negative coef0, partial_fit's default t0
after fit, the GP classifier's solver message, and the partial_fit restore on a failure
mid-epoch."""

import pickle
import warnings

import numpy as np
import pytest

from kernelkit.estimators import NadarayaWatsonClassifier, RandomFeatureGPClassifier
from kernelkit.features import TrigRF
from kernelkit.features.dot_product import pair_statistics
from kernelkit.optim import BoundLogisticRegression


def _as_older_pickle(est, *names):
    """``est`` as a model pickled before ``names`` were kept loads (without them)."""
    state = est.__getstate__()
    for name in names:
        state.pop(name, None)
    old = type(est).__new__(type(est))
    old.__setstate__(state)
    return pickle.loads(pickle.dumps(old))


def test_older_nadaraya_watson_pickle_predicts():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    y = (X[:, 0] > 0).astype(int)
    for kw in ({"exact": True}, {"method": "sderf", "n_components": 16, "random_state": 0}):
        nw = NadarayaWatsonClassifier(**kw).fit(X, y)
        old = _as_older_pickle(nw, "_fitted")
        np.testing.assert_array_equal(old.predict_proba(X[:5]), nw.predict_proba(X[:5]))


def test_older_gp_classifier_pickle_predicts():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 2))
    y = np.digitize(X[:, 0], [-0.4, 0.4])
    clf = RandomFeatureGPClassifier(TrigRF(16), n_samples=4, random_state=0).fit(X, y)
    old = _as_older_pickle(clf, "_n_samples")
    np.testing.assert_array_equal(old.predict_proba(X), clf.predict_proba(X))


@pytest.mark.parametrize("c", [np.float64(1.0), np.float64(0.0), np.array(1.0), -1.0, 2])
def test_pair_statistics_takes_scalar_coef0_of_any_kind(c):
    X = np.array([[1.0, 2.0], [0.5, -1.0]])
    G, N, S = pair_statistics(X, None, c)
    c = float(c)
    np.testing.assert_allclose(G, X @ X.T + c)
    n = (X * X).sum(1) + c
    np.testing.assert_allclose(N, n[:, None] * n[None, :])
    np.testing.assert_allclose(S, (X * X) @ (X * X).T + c * c)


def test_partial_fit_after_fit_keeps_its_first_calls_t0():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 3))
    y = (X[:, 0] > 0).astype(int)
    kw = dict(solver="sgd", batch_size=10, shuffle=False, random_state=0, max_epochs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = BoundLogisticRegression(**kw).fit(X[:100], y[:100])
        b = BoundLogisticRegression(**kw).fit(X[:100], y[:100])
    a.partial_fit(X[:20], y[:20])
    b.partial_fit(X[:20], y[:20])
    a.partial_fit(X, y)  # 12 steps in one call ...
    for s in range(0, 120, 10):  # ... or one per call
        b.partial_fit(X[s : s + 10], y[s : s + 10])
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=0, atol=1e-12)


def test_gp_classifier_solver_error_says_to_lower_alpha():
    rng = np.random.default_rng(0)
    X = np.repeat(rng.standard_normal((5, 2)), 20, axis=0)
    y = (X[:, 0] > 0).astype(int)
    from kernelkit.features import RandomFourierFeatures

    clf = RandomFeatureGPClassifier(
        RandomFourierFeatures(n_features=400, random_state=0), alpha=1e30, solver="dual"
    )
    with pytest.raises(np.linalg.LinAlgError, match=r"alpha=1e\+30.*lower alpha"):
        clf.fit(X, y)


def test_partial_fit_failing_mid_epoch_keeps_the_model():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 4))
    y = (X[:, 0] > 0).astype(int)
    m = BoundLogisticRegression(solver="sgd", random_state=0, batch_size=20, eta0=1.0)
    m.partial_fit(X, y, classes=[0, 1])
    coef, t, hist = m.coef_.copy(), m.t_, len(m.loss_history_)
    m.set_params(eta0=1e300)
    with pytest.raises((FloatingPointError, ValueError)):
        m.partial_fit(X * 1e3, y)
    assert m.t_ == t and len(m.loss_history_) == hist
    np.testing.assert_array_equal(m.coef_, coef)
