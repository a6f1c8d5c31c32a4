"""Unbiasedness of every softmax-family feature map against the exact kernel (MC, z-scores).

Setting: d = 6, 2e5 features, |x|, |y| <~ 1, every map and the Gaussian
versions, |K_hat - K| < 4.5 SE with SE from the map's own analytic variance. The printed
(wrong) forms of TrigRF (erratum a) and GERF (erratum b) must be caught by the same
machinery.
"""

from __future__ import annotations

import numpy as np
import pytest
from favor_helpers import (
    ALL_MAPS,
    Z_BOUND,
    assert_unbiased,
    exact_kernel,
    make_xy,
    mc_mean_z,
)

from kernelkit.features import GERF, TrigRF
from kernelkit.kernels import gaussian_kernel, scaled_softmax_kernel

M_BIG = 200_000
CASES = [("softmax", 1.0), ("gaussian", 1.0), ("gaussian", 1.7), ("softmax", 0.6)]
SEEDS = {case: 11 + i for i, case in enumerate(CASES)}  # independent draws per case


def _name(cls):
    return cls.__name__


def _library_kernel(X, Y, kernel, lengthscale):
    if kernel == "softmax":
        return scaled_softmax_kernel(X / lengthscale, Y / lengthscale, 0.0)
    return gaussian_kernel(X, Y, lengthscale)


@pytest.mark.parametrize("kernel,lengthscale", CASES)
@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_unbiased_against_exact_kernel(cls, kernel, lengthscale, backend):
    X, Y = make_xy(0)
    X, Y = X * lengthscale, Y * lengthscale  # so that |x / l| <~ 1
    fm = cls(
        n_features=M_BIG,
        kernel=kernel,
        lengthscale=lengthscale,
        random_state=SEEDS[kernel, lengthscale],
    )
    fm.fit(backend.asarray(X), Y=backend.asarray(Y))
    Xe, Ye = backend.asarray(X[:4]), backend.asarray(Y[:5])
    K_hat = backend.to_numpy(fm.approx_kernel(Xe, Ye))
    V = backend.to_numpy(fm.variance(Xe, Ye))
    K = _library_kernel(X[:4], Y[:5], kernel, lengthscale)
    np.testing.assert_allclose(K, exact_kernel(X[:4], Y[:5], kernel, lengthscale), rtol=1e-12)
    assert K_hat.shape == (4, 5)
    assert_unbiased(K_hat, K, V, label=f"{cls.__name__} {kernel} l={lengthscale}")


@pytest.mark.parametrize("cls", ALL_MAPS, ids=_name)
def test_unbiased_with_orthogonal_projections(cls):
    """Block-orthogonal rows are marginally N(0, I): still unbiased (SE over 200 seeds)."""
    X, Y = make_xy(1)
    Xe, Ye = X[:3], Y[:3]
    est = np.stack(
        [
            cls(n_features=60, kernel="gaussian", sampler="orthogonal", random_state=s)
            .fit(X, Y=Y)
            .approx_kernel(Xe, Ye)
            for s in range(200)
        ]
    )  # (S, 3, 3)
    K = exact_kernel(Xe, Ye, "gaussian")
    se = est.std(0, ddof=1) / np.sqrt(est.shape[0])
    assert np.max(se / K) < 0.02
    z = (est.mean(0) - K) / se
    assert np.abs(z).max() < Z_BOUND, z


def test_approx_kernel_defaults_to_x_and_is_symmetric_for_symmetric_maps():
    X, _ = make_xy(2, n=5)
    for cls in ALL_MAPS:
        fm = cls(n_features=64, random_state=0).fit(X)
        K1 = fm.approx_kernel(X)
        np.testing.assert_allclose(K1, fm.approx_kernel(X, X), rtol=1e-13)
        if fm.symmetric:
            np.testing.assert_allclose(K1, K1.T, rtol=1e-12)
            np.testing.assert_allclose(fm.transform(X), fm.transform_y(X), rtol=1e-13)


