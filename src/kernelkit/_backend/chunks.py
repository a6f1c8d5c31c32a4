"""Rows in blocks and chunks: one implementation for the out-of-core and blocked fits.

The estimators (ridge / GP statistics ``Phi^H Phi``, ``Phi^H Y``) and the distributions
(JDL statistics ``L^T L``, ``L_Y^T L_X``) reduce sums over the rows of their training
data in the same three ways (user guide: "Scale-out with Dask"):

* **NumPy arrays** -- contiguous row blocks on kernelkit's threads (``n_jobs``, BLAS
  single-threaded, :mod:`kernelkit._backend.parallel`), the block results combined left
  to right in block order (:func:`reduce_blocks`, :func:`reduce_rows`);
* **a Dask array** -- one task per row chunk on the active Dask scheduler (threads, or a
  ``distributed.Client``), combined in a binary tree (:func:`tree_reduce`), with one
  thread (BLAS and kernelkit's) per task under the threaded scheduler
  (:func:`blas_threads_for_dask`);
* **an iterable of** ``(X_block, Y_block)`` **pairs** -- consumed once, in order
  (:func:`iter_block_pairs`); a list, tuple or other sequence of them
  (:func:`is_block_sequence`) can be read again.

Every NumPy block is checked by :func:`check_block` (real, finite, the right columns,
with a message naming the block), Dask arrays are checked and aligned lazily by
:func:`as_dask_rows` (class labels of any dtype by :func:`as_dask_labels`), and
:func:`map_row_chunks` maps a function over row chunks lazily (predictions on Dask
input), each task on one thread under the threaded scheduler (:func:`one_thread_per_task`),
and :func:`predict_in_slabs` maps a function over in-memory rows a slab at a time
(predictions that would otherwise form all ``n x width`` features or basis values).
Dask is imported only when a Dask array is actually given.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import operator
from collections.abc import Iterable, Sequence

import numpy as np

from .optional import require
from .parallel import MAX_THREADS, OneThreadPerTask, block_map, effective_n_jobs

__all__ = [
    "as_dask_labels",
    "as_dask_rows",
    "blas_threads_for_dask",
    "check_block",
    "check_chunk",
    "check_dask_matrix",
    "checked_chunks",
    "dask_classes",
    "dask_unique",
    "is_block_sequence",
    "is_chunked",
    "is_dask_array",
    "iter_block_pairs",
    "known_row_chunks",
    "map_row_chunks",
    "one_thread_per_task",
    "one_thread_per_task_map",
    "predict_in_slabs",
    "reduce_blocks",
    "reduce_rows",
    "reject_sparse",
    "tree_reduce",
]

#: how a one-dimensional block / array is taken: as one column, kept 1-D (targets), or
#: rejected (a data matrix of scikit-learn's ``(n_samples, n_features)`` convention)
VECTOR_POLICIES = ("column", "keep", "error")
#: values (rows x width) of one slab of :func:`predict_in_slabs`: 8 MiB of complex128
#: features, 4 MiB of float64 basis values
SLAB_ELEMENTS = 1 << 19
#: fewest rows of a slab: inputs of at most this many rows take one call (and their width
#: is not looked up)
FIRST_SLAB_ROWS = 256


# ------------------------------------------------------------------------ what is chunked
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


def is_block_sequence(X) -> bool:
    """Whether ``X`` is an iterable of blocks that can be read again: a list or tuple of
    ``(X_block, Y_block)`` pairs of arrays (array-likes of numbers are not: their items
    are numbers, or rows without ``ndim``), or another ``collections.abc.Sequence`` that
    is not array-like (:func:`is_chunked`). Generators and iterators are read once."""
    if isinstance(X, list | tuple):
        return len(X) > 0 and all(
            isinstance(pair, list | tuple)
            and len(pair) == 2
            and all(getattr(z, "ndim", 0) >= 1 for z in pair)
            for pair in X
        )
    return isinstance(X, Sequence) and is_chunked(X) and not is_dask_array(X)


def _is_real(dtype) -> bool:
    """Real numbers: floats, integers and bool (as in memory, the last two become float)."""
    return (
        np.issubdtype(dtype, np.floating)
        or np.issubdtype(dtype, np.integer)
        or np.issubdtype(dtype, np.bool_)
    )


def reject_sparse(Z, where: str) -> None:
    """``TypeError`` naming ``where`` if ``Z`` is a SciPy sparse matrix, or a Dask array of
    sparse chunks: these rows must be dense (the estimators, as scikit-learn's without
    sparse support; NumPy would wrap a sparse matrix in a 0-d object array)."""
    import scipy.sparse as sp

    if sp.issparse(Z):
        raise TypeError(
            f"{where} is a SciPy sparse {type(Z).__name__}, but dense data is required: "
            "convert it with .toarray()."
        )
    if is_dask_array(Z) and sp.issparse(getattr(Z, "_meta", None)):
        raise TypeError(
            f"{where} is a Dask array of SciPy sparse chunks, but dense data is required: "
            "convert its chunks with .map_blocks(lambda b: b.toarray())."
        )


def _shape_for(Z, name: str, vector: str, what: str):
    """``Z`` with the 1-D policy ``vector`` applied; ``ValueError`` for other ranks."""
    if vector not in VECTOR_POLICIES:
        raise ValueError(f"vector must be one of {VECTOR_POLICIES}, got {vector!r}.")
    if Z.ndim == 1 and vector == "column":
        Z = Z[:, None]  # (a Dask reshape needs known chunk sizes; indexing does not)
    if Z.ndim != 2 and not (Z.ndim == 1 and vector == "keep"):
        ranks = "1-D or 2-D" if vector == "keep" else "2-D (n_samples, n_features)"
        raise ValueError(f"{name} must be {ranks}, got {what} of shape {Z.shape}.")
    return Z


# ---------------------------------------------------------------------- NumPy blocks
def check_block(
    Z,
    name: str,
    index: int,
    *,
    owner: str | None = None,
    n_columns: int | None = None,
    vector: str = "column",
    dtype=np.float64,
) -> np.ndarray:
    """Block ``index`` of the chunked array ``name`` as a checked C-contiguous NumPy array.

    ``vector`` says how a 1-D block is taken (:data:`VECTOR_POLICIES`); ``n_columns``, if
    given, is the number of columns a 2-D block must have. ``dtype``: the result's dtype,
    or None to keep float32 / float64 (other real dtypes become float64). Raises
    ``TypeError`` for non-real dtypes and ``ValueError`` for a wrong shape or NaN /
    infinity, each message naming ``owner`` (if given), ``name`` and the block.
    """
    where = f"{owner}: {name}" if owner else name
    reject_sparse(Z, f"{where}: block {index}")
    Z = _shape_for(np.asarray(Z), f"{where}: block {index}", vector, "an array")
    if not _is_real(Z.dtype):
        raise TypeError(f"{where}: block {index} has dtype {Z.dtype}; expected real numbers.")
    if n_columns is not None and Z.ndim == 2 and Z.shape[1] != n_columns:
        raise ValueError(
            f"{where}: block {index} has shape {Z.shape}; expected {n_columns} columns."
        )
    if dtype is None:
        dtype = Z.dtype if Z.dtype in (np.float32, np.float64) else np.float64
    Z = np.ascontiguousarray(Z, dtype=dtype)
    if not np.all(np.isfinite(Z)):
        raise ValueError(f"{where}: block {index} contains NaN or infinity.")
    return Z


def iter_block_pairs(
    blocks, owner: str, names=("X", "Y"), vector=("column", "column"), dtype=np.float64
):
    """The checked ``(X_block, Y_block)`` pairs of an iterable, in order (consumed once).

    Each block goes through :func:`check_block` (``vector``: the 1-D policy of each side);
    the two blocks of a pair must have as many rows, and every block as many columns as
    block 0. Empty blocks are yielded too. ``ValueError`` if the iterable is empty,
    ``TypeError`` if an item is not a pair.
    """
    nx, ny = names
    cols = (None, None)
    i = -1
    for i, item in enumerate(blocks):
        try:
            Xb, Yb = item
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{owner}: an iterable X must yield ({nx}_block, {ny}_block) pairs; "
                f"item {i} is a {type(item).__name__}."
            ) from exc
        Xb = check_block(Xb, nx, i, owner=owner, n_columns=cols[0], vector=vector[0], dtype=dtype)
        Yb = check_block(Yb, ny, i, owner=owner, vector=vector[1], dtype=dtype)
        if Xb.shape[0] != Yb.shape[0]:
            raise ValueError(
                f"{owner}: block {i} has {Xb.shape[0]} rows of {nx} but {Yb.shape[0]} of {ny}."
            )
        if i == 0:
            cols = (Xb.shape[1], Yb.shape[1:])
        elif Yb.shape[1:] != cols[1]:
            raise ValueError(
                f"{owner}: block {i} of {ny} has shape {Yb.shape}; block 0 had "
                f"{'1-D blocks' if not cols[1] else f'{cols[1][0]} columns'}."
            )
        yield Xb, Yb
    if i < 0:
        raise ValueError(
            f"{owner}: the iterable of blocks is empty (a generator or iterator yields its "
            "blocks once: make a new one for each fit)."
        )


# ------------------------------------------------------------------------ Dask arrays
def _dask_path(owner: str | None = None) -> str:
    """Who needs Dask, for :func:`~kernelkit._backend.optional.require`'s message."""
    return f"{owner}'s out-of-core (Dask) path" if owner else "The out-of-core (Dask) path"


