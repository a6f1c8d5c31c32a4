"""Chunked input shared by the out-of-core fits (estimators and distributions).

What counts as chunked input (a Dask array, or an iterable of blocks), the binary tree
that sums per-chunk results, and the BLAS thread limit while Dask's threaded scheduler
runs those chunks. Dask is imported only when a Dask array is actually given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import numpy as np

__all__ = ["blas_threads_for_dask", "is_chunked", "is_dask_array", "tree_reduce"]


def is_dask_array(X) -> bool:
    """Whether ``X`` is a ``dask.array.Array`` (without importing Dask)."""
    return type(X).__module__.split(".")[0] == "dask" and hasattr(X, "chunks")


def is_chunked(X) -> bool:
    """A Dask array, or an iterable of blocks that is not itself array-like."""
    if is_dask_array(X):
        return True
    if isinstance(X, np.ndarray | list | tuple | str | bytes) or hasattr(X, "__array__"):
        return False
    if hasattr(X, "shape") or hasattr(X, "__array_namespace__"):  # torch & friends
        return False
    return isinstance(X, Iterable)


def tree_reduce(parts: list, combine):
    """``combine`` the items of ``parts`` pairwise in a binary tree (depth log2 of their
    number), left to right; ``parts`` may be Dask delayed objects."""
    while len(parts) > 1:
        parts = [
            combine(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
            for i in range(0, len(parts), 2)
        ]
    return parts[0]


def blas_threads_for_dask(result, n_chunks: int):
    """One BLAS thread per task while the threaded scheduler computes ``result`` (chunks > 1).

    The threaded scheduler runs one task per core, each calling BLAS; with BLAS's own
    thread pool on top, ``cores x cores`` threads compete for the cores. Limited for the
    duration of the ``compute`` (process-wide, as BLAS thread counts are). Other
    schedulers are left alone (``distributed`` workers already start with one BLAS
    thread; the synchronous scheduler runs one task at a time).
    """
    import dask
    import dask.threaded

    if n_chunks > 1 and dask.base.get_scheduler(collections=[result]) is dask.threaded.get:
        from .parallel import SingleThreadedBlas

        return SingleThreadedBlas()
    return contextlib.nullcontext()
