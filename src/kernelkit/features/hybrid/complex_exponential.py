"""Complex exponential random features and the optimal diagonal ``A``.

Implements Lemma 2.4 (eq. 14-18), the loss ``l(A)`` of eq. 21 and the optimal diagonal
``A`` of eq. 85-88 of K. Choromanski et al., "Hybrid Random Features" (ICLR 2022).
"""

from __future__ import annotations

import math
import numbers
from typing import ClassVar

import numpy as np

from ..._backend import to_numpy, validate_positive_float
from ..._backend.params import POSITIVE
from .._base import _detach
from .._projection import ProjectionFeatureMap
from ._common import LogFormVariance, _sq_norms, _sum_prod


def optimal_diagonal_A(x_center, y_center, *, complex: bool = False, eps: float = 1e-3):
    """Diagonal ``A`` minimising ``l(A) = |A r_x + A^{-T} r_y|^2`` for a pair of centres.

    The complex exponential estimator with this ``A`` is exact at ``(x, y) = (r_x, r_y)``
    when ``l(A) = 0`` (eq. 17, 21). Per coordinate ``k`` (``r_x`` a query centre, ``r_y`` a
    key centre):

    * ``complex=False`` (eq. 88, used in the paper's experiments): ``a_k = sqrt|r_y,k / r_x,k|``
      (exact where the signs differ; residual ``l = 4 sum_{k: r_x,k r_y,k > 0} r_x,k r_y,k``);
    * ``complex=True`` (eq. 85-87): ``a_k = i sqrt(r_y,k / r_x,k)`` where
      ``r_x,k r_y,k > 0`` and ``a_k = sqrt(-r_y,k / r_x,k)`` where ``< 0``, so ``l = 0``.

    Degenerate coordinates: both zero gives ``a_k = 1``; ``r_x,k = 0 != r_y,k`` a large and
    ``r_y,k = 0 != r_x,k`` a small real ``a_k``. Every ``|a_k|`` is clipped to
    ``[eps, 1/eps]`` so that ``A`` stays invertible and well conditioned (condition number
    at most ``1/eps^2``).

    Parameters
    ----------
    x_center, y_center : array_like, shape (d,) or (..., d)
        Broadcastable centres (e.g. (n_q, 1, d) and (1, n_k, d) for all pairs).
    complex : bool
    eps : float in (0, 1)

    Returns
    -------
    ndarray, shape (..., d)
        Diagonal of ``A``; float64, or complex128 for ``complex=True``.
    """
    rx, ry = _centre(x_center, "x_center"), _centre(y_center, "y_center")
    if rx.ndim == 0 or ry.ndim == 0 or rx.shape[-1] != ry.shape[-1]:
        raise ValueError(
            "x_center and y_center must be vectors of the same length d, got shapes "
            f"{rx.shape} and {ry.shape}."
        )
    if not (np.all(np.isfinite(rx)) and np.all(np.isfinite(ry))):
        raise ValueError("x_center and y_center must be finite.")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < 1:
        raise ValueError(f"eps must be a float in (0, 1), got {eps!r}.")
    rx, ry = np.broadcast_arrays(rx, ry)
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.sqrt(np.abs(ry) / np.abs(rx))  # inf where r_x = 0, nan where both 0
    mag = np.where((rx == 0) & (ry == 0), 1.0, mag)
    mag = np.clip(np.nan_to_num(mag, nan=1.0, posinf=1.0 / eps), eps, 1.0 / eps)
    if not complex:
        return mag
    return np.where(rx * ry > 0, 1j * mag, mag + 0j)


def diagonal_A_loss(A_diag, x_center, y_center):
    """``l(A) = sum_k |a_k r_x,k + r_y,k / a_k|^2`` (eq. 21) for a diagonal ``A``, shape (...)."""
    a = np.asarray(A_diag)
    rx, ry = _centre(x_center, "x_center"), _centre(y_center, "y_center")
    return np.sum(np.abs(a * rx + ry / a) ** 2, axis=-1)


