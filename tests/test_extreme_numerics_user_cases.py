"""Inputs at the edges of the floating-point range, as a numerical analyst tries them.

Subnormal inputs to the exact kernels, a normalised hybrid fitted on data whose
coefficient ``1 / rho`` leaves the float32 range, and random-feature attention with
logits of a few hundred in half precision. Every tolerance is derived in a comment from
the rounding of the computation it checks.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from kernelkit.features import NormalizedGaussianHybridRF
from kernelkit.kernels import gaussian_kernel, scaled_softmax_kernel

torch = pytest.importorskip("torch")


def _small_int_points():
    """Two point sets with small integer entries (exact in every dtype tried here)."""
    X = np.array([[1.0, 0.0, 2.0], [3.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    Y = np.array([[1.0, 2.0, 0.0], [0.0, 3.0, 1.0]])
    return X, Y


def _gaussian_reference(X, Y, lengthscale):
    d2 = ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
    return np.exp(-d2 / (2.0 * lengthscale**2))


@pytest.mark.parametrize(
    ("dtype", "power"),
    [(np.float32, -140), (np.float64, -1060)],  # entries k 2^power: subnormal, exact
)
def test_gaussian_kernel_of_subnormal_inputs(dtype, power):
    """The inputs are rescaled by 2^-e before the squared distances; for subnormal
    entries 2^-e itself overflowed: float32 gave NaN (inf * x - inf), float64 raised
    OverflowError from math.ldexp. The kernel is invariant under scaling x, y and the
    lengthscale by one power of two, so the reference is the same kernel on the integer
    points with lengthscale 4."""
    X, Y = _small_int_points()
    s = math.ldexp(1.0, power)
    K = gaussian_kernel((X * s).astype(dtype), (Y * s).astype(dtype), lengthscale=4.0 * s)
    assert K.dtype == dtype
    # After the exact rescaling the computation is the normal-range one: exponent error
    # <= (d + 2) eps (|x|^2 + |y|^2) / (2 l^2) <= 5 eps * 26 / 32 for these points (|x|^2,
    # |y|^2 <= 10, 13 after centring the rows on their mean), plus the rounding of exp
    # and of the result; 16 eps bounds the sum.
    eps = float(np.finfo(dtype).eps)
    np.testing.assert_allclose(K, _gaussian_reference(X, Y, 4.0), rtol=16 * eps, atol=0)


def test_gaussian_kernel_of_subnormal_bfloat16_inputs():
    """bfloat16 has float32's exponent range: entries k 2^-130 are subnormal (exact for
    k <= 8 with 7 stored bits), and gave NaN as float32 did."""
    X, Y = _small_int_points()
    s = math.ldexp(1.0, -130)
    Xt = torch.tensor(X * s, dtype=torch.bfloat16)
    Yt = torch.tensor(Y * s, dtype=torch.bfloat16)
    assert (Xt.double() == torch.tensor(X * s)).all()  # the inputs are exact
    K = gaussian_kernel(Xt, Yt, lengthscale=4.0 * s)
    assert K.dtype == torch.bfloat16
    # the result rounded once to bfloat16 (8 significant bits: relative error <= 2^-8)
    # after a float32-accurate exponent (error ~1e-6, negligible next to it): 2^-7
    np.testing.assert_allclose(K.double().numpy(), _gaussian_reference(X, Y, 4.0), rtol=2**-7)


@pytest.mark.parametrize("alpha", [-0.5, -2.0])
def test_scaled_softmax_kernel_of_subnormal_inputs(alpha):
    """alpha <= -1/2 goes through the Gaussian form and the rescaled squared norms: with
    entries ~1e-310 both raised OverflowError. Every exponent is ~1e-619, so the kernel
    is 1 to the last bit (exp of a value below eps / 2 rounds to 1)."""
    X, Y = _small_int_points()
    s = math.ldexp(1.0, -1060)
    K = scaled_softmax_kernel(X * s, Y * s, alpha=alpha)
    np.testing.assert_array_equal(K, np.ones((3, 2)))


def _unit_rows(n, d, seed):
    X = np.random.default_rng(seed).standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def test_normalized_gaussian_hybrid_rho_below_float32_range():
    """rho = 1 - exp(-2 sigma^2 r^2) ~ 2 r^2 is checked against float64 at fit (the fit
    runs in float64), but the features and approx_kernel of float32 input use 1 / rho
    and 2 / rho in float32: for r = 1e-20 (rho ~ 2e-40) they overflowed and approx_kernel
    was all NaN. Now float32 input raises the error that names the remedy, and the same
    data in float64 gives a finite estimate."""
    X = (1e-20 * _unit_rows(5, 3, 0)).astype(np.float32)
    fm = NormalizedGaussianHybridRF(n_features=8, n_lambda=2, random_state=0).fit(X)
    assert fm.rho_ < np.finfo(np.float32).tiny
    for method in (fm.transform, fm.approx_kernel):
        with pytest.raises(ValueError, match=r"below the float32 range.*pass float64 input"):
            method(X)
    K64 = fm.approx_kernel(X.astype(np.float64))
    assert np.isfinite(K64).all()


def test_normalized_gaussian_hybrid_rho_just_inside_float32_range():
    """r = 1e-19 (rho ~ 2e-38, above float32's tiny 1.2e-38) stays usable in float32: the
    guard is at the limit, not below it. The float32 estimate agrees with the float64 one
    on the same (float32-exact) inputs: each part is formed from O(1) bases with a few
    dozen roundings of eps32 = 1.2e-7 (projections over d = 3, the 2m-term products, the
    sin^2 form of lambda_hat, the log-space mixture), so 1e-4 (~800 eps32) is a bound with
    margin, while a NaN or an overflow fails it."""
    X = (1e-19 * _unit_rows(5, 3, 0)).astype(np.float32)
    fm = NormalizedGaussianHybridRF(n_features=8, n_lambda=2, random_state=0).fit(X)
    assert fm.rho_ > np.finfo(np.float32).tiny
    K32 = fm.approx_kernel(X)
    K64 = fm.approx_kernel(X.astype(np.float64))
    assert K32.dtype == np.float32
    np.testing.assert_allclose(K32, K64, rtol=1e-4, atol=1e-4 * np.abs(K64).max())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_linear_attention_logits_of_200_in_half_precision(dtype, is_causal):
    """Logits q.k / sqrt(d) up to 200 (e^200 overflows float16 and float32 as a raw
    feature product): the stabilisers keep the output finite, and for a positive map it
    is a convex combination of the visible values, so it lies in their range up to the
    rounding of the half-precision output (bfloat16: 2^-8 relative, times max |v| <= 4
    here; 0.05 bounds it)."""
    from kernelkit.attention import linear_attention

    g = torch.Generator().manual_seed(0)
    L, d = 12, 8
    q = torch.randn(1, 2, L, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, L, d, generator=g, dtype=torch.float64)
    # |q| |k| / sqrt(d) = 200 with |q| = 100: the query projections w.q reach ~250, whose
    # exp overflows float32 unless the row maximum is subtracted
    q = 100.0 * q / q.norm(dim=-1, keepdim=True)
    k = 2.0 * math.sqrt(d) * k / k.norm(dim=-1, keepdim=True)
    v = torch.randn(1, 2, L, 4, generator=g, dtype=torch.float64).clamp(-4, 4)
    out = linear_attention(
        q.to(dtype), k.to(dtype), v.to(dtype), "positive", 64, is_causal=is_causal, random_state=0
    )
    assert out.dtype == dtype
    o = out.double()
    assert torch.isfinite(o).all()
    vd = v.to(dtype).double()
    if is_causal:
        lo, hi = vd.cummin(dim=-2).values, vd.cummax(dim=-2).values
    else:
        lo, hi = vd.min(-2, keepdim=True).values, vd.max(-2, keepdim=True).values
    assert ((o >= lo - 0.05) & (o <= hi + 0.05)).all()


@pytest.mark.parametrize("kernel", ["gaussian", "softmax"])
def test_half_precision_kernels_of_rows_beyond_norm_256(kernel):
    """A float16 row of norm 300 is representable, its squared norm (9e4 > 65504) is
    not: approx_kernel and exact_kernel of the softmax-family maps formed -|x|^2 / 2 in
    float16 and returned NaN (inf - inf in the stabilisers), for the Gaussian kernel,
    which lies in [0, 1], as well. Now they are formed in float32 and rounded once, as
    the variances are: bit for bit the float32 result of the same (float16-exact) inputs
    rounded to float16, so the comparison is exact."""
    from kernelkit.features import SDERF, PositiveRF

    g = torch.Generator().manual_seed(0)
    X = torch.randn(4, 4, generator=g)
    X = (300.0 * X / X.norm(dim=1, keepdim=True)).half()
    Y = (X.float() + 0.5 * torch.randn(3, 4, generator=g)[:1]).half()  # near X
    for cls in (PositiveRF, SDERF):
        fm = cls(n_features=16, kernel=kernel, random_state=0).fit(X, Y=Y)
        for method in (fm.approx_kernel, fm.exact_kernel):
            K = method(X, Y)
            assert K.dtype == torch.float16
            assert not torch.isnan(K).any()
            torch.testing.assert_close(K, method(X.float(), Y.float()).half(), rtol=0, atol=0)
        if kernel == "gaussian":
            K = fm.exact_kernel(X, Y).double()
            assert ((K >= 0) & (K <= 1)).all() and (K > 0).any()


def test_half_precision_gaussian_exact_kernel_matches_float64():
    """The float16 Gaussian kernel of rows of norm 300 against float64 on the same
    (float16-exact) values. The map forms x.y - (|x|^2 + |y|^2) / 2 in float32: each
    term is ~9e4, so the exponent's rounding error is at most (d + 2) eps32 (|x|^2 +
    |y|^2) = 6 * 1.2e-7 * 1.8e5 = 0.13, a relative error of at most e^0.13 - 1 = 0.14 in
    K, plus 2^-11 for the final rounding to float16: rtol 0.15 (before: NaN)."""
    from kernelkit.features import PositiveRF

    g = torch.Generator().manual_seed(1)
    X = torch.randn(3, 4, generator=g)
    X = (300.0 * X / X.norm(dim=1, keepdim=True)).half()
    Y = (X.float() + 0.3 * torch.randn(3, 4, generator=g)).half()
    fm = PositiveRF(n_features=8, kernel="gaussian", random_state=0).fit(X, Y=Y)
    ref = gaussian_kernel(X.double(), Y.double())
    # the pairs (x_i, y_i) are near (moderate values: the relative bound is meaningful),
    # the others ~600 apart (kernel 0: it underflows in float64 too)
    assert torch.diagonal(ref).min() > 0.05
    torch.testing.assert_close(fm.exact_kernel(X, Y).double(), ref, rtol=0.15, atol=0)


@pytest.mark.parametrize("scale", [1e60, 1e100])
def test_logistic_regression_on_data_of_huge_scale_says_standardise(scale):
    """Separable data scaled by 1e60 or 1e100 (the curvature's sums x x^T ~1e200 still
    fit float64, so the 'X is too large' check passes). spfb's steps then either do not
    move (coef_ stays 0: the warning advised only 'increase max_epochs') or the finishing
    CG's iterates leave the float range (a bare 'matvec returned NaN or infinity'). Every
    outcome now names the remedy, for every shuffle seed tried."""
    from sklearn.exceptions import ConvergenceWarning

    from kernelkit.optim import BoundLogisticRegression

    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    y = (X[:, 0] > 0).astype(int)
    for seed in range(4):
        clf = BoundLogisticRegression(solver="spfb", max_epochs=20, alpha=1e-8, random_state=seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                clf.fit(X * scale, y)
            except ValueError as exc:
                assert "standardise X" in str(exc)
                continue
        if (clf.predict(X * scale) == y).all():
            continue  # this seed fitted the data
        msgs = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
        assert msgs and all("standardise" in m for m in msgs), msgs
