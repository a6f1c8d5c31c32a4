"""Shared JDL experiment helpers: metrics against direct computations, shared bases."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.spatial.distance import pdist

from kernelkit.datasets._jdl import random_correlation_matrix, sample_gaussian
from kernelkit.distributions import (
    BasisCache,
    ConditionalMeanEmbedding,
    JointDistribution,
    LowRankBasis,
)
from kernelkit_experiments import _jdl_common as C


def test_psd_violation_fraction():
    good = np.stack([np.eye(3), np.diag([1.0, 2.0, 0.0]), np.ones((3, 3))])  # PSD (rank 1 too)
    bad = np.stack(
        [np.diag([1.0, 1.0, -1e-6]), np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])]
    )  # eig -1
    assert C.psd_violation_fraction(good) == 0.0
    assert C.psd_violation_fraction(bad) == 1.0
    both = np.concatenate([good, bad[:1]])
    assert C.psd_violation_fraction(both) == pytest.approx(0.25)
    # round-off-size negative eigenvalues are tolerated, real ones are not
    eps = np.diag([1.0, 1.0, -1e-15])
    assert C.psd_violation_fraction(eps[None]) == 0.0


def test_simple_metrics():
    assert C.normalization_error([1.0, 1.2, 0.7]) == pytest.approx(0.3)
    assert C.negative_fraction(np.array([[1.0, -1.0], [0.0, -2.0]])) == 0.5
    assert [C.rel_tol_for_n(n) for n in (1000, 100_000, 1_000_000, 10_000_000)] == [
        1e-3,
        1e-3,
        1e-2,
        1e-1,
    ]
    X = np.random.default_rng(0).standard_normal((300, 3))
    assert C.median_distance(X) == pytest.approx(np.median(pdist(X)), rel=1e-9)
    assert C.median_distance(np.zeros((5, 2))) == 1.0  # degenerate: a usable default


def _data(n=400, d=2, seed=0):
    Cm = random_correlation_matrix(2 * d, seed)
    return sample_gaussian(Cm, n, d, seed + 1)


def test_moments_and_totals_match_weights():
    """One conditional_expectation of [1, y y^T] equals weighting the y_j y_j^T directly."""
    X, Y = _data()
    Xq = X[:7] + 0.1
    for model in (
        JointDistribution(lengthscale_x=1.5, lengthscale_y=1.5, reg=1e-5).fit(X, Y),
        ConditionalMeanEmbedding(lengthscale_x=1.5, lengthscale_y=1.5, reg=1e-5).fit(X, Y),
    ):
        M, tot = C.moments_and_totals(model, Y, Xq)
        W = model.conditional_weights(Xq)  # (7, n)
        np.testing.assert_allclose(M, np.einsum("qj,jk,jl->qkl", W, Y, Y), atol=1e-10)
        np.testing.assert_allclose(tot, W.sum(axis=1), atol=1e-12)


def test_basis_cache_reuses_and_agrees(monkeypatch):
    X, Y = _data()
    calls = []
    original = LowRankBasis.fit

    def counting(self, Z, y=None):
        calls.append(self.lengthscale)
        return original(self, Z, y)

    monkeypatch.setattr(LowRankBasis, "fit", counting)
    grid = C.grid_for("jdl", [1.0, 2.0], [1.5], [1e-5, 1e-3], ())
    assert len(grid) == 4
    Xq = X[:5]
    cache = BasisCache()
    cached = [C.fit_model("jdl", False, X, Y, p, 1e-3, cache).conditional_weights(Xq) for p in grid]
    # one factorisation per (data, lengthscale): X at 1.0 and 2.0, Y at 1.5
    assert sorted(calls) == [1.0, 1.5, 2.0]
    assert (cache.misses, cache.hits, len(cache)) == (3, 5, 3)
    # CME on the same data and lengthscales reuses them too
    C.fit_model("cme", False, X, Y, grid[0], 1e-3, cache)
    assert len(calls) == 3
    calls.clear()
    fresh = [C.fit_model("jdl", False, X, Y, p, 1e-3).conditional_weights(Xq) for p in grid]
    assert len(calls) == 8  # without a cache every fit factorises both sides
    for a, b in zip(cached, fresh, strict=True):
        np.testing.assert_array_equal(a, b)
    # select() shares one cache over its grid
    calls.clear()
    C.select("jdl", False, X, Y, grid, lambda m: m.reg, 1e-3)
    assert sorted(calls) == [1.0, 1.5, 2.0]


def test_select_picks_minimum_and_skips_failures():
    X, Y = _data()
    grid = [{"lengthscale_x": 1.5, "lengthscale_y": 1.5, "reg": r} for r in (1e-6, 1e-2)]
    losses = iter([2.0, 1.0])
    model, params, loss, all_losses = C.select(
        "jdl", False, X, Y, grid, lambda m: next(losses), 1e-3
    )
    assert params["reg"] == 1e-2 and loss == 1.0 and all_losses == [2.0, 1.0]
    assert model.reg == 1e-2

    def boom(m):
        raise ValueError("infeasible")

    with pytest.raises(RuntimeError, match="no grid point"):
        C.select("jdl", False, X, Y, grid, boom, 1e-3)
    with pytest.raises(ValueError, match="unknown model"):
        C.fit_model("nope", False, X, Y, {}, 1e-3)


def test_nonpositive_mass_fraction():
    X, Y = _data()
    model = JointDistribution(lengthscale_x=1.5, lengthscale_y=1.5, reg=1e-5).fit(X, Y)
    Xq = X[:20]
    assert C.nonpositive_mass_fraction(model, Xq) == float(np.mean(model.marginal_ratio(Xq) <= 0))
    psi = model.basis_x_.transform(Xq[:1])[0]
    model.coef_ = (
        -2 * len(X) * np.outer(model.s_y_, psi) / (model.s_y_ @ model.s_y_ * psi @ psi)
    )  # mass -n at Xq[0]
    assert C.nonpositive_mass_fraction(model, Xq[:1]) == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing escapes but the silenced warning
        with C.quiet_mass_warnings():
            C.moments_and_totals(model, Y, Xq[:1])
    cme = ConditionalMeanEmbedding(lengthscale_x=1.5, lengthscale_y=1.5).fit(X, Y)
    assert C.nonpositive_mass_fraction(cme, Xq) is None
