"""Out-of-core fits: sufficient statistics of random features, reduced over row chunks.

The primal (weight-space) fit of ridge / GP regression needs the data only through

    n,  s = sum_i phi_i (D,),  G = sum_i conj(phi_i) phi_i^T = Phi^H Phi (D, D),
    R = sum_i conj(phi_i) y_i^T = Phi^H Y (D, T),  sum_i y_i (T,),  sum_i y_i^2 (T,)

so a data set too large for memory is fitted chunk by chunk: each chunk of rows is mapped
to features a slab of rows at a time (``_SLAB_BYTES`` of features, never a whole chunk's),
its statistics are accumulated (``Phi^T Phi`` by the BLAS symmetric rank-k update for
real features), the statistics of the chunks are summed in a binary tree, and the
``D x D`` system is solved once. Under the threaded Dask scheduler BLAS runs one thread
per task (the scheduler already runs one task per core). Inputs:

* a ``dask.array.Array`` (rows chunked; columns are merged into one chunk): the chunks
  are processed in parallel by the active Dask scheduler (threads by default, or a
  ``distributed.Client`` if one is active), with a tree reduction of the statistics;
* an iterable of ``(X_block, y_block)`` NumPy pairs (e.g. a generator reading a file),
  consumed once, sequentially.

Data-dependent feature maps are fitted on the first chunk (documented on the estimators);
data-independent ones (random Fourier features, sketches) only need its width.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._backend.chunks import blas_threads_for_dask, is_chunked, is_dask_array, tree_reduce
from ._posterior import gram_primal

__all__ = [
    "FeatureStats",
    "block_stats",
    "fit_chunked_statistics",
    "is_chunked",
    "is_dask_array",
    "lazy_predict",
    "reduce_stats",
]


@dataclass
class FeatureStats:
    """Sums over rows of features ``phi`` (D,) and targets ``y`` (T,); see module doc."""

    n: int
    s_phi: np.ndarray  # (D,)
    gram: np.ndarray  # (D, D) Phi^H Phi
    rhs: np.ndarray  # (D, T) Phi^H Y
    s_y: np.ndarray  # (T,)
    s_yy: np.ndarray  # (T,)

    def __add__(self, other: FeatureStats) -> FeatureStats:
        return FeatureStats(
            self.n + other.n,
            self.s_phi + other.s_phi,
            self.gram + other.gram,
            self.rhs + other.rhs,
            self.s_y + other.s_y,
            self.s_yy + other.s_yy,
        )

    def centred(
        self, y_shift: np.ndarray, y_scale: np.ndarray, centre_features: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(G_c, R_c)``: the Gram and right-hand side of shifted features and targets.

        With ``c = s_phi / n`` (feature mean) if ``centre_features`` else ``0``:
        ``G_c = sum_i conj(phi_i - c) (phi_i - c)^T`` and
        ``R_c = sum_i conj(phi_i - c) ((y_i - y_shift) / y_scale)^T``, expanded in the sums.
        """
        n, s = self.n, self.s_phi
        c = s / n if centre_features else np.zeros_like(s)
        G = (
            self.gram
            - np.outer(np.conj(s), c)
            - np.outer(np.conj(c), s)
            + n * np.outer(np.conj(c), c)
        )
        R = (
            self.rhs
            - np.outer(np.conj(s), y_shift)
            - np.outer(np.conj(c), self.s_y)
            + n * np.outer(np.conj(c), y_shift)
        ) / y_scale
        return G, R


#: bytes of one slab of features inside a block (rows are mapped to features a slab at a
#: time, so the (rows, D) slab stays in cache between the feature map and the Gram update)
_SLAB_BYTES = 8 * 1024**2
#: rows of the first slab (before the feature width D is known)
_FIRST_SLAB = 256


class _Accumulator:
    """Running sums of :class:`FeatureStats` over slabs of one block (see ``block_stats``).

    Real features: ``G`` holds the upper triangle of ``Phi^T Phi``, updated in place by
    the BLAS symmetric rank-k update ``dsyrk`` (``D^2 b`` flops per slab of ``b`` rows,
    half a GEMM's); the lower triangle is mirrored once at the end. Complex features use
    :func:`gram_primal` per slab.
    """

    def __init__(self, D: int, T: int, complex_: bool):
        dt = np.complex128 if complex_ else np.float64
        self.complex = complex_
        self.n = 0
        self.s_phi = np.zeros(D, dtype=dt)
        self.gram = np.zeros((D, D), dtype=dt, order="F")
        self.rhs = np.zeros((D, T), dtype=dt)

    def add(self, Phi: np.ndarray, Y: np.ndarray) -> None:
        """Add a slab: features ``Phi`` (b, D), targets ``Y`` (b, T)."""
        from scipy.linalg.blas import dsyrk

        self.n += len(Phi)
        self.s_phi += Phi.sum(axis=0)
        if self.complex:
            self.gram += gram_primal(Phi)
            self.rhs += np.conj(Phi).T @ Y
        else:
            # Phi.T is the F-ordered (D, b) view of the C-ordered slab: no copy
            self.gram = dsyrk(1.0, Phi.T, beta=1.0, c=self.gram, trans=0, lower=0, overwrite_c=1)
            self.rhs += Phi.T @ Y

    def stats(self, Y: np.ndarray) -> FeatureStats:
        G = self.gram
        if not self.complex:
            G = np.triu(G)
            G += np.triu(G, 1).T
        return FeatureStats(
            n=self.n,
            s_phi=self.s_phi,
            gram=np.ascontiguousarray(G),
            rhs=self.rhs,
            s_y=Y.sum(axis=0),
            s_yy=(Y * Y).sum(axis=0),
        )


