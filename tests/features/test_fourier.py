"""Random Fourier features (eq. 59 / 60) and the SORF sampler: unbiasedness, variance by
Monte Carlo, eq. 60 vs eq. 59, SORF bias decreasing with d, TrigRF cross-check, errors."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.features import TrigRF
from kernelkit.features.fourier import RandomFourierFeatures, rff_variance
from kernelkit.features.sampling import structured_hadamard_projection
from kernelkit.kernels import gaussian_kernel

Z = 4.5


def _points(n=6, d=3, scale=0.5, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)) * scale


# ------------------------------------------------------------------ unbiasedness
@pytest.mark.parametrize(
    "kw",
    [
        dict(n_features=200_000),
        dict(n_features=200_001),  # odd D: extra phase feature
        dict(n_features=100_000, complex=True),
        dict(n_features=100_000, complex=True, real_output=True),
        dict(n_features=200_000, sampler="orthogonal"),
    ],
    ids=["real", "real-odd", "complex", "complex-stacked", "orthogonal"],
)
def test_unbiased_against_exact_kernel(kw):
    X = _points(6, 3, 0.6, seed=1)
    ls = 1.3
    fm = RandomFourierFeatures(lengthscale=ls, random_state=5, **kw).fit(X)
    K = gaussian_kernel(X, X, lengthscale=ls)
    K_hat = fm.approx_kernel(X)
    se = np.sqrt(fm.variance(X))
    if kw["n_features"] % 2 and not kw.get("complex"):
        # odd D: the phase feature makes even the diagonal random (variance 1/(2 D^2))
        np.testing.assert_allclose(np.diag(fm.variance(X)), 0.5 / kw["n_features"] ** 2)
        assert np.all(np.abs(K_hat - K) < Z * se)
        return
    off = ~np.eye(6, dtype=bool)  # the diagonal is exact (variance 0)
    assert np.all(np.abs(K_hat - K)[off] < Z * se[off]), np.abs(K_hat - K)[off] / se[off]
    np.testing.assert_allclose(np.diag(K_hat), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.diag(fm.variance(X)), 0.0, atol=1e-15)


def test_gamma_is_sklearn_parametrisation():
    X = _points()
    a = RandomFourierFeatures(64, gamma=0.25, random_state=0).fit(X)
    b = RandomFourierFeatures(64, lengthscale=np.sqrt(2.0), random_state=0).fit(X)
    np.testing.assert_allclose(a.transform(X), b.transform(X), atol=1e-14)
    assert a.lengthscale_ == pytest.approx(np.sqrt(2.0))


# ------------------------------------------------------------------ variance vs MC
@pytest.mark.parametrize(
    "kw",
    [dict(n_features=4), dict(n_features=3), dict(n_features=2, complex=True)],
    ids=["real-even", "real-odd", "complex"],
)
def test_variance_matches_monte_carlo(kw):
    X = _points(3, 2, 0.7, seed=2)
    n_seeds = 4000
    est = np.empty((n_seeds, 3, 3))
    for s in range(n_seeds):
        est[s] = RandomFourierFeatures(random_state=s, **kw).fit(X).approx_kernel(X)
    var = RandomFourierFeatures(random_state=0, **kw).fit(X).variance(X)
    K = gaussian_kernel(X, X)
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        e = est[:, i, j]
        assert abs(e.mean() - K[i, j]) < Z * np.sqrt(var[i, j] / n_seeds)
        sq = (e - K[i, j]) ** 2  # E sq = Var (known mean)
        se = sq.std(ddof=1) / np.sqrt(n_seeds)
        assert abs(sq.mean() - var[i, j]) < Z * se, (sq.mean(), var[i, j], se)


def test_complex_mean_squared_modulus_matches_monte_carlo():
    X = _points(2, 2, 0.7, seed=3)
    D, n_seeds = 3, 4000
    K = gaussian_kernel(X, X)[0, 1]
    sq = np.empty(n_seeds)
    for s in range(n_seeds):
        P = RandomFourierFeatures(D, complex=True, random_state=s).fit(X).transform(X)
        sq[s] = abs(P[0] @ np.conj(P[1]) - K) ** 2
    fm = RandomFourierFeatures(D, complex=True, random_state=0).fit(X)
    v = fm.complex_variance(X)[0, 1]
    assert v == pytest.approx((1 - K**2) / D)
    assert abs(sq.mean() - v) < Z * sq.std(ddof=1) / np.sqrt(n_seeds)
    # the real part never has a larger mean squared error (user guide, Fourier features)
    assert fm.variance(X)[0, 1] <= v


def test_variance_formula_special_cases():
    k = np.linspace(0.0, 1.0, 11)
    D = 10
    np.testing.assert_allclose(rff_variance(k, D), (1 + k**4 - 2 * k**2) / D)
    # eq. 60 with D frequencies = eq. 59 with 2D features
    np.testing.assert_allclose(rff_variance(k, D, complex=True), rff_variance(k, 2 * D))
    assert np.all(rff_variance(k, 7) >= 0) and rff_variance(1.0, 8) == pytest.approx(0.0)
    # odd D: 3 cos/sin pairs and one phase feature cos(w.x + b)
    np.testing.assert_allclose(
        rff_variance(k, 7), (12 * (0.5 * (1 + k**4) - k**2) + 0.5 * (1 + k**4) + 0.5 - k**2) / 49
    )
    with pytest.raises(ValueError, match="part"):
        rff_variance(k, D, part="imag")


# ------------------------------------------------------------------ eq. 60 vs eq. 59
def test_eq60_real_part_equals_eq59_with_twice_the_features():
    X, Y = _points(7, 4, 0.8, seed=4), _points(5, 4, 0.8, seed=5)
    D = 16
    real = RandomFourierFeatures(2 * D, lengthscale=0.9, random_state=11).fit(X)
    cplx = RandomFourierFeatures(D, lengthscale=0.9, complex=True, random_state=11).fit(X)
    stacked = RandomFourierFeatures(
        D, lengthscale=0.9, complex=True, real_output=True, random_state=11
    ).fit(X)
    P = cplx.transform(X)
    assert P.shape == (7, D) and np.iscomplexobj(P)
    np.testing.assert_allclose(np.abs(P) ** 2, 1.0 / D, rtol=1e-12)  # |e^{i w x}|^2 / D
    np.testing.assert_allclose(stacked.transform(X), real.transform(X), atol=1e-15)
    K59 = real.approx_kernel(X, Y)
    np.testing.assert_allclose(np.real(P @ np.conj(cplx.transform(Y)).T), K59, atol=1e-13)
    np.testing.assert_allclose(cplx.approx_kernel(X, Y), K59, atol=1e-13)
    np.testing.assert_allclose(stacked.approx_kernel(X, Y), K59, atol=1e-13)
    assert stacked.output_dim == 2 * D and cplx.output_dim == D and real.output_dim == 2 * D


def test_eq59_layout_cos_then_sin():
    X = _points(4, 3, seed=6)
    fm = RandomFourierFeatures(10, lengthscale=2.0, random_state=0).fit(X)
    Z_ = X @ fm.projection_.T / 2.0
    expected = np.sqrt(2.0 / 10) * np.hstack([np.cos(Z_), np.sin(Z_)])
    np.testing.assert_allclose(fm.transform(X), expected, atol=1e-14)
    assert fm.projection_.shape == (5, 3)


# ------------------------------------------------------------------ TrigRF cross-check
def test_cross_check_against_trig_rf():
    """TrigRF(kernel="gaussian") is the cos(w.x + b) form (footnote 18): same target, and
    per feature its variance is never smaller than that of eq. 59."""
    X = _points(5, 3, 0.6, seed=7)
    M = 100_000
    rff = RandomFourierFeatures(M, random_state=1).fit(X)
    trig = TrigRF(n_features=M, kernel="gaussian", random_state=2).fit(X)
    K = gaussian_kernel(X, X)
    se = np.sqrt(rff.variance(X) + trig.variance(X)) + 1e-300
    off = ~np.eye(5, dtype=bool)
    assert np.all((np.abs(rff.approx_kernel(X) - trig.approx_kernel(X)) < Z * se)[off])
    assert np.all(rff.variance(X) <= trig.variance(X) + 1e-18)
    np.testing.assert_allclose(np.abs(trig.approx_kernel(X) - K)[off].max(), 0, atol=0.02)


# ------------------------------------------------------------------ SORF
def test_structured_hadamard_projection_structure():
    W = structured_hadamard_projection(20, 8, random_state=0)
    assert W.shape == (20, 8)
    np.testing.assert_allclose(W[:8] @ W[:8].T, 8 * np.eye(8), atol=1e-10)  # one block
    np.testing.assert_allclose(W[8:16] @ W[8:16].T, 8 * np.eye(8), atol=1e-10)
    np.testing.assert_array_equal(W, structured_hadamard_projection(20, 8, random_state=0))
    assert not np.allclose(W, structured_hadamard_projection(20, 8, random_state=1))
    # padded: d = 5 -> 8, the first 5 columns of a block; entries mean 0, variance 1
    V = structured_hadamard_projection(40_000, 5, random_state=2)
    assert V.shape == (40_000, 5)
    assert np.abs(V.mean(0)).max() < Z * np.sqrt(1 / 40_000) * 2
    np.testing.assert_allclose((V * V).mean(0), 1.0, atol=0.05)


@pytest.mark.slow
def test_sorf_bias_is_small_and_decreases_with_dimension():
    """SORF rows are only approximately Gaussian: RFF with SORF is biased, O(1/sqrt(d))."""
    bias = {}
    for d in (4, 16, 64):
        X = np.random.default_rng(d).normal(size=(6, d))
        X /= np.linalg.norm(X, axis=1, keepdims=True)  # |x - y| ~ sqrt(2)
        K = gaussian_kernel(X, X)
        est = np.mean(
            [
                RandomFourierFeatures(2**14, sampler="sorf", random_state=s).fit(X).approx_kernel(X)
                for s in range(6)
            ],
            axis=0,
        )
        iu = np.triu_indices(6, 1)
        bias[d] = float(np.abs(est - K)[iu].mean())
    assert bias[4] > bias[16] > bias[64], bias
    assert bias[64] < 0.015, bias


# ------------------------------------------------------------------ backends, errors
def test_dtypes_and_torch_backend():
    torch = pytest.importorskip("torch")
    X = _points(5, 3, seed=8)
    for kw in (dict(), dict(complex=True), dict(complex=True, real_output=True)):
        fm = RandomFourierFeatures(12, random_state=0, **kw).fit(X)
        P = fm.transform(X)
        P32 = fm.transform(X.astype(np.float32))
        assert P32.dtype == (np.complex64 if P.dtype == np.complex128 else np.float32)
        Pt = fm.transform(torch.tensor(X))
        np.testing.assert_allclose(Pt.numpy(), P, atol=1e-12)
        Kt = fm.approx_kernel(torch.tensor(X))
        np.testing.assert_allclose(Kt.numpy(), fm.approx_kernel(X), atol=1e-12)


def test_errors():
    X = _points()
    with pytest.raises(ValueError, match="sampler"):
        RandomFourierFeatures(8, sampler="qmc").fit(X)
    with pytest.raises(ValueError, match="gamma"):
        RandomFourierFeatures(8, gamma=-1.0).fit(X)
    with pytest.raises(ValueError, match="lengthscale"):
        RandomFourierFeatures(8, lengthscale=0.0).fit(X)
    with pytest.raises(ValueError):
        RandomFourierFeatures(0).fit(X)
    fm = RandomFourierFeatures(8, random_state=0).fit(X)
    with pytest.raises(ValueError, match="features"):
        fm.transform(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="Complex"):
        fm.transform(X.astype(complex))
    with pytest.raises(ValueError, match="NaN"):
        fm.transform(np.full((2, 3), np.nan))
    # a real map's complex variance is its variance
    np.testing.assert_array_equal(fm.complex_variance(X), fm.variance(X))
    assert fm.transform(np.zeros((0, 3))).shape == (0, 8)