def as_dask_rows(
    Z,
    name: str,
    n_features: int | None = None,
    rows_like=None,
    *,
    owner: str | None = None,
    vector: str = "column",
    known_rows: bool = True,
    dense: bool = True,
):
    """``Z`` as a checked Dask array of row chunks (lazily: nothing is computed).

    NumPy input is wrapped. The 1-D policy is ``vector`` (:data:`VECTOR_POLICIES`); the
    dtype must be real, a 2-D array must have ``n_features`` columns (if given); unknown
    chunk sizes are computed (unless ``known_rows=False``: a row-wise map needs no row
    counts, and computing them would run the graph that filtered the rows), the columns
    merged into one chunk (a chunk is a set of whole rows) and, with ``rows_like`` (a
    Dask array), the rows rechunked to its row chunks after checking the row counts agree.
    ``dense``: SciPy sparse chunks are a ``TypeError`` (:func:`reject_sparse`); the
    feature maps that take sparse input pass False.
    """
    where = f"{owner}: {name}" if owner else name
    da = require("dask.array", _dask_path(owner))
    if dense:
        reject_sparse(Z, where)
    if not is_dask_array(Z):
        try:
            Z = np.asarray(Z)
        except (TypeError, ValueError) as exc:  # ragged lists
            raise TypeError(f"{where} could not be converted to an array: {exc}") from exc
        # checked before wrapping: Dask's "auto" chunks divide by the row's bytes (0 for
        # no columns) and cannot size object rows
        if not _is_real(Z.dtype):
            raise TypeError(f"{where} must hold real numbers, got dtype {Z.dtype}.")
        if Z.ndim >= 2 and 0 in Z.shape[1:]:
            raise ValueError(f"{where} has 0 columns (shape {Z.shape}); it needs >= 1.")
        Z = da.from_array(Z, chunks=("auto",) + (-1,) * (Z.ndim - 1))
    Z = _shape_for(Z, where, vector, "a Dask array")
    if not _is_real(Z.dtype):
        raise TypeError(f"{where} must hold real numbers, got dtype {Z.dtype}.")
    if n_features is not None and Z.shape[1] != n_features:
        raise ValueError(
            f"{where} has {Z.shape[1]} features, but the model was fitted with "
            f"{n_features} features."
        )
    if (known_rows or rows_like is not None) and any(np.isnan(c) for c in Z.chunks[0]):
        Z = Z.compute_chunk_sizes()
    if Z.ndim == 2:
        Z = Z.rechunk({1: -1})
    if rows_like is not None:
        if Z.shape[0] != rows_like.shape[0]:
            raise ValueError(f"{where} has {Z.shape[0]} rows, expected {rows_like.shape[0]}.")
        Z = Z.rechunk({0: rows_like.chunks[0]})
    return Z


