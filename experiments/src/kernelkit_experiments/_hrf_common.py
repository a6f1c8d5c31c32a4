"""Shared pieces of the hybrid-random-feature experiments (``hrf-pointwise``, ``hrf-uci``,
``hrf-clustered``).

Reference: Choromanski et al., "Hybrid Random Features" (ICLR 2022); equation numbers are
the paper's, formulas as corrected in docs/derivations/hybrid.md.

The Monte Carlo studies need thousands of *independent* estimates of one kernel value, i.e.
thousands of independent draws of the random parameters. Fitting thousands of feature-map
objects would be a Python loop per estimate, so the estimators are written here once more
as batched array operations on stacks of projection matrices ``W`` of shape ``(s, m, d)``
(``s`` independent draws). They are exactly the estimators of ``kernelkit.features``:
``tests/experiments/test_hrf_pointwise.py`` checks them against the library maps drawn with
the same ``W`` / ``T``, and against the closed-form MSEs below by Monte Carlo.

Conventions (the HRF paper's, Sec. 2):

* ``SM(x, y) = exp(x.y)``.
* ``Trig`` with ``m`` RFs (eq. 2, dim ``2m``): ``e^{(|x|^2+|y|^2)/2} mean_i cos(w_i.(x - y))``.
* ``FAVOR+`` = the paper's ``SM^{++}_m`` (eq. 3, antithetic ``±w``, dim ``2m``):
  ``e^{-(|x|^2+|y|^2)/2} mean_i cosh(w_i.(x + y))``.
* ``FAVOR+ (one-sided)`` = Performer's ``SM^+_m`` (dim ``m``):
  ``e^{-(|x|^2+|y|^2)/2} mean_i exp(w_i.(x + y))`` (Erratum 7, docs/derivations/hybrid.md).
* Angular hybrid (eq. 12, 19): ``lam SM^{++}_m + (1 - lam) SM^trig_m`` with
  ``lam = (1 - mean_j sgn(t_j.x) sgn(t_j.y)) / 2`` from ``n`` extra projections ``t_j``;
  the base estimators share ``W`` (variant II of Thm 3.1).
* Normalised Gaussian hybrid (App. F, eq. 67-70): the same mixture with
  ``lam = 1/rho - (1/(n rho)) sum_j cos(t_j.(x - y))``, ``t_j ~ N(0, sigma^2 I)``
  (Erratum 6), ``rho = 1 - exp(-2 sigma^2 r^2)`` for inputs of norm ``r``
  (:class:`kernelkit.features.NormalizedGaussianHybridRF`).
"""

from __future__ import annotations

import math

import numpy as np

from kernelkit.features.hybrid import (
    hybrid_feature_flops,
    matched_n_features,
    regular_feature_flops,
)

__all__ = [
    "FLOP_RULE",
    "GAUSS_FLOP_RULE",
    "angular_flops",
    "angular_lambda",
    "batched_orthogonal",
    "favor_one_sided_estimate",
    "favor_pp_estimate",
    "gauss_flops",
    "hybrid_estimate",
    "match_angular",
    "match_gauss",
    "normalized_gauss_estimate",
    "project",
    "regular_flops",
    "sphere_pairs",
    "sphere_rel_error",
    "trig_estimate",
]

# ----------------------------------------------------------------------------- FLOPs
FLOP_RULE = (
    "FLOPs to build the features of one input vector (App. L, eq. 106, with constants): "
    "a regular map with M RFs costs 2Md (projection, multiply + add) + 2M (its two "
    "nonlinearities per RF: sin and cos, or exp(+wx) and exp(-wx)); the angular hybrid "
    "(m base RFs shared by its Trig and FAVOR+ parts, n RFs for lambda) costs 2(m+n)d "
    "(projections) + 4m (sin, cos, exp(+), exp(-)) + n (signs) + 4mn (the outer products "
    "s(x) (x) phi_trig(x) and s(x) (x) phi_++(x), 2m entries each). The hybrid gets the "
    "largest configuration of the stated shape whose cost does not exceed the regular "
    "map's (the rule of kernelkit.features.hybrid.matched_n_features)."
)


