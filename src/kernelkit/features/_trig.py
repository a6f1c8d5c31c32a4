"""Threaded NumPy kernel of the trigonometric maps: ``cos`` and ``sin`` of ``X W + b``.

Used by :class:`~kernelkit.features.TrigRF` and
:class:`~kernelkit.features.RandomFourierFeatures`. For float64, where NumPy's ``tan`` is
SIMD-vectorised and its ``cos`` / ``sin`` are not, the half-angle forms
``cos z = 2 / (1 + t^2) - 1`` and ``sin z = 2 t / (1 + t^2)`` with ``t = tan(z / 2)`` give
both from one ``tan`` (the argument is halved exactly, through the weights; absolute
error ~1.5 ulp of 1), several times faster.
"""

from __future__ import annotations

import functools

import numpy as np

from .._backend.parallel import map_row_blocks
from ._base import _matmul_augmented

__all__ = ["BLOCK_BYTES", "fast_tan_f64", "simd_f64", "trig_features"]

#: bytes of the working set of one row block (output rows and the two temporaries of the
#: tan form): 4 MiB, 256 float64 rows of 1024 features. Measured on 2 threads, smaller
#: (L2-sized) blocks lose more to per-block overhead (one matmul packs all of W; a dozen
#: ufunc calls, each a GIL hand-over) than they gain in cache hits.
BLOCK_BYTES = 1 << 22
#: fewest rows in a row block
MIN_BLOCK_ROWS = 16


@functools.cache
def simd_f64(name: str) -> bool:
    """Whether NumPy's float64 ufunc ``name`` (``"tan"``, ``"exp2"``) runs a SIMD kernel
    on this CPU (``numpy.lib.introspect.opt_func_info``, NumPy >= 2.1; False before)."""
    try:
        from numpy.lib.introspect import opt_func_info  # NumPy >= 2.1

        info = opt_func_info(func_name=f"^{name}$", signature="float64")
    except Exception:
        return False
    current = [str(v.get("current", "")) for v in info.get(name, {}).values()]
    return any(c and not c.lower().startswith("baseline") for c in current)


def fast_tan_f64() -> bool:
    """Whether NumPy's float64 ``tan`` runs a SIMD (SVML) kernel on this CPU."""
    return simd_f64("tan")


def trig_features(X, W_aug, n_pairs: int, norm: float, scale=None, n_jobs=None, half=None):
    """``norm * scale * [cos(Z[:, :p]), sin(Z[:, :p]), cos(Z[:, p:])]`` with
    ``Z = [X, 1] @ W_aug`` and ``p = n_pairs``, in threaded row blocks.

    Parameters
    ----------
    X : ndarray or sparse matrix, shape (n, d)
    W_aug : ndarray, shape (d + 1, K)
        ``[W^T; b]``, already halved (``0.5 [W^T; b]``) when ``half`` is true.
    n_pairs : int
        Leading columns of ``Z`` that give a cosine and a sine; the others a cosine only.
    norm : float
        Common factor of every column.
    scale : ndarray (n,), optional
        Per-row factor.
    half : bool, optional
        Whether ``W_aug`` is halved and the tan form is used; default :func:`use_half`.

    Returns
    -------
    ndarray, shape (n, K + n_pairs), dtype of ``X``

    Notes
    -----
    A row block is one matmul into a block-local ``Z`` (cosines only: into the output
    block) and a few in-place ufuncs; blocks are sized by their whole working set, the
    output rows and the temporaries (:data:`BLOCK_BYTES`). In the tan form ``norm``
    is folded into ``c = 2 norm / (1 + t^2)``: ``norm cos z = c - norm`` and ``norm sin z
    = t c``, so no pass over the output applies it.
    """
    if half is None:
        half = use_half(X.dtype)
    p, K = int(n_pairs), W_aug.shape[1]
    n, width = X.shape[0], K + p
    out = np.empty((n, width), dtype=X.dtype)
    # bytes per row of the block's working set: output row, and Z and 2 norm / (1 + t^2)
    # (K columns each) when there are sine columns
    row_bytes = (width + (2 * K if p else 0)) * out.itemsize
    rows = max(MIN_BLOCK_ROWS, BLOCK_BYTES // max(1, row_bytes))

    def block(lo, hi):
        o = out[lo:hi]
        if p == 0:  # cosines only: in place
            _matmul_augmented(X[lo:hi], (1.0,), W_aug, o)
            if half:
                np.tan(o, out=o)  # t = tan(z / 2)
                np.multiply(o, o, out=o)
                o += 1.0
                np.divide(2.0 * norm, o, out=o)  # norm (1 + cos z)
                o -= norm
            else:
                np.cos(o, out=o)
        else:
            z = np.empty((hi - lo, K), dtype=X.dtype)
            _matmul_augmented(X[lo:hi], (1.0,), W_aug, z)
            if half:
                np.tan(z, out=z)  # t = tan(z / 2)
                u = np.multiply(z, z)
                u += 1.0
                np.divide(2.0 * norm, u, out=u)  # 2 norm / (1 + t^2) = norm (1 + cos z)
                np.multiply(z[:, :p], u[:, :p], out=o[:, p : 2 * p])  # norm sin z
                np.subtract(u[:, :p], norm, out=o[:, :p])  # norm cos z
                np.subtract(u[:, p:], norm, out=o[:, 2 * p :])
            else:
                np.cos(z[:, :p], out=o[:, :p])
                np.sin(z[:, :p], out=o[:, p : 2 * p])
                np.cos(z[:, p:], out=o[:, 2 * p :])
        if not half:
            o *= norm if scale is None else (norm * scale[lo:hi])[:, None]
        elif scale is not None:
            o *= scale[lo:hi, None]

    map_row_blocks(block, n, width, out.itemsize, rows=rows, n_jobs=n_jobs)
    return out


def use_half(dtype) -> bool:
    """Whether :func:`trig_features` uses the tan form for ``dtype`` on this CPU."""
    return np.dtype(dtype) == np.float64 and fast_tan_f64()
