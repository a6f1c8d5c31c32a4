"""Closed-form FAVOR++ / FAVOR# fits and the affine log features, on any array backend.

Pure functions on the array API standard (NumPy, PyTorch, ...), batched over leading
dimensions. They are the only derivation of these formulas in kernelkit: the feature-map
classes of :mod:`kernelkit.features.softmax` call them on NumPy data, and
:mod:`kernelkit.attention` calls them per batch element and head on torch tensors.

Every fit reads the data only through first and second moments
(:class:`Moments`, :func:`moments`) of the queries ``x`` and keys ``y``:

* GERF (FAVOR++, Sec. 3.1): ``phi = (tr M_x + tr M_y + 2 mu_x.mu_y) / d`` (the mean of
  ``|x_i + y_j|^2 / d`` over all pairs) and ``A = A*(phi)`` (Lemma A.1);
* SADERF (eq. 20): ``psi_l = (M_y,ll / M_x,ll)^{1/4}``, then GERF on ``(psi x, y / psi)``;
* ADERF (Thm 4.2): ``B1``, ``B2`` from the eigendecompositions of ``M_x``, ``M_y`` and the SVD
  of ``L1^{1/2} Q1^T Q2 L2^{1/2}``, then GERF on ``(B1 x, B2 y)``; both turned by the left
  singular vectors, so that they are continuous functions of the data (:func:`fit_aderf`);
* SDERF (FAVOR#, Thm 4.3): ``N = M_x + M_y + mu_x mu_y^T + mu_y mu_x^T = Q3 L3 Q3^T`` and
  ``a_l = A*(L3_l)``, with the projections turned by ``Q3^T`` for the same reason
  (:class:`DERFParameters` ``rotate_projections``).

The fitted parameters define positive dense-exponential features with a diagonal ``A``
on linearly transformed inputs ``x' = B x`` (Thm 4.1 with ``A = diag(a)``):

    log f(w, x) = sum_l [log(1 - 4 a_l)/4 + a_l w_l^2] + sqrt(1 - 4 a) w . B x - |B x|^2 / 2

which :func:`derf_log_weights` writes as one affine map, ``x @ W_eff + const``, plus the
row term ``-|B x|^2 / 2`` (:func:`transformed_sq_norm`). Errata of the paper applied here
(``docs/derivations/favor_sharp.md``, errata b and d): GERF uses ``-|x|^2/2`` (eq. 10-11
print ``C|x|^2/2``), and the ADERF scalar uses ``phi = 2 tr(Sigma)/d + 2 mu3``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from .._backend import check_all_finite
from .._backend.namespace import array_namespace, device, is_numpy_namespace, is_torch_namespace
from .._backend.parallel import (
    PARALLEL_MIN_ELEMENTS,
    SingleThreadedBlas,
    effective_n_jobs,
    pool_map,
)

__all__ = [
    "DERF_MAPS",
    "DERFParameters",
    "Moments",
    "a_star",
    "derf_log_weights",
    "fit_aderf",
    "fit_derf",
    "fit_gerf",
    "fit_saderf",
    "fit_sderf",
    "gerf_phi",
    "moments",
    "transformed_sq_norm",
]

#: maps whose features are :func:`derf_log_weights` of :func:`fit_derf` parameters
DERF_MAPS = ("positive", "gerf", "saderf", "aderf", "sderf")

#: relative ridge of the SADERF / ADERF second moments (library choice,
#: ``docs/derivations/favor_sharp.md``, "Library choices")
DEFAULT_EPS = 1e-6

#: bytes of one row block of :func:`moments` on 2-D NumPy input (the blocks depend on the
#: shape only, so the sums do not depend on the thread count)
_MOMENT_BLOCK_BYTES = 1 << 19  # half a SkylakeX L2: the Gram and the column sums
#: most row blocks per task of :func:`moments` (about 5 MiB of input per Python hand-over)
_MOMENT_CHUNK_BLOCKS = 10


# ============================================================== A*(phi)
def a_star(phi):
    """Minimiser of ``g(A) = log(1-4A) - log(1-8A)/2 + phi/(1-8A)`` on ``A < 1/8``.

    FAVOR# Lemma A.1: ``A* = (1 - 2 phi - sqrt((2 phi + 1)^2 + 8 phi)) / 16``, evaluated in
    the cancellation-free form ``A* = -phi / (1 + (1 + 12 phi) / (2 phi + sqrt(4 phi^2 +
    12 phi + 1)))`` (relative error ~1e-16 for phi in [1e-12, 1e12]).

    Parameters
    ----------
    phi : float or array of any shape
        ``phi >= 0`` (negative values are clipped to 0).

    Returns
    -------
    A : float or array shaped like ``phi``
        ``A <= 0``, ``A*(0) = 0``, strictly decreasing.

    Raises
    ------
    TypeError
        Non-real ``phi``: a string, complex, bool, or a list with entries that are no
        numbers (numeric strings in a list convert, as ``np.asarray(phi, dtype=float)``
        converts them).
    ValueError
        NaN or infinite ``phi`` (no minimiser).
    """
    if isinstance(phi, bool | np.bool_):
        raise TypeError(f"phi must be real numbers, got {phi!r}.")
    if isinstance(phi, int | float | list | tuple | np.generic):
        try:
            arr = np.asarray(phi)
            arr = arr.astype(np.float64) if arr.dtype.kind in "OUS" else arr
        except (TypeError, ValueError) as exc:
            raise TypeError(f"phi must be real numbers: {exc}") from None
        out = _a_star_of(_checked_phi(arr, np).astype(np.float64, copy=False))
        return out if out.ndim or isinstance(phi, np.generic) else float(out)
    try:
        xp = array_namespace(phi)
    except TypeError:
        raise TypeError(
            f"phi must be a float or an array of real numbers, got {type(phi).__name__}."
        ) from None
    return _a_star_of(_checked_phi(phi, xp))


def _checked_phi(phi, xp):
    """``phi`` (an array of namespace ``xp``), or the error of :func:`a_star` for it."""
    if not xp.isdtype(phi.dtype, ("real floating", "integral")):
        raise TypeError(f"phi must be real numbers, got dtype {phi.dtype}.")
    check_all_finite(phi, "phi")
    return phi


def _a_star_of(phi):
    """:func:`a_star` without its checks (the fits' own ``phi``: NaN stays NaN)."""
    if isinstance(phi, np.generic):  # NumPy scalars (np.float64 is also a float): 0-d
        phi = np.asarray(phi, dtype=np.float64)
    elif isinstance(phi, int | float | list | tuple):
        out = _a_star_of(np.asarray(phi, dtype=np.float64))
        return out if out.ndim else float(out)
    xp = array_namespace(phi)
    phi = xp.clip(phi, min=0.0)
    if is_numpy_namespace(xp):
        with np.errstate(over="ignore", invalid="ignore"):
            return _a_star(xp, phi)
    return _a_star(xp, phi)


def _a_star(xp, phi):
    root = xp.sqrt(4.0 * phi * phi + 12.0 * phi + 1.0)
    out = -phi / (1.0 + (1.0 + 12.0 * phi) / (2.0 * phi + root))
    # phi -> inf: (1 + 12 phi) / (2 phi + root) -> 3, A* -> -phi / 4
    return xp.where(xp.isfinite(root), out, -phi / 4.0)


# ============================================================== moments
@dataclass
class Moments:
    """First and second moments of the queries ``x`` and keys ``y`` (FAVOR# Sec. 3-4).

    Any array backend; float64 for the fits.

    Attributes
    ----------
    mean_x : array, shape (..., d)
        Mean of the queries.
    second_x : array, shape (..., d, d) or (..., d)
        Second moment ``E[x x^T]`` of the queries (``full``), or its diagonal (enough
        for GERF and SADERF).
    mean_y : array, shape (..., d)
        Mean of the keys.
    second_y : array, shape (..., d, d) or (..., d)
        Second moment of the keys, as ``second_x``.
    """

    mean_x: object
    second_x: object
    mean_y: object
    second_y: object

    @property
    def full(self) -> bool:
        """Whether the second moments are full ``d x d`` matrices."""
        return self.second_x.ndim == self.mean_x.ndim + 1

    @property
    def dim(self) -> int:
        """The dimension ``d``."""
        return int(self.mean_x.shape[-1])

    def diagonals(self):
        """The diagonals of the second moments.

        Returns
        -------
        diag_x : array, shape (..., d)
            ``diag M_x``.
        diag_y : array, shape (..., d)
            ``diag M_y``.
        """
        if not self.full:
            return self.second_x, self.second_y
        xp = array_namespace(self.second_x)
        return (
            xp.linalg.diagonal(self.second_x),
            xp.linalg.diagonal(self.second_y),
        )


def _one_side(X, weights, full, n_jobs):
    # mean (..., d) and second moment (..., d, d) or (..., d) of X (..., n, d)
    xp = array_namespace(X)
    if weights is None and moments_are_threaded(X):
        return _blocked_moments([X], full, n_jobs)[0]
    if not full and math.prod(X.shape) * X.dtype.itemsize > _MOMENT_BLOCK_BYTES:
        return _streamed_diagonal_moments(xp, X, weights)
    if weights is not None:
        Xw = X * weights[..., None]
        mean = xp.sum(Xw, axis=-2)
        second = xp.matrix_transpose(Xw) @ X if full else _column_dots(xp, Xw, X)
        return mean, second
    n = X.shape[-2]
    if not full:
        return xp.mean(X, axis=-2), _column_dots(xp, X, X) / n
    return xp.mean(X, axis=-2), _gram(xp, X) / n


def _streamed_diagonal_moments(xp, X, weights):
    """Mean and diagonal second moment (..., d) of a large X (..., n, d) in one pass over
    row blocks of about ``_MOMENT_BLOCK_BYTES`` in all (every batch element together).

    Column sums of the block and of its squares are added block by block: the squares
    of a block stay in cache, where one product of the whole X and its strided reduction
    (or the diagonal of its Gram product) would write and re-read an (..., n, d)
    temporary (about 5x slower for 8 x 16384 x 64 float32, torch or NumPy). On
    accelerators, where memory traffic is cheap and launches are the cost, the blocks are
    128 times larger. ``weights`` (..., n): weighted sums (they sum to one); else means.
    """
    n, d = X.shape[-2], X.shape[-1]
    batch = math.prod(X.shape[:-2])
    target = _MOMENT_BLOCK_BYTES * 2 if _on_cpu(X) else _MOMENT_BLOCK_BYTES << 8
    rows = max(64, target // (batch * d * X.dtype.itemsize))
    total = second = None
    for lo in range(0, n, rows):
        Xb = X[..., lo : lo + rows, :]  # (..., rows, d)
        Xw = Xb if weights is None else Xb * weights[..., lo : lo + rows, None]
        t, s = xp.sum(Xw, axis=-2), xp.sum(Xw * Xb, axis=-2)  # (..., d) each
        total, second = (t, s) if total is None else (total + t, second + s)
    if weights is None:
        total, second = total / n, second / n
    return total, second


def _on_cpu(X) -> bool:
    # host memory (NumPy, or a torch / CuPy array on the CPU)
    dev = device(X)
    return str(getattr(dev, "type", dev)) == "cpu"


def _gram(xp, X):
    """``X^T X`` (..., d, d) of X (..., n, d): the second-moment sums of the FAVOR# fits
    (Sec. 4, the matrices ``M_x``, ``M_y`` of Thm 4.2-4.3 up to ``1 / n``).

    On CPU torch tensors with ``d >= 32``, from two products: the upper rows ``X_1^T X``
    (..., h, d) and the lower-right block ``X_2^T X_2`` (``X = [X_1, X_2]``, ``h = d /
    2``), the lower-left block being the transpose of the upper-right. That is 3/4 of the
    multiply-adds (18% less time for 8 x 16384 x 64 float32, which FAVOR#'s per-call fit
    in attention computes twice). Elsewhere one product (NumPy's 2-D ``X.T @ X`` is a
    symmetric rank-k update already).
    """
    d = X.shape[-1]
    if d < 32 or not is_torch_namespace(xp) or X.device.type != "cpu":
        return xp.matrix_transpose(X) @ X
    h = d // 2
    top = xp.matrix_transpose(X[..., :h]) @ X  # (..., h, d)
    low = xp.matrix_transpose(X[..., h:]) @ X[..., h:]  # (..., d - h, d - h)
    left = xp.matrix_transpose(top[..., h:])  # (..., d - h, h)
    return xp.concat([top, xp.concat([left, low], axis=-1)], axis=-2)


def _column_dots(xp, A, X):
    """``sum_i A_il X_il`` (..., d) of A, X (..., n, d). For d <= 128 the diagonal of the
    Gram product: a GEMM over the rows, several times faster than the elementwise product
    and strided reduction it replaces (which also allocates an (n, d) temporary)."""
    if X.shape[-1] <= 128:
        return xp.linalg.diagonal(xp.matrix_transpose(A) @ X)
    return xp.sum(A * X, axis=-2)


def moments_are_threaded(X) -> bool:
    """Whether the moments of ``X`` are summed in threaded row blocks (large 2-D NumPy
    input)."""
    return (
        isinstance(X, np.ndarray)
        and X.ndim == 2
        and X.dtype.kind == "f"
        and X.shape[0] * X.shape[1] >= 4 * PARALLEL_MIN_ELEMENTS
    )


def _row_blocks(n: int, d: int, itemsize: int) -> list:
    """The row blocks ``[(lo, hi), ...]`` of an (n, d) array of ``itemsize``-byte entries:
    about ``_MOMENT_BLOCK_BYTES`` each, at least 256 rows (fixed by the shape)."""
    rows = max(256, _MOMENT_BLOCK_BYTES // (d * itemsize))
    return [(lo, min(lo + rows, n)) for lo in range(0, n, rows)]


def _block_sums(X, blocks, full: bool, ones):
    """``(sum_i x_i x_i^T or its diagonal, sum_i x_i)`` over the rows of the row blocks
    ``blocks`` ``[(lo, hi), ...]`` of the 2-D NumPy ``X`` (n, d), added in block order.

    The one inner loop of the moment sums (through :func:`blocked_sums`: the in-memory
    moments and the chunk sums of the feature maps' Dask and blocked fits). Per block,
    with the block in the core's cache: its Gram matrix (syrk) or column sums of squares,
    then its column sums (a product with ``ones``, float64, at least as long as the
    longest block: a gemv beats ``.sum(axis=0)``). Returns the second sums (d, d) or (d,)
    in ``X``'s dtype and the column sums (d,) in float64.
    """
    d = X.shape[1]
    second = np.zeros((d, d) if full else d, dtype=X.dtype)
    total = np.zeros(d)
    buf = np.empty_like(second)  # one block's Gram / sums of squares
    for lo, hi in blocks:
        Xb = X[lo:hi]  # (rows, d), a view
        if full:
            np.matmul(Xb.T, Xb, out=buf)
        else:
            np.einsum("ij,ij->j", Xb, Xb, out=buf)
        second += buf
        total += ones[: hi - lo] @ Xb  # (d,)
    return second, total


def blocked_sums(arrays, full: bool, n_jobs=None) -> list:
    """``[(sum_i x_i x_i^T or its diagonal, sum_i x_i) for X in arrays]`` of 2-D NumPy
    arrays in one threaded pass (shapes (d, d) or (d,) in ``X``'s dtype, and (d,) float64).

    Every array is cut into row blocks of about ``_MOMENT_BLOCK_BYTES``
    (:func:`_row_blocks`), and its blocks into the fewest chunks of near-equal size with at
    most ``_MOMENT_CHUNK_BLOCKS`` blocks each (all fixed by the shape). A thread of the
    pool takes a whole chunk (BLAS on one thread: :func:`_block_sums` of its blocks), and
    the chunk sums are added in chunk order, so the sums do not depend on the thread
    count. Chunks keep the tasks few: one Python hand-over per few MiB instead of per
    block. (NumPy's matmul releases the GIL; SciPy's BLAS wrappers do not.)
    """
    tasks = []  # (array index, [(lo, hi) row blocks])
    for i, X in enumerate(arrays):
        blocks = _row_blocks(*X.shape, X.itemsize)
        if not blocks:  # no rows: zero sums
            continue
        n_chunks = -(-len(blocks) // _MOMENT_CHUNK_BLOCKS)  # chunks of near-equal size
        bounds = [len(blocks) * k // n_chunks for k in range(n_chunks + 1)]
        tasks += [(i, blocks[a:b]) for a, b in itertools.pairwise(bounds)]
    ones = np.ones(max((hi - lo for _, blocks in tasks for lo, hi in blocks), default=0))

    def chunk(task):
        i, blocks = task
        return _block_sums(arrays[i], blocks, full, ones)

    threads = min(effective_n_jobs(n_jobs), len(tasks))
    if len(tasks) > 1:  # BLAS on one thread for every n_jobs: sums independent of it
        with SingleThreadedBlas():
            parts = pool_map(chunk, tasks, threads)
    else:
        parts = [chunk(t) for t in tasks]
    out = []
    for i, X in enumerate(arrays):
        mine = [part for task, part in zip(tasks, parts, strict=True) if task[0] == i]
        if not mine:  # no rows
            d = X.shape[1]
            out.append((np.zeros((d, d) if full else d, dtype=X.dtype), np.zeros(d)))
            continue
        second, total = mine[0]
        for s2, t in mine[1:]:
            second += s2
            total += t
        out.append((second, total))
    return out


def _blocked_moments(arrays, full, n_jobs) -> list:
    """``[(mean, second moment) for X in arrays]`` of 2-D NumPy arrays in one threaded pass
    of :func:`blocked_sums`: the second moment is ``X^T X / n`` (``full``) or its
    diagonal; neither depends on the thread count."""
    out = []
    for X, (second, total) in zip(arrays, blocked_sums(arrays, full, n_jobs), strict=True):
        n = X.shape[0]
        mean = total / n  # float64 (the ones are): as before for the full moments
        out.append((mean if full else mean.astype(X.dtype, copy=False), second / n))
    return out


def moments(
    X, Y=None, *, full: bool = True, key_weights=None, query_weights=None, n_jobs=None
) -> Moments:
    """Moments of ``X`` (..., n, d) and ``Y`` (..., m, d) (``Y`` defaults to ``X``).

    Parameters
    ----------
    X, Y : arrays of one backend, float64 recommended (the fits are float64).
    full : bool
        Full second-moment matrices (ADERF, SDERF) or diagonals only (GERF, SADERF).
    key_weights : array (..., m), optional
        Non-negative weights of the rows of ``Y`` summing to one (padding excluded), or
        all zero for a fully padded sequence (whose moments are then zero); uniform by
        default. NumPy and eager CPU torch weights are checked (a ``ValueError`` naming
        them otherwise).
    query_weights : array (..., n), optional
        The same for the rows of ``X``.
    n_jobs : int, optional
        Threads for large 2-D NumPy input (scikit-learn convention).

    Returns
    -------
    Moments
        Cost ``O((n + m) d^2)`` (``full``) or ``O((n + m) d)``. Large 2-D NumPy ``X`` and
        ``Y`` are read in one threaded pass over both (row blocks of a fixed size, summed
        in order: the result does not depend on the thread count).
    """
    Y = X if Y is None else Y
    key_weights = _checked_weights(key_weights, Y, "key_weights", "Y")
    query_weights = _checked_weights(query_weights, X, "query_weights", "X")
    if query_weights is None and key_weights is None and Y is X:
        mx, sx = _one_side(X, None, full, n_jobs)
        return Moments(mx, sx, mx, sx)
    unweighted = key_weights is None and query_weights is None
    if unweighted and moments_are_threaded(X) and moments_are_threaded(Y):
        (mx, sx), (my, sy) = _blocked_moments([X, Y], full, n_jobs)
        return Moments(mx, sx, my, sy)
    mx, sx = _one_side(X, query_weights, full, n_jobs)
    my, sy = _one_side(Y, key_weights, full, n_jobs)
    return Moments(mx, sx, my, sy)


def _checked_weights(weights, X, name: str, rows: str):
    """``weights`` (..., n) of the rows of ``X`` (..., n, d): their last dimension must be
    ``X``'s row count where both are known (a ``ValueError`` naming ``name`` otherwise;
    Dask's unknown sizes are left to Dask), and NumPy and eager CPU torch weights must be
    finite, non-negative and sum to one (:func:`_check_weight_values`; other backends'
    are used as given, without a device sync). A list becomes an array of ``X``'s
    backend, dtype and device. None stays None."""
    if weights is None:
        return None
    if not hasattr(weights, "shape"):  # a list
        xp = array_namespace(X)
        weights = xp.asarray(weights, dtype=X.dtype, device=device(X))
    shape, n = tuple(weights.shape), X.shape[-2]

    def known(size):
        return size is not None and not (isinstance(size, float) and math.isnan(size))

    if not shape or (known(shape[-1]) and known(n) and shape[-1] != n):
        raise ValueError(
            f"{name} must have shape (..., n) with the n = {n} rows of {rows}, got {shape}."
        )
    if isinstance(weights, np.ndarray):
        _check_weight_values(weights, name, _eps_of(weights.dtype))
    elif _host_readable(array_namespace(weights), weights):  # eager CPU torch: no sync
        import torch

        eps = torch.finfo(weights.dtype).eps if weights.is_floating_point() else 0.0
        _check_weight_values(np.asarray(weights.detach().cpu().double()), name, eps)
    return weights


def _eps_of(dtype) -> float:
    return float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else 0.0


def _check_weight_values(weights: np.ndarray, name: str, eps: float) -> None:
    """``ValueError`` naming ``name`` unless the host weights ``weights`` (..., n) are finite,
    non-negative and sum to one (or are all zero: a fully padded sequence) over the last
    axis, to ``max(1e-4, 2 eps)``: weights
    normalised in a dtype of machine epsilon ``eps`` carry its rounding, at most ``eps / 2``
    of their sum. Weights that do not sum to one scale the moments, their weighted sums."""
    if not (np.all(np.isfinite(weights)) and np.all(weights >= 0)):
        raise ValueError(f"{name} must be finite and non-negative (summing to one).")
    total = np.sum(weights, axis=-1, dtype=np.float64)
    # (all zero: a sequence with every row padded, which adds nothing)
    off = (np.abs(total - 1.0) > max(1e-4, 2.0 * eps)) & (total != 0)
    if weights.shape[-1] and np.any(off):
        worst = float(np.ravel(total)[np.argmax(np.abs(np.ravel(total) - 1.0))])
        raise ValueError(
            f"{name} must sum to one over the rows (they are the weights of the moments' "
            f"averages), got a sum of {worst:.6g}; divide them by their sum."
        )


# ============================================================== fits
def _ridge(xp, scale, eps):
    # eps * average scale + tiny absolute floor, broadcastable
    return eps * scale + float(np.finfo(np.float64).tiny) ** 0.5


def gerf_phi(mom: Moments):
    """``phi = mean_ij |x_i + y_j|^2 / d = (tr M_x + tr M_y + 2 mu_x.mu_y) / d`` (Sec. 3.1).

    Returns
    -------
    array, shape (...), non-negative.
    """
    xp = array_namespace(mom.mean_x)
    sx, sy = mom.diagonals()
    phi = xp.sum(sx, axis=-1) + xp.sum(sy, axis=-1) + 2.0 * xp.sum(mom.mean_x * mom.mean_y, axis=-1)
    return xp.clip(phi / mom.dim, min=0.0)


def fit_gerf(mom: Moments):
    """Optimal GERF parameter ``A = A*(phi)`` (FAVOR++ / FAVOR# Sec. 3.1), shape (...)."""
    return _a_star_of(gerf_phi(mom))


def fit_saderf(mom: Moments, eps: float = DEFAULT_EPS):
    """SADERF parameters (FAVOR# Sec. 4.3, eq. 20).

    ``psi_l = (mean_j y_jl^2 / mean_i x_il^2)^{1/4}`` (means instead of the printed sums,
    so ``n != m`` is handled; equal for ``n = m``), then GERF on ``(psi x, y / psi)``.
    Library choice: both second moments get the ridge ``eps (mean_l M_x,ll + mean_l
    M_y,ll) / 2``, so a coordinate that is zero on one side gives a finite ``psi``.

    Returns
    -------
    psi : array, shape (..., d)
    A : array, shape (...)
    """
    xp = array_namespace(mom.mean_x)
    sx, sy = mom.diagonals()  # (..., d)
    scale = 0.5 * (xp.mean(sx, axis=-1, keepdims=True) + xp.mean(sy, axis=-1, keepdims=True))
    ridge = _ridge(xp, scale, eps)  # one ridge for both sides: an all-zero side stays finite
    psi = xp.exp(0.25 * (xp.log(sy + ridge) - xp.log(sx + ridge)))
    # GERF phi on (psi x, y / psi); the cross term mu_x.mu_y is psi-free
    phi = (
        xp.sum(psi * psi * sx, axis=-1)
        + xp.sum(sy / (psi * psi), axis=-1)
        + 2.0 * xp.sum(mom.mean_x * mom.mean_y, axis=-1)
    ) / mom.dim
    return psi, _a_star_of(xp.clip(phi, min=0.0))


def _sym_eigh(xp, M):
    return xp.linalg.eigh(0.5 * (M + xp.matrix_transpose(M)))


#: entries of a row within this fraction of its largest magnitude tie for :func:`row_signs`
#: (far above the rounding of fitted rows, about ``eps cond`` of the moments)
_SIGN_RTOL = 1e-6


def row_signs(B):
    """Signs (..., d, 1) making the largest-magnitude entry of every row of ``B`` positive.

    Eigen- and singular vectors are defined up to sign, and LAPACK's choice can flip under
    rounding-level changes of the data (a permutation of the samples, another backend).
    A flipped row is an equally valid fit, but with fixed random projections it changes the
    features; this canonical choice makes the fitted map a function of the data alone.

    Ties: the first entry within ``_SIGN_RTOL`` (relative) of the largest magnitude. Rows
    with two entries of equal magnitude are common (``e_i - e_j`` for duplicated columns
    ``i``, ``j``), and the rounding of the data would otherwise pick one of them, and the
    sign, at random.
    """
    xp = array_namespace(B)
    d = B.shape[-1]
    mag = xp.abs(B)
    near = mag >= (1.0 - _SIGN_RTOL) * xp.max(mag, axis=-1, keepdims=True)  # (..., d, d)
    idx = xp.argmax(xp.astype(near, B.dtype), axis=-1)  # (..., d): the first of them
    onehot = xp.astype(idx[..., None] == xp.arange(d, device=device(B)), B.dtype)
    signs = xp.sign(xp.sum(B * onehot, axis=-1, keepdims=True))  # (..., d, 1)
    return xp.where(signs == 0, xp.ones_like(signs), signs)


def fit_aderf(mom: Moments, eps: float = DEFAULT_EPS):
    """ADERF parameters (FAVOR# Thm 4.2).

    ``M_x + lambda I = Q1 L1 Q1^T``, ``M_y + lambda I = Q2 L2 Q2^T``,
    ``U S V^T = svd(L1^{1/2} Q1^T Q2 L2^{1/2})``, ``B~1 = S^{1/2} U^T L1^{-1/2} Q1^T``,
    ``B~2 = S^{-1/2} U^T L1^{1/2} Q1^T`` (so ``B~1^T B~2 = I``), and ``A = A*(phi)`` with
    ``phi`` the GERF statistic of ``(B~1 x, B~2 y)``, which equals ``2 tr(S)/d + 2 mu3`` at
    the optimum (erratum d: the proof of Thm 4.2 prints ``phi = tr(S)/d + mu3``, without
    the factor 2, which about halves ``A``) and stays exact under the ridge.

    Library choice: ``lambda = eps (tr M_x + tr M_y) / (2d)``, so singular second moments
    (fewer points than dimensions, zero columns) work; any ``B~1`` with ``B~2 = B~1^{-T}``
    is unbiased, the ridge only moves it off the optimum. ``S`` is floored at ``1e-300``
    of its largest value.

    Returned turned by ``U~ = Q1 U`` (the left singular vectors in input coordinates):
    ``B_x = U~ B~1 = U~ S^{1/2} U~^T K1^{-1/2}``, ``B_y = U~ B~2 = U~ S^{-1/2} U~^T
    K1^{1/2}`` with ``K1 = M_x + lambda I``. ``A = a I`` is isotropic, so the features of
    ``U~ B~`` with projection ``w`` are those of ``B~`` with ``U~^T w``, again ``N(0, I)``:
    the same estimator, the same ``phi`` and ``A``, ``B_x^T B_y = I``, and ``B_x M_x B_x^T
    = B_y M_y B_y^T = U~ S U~^T`` (to the ridge) in place of Thm 4.2's diagonal ``S``. But
    ``U~ S^{+-1/2} U~^T`` are spectral functions of ``K1^{1/2} K2 K1^{1/2}`` (eigenvalues
    ``S^2``), so the fit is a continuous function of the data, independent of the row
    order, of LAPACK's choice of signs and of the basis of repeated singular values (the
    ridge's ``lambda`` on a common null space, for rank-deficient moments), where Thm
    4.2's ``B~`` turns by ``O(epsilon / delta)`` under a relative data change ``epsilon``
    when two singular values are a relative ``delta`` apart.

    Parameters
    ----------
    mom : Moments with full second moments.
    eps : float, default=1e-6
        Relative ridge ``lambda`` above.

    Returns
    -------
    B1, B2 : arrays, shape (..., d, d)
    A : array, shape (...)
    """
    xp = array_namespace(mom.mean_x)
    d = mom.dim
    M1, M2 = mom.second_x, mom.second_y
    tr = 0.5 * (xp.sum(xp.linalg.diagonal(M1), axis=-1) + xp.sum(xp.linalg.diagonal(M2), axis=-1))
    eye = xp.eye(d, dtype=M1.dtype, device=device(M1))
    ridge = _ridge(xp, tr / d, eps)[..., None, None] * eye
    L1, Q1 = _sym_eigh(xp, M1 + ridge)
    L2, Q2 = _sym_eigh(xp, M2 + ridge)
    tiny = float(np.finfo(np.float64).tiny)
    r1 = xp.sqrt(xp.clip(L1, min=tiny))  # (..., d)
    r2 = xp.sqrt(xp.clip(L2, min=tiny))
    Q1t = xp.matrix_transpose(Q1)
    core = r1[..., :, None] * (Q1t @ Q2) * r2[..., None, :]
    U, S, _ = xp.linalg.svd(core)
    S = xp.maximum(S, 1e-300 * xp.max(S, axis=-1, keepdims=True) + tiny)
    # Thm 4.2's B~1 = S^{1/2} U^T L1^{-1/2} Q1^T and B~2 = S^{-1/2} U^T L1^{1/2} Q1^T,
    # turned by U~ = Q1 U (see above): U~ S^{+-1/2} U~^T K1^{-+1/2}
    Ut = xp.matrix_transpose(U)
    root_s = xp.sqrt(S)[..., :, None]  # (..., d, 1)
    Uw = Q1 @ U  # U~, (..., d, d)
    B1 = Uw @ (root_s * (Ut @ (Q1t / r1[..., :, None])))
    B2 = Uw @ ((Ut @ (Q1t * r1[..., :, None])) / root_s)
    # GERF phi on (B1 x, B2 y): mean |B1 x|^2 = tr(B1 M_x B1^T); cross term B1^T B2 = I
    n1 = xp.sum((B1 @ M1) * B1, axis=(-2, -1))
    n2 = xp.sum((B2 @ M2) * B2, axis=(-2, -1))
    phi = (n1 + n2 + 2.0 * xp.sum(mom.mean_x * mom.mean_y, axis=-1)) / d
    return B1, B2, _a_star_of(xp.clip(phi, min=0.0))


def fit_sderf(mom: Moments):
    """SDERF parameters, FAVOR# (Thm 4.3).

    ``N = M_x + M_y + mu_x mu_y^T + mu_y mu_x^T = Q3 L3 Q3^T`` (the mean of
    ``(x_i + y_j)(x_i + y_j)^T``), ``a_l = A*(L3_l)``; the map uses
    ``B = (I - 4A)^{1/2} Q3^T``. Zero eigenvalues give ``a_l = 0``; no inverse is needed,
    so no regularisation. The eigenvectors of a null space (rank-deficient moments) and
    of every other cluster of close eigenvalues are a canonical basis of it, and the
    cluster's eigenvalues made equal (:func:`_canonical_null_basis`, continuously in the
    data: gaps and small eigenvalues shrink to 0 over a margin), so the rotation is a
    function of the data alone. The features take the projections in input coordinates
    and turn them by ``Q3^T`` (:class:`DERFParameters` ``rotate_projections``): Thm 4.1's
    symmetric ``A = Q3 diag(a) Q3^T``, continuous in the data also where two eigenvalues
    are close but not equal and ``Q3`` itself is not.

    Returns
    -------
    Q3t : array, shape (..., d, d)
        The rotation ``Q3^T``, eigenvalues in non-ascending order, canonical row signs.
    a : array, shape (..., d)
    """
    xp = array_namespace(mom.mean_x)
    cross = mom.mean_x[..., :, None] * mom.mean_y[..., None, :]
    N = mom.second_x + mom.second_y + cross + xp.matrix_transpose(cross)
    lam, Q3 = _sym_eigh(xp, N)
    lam, Q3 = _canonical_null_basis(xp, lam, Q3)
    lam, Q3 = xp.flip(lam, axis=-1), xp.flip(Q3, axis=-1)
    Q3t = xp.matrix_transpose(Q3)
    return Q3t * row_signs(Q3t), _a_star_of(xp.clip(lam, min=0.0))


#: eigenvalues of N up to this fraction of the largest form its (numerical) null space
#: (rounding of float32 moments leaves about 1e-8 there); they are set to 0 (a_l = 0),
#: and those up to twice it shrink towards 0 (:func:`_canonical_null_basis`)
_NULL_RTOL = 1e-5
#: consecutive eigenvalues of N less than this fraction of the largest apart form one
#: cluster of equal ``a_l`` (:func:`_canonical_clusters`): the same margin over rounding;
#: gaps up to twice it shrink towards 0 (:func:`_canonical_null_basis`)
_CLUSTER_RTOL = 1e-5


def _host_readable(xp, a) -> bool:
    """Whether a value of ``a`` can be read without a device sync or a graph break:
    NumPy, or eager torch on the CPU."""
    if is_numpy_namespace(xp):
        return True
    import torch

    return is_torch_namespace(xp) and a.device.type == "cpu" and not torch.compiler.is_compiling()


def _canonical_null_basis(xp, lam, Q):
    """Eigenvalues ``lam`` (..., d) of ``N`` in ascending order and their eigenvectors
    ``Q`` (..., d, d), with the null space (``lam <= _NULL_RTOL max(lam)``) set to 0, the
    eigenvalues of every cluster (consecutive gaps up to ``_CLUSTER_RTOL max(lam)``) made
    equal and its eigenvectors (the null space among them) replaced by a basis that
    depends on the cluster's subspace alone (:func:`_canonical_clusters`). Both
    thresholds are continuous: the smallest eigenvalue and every gap shrink linearly to
    0 between twice the threshold and the threshold (the eigenvalues are the smallest
    plus the sums of the gaps below them), so that the spectral ``A = Q diag(a) Q^T``, and
    the features, do not jump where the data cross them.

    Rank-deficient moments (fewer queries and keys than dimensions, unused or duplicated
    input coordinates) leave ``N`` a null space, and symmetric data (one-hot rows of
    balanced categories, rows orthogonal with equal norms) a repeated non-zero
    eigenvalue; LAPACK chooses the eigenvectors of such a cluster arbitrarily, so that a
    rounding-level change of the data (a permutation of the rows, another memory layout)
    turns them by O(1). Every rotation of a cluster's basis is an equally valid fit (its
    ``a_l = A*(lambda)`` are equal, the eigenvalues of the null space being set to 0
    rather than left to rounding), but with fixed projections the features change, and
    on the null space (where the inputs' features do not see it) their closed-form
    gradients ``dl W_x^T`` do.
    """
    top = xp.clip(xp.max(lam, axis=-1, keepdims=True), min=float(np.finfo(np.float64).tiny))
    # Continuous in lam (the features are spectral functions of N and must not jump where a
    # gap or the smallest eigenvalue crosses a threshold): the smallest eigenvalue goes
    # to 0 below t = _NULL_RTOL top and to 2 (lam - t) up to 2 t; every gap g between
    # consecutive eigenvalues to 0 below c = _CLUSTER_RTOL top (a cluster: equal values,
    # so that its basis does not matter) and to 2 (g - c) up to 2 c; the eigenvalues are
    # the smallest plus the sums of the gaps below them. Values up to t are one cluster
    # at 0 (t = c); the largest moves by at most d c.
    t, c = _NULL_RTOL * top, _CLUSTER_RTOL * top
    zero = xp.zeros_like(lam[..., :1])
    low = lam[..., :1]
    low = xp.where(low <= t, zero, xp.where(low <= 2.0 * t, 2.0 * (low - t), low))
    gaps = lam[..., 1:] - lam[..., :-1]
    gaps = xp.where(
        gaps <= c, xp.zeros_like(gaps), xp.where(gaps <= 2.0 * c, 2.0 * (gaps - c), gaps)
    )
    vals = xp.concat([low, low + _cumsum(xp, gaps)], axis=-1)
    return vals, _canonical_clusters(xp, lam, Q, top)  # clusters from the gaps of lam


def _cumsum(xp, a):
    """Cumulative sum over the last axis: the backend's own for NumPy and torch
    (array_api_compat's ``cumulative_sum`` looks up the namespace again, through a cached
    function that ``torch.compile`` warns about)."""
    if is_torch_namespace(xp):
        return xp.cumsum(a, dim=-1)
    if is_numpy_namespace(xp):
        return np.cumsum(a, axis=-1)
    return xp.cumulative_sum(a, axis=-1)


def _canonical_clusters(xp, vals, Q, top):
    """The orthonormal vectors of sorted values ``vals`` (..., d) (ascending or
    descending), the columns of ``Q`` (..., d, d), with the vectors of every cluster of
    equal values replaced by a basis of the cluster's subspace that depends on that
    subspace alone; shape (..., d, d). (The caller gives the cluster one value:
    :func:`_canonical_null_basis` tapers its gaps to 0.)

    Clusters: consecutive values less than ``_CLUSTER_RTOL top`` apart (``top`` (..., 1):
    the largest), so a split by rounding (about ``eps top`` in float64, ``1e-8 top`` for
    float32 moments) stays one cluster. The basis orthonormalises the projections ``P_c
    g_i`` of fixed generic vectors onto the cluster's subspace (``P_c = Q_c Q_c^T``,
    continuous in the data while the cluster is separated from the rest). All clusters at
    once, without a data-dependent loop (compile-friendly): ``Y = Q (K * (Q^T G))`` with
    ``K_ij = [i, j in one cluster]`` has column ``i`` equal to ``P_c(i) g_i``, and a QR of
    ``Y`` orthonormalises every cluster's columns within its subspace (the clusters are
    contiguous and mutually orthogonal). A value alone in its cluster keeps its vector
    (unique up to sign). Signs are left to the caller (:func:`row_signs`).
    """
    d = Q.shape[-1]
    if d < 2:
        return Q
    new = xp.abs(vals[..., 1:] - vals[..., :-1]) > _CLUSTER_RTOL * top  # a new cluster
    ids = _cumsum(xp, xp.astype(new, xp.int64))
    ids = xp.concat([xp.zeros_like(ids[..., :1]), ids], axis=-1)  # (..., d) cluster index
    K = xp.astype(ids[..., :, None] == ids[..., None, :], Q.dtype)  # (..., d, d)
    size = xp.sum(K, axis=-1)  # (..., d)
    shared = size > 1.5
    if _host_readable(xp, vals) and not bool(xp.any(shared)):
        return Q  # simple values (the usual case): skip the QR where the check is free
    # fixed pseudo-random G (d, d) from a hash of the indices: elementwise ops only, so
    # traceable and the same on every backend up to the rounding of sin (G moves by about
    # 1e-11, and the basis with it). In float64 whatever Q's dtype: in float32 the
    # fractional part of sin(...) * 43758 keeps no correct digit, so float32 moments
    # would get another basis than float64 ones (and NumPy's another than torch's)
    i = xp.arange(1, d + 1, dtype=xp.float64, device=device(Q))
    t = xp.sin(12.9898 * i[:, None] + 78.233 * i[None, :]) * 43758.5453
    G = xp.astype(t - xp.floor(t) - 0.5, Q.dtype)
    Qg, _ = xp.linalg.qr(Q @ (K * (xp.matrix_transpose(Q) @ G)))
    return xp.where(shared[..., None, :], Qg, Q)


# ============================================================== parameters -> features
@dataclass
class DERFParameters:
    """Positive features with diagonal ``A`` on transformed inputs (Thm 4.1).

    ``a`` (..., d): the diagonal of ``A`` (every ``a_l < 1/8``). ``B_x``, ``B_y``: the input
    transforms ``x' = B_x x``, ``y' = B_y y`` with ``B_x^T B_y = I``: None (identity), a
    (..., d) diagonal, or a (..., d, d) matrix. ``orthogonal``: whether ``|B x| = |x|``
    for both sides (identity or a rotation), so the row term needs no extra product.

    ``rotate_projections`` (SDERF): the projections ``w`` are drawn in input coordinates
    and enter the features as ``B_x w`` (``B_x = B_y`` a rotation). Then the features are
    Thm 4.1's with the symmetric ``A = B_x^T diag(a) B_x`` on the untransformed inputs,
    ``log f(w, x) = w^T A w + w^T (I - 4A)^{1/2} x - |x|^2 / 2 + log det(I - 4A) / 4``:
    the same estimator in distribution (``B_x w ~ N(0, I)``), but a continuous function
    of the data. With ``w`` drawn in the fitted eigenbasis instead, two eigenvalues a
    relative ``delta`` apart let a data change of relative size ``epsilon`` turn their
    eigenvectors by about ``epsilon / delta``, and the features (another draw, in effect)
    with them; ``A`` and ``(I - 4A)^{1/2}`` are spectral functions of the data and move
    by ``O(epsilon)`` only. Parameters that are not one rotation for both sides (edited
    ones: ``B_y`` another array, ``B_x`` orthogonal only to rounding) turn the projections
    by ``B_x`` all the same and take the diagonal-``A`` form on ``(B_x x, B_y y)`` with
    them, so that the features are continuous in ``B_x`` and ``B_y`` too.
    """

    a: object
    B_x: object = None
    B_y: object = None
    orthogonal: bool = True
    rotate_projections: bool = False

    @property
    def symmetric(self) -> bool:
        """Whether both sides share one map (``B_x is B_y``)."""
        return self.B_x is self.B_y


def fit_derf(name: str, mom: Moments | None, dim: int | None = None, eps: float = DEFAULT_EPS):
    """Fitted :class:`DERFParameters` of map ``name`` (one of :data:`DERF_MAPS`).

    ``"positive"`` (FAVOR+) needs no moments (``a = 0``, ``B = I``; pass ``dim``);
    ``"gerf"``: ``a = A 1``; ``"saderf"``: ``B_x = diag(psi)``, ``B_y = diag(1/psi)``;
    ``"aderf"``: ``B_x = B~1``, ``B_y = B~2``; ``"sderf"``: ``B_x = B_y = Q3^T``, ``a`` per
    coordinate, projections rotated by ``Q3^T`` (``rotate_projections``). Batched over the
    leading dimensions of the moments.
    """
    if name == "positive":
        if mom is None:
            if dim is None:
                raise ValueError(
                    "fit_derf('positive', None) needs dim, the input dimension d (FAVOR+ "
                    "has no moments to read it from)."
                )
            return DERFParameters(np.zeros(int(dim)))
        xp = array_namespace(mom.mean_x)
        return DERFParameters(xp.zeros_like(mom.mean_x))
    if mom is None:
        raise ValueError(f"feature map {name!r} fits its parameters from moments; got None.")
    if name in ("aderf", "sderf") and not mom.full:
        raise ValueError(
            f"feature map {name!r} needs full (d x d) second moments: compute them with "
            "moments(..., full=True)."
        )
    xp = array_namespace(mom.mean_x)
    ones = xp.ones_like(mom.mean_x)  # (..., d)
    if name == "gerf":
        return DERFParameters(fit_gerf(mom)[..., None] * ones)
    if name == "saderf":
        psi, A = fit_saderf(mom, eps)
        return DERFParameters(A[..., None] * ones, psi, 1.0 / psi, orthogonal=False)
    if name == "aderf":
        B1, B2, A = fit_aderf(mom, eps)
        return DERFParameters(A[..., None] * ones, B1, B2, orthogonal=False)
    if name == "sderf":
        Q3t, a = fit_sderf(mom)
        return DERFParameters(a, Q3t, Q3t, orthogonal=True, rotate_projections=True)
    raise ValueError(f"unknown dense-exponential map {name!r}; expected one of {DERF_MAPS}.")


def derf_log_weights(
    params: DERFParameters, W, *, normalize: bool = True, check: bool = True, out=None
):
    """The affine part of the log features of :class:`DERFParameters` ``params``.

    ``log f(w_m, x) = x @ W_x[..., :, m] + const[..., m] - |B_x x|^2 / 2`` with
    ``W_x = B_x^T diag(sqrt(1 - 4 a)) W^T`` and ``const_m = sum_l [log(1 - 4 a_l)/4 +
    a_l w_ml^2]`` (Thm 4.1 with diagonal ``A``), minus ``log(M)/2`` when ``normalize`` (so
    that the ``M`` features' inner products average over the projections). With
    ``params.rotate_projections`` the rows of ``W`` are first turned by ``B_x``
    (``w_m -> B_x w_m``): ``W_x = B_x^T diag(sqrt(1 - 4 a)) B_x W^T`` and ``const_m =
    sum_l log(1 - 4 a_l)/4 + w_m^T B_x^T diag(a) B_x w_m`` (``W_y`` with ``B_y^T`` in front
    when ``B_y`` is not ``B_x``).

    Parameters
    ----------
    params : DERFParameters, leading dims ``(...)``
    W : array, shape (M, d)
        Projections, rows ~ N(0, I).
    normalize : bool
        Include ``-log(M)/2`` in ``const``.
    check : bool
        Raise if some ``a_l >= 1/8`` (a data-dependent branch: pass False in compiled or
        GPU code, where the fits always give ``a <= 0``).
    out : NumPy array, shape (d, M), optional
        Where a NumPy ``W_x`` is written when it is one matrix product (SDERF's rotation
        in float64, a matrix ``B_x``; unbatched parameters, ``out`` of ``W``'s dtype and
        sharing no memory with it): a caller's buffer takes it without a fresh ``(d, M)``
        array and a copy. Ignored otherwise (check ``W_x is out``).

    Returns
    -------
    W_x, W_y : arrays, shape (..., d, M) (the same object for symmetric parameters)
    const : array, shape (..., M)
    """
    xp = array_namespace(W)
    a = xp.asarray(params.a, dtype=W.dtype, device=device(W))
    if check and bool(xp.any(8.0 * a >= 1.0)):
        raise ValueError("DERF needs every A_l < 1/8 (Thm 4.1: 8A < I).")
    s = xp.sqrt(1.0 - 4.0 * a)  # (..., d)
    log_det = 0.25 * xp.sum(xp.log1p(-4.0 * a), axis=-1, keepdims=True)  # (..., 1)
    Wt = xp.matrix_transpose(W)  # (..., d, M), a view
    shift = -0.5 * math.log(W.shape[0]) if normalize else 0.0
    B = None
    if params.rotate_projections and params.B_x is not None:
        B = xp.asarray(params.B_x, dtype=W.dtype, device=device(W))
    if B is not None and not (params.symmetric and params.orthogonal and B.ndim > a.ndim):
        # B_x not one rotation for both sides (edited fitted attributes): turn the
        # projections by B_x all the same, then the diagonal-A form below, so that the
        # features stay continuous in B_x, B_y (no switch of convention at a tolerance)
        Wt = B[..., :, None] * Wt if B.ndim == a.ndim else B @ Wt  # (..., d, M)
        W = xp.matrix_transpose(Wt)  # (..., M, d)
    elif B is not None:
        # symmetric A = B^T diag(a) B (B = B_x = B_y a rotation): W_x = (I - 4A)^{1/2} W^T
        # with (I - 4A)^{1/2} = B^T diag(s) B
        if W.dtype == xp.float64:
            # w^T A w = (|w|^2 - |(I - 4A)^{1/2} w|^2) / 4 from W_x's columns: one (d, M)
            # product, as for a diagonal A; the difference rounds to about 1e-16 |w|^2
            P = (xp.matrix_transpose(B) * s[..., None, :]) @ B  # (..., d, d)
            W_x = _product_into(xp, P, Wt, out)  # (..., d, M)
            quad = 0.25 * (_column_sq_sums(xp, Wt) - _column_sq_sums(xp, W_x))
        else:
            # float32 / half: that difference would round to 1e-7 |w|^2 (a near 0), above
            # the rounding of the logits; sum_l a_l (B w)_l^2 from the turned projections
            Wb = B @ Wt  # (..., d, M)
            quad = (a[..., None, :] @ (Wb * Wb))[..., 0, :]  # (..., M)
            W_x = (xp.matrix_transpose(B) * s[..., None, :]) @ Wb
        return W_x, W_x, log_det + quad + shift
    # sum_l a_l w_ml^2 as (W * W) @ a: contiguous operands, (..., M)
    const = log_det + ((W * W) @ a[..., None])[..., 0] + shift

    def side(B, buf=None):
        # B^T diag(s) W^T: the (d, d) or (d,) factor first, then one product with W^T
        # (no (M, d) temporary; a C-contiguous (d, M) result, into buf for a matrix B)
        if B is None:
            return s[..., :, None] * Wt
        B = xp.asarray(B, dtype=W.dtype, device=device(W))
        if B.ndim == a.ndim:  # diagonal
            return (B * s)[..., :, None] * Wt
        return _product_into(xp, xp.matrix_transpose(B) * s[..., None, :], Wt, buf)

    W_x = side(params.B_x, out)
    W_y = W_x if params.symmetric else side(params.B_y)
    return W_x, W_y, const


def _product_into(xp, A, B, out):
    """``A @ B``, written into the NumPy array ``out`` where one is given and takes it
    as is: the product's shape (no batch dims) and dtype, and no memory shared with the
    operands (which are read after); otherwise a fresh result (a fresh MiB-sized result
    costs page faults that rival the small product)."""
    if (
        out is not None
        and is_numpy_namespace(xp)
        and A.ndim == B.ndim == 2
        and out.shape == (A.shape[0], B.shape[1])
        and out.dtype == np.result_type(A, B)
        and not np.shares_memory(out, A)
        and not np.shares_memory(out, B)
    ):
        return np.matmul(A, B, out=out)
    return A @ B


def _column_sq_sums(xp, A):
    """``sum_l A[..., l, m]^2`` (..., M) of ``A`` (..., d, M): one ``einsum`` for NumPy
    (no ``(d, M)`` temporary)."""
    if is_numpy_namespace(xp):
        return np.einsum("...lm,...lm->...m", A, A)
    return xp.sum(A * A, axis=-2)


def transformed_sq_norm(params: DERFParameters, X, side: str = "x"):
    """``|B x|^2`` per row of ``X`` (..., n, d), with ``B`` the ``side`` transform of
    ``params`` (None, a diagonal or a matrix, told apart by the rank of ``params.a``, so
    parameters with fewer batch dimensions than ``X`` broadcast); shape (..., n)."""
    xp = array_namespace(X)
    B = params.B_x if side == "x" else params.B_y
    if B is not None:
        B = xp.asarray(B, dtype=X.dtype, device=device(X))
        diagonal = B.ndim == xp.asarray(params.a).ndim
        X = X * B[..., None, :] if diagonal else X @ xp.matrix_transpose(B)
    return xp.sum(X * X, axis=-1)
