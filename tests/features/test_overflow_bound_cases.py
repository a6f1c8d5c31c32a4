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
