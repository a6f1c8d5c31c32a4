"""kernelkit.distributions tried by an independent tester with the user guide as the only
map: one regression test per defect found (each failed before its fix)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from kernelkit.distributions import (
    ConditionalMeanEmbedding,
    JointDistribution,
    KernelLogisticRegression,
    PolynomialJointDistribution,
    clipped_log_loss,
    holdout_select,
    second_moment_loss,
)


def _gaussian_pair(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))  # (n, 2)
    Y = 0.8 * X[:, :1] + 0.6 * rng.standard_normal((n, 1))  # (n, 1)
    return X, Y


@pytest.mark.parametrize("labels", ["int", "str"])
def test_holdout_select_passes_a_classifier_its_labels(labels):
    """``holdout_select(KernelLogisticRegression(), ..., X, y)`` with the classifier's own
    loss (``loss=None``) turned ``y`` into a float column: every fit warned about a
    column-vector y, ``classes_`` became floats, and string labels raised "Y must be
    numeric". The labels now reach the classifier as given, and the selected model is
    the one its own score picks on the same split."""
    X, Y = _gaussian_pair()
    y = (Y[:, 0] > 0).astype(int)
    if labels == "str":
        y = np.where(y == 1, "up", "down")
    grid = {"reg": [1e-3, 1e-1]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no DataConversionWarning
        res = holdout_select(KernelLogisticRegression(), grid, X, y, random_state=0)
    assert res.best_estimator.classes_.tolist() == np.unique(y).tolist()
    assert res.best_estimator.predict(X[:5]).dtype == y.dtype
    # the same split by hand: validation loss = -score of the fit on the other 4/5
    perm = np.random.default_rng(0).permutation(len(y))
    val, tr = perm[:40], perm[40:]
    for params, loss in res.results:
        est = KernelLogisticRegression(**params).fit(X[tr], y[tr])
        assert loss == pytest.approx(-est.score(X[val], y[val]), rel=1e-10)


def test_holdout_select_rejects_bad_classifier_labels():
    """Labels of the wrong shape or length name ``Y``; the second-moment loss, which
    needs conditional expectations, is refused for a classifier."""
    X, Y = _gaussian_pair()
    y = (Y[:, 0] > 0).astype(int)
    est = KernelLogisticRegression()
    with pytest.raises(ValueError, match="Y"):
        holdout_select(est, {"reg": [1e-3]}, X, np.c_[y, y])
    with pytest.raises(ValueError, match="Y"):
        holdout_select(est, {"reg": [1e-3]}, X, y[:-1])
    with pytest.raises(ValueError, match="second_moment"):
        holdout_select(est, {"reg": [1e-3]}, X, y, loss="second_moment", true_moment=lambda x: x)


@pytest.mark.parametrize("model", ["jdl", "cme"])
@pytest.mark.parametrize("form", ["array", "callable"])
def test_conditional_probability_needs_an_indicator(model, form):
    """``conditional_probability`` returned 2.0 for the "event" ``np.full(n, 2.0)`` and
    signed values for ``Y[:, 0]``: any numbers were averaged as if they were an
    indicator. An event must be boolean or 0/1 (a ValueError naming ``event``); a 0/1
    float indicator gives the boolean event's probability."""
    X, Y = _gaussian_pair()
    Est = JointDistribution if model == "jdl" else ConditionalMeanEmbedding
    fitted = Est(lengthscale_x=0.7, lengthscale_y=0.7).fit(X, Y)
    values = Y[:, 0] * 5.0  # not an indicator
    event = (lambda t: t[:, 0] * 5.0) if form == "callable" else values
    with pytest.raises(ValueError, match="event"):
        fitted.conditional_probability(event, X[:3])
    ind = Y[:, 0] <= 0.0
    ref = fitted.conditional_probability(ind, X[:3])
    got = fitted.conditional_probability(
        (lambda t: (t[:, 0] <= 0.0).astype(float)) if form == "callable" else ind * 1.0, X[:3]
    )
    np.testing.assert_array_equal(got, ref)
    # the weighted frequency of the event, from the conditional weights
    if model == "jdl":
        w = fitted.conditional_weights(X[:3])  # (3, n)
        np.testing.assert_allclose(ref, w @ ind, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("eta", [0.0, -1e-3, 1.0, 2.0, np.nan, "0.1"])
def test_clipped_log_loss_checks_eta(eta):
    """``eta`` of (32) was not checked: 0 gave an infinite loss with a divide-by-zero
    RuntimeWarning, a negative eta a NaN-free but meaningless value. It must lie in
    (0, 1)."""
    exc = TypeError if isinstance(eta, str) else ValueError
    with pytest.raises(exc, match="eta"):
        clipped_log_loss([0, 1], [0.2, -0.5], eta=eta)
    # inside (0, 1) the loss is the clipped formula of (32)
    expected = -0.5 * (np.log(0.8) + np.log(1e-6))
    assert clipped_log_loss([0, 1], [0.2, -0.5], eta=1e-6) == pytest.approx(expected)


@pytest.mark.parametrize("model", ["jdl", "cme"])
def test_conditional_probability_names_event_in_its_errors(model):
    """A wrong-length or non-numeric event was reported as a bad ``f`` (the argument of
    ``conditional_expectation``, which the user did not pass)."""
    X, Y = _gaussian_pair()
    Est = JointDistribution if model == "jdl" else ConditionalMeanEmbedding
    fitted = Est().fit(X, Y)
    with pytest.raises(ValueError, match=r"^event must give one value per training sample"):
        fitted.conditional_probability(np.ones(len(Y) - 1, dtype=bool), X[:2])
    with pytest.raises(ValueError, match=r"^a callable event|^event must give one value"):
        fitted.conditional_probability(lambda t: True, X[:2])
    with pytest.raises(TypeError, match=r"^event"):
        fitted.conditional_probability(np.array(["a"] * len(Y)), X[:2])


def test_losses_name_non_numeric_arguments():
    """Strings reached ``np.asarray(..., dtype=float64)`` and raised NumPy's "could not
    convert string to float" without the argument's name."""
    with pytest.raises(TypeError, match=r"^M_true"):
        second_moment_loss(np.array([["a"]]), np.ones((1, 1)))
    with pytest.raises(TypeError, match=r"^M_pred"):
        second_moment_loss(np.ones((1, 1)), [["a"]])
    with pytest.raises(TypeError, match=r"^proba"):
        clipped_log_loss([0, 1], ["a", "b"])


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        ({"reg": 1e-3}, r"param_grid\['reg'\] must be a list"),
        ({"reg": "1e-3"}, r"param_grid\['reg'\] must be a list"),
        ([1, 2], "param_grid must be a dict or a list of dicts"),
        (3, "param_grid must be a dict or a list of dicts"),
    ],
)
def test_holdout_select_names_a_malformed_grid(grid, match):
    """A scalar where a list of values belongs gave "'float' object is not iterable" (a
    string was even split into characters), a list of non-dicts "'int' object is not
    iterable"; scikit-learn's ``ParameterGrid`` refuses both by name."""
    X, Y = _gaussian_pair(n=50)
    with pytest.raises(TypeError, match=match):
        holdout_select(JointDistribution(), grid, X, Y)