GAUSS_FLOP_RULE = (
    "The normalised Gaussian hybrid (m base RFs shared by Trig and FAVOR+, n RFs for "
    "lambda) costs 2(m+n)d (projections) + 4m (sin, cos, exp(+), exp(-)) + 2n (sin and "
    "cos of the lambda projections) + 8mn (the outer products of the 2n lambda features "
    "with phi_trig and phi_++, 2m entries each), matched by the same rule."
)


def regular_flops(M: int, d: int) -> int:
    """FLOPs of a regular Trig / FAVOR+ map with ``M`` RFs on one ``d``-dim input
    (:func:`kernelkit.features.hybrid.regular_feature_flops`)."""
    return regular_feature_flops(M, d)


def angular_flops(m: int, n: int, d: int) -> int:
    """FLOPs of the angular hybrid ``(m, n)`` (shared ``W``) on one ``d``-dim input
    (:func:`kernelkit.features.hybrid.hybrid_feature_flops`)."""
    return hybrid_feature_flops(m, n, d)


def match_angular(M: int, d: int, n: int | None = None) -> tuple[int, int]:
    """FLOP-matched angular hybrid ``(m, n)`` for a regular map with ``M`` RFs.

    ``n`` given: ``m = kernelkit.features.hybrid.matched_n_features(M, d, n)``;
    ``n=None``: the largest square configuration ``m = n`` within the same budget.
    Raises ``ValueError`` if not even ``m = 1`` fits.
    """
    if n is not None:
        return matched_n_features(M, d, n), n
    budget = regular_flops(M, d)
    m = 0
    while angular_flops(m + 1, m + 1, d) <= budget:
        m += 1
    if m == 0:
        raise ValueError(f"no square angular hybrid fits the budget of M={M}, d={d}.")
    return m, m


def gauss_flops(m: int, n: int, d: int) -> int:
    """FLOPs of the normalised Gaussian hybrid ``(m, n)`` (shared ``W``) on one ``d``-dim
    input (:data:`GAUSS_FLOP_RULE`)."""
    return 2 * (m + n) * d + 4 * m + 2 * n + 8 * m * n


def match_gauss(M: int, d: int, n: int) -> tuple[int, int]:
    """Largest ``m`` with ``gauss_flops(m, n, d) <= regular_flops(M, d)``; returns
    ``(m, n)``. Raises ``ValueError`` if not even ``m = 1`` fits."""
    budget = regular_flops(M, d)
    m = (budget - 2 * n * d - 2 * n) // (2 * d + 4 + 8 * n)
    if m < 1:
        raise ValueError(f"no Gaussian hybrid with n={n} fits the budget of M={M}, d={d}.")
    return int(m), n


# ----------------------------------------------------------------------------- inputs
def sphere_pairs(d: int, r: float, thetas, random_state=None):
    """Pairs ``(x_k, y_k)`` with ``|x_k| = |y_k| = r`` and angle ``thetas[k]``.

    All pairs lie in one random 2-plane (``x = r u``, ``y = r (cos t u + sin t v)``);
    ``t = 0`` and ``t = pi`` give exactly ``y = x`` and ``y = -x``.

    Returns
    -------
    X, Y : ndarray, shape (k, d)
    """
    rng = np.random.default_rng(random_state)
    thetas = np.asarray(thetas, dtype=np.float64)
    Q, _ = np.linalg.qr(rng.standard_normal((d, 2)))  # (d, 2), orthonormal columns
    u, v = Q[:, 0], Q[:, 1]
    c, s = np.cos(thetas), np.sin(thetas)
    c = np.where(thetas == 0.0, 1.0, np.where(thetas == math.pi, -1.0, c))
    s = np.where((thetas == 0.0) | (thetas == math.pi), 0.0, s)
    X = np.broadcast_to(r * u, (thetas.size, d)).copy()
    Y = r * (c[:, None] * u[None, :] + s[:, None] * v[None, :])
    return X, Y


