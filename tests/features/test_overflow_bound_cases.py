"""Inputs and parameters that sit just past the overflow bounds of the Maclaurin and
dot-product maps: values that are representable must equal a reference, an inf comes
with its warning, and no NaN appears."""

import math
import warnings

import numpy as np
import pytest

from kernelkit.features import RandomMaclaurin


@pytest.mark.parametrize(
    ("kernel", "params"),
    [
        ("polynomial", {"gamma": 1e100, "degree": 4, "coef0": 1.0}),  # a_4 = inf
        ("polynomial", {"gamma": 1e-100, "degree": 4, "coef0": 1.0}),  # a_4 = 0
        ("softmax", {"lengthscale": 1e-40, "max_degree": 6}),  # a_n = inf from n = 4
        ("gaussian", {"lengthscale": 1e-40, "max_degree": 6}),
    ],
)
def test_unit_coefficients_where_the_raw_ones_leave_the_range(kernel, params):
    # the unit-scale coefficients b_n = a_n / s^n are those of gamma = lengthscale = 1
    # (C(4, n) and 1 / n!) even where a_n or s^n over- or underflows (inf / inf, 0 / 0
    # made them NaN: NaN features, and a series bound that left the term out)
    m = RandomMaclaurin(kernel=kernel, n_features=64, random_state=0, **params)
    m.fit(np.zeros((2, 3)))
    if kernel == "polynomial":
        expected = [math.comb(4, n) for n in range(5)]
    else:
        expected = [1.0 / math.factorial(n) for n in range(7)]
    # formed as exp(sum of lgammas) (|log b_n| < 10 here): the exponential turns the
    # absolute rounding of the log, a few eps times 10, into that relative error
    np.testing.assert_allclose(m._unit_coefficients, expected, rtol=1e-13)


def test_expected_kernel_with_a_gamma_whose_raw_coefficient_overflows():
    # (gamma x.y + 1)^4 with gamma = 1e100 and entries ~1e-30: gamma x.y ~ 1e40, kernel
    # ~1e160, representable, though a_4 = gamma^4 overflows. The degree-4 term was NaN in
    # the unit coefficients and left out of the series (6.7e159 came out as 3e120,
    # silently) and the features held NaN
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4, 3)) * 1e-30
    m = RandomMaclaurin(kernel="polynomial", degree=4, gamma=1e100, coef0=1.0)
    m.set_params(n_features=64, random_state=0).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # representable: no warning
        Z = m.transform(X)
        K = m.expected_kernel(X)
        A = m.approx_kernel(X)
    assert np.all(np.isfinite(Z)) and np.all(np.isfinite(A))
    G = X @ X.T  # reference in float64 from the raw formula: |gamma G| ~ 1e40, no overflow
    ref = (1e100 * G + 1.0) ** 4
    # all degrees are present, so the expected kernel is the kernel: each of the 5 terms
    # rounds to a few ulps, and their sum (same signs for the diagonal, mixed off it)
    # cancels at most by the ratio sum |terms| / |sum|, which is 1 here (|gamma G| >> 1)
    np.testing.assert_allclose(K, ref, rtol=1e-12)


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_expected_kernel_whose_powers_overflow_but_not_its_value(kernel):
    # the truncated series sum_{n <= 10} G^n / n! at G = x y = 1e31: G^10 = 1e310 leaves
    # the range, G^10 / 10! = 2.8e303 does not. The series' bound (log 2.8e303 < log max
    # - 1) kept the raw series, whose power G^10 was inf, unchecked: a silent inf
    t = 10.0**15.5
    X = np.array([[t], [1.0]])
    m = RandomMaclaurin(kernel=kernel, max_degree=10, n_features=32, random_state=0)
    m.fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # representable: no warning, no ValueError
        K = m.expected_kernel(X)
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 30

    def ref(x, y):
        s = mp.fsum(mp.mpf(x * y) ** n / mp.factorial(n) for n in range(11))
        if kernel == "gaussian":  # e_x e_y = exp(-(x^2 + y^2) / 2)
            s *= mp.exp(-(mp.mpf(x) ** 2 + mp.mpf(y) ** 2) / 2)
        return float(s)

    expected = np.array([[ref(a, b) for b in X[:, 0]] for a in X[:, 0]])
    assert np.all(np.isfinite(K[expected != 0]))
    # the series of unit rows, scaled back in log space: exp of a log of size ~700 turns
    # its rounding (a few eps * 700) into a relative error ~1e-12
    np.testing.assert_allclose(K, expected, rtol=1e-10, atol=0)