@pytest.mark.parametrize(("threshold", "exc"), [("0.5", TypeError), (np.nan, ValueError)])
def test_holdout_select_checks_the_threshold(threshold, exc):
    """A string threshold raised NumPy's UFuncTypeError from ``Y <= threshold``, and NaN
    made every label False; both now name ``threshold``."""
    X, Y = _gaussian_pair(n=50)
    with pytest.raises(exc, match="threshold"):
        holdout_select(
            JointDistribution(), {"reg": [1e-3]}, X, Y, loss="classification", threshold=threshold
        )


def test_klr_that_stops_at_max_iter_warns():
    """``KernelLogisticRegression`` returned the iterate at ``max_iter`` silently: with
    reg = 1e-6 (nearly separable classes) even the default 500 iterations stop short
    (held-out loss (32) 0.074 against 0.065 after 5000), and nothing said so. A fit that
    converges stays silent."""
    X, Y = _gaussian_pair(n=300)
    y = Y[:, 0] > 0
    with pytest.warns(ConvergenceWarning, match="max_iter=5 "):
        clf = KernelLogisticRegression(reg=1e-6, lengthscale=0.5, max_iter=5).fit(X, y)
    assert clf.n_iter_ == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf = KernelLogisticRegression(reg=1e-1, max_iter=500).fit(X, y)
    assert clf.n_iter_ < 500


def test_sos_fit_at_reduced_accuracy_warns(monkeypatch):
    """A sum-of-squares fit whose solver stops at 'optimal_inaccurate' was accepted
    silently; 1 + h >= 0 may then hold only approximately, so it warns (naming the
    status and the remedies) and still returns the fit."""
    cp = pytest.importorskip("cvxpy")
    solve = cp.Problem.solve

    def inaccurate(self, *args, **kwargs):
        out = solve(self, *args, **kwargs)
        self._status = "optimal_inaccurate"
        return out

    rng = np.random.default_rng(6)
    X = rng.uniform(-1, 1, (80, 1))
    Y = X**2 + 0.1 * rng.standard_normal((80, 1))
    model = PolynomialJointDistribution(degree=2, reg=1e-3, constraint="positive")
    monkeypatch.setattr(cp.Problem, "solve", inaccurate)
    with pytest.warns(ConvergenceWarning, match="optimal_inaccurate"):
        model.fit(X, Y)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        exact = PolynomialJointDistribution(degree=2, reg=1e-3, constraint="positive").fit(X, Y)
    np.testing.assert_allclose(model.sos_gram_, exact.sos_gram_)