def test_estimate_is_feature_inner_product():
    """approx_kernel = transform @ transform_y^T where the raw features are representable."""
    X, Y = make_xy(3, n=6, m=7)
    for cls in ALL_MAPS:
        for kernel in ("softmax", "gaussian"):
            fm = cls(n_features=300, kernel=kernel, random_state=4).fit(X, Y=Y)
            np.testing.assert_allclose(
                fm.approx_kernel(X, Y),
                fm.transform(X) @ fm.transform_y(Y).T,
                rtol=1e-11,
                atol=1e-14,
                err_msg=f"{cls.__name__} {kernel}",
            )


# ------------------------------------------------------- printed forms must be detected
def _trig_products(fm, X, Y, printed: bool):
    """f1 f2 per projection from the paper's eq. (5-7); printed: cos(-w.y + theta)."""
    W, theta = fm.projection_, fm.offset_
    coef = 0.5 + {"softmax": 0.0, "gaussian": -0.5}[fm.kernel]
    f1 = np.sqrt(2) * np.exp(coef * np.sum(X * X, 1))[:, None] * np.cos(X @ W.T + theta)
    sign = -1.0 if printed else 1.0
    f2 = np.sqrt(2) * np.exp(coef * np.sum(Y * Y, 1))[:, None] * np.cos(sign * Y @ W.T + theta)
    return f1[:, None, :] * f2[None, :, :]  # (n, m, M)


def _gerf_products(W, A, X, Y, coef):
    """f1 f2 per projection for GERF with exponent coef |x|^2 (corrected -1/2, printed -1/4)."""
    d = X.shape[1]
    base = d / 4 * np.log(1 - 4 * A) + A * np.sum(W * W, 1)  # (M,)
    lx = base + np.sqrt(1 - 4 * A) * X @ W.T + coef * np.sum(X * X, 1)[:, None]
    ly = base + np.sqrt(1 - 4 * A) * Y @ W.T + coef * np.sum(Y * Y, 1)[:, None]
    return np.exp(lx[:, None, :] + ly[None, :, :])


def _pairs():
    # pairs with clearly non-zero x.y, |x|, |y| ~ 0.7 (K ~ 2)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((3, 6))
    X *= 0.75 / np.linalg.norm(X, axis=1, keepdims=True)
    Y = X[[1, 2, 0]] * 0.4 + X * 0.6
    return X, Y


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_trig_printed_form_is_detected_as_biased(kernel):
    X, Y = _pairs()
    fm = TrigRF(n_features=M_BIG, kernel=kernel, random_state=3).fit(X, Y=Y)
    K = exact_kernel(X, Y, kernel)
    good = _trig_products(fm, X, Y, printed=False)
    # the reference implementation of the formula agrees with the library ...
    np.testing.assert_allclose(good.mean(-1), fm.approx_kernel(X, Y), rtol=1e-10)
    # ... and passes the z-test, while the printed form fails it by a wide margin
    assert np.abs(mc_mean_z(good, K)).max() < Z_BOUND
    bad = _trig_products(fm, X, Y, printed=True)
    assert np.abs(mc_mean_z(bad, K)).max() > 20
    if kernel == "softmax":
        # printed form estimates e^{-x.y} (note erratum a)
        assert np.abs(mc_mean_z(bad, np.exp(-X @ Y.T))).max() < Z_BOUND


@pytest.mark.parametrize("A", [-0.3, 0.02])
def test_gerf_printed_form_is_detected_as_biased(A):
    X, Y = _pairs()
    fm = GERF(n_features=M_BIG, A=A, random_state=3).fit(X, Y=Y)
    K = exact_kernel(X, Y)
    good = _gerf_products(fm.projection_, A, X, Y, -0.5)
    np.testing.assert_allclose(good.mean(-1), fm.approx_kernel(X, Y), rtol=1e-10)
    assert np.abs(mc_mean_z(good, K)).max() < Z_BOUND
    bad = _gerf_products(fm.projection_, A, X, Y, -0.25)
    assert np.abs(mc_mean_z(bad, K)).max() > 20
    # printed form estimates K e^{(|x|^2 + |y|^2)/4} (note erratum b)
    inflated = K * np.exp(0.25 * (np.sum(X * X, 1)[:, None] + np.sum(Y * Y, 1)[None, :]))
    assert np.abs(mc_mean_z(bad, inflated)).max() < Z_BOUND
