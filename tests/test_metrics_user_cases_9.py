"""New-user cases of kernelkit.metrics: error_rate refuses labels of mixed types (numbers
against strings counted every point wrong) and takes torch tensors; the relative
Frobenius error, the Gaussian KL and the regression NLL stay finite where their answers
are representable."""

import numpy as np
import pytest

from kernelkit.metrics import (
    error_rate,
    gaussian_kl,
    mean_negative_log_likelihood,
    relative_frobenius_error,
)


def test_error_rate_refuses_numbers_against_strings():
    with pytest.raises(ValueError, match="mix label types"):
        error_rate([0, 1, 2, 1], ["0", "1", "2", "1"])
    assert error_rate(["a", "b"], ["a", "c"]) == 0.5


def test_error_rate_takes_torch_tensors():
    torch = pytest.importorskip("torch")
    y = torch.tensor([0, 1, 1, 0])
    scores = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.5], [0.2, 0.1]], requires_grad=True)
    assert error_rate(y, scores) == 0.25
    assert error_rate(y, scores.detach().bfloat16()) == 0.25


def test_relative_frobenius_error_of_a_blown_up_approximation():
    K = np.eye(3) + 0.1
    K_hat = K.copy()
    K_hat[0, 1] = 1e200
    want = (1e200 - 0.1) / np.linalg.norm(K)  # one entry differs
    np.testing.assert_allclose(relative_frobenius_error(K, K_hat), want, rtol=1e-12)


def test_gaussian_kl_and_nll_with_large_means_and_variances():
    kl = gaussian_kl([1e200], [1e300], [-1e200], [1e300])
    np.testing.assert_allclose(kl, 0.5 * 4e100, rtol=1e-12)  # ((2e200)^2 / 1e300) / 2
    nll = mean_negative_log_likelihood([1e200], y_mean=[-1e200], y_var=[1e300])
    want = 0.5 * (np.log(2 * np.pi * 1e300) + 4e100)
    np.testing.assert_allclose(nll, want, rtol=1e-12)


def test_classification_nll_is_never_negative():
    assert mean_negative_log_likelihood([0], proba=[[1 + 1e-10, 0.0]]) == 0.0


def test_archakov_hansen_refuses_max_iter_below_one():
    from kernelkit.datasets import archakov_hansen_correlation

    with pytest.raises(ValueError, match="max_iter"):
        archakov_hansen_correlation([0.1, 0.2, 0.3], max_iter=0)


def test_softmax_attention_hint_for_one_dimensional_values():
    from kernelkit.kernels import softmax_attention

    q = np.ones((2, 3))
    with pytest.raises(ValueError, match=r"v\.reshape\(-1, 1\) for one value per key"):
        softmax_attention(q, q, np.ones(2))
