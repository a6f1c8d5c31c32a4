"""An independent tryout of the feature-map contract on data and cases the other sweeps
had not tried (heavy tails, clusters far from the origin, d = 1, ...). Each test is the
regression test of a defect it found; values are compared with the exact kernel, with
tolerances derived from the analytic variance, seeds fixed."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from favor_helpers import PUBLIC_MAPS

from kernelkit.estimators import RandomFeatures
from kernelkit.estimators._methods import make_feature_map
from kernelkit.features import (
    AngularHybridRF,
    GaussianHybridRF,
    HyperbolicRF,
    NormalizedGaussianHybridRF,
    SphericalRandomFeatures,
)
from kernelkit.kernels import gaussian_kernel

MACLAURIN = ("optimized_maclaurin", "random_maclaurin")


def _relative_mse(name, X, seeds):
    """Mean over seeds of the mean over distinct pairs of ``((k_hat - K) / K)^2``, the
    Gaussian kernel with 64 output columns (as ``RandomFeatures`` builds the map)."""
    K = gaussian_kernel(X, X)
    off = ~np.eye(len(X), dtype=bool)
    errs = []
    for s in seeds:
        fm = make_feature_map(name, kernel="gaussian", n_components=64, random_state=s).fit(X)
        errs.append(np.mean(((fm.approx_kernel(X, X) - K) / K)[off] ** 2))
    return float(np.mean(errs))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["far_cluster", "wide_d1"])
def test_auto_counts_the_truncation_bias_of_the_maclaurin_maps(case):
    """The Maclaurin maps estimate the series truncated at degree 10 without bias, not the
    kernel: on a cluster far from the origin (``x.y ~ 150``) or on wide 1-d data that
    series is ~0 times the kernel, with a tiny variance about it. ``method="auto"`` ranked
    them by that variance alone (estimates 0.03 and 2e-13) and chose OptimizedMaclaurin,
    whose estimate is then off by ~100 % (far cluster) and 1e10 times the kernel (1-d).
    The estimates are now the mean relative squared error against the kernel (variance
    plus squared bias), which the errors over seeds confirm."""
    rng = np.random.default_rng(0)
    if case == "far_cluster":
        X = 5.0 + 0.3 * rng.standard_normal((60, 6))
    else:
        X = 2.0 * rng.standard_normal((40, 1))
    rf = RandomFeatures(method="auto", kernel="gaussian", n_components=64, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rf.fit(X)
    est = rf.variance_estimates_
    assert rf.method_ not in MACLAURIN
    # the chosen map: unbiased, its estimate is its expected relative squared error (the
    # mean of 16 draws is within a factor 2 of it; the choice's estimate is below 0.1)
    assert est[rf.method_] < 0.1
    mse = _relative_mse(rf.method_, X, range(16))
    assert 0.5 * est[rf.method_] < mse < 2.0 * est[rf.method_]
    # the Maclaurin maps: their error is the bias (the same in every draw), now counted
    for name in MACLAURIN:
        mse = _relative_mse(name, X, range(3))
        assert mse > 0.9
        assert est[name] > 0.5 * mse


def test_spherical_features_of_a_zero_row_have_a_finite_gradient():
    """``SphericalRandomFeatures(normalize=True)`` keeps a zero row (padding, say) zero, but
    ``where(norm > 0, norm, 1)`` after the square root gave the row the gradient
    ``0 * inf = nan`` in autograd, which a sum over the batch spreads to every parameter.
    The safe square root now gives the zero row the gradient of ``x / 1``, and the other
    rows their gradient without it (the map is row-wise)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    Xn = np.vstack([rng.standard_normal((4, 3)), np.zeros((1, 3))])
    fm = SphericalRandomFeatures(16, random_state=0).fit(Xn)
    for method in ("transform", "exact_kernel"):
        X = torch.tensor(Xn, requires_grad=True)
        ref = torch.tensor(Xn[:4], requires_grad=True)
        if method == "transform":
            fm.transform(X).sum().backward()
            fm.transform(ref).sum().backward()
        else:  # the kernel of the rows with the nonzero ones
            fm.exact_kernel(X, ref.detach()).sum().backward()
            fm.exact_kernel(ref, ref.detach()).sum().backward()
        assert torch.isfinite(X.grad).all(), method
        np.testing.assert_allclose(X.grad[:4].numpy(), ref.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize(
    "cls",
    [AngularHybridRF, GaussianHybridRF, NormalizedGaussianHybridRF, HyperbolicRF],
    ids=lambda c: c.__name__,
)
def test_variance_has_a_gradient_where_the_estimate_is_exact(cls):
    """``variance(X, X)`` with autograd, on data with ``y = x`` and ``y = -x`` pairs. The
    MSEs have the factors ``(1 - exp(-|x -+ y|^2))^2``, smooth and 0 there, but their log
    form ``2 log(1 - exp(-t))`` gave the gradient ``log'(0) * 0 = nan`` (and the angular
    hybrid's ``acos`` at ``cos = +-1`` did too), so every row's gradient was nan. Now it is
    the central finite difference of the NumPy values (the angular hybrid's variance has a
    kink in the angle at ``y = -x``: finite there, not compared); a zero row (no angle)
    gets a finite gradient."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    X0 = 0.5 * rng.standard_normal((3, 3))
    X0 = np.vstack([X0, -X0[:1]])  # (4, 3): the pairs (x0, x0), (x0, -x0), ...
    Xn = X0[:3] if cls is AngularHybridRF else X0
    kw = {} if cls is HyperbolicRF else {"n_lambda": 3}
    fm = cls(4, random_state=0, **kw).fit(Xn)
    X = torch.tensor(Xn, requires_grad=True)
    fm.variance(X, X).sum().backward()
    h = 1e-6
    fd = np.zeros_like(Xn)
    for i, j in np.ndindex(*Xn.shape):
        E = np.zeros_like(Xn)
        E[i, j] = h
        fd[i, j] = (fm.variance(Xn + E, Xn + E).sum() - fm.variance(Xn - E, Xn - E).sum()) / (2 * h)
    # central difference: O(h^2) truncation, O(eps / h) rounding of values O(1)
    np.testing.assert_allclose(X.grad.numpy(), fd, rtol=1e-6, atol=1e-8 * np.abs(fd).max())
    Z = torch.tensor(np.vstack([X0, np.zeros((1, 3))]), requires_grad=True)
    fm.variance(Z, Z).sum().backward()
    assert torch.isfinite(Z.grad).all()


@pytest.mark.parametrize("cls", PUBLIC_MAPS, ids=lambda c: c.__name__)
def test_integer_torch_tensors_become_the_default_float(cls):
    """Documented (user guide, "Inputs and outputs"): integer and boolean tensors become
    ``torch.get_default_dtype()``, as torch itself promotes them, with the features of
    the float tensor of the same values; NumPy integers become float64."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    Xi = rng.integers(-1, 2, size=(6, 3))
    Xi[:, 0] = 1  # no zero rows: every map takes them (SphericalRandomFeatures normalises)
    nf = 2 if "Hybrid" in cls.__name__ else 8
    for default in (torch.float32, torch.float64):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(default)
        try:
            fm = cls(nf, random_state=0).fit(Xi)
            for X in (torch.tensor(Xi), torch.tensor(Xi > 0)):
                Z, ref = fm.transform(X), fm.transform(X.to(default))
                assert Z.dtype == ref.dtype
                assert Z.dtype in (
                    default,
                    torch.complex64 if default == torch.float32 else torch.complex128,
                )
                torch.testing.assert_close(Z, ref, rtol=0, atol=0)
        finally:
            torch.set_default_dtype(previous)
    assert np.asarray(cls(nf, random_state=0).fit(Xi).transform(Xi)).dtype in (
        np.float64,
        np.complex128,
    )
