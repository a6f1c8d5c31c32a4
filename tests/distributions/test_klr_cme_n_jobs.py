"""``n_jobs`` of KernelLogisticRegression and ConditionalMeanEmbedding (scikit-learn's
convention, as JointDistribution's): every blocked pass of the fit and of a prediction
runs on the threads it names, and the model and its predictions do not depend on it
(fixed blocks, combined in block order); 0 and non-integers are rejected by name."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit._backend.chunks as chunks
import kernelkit._backend.parallel as parallel
from kernelkit.distributions import ConditionalMeanEmbedding, KernelLogisticRegression

SAMPLED = {"pivot_sample": 400, "random_state": 2}


def _data(n=6000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = (X[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(int)
    Y = X[:, :1] ** 2 + 0.3 * rng.standard_normal((n, 1))
    return X, y, Y


def _spy(monkeypatch):
    """Record the n_jobs of every thread-count lookup (block_map's and the slabs')."""
    seen = []
    real = parallel.effective_n_jobs

    def spy(n_jobs=None):
        seen.append(n_jobs)
        return real(n_jobs)

    monkeypatch.setattr(parallel, "effective_n_jobs", spy)
    monkeypatch.setattr(chunks, "effective_n_jobs", spy)
    return seen


@pytest.mark.parametrize("kw", [{}, SAMPLED], ids=["exact", "sampled"])
def test_klr_passes_n_jobs_to_every_blocked_pass(monkeypatch, kw):
    X, y, _ = _data()
    seen = _spy(monkeypatch)
    model = KernelLogisticRegression(lengthscale=1.5, reg=1.0, n_jobs=1, **kw).fit(X, y)
    model.decision_function(np.tile(X, (3, 1)))  # several slabs
    # without the parameter the passes would ask for kernelkit's default (None)
    assert seen and set(seen) == {1}


@pytest.mark.parametrize("kw", [{}, SAMPLED], ids=["exact", "sampled"])
def test_cme_passes_n_jobs_to_every_blocked_pass(monkeypatch, kw):
    X, _, Y = _data()
    seen = _spy(monkeypatch)
    ConditionalMeanEmbedding(lengthscale_x=1.5, lengthscale_y=1.0, n_jobs=1, **kw).fit(X, Y)
    assert seen and set(seen) == {1}


@pytest.mark.parametrize("kw", [{}, SAMPLED], ids=["exact", "sampled"])
def test_klr_one_and_two_threads_give_the_same_model(kw):
    X, y, _ = _data()
    one, two = (
        KernelLogisticRegression(lengthscale=1.5, reg=1.0, n_jobs=k, **kw).fit(X, y) for k in (1, 2)
    )
    np.testing.assert_array_equal(one.basis_.pivots_, two.basis_.pivots_)
    # the objective's block sums are combined in block order: the same L-BFGS path
    np.testing.assert_allclose(two.coef_, one.coef_, rtol=0, atol=1e-12 * np.abs(one.coef_).max())
    Xq = np.tile(X, (3, 1))  # 18000 rows: several prediction slabs
    np.testing.assert_array_equal(two.decision_function(Xq), one.decision_function(Xq))


@pytest.mark.parametrize("kw", [{}, SAMPLED], ids=["exact", "sampled"])
def test_cme_one_and_two_threads_give_the_same_model(kw):
    X, _, Y = _data()
    one, two = (
        ConditionalMeanEmbedding(lengthscale_x=1.5, lengthscale_y=1.0, n_jobs=k, **kw).fit(X, Y)
        for k in (1, 2)
    )
    np.testing.assert_array_equal(one.basis_x_.pivots_, two.basis_x_.pivots_)
    np.testing.assert_allclose(two.coef_, one.coef_, rtol=0, atol=1e-12 * np.abs(one.coef_).max())


@pytest.mark.parametrize("cls", [KernelLogisticRegression, ConditionalMeanEmbedding])
def test_bad_n_jobs_is_rejected_by_name(cls):
    X, y, Y = _data(n=60)
    target = y if cls is KernelLogisticRegression else Y
    with pytest.raises(ValueError, match=r"'n_jobs' parameter .* Got 0 instead"):
        cls(n_jobs=0).fit(X, target)
    with pytest.raises(TypeError, match="n_jobs"):
        cls(n_jobs="2").fit(X, target)
    assert cls(n_jobs=-1).fit(X, target).get_params()["n_jobs"] == -1
