"""Products of the (m, n) factors over the sample axis, in column blocks and threads.

The statistics of a fit are sums over the n samples: ``L^T L`` (m, m), ``L_Y^T L_X``
(m_Y, m_X), ``L^T 1`` and ``L^T F`` (m, k). Each is one BLAS-3 product per column block of
the row-major factor ``Lt`` (m, n), the blocks spread over kernelkit's threads with BLAS
itself single-threaded (OpenBLAS threads split the two short dimensions of these
skinny-wide products: 3-10x the CPU time of one thread on a loaded 2-core machine). The
block results are summed in block order, so the result does not depend on the number of
threads.
"""

from __future__ import annotations

import numpy as np

from .._backend.parallel import block_map as _parallel_block_map

__all__ = ["block_map", "cross", "gram_and_sums", "left_matmul", "right_matmul"]

_BLOCK = 1 << 14  # columns per block: (m, _BLOCK) float64 panels of a few MB


def block_map(fn, n: int, block: int = _BLOCK) -> list:
    """``[fn(a, b) for each column block [a, b) of range(n)]``, in order, threaded
    (:func:`kernelkit._backend.parallel.block_map`)."""
    return _parallel_block_map(fn, n, block)


def _ordered_sum(parts):
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out


def gram_and_sums(Lt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Lt Lt^T, Lt 1)``: shapes (m, m) and (m,), in one pass over ``Lt`` (m, n)."""
    m, n = Lt.shape
    if m == 0 or n == 0:
        return np.zeros((m, m)), np.zeros(m)

    def part(a, b):
        blk = Lt[:, a:b]  # (m, b - a)
        return blk @ blk.T, blk.sum(axis=1)

    parts = block_map(part, n)
    G = _ordered_sum([p[0] for p in parts])
    G = (G + G.T) / 2  # exactly symmetric
    return G, _ordered_sum([p[1] for p in parts])


def cross(At: np.ndarray, Bt: np.ndarray) -> np.ndarray:
    """``At Bt^T`` (m_A, m_B) for row-major factors ``At`` (m_A, n), ``Bt`` (m_B, n)."""
    (ma, n), mb = At.shape, Bt.shape[0]
    if ma == 0 or mb == 0 or n == 0:
        return np.zeros((ma, mb))
    return _ordered_sum(block_map(lambda a, b: At[:, a:b] @ Bt[:, a:b].T, n))


def right_matmul(Lt: np.ndarray, F: np.ndarray) -> np.ndarray:
    """``Lt @ F`` (m, k) for ``Lt`` (m, n) and ``F`` (n, k)."""
    m, n = Lt.shape
    if m == 0 or n == 0:
        return np.zeros((m, F.shape[1]))
    return _ordered_sum(block_map(lambda a, b: Lt[:, a:b] @ F[a:b], n))


def left_matmul(P: np.ndarray, Lt: np.ndarray) -> np.ndarray:
    """``P @ Lt`` (k, n) for ``P`` (k, m) and ``Lt`` (m, n), written block by block."""
    k, n = P.shape[0], Lt.shape[1]
    out = np.empty((k, n))

    def part(a, b):
        np.matmul(P, Lt[:, a:b], out=out[:, a:b])

    if n:
        block_map(part, n)
    return out