@pytest.mark.parametrize("kernel", ["sketch", "softmax"])
def test_transform_scaled_half_precision_base_stays_finite(kernel):
    # float16 rows of norm ~30 at degree 3: the float32 base (raw features, log scale 0)
    # is ~1e5, above float16's 65504, and rounded to inf silently, though the features
    # base * exp(log_scale) are the same numbers (transform warns where they overflow)
    torch = pytest.importorskip("torch")
    from kernelkit.features import RademacherSketch

    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 3)) * 30.0
    if kernel == "sketch":
        m = RademacherSketch(n_features=16, degree=3, random_state=0)
    else:
        m = RandomMaclaurin(kernel="softmax", n_features=16, random_state=0)
    m.fit(X)
    Xh = torch.tensor(X, dtype=torch.float16)
    base, log_scale = m.transform_scaled(Xh)
    assert base.dtype == torch.float16 and log_scale.dtype == torch.float16
    assert bool(torch.isfinite(base).all()) and bool(torch.isfinite(log_scale).all())
    got = base.double().numpy() * np.exp(log_scale.double().numpy())[:, None]
    ref = m.transform(Xh.double().numpy())  # the float16 inputs' features in float64
    # base rounded to float16 (eps 2^-11) and log_scale (|log_scale| < 16 here, float16
    # spacing 2^-7 there: exp of a half spacing is 0.4 %): rtol 5e-3; atol for features
    # that cancel to ~0, at that relative error of the row's largest feature
    atol = 5e-3 * np.max(np.abs(ref), axis=1, keepdims=True)
    assert np.all(np.abs(got - ref) <= 5e-3 * np.abs(ref) + atol)


def test_coefficients_that_overflow_are_refused_at_fit():
    # (x.y + 1e200)^12: the constant coefficient 1e2400 and the weights sqrt(b_n) are inf,
    # and approx_kernel was inf - inf = NaN; OptimizedMaclaurin already refused
    X = np.random.default_rng(0).standard_normal((4, 3))
    m = RandomMaclaurin(kernel="polynomial", degree=12, coef0=1e200, n_features=16)
    with pytest.raises(ValueError, match="Maclaurin coefficients overflow"):
        m.fit(X)
    # degree 1: coef0 itself, in range, is accepted
    m.set_params(degree=1).fit(X)
    assert np.all(np.isfinite(m.approx_kernel(X)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("ratio", [1e-3, 0.2, 0.2499999, 0.2500001, 0.3, 0.9, 4.0])
def test_safe_gram_with_the_callers_bound_makes_the_same_choice(dtype, ratio):
    """``safe_gram`` given the caller's ``log_inner_bound`` (as the Maclaurin exact
    kernel hands it its plan's) returns bit for bit what it finds from the rows' maxima
    alone: the bound spares those maxima only where they would choose the plain product
    too, on either side of its threshold (``d max |X| max |Y| = ratio * max float``, a
    quarter of it), for rows that reach the bound and rows far below it."""
    from kernelkit._backend import array_namespace
    from kernelkit.features._base import log_inner_bound, safe_gram

    rng = np.random.default_rng(6)
    X, Y = rng.standard_normal((40, 5)), rng.standard_normal((30, 5))
    X /= np.abs(X).max()
    Y /= np.abs(Y).max()
    s = math.sqrt(ratio / 5) * math.sqrt(float(np.finfo(dtype).max))
    X, Y = (s * X).astype(dtype), (s * Y).astype(dtype)
    xp = array_namespace(X)
    for Xb in (X, X[:20] * dtype(1e-6)):  # all rows, then a block of small ones
        want = safe_gram(xp, Xb, Y)
        got = safe_gram(xp, Xb, Y, log_inner_bound(xp, X, Y))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
