"""Test helpers for the softmax-family feature maps: data, z-scores, reference formulas.

Everything here is written from the formulas of the FAVOR# paper (with the corrections
of docs/derivations/favor_sharp.md), independently of ``kernelkit.features.softmax``, so tests
compare the library against the mathematics and not against itself.
"""

from __future__ import annotations

import numpy as np

import kernelkit.features as features
from kernelkit.features import (
    ADERF,
    GERF,
    SADERF,
    SDERF,
    FeatureMap,
    HyperbolicRF,
    PositiveRF,
    TrigRF,
)

#: every public feature-map class of kernelkit.features (all families), for the suites
#: that check the shared contract on each
PUBLIC_MAPS = [
    getattr(features, name)
    for name in features.__all__
    if isinstance(getattr(features, name), type)
    and issubclass(getattr(features, name), FeatureMap)
    and name not in ("FeatureMap", "DotProductFeatureMap")
]

#: small configurations of the maps whose output is large by default (the hybrids' output
#: grows like n_features * n_lambda * d): few features, so that the Monte Carlo tests
#: have power and the sweeps over every map stay fast
SMALL_CONFIGS = {
    "AngularHybridRF": {"n_features": 4, "n_lambda": 2},
    "GaussianHybridRF": {"n_features": 4, "n_lambda": 2},
    "NormalizedGaussianHybridRF": {"n_features": 4, "n_lambda": 2},
    "ClusteredHybridRF": {"n_features": 8, "n_clusters": 2},
}

#: |z| bound for the entries of one Monte-Carlo estimate (entries are correlated, so a
#: per-pair bound rather than a chi-square test; two-sided p ~ 7e-6 per entry).
Z_BOUND = 4.5

ALL_MAPS = [TrigRF, PositiveRF, HyperbolicRF, GERF, SADERF, ADERF, SDERF]
POSITIVE_MAPS = [PositiveRF, HyperbolicRF, GERF, SADERF, ADERF, SDERF]
DERF_MAPS = [PositiveRF, GERF, SADERF, ADERF, SDERF]
FITTED_MAPS = [GERF, SADERF, ADERF, SDERF]
ALPHA = {"softmax": 0.0, "gaussian": -0.5}


def rotation(d: int, seed: int = 123) -> np.ndarray:
    """A fixed orthogonal matrix (d, d)."""
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def make_xy(seed: int, n: int = 40, m: int = 40, d: int = 6, scale: float = 0.6):
    """Heterogeneous, correlated point sets with E|x|^2 = E|y - mu|^2 = scale^2.

    x ~ N(0, R diag(s) R^T), y ~ N(mu, R diag(s[::-1]) R^T): the per-coordinate scales
    differ between the sets (so SADERF/ADERF differ from GERF) and R mixes the
    coordinates (so ADERF differs from SADERF and SDERF from GERF).
    """
    rng = np.random.default_rng(seed)
    s = np.linspace(0.25, 1.5, d)
    s = s / np.sqrt(np.sum(s * s))  # |s| = 1
    R = rotation(d)
    X = (rng.standard_normal((n, d)) * s) @ R.T * scale
    mu = np.full(d, 0.35 / np.sqrt(d))
    Y = mu + (rng.standard_normal((m, d)) * s[::-1]) @ R.T * scale
    return X, Y


def exact_kernel(X, Y, kernel: str = "softmax", lengthscale: float = 1.0) -> np.ndarray:
    """Direct double loop for exp(x.y / l^2) or exp(-|x-y|^2 / (2 l^2))."""
    X = np.asarray(X, dtype=np.float64) / lengthscale
    Y = np.asarray(Y, dtype=np.float64) / lengthscale
    out = np.empty((X.shape[0], Y.shape[0]))
    for i in range(X.shape[0]):
        for j in range(Y.shape[0]):
            if kernel == "softmax":
                out[i, j] = np.exp(X[i] @ Y[j])
            else:
                out[i, j] = np.exp(-0.5 * np.sum((X[i] - Y[j]) ** 2))
    return out


