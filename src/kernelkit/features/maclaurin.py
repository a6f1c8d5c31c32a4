"""Random Maclaurin and Optimized Maclaurin features for dot-product kernels.

Reference: Wacker, Kanagawa, Filippone, "Improved Random Features for Dot Product
Kernels" (equation / algorithm numbers below are the paper's), with the corrections of
``shared/notes/dot_product_random_features.md`` (§2.4, §2.5, App. C surrogate, §5):

* Algorithm 2 is budget-respecting (erratum 1): ``D_n = 1[a_n > 0]`` to start, then one
  feature at a time while ``sum D_n < D_total``;
* whether the exact constant feature ``sqrt(a_0)`` counts in the budget is an option
  (erratum 2, ``constant_in_budget``);
* the TensorSRHT surrogate (eq. 72-73) picks its branch from the *summed* covariance
  term (erratum 10) and uses the padded dimension ``d`` (erratum 9).

A dot-product kernel is ``k(x, y) = sum_n a_n (x^T y)^n`` with ``a_n >= 0`` (eq. 36):

* ``"polynomial"``: ``(gamma x^T y + coef0)^degree`` (eq. 37),
  ``a_n = C(degree, n) coef0^(degree-n) gamma^n``;
* ``"softmax"``: ``exp(x^T y / l^2)`` (eq. 38), ``a_n = 1 / (n! l^(2n))``;
* ``"gaussian"``: ``exp(-|x - y|^2 / (2 l^2))`` (eq. 39), the exponential ``a_n`` with
  every feature (the constant included) times ``exp(-|x|^2 / 2l^2)``.

The unit-sphere kernel of eq. 57, ``(1 - |x - y|^2 / a^2)^p`` for ``|x| = |y| = 1``, is
the polynomial kernel with ``gamma = 2/a^2``, ``coef0 = 1 - 2/a^2``
(:func:`unit_sphere_polynomial`).

Both maps estimate the *truncated* series ``sum_{n <= p} a_n (x^T y)^n`` (times the
Gaussian factors) without bias; the constant ``a_0`` is an exact feature ``sqrt(a_0)``.
"""

from __future__ import annotations

import copy
import heapq
import math
import numbers
from dataclasses import dataclass

import numpy as np

from .._backend import check_random_state, device, to_numpy, validate_positive_int
from .._backend.fwht import next_power_of_two
from .._backend.parallel import check_n_jobs, map_row_blocks
from ._base import FeatureMap, sq_norms
from .dot_product import (
    GaussianSketch,
    RademacherSketch,
    TensorSRHT,
    iid_sketch_variance,
    pair_statistics,
    srht_c,
    tensor_srht_variance,
)

