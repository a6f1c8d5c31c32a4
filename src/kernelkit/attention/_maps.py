"""Torch feature maps for linear attention: parameters per (batch, head) and log features.

Every positive map of the softmax family is written as one affine map in log space
(FAVOR# Thm 4.1 with diagonal ``A``, see :mod:`kernelkit.features.softmax`):

    x' = T(x)                         (identity, diagonal ``psi`` or a d x d matrix)
    log f(w_m, x) = x' . Wp[:, m] + c_m - |x'|^2 / 2

with ``Wp = (B-part) diag(sqrt(1 - 4 a)) W^T`` and ``c_m = sum_l a_l w_ml^2`` (the
constant ``sum_l log(1-4a_l)/4 - log(M)/2`` is the same for every feature and cancels in
the attention normalisation, so it is dropped). Inputs are already scaled,
``x = q d^{-1/4}``, so ``E f(w, x) f(w, y) = exp(q.k / sqrt(d))``.

==================  =============================  =====================  ==============
map                 T (query side / key side)      Wp                     c_m
==================  =============================  =====================  ==============
positive (FAVOR+)   identity                       W^T                    0
hyperbolic          identity                       [W^T, -W^T]            0
gerf (FAVOR++)      identity                       s W^T, s=sqrt(1-4A)    A |w_m|^2
saderf              psi / 1/psi (diagonal)         s W^T                  A |w_m|^2
aderf               B1^T / B2^T (matrices)         s W^T                  A |w_m|^2
sderf               identity (Q3 folded into Wp)   Q3 diag(s_l) W^T       sum_l a_l w_ml^2
==================  =============================  =====================  ==============

(SDERF's ``Q3`` is orthogonal, so ``|Q3^T x| = |x|`` and the rotation folds into ``Wp``;
query and key sides share one map.) Parameters are fitted from first and second moments
of the queries and keys (:class:`Moments`), in float64 for the ``d x d`` decompositions,
batched over all leading dimensions; they are constants for autograd (detached), as in
the FAVOR# paper (note Sec. 5: "treat as constants").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "EXP_MAPS",
    "FEATURE_MAPS",
    "FITTED_MAPS",
    "LogFeatureMap",
    "Moments",
    "a_star_torch",
    "build_log_map",
    "moments",
]

#: maps written as exponentials of an affine function of x (positive features)
EXP_MAPS = ("positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf")
#: maps whose parameters are fitted from the data (FAVOR++ / FAVOR#)
FITTED_MAPS = ("gerf", "saderf", "aderf", "sderf")
#: every supported name
FEATURE_MAPS = ("relu", "elu", "trig", *EXP_MAPS, "hybrid_angular")

# ridge of the ADERF / SADERF second moments (library choice, note Sec. 5), as in
# kernelkit.features.softmax
_EPS = 1e-6


def a_star_torch(phi: torch.Tensor) -> torch.Tensor:
    """Lemma A.1 minimiser ``A*(phi)`` in the cancellation-free form (float64 tensor)."""
    phi = phi.clamp(min=0.0)
    root = torch.sqrt(4.0 * phi * phi + 12.0 * phi + 1.0)
    out = -phi / (1.0 + (1.0 + 12.0 * phi) / (2.0 * phi + root))
    return torch.where(torch.isfinite(root), out, -phi / 4.0)


@dataclass
class Moments:
    """First and second moments of the scaled queries (x) and keys (y), float64.

    Shapes: ``mean_*`` (..., d); ``second_*`` (..., d, d) (full matrix) or (..., d)
    (diagonal only, enough for GERF / SADERF). Means are over valid positions.
    """

    mean_x: torch.Tensor
    second_x: torch.Tensor
    mean_y: torch.Tensor
    second_y: torch.Tensor

    @property
    def full(self) -> bool:
        return self.second_x.dim() == self.mean_x.dim() + 1


def _weighted_moments(x, w, full):
    # x (..., L, d) float32/64; w (..., L) weights summing to 1 or None (uniform)
    if w is None:
        mean = x.mean(dim=-2)
        if full:
            second = x.transpose(-1, -2) @ x / x.shape[-2]  # (..., d, d), one bmm
        else:
            second = (x * x).mean(dim=-2)
    else:
        xw = x * w[..., None]
        mean = xw.sum(dim=-2)
        second = xw.transpose(-1, -2) @ x if full else (xw * x).sum(dim=-2)
    return mean.double(), second.double()


def moments(x, y, key_weights=None, full=True) -> Moments:
    """Moments of ``x`` (..., L, d) and ``y`` (..., S, d), detached, in float64.

    ``key_weights`` (..., S): non-negative weights of the keys summing to one per row
    (padding excluded); None means uniform. Cost O((L + S) d^2) (``full``) or O((L + S) d).
    """
    with torch.no_grad():
        mx, sx = _weighted_moments(x.detach(), None, full)
        my, sy = _weighted_moments(y.detach(), key_weights, full)
    return Moments(mx, sx, my, sy)


def _fit_gerf(mom: Moments, d: int):
    # phi = (mean|x|^2 + mean|y|^2 + 2 mean(x).mean(y)) / d   (FAVOR# Sec. 3.1)
    sx = torch.diagonal(mom.second_x, dim1=-2, dim2=-1) if mom.full else mom.second_x
    sy = torch.diagonal(mom.second_y, dim1=-2, dim2=-1) if mom.full else mom.second_y
    phi = (sx.sum(-1) + sy.sum(-1) + 2.0 * (mom.mean_x * mom.mean_y).sum(-1)) / d
    return a_star_torch(phi)  # (...)


def _fit_saderf(mom: Moments, d: int):
    # FAVOR# eq. 20: psi_l = (mean y_l^2 / mean x_l^2)^{1/4}, ridge as in features.softmax
    sx = torch.diagonal(mom.second_x, dim1=-2, dim2=-1) if mom.full else mom.second_x
    sy = torch.diagonal(mom.second_y, dim1=-2, dim2=-1) if mom.full else mom.second_y
    ridge = _EPS * 0.5 * (sx.mean(-1, keepdim=True) + sy.mean(-1, keepdim=True)) + 1e-154
    sx, sy = sx + ridge, sy + ridge
    psi = torch.exp(0.25 * (torch.log(sy) - torch.log(sx)))  # (..., d)
    # GERF phi on (psi x, y / psi); the cross term is psi-free
    phi = (
        (psi * psi * (sx - ridge)).sum(-1)
        + ((sy - ridge) / (psi * psi)).sum(-1)
        + 2.0 * (mom.mean_x * mom.mean_y).sum(-1)
    ) / d
    return psi, a_star_torch(phi)


def _fit_aderf(mom: Moments, d: int):
    # FAVOR# Thm 4.2 (see features.softmax.fit_aderf), batched in float64
    eye = torch.eye(d, dtype=torch.float64, device=mom.mean_x.device)
    M1, M2 = mom.second_x, mom.second_y
    tr = (
        0.5
        * (
            torch.diagonal(M1, dim1=-2, dim2=-1).sum(-1)
            + torch.diagonal(M2, dim1=-2, dim2=-1).sum(-1)
        )
        / d
    )
    ridge = (_EPS * tr + 1e-154)[..., None, None] * eye
    L1, Q1 = torch.linalg.eigh(0.5 * (M1 + M1.transpose(-1, -2)) + ridge)
    L2, Q2 = torch.linalg.eigh(0.5 * (M2 + M2.transpose(-1, -2)) + ridge)
    tiny = torch.finfo(torch.float64).tiny
    r1, r2 = L1.clamp(min=tiny).sqrt(), L2.clamp(min=tiny).sqrt()  # (..., d)
    core = r1[..., :, None] * (Q1.transpose(-1, -2) @ Q2) * r2[..., None, :]
    U, S, _ = torch.linalg.svd(core)
    S = torch.maximum(S, 1e-300 * S.amax(-1, keepdim=True) + tiny)
    Q1t, Ut = Q1.transpose(-1, -2), U.transpose(-1, -2)
    B1 = S.sqrt()[..., :, None] * (Ut @ (Q1t / r1[..., :, None]))  # (..., d, d)
    B2 = (1.0 / S.sqrt())[..., :, None] * (Ut @ (Q1t * r1[..., :, None]))
    # GERF phi on (B1 x, B2 y): mean|B1 x|^2 = tr(B1 M1 B1^T); cross term B1^T B2 = I
    n1 = ((B1 @ M1) * B1).sum((-1, -2))
    n2 = ((B2 @ M2) * B2).sum((-1, -2))
    phi = (n1 + n2 + 2.0 * (mom.mean_x * mom.mean_y).sum(-1)) / d
    return B1, B2, a_star_torch(phi)


def _fit_sderf(mom: Moments):
    # FAVOR# Thm 4.3: N = M1 + M2 + mx my^T + my mx^T = Q3 L3 Q3^T, a_l = A*(L3_l)
    cross = mom.mean_x[..., :, None] * mom.mean_y[..., None, :]
    N = mom.second_x + mom.second_y + cross + cross.transpose(-1, -2)
    lam, Q3 = torch.linalg.eigh(0.5 * (N + N.transpose(-1, -2)))
    return Q3, a_star_torch(lam.clamp(min=0.0))  # (..., d, d), (..., d)


@dataclass
class LogFeatureMap:
    """Parameters of the affine-log features of one attention call (see module doc).

    ``T_q``, ``T_k``: None, a (..., d) diagonal or a (..., d, d) matrix applied on the
    right (``x' = x @ T``); ``W_q``, ``W_k``: (..., d, M) or (d, M); ``c``: (..., M) or None.
    Leading dims broadcast against the batch dims of the inputs.
    """

    W_q: torch.Tensor
    W_k: torch.Tensor
    c: torch.Tensor | None = None
    T_q: torch.Tensor | None = None
    T_k: torch.Tensor | None = None

    @property
    def n_out(self) -> int:
        return self.W_q.shape[-1]

    def _transform(self, x, side):
        T = self.T_q if side == "q" else self.T_k
        W = self.W_q if side == "q" else self.W_k
        if T is not None:
            x = x * T[..., None, :] if T.dim() == W.dim() - 1 else x @ T  # (..., L, d)
        return x, W

    def log_features(self, x: torch.Tensor, side: str) -> torch.Tensor:
        """``log f(w_m, x)`` for x (..., L, d): shape (..., L, M), up to a common constant."""
        x, W = self._transform(x, side)
        out = x @ W  # (..., L, M)
        row = -0.5 * (x * x).sum(-1, keepdim=True)  # (..., L, 1)
        if self.c is not None:
            return out + (row + self.c[..., None, :])
        return out + row

    def augmented_weights(self, side, shift=None):
        """``[Wp; 1; c + shift]`` (..., d + 2, M) for :meth:`log_features_fused`."""
        W = self.W_q if side == "q" else self.W_k
        c = self.c
        if shift is not None:
            c = shift if c is None else c + shift
        if c is None:
            c = torch.zeros(W.shape[-1], dtype=W.dtype, device=W.device)
        lead = torch.broadcast_shapes(W.shape[:-2], c.shape[:-1])
        Wb = torch.broadcast_to(W, (*lead, *W.shape[-2:]))
        ones = torch.ones((*lead, 1, W.shape[-1]), dtype=W.dtype, device=W.device)
        cb = torch.broadcast_to(c, (*lead, c.shape[-1]))[..., None, :]
        return torch.cat([Wb, ones, cb], dim=-2)

    def log_features_fused(self, x, side, shift=None, keep=None, Wa=None):
        """``log_features(x) + shift`` in one matmul: ``[x', row, 1] @ [Wp; 1; c + shift]``.

        x (..., L, d); shift (..., M) or None; keep (..., L) bool or None: masked rows
        get the row term ``-1e30``, which absorbs the rest, so their log features are
        exactly ``-1e30`` (callers also zero their values). ``Wa`` may hold
        :meth:`augmented_weights` precomputed. Returns a fresh contiguous (..., L, M)
        tensor that may be modified in place.
        """
        x, _ = self._transform(x, side)
        row = -0.5 * (x * x).sum(-1, keepdim=True)  # (..., L, 1)
        if keep is not None:
            row = torch.where(keep[..., None], row, torch.full_like(row, -1e30))
        xa = torch.cat([x, row, torch.ones_like(row)], dim=-1)  # (..., L, d + 2)
        if Wa is None:
            Wa = self.augmented_weights(side, shift)
        return xa @ Wa

    def to(self, dtype) -> LogFeatureMap:
        def cv(t):
            return None if t is None else t.to(dtype)

        return LogFeatureMap(cv(self.W_q), cv(self.W_k), cv(self.c), cv(self.T_q), cv(self.T_k))


def build_log_map(name: str, W: torch.Tensor, mom: Moments | None, d: int) -> LogFeatureMap:
    """Feature parameters of map ``name`` for projections ``W`` (M, d) (float tensor).

    ``mom`` holds the moments to fit from (None for the unfitted maps). Returns float64
    parameters; the caller casts to the compute dtype.
    """
    W = W.double()
    Wt = W.t()  # (d, M)
    if name == "positive":
        return LogFeatureMap(Wt, Wt)
    if name == "hyperbolic":
        W2 = torch.cat([Wt, -Wt], dim=1)  # (d, 2M)
        return LogFeatureMap(W2, W2)
    if mom is None:
        raise ValueError(f"feature map {name!r} needs moments to fit its parameters.")
    w2 = W * W  # (M, d)
    if name == "sderf":
        Q3, a = _fit_sderf(mom)  # (..., d, d), (..., d)
        s = torch.sqrt(1.0 - 4.0 * a)  # (..., d)
        Wp = Q3 @ (s[..., :, None] * Wt)  # (..., d, M): x . Wp = (Q3^T x) . diag(s) w
        c = a @ w2.t()  # (..., M)
        return LogFeatureMap(Wp, Wp, c)
    if name == "gerf":
        A = _fit_gerf(mom, d)  # (...)
        T_q = T_k = None
    elif name == "saderf":
        psi, A = _fit_saderf(mom, d)
        T_q, T_k = psi, 1.0 / psi  # (..., d)
    elif name == "aderf":
        B1, B2, A = _fit_aderf(mom, d)
        T_q, T_k = B1.transpose(-1, -2), B2.transpose(-1, -2)  # x' = x @ B^T
    else:
        raise ValueError(f"unknown exponential feature map {name!r}.")
    s = torch.sqrt(1.0 - 4.0 * A)[..., None, None]  # (..., 1, 1)
    Wp = s * Wt  # (..., d, M)
    c = A[..., None] * w2.sum(1)  # (..., M)
    return LogFeatureMap(Wp, Wp, c, T_q, T_k)


def scale_inputs(q, k, scale):
    """``x = q sqrt(scale)``, ``y = k sqrt(scale)`` so that ``x.y = scale q.k``."""
    r = math.sqrt(scale)
    return q * r, k * r
