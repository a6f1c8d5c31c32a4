"""The Maclaurin series of dot-product kernels and the degree allocation of Optimized
Maclaurin features (Wacker, Kanagawa, Filippone, "Improved Random Features for Dot
Product Kernels", Sec. 5 and App. C; equation / algorithm numbers are the paper's).

* :func:`maclaurin_coefficients` (eq. 36-39), :func:`unit_sphere_polynomial` (eq. 57),
  :func:`random_maclaurin_measure` (Sec. 5.2);
* the U-statistic pair sums of the objective (eq. 49-51, eq. 55 for the Gaussian kernel),
  :func:`maclaurin_pair_sums`;
* the budget-respecting Incremental Algorithm (Algorithm 2, erratum 1) and the search
  over the truncation degree (Algorithm 3), :func:`greedy_allocation`,
  :func:`optimize_allocation`, with the TensorSRHT surrogate of App. C
  (:func:`srht_surrogate`; errata 9 and 10 in ``docs/derivations/dot_product.md``).

The feature maps that use them are in :mod:`kernelkit.features.maclaurin`.
"""

from __future__ import annotations

import heapq
import math
import numbers
from dataclasses import dataclass

import numpy as np

from .._backend.fwht import next_power_of_two
from .._backend.parallel import map_row_blocks
from ._base import check_real
from .dot_product import GaussianSketch, RademacherSketch, TensorSRHT
from .dot_product_variance import srht_c

__all__ = [
    "MACLAURIN_KERNELS",
    "SKETCHES",
    "SKETCH_MOMENTS",
    "MaclaurinPairSums",
    "greedy_allocation",
    "maclaurin_coefficients",
    "maclaurin_pair_sums",
    "optimize_allocation",
    "random_maclaurin_measure",
    "srht_surrogate",
    "unit_sphere_polynomial",
]


#: Maclaurin kernels this module knows
MACLAURIN_KERNELS = ("polynomial", "softmax", "gaussian")

#: sketch name -> degree-n sketch class of :mod:`kernelkit.features.dot_product`
SKETCHES = {"rademacher": RademacherSketch, "gaussian": GaussianSketch, "srht": TensorSRHT}

#: (sketch, complex) -> (q, m4) of Theorem 2: ``q = E(Re z)^2``, ``m4 = E|z|^4`` of the
#: sketch classes' weights (eq. 18-21, Ex. 2-4). TensorSRHT has the Rademacher moments plus a
#: covariance term (eq. 33).
SKETCH_MOMENTS = {
    (name, cx): tuple(cls._moments[cx]) for name, cls in SKETCHES.items() for cx in (False, True)
}


# ============================================================== coefficients
def _check_degree(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {value!r} (non-integer).")
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}.")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    if value > 1000:
        raise ValueError(f"{name} must be <= 1000, got {value}.")
    return value


