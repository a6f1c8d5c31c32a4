"""Exact solver of the positivity-constrained low-rank JDL problem (Sec. 4.3).

Problem (22) in its diagonal form (derived; ``docs/derivations/joint_distribution.md``)::

    min_H  sum_kl W_kl H_kl^2 - 2 c_kl H_kl
    s.t.   <S, H> = 0                                   (20)   [optional]
           1 + <C_lo, H^+> - <C_hi, H^->  >= 0           (29)

solved through its two-multiplier dual (derived on the same page; strong duality by Slater since
``H = 0`` is strictly feasible): for multipliers ``nu`` (free) and ``kappa >= 0`` the
Lagrangian minimiser is elementwise ``H = ((u + kappa C_lo)^+ - (u + kappa C_hi)^-) / W``
with ``u = c - nu S``. For fixed ``kappa``, ``phi(nu) = <S, H>`` is continuous, piecewise
linear and non-increasing; its root is found *exactly* by sorting the knots. The outer
residual ``r(kappa)`` of (29) is non-decreasing; ``kappa = 0`` if ``r(0) >= 0``, else its
root is bracketed by doubling and found by Brent's method.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

__all__ = ["interval_bounds", "solve_positive"]


def interval_bounds(
    A_y: np.ndarray | None,
    A_x: np.ndarray | None,
    *,
    cmin_y=None,
    cmax_y=None,
    cmin_x=None,
    cmax_x=None,
):
    """``C_lo``, ``C_hi`` (m_Y, m_X) of (27)/(28) as interval products (36)/(37).

    ``C_lo_kl`` / ``C_hi_kl`` are the min / max of the four products
    ``{cmin_Y_k, cmax_Y_k} x {cmin_X_l, cmax_X_l}`` of the column extremes of ``A_Y``
    (n, m_Y) and ``A_X`` (n, m_X) over the training points.
    """
    if cmin_y is None:
        cmin_y, cmax_y = A_y.min(axis=0), A_y.max(axis=0)
    if cmin_x is None:
        cmin_x, cmax_x = A_x.min(axis=0), A_x.max(axis=0)
    prods = np.stack(
        [np.multiply.outer(a, b) for a in (cmin_y, cmax_y) for b in (cmin_x, cmax_x)]
    )  # (4, m_Y, m_X)
    return prods.min(axis=0), prods.max(axis=0)


def _h_of(nu, kappa, W, c, S, C_lo, C_hi):
    u = c - nu * S
    a = u + kappa * C_lo
    b = u + kappa * C_hi
    return (np.maximum(a, 0.0) - np.maximum(-b, 0.0)) / W


def _nu_root(kappa, W, c, S, C_lo, C_hi) -> float:
    """Exact root of the piecewise linear, non-increasing ``phi(nu) = <S, H(nu, kappa)>``."""
    mask = S != 0
    if not np.any(mask):
        return 0.0
    s = S[mask]
    w = s * s / W[mask]
    t1 = (c[mask] + kappa * C_lo[mask]) / s  # knot of the (a)^+ piece
    t2 = (c[mask] + kappa * C_hi[mask]) / s  # knot of the (b)^- piece
    pos = s > 0
    # piece value w (t - nu): "left" pieces are active for nu < t, "right" ones for nu > t
    tl = np.concatenate([t1[pos], t2[~pos]])
    wl = np.concatenate([w[pos], w[~pos]])
    tr = np.concatenate([t1[~pos], t2[pos]])
    wr = np.concatenate([w[~pos], w[pos]])
    ol, orr = np.argsort(tl, kind="stable"), np.argsort(tr, kind="stable")
    tl, wl, tr, wr = tl[ol], wl[ol], tr[orr], wr[orr]
    # suffix sums for the left pieces, prefix sums for the right ones
    swl = np.concatenate([np.cumsum(wl[::-1])[::-1], [0.0]])
    swtl = np.concatenate([np.cumsum((wl * tl)[::-1])[::-1], [0.0]])
    pwr = np.concatenate([[0.0], np.cumsum(wr)])
    pwtr = np.concatenate([[0.0], np.cumsum(wr * tr)])
    knots = np.unique(np.concatenate([tl, tr]))
    il = np.searchsorted(tl, knots, side="right")  # left pieces with t > nu
    ir = np.searchsorted(tr, knots, side="left")  # right pieces with t < nu
    phi = (swtl[il] - knots * swl[il]) + (pwtr[ir] - knots * pwr[ir])
    j = int(np.searchsorted(-phi, 0.0, side="left"))  # first knot with phi <= 0
    if j == 0:  # left of all knots: only the left pieces are active
        return float(swtl[0] / swl[0])
    if j == knots.shape[0]:  # right of all knots: only the right pieces are active
        return float(pwtr[-1] / pwr[-1])
    k0, k1, f0, f1 = knots[j - 1], knots[j], phi[j - 1], phi[j]
    if f0 == f1:
        return float(k1)
    return float(k0 + f0 * (k1 - k0) / (f0 - f1))


def _residual(H, C_lo, C_hi) -> float:
    """``1 + <C_lo, H^+> - <C_hi, H^->``: the left side of (29)."""
    return float(1.0 + np.sum(C_lo * np.maximum(H, 0.0)) - np.sum(C_hi * np.maximum(-H, 0.0)))


def solve_positive(W, c, S, C_lo, C_hi, *, normalized: bool = True):
    """Solve the low-rank JDL problem with (29) (and (20) if ``normalized``) exactly.

    Parameters
    ----------
    W : ndarray, shape (m_Y, m_X), positive         diagonal Hessian of the objective
    c : ndarray, shape (m_Y, m_X)                   linear term
    S : ndarray, shape (m_Y, m_X)                   ``s_Y s_X^T`` of (20)
    C_lo, C_hi : ndarray, shape (m_Y, m_X)          bounds of (29), ``C_lo <= C_hi``
    normalized : bool
        Impose (20) (``nu`` free) or not (``nu = 0``).

    Returns
    -------
    H : ndarray, shape (m_Y, m_X)
    info : dict with the multipliers ``nu``, ``kappa`` and the residual of (29).
    """

    def nu_of(kappa):
        return _nu_root(kappa, W, c, S, C_lo, C_hi) if normalized else 0.0

    def solve(kappa):
        nu = nu_of(kappa)
        H = _h_of(nu, kappa, W, c, S, C_lo, C_hi)
        return H, nu

    H, nu = solve(0.0)
    r = _residual(H, C_lo, C_hi)
    kappa = 0.0
    if r < 0.0:

        def rk(k):
            return _residual(solve(k)[0], C_lo, C_hi)

        scale = float(np.max(np.abs(C_hi - C_lo)))
        lo, hi = 0.0, (float(np.max(np.abs(c) * W.size)) / scale if scale > 0 else 1.0) or 1.0
        hi = max(hi, 1e-300)
        for _ in range(2000):
            if rk(hi) >= 0.0:
                break
            lo, hi = hi, 2.0 * hi
        else:  # pragma: no cover - (29) always holds for large kappa (H -> 0)
            raise RuntimeError("could not bracket the positivity multiplier.")
        kappa = brentq(rk, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=1000)
        H, nu = solve(kappa)
        r = _residual(H, C_lo, C_hi)
        if r < 0.0:  # take the feasible side of the bracket's last step
            H_hi, nu_hi = solve(kappa * (1 + 8 * np.finfo(float).eps))
            if _residual(H_hi, C_lo, C_hi) >= r:
                H, nu = H_hi, nu_hi
                r = _residual(H, C_lo, C_hi)
    return H, {"nu": float(nu), "kappa": float(kappa), "residual": r}