def _n_rows(block) -> int:
    return int(block.shape[0])


def known_row_chunks(*arrays):
    """``arrays`` with the unknown row-chunk sizes of their Dask arrays computed, in one
    pass for all of them (a chunk they share upstream, as X and y filtered by one
    boolean mask, is computed once; ``compute_chunk_sizes`` array by array read it once
    per array). Other items (NumPy, None) and Dask arrays of known sizes are returned as
    they are."""
    dask = require("dask", _dask_path())
    da = require("dask.array", _dask_path())

    todo = [
        i
        for i, a in enumerate(arrays)
        if is_dask_array(a) and a.ndim and any(np.isnan(c) for c in a.chunks[0])
    ]
    if not todo:
        return arrays
    counts = [
        [
            dask.delayed(_n_rows)(b)  # the first column chunk of each row chunk
            for b in arrays[i]
            .to_delayed(optimize_graph=False)
            .reshape(arrays[i].numblocks[0], -1)[:, 0]
        ]
        for i in todo
    ]
    sizes = dask.compute(*counts)
    out = list(arrays)
    for i, rows in zip(todo, sizes, strict=True):
        a = arrays[i]
        out[i] = da.Array(a.dask, a.name, (tuple(rows), *a.chunks[1:]), meta=a._meta)
    return tuple(out)