def maclaurin_coefficients(
    kernel: str,
    max_degree: int,
    *,
    degree: int | None = None,
    gamma: float = 1.0,
    coef0: float = 1.0,
    lengthscale: float = 1.0,
) -> np.ndarray:
    """Maclaurin coefficients ``a_0 .. a_max_degree`` of a dot-product kernel (eq. 36-39).

    Parameters
    ----------
    kernel : {"polynomial", "softmax", "gaussian"}
    max_degree : int
        Last coefficient returned (the truncation degree ``p``).
    degree : int
        Degree of the polynomial kernel (``"polynomial"`` only).
    gamma, coef0 : float
        ``(gamma x^T y + coef0)^degree`` (eq. 37 with ``x -> sqrt(gamma) x``, ``nu = coef0``).
    lengthscale : float
        ``l`` of ``exp(x^T y / l^2)`` (eq. 38); the Gaussian kernel (eq. 39) shares these
        coefficients (its ``exp(-|x|^2 / 2l^2)`` factors are applied to the features).

    Returns
    -------
    ndarray, shape (max_degree + 1,), float64, non-negative
        ``a_n = C(degree, n) coef0^(degree - n) gamma^n`` (zero for ``n > degree``) or
        ``a_n = 1 / (n! l^(2n))``.
    """
    max_degree = _check_degree(max_degree, "max_degree", minimum=0)
    n = np.arange(max_degree + 1)
    if kernel == "polynomial":
        if degree is None:
            raise ValueError("The polynomial kernel needs its degree.")
        degree = _check_degree(degree, "degree")
        gamma = check_real(gamma, "gamma", minimum=0.0, strict=True)
        coef0 = check_real(coef0, "coef0", minimum=0.0)
        out = np.zeros(max_degree + 1)
        for k in range(min(degree, max_degree) + 1):
            # C(p, k) coef0^(p-k) gamma^k in log space (no overflow of the binomial)
            if coef0 == 0.0 and k < degree:
                continue
            log_a = (
                math.lgamma(degree + 1)
                - math.lgamma(k + 1)
                - math.lgamma(degree - k + 1)
                + k * math.log(gamma)
            )
            if k < degree:
                log_a += (degree - k) * math.log(coef0)
            out[k] = math.exp(log_a) if log_a < 709.0 else math.inf
        return out
    if kernel in ("softmax", "gaussian"):
        lengthscale = check_real(lengthscale, "lengthscale", minimum=0.0, strict=True)
        log_a = -np.array([math.lgamma(k + 1) for k in n]) - 2.0 * n * math.log(lengthscale)
        with np.errstate(over="ignore"):
            return np.exp(log_a)
    raise ValueError(f"Unknown kernel {kernel!r}; expected one of {list(MACLAURIN_KERNELS)}.")


def unit_sphere_polynomial(a: float = 2.0) -> dict:
    """Parameters of the unit-sphere polynomial kernel of eq. 57.

    ``(1 - |x - y|^2 / a^2)^p = (c + s x^T y)^p`` on unit vectors, with ``s = 2 / a^2``,
    ``c = 1 - 2 / a^2`` (``a >= 2``, so ``c >= 0``); the paper's Sec. 6 uses ``a = 2``.

    Returns
    -------
    dict
        ``{"gamma": s, "coef0": c}``, to pass to the polynomial maps
        (``RandomMaclaurin(kernel="polynomial", degree=p, **unit_sphere_polynomial(2))``).
    """
    a = check_real(a, "a", minimum=2.0)
    s = 2.0 / (a * a)
    return {"gamma": s, "coef0": 1.0 - s}


def random_maclaurin_measure(
    coefficients, max_degree: int | None = None, c: float = 2.0
) -> np.ndarray:
    """Degree measure of Random Maclaurin (eq. 40), truncated and renormalised.

    ``mu(n) ∝ c^-(n+1)`` on ``{1 <= n <= p : a_n > 0}`` (the constant ``a_0`` is an exact
    feature, and degrees without a coefficient get no features).

    Parameters
    ----------
    coefficients : array, shape (p + 1,)
    max_degree : int, optional
        ``p``; defaults to ``len(coefficients) - 1``.
    c : float, > 1

    Returns
    -------
    ndarray, shape (p + 1,)
        ``mu[0] = 0``, sums to 1.
    """
    a = np.asarray(coefficients, dtype=np.float64)
    p = len(a) - 1 if max_degree is None else int(max_degree)
    c = check_real(c, "c", minimum=1.0, strict=True)
    n = np.arange(p + 1)
    mu = np.where((n >= 1) & (a[: p + 1] > 0), c ** (-(n + 1.0)), 0.0)
    total = mu.sum()
    if not total > 0:
        raise ValueError("The kernel has no positive Maclaurin coefficient of degree 1..p.")
    return mu / total


# ============================================================== TensorSRHT variance
def _srht_sum_variance(V, C, D: int, d: int):
    """TensorSRHT variance ``V / D + c(D, d) C / D^2`` (eq. 33 / 67) on pair sums ``V`` of
    ``V_q^(n)`` and ``C`` of ``Cov_q^(n) = (G^2 - V_q^(1)/(d-1))^n - G^(2n)``."""
    D = int(D)
    return V / D + srht_c(D, d) * C / (D * D)


