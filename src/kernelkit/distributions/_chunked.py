"""Sampled-pivot and out-of-core fits of the joint-distribution model (Sec. 4).

Algorithm 1 needs every row at every step, and its factor ``L`` (n, m) is the model's
training features (8 GB at n = 10^7, m = 100). For large or chunked data the fit is split:

1. **pivots** -- Algorithm 1 on ``pivot_sample`` rows drawn uniformly without replacement
   (seeded): the pivot points ``x_{p_j}`` and ``B[piv]`` (m, m);
2. **statistics** -- one pass over all n rows in blocks. By (16) and (18) the factor row
   of any point is ``l(x) = k_piv(x) B[piv]``, so each block's ``L_b`` (b, m) is formed,
   reduced to ``L^T L``, ``L^T 1``, ``L_Y^T L_X`` and the trace residual, and dropped;
3. **solve** -- the rotation ``L^T L = V Lambda V^T`` (Sec. 4.2) and the closed form of
   problem (22) on these m-sized statistics, once.

The basis functions ``Psi(x) = k_piv(x) B[piv] V`` stay orthonormal in the RKHS (25) for
any pivot set; only the subspace differs from the all-rows fit (and equals it when the
sample is all rows). Every later product over the training points (``A^T F`` for an
expectation, ``P A^T`` for conditional weights, column extremes for the positivity
bounds) is again one pass over the stored training samples, never a stored factor.

Training data may be NumPy (blocks on kernelkit's threads, ``n_jobs``) or a
``dask.array.Array`` (one task per chunk, tree-reduced by the active scheduler: threads,
or a ``distributed.Client``): both go through :mod:`kernelkit._backend.chunks`, the row
reductions the random-feature estimators use too (user guide: "Scale-out with Dask").
Results on both agree to floating-point round-off: only the order of the block sums
differs.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from .._backend import chunks
from .._backend.chunks import (
    as_dask_rows,
    check_block,
    checked_chunks,
    is_chunked,
    is_dask_array,
    iter_block_pairs,
    known_row_chunks,
    map_row_chunks,
)
from .._backend.parallel import block_map
from ._linalg import combine_extremes

__all__ = [
    "DEFAULT_PIVOT_SAMPLE",
    "as_dask_rows",
    "check_pivot_sample",
    "concat_blocks",
    "fit_sampled_bases",
    "is_chunked",
    "is_dask_array",
    "lazy_transform",
    "reduce_rows",
    "sample_rows",
]

#: rows for the pivot search of chunked input when ``pivot_sample=None``
DEFAULT_PIVOT_SAMPLE = 50_000
_BLOCK = 1 << 13  # rows per NumPy block of a pass: (b, m) factor blocks of a few MB


def check_pivot_sample(pivot_sample) -> int | None:
    """``None`` or an int >= 2 (a clear ``ValueError`` / ``TypeError`` otherwise)."""
    if pivot_sample is None:
        return None
    if isinstance(pivot_sample, bool) or not isinstance(pivot_sample, numbers.Integral):
        raise TypeError(f"pivot_sample must be an int or None, got {type(pivot_sample).__name__}.")
    if pivot_sample < 2:
        raise ValueError(f"pivot_sample must be at least 2, got {pivot_sample}.")
    return int(pivot_sample)


def warn_unused_basis_cache(basis_cache, stacklevel: int = 3) -> None:
    """Warn that ``basis_cache`` is ignored (when it is given): sampled-pivot and chunked
    fits take their statistics from one pass over all rows, not from a cached factor.
    ``stacklevel`` counts this function's frame (3: the caller of the calling ``fit``)."""
    if basis_cache is not None:
        warnings.warn(
            "basis_cache is not used by sampled-pivot / chunked fits (their statistics "
            "come from one pass over all rows, not a cached factor).",
            UserWarning,
            stacklevel=stacklevel,
        )


def sample_rows(n: int, size: int, random_state) -> np.ndarray:
    """Sorted indices of ``min(size, n)`` rows drawn uniformly without replacement."""
    if size >= n:
        return np.arange(n)
    rng = np.random.default_rng(random_state)
    return np.sort(rng.choice(n, size=size, replace=False))


def concat_blocks(blocks, owner: str) -> tuple[np.ndarray, np.ndarray]:
    """Consume an iterable of ``(X_block, Y_block)`` pairs into two float64 arrays, (n, d_X)
    and (n, d_Y), each block checked (:func:`kernelkit._backend.chunks.iter_block_pairs`).

    The samples are kept (the model needs the training targets for its conditionals);
    their features never are.
    """
    xs, ys = zip(*iter_block_pairs(blocks, owner), strict=True)
    return np.concatenate(xs), np.concatenate(ys)