def check_dask_matrix(X, name: str, n_features: int | None = None):
    """A Dask data matrix (n, d) for a map of its rows, checked before computing: rank,
    dtype and width (complex input is a ``ValueError``, as in memory; so is a width Dask
    does not know). Returns X with its columns in one chunk (each task maps whole rows);
    unknown row counts stay unknown."""
    if np.dtype(X.dtype).kind == "c":
        raise ValueError(
            f"Complex data not supported: {name} must be real-valued, got complex dtype {X.dtype}."
        )
    if X.ndim != 2 or X.shape[1] == 0:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n_samples, n_features) with at least one "
            f"feature, got a Dask array of shape {X.shape}."
        )
    if np.isnan(X.shape[1]):
        raise ValueError(
            f"{name} has an unknown number of columns (a Dask array with unknown chunk sizes "
            f"along axis 1, shape {X.shape}): call {name}.compute_chunk_sizes() first."
        )
    return as_dask_rows(X, name, n_features, known_rows=False, dense=False)


def check_chunk(block, name: str, index: int, n_columns: int, finite: bool = False) -> None:
    """``ValueError`` naming ``name`` and its chunk ``index`` unless the computed chunk
    ``block`` (NumPy or SciPy sparse) has the ``n_columns`` columns of its Dask array
    (and, with ``finite``, only finite values). A chunk that is not the width its Dask
    array says (a reader returning other columns for one file) would otherwise fit a
    map of another dimension in silence, or fail where Dask joins the chunks with an
    error that names neither the argument nor the chunk."""
    shape = tuple(block.shape)
    if len(shape) != 2 or shape[1] != n_columns:
        raise ValueError(
            f"{name}: block {index} has shape {shape}; expected {n_columns} columns, the "
            "Dask array's width."
        )
    if finite:
        import scipy.sparse as sp

        values = block.data if sp.issparse(block) else np.asarray(block)
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{name}: block {index} contains NaN or infinity.")


def _checked_block(block, name, n_columns, finite, block_info=None):
    check_chunk(block, name, block_info[None]["chunk-location"][0], n_columns, finite)
    return block