def srht_surrogate(V, C, D, d: int):
    """Convex surrogate of the TensorSRHT variance (App. C, eq. 72-73).

    For ``C <= 0``: ``(V - C)/D + C`` for ``D <= d`` and ``(V + (d-1) C)/D`` beyond; for
    ``C > 0``: ``(V + (d-1) C)/D``. Exact at ``D`` in ``dN`` (and on ``D <= d`` when
    ``C <= 0``); ``V``, ``C`` are scalars (pair sums: the sign of the *summed* ``C`` picks
    the branch, App. C; erratum 10 in ``docs/derivations/dot_product.md``).
    """
    V, C = float(V), float(C)
    # R = V + (d - 1) C: D times the surrogate at D = d and beyond. For degree 1,
    # C = -V / (d - 1) and R is exactly 0 (the estimate is exact at D = d): a rounding
    # residue (a few ulps of the two terms) is set to 0, or the greedy allocation would
    # add degree-1 features for it (Remark 15: D_1 <= d)
    R = V + (d - 1) * C
    if abs(R) <= 8.0 * np.finfo(np.float64).eps * (abs(V) + (d - 1) * abs(C)):
        R = 0.0
    # below d (C <= 0): (V - C) / D + C = (R - (d - D) C) / D, which is R / d at D = d
    if isinstance(D, numbers.Integral):  # scalar fast path (Algorithm 2's inner loop)
        if C > 0 or D > d:
            return R / D
        return (R - (d - D) * C) / D
    D = np.asarray(D, dtype=np.float64)
    far = R / D
    if C > 0:
        return far
    return np.where(D <= d, (R - (d - D) * C) / D, far)


# ============================================================== U-statistic pair sums
@dataclass(frozen=True)
class MaclaurinPairSums:
    """Pair sums of the U-statistic objective (eq. 49-51, 55), precomputed once.

    Attributes
    ----------
    m : int
        Sample size (the objective divides by ``m (m - 1)``).
    var : ndarray, shape (p + 1,)
        ``a_n^2 sum_{i != j} w_ij V_n(x_i, x_j)`` for one feature (``D_n = 1``);
        ``var[0] = 0``.
    cov : ndarray, shape (p + 1,), or None
        ``a_n^2 sum_{i != j} w_ij Cov_n(x_i, x_j)`` (TensorSRHT only).
    bias2 : ndarray, shape (p + 1,)
        ``sum_{i != j} w_ij (k(x_i, x_j)/(e_i e_j) - sum_{n <= p'} a_n (x_i^T x_j)^n)^2``
        for ``p' = 0 .. p``.
    d : int or None
        Padded input dimension (TensorSRHT only).
    sketch : str
    complex : bool
    """

    m: int
    var: np.ndarray
    cov: np.ndarray | None
    bias2: np.ndarray
    d: int | None
    sketch: str
    complex: bool

    def degree_cost(self, n: int, D, surrogate: bool = True):
        """``a_n^2 sum_{i != j} w_ij Var[Phi_n(x_i)^T conj Phi_n(x_j)]`` with ``D`` features.

        For TensorSRHT the convex surrogate (``surrogate=True``, for Algorithm 2) or the
        exact eq. 33 value.
        """
        V = float(self.var[n])
        if self.cov is None:
            if isinstance(D, numbers.Integral):
                return V / int(D)
            return V / np.asarray(D, dtype=np.float64)
        if surrogate:
            return srht_surrogate(V, self.cov[n], D, self.d)
        return _srht_sum_variance(V, self.cov[n], D, self.d)

    def objective(self, D_per_degree, surrogate: bool = False) -> float:
        """``g(p, D)`` of eq. 51 / 55 for ``D_per_degree = (D_0, D_1, .., D_p)``
        (``D_0`` ignored; ``p = len - 1``; degrees with ``D_n = 0`` contribute no variance).
        """
        D = np.asarray(D_per_degree)
        p = len(D) - 1
        total = float(self.bias2[p])
        for n in range(1, p + 1):
            if D[n] > 0:
                total += float(self.degree_cost(n, D[n], surrogate))
        return total / (self.m * (self.m - 1))


#: elements of one (rows, m) block of the pair-sum loops (a few cache-sized arrays each)
_PAIR_BLOCK_ELEMENTS = 1 << 17