def block_stats(fm, Xb, yb, amplitude: float = 1.0) -> FeatureStats:
    """Statistics of one block: rows ``Xb`` (b, d), targets ``yb`` (b,) or (b, T).

    The rows are mapped to features in slabs of about ``_SLAB_BYTES`` (never the whole
    block's ``(b, D)`` features at once); the statistics are accumulated over the slabs.
    """
    from ._feature_map_param import map_features

    Xb = np.asarray(Xb)
    Y = np.asarray(yb, dtype=np.float64).reshape(len(Xb), -1)  # (b, T)
    n = len(Xb)
    if n == 0:
        raise ValueError("empty block")
    acc, lo, step = None, 0, _FIRST_SLAB
    while lo < n:
        Phi = map_features(fm, Xb[lo : lo + step], amplitude)  # (<= step, D) f64 / c128
        if acc is None:
            acc = _Accumulator(Phi.shape[1], Y.shape[1], np.iscomplexobj(Phi))
            step = max(_FIRST_SLAB, _SLAB_BYTES // (Phi.itemsize * Phi.shape[1]))
            hi = lo + len(Phi)
        else:
            hi = lo + step
        acc.add(Phi, Y[lo:hi])
        lo = hi
    return acc.stats(Y)


#: ``n x D`` above which an in-memory primal fit reduces statistics in row blocks
#: (:func:`in_memory_stats`) instead of forming all features: same result to round-off,
#: memory O(slab D + D^2) instead of O(n D), and the blocks run in parallel
STREAM_ENTRIES = 1 << 22


def use_streaming(fm, X, solver: str, amplitude: float = 1.0) -> bool:
    """Whether an in-memory fit of ``X`` (n, d) with ``solver`` takes the blocked path."""
    from ._feature_map_param import map_features
    from ._posterior import choose_solver

    D = map_features(fm, X[:1], amplitude).shape[1]
    return choose_solver(solver, len(X), D) == "primal" and len(X) * D > STREAM_ENTRIES


def in_memory_stats(fm, X, Y, amplitude: float = 1.0) -> FeatureStats:
    """:func:`block_stats` of in-memory rows ``X`` (n, d), targets ``Y`` (n, T), in
    contiguous row blocks over kernelkit's threads (one BLAS thread each), summed in
    block order: the sums of the module doc (``Phi^H Phi`` (D, D), ``Phi^H Y`` (D, T), ...)."""
    from .._backend.parallel import block_map, num_threads

    n = len(X)
    k = max(1, min(num_threads(), 8, n // (4 * _FIRST_SLAB)))
    if k == 1:
        return block_stats(fm, X, Y, amplitude)
    parts = block_map(lambda a, b: block_stats(fm, X[a:b], Y[a:b], amplitude), n, -(-n // k))
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def _check_block(Xb, yb, n_features: int, owner: str, index: int):
    Xb = np.asarray(Xb)
    if Xb.ndim != 2 or Xb.shape[1] != n_features:
        raise ValueError(
            f"{owner}: block {index} of X has shape {Xb.shape}; expected (rows, {n_features})."
        )
    if not np.issubdtype(Xb.dtype, np.floating) and not np.issubdtype(Xb.dtype, np.integer):
        raise TypeError(f"{owner}: block {index} of X has dtype {Xb.dtype}; expected real numbers.")
    yb = np.asarray(yb)
    if len(yb) != len(Xb):
        raise ValueError(f"{owner}: block {index} has {len(Xb)} rows of X but {len(yb)} targets y.")
    if not (np.all(np.isfinite(Xb)) and np.all(np.isfinite(yb))):
        raise ValueError(f"{owner}: block {index} contains NaN or infinity.")
    return Xb, yb


def _align_dask(X, y, owner: str):
    import dask.array as da

    if X.ndim != 2:
        raise ValueError(f"{owner}: X must be 2-D (n_samples, n_features), got shape {X.shape}.")
    X = X.rechunk({1: -1})  # one chunk of columns: a block is a set of whole rows
    if y is None:
        raise ValueError(f"{owner}: y is required.")
    if not is_dask_array(y):
        y = np.asarray(y)
    if y.ndim not in (1, 2):
        raise ValueError(f"{owner}: y must be 1-D or 2-D, got shape {y.shape}.")
    if y.shape[0] != X.shape[0] and not (np.isnan(y.shape[0]) or np.isnan(X.shape[0])):
        raise ValueError(f"{owner}: X has {X.shape[0]} rows but y has {y.shape[0]}.")
    if not is_dask_array(y):
        y = da.from_array(y, chunks=(X.chunks[0],) + ((-1,) if y.ndim > 1 else ()))
    y = y.rechunk((X.chunks[0],) + ((-1,) if y.ndim > 1 else ()))
    return X, y


def first_block(X, y, owner: str):
    """The first chunk as NumPy (used to fit data-dependent feature maps)."""
    if is_dask_array(X):
        X, y = _align_dask(X, y, owner)
        return np.asarray(X.blocks[0].compute()), np.asarray(y.blocks[0].compute())
    raise TypeError("first_block is for Dask arrays")


def reduce_stats(
    fm, X, y, amplitude: float, owner: str, n_features: int, first=None
) -> FeatureStats:
    """Sum of :func:`block_stats` over the row chunks of ``X`` (Dask array or iterable).

    For an iterable, ``first`` is its already-consumed first ``(X, y)`` block.
    """
    if is_dask_array(X):
        import dask

        X, y = _align_dask(X, y, owner)
        xb = X.to_delayed().ravel()
        yb = y.to_delayed().ravel()
        check = dask.delayed(_check_block, pure=True)
        stats = dask.delayed(block_stats, pure=True)
        parts = []
        for i, (a, b) in enumerate(zip(xb, yb, strict=True)):
            ab = check(a, b, n_features, owner, i)
            parts.append(stats(fm, ab[0], ab[1], amplitude))
        total = tree_reduce(parts, dask.delayed(lambda u, v: u + v, pure=True))
        with blas_threads_for_dask(total, len(xb)):  # one D x D sum per tree node
            return total.compute()
    total = None
    if first is not None:
        total = block_stats(fm, *first, amplitude)
    for i, (Xb, yb) in enumerate(X, start=1 if first is not None else 0):
        Xb, yb = _check_block(Xb, yb, n_features, owner, i)
        if len(Xb) == 0:
            continue
        s = block_stats(fm, Xb, yb, amplitude)
        total = s if total is None else total + s
    if total is None:
        raise ValueError(f"{owner}: the iterable of blocks is empty.")
    return total


def iter_first(blocks, owner: str):
    """Split an iterable of ``(X_block, y_block)`` into its first block and the rest."""
    it = iter(blocks)
    for i, item in enumerate(it):
        try:
            Xb, yb = item
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{owner}: an iterable X must yield (X_block, y_block) pairs.") from exc
        Xb = np.asarray(Xb)
        if Xb.ndim != 2:
            raise ValueError(f"{owner}: block {i} of X must be 2-D, got shape {Xb.shape}.")
        Xb, yb = _check_block(Xb, yb, Xb.shape[1], owner, i)
        if len(Xb):
            return (Xb, yb), it
    raise ValueError(f"{owner}: the iterable of blocks is empty.")


def fit_chunked_statistics(est, X, y, amplitude: float = 1.0):
    """Validate, fit ``est.feature_map_`` on the first chunk, and reduce the statistics.

    Shared by the ridge and GP estimators: sets ``n_features_in_`` (scikit-learn's
    ``validate_data`` on the first chunk) and ``feature_map_``; returns
    ``(stats, y0_ndim)`` with the :class:`FeatureStats` over all rows.
    """
    from sklearn.utils.validation import validate_data

    from ._feature_map_param import fitted_feature_map

    name = type(est).__name__
    if est.solver == "dual":
        raise ValueError(
            f"{name}: solver='dual' needs all rows in memory; chunked "
            "(Dask / iterable) input is fitted in the primal form."
        )
    if is_dask_array(X):
        X0, y0 = first_block(X, y, name)
        rest, first = X, None
    else:
        if y is not None:
            raise ValueError(f"{name}: with an iterable of (X_block, y_block) pairs, pass y=None.")
        (X0, y0), rest = iter_first(X, name)
        first = (X0, y0)
    X0, y0 = validate_data(
        est,
        X0,
        y0,
        dtype=[np.float64, np.float32],
        multi_output=True,
        y_numeric=True,
        accept_sparse=False,
    )
    est.feature_map_ = fitted_feature_map(est.feature_map, est.random_state, X0, name)
    stats = reduce_stats(
        est.feature_map_, rest, y, amplitude, name, est.n_features_in_, first=first
    )
    return stats, np.ndim(y0)


def lazy_predict(X, fn, n_outputs: int | None):
    """``fn`` applied to each row chunk of a Dask array, lazily: (n,) or (n, T) output."""
    X = X.rechunk({1: -1})
    if n_outputs is None:
        return X.map_blocks(fn, drop_axis=1, dtype=np.float64, meta=np.empty(0))
    return X.map_blocks(
        fn, chunks=(X.chunks[0], (n_outputs,)), dtype=np.float64, meta=np.empty((0, 0))
    )