def checked_chunks(Z, name: str, *, finite: bool = False):
    """The Dask data matrix ``Z`` (n, d) with its columns in one chunk, each row chunk
    checked by :func:`check_chunk` when it is computed (lazily: a task per chunk, in the
    same pass). For the places that compute rows of a Dask array into one NumPy array.
    An array that is not 2-D, or of unknown width, has no width to check: it is returned
    as it is."""
    if Z.ndim != 2 or math.isnan(Z.shape[1]):
        return Z
    Z = Z.rechunk({1: -1})
    return Z.map_blocks(_checked_block, name, int(Z.shape[1]), finite, dtype=Z.dtype, meta=Z._meta)


def as_dask_labels(y, rows_like, name: str = "y", *, owner: str | None = None):
    """Class labels ``y`` (n,) of any dtype as a Dask array with the row chunks of the
    Dask array ``rows_like`` (NumPy is wrapped; lazily). ``ValueError`` unless ``y`` is
    1-D with as many labels as ``rows_like`` has rows."""
    where = f"{owner}: {name}" if owner else name
    da = require("dask.array", _dask_path(owner))
    if y is None:
        raise ValueError(f"{where} is required.")
    if not is_dask_array(y):
        y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{where} must be 1-D (n_samples,), got shape {y.shape}.")
    if is_dask_array(y) and any(np.isnan(c) for c in y.chunks[0]):
        y = y.compute_chunk_sizes()
    if y.shape[0] != rows_like.shape[0]:
        raise ValueError(
            f"{where} has {y.shape[0]} labels but X has {rows_like.shape[0]} rows; they must match."
        )
    if not is_dask_array(y):
        return da.from_array(y, chunks=(rows_like.chunks[0],))
    return y.rechunk({0: rows_like.chunks[0]})


def dask_unique(y) -> np.ndarray:
    """The sorted distinct values of the 1-D Dask array ``y``: each chunk's, merged in a
    tree (:func:`reduce_rows`)."""
    return reduce_rows(lambda _, yb: np.unique(yb), [y], np.union1d)


def dask_classes(y) -> np.ndarray:
    """:func:`dask_unique` of the class labels ``y`` (a 1-D Dask array) after
    scikit-learn's check of classification targets; labels that cannot be sorted together
    (strings with numbers, in one chunk or across chunks) raise a ``TypeError`` naming
    ``y``, as the in-memory fits do, instead of NumPy's bare "'<' not supported"."""
    from sklearn.utils.multiclass import check_classification_targets

    from .sklearn_validation import unsortable_labels_error  # (it imports this module)

    try:
        classes = dask_unique(y)
    except TypeError as exc:
        raise unsortable_labels_error("y", f"{exc}") from None
    check_classification_targets(classes)  # the type of target of its values
    return classes


def map_row_chunks(Z, fn, n_outputs: int | None = None):
    """``fn`` over the row chunks of the Dask array ``Z`` (n, d), lazily: a float64 Dask
    array of shape (n,) (``n_outputs=None``) or (n, n_outputs). A chunk without rows (a
    boolean filter can empty any) maps to no rows; ``fn`` sees non-empty chunks only."""
    Z = Z.rechunk({1: -1})
    tail = () if n_outputs is None else (n_outputs,)

    @functools.wraps(fn)
    def rows(Zb):  # (b, d) -> (b,) or (b, n_outputs)
        return fn(Zb) if len(Zb) else np.empty((0, *tail))

    rows = one_thread_per_task_map(rows)  # one thread per task on the threaded scheduler
    if n_outputs is None:
        return Z.map_blocks(rows, drop_axis=1, dtype=np.float64, meta=np.empty(0))
    return Z.map_blocks(
        rows, chunks=(Z.chunks[0], (n_outputs,)), dtype=np.float64, meta=np.empty((0, 0))
    )


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
    """One thread per task while the threaded scheduler computes ``result`` (chunks > 1).

    The threaded scheduler runs one task per core, each calling BLAS and kernelkit's
    threaded feature maps; with their threads on top, up to ``cores x cores`` threads
    compete for the cores. BLAS and kernelkit's default thread count (``n_jobs=None``)
    are limited to one for the duration of the ``compute`` (process-wide, as BLAS thread
    counts are; :class:`~kernelkit._backend.parallel.OneThreadPerTask`). Other schedulers
    are left alone (``distributed`` workers already start with one BLAS thread, hence one
    kernelkit thread; the synchronous scheduler runs one task at a time).
    """
    import dask
    import dask.threaded

    if n_chunks > 1 and dask.base.get_scheduler(collections=[result]) is dask.threaded.get:
        return OneThreadPerTask()
    return contextlib.nullcontext()