def sphere_rel_error(method: str, r: float, theta, m: int, n: int = 1, sigma: float = 1.0):
    """Closed-form relative error ``eps = sqrt(MSE) / SM`` on the sphere ``S(r)``.

    ``method``: ``"trig"`` / ``"favor"`` (Lemma 3.4, ``m`` RFs, FAVOR+ = ``SM^{++}``),
    ``"hybrid"`` (angular hybrid ``(m, n)``, Thm 3.5 / eq. 48-50, either variant of ``W``)
    or ``"ngauss"`` (normalised Gaussian hybrid ``(m, n)`` with scale ``sigma``, Thm F.2;
    either variant of ``W``, as the shared-projection term vanishes for equal norms).
    ``theta`` : float or ndarray. Returns an ndarray of the same shape.
    """
    theta = np.asarray(theta, dtype=np.float64)
    r2 = r * r

    def trig(th):
        s2 = np.sin(th / 2.0) ** 2
        return np.exp(2 * r2 * s2) * -np.expm1(-4 * r2 * s2) / math.sqrt(2 * m)

    if method == "trig":
        return trig(theta)
    if method == "favor":
        return trig(math.pi - theta)
    if method == "ngauss":
        s2 = sigma * sigma
        D2 = 4 * r2 * np.sin(theta / 2.0) ** 2  # |x - y|^2
        rho = -math.expm1(-2 * s2 * r2)
        var = np.expm1(-s2 * D2) ** 2 / (2 * rho**2 * n)  # Var lambda_hat (Thm F.1)
        el2 = np.expm1(-s2 * D2 / 2) ** 2 / rho**2 + var  # E lambda_hat^2
        e1l2 = ((1 - rho) - np.exp(-s2 * D2 / 2)) ** 2 / rho**2 + var  # E (1-lambda_hat)^2
        # eps^2 = E lam^2 eps(++)^2 + E (1-lam)^2 eps(trig)^2 (Lemma 3.4 per estimator)
        return np.sqrt(el2 * trig(math.pi - theta) ** 2 + e1l2 * trig(theta) ** 2)
    if method != "hybrid":
        raise ValueError(f"method must be 'trig', 'favor', 'hybrid' or 'ngauss', got {method!r}.")

    def a(th):  # eq. 50, a_r(theta)
        t = th / math.pi
        c2 = np.cos(th / 2.0) ** 2
        return (
            t * (t - t / n + 1.0 / n) * np.exp(2 * r2 * np.cos(th)) * (-np.expm1(-4 * r2 * c2)) ** 2
        )

    eps2 = np.exp(2 * r2) / (2 * m) * (a(theta) + a(math.pi - theta))
    return np.sqrt(eps2)


