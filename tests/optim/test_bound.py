"""Alg. B (eq. 2.3): the quadratic partition-function bound and its Kronecker form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from optim_helpers import log_z, mlr_features, moments, random_problem
from scipy.special import logsumexp, softmax

from kernelkit.optim import beta, multinomial_partition_bound, partition_bound


# ---------------------------------------------------------------- beta
def test_beta_values():
    u = np.array([0.0, 1e-3, 0.5, 2.0, 40.0, 1e3])
    np.testing.assert_allclose(beta(u[1:]), np.tanh(u[1:] / 2) / (2 * u[1:]), rtol=1e-14)
    assert beta(0.0) == 0.25
    assert beta(np.inf) == 0.0 and beta(-np.inf) == 0.0
    grid = np.linspace(-50, 50, 10001)
    b = beta(grid)
    np.testing.assert_array_equal(b, beta(-grid))  # even
    assert b.max() <= 0.25 and np.all(b > 0)


def test_beta_continuous_at_series_switch():
    eps = np.array([1e-4 * (1 - 1e-9), 1e-4 * (1 + 1e-9)])
    b = beta(eps)
    assert abs(b[0] - b[1]) < 1e-14
    np.testing.assert_allclose(beta(np.array([3e-5])), np.tanh(1.5e-5) / 6e-5, rtol=1e-12)


# ---------------------------------------------------------------- Alg. B, generic features
@pytest.mark.parametrize("seed", range(20))
def test_bound_exact_quantities(seed):
    """log z = log Z(theta~), mu = E_p f = grad log Z, Sigma >= Cov_p f = Hessian."""
    rng = np.random.default_rng(seed)
    theta, F = random_problem(rng)
    b = partition_bound(theta, F)
    np.testing.assert_allclose(b.log_z, log_z(theta, F), rtol=1e-13, atol=1e-13)
    mean, cov = moments(theta, F)
    np.testing.assert_allclose(b.mu, mean, rtol=1e-11, atol=1e-11 * np.abs(F).max())
    for j in range(len(F)):
        gap = np.linalg.eigvalsh(b.sigma[j] - cov[j]).min()
        assert gap >= -1e-11 * max(1.0, np.abs(cov[j]).max()), gap


def test_mu_is_finite_difference_gradient():
    rng = np.random.default_rng(3)
    theta, F = random_problem(rng, m=3, n=5, d=4, scale=1.0)
    b = partition_bound(theta, F)
    h = 1e-6
    fd = np.stack(
        [(log_z(theta + h * e, F) - log_z(theta - h * e, F)) / (2 * h) for e in np.eye(len(theta))],
        axis=1,
    )
    np.testing.assert_allclose(b.mu, fd, atol=1e-8)


@pytest.mark.parametrize("seed", range(10))
def test_bound_holds_and_is_tight(seed):
    """Z(theta) <= z exp(delta^T mu + delta^T Sigma delta / 2) for 50 random theta (eq. 2.3)."""
    rng = np.random.default_rng(100 + seed)
    theta_t, F = random_problem(rng)
    b = partition_bound(theta_t, F)
    np.testing.assert_allclose(
        b.log_bound(theta_t, theta_t), log_z(theta_t, F), rtol=1e-13, atol=1e-13
    )
    for _ in range(50):
        theta = theta_t + rng.normal(size=theta_t.shape) * rng.choice([0.01, 0.3, 3.0])
        assert np.all(log_z(theta, F) <= b.log_bound(theta_t, theta) + 1e-10)


@given(st.integers(0, 2**32 - 1), st.sampled_from([0.1, 1.0, 10.0]))
def test_bound_holds_property(seed, step):
    rng = np.random.default_rng(seed)
    theta_t, F = random_problem(rng)
    b = partition_bound(theta_t, F)
    theta = theta_t + step * rng.normal(size=theta_t.shape)
    lhs, rhs = log_z(theta, F), b.log_bound(theta_t, theta)
    assert np.all(np.isfinite(rhs))
    assert np.all(lhs <= rhs + 1e-9 * np.maximum(1.0, np.abs(rhs)))


def test_z_and_mu_do_not_depend_on_label_order_sigma_always_valid():
    rng = np.random.default_rng(7)
    theta, F = random_problem(rng, m=2, n=6, d=5, scale=2.0)
    b = partition_bound(theta, F)
    _, cov = moments(theta, F)
    for _ in range(5):
        perm = rng.permutation(F.shape[1])
        bp = partition_bound(theta, F[:, perm])
        np.testing.assert_allclose(bp.log_z, b.log_z, rtol=1e-13)
        np.testing.assert_allclose(bp.mu, b.mu, atol=1e-12)
        for j in range(2):
            assert np.linalg.eigvalsh(bp.sigma[j] - cov[j]).min() >= -1e-10


def test_two_labels_is_jaakkola_jordan():
    rng = np.random.default_rng(1)
    theta, F = random_problem(rng, m=4, n=2, d=3, scale=2.0)
    b = partition_bound(theta, F)
    s = F @ theta
    diff = F[:, 1] - F[:, 0]
    expected = beta(s[:, 1] - s[:, 0])[:, None, None] * diff[:, :, None] * diff[:, None, :]
    np.testing.assert_allclose(b.sigma, expected, rtol=1e-12, atol=1e-14)


def test_huge_logits_no_overflow():
    rng = np.random.default_rng(0)
    F = rng.normal(size=(3, 6, 4)) * 1e3  # logits ~ 1e3
    theta = rng.normal(size=4)
    b = partition_bound(theta, F)
    assert all(np.all(np.isfinite(a)) for a in b)
    np.testing.assert_allclose(b.log_z, log_z(theta, F), rtol=1e-14)
    mean, _ = moments(theta, F)
    np.testing.assert_allclose(b.mu, mean, atol=1e-9 * np.abs(F).max())


def test_single_sample_2d_features():
    rng = np.random.default_rng(0)
    theta, F = random_problem(rng, m=1)
    b = partition_bound(theta, F[0])
    assert b.mu.shape == (1, len(theta)) and b.sigma.shape == (1, len(theta), len(theta))


@pytest.mark.parametrize("bad", ["shape", "nan_theta", "inf_F", "dim"])
def test_partition_bound_bad_input(bad):
    theta, F = np.zeros(3), np.ones((2, 4, 3))
    if bad == "shape":
        F = np.ones((2, 2, 4, 3))
    elif bad == "nan_theta":
        theta[0] = np.nan
    elif bad == "inf_F":
        F[0, 0, 0] = np.inf
    else:
        theta = np.zeros(4)
    with pytest.raises(ValueError, match=r"theta|F"):
        partition_bound(theta, F)


# ---------------------------------------------------------------- Kronecker form
@pytest.mark.parametrize("seed", range(8))
def test_multinomial_matches_generic_alg_b(seed):
    rng = np.random.default_rng(seed)
    m, n, p = int(rng.integers(1, 6)), int(rng.integers(2, 7)), int(rng.integers(1, 5))
    X = rng.normal(size=(m, p)) * rng.choice([0.3, 3.0])
    W = rng.normal(size=(p, n))
    mb = multinomial_partition_bound(W, X)
    gb = partition_bound(W.T.ravel(), mlr_features(X, n))
    np.testing.assert_allclose(mb.log_z, gb.log_z, rtol=1e-13)
    np.testing.assert_allclose(mb.mu(X), gb.mu, atol=1e-12)
    np.testing.assert_allclose(mb.sigma(X), gb.sigma, atol=1e-12 * max(1, np.abs(gb.sigma).max()))


@pytest.mark.parametrize("seed", range(8))
def test_kronecker_factor_properties(seed):
    """C 1 = 0, rank C <= n-1, C >= diag(p) - p p^T, and the logit-space bound holds."""
    rng = np.random.default_rng(seed)
    m, n = 5, int(rng.integers(2, 9))
    S = rng.normal(size=(m, n)) * rng.choice([0.5, 3.0, 20.0])
    mb = multinomial_partition_bound(S, np.eye(m))  # X = I: logits = S
    C, P = mb.C, softmax(S, axis=1)
    np.testing.assert_allclose(C.sum(axis=2), 0.0, atol=1e-13)
    np.testing.assert_allclose(P, mb.prob, rtol=1e-13)
    for j in range(m):
        H = np.diag(P[j]) - np.outer(P[j], P[j])
        assert np.linalg.eigvalsh(C[j] - H).min() >= -1e-13
        assert np.linalg.matrix_rank(C[j], tol=1e-12) <= n - 1
        assert np.trace(C[j]) <= (n - 1) / 2 + 1e-12
        for _ in range(20):
            delta = rng.normal(size=n) * rng.choice([0.1, 1.0, 10.0])
            lhs = logsumexp(S[j] + delta)
            rhs = logsumexp(S[j]) + P[j] @ delta + 0.5 * delta @ C[j] @ delta
            assert lhs <= rhs + 1e-10


def test_multinomial_huge_logits():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 3)) * 300
    W = rng.normal(size=(3, 5))
    mb = multinomial_partition_bound(W, X)
    assert np.all(np.isfinite(mb.C)) and np.all(np.isfinite(mb.log_z))
    np.testing.assert_allclose(mb.log_z, logsumexp(X @ W, axis=1), rtol=1e-14)


def test_multinomial_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        multinomial_partition_bound(np.zeros((3, 2)), np.zeros((4, 2)))
