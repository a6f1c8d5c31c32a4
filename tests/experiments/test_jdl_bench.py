"""bench_jdl helpers (no timing asserts): memory accounting and the peer ladder."""

from __future__ import annotations

from kernelkit.experiments import bench_jdl as bj


def test_scale_run_memory_is_order_n_m():
    n = 4000
    r = bj._scale_run(n, 500, 1e-2, seed=0)
    m = r["m_x"] + r["m_y"]
    assert 2 <= m < n / 4
    # the traced peak holds both factors (8 n m bytes) but nothing of size n x n
    assert r["peak_bytes"] >= 8 * n * m
    assert r["peak_bytes"] < 8 * n * n / 10
    assert r["norm_err"] < 1e-10  # JDL conditionals are normalised
    assert 0 < r["loss31"] < 0.5


def test_krr_ladder_respects_budget():
    assert bj._krr_n(20_000, 3 * 8 * 5_000**2) == 5_000
    assert bj._krr_n(2_000, 1 << 40) == 2_000
    assert bj._krr_n(20_000, 1) == 1_000  # smallest rung when nothing fits
