"""Low-rank partition-function bound (Alg. LB, Thm 3) and LSPFB (SGB Appendix B).

The curvature of a batch, ``Sigma_full = sum_j Sigma_j = sum_j sum_y r_{jy} r_{jy}^T`` with
``r_{jy} = sqrt(beta(u_{jy})) (f_{x_j}(y) - upsilon_{j,y-1})`` (the label loop of Alg. B),
is majorised by ``V^T S V + diag(D)`` with ``V`` (k, d), ``S`` (k, k) and ``D`` (d,) built
by absorbing the rows ``r`` one at a time:

``variant="paper"`` – Alg. LB with the corrections listed in
  docs/derivations/sgb.md: (a) ``beta`` uses the per-sample ``z_j``; (b) a residual
  ``g`` with ``||g|| <= 1e-12 max(1, ||r||)`` is dropped (no 0/0), and on ties ``g`` is
  dropped; (c) ``S`` may be singular, so the solve uses the
  Woodbury form ``(D + V^T S V)^{-1} = D^{-1} - D^{-1} V^T (I + S V D^{-1} V^T)^{-1} S V
  D^{-1}``; (d) the batch ``log z`` is ``sum_j log z_j``; (e) ``V_0 = 0`` (``init="zeros"``)
  or random orthonormal rows. Per row: ``p = V r``, ``a = V^T p``, ``g = r - a``, ``S += p
  p^T``, re-diagonalise ``S`` (eigh; ``V <- Q^T V``), ``D += ||g|| ||a||`` (Lemma 4), then
  put ``g`` in the weakest slot (repairing the evicted one with Lemma 2, ``c v v^T <= c
  (1^T|v|) diag|v|``) or repair ``g`` itself. O(k^2 d + k^3) per row.
``variant="eig"`` – a cheaper update (derived): ``S`` kept symmetric, its smallest eigenpair
  ``(c, q)`` is swapped for ``g`` (``V <- V - q q^T V + q g^T / ||g||``) when ``c <
  ||g||^2``. O(k d + k^3) per row.
``variant="exact"`` – no cross term (*derived*, applied to blocks;
  docs/derivations/sgb.md): a block of about ``k`` rows (whole samples) is
  represented exactly in the basis ``[V; Y]`` (``Y`` spanning the residuals
  ``G = R - R V^T V``), the compressed ``(k + b) x (k + b)`` matrix is diagonalised and its
  smallest eigenpairs beyond rank ``k`` are dropped with the Lemma 2 repair. The tightest
  variant and the fastest (one eigh and one O(k (k + b) d) rotation per block instead of
  per label).

Every variant adds to ``Sigma`` only positive semidefinite terms plus the repair of what it
drops, so ``V^T S V + diag(D) >= Sigma_full`` (tested). While fewer than ``k`` directions
have been seen, ``"eig"`` and ``"exact"`` grow the basis exactly (no repair).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import expit

from .._backend import check_random_state, to_numpy
from . import _validation as _v
from .bound import _beta, _check_features, _check_weights_data, multinomial_bound_from_logits
from .solvers import _ridge

__all__ = [
    "VARIANTS",
    "LowRankBound",
    "low_rank_partition_bound",
    "lspfb_step",
    "multinomial_low_rank_bound",
    "woodbury_solve",
]

VARIANTS = ("paper", "eig", "exact")
_GTOL = 1e-12


class LowRankBound(NamedTuple):
    """Low-rank quadratic bound of a batch (Thm 3 with corrections (a)-(e) of
    docs/derivations/sgb.md).

    Attributes
    ----------
    log_z : ndarray, shape (m,)
        ``log Z_{x_j}(theta~)`` per sample (the batch bound's ``log z`` is their sum).
    mu : ndarray, shape (m, d), or None
        ``grad log Z_{x_j}(theta~)`` (None from :func:`multinomial_low_rank_bound`, whose
        ``prob`` gives ``mu_j = p_j (x) x_j``).
    V : ndarray, shape (k, d)
        Orthonormal (or zero, unused) rows.
    S : ndarray, shape (k, k)
        Symmetric positive semidefinite.
    D : ndarray, shape (d,)
        Non-negative diagonal.
    prob : ndarray, shape (m, n), or None
        Softmax probabilities (multinomial form only).
    """

    log_z: np.ndarray
    mu: np.ndarray | None
    V: np.ndarray
    S: np.ndarray
    D: np.ndarray
    prob: np.ndarray | None = None

    def curvature(self) -> np.ndarray:
        """Dense ``V^T S V + diag(D)`` (small problems only).

        Returns
        -------
        ndarray, shape (d, d)
        """
        out = self.V.T @ self.S @ self.V
        out[np.diag_indices_from(out)] += self.D
        return out

    def solve(self, G, lam=0.0, scale=1.0) -> np.ndarray:
        """``(scale (V^T S V + diag D) + lam I)^{-1} G`` by :func:`woodbury_solve`.

        Parameters
        ----------
        G : ndarray, shape (d,) or (d, c)
        lam : float, default=0.0
            Finite, ``>= 0``.
        scale : float, default=1.0
            Finite, ``> 0``.

        Returns
        -------
        ndarray, shape (d,) or (d, c)
            The shape of ``G``.
        """
        lam = _v.check_nonneg_float(lam, "lam")
        scale = _v.validate_positive_float(scale, "scale")
        return woodbury_solve(self.V, scale * self.S, scale * self.D + lam, G)


def woodbury_solve(V, S, Dvec, G) -> np.ndarray:
    """``(diag(Dvec) + V^T S V)^{-1} G`` for a possibly singular ``S`` (correction (c)).

    Uses ``D^{-1} - D^{-1} V^T (I + S V D^{-1} V^T)^{-1} S V D^{-1}``, which needs only
    ``Dvec > 0``. Cost O(k d c + k^3).

    Parameters
    ----------
    V : ndarray, shape (k, d)
    S : ndarray, shape (k, k)
    Dvec : ndarray, shape (d,), positive
    G : ndarray, shape (d,) or (d, c)

    Returns
    -------
    ndarray, shape of ``G`` (float64)

    Raises
    ------
    TypeError
        An argument is not a real numeric array (boolean, object).
    ValueError
        An argument is complex, has the wrong number of dimensions, is not finite, or
        its shape does not match the others (``V`` (k, d), ``S`` (k, k), ``Dvec`` (d,),
        ``G`` (d,) or (d, c)); ``Dvec`` is not positive; ``I + S V D^-1 V^T`` is
        singular (``S`` far from positive semidefinite).
    """
    V = _v.check_array(V, "V", "(k, d)", allow_empty=True)
    S = _v.check_array(S, "S", "(k, k)", allow_empty=True)
    Dvec = _v.check_array(Dvec, "Dvec", "(d,)", ndim=1)
    G = _v.check_array(G, "G", "(d,) or (d, c)", ndim=(1, 2))
    V, S, Dvec, G = (to_numpy(a, np.float64) for a in (V, S, Dvec, G))
    k, d = V.shape
    if S.shape != (k, k):
        raise ValueError(
            f"S must have shape (k, k) = ({k}, {k}) to match V {V.shape}, got {S.shape}."
        )
    if Dvec.shape != (d,):
        raise ValueError(
            f"Dvec must have shape (d,) = ({d},) to match V {V.shape}, got {Dvec.shape}."
        )
    if G.shape[0] != d:
        raise ValueError(
            f"G must have shape (d,) or (d, c) with d = {d} (V {V.shape}), got {G.shape}."
        )
    if np.any(Dvec <= 0):
        raise ValueError("Dvec (the diagonal D + lam) must be positive; use lam > 0.")
    vec = G.ndim == 1
    G2 = G[:, None] if vec else G
    DiG = G2 / Dvec[:, None]  # (d, c)
    M = np.eye(len(S)) + S @ ((V / Dvec) @ V.T)  # (k, k): I + S V D^-1 V^T
    try:
        z = np.linalg.solve(M, S @ (V @ DiG))  # (k, c)
    except np.linalg.LinAlgError as exc:
        raise ValueError(
            f"woodbury_solve: I + S V D^-1 V^T is singular ({exc}); S must be positive "
            "semidefinite."
        ) from None
    out = DiG - (V.T @ z) / Dvec[:, None]
    if not np.all(np.isfinite(out)):
        raise ValueError(
            "woodbury_solve: the solution overflows (Dvec too small or V, S, G too large)."
        )
    return out[:, 0] if vec else out


# ----------------------------------------------------------------------------- accumulator
class _Accumulator:
    """State ``(V, S, D)`` of Alg. LB and the row-absorbing rules of the three variants."""

    def __init__(self, k, d, variant, init="zeros", random_state=None):
        self.k, self.d, self.variant = k, d, variant
        self.V = np.zeros((k, d))
        self.S = np.zeros((k, k))
        self.D = np.zeros(d)
        self.live = 0  # rows 0..live-1 of V are in use
        if init == "random":
            rng = check_random_state(random_state)
            Q, _ = np.linalg.qr(rng.normal(size=(d, k)))
            self.V = np.ascontiguousarray(Q.T)
            self.live = k
        elif init != "zeros":
            raise ValueError(f"init must be 'zeros' or 'random', got {init!r}.")

    @staticmethod
    def _repair(c, v):
        """Lemma 2: ``c v v^T <= c (1^T |v|) diag(|v|)``; returns the diagonal (d,)."""
        av = np.abs(v)
        return c * av.sum() * av

    def add_rows(self, R):
        """Absorb the rows of ``R`` (b, d) (one sample's labels for ``"exact"``)."""
        if self.variant == "exact":
            self._add_block(R)
            return
        add = self._add_paper if self.variant == "paper" else self._add_eig
        for r in R:
            add(r)

    # --- Alg. LB (paper, corrected) ------------------------------------------------------
    def _add_paper(self, r):
        L, V = self.live, self.V
        rn = float(np.linalg.norm(r))
        if rn == 0.0:
            return
        p = V[:L] @ r  # (L,)
        a = p @ V[:L]  # (d,)
        g = r - a
        gn, an = float(np.linalg.norm(g)), float(np.linalg.norm(a))
        if L:
            Sl = self.S[:L, :L] + np.outer(p, p)
            evals, Q = np.linalg.eigh(Sl)
            self.S[:L, :L] = np.diag(evals)
            V[:L] = Q.T @ V[:L]
        self.D += gn * an  # a g^T + g a^T <= ||a|| ||g|| I (Lemma 4)
        if gn <= _GTOL * max(1.0, rn):
            self.D += self._repair(1.0, g)  # (b) drop g (repair ~ 0)
            return
        diag = np.diag(self.S).copy()
        if L < self.k:
            slot = L  # an empty slot (S = 0) is the argmin
        else:
            slot = int(np.argmin(diag))
            if not diag[slot] < gn * gn:  # ties: drop g
                self.D += self._repair(1.0, g)
                return
        if slot < L:
            self.D += self._repair(diag[slot], V[slot])
        else:
            self.live += 1
        self.S[slot, slot] = gn * gn
        V[slot] = g / gn

    # --- cheaper eigen-swap update (derived) -----------------------------------------------
    def _add_eig(self, r):
        L, V = self.live, self.V
        rn = float(np.linalg.norm(r))
        if rn == 0.0:
            return
        p = V[:L] @ r
        a = p @ V[:L]
        g = r - a
        gn, an = float(np.linalg.norm(g)), float(np.linalg.norm(a))
        self.S[:L, :L] += np.outer(p, p)
        if gn <= _GTOL * max(1.0, rn):
            self.D += gn * an + self._repair(1.0, g)
            return
        ghat = g / gn
        if L < self.k:  # exact growth: r = V^T p + ||g|| ghat
            self.S[L, :L] = gn * p
            self.S[:L, L] = gn * p
            self.S[L, L] = gn * gn
            V[L] = ghat
            self.live += 1
            return
        self.D += gn * an
        evals, Q = np.linalg.eigh(self.S)
        c, q = float(evals[0]), Q[:, 0]
        if c < gn * gn:
            v = q @ V  # (d,)
            self.D += self._repair(max(c, 0.0), v)
            V -= np.outer(q, v)
            V += np.outer(q, ghat)
            self.S += (gn * gn - c) * np.outer(q, q)
        else:
            self.D += self._repair(1.0, g)

    # --- exact block representation, drop the smallest eigenpairs ---------------------------
    def _add_block(self, R):
        """``V^T S V + R^T R`` represented exactly in the basis ``[V; Y]``, truncated to k.

        ``G = R - P V`` with ``P = R V^T``; ``G G^T = U diag(.) U^T`` gives ``G = U Y`` with
        ``Y = U^T G`` (exact for any orthogonal ``U``), whose rows are normalised into the
        new basis directions. ``K = blockdiag(S, 0) + M^T M`` with ``M = [P, U diag|Y|]``;
        its leading ``k`` eigenpairs are kept, the others repaired with Lemma 2.
        """
        L, k = self.live, self.k
        if not np.any(R):
            return
        VL = self.V[:L]
        P = R @ VL.T  # (b, L)
        G = R - P @ VL  # (b, d)
        _, U = np.linalg.eigh(G @ G.T)  # (b, b) orthogonal
        Y = U.T @ G  # (b, d): G = U Y
        nu = np.sqrt(np.einsum("ij,ij->i", Y, Y))  # row norms
        keep = nu > 0.0
        M = np.hstack([P, U[:, keep] * nu[keep]])  # (b, L + r')
        B = np.vstack([VL, Y[keep] / nu[keep, None]])  # (L + r', d)
        tot = B.shape[0]
        K = M.T @ M
        K[:L, :L] += self.S[:L, :L]
        evals, Q = np.linalg.eigh(K)  # ascending
        drop = max(tot - k, 0)
        if drop:
            Vd = Q[:, :drop].T @ B  # (drop, d)
            c = np.maximum(evals[:drop], 0.0)
            av = np.abs(Vd)
            self.D += (c * av.sum(axis=1)) @ av
        new = tot - drop
        self.V[:new] = Q[:, drop:].T @ B
        self.V[new:] = 0.0
        self.S[:] = 0.0
        self.S[np.arange(new), np.arange(new)] = evals[drop:]
        self.live = new


# ----------------------------------------------------------------------------- rows
def _rows_general(theta, F, per_sample_z=True):
    """The rows ``r_{jy}`` (m, n, d) and ``log z_j``, ``mu_j`` of Alg. B / LB."""
    m, n, d = F.shape
    s = F @ theta  # (m, n)
    R = np.zeros((m, n, d))
    if per_sample_z:
        log_z = s[:, 0].copy()
        mu = F[:, 0].copy()
        for y in range(1, n):
            u = s[:, y] - log_z
            ell = F[:, y] - mu
            R[:, y] = np.sqrt(_beta(u))[:, None] * ell
            mu += expit(u)[:, None] * ell
            log_z = np.logaddexp(log_z, s[:, y])
        return R, log_z, mu
    # the paper's uncorrected Alg. LB: beta uses the global running z (invalid; tests only)
    log_glob = -np.inf
    log_z = np.empty(m)
    mu = np.zeros((m, d))
    for j in range(m):
        lz, ups = -np.inf, np.zeros(d)
        for y in range(n):
            u = s[j, y] - log_glob
            R[j, y] = np.sqrt(_beta(u)) * (F[j, y] - ups)
            ups = ups + expit(s[j, y] - lz) * (F[j, y] - ups)
            lz = np.logaddexp(lz, s[j, y])
            log_glob = np.logaddexp(log_glob, s[j, y])
        log_z[j], mu[j] = lz, ups
    return R, log_z, mu


def _block_samples(variant, k, n):
    """Samples per block for ``"exact"``: about ``k`` rows, which balances the O(b k d)
    projections against the O(k (k + b) d) rotation; one row at a time otherwise."""
    if variant != "exact":
        return 1
    return max(1, round(k / max(n - 1, 1)))


def _check_rank(rank, d):
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer):
        raise TypeError(f"rank must be an integer, got {rank!r}.")
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}.")
    if rank > d:
        raise ValueError(f"rank={rank} exceeds the parameter dimension d={d}.")
    return int(rank)