__all__ = [
    "SKETCHES",
    "SKETCH_MOMENTS",
    "MaclaurinPairSums",
    "OptimizedMaclaurin",
    "RandomMaclaurin",
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
#: sketch classes' weights (note §2.1). TensorSRHT has the Rademacher moments plus a
#: covariance term (eq. 33).
SKETCH_MOMENTS = {
    (name, cx): tuple(cls._moments[cx]) for name, cls in SKETCHES.items() for cx in (False, True)
}


# ============================================================== coefficients
def _check_real(value, name, *, minimum=None, strict=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}.")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        op = ">" if strict else ">="
        raise ValueError(f"{name} must be {op} {minimum}, got {value}.")
    return value


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
        gamma = _check_real(gamma, "gamma", minimum=0.0, strict=True)
        coef0 = _check_real(coef0, "coef0", minimum=0.0)
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
        lengthscale = _check_real(lengthscale, "lengthscale", minimum=0.0, strict=True)
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
    a = _check_real(a, "a", minimum=2.0)
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
    c = _check_real(c, "c", minimum=1.0, strict=True)
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
    the branch, note §5 #10).
    """
    V, C = float(V), float(C)
    if isinstance(D, numbers.Integral):  # scalar fast path (Algorithm 2's inner loop)
        if C > 0 or D > d:
            return (V + (d - 1) * C) / D
        return (V - C) / D + C
    D = np.asarray(D, dtype=np.float64)
    far = (V + (d - 1) * C) / D
    if C > 0:
        return far
    return np.where(D <= d, (V - C) / D + C, far)


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
    sq = np.einsum("ij,ij->i", X, X)  # (m,)
    r2 = float(sq.max()) if sq.max() > 0 else 1.0
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
            vb[k] = a_s[k] ** 2 * np.vdot(W, tmp)
            if srht:
                if k > 1:
                    Cn *= C
                np.subtract(Cn, G2n, out=tmp)
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
    if best[1] is None:
        raise ValueError(
            f"n_features gives a budget of {D_total} features, fewer than the degrees with "
            f"a positive coefficient in every p in [{p_min}, {p_max}] need (one each)."
        )
    return best[1], best[2], objective


# ============================================================== feature maps
class _MaclaurinBase(FeatureMap):
    """Shared machinery: coefficients, per-degree sketches, constant, Gaussian factor.

    Features (complex count): ``[sqrt(a_0)] ++ [scale_n Phi_n(x)]_{n: D_n > 0}``, times
    ``exp(-|x|^2 / 2 l^2)`` for the Gaussian kernel; ``Phi_n`` is an unbiased degree-``n``
    sketch of ``(x'^T y')^n`` with ``D_n`` features on the scaled input
    ``x' = sqrt(s) x`` (``s = gamma`` for the polynomial kernel, ``1 / l^2`` otherwise),
    whose coefficients are ``b_n = a_n / s^n``. The constant feature exists iff
    ``a_0 > 0``.
    """

    _sketches: tuple[str, ...] = ("rademacher", "gaussian")

    # ------------------------------------------------------------------ parameters
    accepts_sparse = True

    def _validate_common(self):
        check_n_jobs(self.n_jobs)
        if self.kernel == "exponential":
            raise ValueError(
                "kernel='exponential' (eq. 38, exp(x.y / l^2)) is called 'softmax' in "
                "kernelkit, as on every feature map: use kernel='softmax'."
            )
        if not isinstance(self.kernel, str) or self.kernel not in MACLAURIN_KERNELS:
            raise ValueError(
                f"Unknown kernel {self.kernel!r}; expected one of {list(MACLAURIN_KERNELS)}."
            )
        if not isinstance(self.sketch, str) or self.sketch not in self._sketches:
            raise ValueError(
                f"Unknown sketch {self.sketch!r}; expected one of {list(self._sketches)}."
            )
        if not isinstance(self.complex, bool | np.bool_):
            raise TypeError(f"complex must be a bool, got {self.complex!r}.")
        if not isinstance(self.real_output, bool | np.bool_):
            raise TypeError(f"real_output must be a bool, got {self.real_output!r}.")
        if self.kernel == "polynomial":
            _check_degree(self.degree, "degree")
            _check_real(self.gamma, "gamma", minimum=0.0, strict=True)
            _check_real(self.coef0, "coef0", minimum=0.0)
        else:
            _check_real(self.lengthscale, "lengthscale", minimum=0.0, strict=True)

    def _input_scale(self) -> float:
        """``s`` with ``x' = sqrt(s) x`` (the sketches see ``x'``)."""
        if self.kernel == "polynomial":
            return float(self.gamma)
        return 1.0 / float(self.lengthscale) ** 2

    def _coefficients(self, max_degree: int) -> np.ndarray:
        return maclaurin_coefficients(
            self.kernel,
            max_degree,
            degree=self.degree,
            gamma=self.gamma,
            coef0=self.coef0,
            lengthscale=self.lengthscale,
        )

    @property
    def is_complex(self) -> bool:
        return bool(self.complex) and not bool(self.real_output)

    def _has_constant(self) -> bool:
        """Whether ``a_0 > 0`` (the exact constant feature ``sqrt(a_0)`` is present)."""
        return self.kernel != "polynomial" or float(self.coef0) > 0

    def _sketch_budget(self, n_features: int) -> int:
        """Sketch features (complex count) for ``n_features``."""
        return int(n_features)

    def _output_dim_for(self, n_features):
        """The sketch features (doubled for ``real_output`` with complex sketches) plus the
        constant feature."""
        D = self._sketch_budget(n_features)
        if self.complex and self.real_output:
            D *= 2
        return D + int(self._has_constant())

    # ------------------------------------------------------------------ sketches
    def _draw_sketches(self, d: int, rng):
        """Draw independent per-degree sketches for ``n_features_per_degree_``."""
        Dn = self.n_features_per_degree_
        s = self._input_scale()
        b = self.coefficients_ / s ** np.arange(len(self.coefficients_))  # unit-scale coefs
        self._unit_coefficients = b
        dummy = np.zeros((1, d))
        sketches = []
        for n in range(1, len(Dn)):
            if Dn[n] == 0:
                continue
            seed = int(rng.integers(0, 2**63 - 1))
            sk = SKETCHES[self.sketch](
                n_features=int(Dn[n]),
                degree=n,
                coef0=0.0,
                complex=bool(self.complex),
                random_state=seed,
                n_jobs=self.n_jobs,
            )
            sk.fit(dummy)
            sketches.append((n, sk, math.sqrt(self._block_weight(n))))
        self.sketches_ = sketches

    def _block_weight(self, n: int) -> float:
        """Weight multiplying ``Phi_n(x)^T conj Phi_n(y)`` in the estimate."""
        raise NotImplementedError

    # ------------------------------------------------------------------ features
    def _scaled_features(self, X, xp, side):
        n = X.shape[0]
        s = self._input_scale()
        Xs = X * math.sqrt(s) if s != 1.0 else X
        blocks = [w * sk._features(Xs, xp, side) for _, sk, w in self.sketches_]
        cplx = bool(self.complex)
        if cplx and self.real_output:
            blocks = [xp.real(B) for B in blocks] + [xp.imag(B) for B in blocks]
            cplx = False
        if self.n_features_per_degree_[0]:
            const = xp.full(
                (n, 1), math.sqrt(float(self.coefficients_[0])), dtype=X.dtype, device=device(X)
            )
            if cplx:
                const = xp.astype(const, blocks[0].dtype)
            blocks = [const, *blocks]
        base = xp.concat(blocks, axis=1)
        if self.kernel == "gaussian":
            log_scale = -0.5 * s * sq_norms(xp, X)
        else:
            log_scale = xp.zeros(n, dtype=X.dtype, device=device(X))
        return base, log_scale

    # ------------------------------------------------------------------ variance
    def _pair_moments(self, X, Y, xp):
        """``(G, N, S, e2)`` of the scaled inputs (:func:`pair_statistics`) and the Gaussian
        weight ``e_x^2 e_y^2`` (None for the other kernels)."""
        s = self._input_scale()
        Xs, Ys = (X * s**0.5, Y * s**0.5) if s != 1.0 else (X, Y)
        G, N, S = pair_statistics(Xs, Ys, 0.0)
        e2 = None
        if self.kernel == "gaussian":
            e2 = (
                xp.exp(-xp.sum(Xs * Xs, axis=1))[:, None]
                * xp.exp(-xp.sum(Ys * Ys, axis=1))[None, :]
            )
        return G, N, S, e2

    def _degree_variance(self, G, N, S, n: int, D: int, kind: str):
        """Variance of one degree-``n`` sketch estimate of ``G^n`` with ``D`` features
        (the sketch classes' formulas: Theorem 2 or eq. 33)."""
        if self.sketch == "srht":
            return tensor_srht_variance(
                G,
                N,
                S,
                n,
                D,
                next_power_of_two(self.n_features_in_),
                complex=bool(self.complex),
                kind=kind,
            )
        q, m4 = SKETCH_MOMENTS[(self.sketch, bool(self.complex))]
        return iid_sketch_variance(G, N, S, n, D, q=q, m4=m4, kind=kind)

    def _variance(self, X, Y, xp):
        # the variance of approx_kernel, Re k_hat (derived, user guide)
        return self._variance_kind(X, Y, xp, "real")

    def _complex_variance(self, X, Y, xp):
        # E|k_hat - E k_hat|^2 of the complex estimate (the paper's, what the objective uses)
        return self._variance_kind(X, Y, xp, "complex")

    def _variance_kind(self, X, Y, xp, kind):
        raise NotImplementedError

    def expected_kernel(self, X, Y=None):
        """``E approx_kernel(X, Y)``: the truncated series ``sum_{n <= p} a_n (x^T y)^n``
        with ``p = degree_`` (times ``e_x e_y`` for the Gaussian kernel). The expectation
        is over every random draw of ``fit``: for Random Maclaurin that includes the
        degrees (a single draw may give a degree no features).

        Returns
        -------
        array, shape (n, m)
        """
        X, Y, xp = self._check_pair(X, Y)
        return self._expected_kernel_prepared(self._densify(X), self._densify(Y), xp)

    def _expected_kernel_prepared(self, X, Y, xp):
        s = self._input_scale()
        G = (X * s**0.5) @ xp.matrix_transpose(Y * s**0.5)
        b = self._unit_coefficients
        out = xp.zeros_like(G) + float(b[0])
        Gp = xp.ones_like(G)
        for n in range(1, self.degree_ + 1):
            Gp = Gp * G
            if b[n] > 0:
                out = out + float(b[n]) * Gp
        if self.kernel == "gaussian":
            out = out * xp.exp(-0.5 * s * xp.sum(X * X, axis=1))[:, None]
            out = out * xp.exp(-0.5 * s * xp.sum(Y * Y, axis=1))[None, :]
        return out

    def _exact_kernel(self, X, Y, xp):
        """The kernel this map approximates (untruncated), shape (n, m)."""
        G = X @ xp.matrix_transpose(Y)
        if self.kernel == "polynomial":
            return (float(self.gamma) * G + float(self.coef0)) ** int(self.degree)
        s = self._input_scale()
        if self.kernel == "softmax":
            return xp.exp(s * G)
        nx = xp.sum(X * X, axis=1)[:, None]
        ny = xp.sum(Y * Y, axis=1)[None, :]
        return xp.exp(-0.5 * s * xp.clip(nx + ny - 2.0 * G, min=0.0))


class RandomMaclaurin(_MaclaurinBase):
    """Random Maclaurin features (Kar & Karnick 2012; paper Sec. 5.2, eq. 40-43).

    Draws the degrees ``n_1 .. n_D ~ mu``, ``mu(n) ∝ 2^-(n+1)`` on the degrees
    ``1 <= n <= p`` with ``a_n > 0`` (:func:`random_maclaurin_measure`), counts them
    (``D_n``), and sketches degree ``n`` with ``D_n`` independent features:

        Phi(x) = [sqrt(a_0), (+)_{D_n > 0} sqrt(D_n a_n / (D mu(n))) Phi_n(x)]

    (times ``exp(-|x|^2 / 2 l^2)`` for the Gaussian kernel). Unbiased for the truncated
    series ``sum_{n <= p} a_n (x^T y)^n`` over the draw of the degrees and the sketches.

    Parameters
    ----------
    n_features : int
        ``D``, the number of sketch features; the output has one more column, the exact
        constant ``sqrt(a_0)``, when ``a_0 > 0``.
    kernel : {"polynomial", "softmax", "gaussian"}
        ``(gamma x^T y + coef0)^degree``, ``exp(x^T y / l^2)`` or
        ``exp(-|x - y|^2 / 2 l^2)``.
    degree : int
        Degree of the polynomial kernel (the truncation ``p`` for it).
    max_degree : int
        Truncation degree ``p`` of the exponential and Gaussian kernels.
    gamma, coef0 : float
        Polynomial kernel parameters (scikit-learn names); eq. 57's unit-sphere kernel is
        ``gamma = 2/a^2``, ``coef0 = 1 - 2/a^2`` (:func:`unit_sphere_polynomial`).
    lengthscale : float
        ``l`` of the exponential and Gaussian kernels.
    sketch : {"rademacher", "gaussian"}
        Degree-``n`` sketch (the paper's "Rnd. Macl." baseline uses real Rademacher).
    complex : bool
        Complex sketches (Ex. 4 / Ex. 3 weights); features are complex.
    real_output : bool
        With ``complex=True``, output ``[Re Phi, Im Phi]`` (real, ``2 D`` sketch columns)
        whose inner products equal ``Re k_hat``.
    random_state : None, int or numpy.random.Generator
    n_jobs : int, optional
        Threads of the NumPy path (scikit-learn's convention; None: all available).

    Attributes
    ----------
    coefficients_ : ndarray, shape (p + 1,)
        ``a_0 .. a_p``.
    degree_ : int
        ``p``.
    degree_measure_ : ndarray, shape (p + 1,)
        ``mu``.
    n_features_per_degree_ : ndarray of int, shape (p + 1,)
        ``D_n``; entry 0 is the constant feature (1 if ``a_0 > 0``).
    sketches_ : list of (degree, sketch, weight)
    """

    def __init__(
        self,
        n_features: int = 256,
        kernel: str = "polynomial",
        degree: int = 2,
        max_degree: int = 10,
        gamma: float = 1.0,
        coef0: float = 1.0,
        lengthscale: float = 1.0,
        sketch: str = "rademacher",
        complex: bool = False,
        real_output: bool = False,
        random_state=None,
        n_jobs=None,
    ):
        self.n_features = n_features
        self.kernel = kernel
        self.degree = degree
        self.max_degree = max_degree
        self.gamma = gamma
        self.coef0 = coef0
        self.lengthscale = lengthscale
        self.sketch = sketch
        self.complex = complex
        self.real_output = real_output
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _check_params(self):
        validate_positive_int(self.n_features, "n_features", maximum=2**26)
        self._validate_common()
        if self.kernel != "polynomial":
            _check_degree(self.max_degree, "max_degree")

    def _fit(self, X, Y, xp, rng):
        # draw the degrees and the sketches (X only supplies the dimension)
        p = int(self.degree) if self.kernel == "polynomial" else int(self.max_degree)
        self.degree_ = p
        self.coefficients_ = self._coefficients(p)
        self.degree_measure_ = random_maclaurin_measure(self.coefficients_, p)
        Dn = np.zeros(p + 1, dtype=np.int64)
        Dn[1:] = rng.multinomial(int(self.n_features), self.degree_measure_[1:])
        Dn[0] = int(self.coefficients_[0] > 0)
        self.n_features_per_degree_ = Dn
        self._draw_sketches(X.shape[1], rng)

    def _block_weight(self, n):
        # D_n a_n / (D mu(n)), on the unit scale (Phi_n carries 1/sqrt(D_n))
        return (
            self.n_features_per_degree_[n]
            * self._unit_coefficients[n]
            / (self.n_features * self.degree_measure_[n])
        )

    def _variance_kind(self, X, Y, xp, kind):
        """Variance of the estimate over the degree draw and the sketches.

        The ``D`` features are i.i.d. terms ``T = (a_n / mu(n)) Pi_n(x) conj Pi_n(y)`` with
        ``n ~ mu``; ``E|T|^2 = sum_n a_n^2 (G^(2n) + V_n) / mu(n)`` with ``V_n`` the
        one-feature variance of the degree-``n`` sketch (Theorem 2), so
        ``Var = (sum_n a_n^2 (G^(2n) + V_n) / mu(n) - (sum_{n >= 1} a_n G^n)^2) / D``
        (times ``e_x^2 e_y^2`` for the Gaussian kernel).

        ``kind="real"``: the variance of :meth:`approx_kernel` (:meth:`variance`);
        ``"complex"``: ``E|k_hat - E k_hat|^2`` of the complex estimate
        (:meth:`complex_variance`, the paper's). Identical for real sketches.
        """
        G, N, S, e2 = self._pair_moments(X, Y, xp)
        b, mu = self._unit_coefficients, self.degree_measure_
        second = xp.zeros_like(G)
        mean = xp.zeros_like(G)
        Gn = xp.ones_like(G)
        for n in range(1, self.degree_ + 1):
            Gn = Gn * G
            if mu[n] > 0:
                m2 = Gn * Gn + self._degree_variance(G, N, S, n, 1, kind)
                second = second + float(b[n] ** 2 / mu[n]) * m2
                mean = mean + float(b[n]) * Gn
        out = xp.clip(second - mean * mean, min=0.0) / int(self.n_features)
        return out if e2 is None else out * e2


class OptimizedMaclaurin(_MaclaurinBase):
    """Optimized Maclaurin features (paper Sec. 5.3-5.4, Algorithms 2-4).

    ``fit(X)`` chooses the truncation degree ``p*`` in ``[p_min, p_max]`` and the number
    of features ``D_n`` of every degree by minimising the U-statistic estimate ``g`` of the
    integrated mean squared error (variance + squared truncation bias, eq. 49-51; eq. 55
    for the Gaussian kernel) on (a subsample of) ``X``, with the budget-respecting
    Incremental Algorithm (erratum 1) for every ``p`` (Algorithm 3). TensorSRHT sketches
    are allocated on the convex surrogate of App. C (so ``D_1 <= d``, Remark 15). The map
    (Algorithm 4)

        Phi(x) = [sqrt(a_0), sqrt(a_n) Phi_n(x)]_{n <= p*, D_n > 0}

    is unbiased for ``sum_{n <= p*} a_n (x^T y)^n`` (times ``e_x e_y`` for the Gaussian
    kernel).

    Parameters
    ----------
    n_features : int
        The budget. ``D_total = n_features`` sketch features plus the constant
        ``sqrt(a_0)`` (``constant_in_budget=False``, Algorithm 4), or
        ``D_total = n_features - 1`` so the output has exactly ``n_features`` columns
        (complex count; ``constant_in_budget=True``, the Sec. 5.6 convention). Erratum 2.
    kernel, degree, gamma, coef0, lengthscale :
        As in :class:`RandomMaclaurin`. For the polynomial kernel ``p`` never exceeds its
        degree (higher degrees have ``a_n = 0``).
    p_min, p_max : int
        Range of the truncation degree (the paper: 2 and 10 in Sec. 6; 1 and 20 in App. F).
    sketch : {"rademacher", "gaussian", "srht"}
        Degree-``n`` sketch; ``"srht"`` is TensorSRHT.
    complex, real_output : bool
        As in :class:`RandomMaclaurin`.
    constant_in_budget : bool
    n_subsample : int or None
        ``m``: the objective uses ``min(n, m)`` rows of ``X`` drawn without replacement
        (cost O(m^2 (d + p_max))). The paper uses up to 5000 and finds 2000 enough for
        the Gaussian kernel (App. F); ``None`` uses all rows.
    random_state : None, int or numpy.random.Generator
    n_jobs : int, optional
        Threads of the NumPy path (scikit-learn's convention; None: all available).

    Attributes
    ----------
    coefficients_ : ndarray, shape (p* + 1,)
    degree_ : int
        ``p*``.
    n_features_per_degree_ : ndarray of int, shape (p* + 1,)
        ``D_n`` (entry 0: the constant feature, 1 if ``a_0 > 0``); ``D_n = 0`` iff
        ``a_n = 0``; ``sum_{n >= 1} D_n = D_total``.
    objective_ : dict
        ``{p: g(p, D_p)}`` for every ``p`` searched (``inf`` where the budget cannot give
        every degree one feature); TensorSRHT values use the exact variance (eq. 33).
    pair_sums_ : MaclaurinPairSums
        The precomputed U-statistic sums.
    sketches_ : list of (degree, sketch, weight)
    """

    _sketches = ("rademacher", "gaussian", "srht")

    def __init__(
        self,
        n_features: int = 256,
        kernel: str = "polynomial",
        degree: int = 2,
        gamma: float = 1.0,
        coef0: float = 1.0,
        lengthscale: float = 1.0,
        p_min: int = 1,
        p_max: int = 10,
        sketch: str = "rademacher",
        complex: bool = False,
        real_output: bool = False,
        constant_in_budget: bool = False,
        n_subsample: int | None = 2000,
        random_state=None,
        n_jobs=None,
    ):
        self.n_features = n_features
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.lengthscale = lengthscale
        self.p_min = p_min
        self.p_max = p_max
        self.sketch = sketch
        self.complex = complex
        self.real_output = real_output
        self.constant_in_budget = constant_in_budget
        self.n_subsample = n_subsample
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _sketch_budget(self, n_features):
        # D_total: the constant feature takes one column of the budget when it counts
        return int(n_features) - int(bool(self.constant_in_budget) and self._has_constant())

    def _check_params(self):
        validate_positive_int(self.n_features, "n_features", maximum=2**26)
        self._validate_common()
        p_min = _check_degree(self.p_min, "p_min")
        p_max = _check_degree(self.p_max, "p_max")
        if p_min > p_max:
            raise ValueError(f"p_min must be <= p_max, got p_min={p_min} > p_max={p_max}.")
        if not isinstance(self.constant_in_budget, bool | np.bool_):
            raise TypeError("constant_in_budget must be a bool.")
        if self.n_subsample is not None:
            validate_positive_int(self.n_subsample, "n_subsample", minimum=2)

    def _degree_range(self):
        p_min, p_max = int(self.p_min), int(self.p_max)
        if self.kernel == "polynomial":  # a_n = 0 beyond the degree: same g for all p >= it
            p_max = min(p_max, int(self.degree))
            p_min = min(p_min, p_max)
        return p_min, p_max

    def _fit(self, X, Y, xp, rng):
        # optimise the degree allocation on X (Algorithm 3) and draw the sketches; the
        # kernel is symmetric, so Y only has its dimension checked
        if X.shape[0] < 2:
            raise ValueError(
                "OptimizedMaclaurin.fit needs at least 2 samples (the U-statistic objective "
                f"uses pairs); got 1 sample (n_samples = {X.shape[0]})."
            )
        p_min, p_max = self._degree_range()
        K = int(self.degree) if self.kernel == "polynomial" else p_max
        a_kernel = self._coefficients(K)
        has_const = bool(a_kernel[0] > 0)
        D_total = int(self.n_features) - int(bool(self.constant_in_budget) and has_const)
        needed = int(np.count_nonzero(a_kernel[1 : p_min + 1]))
        if D_total < max(1, needed):
            raise ValueError(
                f"n_features={self.n_features} leaves {D_total} sketch features, fewer than "
                f"the {max(1, needed)} degrees 1..p_min={p_min} with a_n > 0 need (one each)."
            )
        # independent streams: the subsample does not shift the sketches (see redraw)
        sub_rng, sketch_rng = rng.spawn(2)
        Xn, m = X, X.shape[0]
        if self.n_subsample is not None and m > int(self.n_subsample):
            Xn = Xn[np.sort(sub_rng.choice(m, size=int(self.n_subsample), replace=False))]
        Xn = to_numpy(self._densify(Xn), np.float64)
        self.pair_sums_ = maclaurin_pair_sums(
            Xn,
            a_kernel,
            p_max,
            kernel=self.kernel,
            lengthscale=self.lengthscale,
            sketch=self.sketch,
            complex=bool(self.complex),
            n_jobs=self.n_jobs,
        )
        p_star, D_star, objective = optimize_allocation(
            self.pair_sums_, a_kernel, D_total, p_min, p_max
        )
        self.degree_ = int(p_star)
        self.objective_ = objective
        self.coefficients_ = np.zeros(p_star + 1)
        self.coefficients_[: min(len(a_kernel), p_star + 1)] = a_kernel[: p_star + 1]
        D_star = np.asarray(D_star, dtype=np.int64).copy()
        D_star[0] = int(has_const)
        self.n_features_per_degree_ = D_star
        self._draw_sketches(X.shape[1], sketch_rng)

    def redraw(self, random_state=None):
        """A copy with the same fitted allocation and freshly drawn sketches.

        The allocation (Algorithm 3) is deterministic given the rows the objective uses,
        so Monte Carlo over sketches need not repeat the O(m^2 (d + p)) objective. The
        copy's sketches are those ``fit`` draws with ``random_state`` (its ``random_state``
        parameter is set to it); when ``fit`` used every row (``n <= n_subsample``) the copy
        equals ``set_params(random_state=random_state).fit(X)``.

        Returns
        -------
        OptimizedMaclaurin
        """
        self._check_fitted()
        new = copy.copy(self)
        new.random_state = random_state
        new._draw_sketches(self.n_features_in_, check_random_state(random_state).spawn(2)[1])
        return new

    def _block_weight(self, n):
        return self._unit_coefficients[n]

    def _variance_kind(self, X, Y, xp, kind):
        """Variance ``sum_n a_n^2 Var[Phi_n(x)^T conj Phi_n(y)]`` of the estimate (eq. 47).

        Independent sketches per degree: Theorem 2 or, for TensorSRHT, eq. 33 with the
        padded dimension (the sketch classes' formulas); times ``e_x^2 e_y^2`` for the
        Gaussian kernel.

        ``kind="real"``: the variance of :meth:`approx_kernel` (:meth:`variance`);
        ``"complex"``: ``E|k_hat - E k_hat|^2`` of the complex estimate
        (:meth:`complex_variance`, the paper's, and what the objective uses).
        """
        G, N, S, e2 = self._pair_moments(X, Y, xp)
        b, Dn = self._unit_coefficients, self.n_features_per_degree_
        out = xp.zeros_like(G)
        for n in range(1, self.degree_ + 1):
            if Dn[n] > 0:
                V = self._degree_variance(G, N, S, n, int(Dn[n]), kind)
                out = out + float(b[n] ** 2) * V
        out = xp.clip(out, min=0.0)
        return out if e2 is None else out * e2