def zscores(estimate, exact, variance, rounding: float = 1e-10) -> np.ndarray:
    """(estimate - exact) / SE, with a floating-point floor ``rounding * |exact|`` on the SE
    (a near-deterministic estimator, e.g. x = 0 with A ~ 0, has variance ~ 1e-80)."""
    exact = np.asarray(exact)
    var = np.asarray(variance) + (rounding * exact) ** 2
    return (np.asarray(estimate) - exact) / np.sqrt(var)


def assert_unbiased(
    estimate, exact, variance, *, bound: float = Z_BOUND, power: float = 0.05, label: str = ""
):
    """|z| < bound per entry, and the test has power: SE / |K| < ``power``.

    The power check keeps the test from passing vacuously with a huge variance; with
    ``power = 0.05`` and ``bound = 4.5`` any relative bias above ~25 % is detected.
    """
    estimate, exact, variance = (
        np.asarray(a, dtype=np.float64) for a in (estimate, exact, variance)
    )
    assert np.all(np.isfinite(estimate)), f"{label}: non-finite estimate"
    assert np.all(variance >= 0), f"{label}: negative variance"
    rel_se = np.sqrt(variance) / np.abs(exact)
    assert rel_se.max() < power, f"{label}: test has no power, max SE/K = {rel_se.max():.3g}"
    z = zscores(estimate, exact, variance)
    assert np.abs(z).max() < bound, f"{label}: max |z| = {np.abs(z).max():.2f}\n{z}"


def single_products(fm, X, Y) -> np.ndarray:
    """Per-projection products f1(w_m, x_i) f2(w_m, y_j), shape (n, m, M), from transform.

    ``transform`` carries the 1/sqrt(M) normalisation, so M * P[i, k] * S[j, k] is one
    product; HyperbolicRF has two output columns (+w, -w) per projection.
    """
    P = np.asarray(fm.transform(X), dtype=np.float64)
    S = np.asarray(fm.transform_y(Y), dtype=np.float64)
    M = fm.n_features
    g = M * P[:, None, :] * S[None, :, :]  # (n, m, D)
    if g.shape[-1] == 2 * M:
        g = g[..., :M] + g[..., M:]
    assert g.shape[-1] == M
    return g


def mc_mean_z(g, exact) -> np.ndarray:
    """z-score of the sample mean of products g (..., M) with the empirical SE."""
    M = g.shape[-1]
    return (g.mean(-1) - exact) / (g.std(-1, ddof=1) / np.sqrt(M))


def mc_variance_z(g, variance_single) -> tuple[np.ndarray, np.ndarray]:
    """z-score of the sample variance of g (..., M) against ``variance_single``.

    SE of the sample variance ~ sqrt((mu4 - s^4) / M) with the empirical 4th central
    moment. Returns (z, relative SE).
    """
    M = g.shape[-1]
    c = g - g.mean(-1, keepdims=True)
    s2 = (c * c).mean(-1) * M / (M - 1)
    mu4 = (c**4).mean(-1)
    se = np.sqrt(np.maximum(mu4 - s2 * s2, 0.0) / M)
    return (s2 - variance_single) / se, se / variance_single


# ---------------------------------------------------------------- reference formulas
def textbook_a_star(phi):
    """Lemma A.1 as printed: (1 - 2 phi - sqrt((2 phi + 1)^2 + 8 phi)) / 16."""
    phi = np.asarray(phi, dtype=np.float64)
    return (1.0 - 2.0 * phi - np.sqrt((2.0 * phi + 1.0) ** 2 + 8.0 * phi)) / 16.0


