"""One place for threads: kernelkit's worker pool, the BLAS thread limit and ``n_jobs``.

NumPy work in kernelkit is parallel over *blocks*: row blocks of an ``(n, D)`` feature
matrix, column blocks of an ``(m, n)`` factor, the row chunks of an in-memory fit. Each
block is a BLAS call plus a few in-place ufuncs on data that stays in the core's cache,
and the blocks are spread over one process-wide thread pool (BLAS and NumPy ufuncs
release the GIL) while BLAS itself runs on one thread, so that ``cores x cores`` threads
never compete for the cores. Torch and other backends run their own kernels and do not
use this module.

Every function here takes ``n_jobs`` in scikit-learn's convention:

* ``None``: :func:`num_threads` (the CPUs this process may use, capped by the current
  BLAS thread limit and by the environment variable ``KERNELKIT_NUM_THREADS``);
* a positive integer: that many threads;
* a negative integer: ``cpus + 1 + n_jobs`` (``-1`` all CPUs, ``-2`` all but one).

Results never depend on the thread count: blocks have a fixed size, block results are
combined in block order, and work of several blocks runs with BLAS on one thread whatever
``n_jobs`` is (``n_jobs=1`` too: a threaded BLAS splits a product's columns differently,
which changes the last bit of some entries, e.g. of a GEMM 46 columns wide). Calls from
several Python threads at once agree with serial calls to round-off, not bitwise: the
BLAS thread count is process-wide, so one call's single-threaded BLAS also applies to
the BLAS calls that another thread makes meanwhile.
"""

from __future__ import annotations

import numbers
import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "OneThreadPerTask",
    "SingleThreadedBlas",
    "block_map",
    "check_n_jobs",
    "effective_n_jobs",
    "map_row_blocks",
    "num_threads",
    "pool_map",
    "run_beside",
]

#: target size in bytes of one row block of a feature matrix
BLOCK_BYTES = 1 << 21
#: fewest rows in a default row block
MIN_BLOCK_ROWS = 64
#: outputs with fewer elements are computed in one block in the calling thread
PARALLEL_MIN_ELEMENTS = 1 << 17
#: most threads of :func:`block_map` (memory-bound products gain nothing beyond)
MAX_THREADS = 8

_lock = threading.Lock()
_blas_state = {"users": 0, "ctx": None, "controller": None, "orig": None}
#: users of :class:`OneThreadPerTask` (an outer scheduler runs one task per core)
_task_state = {"users": 0}
_pool_state = {"pool": None, "size": 0, "pid": None}


