"""Dask arrays in the feature maps: lazy transforms and fits that read the data once.

A ``dask.array.Array`` of shape (n, d) is accepted wherever a feature map takes a data set
(user guide: "Scale-out with Dask"):

* ``transform`` / ``transform_y`` return a lazy Dask array (n, output_dim) with the input's
  row chunks, one task per chunk (each block validated and mapped as a NumPy array would
  be, so a NaN is reported when its chunk is computed; on one thread, BLAS and
  kernelkit's, when the threaded scheduler runs the tasks on several threads);
* ``fit`` reads as little as the map needs. Maps whose parameters depend on the input
  dimension only (``fit_reads = "shape"``) are fitted on the first non-empty chunk: the
  same draws as a fit on all rows. The FAVOR# maps (``"moments"``) get their first and
  second moments (FAVOR# Sec. 3-4) from one pass of chunk sums, reduced by the active
  Dask scheduler, and are fitted from them exactly as from in-memory rows. The other
  maps (``"all"``: k-means centres, optimised degree allocations, unit-row checks) read
  every row, so ``fit`` computes the array first.

The same moment sums fit a map on a sequence of NumPy row blocks that can be read again
(:func:`fit_on_blocks`: the ridge / GP estimators' fits on a list of blocks).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import math

import numpy as np
import scipy.sparse as sp

from .._backend.chunks import (
    check_chunk,
    check_dask_matrix,
    checked_chunks,
    is_dask_array,
    one_thread_per_task_map,
)
from .._backend.parallel import OneThreadPerTask
from .favor import blocked_sums

__all__ = [
    "finite_moments",
    "fit_dask",
    "fit_on_blocks",
    "injected_moments",
    "known_first_rows",
    "lazy_features",
]

#: ``(name of a Dask array, its first non-empty row chunk computed, the chunk's index)``
#: while a caller that has already computed that chunk fits a map on the array
_KNOWN_FIRST = contextvars.ContextVar("kernelkit_known_first_rows", default=None)


@contextlib.contextmanager
def known_first_rows(X, rows, index: int):
    """While fitting maps on the Dask array ``X`` (its columns in one chunk), its first
    non-empty row chunk ``index`` is ``rows`` (n_0, d), already computed and checked by
    the caller: :func:`fit_dask` takes it instead of computing the chunk again (the
    random-feature estimators' chunked fits, which read it to validate their input)."""
    token = _KNOWN_FIRST.set((X.name, rows, index))
    try:
        yield
    finally:
        _KNOWN_FIRST.reset(token)


def lazy_features(fm, X, side: str):
    """``fm``'s features of the Dask array ``X`` (n, d), lazily: (n, output_dim) with the row
    chunks of ``X``, computed by a copy of ``fm`` as fitted when this is called."""
    name = "X" if side == "x" else "Y"
    fm._check_fitted()
    X = check_dask_matrix(X, name, fm.n_features_in_)
    fm = copy.deepcopy(fm)  # the map as fitted now: a refit before compute changes nothing

    @one_thread_per_task_map  # a task of the threaded scheduler: one thread, not cores
    def block(Xb):  # (rows, d) NumPy -> (rows, output_dim): the in-memory path
        return fm._features_of(Xb, side)

    # output dtype of the in-memory path for this input dtype (unit rows: valid for every
    # map), without the set_output wrapper (blocks are arrays); sparse chunks (a SciPy
    # sparse meta) probed as sparse, so a map without sparse support says so at once
    d = X.shape[1]
    row = np.full((1, d), 1.0 / math.sqrt(d), dtype=X.dtype)  # (1, d)
    probe = block(sp.csr_matrix(row) if sp.issparse(X._meta) else row)  # (1, output_dim)
    return X.map_blocks(
        block,
        dtype=probe.dtype,
        chunks=(X.chunks[0], (probe.shape[1],)),
        meta=np.empty((0, 0), dtype=probe.dtype),
    )


def _first_rows(X, name: str):
    """``(rows, k)``: the first non-empty row chunk ``k`` of the Dask array ``name``,
    computed: (rows, d), NumPy or the chunks' SciPy sparse matrix (which the map accepts or
    rejects as in memory), checked to have the array's d columns. A chunk the caller has
    computed already (:func:`known_first_rows`) is not computed again."""
    known = _KNOWN_FIRST.get()
    if known is not None and known[0] == X.name:
        return known[1], known[2]
    for k, block in enumerate(X.to_delayed().ravel()):
        rows = block.compute()
        rows = rows if sp.issparse(rows) else np.asarray(rows)
        check_chunk(rows, name, k, X.shape[1])
        if rows.shape[0]:
            return rows, k
    raise ValueError(f"{name} is empty: found 0 samples (shape {(0, X.shape[1])}).")


def _sums(Xb, full: bool, n_jobs=None):
    """``[n, sum_i x_i, sum_i x_i x_i^T (or its diagonal)]`` of rows (n, d), float64,
    flattened: (1, 1 + d + d^2 or 2 d); the in-memory moments' sums
    (:func:`~kernelkit.features.favor.blocked_sums`, on ``n_jobs`` threads) of the rows
    as float64."""
    Xb = np.ascontiguousarray(Xb, dtype=np.float64)  # (n, d)
    ((second, total),) = blocked_sums([Xb], full, n_jobs)
    return np.concatenate([[Xb.shape[0]], total, second.ravel()])[None, :]


def _chunk_sums(X, full: bool, first, name: str):
    """Lazy :func:`_sums` of a Dask X (n, d) whose first non-empty chunk ``first = (rows,
    k)`` is already computed: the chunks after ``k``, one small array per chunk summed by
    Dask's tree reduction, plus the sums of ``rows`` (chunks 0..k are not computed again).
    Each chunk's width is checked (a ``ValueError`` naming ``name`` and the chunk)."""
    rows, k = first
    head = _sums(rows, full)[0]  # (width,)
    if k + 1 == X.numblocks[0]:
        return head
    rest = checked_chunks(X, name).blocks[k + 1 :]
    width = head.shape[0]
    parts = rest.map_blocks(
        _sums, full, dtype=np.float64, chunks=((1,) * rest.numblocks[0], (width,))
    )
    return parts.sum(axis=0) + head


def _moments_of(total, d: int, full: bool, lengthscale: float):
    """(mean (d,), second moment (d, d) or (d,)) of the inputs divided by ``lengthscale``;
    ``total`` holds at least the rows of the first non-empty chunk."""
    n = total[0]
    mean = total[1 : 1 + d] / (n * lengthscale)
    second = total[1 + d :] / (n * lengthscale**2)
    return mean, second.reshape(d, d) if full else second


def finite_moments(totals, d: int, full: bool, lengthscale: float):
    """The FAVOR# :class:`~kernelkit.features.favor.Moments` of the sums ``totals`` of X
    (and of Y, if given: ``[x_sums]`` or ``[x_sums, y_sums]``, each :func:`_sums`' row);
    ``ValueError`` naming ``X`` or ``Y`` if they are not finite."""
    from .favor import Moments

    mx, sx = _moments_of(totals[0], d, full, lengthscale)
    my, sy = (mx, sx) if len(totals) == 1 else _moments_of(totals[1], d, full, lengthscale)
    for name, parts in (("X", (mx, sx)), ("Y", (my, sy))):
        if not all(np.isfinite(p).all() for p in parts):
            raise ValueError(
                f"{name} contains NaN or infinity (or values whose squares overflow "
                "float64): its moments are not finite."
            )
    return Moments(mx, sx, my, sy)


def dask_moments_thunk(X, Y, full: bool, lengthscale: float, firsts):
    """A function computing the FAVOR# :class:`~kernelkit.features.favor.Moments` of the Dask
    arrays ``X`` and ``Y`` (``Y`` None: the keys are ``X``) in one pass of the scheduler;
    ``firsts``: their first non-empty chunks, already computed (:func:`_first_rows`)."""
    import dask

    def compute():
        lazy = [_chunk_sums(X, full, firsts[0], "X")]
        lazy += [] if Y is None else [_chunk_sums(Y, full, firsts[1], "Y")]
        with np.errstate(over="ignore", invalid="ignore"), OneThreadPerTask():
            totals = dask.compute(*lazy)
        return finite_moments(totals, X.shape[1], full, lengthscale)

    return compute


def fit_on_blocks(fm, head, blocks):
    """``fm.fit(head)`` on the first non-empty block ``head`` (n_0, d) of a sequence of row
    blocks that can be read again, with the FAVOR# moments of all its rows when the map's
    fit reads them (``fit_reads == "moments"``; the fits that read the dimension only, or
    every row, see ``head``).

    ``blocks``: a function returning a new iterator over the (checked) NumPy blocks
    (n_k, d), ``head`` among them. It is called once, and only if the fit asks for the
    moments (GERF, SADERF, ADERF, SDERF; not PositiveRF or a GERF with a given ``A``):
    one pass of :func:`_sums` per block, added in block order, so the map equals the fit
    on the concatenated blocks to rounding (about ``n eps`` relative).
    """
    if getattr(fm, "fit_reads", "all") != "moments":
        return fm.fit(head)
    full, lengthscale = bool(fm._full_moments), float(fm.lengthscale)
    n_jobs = getattr(fm, "n_jobs", None)

    def compute():
        total = None
        with np.errstate(over="ignore", invalid="ignore"):
            for Xb in blocks():
                part = _sums(Xb, full, n_jobs)[0]  # (1 + d + d^2 or 2 d,)
                total = part if total is None else total + part
        return finite_moments([total], head.shape[1], full, lengthscale)

    with injected_moments(fm, compute):
        fm.fit(head)
    return fm


def fit_dask(fm, X, Y):
    """``fm.fit(X, Y=Y)`` where ``X`` or ``Y`` is a Dask array; see the module docstring."""
    import dask.array as da

    X = check_dask_matrix(X if is_dask_array(X) else da.asarray(X), "X")
    if Y is not None:
        Y = check_dask_matrix(Y if is_dask_array(Y) else da.asarray(Y), "Y", X.shape[1])
    reads = getattr(fm, "fit_reads", "all")
    if reads == "all":  # every row: computed (in one pass), then the in-memory fit
        import dask

        X = checked_chunks(X, "X")  # the width of every chunk, named if wrong
        if Y is None:
            return fm.fit(X.compute())
        Xc, Yc = dask.compute(X, checked_chunks(Y, "Y"))
        return fm.fit(Xc, Y=Yc)
    # the first chunk sets the dimension, dtype and draws; the moments (if the fit asks
    # for them) come from all rows
    firsts = (_first_rows(X, "X"), None if Y is None else _first_rows(Y, "Y"))
    ctx = contextlib.nullcontext()
    if reads == "moments":
        full, lengthscale = bool(fm._full_moments), float(fm.lengthscale)
        ctx = injected_moments(fm, dask_moments_thunk(X, Y, full, lengthscale, firsts))
    with ctx:
        fm.fit(firsts[0][0], Y=None if Y is None else firsts[1][0])
    return fm


@contextlib.contextmanager
def injected_moments(fm, moments):
    """While fitting on a sample, ``fm._fit_statistics`` returns ``moments()``, the moments
    of all rows (called only if the fit reads them)."""
    fm._all_rows_moments = moments
    try:
        yield
    finally:
        del fm._all_rows_moments