def derf_params(fm):
    """General-DERF parameters (Thm 4.1) of a fitted diagonal-DERF map.

    Returns (Amat, B1, B2, C1, C2, log D) with B_k = (I - 4A)^{1/2} B~_k and
    C_k = -1/2 B_k^T (I - 4A)^{-1} B_k, log D = 1/4 log det(I - 4A).
    """
    a = np.asarray(fm.A_, dtype=np.float64)
    d = a.size
    eye = np.eye(d)
    Bx = eye if fm.B_x_ is None else np.asarray(fm.B_x_)
    By = eye if fm.B_y_ is None else np.asarray(fm.B_y_)
    root = np.diag(np.sqrt(1.0 - 4.0 * a))
    inv = np.diag(1.0 / (1.0 - 4.0 * a))
    B1, B2 = root @ Bx, root @ By
    C1 = -0.5 * B1.T @ inv @ B1
    C2 = -0.5 * B2.T @ inv @ B2
    logD = 0.25 * np.sum(np.log(1.0 - 4.0 * a))
    return np.diag(a), B1, B2, C1, C2, logD


def derf_log_features(Amat, B, C, logD, W, X, alpha=0.0):
    """log f(w_m, x_i) = log D + w^T A w + w^T B x + x^T C x (+ alpha |x|^2), (n, M)."""
    quad_w = np.einsum("md,de,me->m", W, Amat, W)
    lin = X @ B.T @ W.T
    quad_x = np.einsum("nd,de,ne->n", X, C, X) + alpha * np.sum(X * X, axis=1)
    return logD + quad_w[None, :] + lin + quad_x[:, None]


def derf_log_m2(Amat, B1, B2, C1, C2, logD, X, Y, alpha=0.0):
    """FAVOR# eq. (15), log E[(f1 f2)^2] for the general DERF, (n, m)."""
    d = Amat.shape[0]
    eye = np.eye(d)
    inv8 = np.linalg.inv(eye - 8.0 * Amat)
    _, logdet8 = np.linalg.slogdet(eye - 8.0 * Amat)
    qx = np.einsum("nd,de,ne->n", X, C1 + B1.T @ inv8 @ B1, X)
    qy = np.einsum("nd,de,ne->n", Y, C2 + B2.T @ inv8 @ B2, Y)
    cross = X @ B1.T @ inv8 @ B2 @ Y.T
    out = 4.0 * logD - 0.5 * logdet8 + 2.0 * qx[:, None] + 2.0 * qy[None, :] + 4.0 * cross
    nx, ny = np.sum(X * X, axis=1), np.sum(Y * Y, axis=1)
    return out + 2.0 * alpha * (nx[:, None] + ny[None, :])


def gerf_log_m2(A, X, Y, alpha=0.0):
    """FAVOR# eq. (12-13), GERF log second moment, (n, m)."""
    d = X.shape[1]
    nx, ny = np.sum(X * X, axis=1), np.sum(Y * Y, axis=1)
    s2 = nx[:, None] + ny[None, :] + 2.0 * X @ Y.T  # |x + y|^2
    out = (
        d * np.log((1.0 - 4.0 * A) / np.sqrt(1.0 - 8.0 * A))
        + 2.0 * (1.0 - 4.0 * A) / (1.0 - 8.0 * A) * s2
        - nx[:, None]
        - ny[None, :]
    )
    return out + 2.0 * alpha * (nx[:, None] + ny[None, :])


def gerf_objective_1d(A, X, Y):
    """Lbar_GE(A) = d [log(1-4A) - log(1-8A)/2 + phi/(1-8A)] + 2 d mu3 (FAVOR# Sec. 4, eq. 14)."""
    d = X.shape[1]
    phi = np.mean(np.sum((X[:, None, :] + Y[None, :, :]) ** 2, axis=-1)) / d
    mu3 = X.mean(0) @ Y.mean(0) / d
    A = np.asarray(A, dtype=np.float64)
    return d * (np.log(1 - 4 * A) - 0.5 * np.log(1 - 8 * A) + phi / (1 - 8 * A)) + 2 * d * mu3


