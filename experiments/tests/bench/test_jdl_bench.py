"""bench_jdl helpers (no timing asserts): memory accounting and the peer ladder."""

from __future__ import annotations

from kernelkit_experiments.bench import bench_jdl as bj


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


def test_lazy_gaussian_chunks_are_reproducible_and_distinct():
    import numpy as np
    import pytest

    pytest.importorskip("dask.array")
    from kernelkit.datasets._jdl import random_correlation_matrix

    C = random_correlation_matrix(6, 0)
    X, Y = bj._lazy_gaussian(C, 1000, 300, seed=0)
    assert X.shape == (1000, 3) and Y.shape == (1000, 3) and X.chunks[0] == (300, 300, 300, 100)
    Z = np.hstack([X.compute(), Y.compute()])
    np.testing.assert_array_equal(Z, np.hstack([X.compute(), Y.compute()]))
    assert not np.allclose(Z[:100], Z[300:400])  # each chunk its own stream
    # the rows are N(0, C): sample covariance within 5 standard errors (|C_ij| <= 1)
    assert np.abs(np.cov(Z.T) - C).max() < 5 * np.sqrt(2 / 1000)


def test_out_of_core_run_fits_lazily_generated_rows():
    import pytest

    pytest.importorskip("dask.array")
    r = bj._out_of_core_run(3000, 300, 1e-2, seed=0, dask_input=True)
    assert r["norm_err"] < 1e-10 and 0 < r["loss31"] < 0.5
    assert 2 <= r["m_x"] < 3000 / 4
