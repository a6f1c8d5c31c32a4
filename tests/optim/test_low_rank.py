"""Alg. LB (Thm 3) with corrections (a)-(e) of docs/derivations/sgb.md, its tighter
variants, Woodbury, LSPFB."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from optim_helpers import mlr_features, random_problem

from kernelkit.optim import (
    low_rank_partition_bound,
    lspfb_step,
    multinomial_low_rank_bound,
    multinomial_objective,
    multinomial_partition_bound,
    partition_bound,
    woodbury_solve,
)
from kernelkit.optim.low_rank import VARIANTS


def _gap(bound, full):
    """Relative min eigenvalue of V^T S V + D - Sigma_full (>= 0 for a valid bound)."""
    scale = max(1.0, np.abs(np.linalg.eigvalsh(full)).max())
    return np.linalg.eigvalsh(bound.curvature() - full).min() / scale


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("init", ["zeros", "random"])
def test_low_rank_dominates_full_bound(variant, init):
    rng = np.random.default_rng(11)
    for case in range(40):
        theta, F = random_problem(rng)
        d = F.shape[2]
        k = int(rng.integers(1, d + 1))
        full = partition_bound(theta, F).sigma.sum(0)
        b = low_rank_partition_bound(theta, F, k, variant=variant, init=init, random_state=case)
        assert all(np.all(np.isfinite(a)) for a in (b.V, b.S, b.D))
        assert np.all(b.D >= 0)
        assert _gap(b, full) >= -1e-12, (case, variant)
        np.testing.assert_allclose(b.log_z, partition_bound(theta, F).log_z, rtol=1e-13)


@given(st.integers(0, 2**32 - 1), st.sampled_from(VARIANTS))
def test_low_rank_dominates_property(seed, variant):
    rng = np.random.default_rng(seed)
    theta, F = random_problem(rng)
    k = int(rng.integers(1, F.shape[2] + 1))
    b = low_rank_partition_bound(theta, F, k, variant=variant)
    assert _gap(b, partition_bound(theta, F).sigma.sum(0)) >= -1e-12


def test_global_z_is_not_a_bound_per_sample_z_is():
    """Correction (a): the paper's global z in beta fails on some batches (derivations page)."""
    rng = np.random.default_rng(0)
    failures = 0
    for _ in range(60):
        theta, F = random_problem(rng, m=4, n=4, d=5, scale=1.0)
        full = partition_bound(theta, F).sigma.sum(0)
        assert _gap(low_rank_partition_bound(theta, F, 5), full) >= -1e-12
        failures += _gap(low_rank_partition_bound(theta, F, 5, per_sample_z=False), full) < -1e-6
    assert failures >= 1


def test_exact_variant_is_tighter_than_paper():
    """Median trace of V^T S V + D over random batches: exact < eig <= paper."""
    rng = np.random.default_rng(5)
    tr = {v: [] for v in VARIANTS}
    for _ in range(30):
        theta, F = random_problem(rng, m=4, n=5, d=8)
        for v in VARIANTS:
            b = low_rank_partition_bound(theta, F, 3, variant=v)
            tr[v].append(np.trace(b.curvature()))
    med = {v: np.median(np.asarray(tr[v]) / np.asarray(tr["paper"])) for v in VARIANTS}
    assert med["exact"] < 0.9 and med["eig"] <= 1.0 + 1e-12, med


def test_full_rank_exact_variant_is_exact():
    rng = np.random.default_rng(2)
    theta, F = random_problem(rng, m=3, n=3, d=8)
    b = low_rank_partition_bound(theta, F, 8, variant="exact")
    np.testing.assert_allclose(b.curvature(), partition_bound(theta, F).sigma.sum(0), atol=1e-10)
    np.testing.assert_allclose(b.D, 0.0, atol=1e-12)


def test_first_labels_give_no_nan():
    """Correction (b): r = g = 0 for each sample's first label and for a constant feature."""
    F = np.zeros((3, 4, 5))
    F[:, :, 0] = 1.0  # identical features for every label: all r = 0
    for v in VARIANTS:
        b = low_rank_partition_bound(np.ones(5), F, 2, variant=v)
        assert np.all(np.isfinite(b.V)) and np.all(b.D == 0) and np.all(b.S == 0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_multinomial_form_matches_generic(variant):
    rng = np.random.default_rng(4)
    X, W = rng.normal(size=(5, 3)), rng.normal(size=(3, 4))
    bm = multinomial_low_rank_bound(W, X, 4, variant=variant)
    bg = low_rank_partition_bound(W.T.ravel(), mlr_features(X, 4), 4, variant=variant)
    np.testing.assert_allclose(bm.curvature(), bg.curvature(), atol=1e-10)
    full = multinomial_partition_bound(W, X).sigma(X).sum(0)
    assert _gap(bm, full) >= -1e-12
    np.testing.assert_allclose(bm.prob.sum(1), 1.0)


def test_woodbury_singular_s():
    """Correction (c): S with zero eigenvalues (empty slots)."""
    rng = np.random.default_rng(0)
    k, d = 5, 12
    V = np.linalg.qr(rng.normal(size=(d, k)))[0].T
    S = np.diag([0.0, 0.0, 0.5, 2.0, 7.0])
    Dv = rng.uniform(0.1, 2.0, size=d)
    G = rng.normal(size=(d, 3))
    exact = np.linalg.solve(np.diag(Dv) + V.T @ S @ V, G)
    np.testing.assert_allclose(woodbury_solve(V, S, Dv, G), exact, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(woodbury_solve(V, S, Dv, G[:, 0]), exact[:, 0], rtol=1e-11)
    with pytest.raises(ValueError, match="positive"):
        woodbury_solve(V, S, np.zeros(d), G)


@pytest.mark.parametrize("variant", VARIANTS)
def test_full_batch_low_rank_step_never_increases_objective(variant):
    rng = np.random.default_rng(8)
    for _ in range(5):
        m, p, n = 40, 4, 3
        X = np.hstack([rng.normal(size=(m, p - 1)) * 2, np.ones((m, 1))])
        y = rng.integers(0, n, size=m)
        W = rng.normal(size=(p, n))
        lam = float(rng.choice([1e-3, 1e-1]))
        f = multinomial_objective(W, X, y, lam)
        for _ in range(4):
            W, _ = lspfb_step(W, X, y, lam, 1.0, rank=3, variant=variant)
            f_new = multinomial_objective(W, X, y, lam)
            assert f_new <= f + 1e-12
            f = f_new


def test_low_rank_bad_input():
    theta, F = np.zeros(3), np.ones((2, 3, 3))
    with pytest.raises(ValueError, match="rank"):
        low_rank_partition_bound(theta, F, 4)
    with pytest.raises(ValueError, match="rank"):
        low_rank_partition_bound(theta, F, 0)
    with pytest.raises(TypeError, match="rank"):
        low_rank_partition_bound(theta, F, 1.5)
    with pytest.raises(ValueError, match="variant"):
        low_rank_partition_bound(theta, F, 2, variant="svd")
    with pytest.raises(ValueError, match="init"):
        low_rank_partition_bound(theta, F, 2, init="ones")
    F[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        low_rank_partition_bound(theta, F, 2)
    with pytest.raises(ValueError, match="rank"):
        multinomial_low_rank_bound(np.zeros((2, 3)), np.ones((4, 2)), 7)
