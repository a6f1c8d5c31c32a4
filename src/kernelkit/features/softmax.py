"""Random features for the softmax and Gaussian kernels: trig, positive (FAVOR+),
hyperbolic, GERF (FAVOR++) and the dense-exponential family SADERF, ADERF, SDERF
(FAVOR#).

Reference: Likhosherstov et al., "FAVOR#: Sharp Attention Kernel Approximations via
New Classes of Positive Random Features" (equation numbers below refer to it), with the
errata of ``shared/notes/favor_sharp_derf.md`` applied:

* TrigRF uses ``cos(w.y + theta)`` on the y side (eq. 7 prints ``-w.y``);
* GERF uses ``-|x|^2/2`` (eq. 10-11 print ``C|x|^2/2`` with ``C = -1/2``);
* the ADERF scalar parameter uses ``phi = 2 tr(Sigma)/d + 2 mu3`` (Thm 4.2).

Every map is written for ``K^(0)(x, y) = exp(x.y)``; the Gaussian kernel
``K^(-1/2)`` multiplies features by ``exp(-|x|^2/2)`` (Sec. 2.1), which leaves the fitted
parameters unchanged.

All positive maps here are one mechanism, a *diagonal DERF on linearly transformed
inputs*: with ``x' = B1 x``, ``y' = B2 y`` (``B1^T B2 = I``) and a diagonal ``A = diag(a)``
(``a_l < 1/8``),

    log f(w, x') = sum_l [ log(1-4 a_l)/4 + a_l w_l^2 + sqrt(1-4 a_l) w_l x'_l ] - |x'|^2/2

(Thm 4.1 with ``A`` diagonal; ``D = det(I-4A)^{1/4}``). PositiveRF is ``a = 0, B = I``;
GERF ``a = A 1, B = I``; SADERF ``B1 = diag(psi), B2 = diag(psi)^-1``; ADERF
``B1 = B~1, B2 = B~2``; SDERF ``B1 = B2 = Q3^T`` with per-coordinate ``a_l``.
"""

from __future__ import annotations

import functools
import math
import numbers

import numpy as np

from .._backend import device, is_numpy_namespace, to_backend, to_numpy
from .._backend.parallel import PARALLEL_MIN_ELEMENTS, map_row_blocks
from ._base import FeatureMap, _matmul_augmented

__all__ = [
    "ADERF",
    "GERF",
    "SADERF",
    "SDERF",
    "HyperbolicRF",
    "PositiveRF",
    "TrigRF",
    "a_star",
    "fit_aderf",
    "fit_gerf",
    "fit_saderf",
    "fit_sderf",
    "gerf_phi",
]