# ---------------------------------------------------------------------------- passes
def _add(u, v):
    return tuple(a + b for a, b in zip(u, v, strict=True))


def _in_sub_blocks(fn, combine, blocks):
    """``fn`` over row sub-blocks of one chunk, combined: a Dask chunk of any size holds
    at most ``_BLOCK`` rows of features at a time."""
    n = blocks[0].shape[0]
    out = None
    for a in range(0, max(n, 1), _BLOCK):
        part = fn(*[z[a : a + _BLOCK] for z in blocks])
        out = part if out is None else combine(out, part)
    return out


def reduce_rows(fn, arrays, names, combine=_add, n_jobs=None):
    """``combine``-reduce of ``fn(*blocks)`` over aligned row blocks of ``arrays``.

    ``fn`` gets float64 NumPy blocks (checked: finite, real; 1-D arrays as columns) and
    returns a tuple of arrays / numbers; ``combine`` (default: elementwise sum) merges two
    such tuples. NumPy arrays go in row blocks of ``_BLOCK`` rows on ``n_jobs`` threads
    (results combined in block order); if any array is a Dask array, all are aligned to
    its row chunks and reduced by the active Dask scheduler in a binary tree
    (:func:`kernelkit._backend.chunks.reduce_rows`).
    """

    def checked(index, blocks):
        return [check_block(z, nm, index) for z, nm in zip(blocks, names, strict=True)]

    dask_at = [i for i, a in enumerate(arrays) if is_dask_array(a)]
    if not dask_at:
        return chunks.reduce_rows(
            lambda i, *blocks: fn(*checked(i, blocks)),
            arrays,
            combine,
            block=_BLOCK,
            n_jobs=n_jobs,
        )
    ref = as_dask_rows(arrays[dask_at[0]], names[dask_at[0]])
    arrays = [as_dask_rows(a, nm, rows_like=ref) for a, nm in zip(arrays, names, strict=True)]
    return chunks.reduce_rows(
        lambda i, *blocks: _in_sub_blocks(fn, combine, checked(i, blocks)), arrays, combine
    )


def lazy_transform(basis, Z, name: str = "X"):
    """``basis.transform`` mapped over the row chunks of a Dask array: lazy (n, m)."""
    Z = as_dask_rows(Z, name, n_features=basis.n_features_in_)
    return map_row_chunks(Z, basis.transform, basis.n_components_)


# ------------------------------------------------- training-point products, factor-free
def train_moments(basis, F, n_jobs=None):
    """``(A^T F, 1^T F)``, shapes (m, k) and (k,), for values ``F`` (n, k) at the
    training samples: ``sum_b (Psi(Z_b)^T F_b, 1^T F_b)`` in one pass."""
    return reduce_rows(
        lambda Zb, Fb: (basis.transform(Zb).T @ Fb, Fb.sum(axis=0)),
        [basis.train_data_, F],
        ["training samples", "f values"],
        n_jobs=n_jobs,
    )


def dot_train(basis, P, n_jobs=None):
    """``P A^T`` (k, n); a lazy Dask array if the training samples or ``P`` are Dask."""
    Z = basis.train_data_
    if is_dask_array(Z) or is_dask_array(P):
        return P @ lazy_transform(basis, Z).T
    k, n = P.shape[0], Z.shape[0]
    out = np.empty((k, n))

    def part(a, b):
        out[:, a:b] = P @ basis.transform(Z[a:b]).T

    block_map(part, n, _BLOCK, n_jobs=n_jobs)
    return out


def train_extremes(basis, n_jobs=None) -> tuple[np.ndarray, np.ndarray]:
    """Column minima and maxima of ``A`` over the training samples, each (m,)."""

    def fn(Zb):
        if len(Zb) == 0:  # an empty chunk: the identity of (min, max)
            m = basis.n_components_
            return np.full(m, np.inf), np.full(m, -np.inf)
        A = basis.transform(Zb)  # (b, m)
        return A.min(axis=0), A.max(axis=0)

    return reduce_rows(
        fn, [basis.train_data_], ["training samples"], combine=combine_extremes, n_jobs=n_jobs
    )