# ----------------------------------------------------------------------------- draws
def batched_orthogonal(s: int, m: int, d: int, rng) -> np.ndarray:
    """``s`` independent block-orthogonal projections (ORF), shape ``(s, m, d)``.

    Same law as :func:`kernelkit.features.sampling.block_orthogonal_projection` for each
    of the ``s`` draws (Haar blocks by a batched QR with the sign fix of Mezzadri, rows
    rescaled by independent ``chi_d`` norms), without a Python loop over draws.
    """
    nb = -(-m // d)
    G = rng.standard_normal((s * nb, d, d))
    Q, R = np.linalg.qr(G)  # batched
    sg = np.sign(np.diagonal(R, axis1=-2, axis2=-1))  # (s nb, d)
    sg[sg == 0] = 1.0
    Q = Q * sg[:, None, :]
    # rows of Q^T are orthonormal (Q Haar => Q^T Haar)
    W = np.swapaxes(Q, -1, -2).reshape(s, nb * d, d)[:, :m]  # (s, m, d)
    norms = np.sqrt(rng.chisquare(d, size=(s, m)))
    return W * norms[..., None]


def project(W, X):
    """``W`` (s, m, d), ``X`` (k, d) -> projections ``w_i . x_k`` of shape (s, k, m)."""
    return np.matmul(X[None, :, :], np.swapaxes(W, -1, -2))


# ----------------------------------------------------------------------------- estimators
def trig_estimate(PX, PY, nx2, ny2):
    """``SM^trig`` (eq. 2/35): ``PX, PY`` (..., k, m) projections, ``nx2, ny2`` (k,)
    squared norms. Returns (..., k)."""
    return np.exp(0.5 * (nx2 + ny2)) * np.mean(np.cos(PX - PY), axis=-1)


def favor_pp_estimate(PX, PY, nx2, ny2):
    """``SM^{++}`` (eq. 3/34, FAVOR+ with antithetic ``±w``), computed in log space.
    Returns (..., k)."""
    u = PX + PY  # (..., k, m)
    m = u.shape[-1]
    # mean cosh(u) e^{-c} = exp(logsumexp([u, -u]) - log(2m) - c)
    both = np.concatenate([u, -u], axis=-1)
    top = both.max(axis=-1, keepdims=True)
    lse = top[..., 0] + np.log(np.sum(np.exp(both - top), axis=-1))
    return np.exp(lse - math.log(2 * m) - 0.5 * (nx2 + ny2))


def favor_one_sided_estimate(PX, PY, nx2, ny2):
    """Performer's one-sided ``SM^+`` (``A = I`` in Lemma 2.4). Returns (..., k)."""
    u = PX + PY
    top = u.max(axis=-1, keepdims=True)
    lse = top[..., 0] + np.log(np.sum(np.exp(u - top), axis=-1))
    return np.exp(lse - math.log(u.shape[-1]) - 0.5 * (nx2 + ny2))


def angular_lambda(TX, TY):
    """``lam = (1 - mean_j sgn(t_j.x) sgn(t_j.y)) / 2`` (eq. 12, 19); ``E lam = theta / pi``.
    ``TX, TY`` (..., k, n). Returns (..., k) in [0, 1]."""
    return 0.5 * (1.0 - np.mean(np.sign(TX) * np.sign(TY), axis=-1))


def hybrid_estimate(PX, PY, TX, TY, nx2, ny2):
    """Angular hybrid ``lam SM^{++} + (1 - lam) SM^trig`` with shared ``W`` (variant II).
    Returns (..., k)."""
    lam = angular_lambda(TX, TY)
    return lam * favor_pp_estimate(PX, PY, nx2, ny2) + (1.0 - lam) * trig_estimate(PX, PY, nx2, ny2)


def normalized_gauss_estimate(PX, PY, TX, TY, nx2, ny2, rho):
    """Normalised Gaussian hybrid (App. F, eq. 67-70) with shared ``W``:
    ``lam SM^{++} + (1 - lam) SM^trig``, ``lam = (1 - mean_j cos(t_j.(x - y))) / rho``
    (``TX, TY`` projections on ``t_j ~ N(0, sigma^2 I)``). Returns (..., k)."""
    lam = (1.0 - np.mean(np.cos(TX - TY), axis=-1)) / rho
    return lam * favor_pp_estimate(PX, PY, nx2, ny2) + (1.0 - lam) * trig_estimate(PX, PY, nx2, ny2)


def estimate(method: str, W, T, X, Y, rho: float | None = None):
    """Batched estimates of ``SM(x_k, y_k)`` for ``s`` draws.

    Parameters
    ----------
    method : ``"trig"``, ``"favor"`` (``SM^{++}``), ``"favor1"`` (one-sided), ``"hybrid"``
        (angular) or ``"ngauss"`` (normalised Gaussian hybrid)
    W : ndarray (s, m, d); T : ndarray (s, n, d) or None (hybrids only; for ``"ngauss"``
        rows ``~ N(0, sigma^2 I)``)
    X, Y : ndarray (k, d), the pairs
    rho : float
        ``1 - exp(-2 sigma^2 r^2)`` (``"ngauss"`` only).

    Returns
    -------
    ndarray (s, k)
    """
    nx2, ny2 = np.sum(X * X, axis=1), np.sum(Y * Y, axis=1)  # (k,)
    PX, PY = project(W, X), project(W, Y)  # (s, k, m)
    if method == "trig":
        return trig_estimate(PX, PY, nx2, ny2)
    if method == "favor":
        return favor_pp_estimate(PX, PY, nx2, ny2)
    if method == "favor1":
        return favor_one_sided_estimate(PX, PY, nx2, ny2)
    if method == "hybrid":
        return hybrid_estimate(PX, PY, project(T, X), project(T, Y), nx2, ny2)
    if method == "ngauss":
        if rho is None:
            raise ValueError("method 'ngauss' needs rho.")
        return normalized_gauss_estimate(PX, PY, project(T, X), project(T, Y), nx2, ny2, rho)
    raise ValueError(f"unknown method {method!r}.")


def claim_verdict(ok: bool) -> str:
    return "yes" if ok else "no"