def _check_variant(variant):
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}.")


def low_rank_partition_bound(
    theta, F, rank, variant="paper", init="zeros", random_state=None, per_sample_z=True
) -> LowRankBound:
    """Alg. LB: low-rank bound ``V^T S V + diag(D) >= sum_j Sigma_j`` of a batch.

    Parameters
    ----------
    theta : array_like, shape (d,)
        Expansion point ``theta~``.
    F : array_like, shape (m, n, d) or (n, d)
        ``F[j, y] = f_{x_j}(y)``.
    rank : int
        ``k``, 1 <= k <= d.
    variant : {"paper", "eig", "exact"}
        See the module docstring. ``"paper"`` (default here: this function is Alg. LB) is
        Alg. LB with corrections (a)-(e) (docs/derivations/sgb.md);
        ``"exact"``, the tightest and fastest, is what
        :class:`~kernelkit.optim.BoundLogisticRegression` uses by default.
    init : {"zeros", "random"}
        ``V_0 = 0`` (Appendix B) or random orthonormal rows.
    random_state : None, int or numpy.random.Generator
        For ``init="random"``.
    per_sample_z : bool
        ``True`` (correction (a)). ``False`` reproduces the paper's global ``z`` in
        ``beta``, which is **not** a valid bound; kept for tests only.

    Returns
    -------
    LowRankBound
        ``log_z`` (m,), ``mu`` (m, d), ``V`` (k, d), ``S`` (k, k), ``D`` (d,).

    Raises
    ------
    TypeError
        ``theta`` or ``F`` is not a real numeric array, or ``rank`` not an integer.
    ValueError
        ``theta`` or ``F`` is complex, has the wrong number of dimensions, is empty or
        not finite, or their ``d`` differ; ``rank`` outside ``1..d``; unknown ``variant``
        or ``init``.
    """
    theta, F = _check_features(theta, F)
    _check_variant(variant)
    m, n, d = F.shape
    k = _check_rank(rank, d)
    R, log_z, mu = _rows_general(theta, F, per_sample_z)
    acc = _Accumulator(k, d, variant, init, random_state)
    step = _block_samples(variant, k, n)
    for j in range(0, m, step):  # Alg. LB is sequential over the rows (samples x labels)
        acc.add_rows((R[j : j + step, 1:] if per_sample_z else R[j : j + step]).reshape(-1, d))
    return LowRankBound(log_z, mu, acc.V, acc.S, acc.D)


