"""The panelled pivoted Cholesky is Algorithm 1: same pivots, same factor to round-off.

The reference below is Algorithm 1 written out on the dense kernel matrix, one column at a
time (line 4 ``l = (K[:, p] - L L[p]^T) / sqrt(d_p)``, line 5 for ``B``, line 7
``d -= l^2``), with the library's round-off guard (user guide, "Library choices") and
``argmax`` breaking ties by the lowest row. Panels, pool predictions, row blocks and
threads must not change a single pivot.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel

from kernelkit.distributions import _cholesky, pivoted_cholesky


def _reference(K, rel_tol=None, tol=None, max_rank=None):
    """Algorithm 1 on the dense (n, n) ``K``: (L (n, m), B[piv] (m, m), pivots, diag)."""
    n = K.shape[0]
    d = np.diag(K).astype(np.float64)
    trace = float(d.sum())
    threshold = max(t for t in (tol, None if rel_tol is None else rel_tol * trace) if t)
    floor = 1e-14 * d.max()
    max_rank = n if max_rank is None else min(max_rank, n)
    L, Bp, piv = np.zeros((n, max_rank)), np.zeros((max_rank, max_rank)), []
    m = 0
    while d.sum() > threshold and m < max_rank:
        p = int(np.argmax(d))
        if d[p] <= floor:
            break
        lp = L[p, :m].copy()
        s = 1.0 / math.sqrt(d[p])
        L[:, m] = (K[:, p] - L[:, :m] @ lp) * s  # line 4
        Bp[:m, m] = -(Bp[:m, :m] @ lp) * s  # line 5, pivot rows
        Bp[m, m] = s
        d = d - L[:, m] ** 2  # line 7
        d[p] = 0.0
        d = np.maximum(d, 0.0)
        piv.append(p)
        m += 1
    return L[:, :m], Bp[:m, :m], np.array(piv, dtype=np.intp), d


def _gauss(X, ls):
    X = np.asarray(X, dtype=np.float64)
    return rbf_kernel(X, X, gamma=0.5 / ls**2)


class _Log(list):
    """The candidates of each panel, and ``passes``: counts of single and paired passes."""


@pytest.fixture
def small_panels(monkeypatch):
    """Row blocks of 97 rows (several blocks and threads at small n), pools of 16 to 64
    rows (predictions miss, panels end early and pools grow) and panels of 8 pivots;
    collects the candidates of each panel and counts the passes over the rows."""
    monkeypatch.setattr(_cholesky, "_BLOCK", 97)
    monkeypatch.setattr(_cholesky, "_POOL", 16)
    monkeypatch.setattr(_cholesky, "_POOL_MAX", 64)
    monkeypatch.setattr(_cholesky, "_PANEL", 8)
    panels = _Log()
    predict = _cholesky._predict

    def counting(*args):
        cand, certain = predict(*args)
        panels.append(cand)
        return cand, certain

    monkeypatch.setattr(_cholesky, "_predict", counting)
    # passes over the rows: one step, two at once, or a panel's certain steps at once
    passes = {"single": 0, "pair": 0, "commit": 0, "committed": 0}
    commit_init = _cholesky._Commit.__init__

    def counting_commit(self, Lt, d, S, Tinv, *args):
        passes["commit"] += 1
        passes["committed"] += Tinv.shape[0]
        commit_init(self, Lt, d, S, Tinv, *args)

    monkeypatch.setattr(_cholesky._Commit, "__init__", counting_commit)
    for cls, key, name in (
        (_cholesky._Step, "single", "set"),
        (_cholesky._PairStep, "pair", "set_pair"),
    ):
        setter = getattr(cls, name)

        def wrapped(self, *args, _setter=setter, _key=key):
            passes[_key] += 1
            return _setter(self, *args)

        monkeypatch.setattr(cls, name, wrapped)
    panels.passes = passes
    return panels


def _check(res, K, rel_tol=None, tol=None, max_rank=None, X=None):
    """Compare with the reference; with ``X``, pivots only as points (twins are
    interchangeable: their residuals tie exactly in exact arithmetic, and round-off, not
    the algorithm, decides which one the reference takes)."""
    L, Bp, piv, d = _reference(K, rel_tol=rel_tol, tol=tol, max_rank=max_rank)
    if X is None:
        np.testing.assert_array_equal(res.pivots, piv)
    else:
        np.testing.assert_array_equal(X[res.pivots], X[piv])
    # Entries of L are bounded by sqrt(max diag K) = 1, but a round-off difference in one
    # column reaches the later ones divided by sqrt(d_p) (line 4), and 1 / sqrt(d_p) <=
    # ||B[piv]||_2 =: b; B[piv] = L[piv]^-T (17), so its differences scale with b^2. At
    # rel_tol = 1e-6 (b = 1.1e3) the measured differences were 1.7e-15 b and 1.6e-13 b^2.
    b = max(1.0, np.linalg.norm(Bp, 2)) if len(piv) else 1.0
    np.testing.assert_allclose(res.L, L, rtol=0, atol=1e-12 * b)
    np.testing.assert_allclose(res.B_piv, Bp, rtol=0, atol=1e-11 * b**2)
    if X is None:
        np.testing.assert_allclose(res.diag_residual, d, rtol=0, atol=1e-12 * b)
    assert res.trace_residual == pytest.approx(d.sum(), abs=1e-9)
    return piv


@pytest.mark.parametrize("commits", [True, False], ids=["commits", "steps-only"])
@pytest.mark.parametrize("rel_tol", [1e-1, 1e-3, 1e-6])
def test_random_points_same_factor(small_panels, monkeypatch, rel_tol, commits):
    """With the certain pivots committed a panel at a time, and without (every step a
    pass of its own, single or paired, as for the uncertain candidates)."""
    if not commits:
        monkeypatch.setattr(_cholesky, "_panel_factor", lambda *args: np.zeros((0, 0)))
    X = np.random.default_rng(0).standard_normal((1200, 3))
    res = pivoted_cholesky("gaussian", X, lengthscale=0.8, rel_tol=rel_tol)
    piv = _check(res, _gauss(X, 0.8), rel_tol=rel_tol)
    if rel_tol < 1e-2:
        assert len(piv) > 40
        # some predictions were wrong (candidates never used) and panels ended early
        assert sum(len(c) for c in small_panels) > len(piv)
        assert len(small_panels) > math.ceil(len(piv) / 8)
        passes = small_panels.passes
        if commits:  # most steps in commits, a few on their own (uncertain candidates)
            assert passes["committed"] > len(piv) // 2
            assert passes["single"] + passes["pair"] > 0
        else:  # paired passes: some kept both steps, some only the first
            assert passes["commit"] == 0
            kept = len(piv) - passes["single"] - passes["pair"]  # second steps kept
            assert 0 < kept < passes["pair"]


def test_exact_ties_go_to_the_lowest_row(small_panels):
    """Far-apart points leave many residuals exactly 1.0 after each pivot (k^2 < 2^-53):
    the pivot must be the lowest of the tied rows, as argmax takes it."""
    X = np.random.default_rng(1).uniform(0.0, 1.0, (900, 2))
    K = _gauss(X, 0.02)
    res = pivoted_cholesky("gaussian", X, lengthscale=0.02, rel_tol=0.5)
    d = np.diag(K).copy()
    piv = _check(res, K, rel_tol=0.5)
    L = res.L
    ties = 0
    for j, p in enumerate(piv):  # replay: how many steps had a tie for the maximum
        ties += int(np.count_nonzero(d == d[p]) > 1)
        d = np.maximum(d - L[:, j] ** 2, 0.0)
        d[p] = 0.0
    assert ties > 40  # 48 of the steps


def test_duplicate_points_and_numerical_rank(small_panels):
    base = np.random.default_rng(2).standard_normal((30, 2))
    X = np.concatenate([base, base[::-1], base[:7]])  # every point at least twice
    K = _gauss(X, 1.0)
    res = pivoted_cholesky("gaussian", X, lengthscale=1.0, rel_tol=1e-15)
    piv = _check(res, K, rel_tol=1e-15, X=X)
    assert len(piv) == 30  # each distinct point once: the twin's residual is round-off
    assert len(np.unique(X[piv], axis=0)) == 30


def test_rank_deficient_callable(small_panels):
    """Linear kernel in 3 dimensions: rank 3, stopped by the round-off guard."""
    X = np.random.default_rng(3).standard_normal((500, 3)) + 2.0
    res = pivoted_cholesky(lambda A, B: A @ B.T, X, rel_tol=1e-15)
    piv = _check(res, X @ X.T, rel_tol=1e-15)
    assert len(piv) == 3


@pytest.mark.parametrize("n", [1, 2, 5])
def test_fewer_rows_than_a_panel(small_panels, n):
    X = np.random.default_rng(4).standard_normal((n, 2))
    res = pivoted_cholesky("gaussian", X, lengthscale=0.3, rel_tol=1e-12)
    assert len(_check(res, _gauss(X, 0.3), rel_tol=1e-12)) == n


def test_tolerance_reached_at_one_pivot(small_panels):
    X = 1e-3 * np.random.default_rng(5).standard_normal((400, 2))  # K ~ all ones
    res = pivoted_cholesky("gaussian", X, lengthscale=1.0, rel_tol=1e-2)
    assert len(_check(res, _gauss(X, 1.0), rel_tol=1e-2)) == 1


def test_max_rank_and_absolute_tol_inside_a_panel(small_panels):
    X = np.random.default_rng(6).standard_normal((700, 2))
    K = _gauss(X, 0.5)
    res = pivoted_cholesky("gaussian", X, lengthscale=0.5, rel_tol=1e-9, max_rank=13)
    assert len(_check(res, K, rel_tol=1e-9, max_rank=13)) == 13
    res = pivoted_cholesky("gaussian", X, lengthscale=0.5, tol=30.0)
    _check(res, K, tol=30.0)


def test_float32_input(small_panels):
    X = np.random.default_rng(7).standard_normal((800, 3)).astype(np.float32)
    res = pivoted_cholesky("gaussian", X, lengthscale=1.0, rel_tol=1e-4)
    assert res.Lt.dtype == np.float64 and res.B_piv.dtype == np.float64
    _check(res, _gauss(X, 1.0), rel_tol=1e-4)  # the float64 kernel of the float32 points


@pytest.mark.parametrize("kind", ["laplacian", "matern52", "cauchy"])
def test_other_kernels(small_panels, kind):
    from kernelkit.distributions._kernels import Kernel

    X = np.random.default_rng(8).standard_normal((600, 2))
    res = pivoted_cholesky(kind, X, lengthscale=0.7, rel_tol=1e-3)
    _check(res, Kernel(kind, 0.7)(X, X), rel_tol=1e-3)


def test_default_sizes_and_threads():
    """The default panel and pool sizes, and one thread vs the default threads."""
    n = 2 * _cholesky._BLOCK + 5000  # several row blocks
    X = np.random.default_rng(9).standard_normal((n, 3))
    res = pivoted_cholesky("gaussian", X, lengthscale=1.0, rel_tol=3e-2)
    sub = np.sort(np.random.default_rng(10).choice(n, 3000, replace=False))
    assert res.rank > _cholesky._PANEL  # several panels
    # (18) on a subset of rows, against the exact kernel: K[sub, piv] B[piv] = L[sub]
    Kp = rbf_kernel(X[sub], X[res.pivots], gamma=0.5)
    np.testing.assert_allclose(Kp @ res.B_piv, res.L[sub], atol=1e-9)
    serial = _cholesky._pivoted_cholesky(
        _cholesky.make_kernel("gaussian", 1.0), X, None, 3e-2, n, n_jobs=1
    )
    np.testing.assert_array_equal(serial.pivots, res.pivots)
    np.testing.assert_allclose(serial.Lt, res.Lt, rtol=0, atol=1e-12)