def _after_fork_in_child() -> None:
    """A forked child starts with no kernelkit thread: a fresh lock (the parent's may have
    been held by one of its threads at the fork, which left the child's first call
    waiting for ever), no pool, and no single-thread BLAS limit in use; a limit that a
    parent thread held is lifted (nothing in the child would ever restore it)."""
    global _lock
    _lock = threading.Lock()
    held, orig = _blas_state["users"] > 0, _blas_state["orig"]
    _blas_state.update(users=0, ctx=None, orig=None)
    _task_state["users"] = 0
    _pool_state.update(pool=None, size=0, pid=None)
    ctl = _blas_state["controller"]
    if held and orig and ctl:
        try:
            _as_blas_controller(lambda: ctl.limit(limits=orig))
        except Exception:  # no BLAS control in the child: it keeps one thread
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------- thread counts
def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def num_threads() -> int:
    """Default number of threads (``n_jobs=None``).

    ``KERNELKIT_NUM_THREADS`` if set, else the CPUs available to this process
    (``os.sched_getaffinity``, falling back to ``os.cpu_count()``), and never more than
    the current BLAS thread limit (so ``threadpoolctl.threadpool_limits(1)``, joblib
    workers and ``OPENBLAS_NUM_THREADS=1`` keep kernelkit single-threaded); 1 inside
    :class:`OneThreadPerTask` (Dask's threads already run one task per core).
    """
    if _task_state["users"] > 0:
        return 1
    env = os.environ.get("KERNELKIT_NUM_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    n = _cpus()
    # inside kernelkit's own single-thread limit, the limit that was there before it
    blas = _blas_state["orig"] if _blas_state["users"] > 0 else _blas_threads()
    return max(1, min(n, blas) if blas else n)


def check_n_jobs(n_jobs, name: str = "n_jobs"):
    """Validate an ``n_jobs`` parameter (None or a non-zero integer); return it."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral):
        raise TypeError(f"{name} must be None or a non-zero integer, got {n_jobs!r}.")
    if int(n_jobs) == 0:
        raise ValueError(f"{name}=0 is not valid; use None, a positive count or -1 (all CPUs).")
    return int(n_jobs)


def effective_n_jobs(n_jobs=None) -> int:
    """Number of threads for ``n_jobs`` in scikit-learn's convention (see module doc)."""
    n_jobs = check_n_jobs(n_jobs)
    if n_jobs is None:
        return num_threads()
    if n_jobs < 0:
        return max(1, _cpus() + 1 + n_jobs)
    return n_jobs


# ---------------------------------------------------------------------- BLAS limit
def _controller():
    if _blas_state["controller"] is None:
        try:
            from threadpoolctl import ThreadpoolController

            _blas_state["controller"] = ThreadpoolController().select(user_api="blas")
        except Exception:  # threadpoolctl missing or failing: no BLAS control
            _blas_state["controller"] = False
    return _blas_state["controller"]


def _blas_threads():
    ctl = _controller()
    if not ctl:
        return None
    try:
        counts = [info["num_threads"] for info in ctl.info()]
    except Exception:
        return None
    return min(counts) if counts else None


def _as_blas_controller(fn):
    """``fn()`` with this thread allowed to set OpenBLAS's (process-wide) thread count.

    threadpoolctl (3.8) lets only one "controlling" Python thread set a pthreads
    OpenBLAS's thread count, the first that sets it, and silently ignores the others;
    a limit set without a ``with`` block never hands control back. So once the main
    thread had set a limit, a limit set (or restored) by a Dask worker thread did
    nothing. kernelkit sets and restores its limit under its own lock, as the
    controlling thread of that moment, and then hands control back.
    """
    try:
        from threadpoolctl import OpenBLASController

        clear = OpenBLASController.clear_controlling_thread
    except (ImportError, AttributeError):  # older threadpoolctl: any thread sets
        return fn()
    clear(force=True)
    try:
        return fn()
    finally:
        clear(force=True)


class SingleThreadedBlas:
    """Context manager: BLAS on one thread while kernelkit's own threads (or Dask's) run.

    Reference counted, so concurrent and nested users restore the original limit exactly
    once, whichever thread enters first or leaves last. Also used around small (d x d,
    m x m) linear algebra: a threaded OpenBLAS call leaves its worker threads spinning for
    ~0.1 s, which slows the next big computation.
    """

    def __enter__(self):
        with _lock:
            if _blas_state["users"] == 0:
                ctl = _controller()
                ctx = None
                _blas_state["orig"] = _blas_threads()
                if ctl:
                    try:
                        ctx = _as_blas_controller(lambda: ctl.limit(limits=1))
                    except Exception:
                        ctx = None
                _blas_state["ctx"] = ctx
            _blas_state["users"] += 1
        return self

    def __exit__(self, *exc):
        with _lock:
            _blas_state["users"] -= 1
            if _blas_state["users"] == 0 and _blas_state["ctx"] is not None:
                ctx, _blas_state["ctx"] = _blas_state["ctx"], None
                _as_blas_controller(ctx.restore_original_limits)
        return False


class OneThreadPerTask(SingleThreadedBlas):
    """Context manager: while an outer scheduler (Dask's threaded scheduler) runs one task
    per core, each task runs on one thread: BLAS single-threaded and ``n_jobs=None`` one
    kernelkit thread (explicit ``n_jobs`` are kept), so tasks add no threads to the
    cores. Process-wide and reference counted, as :class:`SingleThreadedBlas`.
    """

    def __enter__(self):
        super().__enter__()
        with _lock:
            _task_state["users"] += 1
        return self

    def __exit__(self, *exc):
        with _lock:
            _task_state["users"] -= 1
        return super().__exit__(*exc)


# ---------------------------------------------------------------------- the pool
def _submit(fn, size: int):
    """``fn`` submitted to the process-wide pool of at least ``size`` threads (new after
    ``fork`` or to grow); its future.

    Looked up and submitted under the lock: a pool that another thread replaces to grow
    it is shut down, and a submit to it after that raised ``RuntimeError: cannot schedule
    new futures after shutdown`` (threads whose first calls ask for different thread
    counts at once). Tasks already submitted to a replaced pool still run.
    """
    with _lock:
        st = _pool_state
        if st["pool"] is None or st["pid"] != os.getpid() or st["size"] < size:
            if st["pool"] is not None and st["pid"] == os.getpid():
                st["pool"].shutdown(wait=False)
            st.update(
                pool=ThreadPoolExecutor(size, thread_name_prefix="kernelkit"),
                size=size,
                pid=os.getpid(),
            )
        return st["pool"].submit(fn)


def pool_map(fn, items, threads: int) -> list:
    """``[fn(item) for item in items]`` on ``threads`` threads of the shared pool, in order.

    The calling thread works too and takes tasks from the same queue, so a busy (or
    nested) pool delays but never deadlocks: helpers that have not started when the
    queue runs dry are cancelled. The first exception of a task is re-raised.
    """
    items = list(items)
    threads = max(1, min(int(threads), len(items)))
    if threads == 1:
        return [fn(item) for item in items]
    results = [None] * len(items)
    position = iter(range(len(items)))
    take = threading.Lock()
    errors = []

    def worker():
        while not errors:
            with take:
                i = next(position, None)
            if i is None:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as exc:  # re-raised in the caller
                errors.append(exc)
                return

    helpers = [_submit(worker, threads - 1) for _ in range(threads - 1)]
    worker()
    for f in helpers:
        if not f.cancel():
            f.result()
    if errors:
        raise errors[0]
    return results


def run_beside(fn, work):
    """``(fn(), work())`` with ``fn`` on a thread of the shared pool while the calling thread
    runs ``work`` (which may use the pool itself: ``fn`` is then one more task in its queue).

    ``fn`` must not touch what ``work`` touches. If no pool thread has started ``fn`` by the
    time ``work`` returns, it is cancelled and run in the calling thread, so a busy pool
    delays but never deadlocks. Exceptions of either are re-raised.
    """
    future = _submit(fn, 1)
    try:
        result = work()
    except BaseException:
        future.cancel()
        raise
    return (fn() if future.cancel() else future.result()), result


def map_row_blocks(fn, n: int, width: int, itemsize: int, rows=None, n_jobs=None) -> None:
    """Call ``fn(lo, hi)`` for row blocks ``[lo, hi)`` covering ``range(n)``.

    ``fn`` writes rows ``lo:hi`` of an ``(n, width)`` output with elements of ``itemsize``
    bytes and must touch only its own rows (blocks run concurrently). Blocks have ``rows``
    rows, by default as many as fit in ``BLOCK_BYTES``; outputs of fewer than
    ``PARALLEL_MIN_ELEMENTS`` entries are computed in one call in the calling thread.
    """
    if n <= 0:
        return
    if n * width < PARALLEL_MIN_ELEMENTS:
        fn(0, n)
        return
    if rows is None:
        # cache-sized blocks, but never so thin that re-reading the (d, width) weights
        # per block dominates (wide dot-product sketches: p * D columns per row)
        rows = max(MIN_BLOCK_ROWS, BLOCK_BYTES // max(1, width * itemsize))
    rows = max(1, int(rows))
    blocks = [(lo, min(lo + rows, n)) for lo in range(0, n, rows)]
    if len(blocks) == 1:  # one block: the same call whatever n_jobs is
        fn(0, n)
        return
    threads = min(effective_n_jobs(n_jobs), len(blocks))
    with SingleThreadedBlas():  # on one thread too: results independent of n_jobs
        pool_map(lambda block: fn(*block), blocks, threads)


def block_map(fn, n: int, block: int, n_jobs=None, max_threads: int = MAX_THREADS) -> list:
    """``[fn(a, b) for each block [a, b) of range(n)]`` in block order, threaded.

    BLAS is single-threaded while ``fn`` runs on more than one block (whatever the thread
    count, so that the results do not depend on it); ``fn`` must only read shared data or
    write its own block. At most ``max_threads`` threads (memory-bound products gain nothing
    beyond).
    """
    spans = [(a, min(a + block, n)) for a in range(0, n, block)]
    threads = max(1, min(effective_n_jobs(n_jobs), max_threads, len(spans)))
    if len(spans) <= 1:  # one block: the same call whatever n_jobs is
        return [fn(a, b) for a, b in spans]
    with SingleThreadedBlas():  # on one thread too: results independent of n_jobs
        return pool_map(lambda ab: fn(*ab), spans, threads)