def multinomial_low_rank_bound(
    W, X, rank, variant="paper", init="zeros", random_state=None
) -> LowRankBound:
    """Alg. LB for multinomial logistic regression (``f_x(y) = e_y (x) x``).

    The rows are ``r_{ji} = sqrt(beta(u_{ji})) (e_i - w_{i-1}) (x) x_j`` (the Kronecker
    structure), built one sample at a time (memory O(n d)); ``d = n p`` in the layout
    ``theta = vec(W)``.

    Parameters
    ----------
    W : array_like, shape (p, n)
    X : array_like, shape (m, p)
    rank, variant, init, random_state
        As in :func:`low_rank_partition_bound`.

    Returns
    -------
    LowRankBound
        With ``mu = None`` and ``prob`` (m, n).

    Raises
    ------
    TypeError
        ``W`` or ``X`` is not a real numeric array, or ``rank`` not an integer.
    ValueError
        ``W`` or ``X`` is complex, not 2-D or empty, ``X.shape[1] != W.shape[0]``, the
        logits ``X W`` are not finite; ``rank`` outside ``1..n p``; unknown ``variant``
        or ``init``.
    """
    W, X = _check_weights_data(W, X)
    W, X = to_numpy(W, np.float64), to_numpy(X, np.float64)
    _check_variant(variant)
    p, n = W.shape
    d = n * p
    k = _check_rank(rank, d)
    S = X @ W  # (m, n)
    bnd = multinomial_bound_from_logits(S, W, X)
    cum = np.logaddexp.accumulate(S, axis=1)
    mask = np.tri(n - 1, n, k=0, dtype=bool)
    Lw = -np.exp(np.where(mask[None], S[:, None, :] - cum[:, :-1, None], -np.inf))
    idx = np.arange(1, n)
    Lw[:, idx - 1, idx] += 1.0  # (m, n-1, n): e_i - w_{i-1}
    Lw *= np.sqrt(_beta(S[:, 1:] - cum[:, :-1]))[:, :, None]
    acc = _Accumulator(k, d, variant, init, random_state)
    step = _block_samples(variant, k, n)
    for j in range(0, len(X), step):  # sequential by construction (Alg. LB)
        Lb, Xb = Lw[j : j + step], X[j : j + step]  # (s, n-1, n), (s, p)
        acc.add_rows((Lb[:, :, :, None] * Xb[:, None, None, :]).reshape(-1, d))
    return LowRankBound(bnd.log_z, None, acc.V, acc.S, acc.D, bnd.prob)