def _threaded_scheduler_workers() -> int:
    """Worker threads of the Dask threaded-scheduler pool whose thread calls this, or 0.

    The pools are those of ``dask.threaded.get``: its default pool, the pools it makes
    per calling thread and worker count, and a ``concurrent.futures`` pool set as
    ``dask.config.set(pool=...)``. Other threads (the synchronous scheduler's caller, a
    ``distributed`` worker's, kernelkit's own) are not in them. Imports nothing: without
    ``dask.threaded`` loaded, no threaded scheduler has run. Attributes that a future
    Dask or Python might lack count as absent (0: the task keeps its threads).
    """
    import sys
    import threading

    threaded = sys.modules.get("dask.threaded")
    if threaded is None:  # no threaded scheduler has run in this process
        return 0
    config = sys.modules["dask"].config
    pools = [getattr(threaded, "default_pool", None), config.get("pool", None)]
    with getattr(threaded, "pools_lock", None) or contextlib.nullcontext():  # pools grow
        per_thread = list(getattr(threaded, "pools", {}).values())
    pools += [pool for by_workers in per_thread for pool in list(by_workers.values())]
    thread = threading.current_thread()
    for pool in pools:
        # a ThreadPoolExecutor's worker: named "<prefix>_<k>" (a new worker runs its first
        # task before the pool adds it to its _threads)
        prefix = getattr(pool, "_thread_name_prefix", None)
        named = isinstance(prefix, str) and thread.name.startswith(f"{prefix}_")
        if named or thread in getattr(pool, "_threads", ()):
            return int(getattr(pool, "_max_workers", 0))
    return 0


def one_thread_per_task():
    """One thread (BLAS and kernelkit's) for a Dask task that the threaded scheduler runs
    on a pool of several threads, as :func:`blas_threads_for_dask` gives the fits' tasks:
    a context manager to enter inside the task. Elsewhere (the synchronous scheduler, a
    ``distributed`` worker, a one-thread pool, no Dask) it changes nothing.

    The lazy maps of Dask arrays (feature maps' ``transform``, predictions) do not
    control the ``compute`` that runs them, so each task decides for itself; the values
    do not depend on it (kernelkit's results never depend on its thread count, and its
    parallel blocks run BLAS on one thread anyway).
    """
    if _threaded_scheduler_workers() > 1:
        return OneThreadPerTask()
    return contextlib.nullcontext()


def one_thread_per_task_map(fn):
    """``fn`` run under :func:`one_thread_per_task` (a function to map over row chunks)."""

    @functools.wraps(fn)
    def task(*args, **kwargs):
        with one_thread_per_task():
            return fn(*args, **kwargs)

    return task


# ------------------------------------------------------------------------ reductions
def reduce_blocks(fn, n: int, block: int, combine=operator.add, n_jobs=None):
    """``combine``-fold of ``fn(a, b)`` over the blocks ``[a, b)`` of ``range(n)`` (n > 0).

    The blocks run on kernelkit's threads (``n_jobs``, BLAS single-threaded;
    :func:`kernelkit._backend.parallel.block_map`) in waves of one block per thread, each
    wave folded into the running total before the next starts: at most ``threads + 1``
    block results are alive at once, however many blocks there are. The results are
    combined left to right in block order, so the result depends on ``block`` but not on
    the threads.
    """
    wave = block * max(1, min(effective_n_jobs(n_jobs), MAX_THREADS))  # rows of one wave
    total = None
    for lo in range(0, n, wave):
        parts = block_map(
            lambda a, b, lo=lo: fn(lo + a, lo + b), min(wave, n - lo), block, n_jobs=n_jobs
        )
        total = functools.reduce(combine, parts if total is None else [total, *parts])
    return total