# ============================================================== closed-form solvers
def a_star(phi):
    """Minimiser of ``g(A) = log(1-4A) - log(1-8A)/2 + phi/(1-8A)`` on ``A < 1/8``.

    FAVOR# Lemma A.1: ``A* = (1 - 2 phi - sqrt((2 phi + 1)^2 + 8 phi)) / 16``, evaluated in
    the cancellation-free form ``A* = -phi / (1 + (1 + 12 phi) / (2 phi + sqrt(4 phi^2 +
    12 phi + 1)))`` (relative error ~1e-16 for phi in [1e-12, 1e12]).

    Parameters
    ----------
    phi : float or ndarray, ``phi >= 0`` (negative values are clipped to 0).

    Returns
    -------
    A : same shape as ``phi``, ``A <= 0``, ``A*(0) = 0``, strictly decreasing.
    """
    phi = np.maximum(np.asarray(phi, dtype=np.float64), 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        root = np.sqrt(4.0 * phi * phi + 12.0 * phi + 1.0)
        out = -phi / (1.0 + (1.0 + 12.0 * phi) / (2.0 * phi + root))
    # phi -> inf: (1 + 12 phi) / (2 phi + root) -> 3, A* -> -phi / 4
    out = np.where(np.isfinite(root), out, -phi / 4.0)
    return out if out.ndim else float(out)


def gerf_phi(X, Y):
    """``phi = sum_ij |x_i + y_j|^2 / (d n m)`` in O((n + m) d) (FAVOR# Sec. 3.1).

    Parameters
    ----------
    X : ndarray, shape (..., n, d)
    Y : ndarray, shape (..., m, d)

    Returns
    -------
    ndarray, shape (...)
    """
    d = X.shape[-1]
    mx, my = X.mean(axis=-2), Y.mean(axis=-2)  # (..., d)
    sq = (X * X).sum(axis=-1).mean(axis=-1) + (Y * Y).sum(axis=-1).mean(axis=-1)
    return np.maximum((sq + 2.0 * (mx * my).sum(axis=-1)) / d, 0.0)


def fit_gerf(X, Y):
    """Optimal GERF parameter ``A = A*(phi)`` (FAVOR++ / FAVOR# Sec. 3.1), shape (...)."""
    return a_star(gerf_phi(X, Y))


def _ridge(s, eps):
    # eps * average scale + tiny absolute floor, shape (...) -> broadcastable
    return eps * s + np.finfo(np.float64).tiny ** 0.5


def fit_saderf(X, Y, eps: float = 1e-6):
    """SADERF parameters (FAVOR# Sec. 4.3, eq. 20).

    ``psi_l = (mean_j y_jl^2 / mean_i x_il^2)^{1/4}`` (means instead of the printed sums, so
    ``n != m`` is handled; equal for ``n = m``), then GERF fitted on ``(psi x, y / psi)``.
    Library choice (note Sec. 5): both second moments get the ridge
    ``eps * (mean_l sx + mean_l sy) / 2`` so a
    coordinate that is zero on one side gives a finite ``psi``.

    Returns
    -------
    psi : ndarray, shape (..., d)
    A : ndarray, shape (...)
    """
    sx = (X * X).mean(axis=-2)  # (..., d)
    sy = (Y * Y).mean(axis=-2)
    # one ridge for both sides, from their joint scale: an all-zero side stays finite
    ridge = _ridge(0.5 * (sx.mean(axis=-1, keepdims=True) + sy.mean(axis=-1, keepdims=True)), eps)
    sx, sy = sx + ridge, sy + ridge
    psi = np.exp(0.25 * (np.log(sy) - np.log(sx)))
    A = fit_gerf(X * psi[..., None, :], Y / psi[..., None, :])
    return psi, A


def _sym_eigh(M):
    lam, Q = np.linalg.eigh(0.5 * (M + np.swapaxes(M, -1, -2)))
    return lam, Q


def fit_aderf(X, Y, eps: float = 1e-6):
    """ADERF parameters (FAVOR# Thm 4.2).

    ``M1 = mean x x^T = Q1 L1 Q1^T``, ``M2 = mean y y^T = Q2 L2 Q2^T``,
    ``U S V^T = svd(L1^{1/2} Q1^T Q2 L2^{1/2})``,
    ``B~1 = S^{1/2} U^T L1^{-1/2} Q1^T``, ``B~2 = S^{-1/2} U^T L1^{1/2} Q1^T``
    (``B~1^T B~2 = I``), and ``A = A*(phi)`` with ``phi = 2 tr(S)/d + 2 mu3`` (erratum d).
    ``phi`` is computed as the GERF statistic of the transformed data, which equals
    ``2 tr(S)/d + 2 mu3`` at the optimum and stays exact under the ridge.

    Library choice (note Sec. 5): ``M_k + lambda I`` with ``lambda = eps (tr M1 + tr M2) / (2d)``
    so singular second moments (fewer points than dimensions, zero columns) work; any
    ``B~1`` with ``B~2 = B~1^{-T}`` is unbiased, the ridge only moves it off the optimum.
    ``S`` is floored at ``1e-300`` relative to its largest value.

    Parameters
    ----------
    X : ndarray, shape (..., n, d)
    Y : ndarray, shape (..., m, d)

    Returns
    -------
    B1, B2 : ndarray, shape (..., d, d)
    A : ndarray, shape (...)
    """
    d = X.shape[-1]
    eye = np.eye(d)
    M1 = np.swapaxes(X, -1, -2) @ X / X.shape[-2]  # (..., d, d)
    M2 = M1 if Y is X else np.swapaxes(Y, -1, -2) @ Y / Y.shape[-2]
    tr1 = np.trace(M1, axis1=-2, axis2=-1)[..., None, None] / d
    tr2 = np.trace(M2, axis1=-2, axis2=-1)[..., None, None] / d
    ridge = _ridge(0.5 * (tr1 + tr2), eps) * eye  # joint scale of both sides
    L1, Q1 = _sym_eigh(M1 + ridge)
    L2, Q2 = _sym_eigh(M2 + ridge)
    floor = np.finfo(np.float64).tiny
    L1, L2 = np.maximum(L1, floor), np.maximum(L2, floor)
    r1, r2 = np.sqrt(L1), np.sqrt(L2)  # (..., d)
    core = (r1[..., :, None] * (np.swapaxes(Q1, -1, -2) @ Q2)) * r2[..., None, :]
    U, S, _ = np.linalg.svd(core)
    S = np.maximum(S, 1e-300 * S.max(axis=-1, keepdims=True) + floor)
    Q1t = np.swapaxes(Q1, -1, -2)
    Ut = np.swapaxes(U, -1, -2)
    B1 = np.sqrt(S)[..., :, None] * (Ut @ (Q1t / r1[..., :, None]))
    B2 = (1.0 / np.sqrt(S))[..., :, None] * (Ut @ (Q1t * r1[..., :, None]))
    signs = _row_signs(B1)  # (..., d, 1): SVD signs are arbitrary; fix them (same on both)
    B1, B2 = B1 * signs, B2 * signs
    A = fit_gerf(X @ np.swapaxes(B1, -1, -2), Y @ np.swapaxes(B2, -1, -2))
    return B1, B2, A


#: bytes of one row block of :func:`_moments` (L2-sized; the blocks depend on the shape
#: only, so the sums do not depend on the thread count)
_MOMENT_BLOCK_BYTES = 1 << 20


def _moments(X):
    """``(mean_i x_i, mean_i x_i x_i^T)`` of ``X`` (..., n, d), shapes (..., d), (..., d, d).

    A large 2-D ``X`` is summed in row blocks of ``_MOMENT_BLOCK_BYTES`` (in threads; the
    blocks and their order are fixed, so the result does not depend on the thread count).
    """
    n = X.shape[-2]
    if X.ndim != 2 or n * X.shape[-1] < 4 * PARALLEL_MIN_ELEMENTS:
        return X.mean(axis=-2), np.swapaxes(X, -1, -2) @ X / n
    parts = {}

    def block(lo, hi):
        Xb = X[lo:hi]
        G = Xb.T @ Xb  # Gram (syrk), then the column sums (gemv) while Xb is in cache
        parts[lo] = (np.ones(hi - lo) @ Xb, G)

    map_row_blocks(
        block,
        n,
        X.shape[1],
        X.itemsize,
        rows=max(256, _MOMENT_BLOCK_BYTES // (X.shape[1] * X.itemsize)),
    )
    order = sorted(parts)
    return (sum(parts[k][0] for k in order) / n, sum(parts[k][1] for k in order) / n)


def fit_sderf(X, Y):
    """SDERF parameters (FAVOR# Thm 4.3).

    ``N = mean_ij (x_i + y_j)(x_i + y_j)^T = M1 + mu4 mu5^T + mu5 mu4^T + M2 = Q3 L3 Q3^T``,
    ``a_l = A*(L3_l)``; the map uses ``B = (I - 4A)^{1/2} Q3^T``. Zero eigenvalues give
    ``a_l = 0``; no inverse is needed, so no regularisation.

    Returns
    -------
    Q3t : ndarray, shape (..., d, d)
        The rotation ``Q3^T`` (eigenvalues in non-ascending order).
    a : ndarray, shape (..., d)
    """
    mx, M1 = _moments(X)  # (..., d), (..., d, d)
    my, M2 = (mx, M1) if Y is X else _moments(Y)  # fit(X) without Y: one pass over the data
    cross = mx[..., :, None] * my[..., None, :]
    N = M1 + M2 + cross + np.swapaxes(cross, -1, -2)
    lam, Q3 = _sym_eigh(N)
    lam, Q3 = lam[..., ::-1], Q3[..., :, ::-1]
    Q3t = np.swapaxes(Q3, -1, -2)
    return Q3t * _row_signs(Q3t), a_star(np.maximum(lam, 0.0))


def _row_signs(B):
    """Signs (..., d, 1) making the largest-magnitude entry of every row of ``B`` positive.

    Eigen- and singular vectors are defined up to sign, and LAPACK's choice can flip under
    rounding-level changes of the data (e.g. a permutation of the samples). A flipped row
    is an equally valid fit, but with fixed random projections it changes the features;
    this canonical choice makes the fitted map a function of the data set alone.
    """
    idx = np.argmax(np.abs(B), axis=-1)[..., None]  # (..., d, 1)
    signs = np.sign(np.take_along_axis(B, idx, axis=-1))
    return np.where(signs == 0, 1.0, signs)


# ============================================================== feature maps
class TrigRF(FeatureMap):
    """Trigonometric random features (FAVOR# eq. 5-7, corrected).

    ``f1(w, x) = sqrt(2) exp(|x|^2/2) cos(w.x + theta)``, ``f2`` the same in ``y``
    (erratum a), ``w ~ N(0, I)``, ``theta ~ U[0, 2 pi]``. For the Gaussian kernel this is
    exactly random Fourier features, ``sqrt(2/M) cos(X W^T + theta)``. Not positive.

    Variance (note Sec. 3, derived): ``Var f1 f2 = e^{|x|^2+|y|^2}(1 + e^{-2|x-y|^2}/2)
    - e^{2 x.y}`` for the softmax kernel.
    """

    def _fit_parameters(self, X, Y, rng):
        self.offset_ = rng.uniform(0.0, 2.0 * np.pi, size=self.n_features)  # (M,)

    def _build(self):
        super()._build()
        W_T = np.ascontiguousarray(self.projection_.T)
        # [W^T; theta] for X augmented with a ones column (theta folded into the matmul),
        # and its half (exact) for the tan form of cos
        W_aug = np.vstack([W_T, self.offset_[None, :]])
        self._consts = {
            "W_T": W_T,
            "theta": self.offset_,
            "W_aug": W_aug,
            "W_aug_half": 0.5 * W_aug,
        }

    def _cos_numpy(self, X, scale=None):
        """NumPy ``sqrt(2/M) cos(X W^T + theta) * scale[:, None]``, in threaded row blocks.

        For float64 where NumPy's ``tan`` is SIMD-vectorised (its float64 ``cos`` is not),
        ``cos z = 2 / (1 + tan(z/2)^2) - 1``: the same ``z`` (halved exactly), absolute
        error ~1.5 ulp of 1, several times faster.
        """
        xp = np
        half = X.dtype == np.float64 and _fast_tan_f64()
        W_aug = self._param("W_aug_half" if half else "W_aug", xp, X)  # (d + 1, M)
        norm = math.sqrt(2.0 / self.n_features)
        if scale is not None:
            scale = norm * scale  # (n,)
        out = np.empty((X.shape[0], W_aug.shape[1]), dtype=X.dtype)

        def block(lo, hi):
            o = out[lo:hi]
            _matmul_augmented(X[lo:hi], (1.0,), W_aug, o)  # X W^T + theta (halved)
            if half:
                np.tan(o, out=o)
                np.multiply(o, o, out=o)
                o += 1.0
                np.divide(2.0, o, out=o)
                o -= 1.0
            else:
                np.cos(o, out=o)
            if scale is None:
                o *= norm
            else:
                o *= scale[lo:hi, None]

        map_row_blocks(block, out.shape[0], out.shape[1], out.itemsize)
        return out

    def _features(self, X, side):
        X, xp = self._check_X(X, "X" if side == "x" else "Y")
        if not is_numpy_namespace(xp):
            base, log_scale = self._scaled_features(X, xp, side)
            return base if 0.5 + self.alpha == 0.0 else base * xp.exp(log_scale)[:, None]
        coef = 0.5 + self.alpha  # log f carries coef * |x|^2
        scale = None
        if coef != 0.0:
            with np.errstate(over="ignore"):
                scale = np.exp(coef * np.sum(X * X, axis=1))  # (n,)
        return self._cos_numpy(X, scale)

    def _scaled_features(self, X, xp, side):
        if is_numpy_namespace(xp):
            base = self._cos_numpy(X)  # (n, M)
        else:
            W_aug = self._param("W_aug", xp, X)  # (d + 1, M): [W^T; theta]
            ones = xp.ones((X.shape[0], 1), dtype=X.dtype, device=device(X))
            base = xp.cos(xp.concat([X, ones], axis=1) @ W_aug) * math.sqrt(2.0 / self.n_features)
        coef = 0.5 + self.alpha  # log f carries coef * |x|^2
        if coef == 0.0:
            log_scale = xp.zeros(X.shape[0], dtype=X.dtype, device=device(X))
        else:
            log_scale = coef * xp.sum(X * X, axis=1)
        return base, log_scale

    def _log_second_moment(self, X, Y, xp):
        nx = xp.sum(X * X, axis=1)[:, None]  # (n, 1)
        ny = xp.sum(Y * Y, axis=1)[None, :]  # (1, m)
        dist2 = xp.clip(nx + ny - 2.0 * (X @ xp.matrix_transpose(Y)), min=0.0)
        out = (nx + ny) + xp.log1p(0.5 * xp.exp(-2.0 * dist2))
        return out + 2.0 * self.alpha * (nx + ny)


@functools.cache
def _fast_tan_f64() -> bool:
    """Whether NumPy's float64 ``tan`` runs a SIMD (SVML) kernel on this CPU."""
    try:
        from numpy.lib.introspect import opt_func_info  # NumPy >= 2.1

        info = opt_func_info(func_name="^tan$", signature="float64")
    except Exception:
        return False
    current = [str(v.get("current", "")) for v in info.get("tan", {}).values()]
    return any(c and not c.lower().startswith("baseline") for c in current)


class HyperbolicRF(FeatureMap):
    """Hyperbolic (antithetic positive) random features.

    ``f(w, x) = exp(-|x|^2/2) [exp(w.x), exp(-w.x)] / sqrt(2)``, so that
    ``E f1 f2 = E[cosh(w.(x+y))] e^{-(|x|^2+|y|^2)/2} = exp(x.y)``. Positive; output
    dimension ``2 M`` for ``M = n_features`` projections.

    Variance: ``Var = (e^{2|x+y|^2} + 1)/2 e^{-|x|^2-|y|^2} - e^{2x.y}`` per projection.
    """

    positive = True

    @property
    def output_dim(self) -> int:
        return 2 * int(self.n_features)

    def _build(self):
        super()._build()
        W_T = np.ascontiguousarray(self.projection_.T)
        self._consts = {"W_T": W_T, "W_aug": np.vstack([W_T, np.ones((1, W_T.shape[1]))])}

    def _features(self, X, side):
        X, xp = self._check_X(X, "X" if side == "x" else "Y")
        if not is_numpy_namespace(xp):
            base, log_scale = self._scaled_features(X, xp, side)
            return base * xp.exp(log_scale)[:, None]
        W_aug = self._param("W_aug", xp, X)  # (d + 1, M): [W^T; 1]
        M = W_aug.shape[1]
        row = (-0.5 + self.alpha) * np.sum(X * X, axis=1) - 0.5 * math.log(2.0 * M)  # (n,)
        row2 = 2.0 * row
        out = np.empty((X.shape[0], 2 * M), dtype=X.dtype)

        def block(lo, hi):
            o = out[lo:hi]
            _matmul_augmented(X[lo:hi], (row[lo:hi],), W_aug, o[:, :M])  # w.x + row
            np.subtract(row2[lo:hi, None], o[:, :M], out=o[:, M:])  # -w.x + row
            with np.errstate(over="ignore"):
                np.exp(o, out=o)

        map_row_blocks(block, out.shape[0], out.shape[1], out.itemsize)
        return out

    def _log_parts(self, X, xp):
        # (logits (n, 2M) = [w.x, -w.x], row term (n,)): log f = logits + row[:, None]
        W_T = self._param("W_T", xp, X)  # (d, M)
        proj = X @ W_T  # (n, M)
        both = xp.concat([proj, -proj], axis=1)  # (n, 2M)
        row = (-0.5 + self.alpha) * xp.sum(X * X, axis=1) - 0.5 * math.log(2.0 * self.n_features)
        return both, row

    def _scaled_features(self, X, xp, side):
        return _stabilised_exp(xp, *self._log_parts(X, xp))

    def log_transform(self, X):
        """Logarithm of the features, shape (n, 2 * n_features); never overflows."""
        X, xp = self._check_X(X, "X")
        both, row = self._log_parts(X, xp)
        return both + row[:, None]

    def log_transform_y(self, Y):
        """Logarithm of the y-side features (the map is symmetric), shape (m, 2 * n_features)."""
        return self.log_transform(Y)

    def _log_second_moment(self, X, Y, xp):
        nx = xp.sum(X * X, axis=1)[:, None]
        ny = xp.sum(Y * Y, axis=1)[None, :]
        z2 = nx + ny + 2.0 * (X @ xp.matrix_transpose(Y))  # |x+y|^2
        out = xp.logaddexp(2.0 * z2, xp.zeros_like(z2)) - math.log(2.0) - nx - ny
        return out + 2.0 * self.alpha * (nx + ny)


def _stabilised_exp(xp, logits, row_term):
    """``exp(logits + row_term[:, None])`` as ``(base, log_scale)``, base row max 1.

    logits : (n, D), row_term : (n,). Works in place for NumPy.
    """
    if logits.shape[0] == 0:
        return logits, row_term
    if is_numpy_namespace(xp):
        row_max = logits.max(axis=1)  # (n,)
        logits -= row_max[:, None]
        np.exp(logits, out=logits)
        return logits, row_max + row_term
    row_max = xp.max(logits, axis=1)
    if hasattr(row_max, "detach"):
        row_max = row_max.detach()
    return xp.exp(logits - row_max[:, None]), row_max + row_term


class _DiagonalDERF(FeatureMap):
    """Positive dense-exponential features with diagonal ``A`` on transformed inputs.

    Fitted attributes (NumPy): ``A_`` (d,) diagonal of ``A``; ``B_x_``, ``B_y_`` (d, d) input
    transforms (None for the identity). Subclasses fill them in ``_fit_parameters``.
    Tests and power users may edit them and call ``_build()``.
    """

    positive = True

    def _fit_parameters(self, X, Y, rng):
        self.A_ = np.zeros(X.shape[1])
        self.B_x_ = None
        self.B_y_ = None

    def _build(self):
        super()._build()
        a = np.asarray(self.A_, dtype=np.float64)
        if np.any(8.0 * a >= 1.0):
            raise ValueError("DERF needs every A_l < 1/8 (Thm 4.1: 8A < I).")
        W = self.projection_  # (M, d)
        M, d = W.shape
        s = np.sqrt(1.0 - 4.0 * a)  # (d,): W_eff = W diag(s)
        # per-feature constant: sum_l [log(1-4a_l)/4 + a_l w_l^2] - log(M)/2
        const = 0.25 * np.log1p(-4.0 * a).sum() + (W * W) @ a - 0.5 * math.log(self.n_features)
        consts = {"const": const}
        for side, B in (("x", self.B_x_), ("y", self.B_y_)):
            if side == "y" and B is self.B_x_:  # symmetric (SDERF, GERF, ...): share
                consts.update({k[:-1] + "y": v for k, v in consts.items() if k[-2:] == "_x"})
                continue
            # logits = x' . W_eff = x . (W_eff B) ; B (d, d) maps x -> x' = B x.
            # W_aug = [(W_eff B)^T; const; 1] for X augmented with [1, row term] (folded
            # into the matmul); (W_eff B)^T = (B^T diag(s)) W^T is written in place.
            W_aug = np.empty((d + 2, M))
            if B is None:
                np.multiply(W.T, s[:, None], out=W_aug[:d])
            else:
                np.matmul(np.asarray(B, dtype=np.float64).T * s[None, :], W.T, out=W_aug[:d])
            W_aug[d] = const
            W_aug[d + 1] = 1.0
            consts["W_T_" + side] = W_aug[:-2]  # (d, M), a C-contiguous view
            consts["W_aug_" + side] = W_aug
            if B is not None and not _is_orthogonal(B):
                consts["B_T_" + side] = np.ascontiguousarray(B.T)
        self._consts = consts

    def _transformed_sq_norm(self, X, xp, side):
        # |B x|^2 (n,), equal to |x|^2 when B is orthogonal or None
        key = "B_T_" + side
        if key in self._consts:
            Xb = X @ self._param(key, xp, X)
            return xp.sum(Xb * Xb, axis=1)
        return xp.sum(X * X, axis=1)

    def _row_term(self, X, xp, side):
        # -|x'|^2/2 + alpha |x|^2   (n,)
        row = -0.5 * self._transformed_sq_norm(X, xp, side)
        if self.alpha != 0.0:
            row = row + self.alpha * xp.sum(X * X, axis=1)
        return row

    def _logits(self, X, xp, side):
        W_T = self._param("W_T_" + side, xp, X)  # (d, M)
        const = self._param("const", xp, X)  # (M,)
        logits = X @ W_T  # (n, M)
        if is_numpy_namespace(xp):
            logits += const
            return logits
        return logits + const

    def _scaled_features(self, X, xp, side):
        return _stabilised_exp(xp, self._logits(X, xp, side), self._row_term(X, xp, side))

    def _scaled_pair(self, X, Y):
        # Joint stabilisation for approx_kernel. A per-feature constant c_m subtracted from
        # the x-side log features and added to the y side cancels in every product
        # f1(w_m, x) f2(w_m, y). With c_m = (max_i lx_im - max_j ly_jm) / 2 both sides peak
        # at the same height for every feature, so the row-normalised bases do not both
        # underflow where their product carries the estimate (e.g. |x| >> |y| with fitted
        # A << 0, where exp(lx - max lx) * exp(ly - max ly) ~ e^-800 even in float64).
        X, xp = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
        rx, ry = self._row_term(X, xp, "x"), self._row_term(Y, xp, "y")  # (n,), (m,)
        lx, ly = self._logits(X, xp, "x"), self._logits(Y, xp, "y")  # (n, M), (m, M)
        if lx.shape[0] == 0 or ly.shape[0] == 0:
            return (*_stabilised_exp(xp, lx, rx), *_stabilised_exp(xp, ly, ry))
        if is_numpy_namespace(xp):
            lx += rx[:, None]
            ly += ry[:, None]
            c = 0.5 * (lx.max(axis=0) - ly.max(axis=0))  # (M,)
            lx -= c
            ly += c
        else:
            lx, ly = lx + rx[:, None], ly + ry[:, None]
            c = 0.5 * (xp.max(lx, axis=0) - xp.max(ly, axis=0))
            c = c.detach() if hasattr(c, "detach") else c
            lx, ly = lx - c, ly + c
        return (
            *_stabilised_exp(xp, lx, xp.zeros_like(rx)),
            *_stabilised_exp(xp, ly, xp.zeros_like(ry)),
        )

    def _features(self, X, side):
        X, xp = self._check_X(X, "X" if side == "x" else "Y")
        if not is_numpy_namespace(xp):
            # [X, 1, row] @ [W^T; const; 1]: one (n, M) temporary fewer per folded term
            W_aug = self._param("W_aug_" + side, xp, X)  # (d + 2, M)
            ones = xp.ones((X.shape[0], 1), dtype=X.dtype, device=device(X))
            row = self._row_term(X, xp, side)[:, None]  # (n, 1)
            return xp.exp(xp.concat([X, ones, row], axis=1) @ W_aug)
        # NumPy: exp(X W^T + const + row) per row block, in cache and in threads
        W_aug = self._param("W_aug_" + side, xp, X)  # (d + 2, M): [W^T; const; 1]
        self._row_term(X[:1], xp, side)  # puts the row-term constants in the cache
        out = np.empty((X.shape[0], W_aug.shape[1]), dtype=X.dtype)

        def block(lo, hi):
            o = out[lo:hi]
            Xb = X[lo:hi]
            row = self._row_term(Xb, xp, side)  # (hi - lo,), per block: X B^T is threaded too
            _matmul_augmented(Xb, (1.0, row), W_aug, o)  # X W^T + const + row
            with np.errstate(over="ignore"):
                np.exp(o, out=o)

        map_row_blocks(block, out.shape[0], out.shape[1], out.itemsize)
        return out

    def log_transform(self, X):
        """Logarithm of the x-side features, shape (n, output_dim); never overflows."""
        X, xp = self._check_X(X, "X")
        return self._logits(X, xp, "x") + self._row_term(X, xp, "x")[:, None]

    def log_transform_y(self, Y):
        """Logarithm of the y-side features, shape (m, output_dim)."""
        Y, xp = self._check_X(Y, "Y")
        return self._logits(Y, xp, "y") + self._row_term(Y, xp, "y")[:, None]

    # ----------------------------------------------------------- variance / objective
    def _transformed(self, X, xp, side):
        B = self.B_x_ if side == "x" else self.B_y_
        if B is None:
            return X
        return X @ to_backend(np.ascontiguousarray(B.T), xp, X)

    def _log_second_moment(self, X, Y, xp):
        # FAVOR# eq. (15) with diagonal A, transformed inputs (note Sec. 3):
        # log m2 = sum_l [log(1-4a_l) - log(1-8a_l)/2] + 2 sum_l w_l (x'_l + y'_l)^2
        #          - |x'|^2 - |y'|^2 + 2 alpha (|x|^2 + |y|^2),  w_l = (1-4a_l)/(1-8a_l)
        a = np.asarray(self.A_, dtype=np.float64)
        c0 = float(np.sum(np.log1p(-4.0 * a) - 0.5 * np.log1p(-8.0 * a)))
        w = to_backend((1.0 - 4.0 * a) / (1.0 - 8.0 * a), xp, X)  # (d,)
        Xp, Yp = self._transformed(X, xp, "x"), self._transformed(Y, xp, "y")
        qx = xp.sum(w * Xp * Xp, axis=1)[:, None]  # (n, 1)
        qy = xp.sum(w * Yp * Yp, axis=1)[None, :]  # (1, m)
        cross = (Xp * w) @ xp.matrix_transpose(Yp)  # (n, m)
        out = c0 + 2.0 * (qx + qy + 2.0 * cross)
        out = out - xp.sum(Xp * Xp, axis=1)[:, None] - xp.sum(Yp * Yp, axis=1)[None, :]
        if self.alpha != 0.0:
            out = out + 2.0 * self.alpha * (
                xp.sum(X * X, axis=1)[:, None] + xp.sum(Y * Y, axis=1)[None, :]
            )
        return out

    def log_objective(self, X, Y=None):
        """FAVOR# eq. (14): mean over pairs of the log second moment, in O((n+m) d^2).

        For the fitted ADERF / SDERF this equals the optimum (16) / (17).
        """
        Y = X if Y is None else Y
        X, _ = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
        X, Y = to_numpy(X, np.float64), to_numpy(Y, np.float64)
        a = np.asarray(self.A_, dtype=np.float64)
        c0 = float(np.sum(np.log1p(-4.0 * a) - 0.5 * np.log1p(-8.0 * a)))
        w = (1.0 - 4.0 * a) / (1.0 - 8.0 * a)
        Xp = X if self.B_x_ is None else X @ self.B_x_.T
        Yp = Y if self.B_y_ is None else Y @ self.B_y_.T
        mean_pair = (
            (w * Xp * Xp).sum(1).mean()
            + (w * Yp * Yp).sum(1).mean()
            + 2.0 * (w * Xp.mean(0) * Yp.mean(0)).sum()
        )
        out = c0 + 2.0 * mean_pair - (Xp * Xp).sum(1).mean() - (Yp * Yp).sum(1).mean()
        out += 2.0 * self.alpha * ((X * X).sum(1).mean() + (Y * Y).sum(1).mean())
        return float(out)


def _is_orthogonal(B):
    return np.allclose(B @ B.T, np.eye(B.shape[0]), atol=1e-12)


class PositiveRF(_DiagonalDERF):
    """Positive random features, FAVOR+ (FAVOR# eq. 8-9).

    ``f1 = f2 = exp(w.x - |x|^2/2)``, ``w ~ N(0, I)``; GERF with ``A = 0``.
    Variance: ``Var = exp(2|x+y|^2 - |x|^2 - |y|^2) - e^{2x.y}`` per feature.
    """


class GERF(_DiagonalDERF):
    """Generalized exponential random features, FAVOR++ (FAVOR# eq. 10-11, corrected).

    ``f1 = f2 = (1-4A)^{d/4} exp(A|w|^2 + sqrt(1-4A) w.x - |x|^2/2)`` (erratum b), with
    ``A = A*(phi)`` fitted in closed form, ``phi = sum_ij |x_i+y_j|^2 / (d n m)``
    (Sec. 3.1, Lemma A.1). Pass ``A`` to fix the parameter instead of fitting it.

    Variance (eq. 12-13): ``log m2 = d log((1-4A)/sqrt(1-8A)) + 2(1-4A)/(1-8A)|x+y|^2
    - |x|^2 - |y|^2``.
    """

    def __init__(
        self,
        n_features=256,
        kernel="softmax",
        lengthscale=1.0,
        orthogonal=False,
        random_state=None,
        A=None,
    ):
        super().__init__(n_features, kernel, lengthscale, orthogonal, random_state)
        self.A = A

    def _fit_parameters(self, X, Y, rng):
        super()._fit_parameters(X, Y, rng)
        if self.A is None:
            A = fit_gerf(X, Y)
        else:
            if isinstance(self.A, bool) or not isinstance(self.A, numbers.Real):
                raise TypeError(f"A must be a float below 1/8, got {self.A!r}.")
            A = float(self.A)
            if not (A < 0.125 and math.isfinite(A)):
                raise ValueError(f"A must be below 1/8 (1 - 8A > 0), got {A}.")
        self.A_ = np.full(X.shape[1], float(A))


class SADERF(_DiagonalDERF):
    """Simplified asymmetric dense-exponential random features (FAVOR# Sec. 4.3, eq. 20).

    ``f1(w, x) = f_GE(w, psi x)``, ``f2(w, y) = f_GE(w, y / psi)`` with the diagonal
    ``psi_l = (mean_j y_jl^2 / mean_i x_il^2)^{1/4}``, GERF's ``A`` fitted on the
    transformed sets. No matrix decomposition; fit O((n + m) d). Asymmetric.

    Parameters
    ----------
    eps : float
        Relative ridge on the per-coordinate second moments (library choice, note Sec. 5),
        so that zero coordinates give finite ``psi``.
    """

    symmetric = False

    def __init__(
        self,
        n_features=256,
        kernel="softmax",
        lengthscale=1.0,
        orthogonal=False,
        random_state=None,
        eps=1e-6,
    ):
        super().__init__(n_features, kernel, lengthscale, orthogonal, random_state)
        self.eps = eps

    def _fit_parameters(self, X, Y, rng):
        _check_eps(self.eps)
        psi, A = fit_saderf(X, Y, self.eps)
        self.psi_ = psi  # (d,)
        self.A_ = np.full(X.shape[1], float(A))
        self.B_x_ = np.diag(psi)
        self.B_y_ = np.diag(1.0 / psi)


class ADERF(_DiagonalDERF):
    """Asymmetric dense-exponential random features (FAVOR# Thm 4.2).

    ``f_k(w, x) = (1-4A)^{d/4} exp(A|w|^2 + sqrt(1-4A) w.B~_k x - |B~_k x|^2/2)`` with
    ``B~1^T B~2 = I``; ``B~1``, ``B~2``, ``A`` fitted in closed form by :func:`fit_aderf`.
    Asymmetric; fit O((n + m) d^2 + d^3).

    Parameters
    ----------
    eps : float
        Relative ridge on the second-moment matrices (library choice, note Sec. 5):
        ``M_k + eps tr(M_k)/d I``. Keeps fewer-points-than-dimensions and zero-column
        data valid and unbiased.
    """

    symmetric = False

    def __init__(
        self,
        n_features=256,
        kernel="softmax",
        lengthscale=1.0,
        orthogonal=False,
        random_state=None,
        eps=1e-6,
    ):
        super().__init__(n_features, kernel, lengthscale, orthogonal, random_state)
        self.eps = eps

    def _fit_parameters(self, X, Y, rng):
        _check_eps(self.eps)
        B1, B2, A = fit_aderf(X, Y, self.eps)
        self.A_ = np.full(X.shape[1], float(A))
        self.B_x_, self.B_y_ = B1, B2


class SDERF(_DiagonalDERF):
    """Symmetric dense-exponential random features, FAVOR# (Thm 4.3).

    ``f(w, x) = det(I-4A)^{1/4} exp(w^T A w + w^T B x - |x|^2/2)``, ``B = (I-4A)^{1/2} Q3^T``,
    ``A = diag(A*(L3))`` from the eigendecomposition of
    ``N = mean_ij (x_i + y_j)(x_i + y_j)^T``. Symmetric (``f1 = f2``); features are computed
    as per-coordinate GERF on rotated inputs ``Q3^T x``.

    Variance (eq. 40 corrected): ``m2 = prod_l (1-4a_l)/sqrt(1-8a_l)
    exp(-|x|^2 - |y|^2 + 2 sum_l (1-4a_l)/(1-8a_l) ((Q3^T(x+y))_l)^2)``.
    """

    def _fit_parameters(self, X, Y, rng):
        Q3t, a = fit_sderf(X, Y)
        self.A_ = a  # (d,)
        self.B_x_ = Q3t
        self.B_y_ = Q3t


def _check_eps(eps):
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (eps >= 0):
        raise ValueError(f"eps must be a non-negative float, got {eps!r}.")