def lspfb_step(
    W,
    X,
    y,
    lam,
    eta=1.0,
    *,
    rank=10,
    mask=None,
    reduction="mean",
    variant="paper",
    init="zeros",
    random_state=None,
):
    """One LSPFB step (SGB Appendix B): ``W <- W - eta (D/m + lam I + V^T S V / m)^{-1} G``.

    ``variant="paper"`` (the default here) is the paper's Alg. LB;
    :class:`~kernelkit.optim.BoundLogisticRegression` uses ``"exact"`` by default.

    Parameters
    ----------
    W : ndarray, shape (p, n)
    X : ndarray, shape (m, p)
    y : ndarray of int, shape (m,)
    lam : float (> 0)
    eta : float
    rank, variant, init, random_state
        Of the low-rank bound, as in :func:`low_rank_partition_bound`.
    mask : ndarray, shape (p,), optional
        Penalised rows (gradient only; the curvature carries ``lam I``).
    reduction : {"mean", "sum"}
        ``"sum"``: ``(D + V^T S V + lam I)^{-1} (sum_j g_j + lam W)``.

    Returns
    -------
    W_new : ndarray, shape (p, n)
    info : dict
        ``direction`` (p, n) and ``batch_loss``.

    Raises
    ------
    TypeError
        ``W``, ``X`` or ``mask`` is not a real numeric array, ``y`` does not hold
        integers, or a scalar argument has the wrong type.
    ValueError
        ``W`` or ``X`` is complex, not 2-D or empty; ``X.shape[1] != W.shape[0]``; ``y``
        is not 1-D of length ``m`` or has labels outside ``0..n-1``; ``lam < 0``; ``eta``
        not positive and finite; NaN or infinity in ``W``, ``X`` or ``mask``; ``rank``,
        ``variant``, ``init`` or ``reduction`` out of range.
    """
    _, W, X, y, lam, mask = _v.check_problem(W, X, y, lam, mask)
    eta = _v.validate_positive_float(eta, "eta")
    W, X, y = to_numpy(W, np.float64), to_numpy(X, np.float64), to_numpy(y)
    mask = None if mask is None else to_numpy(mask, np.float64)
    m = len(y)
    if reduction == "mean":
        scale = 1.0 / m
    elif reduction == "sum":
        scale = 1.0
    else:
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}.")
    bnd = multinomial_low_rank_bound(W, X, rank, variant, init, random_state)
    Rg = bnd.prob.copy()
    Rg[np.arange(m), y] -= 1.0
    Wp = W if mask is None else W * mask[:, None]
    G = scale * (X.T @ Rg) + lam * Wp  # (p, n)
    delta = bnd.solve(G.T.ravel(), lam=lam, scale=scale).reshape(W.shape[1], W.shape[0]).T
    S = X @ W
    batch_loss = float(np.mean(bnd.log_z - S[np.arange(m), y])) + _ridge(np, W, Wp, lam)
    return W - eta * delta, {"direction": delta, "batch_loss": batch_loss}