def gauss_hermite_expectation(log_integrand, curvature, n_nodes: int = 120):
    """E_{w ~ N(0,1)}[exp(log_integrand(w))] by Gauss-Hermite quadrature.

    Nodes are scaled to width 1/sqrt(curvature) (the curvature of the Gaussian part of
    the integrand) so that sharply peaked integrands (a_l << 0) are resolved.
    ``log_integrand`` maps nodes (k,) to values (k,) or (k, ...) (vectorised over pairs).
    """
    t, wt = np.polynomial.hermite.hermgauss(n_nodes)
    c = np.sqrt(2.0 / curvature)
    om = c * t
    log_phi = -0.5 * om * om - 0.5 * np.log(2.0 * np.pi)
    vals = log_integrand(om)
    shape = (-1,) + (1,) * (np.ndim(vals) - 1)
    return c * np.sum(
        (wt * np.exp(t * t)).reshape(shape) * np.exp(vals + log_phi.reshape(shape)), axis=0
    )


def derf_moments_by_quadrature(fm, X, Y, alpha=0.0):
    """E[f1 f2] and E[(f1 f2)^2] per pair (n, m) for a diagonal-A DERF, by quadrature.

    With A diagonal the Thm 4.1 product f1 f2 = D^2 exp(sum_l (2 a_l w_l^2 + w_l u_l))
    exp(x^T C1 x + y^T C2 y), u = B1 x + B2 y, factorises over the coordinates of w.
    """
    Amat, B1, B2, C1, C2, logD = derf_params(fm)
    a = np.diag(Amat)
    U = (X @ B1.T)[:, None, :] + (Y @ B2.T)[None, :, :]  # (n, m, d)
    qx = np.einsum("nd,de,ne->n", X, C1, X) + alpha * np.sum(X * X, 1)
    qy = np.einsum("nd,de,ne->n", Y, C2, Y) + alpha * np.sum(Y * Y, 1)
    log1 = 2 * logD + qx[:, None] + qy[None, :]
    log2 = 2 * log1
    m1, m2 = np.exp(log1), np.exp(log2)
    for l in range(a.size):
        ul = U[..., l]
        m1 = m1 * gauss_hermite_expectation(
            lambda w, al=a[l], ul=ul: 2 * al * w[:, None, None] ** 2 + w[:, None, None] * ul,
            1.0 - 4.0 * a[l],
        )
        m2 = m2 * gauss_hermite_expectation(
            lambda w, al=a[l], ul=ul: 4 * al * w[:, None, None] ** 2 + 2 * w[:, None, None] * ul,
            1.0 - 8.0 * a[l],
        )
    return m1, m2