def reduce_rows(
    fn, arrays, combine=operator.add, *, block: int | None = None, n_jobs=None, known=None
):
    """``combine``-reduce of ``fn(index, *blocks)`` over the aligned row blocks of ``arrays``.

    Dask arrays (all of them, aligned by :func:`as_dask_rows`): one task per row chunk
    on the active scheduler, ``index`` the chunk number, combined in a binary tree and
    computed with one thread per task under the threaded scheduler; ``known``: ``{index:
    blocks}`` for chunks the caller has computed already (their NumPy blocks are used,
    the chunks not computed again). NumPy arrays:
    blocks of ``block`` rows (``index`` = block number) on kernelkit's threads
    (:func:`reduce_blocks`). ``fn`` gets the blocks as they are; it validates them.
    """
    if is_dask_array(arrays[0]):
        import dask

        # the graphs as built, not optimised array by array: a chunk the arrays share
        # upstream (X and y as columns of one array or DataFrame) stays one task,
        # computed once (each array's optimisation fused its own copy of it)
        chunks = [a.to_delayed(optimize_graph=False).ravel() for a in arrays]
        call, known = dask.delayed(fn), known or {}
        parts = [
            call(i, *known.get(i, blocks)) for i, blocks in enumerate(zip(*chunks, strict=True))
        ]
        total = tree_reduce(parts, dask.delayed(combine))
        with blas_threads_for_dask(total, len(parts)):
            return total.compute()
    n = arrays[0].shape[0]
    return reduce_blocks(
        lambda a, b: fn(a // block, *[z[a:b] for z in arrays]), n, block, combine, n_jobs
    )


# ------------------------------------------------------------------------ predictions
def predict_in_slabs(fn, X, width, n_jobs=None):
    """``fn(X)`` for in-memory rows ``X`` (n, d), a slab of rows at a time.

    ``fn`` maps rows to an array, or a tuple of arrays, with one row per input row,
    through ``width`` values per row (the features of a fitted map, the basis values of a
    low-rank basis): ``width`` is that number, or a function of no arguments that returns
    it (called only for more than :data:`FIRST_SLAB_ROWS` rows). A slab has
    ``max(FIRST_SLAB_ROWS, SLAB_ELEMENTS // width)`` rows, so a prediction holds one
    slab of those values per thread instead of all ``n x width`` of them. The slabs run on
    ``n_jobs`` of kernelkit's threads, each slab on one thread with BLAS on one thread
    (switching BLAS's threads for each slab, or nesting the threads of ``fn``, would cost
    more than the slab), and rows are independent: the same values as one call, to the
    rounding of the products (bit for bit whatever ``n_jobs`` is; one slab, or at most
    :data:`FIRST_SLAB_ROWS` rows, is that one call).

    Returns
    -------
    ndarray, or tuple of ndarrays, with n rows
        The slabs' results concatenated in row order.
    """
    n = X.shape[0]
    if n <= FIRST_SLAB_ROWS:
        return fn(X)
    if not isinstance(width, numbers.Integral):
        width = width()
    rows = max(FIRST_SLAB_ROWS, SLAB_ELEMENTS // max(1, int(width)))
    if n <= rows:
        return fn(X)
    threads = effective_n_jobs(n_jobs)  # the slabs' threads; each slab runs on one
    with OneThreadPerTask():
        parts = block_map(lambda lo, hi: fn(X[lo:hi]), n, rows, threads)
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p, axis=0) for p in zip(*parts, strict=True))
    return np.concatenate(parts, axis=0)
