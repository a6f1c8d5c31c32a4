"""kernelkit.metrics: eq. 58, corrected eq. 93 (erratum 5), MNLL, NMSE, error rate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from kernelkit.metrics import (
    error_rate,
    gaussian_kl,
    mean_negative_log_likelihood,
    normalized_mse,
    relative_frobenius_error,
)


# ------------------------------------------------------------------ Frobenius (eq. 58)
def test_relative_frobenius_error_values_and_complex_part_dropped():
    K = np.array([[2.0, 1.0], [1.0, 2.0]])
    assert relative_frobenius_error(K, K) == 0.0
    K_hat = K + np.array([[0.0, 1.0], [1.0, 0.0]])
    assert relative_frobenius_error(K, K_hat) == pytest.approx(np.sqrt(2) / np.sqrt(10))
    assert relative_frobenius_error(K, K + 5j) == 0.0  # imaginary part discarded


def test_relative_frobenius_error_errors():
    K = np.eye(3)
    with pytest.raises(ValueError, match="Shape mismatch"):
        relative_frobenius_error(K, np.eye(2))
    with pytest.raises(ValueError, match="zeros"):
        relative_frobenius_error(np.zeros((2, 2)), np.eye(2))
    with pytest.raises(ValueError, match="2-D"):
        relative_frobenius_error(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        relative_frobenius_error(K, np.full((3, 3), np.nan))


# ------------------------------------------------------------------ KL (eq. 93 corrected)
def test_kl_zero_for_identical_and_the_erratum_example():
    mu, var = np.array([0.3, -1.0]), np.array([0.5, 2.0])
    assert gaussian_kl(mu, var, mu, var) == 0.0
    assert gaussian_kl(mu, var, mu, var, direction="approx||exact") == 0.0
    # erratum 5: equal means and var_e = var_a / 2 -> the printed eq. 93 gives -0.597 per
    # point; KL[exact || approx] = (1/2 + log 2 - 1)/2 = 0.0966, the reverse (2 - log 2 - 1)/2
    e = gaussian_kl([0.0], [0.5], [0.0], [1.0])
    assert e == pytest.approx(0.5 * (0.5 + np.log(2.0) - 1.0))
    r = gaussian_kl([0.0], [0.5], [0.0], [1.0], direction="approx||exact")
    assert r == pytest.approx(0.5 * (2.0 - np.log(2.0) - 1.0))
    printed = 0.5 * (0.5 + np.log(0.5) - 1.0)
    assert printed < 0 < e


@given(
    st.lists(
        st.tuples(st.floats(-5, 5), st.floats(0.01, 10), st.floats(-5, 5), st.floats(0.01, 10)),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["exact||approx", "approx||exact"]),
)
def test_kl_nonnegative(rows, direction):
    a = np.array(rows)
    kl = gaussian_kl(a[:, 0], a[:, 1], a[:, 2], a[:, 3], direction=direction, reduction="none")
    assert np.all(kl >= 0)


def test_kl_matches_monte_carlo_and_reductions():
    """KL[p || q] = E_p log p/q, sampled."""
    rng = np.random.default_rng(0)
    mu_e, var_e, mu_a, var_a = 0.2, 0.7, -0.4, 1.5
    x = rng.normal(mu_e, np.sqrt(var_e), size=400_000)
    lp = stats.norm(mu_e, np.sqrt(var_e)).logpdf(x)
    lq = stats.norm(mu_a, np.sqrt(var_a)).logpdf(x)
    mc = (lp - lq).mean()
    se = (lp - lq).std() / np.sqrt(x.size)
    assert abs(gaussian_kl([mu_e], [var_e], [mu_a], [var_a]) - mc) < 4.5 * se
    # (n, C): mean over everything vs eq. 93's sum over points then class average
    M_e, V_e = rng.normal(size=(5, 3)), rng.uniform(0.5, 2, size=(5, 3))
    M_a, V_a = rng.normal(size=(5, 3)), rng.uniform(0.5, 2, size=(5, 3))
    full = gaussian_kl(M_e, V_e, M_a, V_a, reduction="none")
    assert full.shape == (5, 3)
    assert gaussian_kl(M_e, V_e, M_a, V_a) == pytest.approx(full.mean())
    assert gaussian_kl(M_e, V_e, M_a, V_a, reduction="sum") == pytest.approx(full.sum(0).mean())


def test_kl_errors():
    with pytest.raises(ValueError, match="Shape mismatch"):
        gaussian_kl([0, 1], [1, 1], [0], [1])
    with pytest.raises(ValueError, match="positive"):
        gaussian_kl([0], [0.0], [0], [1])
    with pytest.raises(ValueError, match="direction"):
        gaussian_kl([0], [1], [0], [1], direction="appr||exact")
    with pytest.raises(ValueError, match="reduction"):
        gaussian_kl([0], [1], [0], [1], reduction="max")


# ------------------------------------------------------------------ MNLL
def test_mnll_regression_matches_scipy():
    rng = np.random.default_rng(1)
    y, mu = rng.normal(size=20), rng.normal(size=20)
    var = rng.uniform(0.1, 2.0, size=20)
    expected = -stats.norm(mu, np.sqrt(var + 0.3)).logpdf(y).mean()
    assert mean_negative_log_likelihood(y, mu, var, noise_var=0.3) == pytest.approx(expected)
    # multi-output targets with a shared variance per point
    Y, MU = rng.normal(size=(20, 2)), rng.normal(size=(20, 2))
    exp2 = -stats.norm(MU, np.sqrt(var[:, None])).logpdf(Y).mean()
    assert mean_negative_log_likelihood(Y, MU, var) == pytest.approx(exp2)


def test_mnll_classification():
    P = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.5, 0.5, 0.0]])
    y = np.array([0, 2, 2])
    expected = -(np.log(0.7) + np.log(0.8) + np.log(np.finfo(float).tiny)) / 3
    assert mean_negative_log_likelihood(y, proba=P) == pytest.approx(expected)
    labels = np.array(["a", "b", "c"])
    assert mean_negative_log_likelihood(labels[y], proba=P, labels=labels) == pytest.approx(
        expected
    )


def test_mnll_errors():
    with pytest.raises(ValueError, match="Shape mismatch"):
        mean_negative_log_likelihood([1.0, 2.0], [1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="either"):
        mean_negative_log_likelihood([0], [0.0], [1.0], proba=[[1.0]])
    with pytest.raises(ValueError, match="y_mean and y_var"):
        mean_negative_log_likelihood([0.0])
    with pytest.raises(ValueError, match="positive"):
        mean_negative_log_likelihood([0.0], [0.0], [0.0])
    with pytest.raises(ValueError, match=r"0\.\.1"):
        mean_negative_log_likelihood([2], proba=[[0.5, 0.5]])
    with pytest.raises(ValueError, match="Shape mismatch"):
        mean_negative_log_likelihood([0, 1], proba=[[0.5, 0.5]])


# ------------------------------------------------------------------ NMSE, error rate
def test_normalized_mse_and_error_rate():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    assert normalized_mse(y, y) == 0.0
    assert normalized_mse(y, np.full(4, y.mean())) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="Shape mismatch"):
        normalized_mse(y, y[:3])
    with pytest.raises(ValueError, match="constant"):
        normalized_mse(np.ones(3), np.ones(3))
    assert error_rate([0, 1, 1, 2], [0, 1, 2, 2]) == 0.25
    P = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    assert error_rate([0, 1, 1], P) == pytest.approx(1 / 3)
    assert error_rate(["x", "y", "y"], P, labels=["x", "y"]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="Shape mismatch"):
        error_rate([0, 1], [0])


# ------------------------------------------------------------------ new-user cases
@pytest.mark.parametrize("scale", [1e300, 1e-300])
def test_relative_frobenius_error_is_scale_free(scale):
    # eq. 58 is a ratio: scaling K and K_hat together leaves it unchanged. The old sums of
    # squares overflowed (NaN at 1e300) or underflowed ("K is all zeros" at 1e-300).
    K = np.array([[2.0, 1.0], [1.0, 3.0]])
    K_hat = K * (1 + 1e-3)
    # K * scale and K_hat * scale are each rounded once (relative eps), so the 1e-3
    # difference moves by at most ~2 eps / 1e-3 relative; 1e-11 covers it.
    got = relative_frobenius_error(K * scale, K_hat * scale)
    assert got == pytest.approx(relative_frobenius_error(K, K_hat), rel=1e-11)


def test_gaussian_kl_extreme_variance_ratios():
    # r = var_e / var_a = 1e-400 underflows to 0: the old log(r) gave KL = inf for a
    # finite value 1/2 (r - log r - 1) = 1/2 (400 ln 10 - 1) (r itself < 1e-300).
    mu = np.zeros(2)
    kl = gaussian_kl(mu, np.full(2, 1e-200), mu, np.full(2, 1e200))
    assert kl == pytest.approx(0.5 * (400 * np.log(10) - 1), rel=1e-14)
    # r = 1e600 overflows: the exact KL ~ 5e599 is beyond float64, inf (not NaN)
    assert gaussian_kl(mu, np.full(2, 1e300), mu, np.full(2, 1e-300)) == np.inf


def test_metrics_reject_empty_inputs():
    e = np.zeros(0)
    with pytest.raises(ValueError, match="empty"):
        gaussian_kl(e, e, e, e)
    with pytest.raises(ValueError, match="n >= 1"):
        mean_negative_log_likelihood(e, e, e)
    with pytest.raises(ValueError, match="proba is empty"):
        mean_negative_log_likelihood(np.zeros(0, dtype=int), proba=np.zeros((0, 3)))


def test_normalized_mse_is_scale_free():
    # mean (y - p)^2 / var(y) is invariant under y, p -> c y, c p; at c = 1e200 the old
    # squares overflowed to inf / inf = NaN. Each scaled entry is rounded once, so the
    # ratio moves by a few eps relative to the differences (~0.1 |y| here).
    y = np.array([1.0, -2.0, 0.5, 3.0])
    p = np.array([1.1, -1.8, 0.4, 2.7])
    assert normalized_mse(y * 1e200, p * 1e200) == pytest.approx(normalized_mse(y, p), rel=1e-13)


def test_error_rate_rejects_nan_scores():
    # argmax of a row holding NaN is the NaN's column: the old code scored it silently
    with pytest.raises(ValueError, match="finite"):
        error_rate([0, 1], np.array([[np.nan, 1.0], [0.0, 1.0]]))


@pytest.mark.parametrize("noise_var", ["0.1", True, None])
def test_mnll_rejects_non_numeric_noise_var(noise_var):
    # old: float("0.1") and float(True) accepted silently, None a bare float() TypeError
    y = np.array([0.0, 1.0])
    with pytest.raises(TypeError, match="noise_var must be a real number"):
        mean_negative_log_likelihood(y, y, np.ones(2), noise_var=noise_var)
