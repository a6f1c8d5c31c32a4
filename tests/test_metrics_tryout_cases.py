"""The metrics as an independent tester meets them: subnormal kernels and targets (the
power-of-two rescaling overflowed and gave NaN), a column vector of predicted labels
(its argmax is always 0: a silently wrong error rate) and unnormalised class scores
passed as ``proba`` (a silently wrong MNLL), NaN or string labels against argmax
indices (silently counted as errors). Each test of a fix failed before it; the
multi-output NMSE test pins the behaviour its docstring now describes (it described a
pooled ratio). The references are scikit-learn or the formula."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import log_loss, mean_squared_error, zero_one_loss

from kernelkit.metrics import (
    error_rate,
    mean_negative_log_likelihood,
    normalized_mse,
    relative_frobenius_error,
)


@pytest.mark.parametrize("scale", [1e-310, 2.0**-1060, 1e300])
def test_relative_frobenius_error_is_scale_free_down_to_subnormals(scale):
    # eq. 58 is a ratio; scaling K and K_hat by a power of two is exact (also for
    # subnormals, whose scaling by 2**k with k > 0 is exact), so the value must not move
    rng = np.random.default_rng(0)
    K = rng.standard_normal((6, 5))
    K_hat = K + 0.1 * rng.standard_normal((6, 5))
    p = 2.0 ** np.round(np.log2(scale))
    expected = np.linalg.norm(K - K_hat) / np.linalg.norm(K)
    with np.errstate(under="ignore"):
        Kp, K_hatp = K * p, K_hat * p
    with np.errstate(over="raise", invalid="raise"):  # no overflow / NaN on the way
        got = relative_frobenius_error(Kp, K_hatp)
    # subnormal entries keep fewer bits: their relative rounding is 2**-1074 / |entry|
    tol = 1e-12 if p > 1e-300 else 1e-3
    assert got == pytest.approx(expected, rel=tol)


def test_normalized_mse_of_subnormal_targets():
    rng = np.random.default_rng(1)
    y = rng.standard_normal(40)
    pred = y + 0.2 * rng.standard_normal(40)
    expected = np.mean((y - pred) ** 2) / np.var(y)
    p = 2.0**-1050
    with np.errstate(under="ignore"):
        yp, predp = y * p, pred * p
    with np.errstate(over="raise", invalid="raise"):
        got = normalized_mse(yp, predp)
    assert got == pytest.approx(expected, rel=1e-3)  # subnormals keep ~24 bits here


def test_error_rate_rejects_a_column_of_labels():
    # (n, 1) predicted labels used to be read as scores of one class: argmax 0 everywhere
    y = np.array([0, 1, 2, 1, 0, 2])
    pred = np.array([0, 1, 1, 1, 2, 2])
    assert error_rate(y, pred) == pytest.approx(zero_one_loss(y, pred))
    with pytest.raises(ValueError, match=r"y_pred of shape \(6, 1\).*shape \(n,\)"):
        error_rate(y, pred[:, None])


def test_error_rate_of_scores_matches_sklearn():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 3, 30)
    scores = rng.standard_normal((30, 3))
    assert error_rate(y, scores) == pytest.approx(zero_one_loss(y, scores.argmax(1)))
    labels = np.array([10, 20, 30])
    assert error_rate(labels[y], scores, labels=labels) == pytest.approx(
        zero_one_loss(labels[y], labels[scores.argmax(1)])
    )


def test_mnll_rejects_rows_that_do_not_sum_to_one():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 20)
    P = rng.dirichlet(np.ones(3), 20)
    assert mean_negative_log_likelihood(y, proba=P) == pytest.approx(
        log_loss(y, P, labels=[0, 1, 2])
    )
    with pytest.raises(ValueError, match=r"proba rows must sum to 1.*row 0 sums to 0\.5"):
        mean_negative_log_likelihood(y, proba=0.5 * P)
    # float32 probabilities normalised in float32 are accepted (rounding of that dtype)
    P32 = P.astype(np.float32)
    P32 /= P32.sum(axis=1, keepdims=True)
    expected = -np.mean(np.log(P32[np.arange(20), y].astype(np.float64)))
    assert mean_negative_log_likelihood(y, proba=P32) == pytest.approx(expected, rel=1e-12)


def test_mnll_shape_message_for_one_dimensional_targets():
    y = np.zeros(4)
    with pytest.raises(ValueError, match=r"y_var \(4, 1\) must be \(4,\)\.$"):
        mean_negative_log_likelihood(y, y, np.ones((4, 1)))


@pytest.mark.parametrize("where", ["y_true", "y_pred"])
def test_error_rate_rejects_nan_labels(where):
    # NaN != NaN: a NaN label used to count silently as a misclassification
    y = np.array([0.0, 1.0, 2.0, 1.0])
    bad = y.copy()
    bad[1] = np.nan
    args = (bad, y) if where == "y_true" else (y, bad)
    with pytest.raises(ValueError, match=f"{where} contains NaN"):
        error_rate(*args)


def test_error_rate_of_scores_needs_labels_for_non_index_classes():
    # string classes against argmax column indices never match: the rate was silently 1.0
    y = np.array(["a", "b", "a", "c"])
    scores = np.eye(3)[[0, 1, 0, 2]]  # every prediction right
    with pytest.raises(ValueError, match=r"integer class indices 0\.\.C-1 \(or pass labels=\)"):
        error_rate(y, scores)
    assert error_rate(y, scores, labels=["a", "b", "c"]) == 0.0
    with pytest.raises(ValueError, match=r"Class indices must lie in 0\.\.2"):
        error_rate(np.array([0, 1, 3]), np.eye(3))  # a class the scores do not have


def test_normalized_mse_of_multi_output_targets_averages_per_output_ratios():
    # outputs on different scales: the mean of the per-output NMSEs, not pooled sums
    rng = np.random.default_rng(4)
    Y = rng.standard_normal((30, 2)) * [1.0, 10.0]
    P = Y + rng.standard_normal((30, 2))
    per_output = [mean_squared_error(Y[:, t], P[:, t]) / np.var(Y[:, t]) for t in range(2)]
    assert normalized_mse(Y, P) == pytest.approx(np.mean(per_output), rel=1e-12)
    pooled = np.mean((Y - P) ** 2) / np.mean(np.var(Y, axis=0))
    assert abs(normalized_mse(Y, P) - pooled) > 0.1  # the two readings differ here
