"""Products of the (m, n) factors over the sample axis, in column blocks and threads.

The statistics of a fit are sums over the n samples: ``L^T L`` (m, m), ``L_Y^T L_X``
(m_Y, m_X), ``L^T 1`` and ``L^T F`` (m, k). Each is one BLAS-3 product per column block of
the row-major factor ``Lt`` (m, n), the blocks spread over kernelkit's threads (``n_jobs``,
scikit-learn's convention) with BLAS itself single-threaded (OpenBLAS threads split the
two short dimensions of these skinny-wide products: 3-10x the CPU time of one thread on a
loaded 2-core machine). The block results are combined in block order
(:func:`kernelkit._backend.chunks.reduce_blocks`), and BLAS is single-threaded for a
single block too, so the result does not depend on the number of threads.
"""

from __future__ import annotations

import operator

import numpy as np

from .._backend.chunks import reduce_blocks
from .._backend.parallel import SingleThreadedBlas, block_map

__all__ = [
    "combine_extremes",
    "cross",
    "gram_and_sums",
    "left_matmul",
    "product_extremes",
    "right_matmul",
]

_BLOCK = 1 << 14  # columns per block: (m, _BLOCK) float64 panels of a few MB


def _reduce(fn, n: int, combine=operator.add, n_jobs=None):
    """:func:`reduce_blocks` over column blocks of ``_BLOCK``, BLAS on one thread even when
    ``n`` is a single block (a threaded BLAS sums in another order: the statistics would
    then depend on ``n_jobs`` and on BLAS's thread count)."""
    with SingleThreadedBlas():
        return reduce_blocks(fn, n, _BLOCK, combine, n_jobs)


def gram_and_sums(Lt: np.ndarray, n_jobs=None) -> tuple[np.ndarray, np.ndarray]:
    """``(Lt Lt^T, Lt 1)``: shapes (m, m) and (m,), in one pass over ``Lt`` (m, n)."""
    m, n = Lt.shape
    if m == 0 or n == 0:
        return np.zeros((m, m)), np.zeros(m)

    def part(a, b):
        blk = Lt[:, a:b]  # (m, b - a)
        return blk @ blk.T, blk.sum(axis=1)

    G, s = _reduce(part, n, _add_pairs, n_jobs)
    return (G + G.T) / 2, s  # exactly symmetric


def cross(At: np.ndarray, Bt: np.ndarray, n_jobs=None) -> np.ndarray:
    """``At Bt^T`` (m_A, m_B) for row-major factors ``At`` (m_A, n), ``Bt`` (m_B, n)."""
    (ma, n), mb = At.shape, Bt.shape[0]
    if ma == 0 or mb == 0 or n == 0:
        return np.zeros((ma, mb))
    return _reduce(lambda a, b: At[:, a:b] @ Bt[:, a:b].T, n, n_jobs=n_jobs)


def right_matmul(Lt: np.ndarray, F: np.ndarray, n_jobs=None) -> np.ndarray:
    """``Lt @ F`` (m, k) for ``Lt`` (m, n) and ``F`` (n, k)."""
    m, n = Lt.shape
    if m == 0 or n == 0:
        return np.zeros((m, F.shape[1]))
    return _reduce(lambda a, b: Lt[:, a:b] @ F[a:b], n, n_jobs=n_jobs)


def left_matmul(P: np.ndarray, Lt: np.ndarray, n_jobs=None) -> np.ndarray:
    """``P @ Lt`` (k, n) for ``P`` (k, m) and ``Lt`` (m, n), written block by block."""
    k, n = P.shape[0], Lt.shape[1]
    out = np.empty((k, n))

    def part(a, b):
        np.matmul(P, Lt[:, a:b], out=out[:, a:b])

    if n:
        block_map(part, n, _BLOCK, n_jobs=n_jobs)
    return out


def product_extremes(Vt: np.ndarray, Lt: np.ndarray, n_jobs=None) -> tuple[np.ndarray, np.ndarray]:
    """Row minima and maxima of ``Vt @ Lt`` (m, n), each (m,), never forming the product
    (``Vt`` (m, m), ``Lt`` (m, n), n > 0)."""

    def part(a, b):
        blk = Vt @ Lt[:, a:b]  # (m, b - a)
        return blk.min(axis=1), blk.max(axis=1)

    return _reduce(part, Lt.shape[1], combine_extremes, n_jobs)


def combine_extremes(u, v):
    """Elementwise ``(min, max)`` of two ``(minima, maxima)`` pairs."""
    return np.minimum(u[0], v[0]), np.maximum(u[1], v[1])


def _add_pairs(u, v):
    return u[0] + v[0], u[1] + v[1]
