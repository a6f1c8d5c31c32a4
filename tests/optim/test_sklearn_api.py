"""BoundLogisticRegression: scikit-learn contract, objective definition, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from kernelkit.optim import BoundLogisticRegression, logistic_objective


@parametrize_with_checks(
    [
        BoundLogisticRegression(max_epochs=20, batch_size=50, random_state=0),
        BoundLogisticRegression(solver="bound", max_epochs=20, random_state=0),
        BoundLogisticRegression(
            solver="lspfb", rank=3, low_rank="exact", max_epochs=10, batch_size=50, random_state=0
        ),
        BoundLogisticRegression(solver="sgd", max_epochs=20, batch_size=50, random_state=0),
    ]
)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


# ---------------------------------------------------------------- data and the optimum
def _data(name):
    loader = {"iris": load_iris, "cancer": load_breast_cancer}[name]
    X, y = loader(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _sklearn_opt(X, y, alpha, fit_intercept=True):
    sk = LogisticRegression(
        C=1.0 / (alpha * len(y)), tol=1e-12, max_iter=10000, fit_intercept=fit_intercept
    ).fit(X, y)
    return sk, logistic_objective(sk.coef_, sk.intercept_, X, y, alpha)


@pytest.mark.parametrize("name", ["iris", "cancer"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_bound_solver_reaches_sklearn_optimum(name, fit_intercept):
    """Same objective: full-batch bound MM converges to LogisticRegression(C = 1/(alpha T))."""
    X, y = _data(name)
    alpha = 1e-2
    sk, f_star = _sklearn_opt(X, y, alpha, fit_intercept)
    clf = BoundLogisticRegression(
        solver="bound",
        alpha=alpha,
        max_epochs=300,
        tol=1e-10,  # ||grad L|| <= 1e-10 ||grad L(0)||
        fit_intercept=fit_intercept,
        cg_rtol=1e-10,
    ).fit(X, y)
    assert np.all(np.diff(clf.loss_history_) <= 1e-14)  # monotone (eta = 1)
    assert clf.loss_history_[-1] - f_star < 1e-9
    assert clf.loss_history_[-1] - f_star > -1e-10  # f_star is the optimum
    assert clf.objective(X, y) == pytest.approx(clf.loss_history_[-1], rel=1e-12)
    np.testing.assert_allclose(clf.coef_, sk.coef_, atol=2e-4)
    if fit_intercept and len(sk.classes_) == 2:
        np.testing.assert_allclose(clf.intercept_, sk.intercept_, atol=2e-4)
    np.testing.assert_allclose(clf.predict_proba(X), sk.predict_proba(X), atol=1e-4)


@pytest.mark.parametrize(("name", "batch_size", "eta0"), [("iris", 32, 2.0), ("cancer", 100, 2.0)])
@pytest.mark.parametrize(
    ("linear_solver", "preconditioner"), [("dense", None), ("cg", "kronecker"), ("cg", "jacobi")]
)
def test_spfb_converges_to_sklearn_optimum(name, batch_size, eta0, linear_solver, preconditioner):
    """Mini-batch SPFB (mean form, eta0 / (1 + t / t0)) approaches scikit-learn's optimum.

    SPFB's rate is O(1/t) (Thm 2), so the relative gap after 100 epochs is only ~1e-2
    and it keeps falling between epoch 10 and 100.
    """
    X, y = _data(name)
    alpha = 1e-2
    sk, f_star = _sklearn_opt(X, y, alpha)
    clf = BoundLogisticRegression(
        solver="spfb",
        alpha=alpha,
        batch_size=batch_size,
        max_epochs=100,
        tol=None,
        schedule="inverse_t0",
        eta0=eta0,
        linear_solver=linear_solver,
        cg_rtol=1e-8,
        preconditioner=preconditioner,
        random_state=0,
    ).fit(X, y)
    gaps = np.asarray(clf.loss_history_) - f_star
    assert np.all(gaps >= -1e-12)
    assert gaps[-1] < 1e-2 * f_star, gaps[-1]
    assert gaps[-1] < 0.6 * gaps[10] and gaps[10] < 0.1 * gaps[0]
    assert np.mean(clf.predict(X) == sk.predict(X)) >= 0.98


@pytest.mark.parametrize(
    ("kw", "ratio"),
    [
        ({"solver": "lspfb", "rank": 4, "low_rank": "exact"}, 0.1),
        ({"solver": "lspfb", "rank": 2, "low_rank": "paper"}, 0.2),  # looser D (derivations page)
        ({"solver": "lspfb", "rank": 2, "low_rank": "eig"}, 0.2),
        ({"solver": "sgd"}, 0.1),
    ],
)
def test_lspfb_and_sgd_approach_the_optimum(kw, ratio):
    X, y = _data("iris")
    _, f_star = _sklearn_opt(X, y, 1e-2)
    clf = BoundLogisticRegression(
        alpha=1e-2,
        batch_size=30,
        max_epochs=20,
        tol=None,
        schedule="inverse_t0",
        eta0=2.0,
        random_state=0,
        **kw,
    ).fit(X, y)
    gap0, gap = clf.loss_history_[0] - f_star, clf.loss_history_[-1] - f_star
    assert 0 <= gap < ratio * gap0, (gap, gap0)


# ---------------------------------------------------------------- API details
def test_histories_callback_and_attributes():
    X, y = _data("iris")
    seen = []

    def cb(est, info):
        seen.append(info)
        return info["epoch"] >= 4

    clf = BoundLogisticRegression(
        max_epochs=50, batch_size=40, tol=None, callback=cb, random_state=0
    ).fit(X, y)
    assert clf.n_iter_ == 4 and len(seen) == 4
    assert len(clf.loss_history_) == len(clf.time_history_) == len(clf.grad_norm_history_) == 5
    assert clf.loss_history_[0] == pytest.approx(np.log(3))  # W = 0: uniform probabilities
    assert clf.time_history_[0] == 0.0 and np.all(np.diff(clf.time_history_) >= 0)
    assert seen[-1]["loss"] == clf.loss_history_[-1]
    assert seen[-1]["grad_norm"] == clf.grad_norm_history_[-1]
    # 4 mini-batch steps per stochastic epoch, none in the full-batch finishing phase
    s = clf.switch_epoch_
    assert [i["phase"] for i in seen] == ["stochastic"] * s + ["full"] * (4 - s)
    assert seen[-1]["steps"] == clf.t_ == 4 * s
    assert clf.coef_.shape == (3, 4) and clf.intercept_.shape == (3,)
    P = clf.predict_proba(X)
    np.testing.assert_allclose(P.sum(1), 1.0)
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(X)), P, rtol=1e-12)
    np.testing.assert_array_equal(clf.classes_[P.argmax(1)], clf.predict(X))


def test_binary_shapes_and_probabilities():
    X, y = _data("cancer")
    clf = BoundLogisticRegression(max_epochs=5, batch_size=100, random_state=0).fit(X, y)
    assert clf.coef_.shape == (1, X.shape[1]) and clf.intercept_.shape == (1,)
    d = clf.decision_function(X)
    assert d.shape == (len(X),)
    np.testing.assert_allclose(clf.predict_proba(X)[:, 1], 1 / (1 + np.exp(-d)), rtol=1e-12)
    np.testing.assert_allclose(np.exp(clf.predict_log_proba(X)), clf.predict_proba(X), rtol=1e-10)


def test_partial_fit_and_warm_start():
    X, y = _data("iris")
    clf = BoundLogisticRegression(batch_size=50, random_state=0)
    with pytest.raises(ValueError, match="classes"):
        clf.partial_fit(X, y)
    for _ in range(3):
        clf.partial_fit(X, y, classes=[0, 1, 2])
    assert clf.n_iter_ == 3 and clf.t_ == 9 and len(clf.loss_history_) == 4
    with pytest.raises(ValueError, match="not in classes_"):
        clf.partial_fit(X, np.where(y == 2, 7, y))
    with pytest.raises(ValueError, match="differ"):
        clf.partial_fit(X, y, classes=[0, 1, 5])
    with pytest.raises(ValueError, match="features"):
        clf.partial_fit(X[:, :2], y)
    a = BoundLogisticRegression(max_epochs=3, tol=None, warm_start=True, random_state=0)
    a.fit(X, y)
    f3 = a.loss_history_[-1]
    a.fit(X, y)
    assert a.n_iter_ == 6 and len(a.loss_history_) == 7 and a.loss_history_[-1] <= f3


def test_objective_function_matches_sklearn_binary_mapping():
    """Binary: alpha = 1/(C T) too (one coef row, (alpha/2)||w||^2)."""
    X, y = _data("cancer")
    sk, f_star = _sklearn_opt(X, y, 1e-2)
    z = X @ sk.coef_[0] + sk.intercept_[0]
    direct = np.mean(np.logaddexp(0, -np.where(y == 1, 1, -1) * z)) + 0.5e-2 * np.sum(sk.coef_**2)
    assert f_star == pytest.approx(direct, rel=1e-13)
    with pytest.raises(ValueError, match="not in classes"):
        logistic_objective(sk.coef_, sk.intercept_, X, y + 5, 1e-2, classes=[0, 1])


@pytest.mark.parametrize("solver", ["spfb", "sgd", "lspfb", "bound"])
def test_float32_in_float32_out_same_path(solver):
    """float32 data: float32 coef_ / probabilities, the float64 run's path up to rounding."""
    X, y = _data("iris")
    kw = dict(
        solver=solver, alpha=1e-2, batch_size=50, max_epochs=8, tol=None, rank=4, random_state=0
    )
    c64 = BoundLogisticRegression(**kw).fit(X, y)
    c32 = BoundLogisticRegression(**kw).fit(X.astype(np.float32), y)
    assert c32.coef_.dtype == c32.intercept_.dtype == np.float32
    assert c64.coef_.dtype == np.float64
    assert c32.predict_proba(X.astype(np.float32)).dtype == np.float32
    np.testing.assert_allclose(c32.coef_, c64.coef_, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(c32.loss_history_, c64.loss_history_, rtol=1e-5)


def test_defaults_truncated_cg_and_exact_low_rank(monkeypatch):
    """SPFB by default: CG (also for small d) capped at 3 iterations; LSPFB: "exact"."""
    from kernelkit.optim import logistic, solvers
    from kernelkit.optim import low_rank as lr

    X, y = _data("iris")
    seen = []
    real_spfb, real_lspfb = solvers.spfb_step, lr.lspfb_step

    def spy(*a, **k):
        seen.append((k["linear_solver"], k["maxiter"]))
        return real_spfb(*a, **k)

    def spy_l(*a, **k):
        seen.append(k["variant"])
        return real_lspfb(*a, **k)

    monkeypatch.setattr(solvers, "spfb_step", spy)
    monkeypatch.setattr(lr, "lspfb_step", spy_l)
    BoundLogisticRegression(max_epochs=1, batch_size=75).fit(X, y)
    assert set(seen) == {("cg", logistic._SPFB_CG_MAXITER)} and logistic._SPFB_CG_MAXITER == 3
    seen.clear()
    BoundLogisticRegression(solver="bound", max_epochs=1).fit(X, y)  # d = 15: dense
    assert set(seen) == {("dense", 500)}
    seen.clear()
    BoundLogisticRegression(solver="lspfb", rank=2, max_epochs=1, batch_size=75).fit(X, y)
    assert set(seen) == {"exact"}


# ---------------------------------------------------------------- bad input
def test_bad_input_errors():
    X, y = _data("iris")
    with pytest.raises(ValueError, match="class"):
        BoundLogisticRegression().fit(X, np.zeros(len(X)))
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        BoundLogisticRegression().fit(Xn, y)
    with pytest.raises(ValueError, match="infinity"):
        BoundLogisticRegression().fit(np.where(Xn != Xn, np.inf, Xn), y)
    with pytest.raises(ValueError, match="rank"):
        BoundLogisticRegression(solver="lspfb", rank=16).fit(X, y)  # d = 3 x 5 = 15
    with pytest.raises(ValueError, match="rank"):
        BoundLogisticRegression(solver="lspfb", rank=11, fit_intercept=False).fit(X[:, :1], y == 0)
    for kw, exc in [
        ({"solver": "adam"}, ValueError),
        ({"alpha": -1.0}, ValueError),
        ({"alpha": "big"}, TypeError),
        ({"batch_size": 0}, ValueError),
        ({"schedule": "cos"}, ValueError),
        ({"linear_solver": "lu"}, ValueError),
        ({"low_rank": "svd"}, ValueError),
        ({"preconditioner": "ilu"}, ValueError),
        ({"callback": 3}, TypeError),
        ({"max_epochs": 2.5}, TypeError),
        ({"reduction": "max"}, ValueError),
    ]:
        with pytest.raises(exc):
            BoundLogisticRegression(**kw).fit(X, y)
    clf = BoundLogisticRegression(max_epochs=2).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        clf.predict(X[:, :3])
    with pytest.raises(ValueError, match="NaN"):
        clf.predict(Xn)
    with pytest.raises(ValueError, match="not in classes_"):
        clf.objective(X, y + 1)
    with pytest.raises(ValueError, match="not in classes_"):
        clf.score(X, np.where(y == 0, 9, y))
    assert clf.score(X, y) == np.mean(clf.predict(X) == y)


def test_divergence_is_reported():
    X, y = _data("iris")
    with pytest.raises(FloatingPointError, match="diverged"):
        BoundLogisticRegression(
            solver="sgd", schedule="constant", eta0=1e308, max_epochs=3, batch_size=10
        ).fit(X * 1e3, y)