def maclaurin_pair_sums(
    X,
    coefficients,
    max_degree: int,
    *,
    kernel: str,
    lengthscale: float = 1.0,
    sketch: str = "rademacher",
    complex: bool = False,
    n_jobs=None,
) -> MaclaurinPairSums:
    """Precompute the pair sums of the U-statistic objective (eq. 49-51, eq. 55).

    O(m^2 (d + p)) time in row blocks, O(m (d + p)) memory beyond the blocks. Inputs are
    rescaled internally to ``max |x_i| = 1`` (``a_n`` absorbs the scale), so the powers
    ``G^(2p)`` stay O(1) in float64.

    Parameters
    ----------
    X : ndarray, shape (m, d)
        The sample ``x_1 .. x_m`` (``m >= 2``), raw inputs of the kernel.
    coefficients : array, shape (K + 1,)
        ``a_0 .. a_K`` as from :func:`maclaurin_coefficients`: for ``"polynomial"`` all of
        them (``K`` = the kernel's degree; the exact kernel of the bias term is
        ``sum_{n <= K} a_n G^n``), otherwise at least ``max_degree + 1``.
    max_degree : int
        ``p_max``: sums are computed for degrees ``0 .. p_max``.
    kernel : {"polynomial", "softmax", "gaussian"}
        The exact kernel ``k`` of the bias term: the polynomial, ``exp(G / l^2)``, or the
        Gaussian kernel, whose weights are ``e_i = exp(-|x_i|^2/2l^2)``,
        ``w_ij = e_i^2 e_j^2`` (eq. 55).
    lengthscale : float
    sketch : {"rademacher", "gaussian", "srht"}
    complex : bool

    Returns
    -------
    MaclaurinPairSums
    """
    if (sketch, bool(complex)) not in SKETCH_MOMENTS:
        raise ValueError(f"Unknown sketch {sketch!r}; expected 'rademacher', 'gaussian' or 'srht'.")
    X = np.asarray(X, dtype=np.float64)
    m, d = X.shape
    if m < 2:
        raise ValueError(f"The U-statistic needs at least 2 points, got {m}.")
    a_kernel = np.asarray(coefficients, dtype=np.float64)
    p = int(max_degree)
    a = np.zeros(p + 1)
    a[: min(p + 1, len(a_kernel))] = a_kernel[: p + 1]
    if kernel != "polynomial" and len(a_kernel) < p + 1:
        raise ValueError(f"coefficients must cover max_degree={p}.")
    q, m4 = SKETCH_MOMENTS[(sketch, bool(complex))]
    cq = (2.0 * q - 1.0) ** 2 + 1.0
    srht = sketch == "srht"
    d_pad = next_power_of_two(d) if srht else None

    # rescale to max |x|^2 = 1 (powers up to G^(2p) stay <= 3^p); a_n absorbs r^(2n)
    with np.errstate(over="ignore"):
        sq = np.einsum("ij,ij->i", X, X)  # (m,)
    r2 = float(sq.max()) if sq.max() > 0 else 1.0
    if not math.isfinite(r2):  # |x|^2 overflows, and so do the terms r^(2n) a_n
        raise ValueError(
            "The kernel's Maclaurin terms overflow float64 on these inputs; "
            "scale the inputs (or the lengthscale / gamma) down."
        )
    Xs = X / math.sqrt(r2)
    sqs = sq / r2
    X2 = Xs * Xs
    n_idx = np.arange(p + 1)
    with np.errstate(over="ignore"):
        a_s = a * r2**n_idx  # (p + 1,)
    if not np.all(np.isfinite(a_s)):
        raise ValueError(
            "The kernel's Maclaurin terms overflow float64 on these inputs; "
            "scale the inputs (or the lengthscale / gamma) down."
        )
    if kernel == "polynomial":
        degree = len(a_kernel) - 1
        with np.errstate(over="ignore"):
            a_full_s = a_kernel * r2 ** np.arange(degree + 1)
        if not np.all(np.isfinite(a_full_s)):
            raise ValueError(
                "The kernel's Maclaurin terms overflow float64 on these inputs; "
                "scale the inputs (or gamma) down."
            )
    elif kernel in ("softmax", "gaussian"):
        inv_l2 = 1.0 / float(lengthscale) ** 2
    else:
        raise ValueError(f"Unknown kernel {kernel!r}.")
    if kernel == "gaussian":
        w_row = np.exp(-sq * inv_l2)  # e_i^2
    else:
        w_row = np.ones(m)

    w_half = np.sqrt(w_row)  # e_i (Gaussian) or 1: sqrt(w_ij) = e_i e_j
    exp_scale = None if kernel == "polynomial" else r2 * inv_l2
    parts = {}

    def block(lo, hi):
        # rows lo:hi against all m columns; returns (var, cov, bias2) partial sums
        b = hi - lo
        G = Xs[lo:hi] @ Xs.T  # (b, m)
        sw = w_half[lo:hi, None] * w_half[None, :]  # sqrt(w_ij), 0 on the diagonal
        sw[np.arange(b), np.arange(lo, hi)] = 0.0
        W = sw * sw
        G2 = G * G
        # Theorem 2 base: m4 S + N - S + ((2q-1)^2 + 1)(G^2 - S); V_n = B^n - G^(2n)
        B = X2[lo:hi] @ X2.T  # S
        B *= m4 - 1.0 - cq
        B += sqs[lo:hi, None] * sqs[None, :]
        B += cq * G2
        vb, cb, bb = np.zeros(p + 1), np.zeros(p + 1), np.zeros(p + 1)
        tmp = np.empty_like(G)
        Bn, G2n = B.copy(), G2.copy()
        if srht:  # Cov_n = (G^2 - V^(1)/(d-1))^n - G^(2n), V^(1) = B - G^2
            C = G2 - (B - G2) / (d_pad - 1) if d_pad > 1 else G2.copy()
            Cn = C.copy()
        for k in range(1, p + 1):
            if k > 1:
                Bn *= B
                G2n *= G2
            np.subtract(Bn, G2n, out=tmp)
            with np.errstate(over="ignore", invalid="ignore"):  # checked after the sums
                vb[k] = a_s[k] ** 2 * np.vdot(W, tmp)
            if srht:
                if k > 1:
                    Cn *= C
                np.subtract(Cn, G2n, out=tmp)
                with np.errstate(over="ignore", invalid="ignore"):
                    cb[k] = a_s[k] ** 2 * np.vdot(W, tmp)
        del B, Bn, G2n, W
        # bias: sqrt(w) (k - sum_{n <= p} a_n G^n), k per unit weight
        if exp_scale is None:
            R = np.full_like(G, a_full_s[-1])
            for k in range(degree - 1, -1, -1):  # Horner
                R *= G
                R += a_full_s[k]
        else:
            with np.errstate(over="ignore"):
                R = np.exp(G * exp_scale)
            if not np.all(np.isfinite(R)):
                raise ValueError(
                    "exp(x^T y / l^2) overflows on these inputs; increase the "
                    "lengthscale or scale the inputs down."
                )
        R -= a_s[0]
        R *= sw
        bb[0] = np.vdot(R, R)
        Gp = sw  # sqrt(w) G^k, updated in place
        for k in range(1, p + 1):
            Gp *= G
            np.multiply(Gp, a_s[k], out=tmp)
            R -= tmp
            bb[k] = np.vdot(R, R)
        parts[lo] = (vb, cb, bb)

    rows = max(1, _PAIR_BLOCK_ELEMENTS // m)
    map_row_blocks(block, m, m, 8, rows=rows, n_jobs=n_jobs)
    order = sorted(parts)  # fixed block order: the sums do not depend on the threads
    var = np.sum([parts[k][0] for k in order], axis=0)
    cov = np.sum([parts[k][1] for k in order], axis=0) if srht else None
    bias2 = np.sum([parts[k][2] for k in order], axis=0)
    if kernel == "polynomial" and degree <= p:
        bias2[degree:] = 0.0  # exact: the series ends at the degree (no rounding residue)
    if not (np.all(np.isfinite(var)) and np.all(np.isfinite(bias2))) or (
        cov is not None and not np.all(np.isfinite(cov))
    ):
        raise ValueError(
            "The variances of the kernel's Maclaurin terms overflow float64 on these inputs "
            "(they grow like the kernel squared); scale the inputs (or the lengthscale / "
            "gamma) down, or use RandomMaclaurin, which needs no variance estimate."
        )
    return MaclaurinPairSums(
        m=m, var=var, cov=cov, bias2=bias2, d=d_pad, sketch=sketch, complex=bool(complex)
    )


# ============================================================== Algorithms 2 and 3
def greedy_allocation(cost, active, D_total: int) -> np.ndarray:
    """Budget-respecting Incremental Algorithm (Algorithm 2 with erratum 1).

    ``D_n = 1[active_n]``, then while ``sum D_n < D_total`` add one feature to the degree
    with the largest decrease ``cost(n, D_n) - cost(n, D_n + 1)`` (ties: lowest degree).
    Exact for separable costs that are convex and decreasing in ``D_n``.

    Parameters
    ----------
    cost : callable ``(n, D) -> float``
    active : bool array, shape (p + 1,)
        Degrees that get features (``a_n > 0``, ``n >= 1``); ``active[0]`` is ignored.
    D_total : int

    Returns
    -------
    ndarray of int, shape (p + 1,)
        ``D_0 = 0``; ``sum = D_total``.
    """
    active = np.asarray(active, dtype=bool).copy()
    active[0] = False
    n_active = int(active.sum())
    if n_active == 0:
        raise ValueError("No degree to allocate features to.")
    if D_total < n_active:
        raise ValueError(
            f"The budget of {D_total} features is smaller than the "
            f"{n_active} degrees that need one each."
        )
    D = active.astype(np.int64)
    heap = []
    for n in np.flatnonzero(active):
        n = int(n)
        heap.append((-(float(cost(n, 1)) - float(cost(n, 2))), n))
    heapq.heapify(heap)
    for _ in range(D_total - n_active):
        _, n = heapq.heappop(heap)
        D[n] += 1
        k = int(D[n])
        heapq.heappush(heap, (-(float(cost(n, k)) - float(cost(n, k + 1))), n))
    return D


def optimize_allocation(
    sums: MaclaurinPairSums, coefficients, D_total: int, p_min: int, p_max: int
):
    """Extended Incremental Algorithm (Algorithm 3).

    For every ``p`` in ``[p_min, p_max]`` run :func:`greedy_allocation` on degrees
    ``1..p`` (TensorSRHT: on the convex surrogate) and evaluate ``g(p, D)`` (eq. 51 / 55,
    TensorSRHT: exact eq. 33 variance); keep the smallest (ties: the smaller ``p``).
    Degrees ``p`` that need more than ``D_total`` features get ``g = inf``.

    Returns
    -------
    p_star : int
    D_star : ndarray of int, shape (p_star + 1,)
    objective : dict ``{p: g(p, D_p)}``
    """
    a = np.asarray(coefficients, dtype=np.float64)
    objective = {}
    best = (math.inf, None, None)
    for p in range(p_min, p_max + 1):
        active = a[: p + 1] > 0
        active[0] = False
        if active.sum() == 0 or active.sum() > D_total:
            objective[p] = math.inf
            continue
        D = greedy_allocation(lambda n, k: sums.degree_cost(n, k, surrogate=True), active, D_total)
        g = sums.objective(D, surrogate=False)
        objective[p] = g
        if g < best[0]:
            best = (g, p, D)
    if best[1] is None and not np.any(a[1 : p_max + 1] > 0):
        lowest = np.flatnonzero(a[1:] > 0)
        first = f" (the lowest is {int(lowest[0]) + 1})" if lowest.size else ""
        raise ValueError(
            f"p_max={p_max}: no degree in [1, {p_max}] has a positive coefficient{first}, so "
            "no p in [p_min, p_max] has a term to sketch; raise p_max."
        )
    if best[1] is None:
        raise ValueError(
            f"n_features gives a budget of {D_total} features, fewer than the degrees with "
            f"a positive coefficient in every p in [{p_min}, {p_max}] need (one each)."
        )
    return best[1], best[2], objective
