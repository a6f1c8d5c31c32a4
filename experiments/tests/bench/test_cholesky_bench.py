"""The exact-fit section of ``kernelkit bench jdl``: its multiply-add count and GEMM shape
(no timing asserts; the benchmark prints the times)."""

from __future__ import annotations

from kernelkit_experiments.bench import bench_jdl as bj


def test_cholesky_madds_counts_the_column_products():
    # step j of Algorithm 1 multiplies the n x j factor by a j-vector: n j multiply-adds
    n, mx, my = 1000, 7, 4
    brute = sum(n * j for j in range(mx)) + sum(n * j for j in range(my))
    assert bj.cholesky_madds(n, mx, my) == brute
    n, k = bj.gemm_shape(10**6, bj.cholesky_madds(10**6, 380, 380))
    assert k == 379  # sqrt(380 * 379) = 379.4997
    assert abs(n * k * k - 10**6 * 380 * 379) <= 10**6 * 380  # within one k of the count


def test_exact_fit_run_reports_ranks_and_ratio(monkeypatch):
    monkeypatch.setattr(bj, "GEMM_ROWS", 512)  # several row blocks of the GEMM
    r = bj._exact_fit_run(3000, seed=0)
    assert 10 < r["m_x"] < 3000 and 10 < r["m_y"] < 3000
    assert r["madds"] == bj.cholesky_madds(3000, r["m_x"], r["m_y"])
    assert r["gemm_k"] == bj.gemm_shape(3000, r["madds"])[1]
    assert r["ratio"] == r["fit_s"] / r["gemm_s"] > 0
    assert r["cpu_ratio"] == r["cpu_s"] / r["gemm_cpu_s"] > 0