def pair_statistics(basis_x, basis_y, X, Y, n_jobs=None):
    """One pass over the paired samples: the m-sized statistics of a JDL fit.

    Returns ``(n, L_X^T L_X, L_X^T 1, L_Y^T L_Y, L_Y^T 1, L_Y^T L_X, trace K_X,
    trace K_Y, ||L_X||_F^2, ||L_Y||_F^2)`` with ``L`` the factor rows ``k_piv(x) B[piv]``
    of every sample (formed block by block, never stored).
    """

    def fn(Xb, Yb):
        Lx = basis_x.pivot_factor(Xb)  # (b, m_X)
        Ly = basis_y.pivot_factor(Yb)  # (b, m_Y)
        return (
            Xb.shape[0],
            Lx.T @ Lx,
            Lx.sum(axis=0),
            Ly.T @ Ly,
            Ly.sum(axis=0),
            Ly.T @ Lx,
            basis_x.kernel_.diag(Xb).sum(),
            basis_y.kernel_.diag(Yb).sum(),
            np.einsum("ij,ij->", Lx, Lx),
            np.einsum("ij,ij->", Ly, Ly),
        )

    return reduce_rows(fn, [X, Y], ["X", "Y"], n_jobs=n_jobs)


def basis_statistics(basis, X, n_jobs=None):
    """One pass over the samples ``X`` of one basis: ``(n, L^T L, L^T 1, trace K,
    ||L||_F^2)`` with ``L`` the factor rows ``k_piv(x) B[piv]`` (formed block by block)."""

    def fn(Xb):
        L = basis.pivot_factor(Xb)  # (b, m)
        return (
            Xb.shape[0],
            L.T @ L,
            L.sum(axis=0),
            basis.kernel_.diag(Xb).sum(),
            np.einsum("ij,ij->", L, L),
        )

    return reduce_rows(fn, [X], ["X"], n_jobs=n_jobs)


def fit_sampled_bases(bases, arrays, names, pivot_sample, random_state, *, dask, n_jobs=None):
    """Steps 1-2 of the module doc for one basis per array: pivots from a row sample,
    statistics from one pass over all rows.

    Parameters
    ----------
    bases : list of unfitted ``LowRankBasis`` (one or two)
    arrays : list of arrays, shape (n, d_i)
        Validated float64 NumPy arrays (``dask=False``), or NumPy / Dask arrays aligned
        here to the row chunks of the first (``dask=True``; then checked chunk by chunk).
    names : list of str            the arrays' names in messages
    pivot_sample : int             rows of the pivot sample
    random_state                   seed of the sample

    Returns
    -------
    arrays : list                  the (aligned) training samples, kept by the bases as
                                   ``train_data_``
    rows : ndarray or None         the sample's rows (None: all rows)
    cross : ndarray or None        ``L_1^T L_0`` for two bases, else None

    Each basis gets its pivots (indices into the sample), ``centers_`` and the rotated
    statistics over all n rows (``eigenvalues_``, ``train_sums_``, ``trace_residual_``).
    """
    from ._basis import _sk_2d

    if dask:
        arrays = known_row_chunks(*arrays)  # unknown sizes (a filter): one pass for all
        ref = as_dask_rows(arrays[0], names[0])
        arrays = [ref] + [
            as_dask_rows(a, nm, rows_like=ref) for a, nm in zip(arrays[1:], names[1:], strict=True)
        ]
        if ref.shape[0] < 2:
            raise ValueError(f"at least 2 samples are needed, got n_samples = {ref.shape[0]}.")
    n = arrays[0].shape[0]
    rows = sample_rows(n, pivot_sample, random_state)
    if dask:
        import dask as _dask

        # each chunk the sample reads is checked for its width (a chunk of other columns
        # than its Dask array is named, not left to Dask's join of the chunks)
        checked = [checked_chunks(a, nm) for a, nm in zip(arrays, names, strict=True)]
        samples = _dask.compute(*[a[rows] for a in checked])
    else:
        samples = [a[rows] for a in arrays]
    try:
        for basis, sample in zip(bases, samples, strict=True):
            basis._fit_pivots(_sk_2d(basis, sample, reset=True))
    except ValueError as exc:
        raise ValueError(f"the pivot sample ({len(rows)} rows) is invalid: {exc}") from exc
    if len(bases) == 2:
        (n_seen, gram_x, sum_x, gram_y, sum_y, cross, tr_x, tr_y, fro_x, fro_y) = pair_statistics(
            bases[0], bases[1], arrays[0], arrays[1], n_jobs
        )
        stats = [(gram_x, sum_x, tr_x, fro_x), (gram_y, sum_y, tr_y, fro_y)]
    else:
        n_seen, gram, sums, tr, fro = basis_statistics(bases[0], arrays[0], n_jobs)
        stats, cross = [(gram, sums, tr, fro)], None
    if n_seen != n:
        raise ValueError(f"the row chunks hold {n_seen} rows, but {names[0]} has {n} rows.")
    for basis, array, (gram, sums, tr, fro) in zip(bases, arrays, stats, strict=True):
        basis._set_statistics((gram + gram.T) / 2, sums, max(tr - fro, 0.0), tr, n)
        basis.train_data_ = array
    return arrays, (None if len(rows) == n else rows), cross
