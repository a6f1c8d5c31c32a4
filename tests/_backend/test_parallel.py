"""The one thread pool: n_jobs convention, ordering, errors, nesting without deadlock."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from kernelkit._backend import parallel


def test_effective_n_jobs_follows_scikit_learn(monkeypatch):
    monkeypatch.setattr(parallel, "_cpus", lambda: 8)
    assert parallel.effective_n_jobs(3) == 3
    assert parallel.effective_n_jobs(-1) == 8
    assert parallel.effective_n_jobs(-2) == 7
    assert parallel.effective_n_jobs(-100) == 1
    monkeypatch.setenv("KERNELKIT_NUM_THREADS", "5")
    assert parallel.effective_n_jobs(None) == 5


@pytest.mark.parametrize("bad", [0, 1.5, "2", True])
def test_check_n_jobs_rejects(bad):
    with pytest.raises((TypeError, ValueError), match="n_jobs"):
        parallel.check_n_jobs(bad)


def test_pool_map_keeps_order_and_uses_threads():
    seen = set()

    def fn(i):
        seen.add(threading.get_ident())
        return i * i

    assert parallel.pool_map(fn, range(50), 4) == [i * i for i in range(50)]
    assert parallel.pool_map(fn, [], 4) == []


def test_pool_map_reraises_the_error():
    def fn(i):
        if i == 7:
            raise KeyError("block 7")
        return i

    with pytest.raises(KeyError, match="block 7"):
        parallel.pool_map(fn, range(20), 3)


def test_nested_maps_do_not_deadlock():
    # every outer task runs an inner threaded map on the same (small) shared pool
    def outer(i):
        return sum(parallel.pool_map(lambda j: i + j, range(8), 3))

    out = parallel.pool_map(outer, range(16), 3)
    assert out == [8 * i + 28 for i in range(16)]


@pytest.mark.parametrize("n_jobs", [1, 2, -1, None])
def test_map_row_blocks_covers_every_row_once(n_jobs):
    n, width = 5000, 100  # above the parallel threshold: several blocks
    out = np.zeros((n, width))

    def fn(lo, hi):
        out[lo:hi] += 1.0

    parallel.map_row_blocks(fn, n, width, 8, rows=333, n_jobs=n_jobs)
    np.testing.assert_array_equal(out, 1.0)


def test_block_map_results_in_block_order():
    parts = parallel.block_map(lambda a, b: (a, b), 10, 3, n_jobs=2)
    assert parts == [(0, 3), (3, 6), (6, 9), (9, 10)]


def test_run_beside_returns_both_results_and_uses_another_thread():
    main = threading.get_ident()
    side, work = parallel.run_beside(lambda: threading.get_ident(), lambda: "work")
    assert work == "work"
    # either a pool thread ran it, or it was cancelled and ran here: both give its value
    assert isinstance(side, int)
    # the calling thread's work waits until the side task has started, so the side task
    # cannot be cancelled and run here, however loaded the machine is (a fixed amount of
    # main-thread work raced the pool and lost under a parallel test run)
    started = threading.Event()

    def side_task():
        started.set()
        return threading.get_ident()

    side, waited = parallel.run_beside(side_task, lambda: started.wait(timeout=60))
    assert waited, "the side task never started on a pool thread"
    assert side != main


def test_run_beside_reraises_either_error():
    with pytest.raises(ZeroDivisionError):
        parallel.run_beside(lambda: 1 / 0, lambda: None)
    with pytest.raises(KeyError):
        parallel.run_beside(lambda: 1, lambda: {}["missing"])


def test_run_beside_inside_a_busy_pool_does_not_deadlock():
    # every pool thread runs a task that itself calls run_beside
    out = parallel.pool_map(
        lambda i: parallel.run_beside(lambda: i, lambda: -i), range(8), threads=2
    )
    assert out == [(i, -i) for i in range(8)]