def product_log_moments(fm, X, Y, kmax: int = 4) -> list[np.ndarray]:
    """Exact log raw moments log E[g^k], k = 1..kmax, of one projection's product
    g = f1 f2 per pair (n, m), for the diagonal-A DERF maps (PositiveRF, GERF, SADERF,
    ADERF, SDERF) and HyperbolicRF; ``None`` for the other maps.

    DERF (Thm 4.1 with A diagonal, as in :func:`derf_moments_by_quadrature`):
    g = exp(log1) prod_l exp(2 a_l w_l^2 + w_l u_l), w ~ N(0, I), so
    E[g^k] = exp(k log1) prod_l (1 - 4 k a_l)^{-1/2} exp(k^2 u_l^2 / (2 (1 - 4 k a_l)))
    (finite for a_l < 1 / (4 k)). HyperbolicRF: g = exp(q_x + q_y) cosh(w.u), u = x + y,
    and cosh^k t = 2^{-k} sum_j C(k, j) e^{(2j - k) t}, E e^{c w.u} = e^{c^2 |u|^2 / 2}.
    """
    alpha = ALPHA[fm.kernel]
    if isinstance(fm, HyperbolicRF):
        from math import comb

        ls = float(fm.lengthscale)
        Xs, Ys = X / ls, Y / ls
        nx, ny = np.sum(Xs * Xs, 1), np.sum(Ys * Ys, 1)
        log_pre = (alpha - 0.5) * (nx[:, None] + ny[None, :])
        s2 = np.sum((Xs[:, None, :] + Ys[None, :, :]) ** 2, -1)
        out = []
        for k in range(1, kmax + 1):
            terms = [
                np.log(comb(k, j)) + 0.5 * (2 * j - k) ** 2 * s2 - k * np.log(2.0)
                for j in range(k + 1)
            ]
            out.append(k * log_pre + np.logaddexp.reduce(terms, axis=0))
        return out
    if not isinstance(fm, (PositiveRF, GERF, SADERF, ADERF, SDERF)):
        return None
    Amat, B1, B2, C1, C2, logD = derf_params(fm)
    a = np.diag(Amat)
    U = (X @ B1.T)[:, None, :] + (Y @ B2.T)[None, :, :]
    qx = np.einsum("nd,de,ne->n", X, C1, X) + alpha * np.sum(X * X, 1)
    qy = np.einsum("nd,de,ne->n", Y, C2, Y) + alpha * np.sum(Y * Y, 1)
    log1 = 2 * logD + qx[:, None] + qy[None, :]
    out = []
    for k in range(1, kmax + 1):
        c = 1.0 - 4.0 * k * a
        assert np.all(c > 0), f"E[g^{k}] is infinite (a_l >= 1/{4 * k})"
        out.append(k * log1 + np.sum(k * k * U * U / (2 * c) - 0.5 * np.log(c), -1))
    return out


def sample_variance_se(fm, X, Y, M: int):
    """Exact standard error of the sample variance of M i.i.d. products per pair (n, m),
    or ``None`` for maps without :func:`product_log_moments`.

    Var(s^2) = mu4 / M - sigma^4 (M - 3) / (M (M - 1)) with the exact central moments,
    not the sample's: with heavy-tailed products (finite eighth moment only for
    a_l < 1/32) the sample mu4 is itself heavy-tailed, mostly too small, and made the
    z-scores of some draws too large. The central moments of r = g / K come from
    l_k = log E[r^k] without cancellation at small variances: E[(r - 1)^2] = expm1(l_2),
    E[(r - 1)^4] = sum_k C(4, k) (-1)^k expm1(l_k) (the binomial sum of ones is zero).
    NaN where rounding leaves mu4 unknown. The exact m1 must be the map's kernel
    (checked, rtol 1e-9, so that the moments are the map's); the map's ``variance`` is
    not used, so that a z-score built on this checks it.
    """
    logm = product_log_moments(fm, X, Y)
    if logm is None:
        return None
    K = np.exp(logm[0])
    np.testing.assert_allclose(K, np.asarray(fm.expected_kernel(X, Y)), rtol=1e-9)
    e = [np.expm1(logm[k - 1] - k * logm[0]) for k in (1, 2, 3, 4)]  # E[r^k] - 1
    var = e[1]  # e[0] = 0: E r = 1
    mu4 = e[3] - 4 * e[2] + 6 * e[1] - 4 * e[0]
    # each l_k carries a rounding error of about eps (|log m_k| + k |log m_1| + 4) (the
    # logs of the binomials and of 2 in HyperbolicRF's), mu4 up to 16 of them: where mu4
    # is not 100 times above that (relative variances below ~1e-7: y ~ -x for
    # HyperbolicRF), or below var^2 (mu4 >= var^2 always), its SE is NaN (no power)
    eps = np.finfo(np.float64).eps
    err = (
        16 * eps * np.max([np.abs(logm[k - 1]) + k * np.abs(logm[0]) + 4 for k in (1, 2, 3, 4)], 0)
    )
    lost = (mu4 < 100 * err) | (mu4 < var * var)
    mu4, var = np.where(lost, np.nan, mu4), np.where(lost, np.nan, var)
    return K * K * np.sqrt(mu4 / M - var * var * (M - 3) / (M * (M - 1)))
