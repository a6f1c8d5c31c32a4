"""Solver steps (eq. 2.4-2.6): objective/gradient, MM monotonicity, mini-batch forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optim_helpers import mlr_features
from scipy.special import softmax
from sklearn.metrics import log_loss

from kernelkit.optim import (
    bound_step,
    multinomial_gradient,
    multinomial_objective,
    partition_bound,
    sgd_step,
    spfb_step,
    step_size,
)


def _problem(seed, m=50, p=4, n=3, scale=1.0):
    rng = np.random.default_rng(seed)
    X = np.hstack([rng.normal(size=(m, p - 1)) * scale, np.ones((m, 1))])
    y = rng.integers(0, n, size=m)
    y[: min(n, m)] = np.arange(min(n, m))
    return X, y, rng.normal(size=(p, n))


def test_objective_is_cross_entropy_plus_ridge():
    X, y, W = _problem(0)
    mask = np.array([1.0, 1.0, 1.0, 0.0])
    lam = 0.3
    ce = log_loss(y, softmax(X @ W, axis=1), labels=[0, 1, 2])
    expect = ce + 0.5 * lam * np.sum(W[:3] ** 2)
    assert multinomial_objective(W, X, y, lam, mask) == pytest.approx(expect, rel=1e-12)


def test_gradient_finite_differences():
    X, y, W = _problem(1)
    mask = np.array([1.0, 1.0, 1.0, 0.0])
    g = multinomial_gradient(W, X, y, 0.2, mask)
    h = 1e-6
    fd = np.zeros_like(W)
    for i in range(W.shape[0]):
        for a in range(W.shape[1]):
            E = np.zeros_like(W)
            E[i, a] = h
            fd[i, a] = (
                multinomial_objective(W + E, X, y, 0.2, mask)
                - multinomial_objective(W - E, X, y, 0.2, mask)
            ) / (2 * h)
    np.testing.assert_allclose(g, fd, atol=1e-8)


@settings(max_examples=40)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([1e-4, 1e-2, 1.0]),
    st.sampled_from([0.3, 3.0, 30.0]),
    st.sampled_from(["dense", "cg"]),
)
def test_full_batch_bound_step_never_increases_objective(seed, lam, scale, solver):
    """eq. 2.4 with eta = 1 minimises a majoriser, so L(W+) <= L(W) (also with truncated CG)."""
    rng = np.random.default_rng(seed)
    n, p, m = int(rng.integers(2, 6)), int(rng.integers(2, 6)), int(rng.integers(5, 40))
    X, y, W = _problem(seed, m=m, p=p, n=n, scale=scale)
    W *= rng.choice([0.0, 1.0, 5.0])
    mask = np.ones(p)
    mask[-1] = 0.0  # unpenalised intercept: curvature keeps lam I, still a majoriser
    f = multinomial_objective(W, X, y, lam, mask)
    for _ in range(3):
        W, _ = bound_step(W, X, y, lam, mask=mask, linear_solver=solver, rtol=1e-3, maxiter=5)
        f_new = multinomial_objective(W, X, y, lam, mask)
        assert f_new <= f + 1e-12 * max(1.0, abs(f))
        f = f_new


def test_full_batch_step_is_eq_2_4_with_sum_lambda():
    """Mean form on the whole set = eq. 2.4 with lam_sum = T lam (derivations page)."""
    X, y, W = _problem(2, m=12, p=3, n=3)
    T, lam = len(y), 0.05
    F = mlr_features(X, 3)
    theta = W.T.ravel()
    b = partition_bound(theta, F)
    f_y = F[np.arange(T), y]
    lam_sum = T * lam
    step = np.linalg.solve(
        b.sigma.sum(0) + lam_sum * np.eye(9), (b.mu - f_y).sum(0) + lam_sum * theta
    )
    W_new, _ = spfb_step(W, X, y, lam, 1.0, linear_solver="dense")
    np.testing.assert_allclose(W_new.T.ravel(), theta - step, rtol=1e-10, atol=1e-12)
    # reduction="sum" with lam_sum is the same step
    W_sum, _ = spfb_step(W, X, y, lam_sum, 1.0, reduction="sum", linear_solver="dense")
    np.testing.assert_allclose(W_sum, W_new, rtol=1e-10, atol=1e-12)


def test_single_sample_step_is_eq_2_5():
    X, y, W = _problem(3, m=1, p=3, n=4)
    y = np.array([2])
    lam, eta = 0.1, 0.7
    F = mlr_features(X, 4)
    theta = W.T.ravel()
    b = partition_bound(theta, F)
    grad = b.mu[0] - F[0, 2] + lam * theta
    expect = theta - eta * np.linalg.solve(b.sigma[0] + lam * np.eye(12), grad)
    for solver in ("dense", "cg"):
        W_new, _ = spfb_step(W, X, y, lam, eta, linear_solver=solver, rtol=1e-12)
        np.testing.assert_allclose(W_new.T.ravel(), expect, rtol=1e-8, atol=1e-10)


def test_cg_and_dense_steps_agree_and_warm_start_is_safe():
    X, y, W = _problem(4, m=80, p=6, n=4)
    Wd, _ = spfb_step(W, X, y, 1e-2, 0.5, linear_solver="dense")
    Wc, info = spfb_step(W, X, y, 1e-2, 0.5, linear_solver="cg", rtol=1e-12, maxiter=1000)
    np.testing.assert_allclose(Wc, Wd, rtol=1e-8, atol=1e-10)
    # a bad warm start (model value above that at 0) is discarded
    Wb, _ = spfb_step(
        W,
        X,
        y,
        1e-2,
        0.5,
        linear_solver="cg",
        rtol=1e-12,
        maxiter=1000,
        x0=-100 * info["direction"],
    )
    np.testing.assert_allclose(Wb, Wd, rtol=1e-7, atol=1e-9)


def test_sgd_step_is_gradient_step():
    X, y, W = _problem(5)
    W_new, info = sgd_step(W, X, y, 0.1, 0.3)
    np.testing.assert_allclose(W_new, W - 0.3 * multinomial_gradient(W, X, y, 0.1), rtol=1e-12)
    assert info["batch_loss"] == pytest.approx(multinomial_objective(W, X, y, 0.1))


def test_step_size_schedules():
    assert step_size("inverse", 2.0, 4) == 0.5
    assert step_size("inverse_t0", 2.0, 10, t0=10) == 1.0
    assert step_size("constant", 2.0, 100) == 2.0
    with pytest.raises(ValueError, match="schedule"):
        step_size("cosine", 1.0, 1)
    with pytest.raises(ValueError, match="reduction"):
        X, y, W = _problem(0)
        spfb_step(W, X, y, 1.0, reduction="max")


@pytest.mark.parametrize("where", ["X_nan", "W_inf", "overflow"])
def test_non_finite_inputs_are_rejected(where):
    from kernelkit.optim import lspfb_step, multinomial_partition_bound

    X, y, W = _problem(6, m=10)
    if where == "X_nan":
        X[3, 1] = np.nan
    elif where == "W_inf":
        W[0, 2] = np.inf
    else:
        W *= 1e308  # finite parameters, overflowing logits
    for call in (
        lambda: multinomial_partition_bound(W, X),
        lambda: spfb_step(W, X, y, 0.1),
        lambda: sgd_step(W, X, y, 0.1, 1.0),
        lambda: lspfb_step(W, X, y, 0.1, rank=2),
    ):
        with pytest.raises(ValueError, match="not finite"), np.errstate(all="ignore"):
            call()
