"""Overflow-safe hybrid estimates and variances at large norms.

References are the same closed forms evaluated with 50-digit ``mpmath`` arithmetic, so
the float64 code must be finite and accurate wherever the exact value is representable,
``inf`` only where it exceeds the float64 range, and never NaN.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kernelkit.features import (
    AngularHybridRF,
    ClusteredHybridRF,
    ComplexExponentialRF,
    GaussianHybridRF,
)

mp = pytest.importorskip("mpmath")
mp.mp.dps = 50
BIG = mp.mpf("1.7e308")


def _mpv(v):
    return [mp.mpf(float(t)) for t in v]


def _dot(a, b):
    return mp.fsum(i * j for i, j in zip(a, b, strict=True))


def _angular_ref(x, y, m, n, alpha):
    """Thm 3.1 (shared W) with Lemma 2.2 / 3.2, Gram angles snapped as in the library."""
    x, y = _mpv(x), _mpv(y)
    nx, ny, xy = _dot(x, x), _dot(y, y), _dot(x, y)
    sm = mp.e**xy
    z2, d2 = nx + ny + 2 * xy, nx + ny - 2 * xy
    cos = xy / mp.sqrt(nx * ny)
    cos = 1 if cos > 1 - 1e-15 else (-1 if cos < -1 + 1e-15 else cos)
    t = mp.acos(cos) / mp.pi
    e2, f2 = t * (t - t / n + mp.mpf(1) / n), (1 - t) * (1 - t + t / n)
    g = t * (1 - t) * (1 - mp.mpf(1) / n)
    pp = sm**2 * mp.e**z2 * (1 - mp.e ** (-z2)) ** 2 / (2 * m)
    tr = mp.e ** (nx + ny) * (1 - mp.e ** (-d2)) ** 2 / (2 * m)
    out = e2 * pp + f2 * tr - mp.mpf(2) / m * sm**2 * (1 - mp.cos(nx - ny)) * g
    return out * mp.e ** (2 * alpha * (nx + ny))


def _gaussian_hybrid_ref(x, y, m, n, c, alpha):
    """Thm 3.1 (shared W) with the moments of the antithetic positive Gaussian coefficient
    (Sec. 2.4): lambda = e^{-|x+y|^2 / (2 c^2)}, Var lambda_hat = e^{(|x-y|^2 - |x+y|^2) / c^2}
    (1 - e^{-|x-y|^2 / c^2})^2 / (2n)."""
    x, y = _mpv(x), _mpv(y)
    nx, ny, xy = _dot(x, x), _dot(y, y), _dot(x, y)
    sm = mp.e**xy
    z2, d2 = nx + ny + 2 * xy, nx + ny - 2 * xy
    lam = mp.e ** (-z2 / (2 * c * c))
    v = mp.e ** ((d2 - z2) / (c * c)) * (1 - mp.e ** (-d2 / (c * c))) ** 2 / (2 * n)
    e2, f2, g = lam * lam + v, (1 - lam) ** 2 + v, lam * (1 - lam) - v
    pp = sm**2 * mp.e**z2 * (1 - mp.e ** (-z2)) ** 2 / (2 * m)
    tr = mp.e ** (nx + ny) * (1 - mp.e ** (-d2)) ** 2 / (2 * m)
    out = e2 * pp + f2 * tr - mp.mpf(2) / m * sm**2 * (1 - mp.cos(nx - ny)) * g
    return out * mp.e ** (2 * alpha * (nx + ny))


def _ce_ref(x, y, A_diag, m, alpha):
    """E (Re g)^2 = (Re E g^2 + E|g|^2) / 2 for a complex diagonal A (Lemma 2.4)."""
    x, y = _mpv(x), _mpv(y)
    A = [mp.mpc(complex(v)) for v in A_diag]
    a = [ak * xk for ak, xk in zip(A, x, strict=True)]
    b = [yk / ak for ak, yk in zip(A, y, strict=True)]
    eg2 = mp.e ** (mp.fsum(u * u for u in a) + mp.fsum(u * u for u in b) + 4 * _dot(a, b))
    eabs = mp.e ** (
        mp.fsum(abs(u) ** 2 for u in a)
        + mp.fsum(abs(u) ** 2 for u in b)
        + 4 * mp.fsum(mp.re(u) * mp.re(v) for u, v in zip(a, b, strict=True))
    )
    sm2 = mp.e ** (2 * _dot(x, y))
    return ((mp.re(eg2) + eabs) / 2 - sm2) / m * mp.e ** (2 * alpha * (_dot(x, x) + _dot(y, y)))


def _gaussian_mixture_ref(x, y, A_flat, m, n, tau):
    """Gaussian-mixture MSE (ClusteredHybridRF.variance docstring), hyperbolic default."""
    x, y = _mpv(x), _mpv(y)

    def add(u, v):
        return [i + j for i, j in zip(u, v, strict=True)]

    def sub(u, v):
        return [i - j for i, j in zip(u, v, strict=True)]

    P = len(A_flat)
    a = [[mp.mpf(float(ak)) * xk for ak, xk in zip(Ap, x, strict=True)] for Ap in A_flat]
    b = [[yk / mp.mpf(float(ak)) for ak, yk in zip(Ap, y, strict=True)] for Ap in A_flat]
    s = [_dot(a[p], a[p]) + _dot(b[p], b[p]) for p in range(P)]
    c = [add(a[p], b[p]) for p in range(P)]
    e = [sub(a[p], b[p]) for p in range(P)]
    G = [
        [
            mp.e ** (-(s[p] + s[q]) / 2 + _dot(add(c[p], c[q]), add(c[p], c[q])) / 2)
            for q in range(P)
        ]
        for p in range(P)
    ]
    nx, ny, z = _dot(x, x), _dot(y, y), add(x, y)
    G00 = mp.e ** (-(nx + ny)) * (mp.e ** (2 * _dot(z, z)) + 1) / 2
    G0 = [
        mp.e ** (-(nx + ny) / 2 - s[p] / 2)
        * (
            mp.e ** (_dot(add(c[p], z), add(c[p], z)) / 2)
            + mp.e ** (_dot(sub(c[p], z), sub(c[p], z)) / 2)
        )
        / 2
        for p in range(P)
    ]
    lam = [mp.e ** (-_dot(c[p], c[p]) / (2 * tau**2)) for p in range(P)]
    H = [
        [
            mp.e
            ** (-(s[p] + s[q]) / tau**2 + _dot(add(e[p], e[q]), add(e[p], e[q])) / (2 * tau**2))
            for q in range(P)
        ]
        for p in range(P)
    ]
    L = [[lam[p] * lam[q] + (H[p][q] - lam[p] * lam[q]) / n for q in range(P)] for p in range(P)]
    ew00 = 1 - 2 * mp.fsum(lam) + mp.fsum(L[p][q] for p in range(P) for q in range(P))
    total = (
        ew00 * G00
        + 2 * mp.fsum((lam[p] - mp.fsum(L[p])) * G0[p] for p in range(P))
        + mp.fsum(L[p][q] * G[p][q] for p in range(P) for q in range(P))
    )
    return (total - mp.e ** (2 * _dot(x, y))) / m


def _points(scale, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(4, d))
    X *= scale / np.linalg.norm(X, axis=1, keepdims=True)
    Y = -0.9 * X[::-1] + 0.1 * rng.normal(size=(4, d))  # theta near pi, unequal norms
    Y[:2] = 0.95 * X[:2]  # theta = 0, unequal norms
    return X, Y


def _check_against(V, ref):
    """V finite and within 1e-9 where ref is representable, inf where it is not."""
    assert not np.any(np.isnan(V))
    n_finite = 0
    for (i, j), r in np.ndenumerate(ref):
        if r > BIG:
            assert V[i, j] == np.inf, (i, j, V[i, j], r)
        else:
            assert np.isfinite(V[i, j]), (i, j, r)
            assert abs(V[i, j] - float(r)) <= 1e-9 * abs(float(r)) + 1e-300, (i, j, V[i, j], r)
            n_finite += 1
    return n_finite


@pytest.mark.parametrize("scale", [3.0, 10.0, 20.0])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_angular_variance_log_space(scale, kernel):
    X, Y = _points(scale)
    fm = AngularHybridRF(8, 4, kernel=kernel, random_state=0).fit(X, Y=Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / invalid-value warnings either
        V = fm.variance(X, Y)
    alpha = 0.0 if kernel == "softmax" else -0.5
    ref = np.array([[_angular_ref(x, y, 8, 4, alpha) for y in Y] for x in X], dtype=object)
    _check_against(V, ref)


@pytest.mark.parametrize("scale", [3.0, 10.0, 20.0, 30.0])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_gaussian_hybrid_variance_log_space(scale, kernel):
    """Positive coefficient features: Var lambda_hat = e^{-4 x.y / c^2} (...) overflows for
    x.y << 0 (near theta = pi), and lambda^2 = e^{-|x+y|^2 / c^2} underflows for x.y >> 0
    (near theta = 0) where SM^{++}'s MSE is huge. From E lambda_hat^2 in floating point they
    gave inf - inf (a NaN that the clip turned into a variance of 0) resp. a dropped term
    (a variance of 0.02 instead of 1e268)."""
    X, Y = _points(scale)
    c = 1.3
    fm = GaussianHybridRF(8, 4, kernel=kernel, lambda_bandwidth=c, random_state=0).fit(X, Y=Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        V = fm.variance(X, Y)
    alpha = 0.0 if kernel == "softmax" else -0.5
    ref = np.array(
        [[_gaussian_hybrid_ref(x, y, 8, 4, c, alpha) for y in Y] for x in X], dtype=object
    )
    n_finite = _check_against(V, ref)
    assert n_finite >= 4 or (kernel == "softmax" and scale > 10)  # else the MSE overflows


@pytest.mark.parametrize("scale", [3.0, 20.0, 40.0])
def test_complex_exponential_variance_log_space(scale):
    """Gaussian kernel, complex diagonal A: the MSE is small and finite although the
    softmax-scale second moments overflow (previously inf or NaN from inf * 0)."""
    X, Y = _points(scale)
    A = np.array([1.2j, 0.8, 1.0 + 0.2j, 0.9])
    for kernel, alpha in (("gaussian", -0.5), ("softmax", 0.0)):
        fm = ComplexExponentialRF(8, A=A, kernel=kernel, random_state=0).fit(X, Y=Y)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            V = fm.variance(X, Y)
        ref = np.array([[_ce_ref(x, y, A, 8, alpha) for y in Y] for x in X], dtype=object)
        assert _check_against(V, ref) >= 4  # finite entries are present and checked


@pytest.mark.parametrize("scale", [3.0, 20.0, 40.0])
def test_log_relative_variance_where_variance_and_kernel_leave_the_range(scale):
    """Gaussian kernel, large norms: the MSE and K^2 under- (or over-) flow together while
    their ratio is moderate. log_relative_variance was log(0) - 2 log(K) = -inf ('exact')
    or log(0) - 2 log(0) = NaN; now it is formed from the log-space MSE."""
    X, Y = _points(scale)
    A = np.array([1.2j, 0.8, 1.0 + 0.2j, 0.9])
    alpha = -0.5
    maps = [
        (ComplexExponentialRF(8, A=A, kernel="gaussian", random_state=0), _ce_ref, (A, 8, alpha)),
        (AngularHybridRF(8, 4, kernel="gaussian", random_state=0), _angular_ref, (8, 4, alpha)),
        (
            GaussianHybridRF(8, 4, kernel="gaussian", lambda_bandwidth=1.3, random_state=0),
            _gaussian_hybrid_ref,
            (8, 4, 1.3, alpha),
        ),
    ]
    for fm, ref_fn, args in maps:
        fm.fit(X, Y=Y)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            lrv = fm.log_relative_variance(X, Y)
        assert not np.any(np.isnan(lrv)), type(fm).__name__
        for (i, j), v in np.ndenumerate(lrv):
            ref = ref_fn(X[i], Y[j], *args)
            x, y = _mpv(X[i]), _mpv(Y[j])
            log_k = _dot(x, y) + alpha * (_dot(x, x) + _dot(y, y))
            if ref <= 0:
                assert v == -np.inf, (type(fm).__name__, i, j, v)
                continue
            want = float(mp.log(ref) - 2 * log_k)
            # logs of quantities ~ e^{+-1600}: absolute rounding ~ 1600 eps
            assert abs(v - want) <= 1e-9 * max(1.0, abs(want)), (type(fm).__name__, i, j, v, want)


@pytest.mark.parametrize("scale", [0.5, 10.0])
def test_clustered_gaussian_mixture_variance_log_space(scale):
    X, Y = _points(scale)
    fm = ClusteredHybridRF(8, n_clusters=2, mixture="gaussian", n_lambda=2, random_state=0).fit(
        X, Y=Y
    )
    V = fm.variance(X, Y)
    Af = fm.A_.reshape(-1, X.shape[1])
    ref = np.array(
        [[_gaussian_mixture_ref(x, y, Af, 8, 2, 1.0) for y in Y] for x in X], dtype=object
    )
    _check_against(V, ref)


def test_hybrid_estimate_no_nan_when_trig_scale_overflows():
    """|x| = 26.8, y = -x: lambda_hat = 1, SM^{++} is exact, SM = e^{-718} is subnormal but
    representable while the trig part's scale e^{|x|^2} = e^{718} overflows. The mixture
    drops the zero-weight trig part (no 0 * inf = NaN) and returns SM exactly."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 5))
    x *= 26.8 / np.linalg.norm(x)
    for Y in (-x, x):
        fm = AngularHybridRF(8, 4, random_state=0).fit(x, Y=Y)
        K = fm.approx_kernel(x, Y)
        with np.errstate(over="ignore"):
            exact = np.exp(x @ Y.T)  # e^{-718} (subnormal) resp. e^{718} = inf
        if np.isfinite(exact[0, 0]):
            np.testing.assert_allclose(K, exact, rtol=1e-6)  # subnormal: ~1e-8 relative
        else:
            assert K[0, 0] == np.inf
        assert fm.variance(x, Y)[0, 0] == 0.0
    # the zero-one clustered and real CE variances: expm1(l) K^2 / m in log space
    X, Y = _points(30.0)
    fm = ComplexExponentialRF(
        8, A=np.array([1.1, 0.9, 1.0, 1.2]), kernel="gaussian", random_state=0
    ).fit(X, Y=Y)
    V = fm.variance(X, Y)
    a, b = X * fm.A_.diagonal(), Y / fm.A_.diagonal()
    ell = ((a[:, None] + b[None]) ** 2).sum(-1)
    log_kg = -((X[:, None] - Y[None]) ** 2).sum(-1) / 2
    with np.errstate(over="ignore"):
        expected = np.exp(2 * log_kg + ell + np.log(-np.expm1(-ell)) - np.log(8))
    np.testing.assert_allclose(V, expected, rtol=1e-9)
    assert np.isfinite(V).any() and not np.isnan(V).any()