def _validate_matrix_A(A, d, max_condition):
    """``A`` as a (d, d) float64 / complex128 array, checked finite and well conditioned."""
    if A is None:
        return np.eye(d)
    try:
        A = np.asarray(A)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"A could not be converted to an array: {exc}") from exc
    if A.dtype.kind not in "biufc":
        raise TypeError(f"A must be numeric, got dtype {A.dtype}.")
    A = A.astype(np.complex128 if A.dtype.kind == "c" else np.float64)
    if A.dtype.kind == "c" and not np.any(A.imag):
        A = A.real.copy()
    if A.shape == (d,):
        A = np.diag(A)
    if A.shape != (d, d):
        raise ValueError(
            f"A must have shape ({d},) (a diagonal) or ({d}, {d}) for d = {d} input "
            f"features, got {A.shape}."
        )
    if not np.all(np.isfinite(A)):
        raise ValueError("A contains NaN or infinity.")
    cond = np.linalg.cond(A) if np.any(A) else np.inf
    if not np.isfinite(cond) or cond > max_condition:
        raise ValueError(
            f"A is singular or ill-conditioned (condition number {cond:.3g} > "
            f"max_condition = {max_condition:.3g}); the estimator needs (A^T)^-1."
        )
    return A


class ComplexExponentialRF(LogFormVariance, ProjectionFeatureMap):
    """Complex exponential random features for a given invertible ``A`` (Lemma 2.4, eq. 14-18).

    With ``B = (A^T)^{-1}`` (plain transpose, ``A`` may be complex) and the bilinear square
    ``u^2 = sum_k u_k^2``,

        Psi_M(u) = m^{-1/2} exp(-(M u)^2 / 2) exp(W M u),    SM_hat = Psi_A(x)^T Psi_B(y),

    is unbiased for ``SM(x, y) = exp(x^T y)`` since ``E exp(w^T z) = exp(z^2 / 2)`` for
    complex ``z`` and ``(Ax)^T (By) = x^T y``. It has zero variance iff ``A x + B y = 0``,
    i.e. at ``x = -A^{-1} A^{-T} y`` (eq. 17-18). ``A = I`` gives the one-sided positive
    features ``SM^+`` (Sec. 2.4 says ``SM^{++}``, the antithetic estimator with ``2m``
    features: Erratum 7); ``A = i I`` gives trig features (sin/cos pairs).

    ``A`` acts on lengthscale-scaled inputs ``x / lengthscale``.

    Features (real, asymmetric; ``m = n_features``):

    * real ``A``: ``Psi_A(x)`` and ``Psi_B(y)``, positive, ``output_dim = m``;
    * complex ``A``: ``[Re Psi_A(x); Im Psi_A(x)]`` and ``[Re Psi_B(y); -Im Psi_B(y)]``,
      ``output_dim = 2m``, whose dot product is ``Re SM_hat`` (still unbiased).

    Parameters
    ----------
    n_features : int
        ``m``, number of projections ``w_i`` (rows of ``W``).
    kernel : {"softmax", "gaussian"}
    lengthscale : float
    sampler : {"iid", "orthogonal", "sorf", "hadamard", "halton"}
        Sampler of ``W`` (:func:`~kernelkit.features.draw_projection`).
    random_state : None, int or numpy.random.Generator
    A : array_like, shape (d,) or (d, d), real or complex, optional
        The matrix (a vector is a diagonal); default identity. Must be invertible with
        condition number at most ``max_condition``. See :func:`optimal_diagonal_A`.
    max_condition : float
        Largest accepted condition number of ``A``.

    Attributes
    ----------
    projection_ : ndarray (m, d)
        ``W``.
    A_ : ndarray (d, d), float64 or complex128
        The validated ``A`` (a diagonal given as a vector made full).
    B_ : ndarray (d, d), float64 or complex128
        ``(A^T)^{-1}``.

    Notes
    -----
    :meth:`variance` (derived from Lemma 2.4): with ``a = Ax``, ``b = By``, one projection
    gives ``g = exp(-(a^2 + b^2)/2 + w^T (a + b))`` and
    ``E (Re g)^2 = (Re E g^2 + E |g|^2) / 2`` with ``E g^2 = exp(a^2 + b^2 + 4 a^T b)`` and
    ``E |g|^2 = exp(|a|^2 + |b|^2 + 4 Re a . Re b)``; ``MSE = (E (Re g)^2 - SM^2) / m``. For real
    ``A`` this is ``SM^2 (exp(|Ax + By|^2) - 1) / m``.
    """

    _unit_scaled_rows = True  # detached stabiliser (FeatureMap.transform_scaled)

    #: NumPy rows in blocks: the whole (n, D) parts took 2x to 3x the output
    _row_blocked_features = True

    symmetric = False
    _parameter_constraints: ClassVar[dict] = {
        **ProjectionFeatureMap._parameter_constraints,
        "A": [None, "array-like"],  # shape, finiteness and condition checked at fit
        "max_condition": POSITIVE,
    }

    def __init__(
        self,
        n_features: int = 256,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        sampler: str = "iid",
        random_state=None,
        A=None,
        max_condition: float = 1e8,
    ):
        super().__init__(n_features, kernel, lengthscale, sampler, random_state)
        self.A = A
        self.max_condition = max_condition

    @property
    def complex_A(self) -> bool:
        """Whether ``A`` has a non-zero imaginary part (then ``output_dim = 2 m``)."""
        A = getattr(self, "A_", None)
        if A is None:
            A = np.asarray(self.A) if self.A is not None else np.zeros(1)
        return bool(np.iscomplexobj(A) and np.any(np.imag(A)))

    @property
    def positive(self) -> bool:  # type: ignore[override]
        return not self.complex_A

    def _output_dim_for(self, n_features):
        return int(n_features) * (2 if self.complex_A else 1)

    def _check_params(self):
        super()._check_params()
        validate_positive_float(self.max_condition, "max_condition")

    def _fit_parameters(self, X, Y, rng):
        d = X.shape[1]
        self.A_ = _validate_matrix_A(self.A, d, float(self.max_condition))  # (d, d)
        self.B_ = np.linalg.inv(self.A_).T  # (d, d), B = (A^T)^{-1}

    def _build(self):
        super()._build()
        W = self.projection_  # (m, d)
        consts = {}
        for side, M in (("x", self.A_), ("y", self.B_)):
            Mr, Mi = np.real(M), np.imag(M)
            # logits: x -> W M x = X @ (W M)^T, real and imaginary parts
            consts["Mr_T_" + side] = np.ascontiguousarray(Mr.T)  # (d, d)
            consts["WMr_T_" + side] = np.ascontiguousarray((W @ Mr).T)  # (d, m)
            if self.complex_A:
                consts["Mi_T_" + side] = np.ascontiguousarray(Mi.T)
                consts["WMi_T_" + side] = np.ascontiguousarray((W @ Mi).T)
        self._consts = consts

    def _transformed(self, X, xp, side):
        """``(Re M x, Im M x)`` (n, d) each; ``Im`` is None for real ``A``."""
        ar = X @ self._param("Mr_T_" + side, xp, X)
        ai = X @ self._param("Mi_T_" + side, xp, X) if self.complex_A else None
        return ar, ai

    def _scaled_features(self, X, xp, side):
        ar, ai = self._transformed(X, xp, side)
        re = X @ self._param("WMr_T_" + side, xp, X)  # (n, m) Re(w^T M x)
        half_sq = 0.5 * _sq_norms(xp, ar)  # Re (Mx)^2 / 2 = (|ar|^2 - |ai|^2) / 2
        if ai is not None:
            half_sq = half_sq - 0.5 * _sq_norms(xp, ai)
        row = -half_sq - 0.5 * math.log(self.n_features) + self.alpha * _sq_norms(xp, X)
        if re.shape[0] == 0:
            base = re if ai is None else xp.concat([re, re], axis=1)
            return base, row
        row_max = _detach(xp.max(re, axis=1))  # (n,)
        mod = xp.exp(re - row_max[:, None])  # (n, m) |Psi| / exp(scale)
        if ai is None:
            return mod, row_max + row
        im = X @ self._param("WMi_T_" + side, xp, X) - _sum_prod(xp, ar, ai)[:, None]
        sgn = 1.0 if side == "x" else -1.0  # y side: [Re; -Im]
        return xp.concat([mod * xp.cos(im), sgn * mod * xp.sin(im)], axis=1), row_max + row

    def _variance_log_form(self, Xs, Ys, xp):
        # the MSE of the real part (class notes) as (inner, log_scale): exact for i.i.d.
        # projections, zero where A x + B y = 0
        ar, ai = self._transformed(Xs, xp, "x")
        br, bi = self._transformed(Ys, xp, "y")
        xy = Xs @ xp.matrix_transpose(Ys)  # (n, m)
        rr = ar @ xp.matrix_transpose(br)  # Re a . Re b
        log_k2 = 2.0 * xy - math.log(self.n_features)  # log(K^2 / m)
        if self.alpha != 0.0:
            log_k2 = log_k2 + 2.0 * self.alpha * (
                _sq_norms(xp, Xs)[:, None] + _sq_norms(xp, Ys)[None, :]
            )
        if ai is None:
            # |a + b|^2 = |a|^2 + |b|^2 + 2 a.b;  MSE = K^2 expm1(c2) / m, in log space
            c2 = xp.clip(
                _sq_norms(xp, ar)[:, None] + _sq_norms(xp, br)[None, :] + 2.0 * rr, min=0.0
            )
            return -xp.expm1(-c2), c2 + log_k2
        na_r, na_i = _sq_norms(xp, ar)[:, None], _sq_norms(xp, ai)[:, None]
        nb_r, nb_i = _sq_norms(xp, br)[None, :], _sq_norms(xp, bi)[None, :]
        ii = ai @ xp.matrix_transpose(bi)
        # log|E g^2 / SM^2| = Re(a^2 + b^2 + 4ab) - 2xy, and the phase q of E g^2
        p = na_r - na_i + nb_r - nb_i + 4.0 * (rr - ii) - 2.0 * xy
        q = 2.0 * (_sum_prod(xp, ar, ai)[:, None] + _sum_prod(xp, br, bi)[None, :]) + 4.0 * (
            ar @ xp.matrix_transpose(bi) + ai @ xp.matrix_transpose(br)
        )
        r = xp.clip(na_r + na_i + nb_r + nb_i + 4.0 * rr - 2.0 * xy, min=0.0)  # log E|g|^2/SM^2
        s = xp.sin(0.5 * q)
        # rel = m MSE / SM^2 = (e^p cos q + e^r) / 2 - 1 (p <= r, r >= 0); we need
        # rel e^{-r}: for small r from the cancellation-free expm1 form, for r >= 1 from
        # the bounded form (e^{p-r} cos q + 1)/2 - e^{-r}, so that nothing overflows
        pc, rc = xp.clip(p, max=1.0), xp.clip(r, max=1.0)
        small = (0.5 * (xp.expm1(pc) * xp.cos(q) - 2.0 * s * s) + 0.5 * xp.expm1(rc)) * xp.exp(-rc)
        large = 0.5 * xp.exp(p - r) * xp.cos(q) + 0.5 - xp.exp(-r)
        inner = xp.where(r < 1.0, small, large)
        return inner, r + log_k2


def _centre(c, name: str) -> np.ndarray:
    """``c`` as float64, or a ``TypeError`` naming it (strings, complex, ragged lists)."""
    try:
        arr = to_numpy(c)
        if arr.dtype.kind in "OUS":
            arr = arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must hold real numbers: {exc}") from None
    if arr.dtype.kind not in "fiub":  # complex would lose its imaginary part
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}.")
    return arr.astype(np.float64, copy=False)
