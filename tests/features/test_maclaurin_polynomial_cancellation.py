"""The Maclaurin maps' expected kernel of the polynomial kernel near a zero of it.

For the polynomial kernel the truncated series of degree ``p >= degree`` is the whole
binomial expansion of ``(x'^T y' + coef0)^degree``; summed term by term it alternates in
sign for ``x'^T y' < 0`` and keeps an absolute error of ``eps (|x'^T y'| + coef0)^degree``,
so near ``x'^T y' = -coef0`` it lost every digit: ``expected_kernel`` gave ``-8.4e-16``
for ``1e-20`` (degree 10) and ``log_relative_variance`` was 22.7 nats too low.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernelkit.features import OptimizedMaclaurin, RandomMaclaurin

# (x, y, degree): x.y + coef0 = -1.3 (degree 40) and 0.01 (degree 10), coef0 = 0.7
_CASES = [(2.0, -1.0, 40), (1.0, -0.69, 10), (3.0, -0.2333, 7)]


@pytest.mark.parametrize("x, y, degree", _CASES)
def test_random_maclaurin_expected_kernel_is_the_closed_form(x, y, degree):
    X, Y = np.array([[x]]), np.array([[y]])
    fm = RandomMaclaurin(64, kernel="polynomial", degree=degree, coef0=0.7, random_state=0)
    fm.fit(X)
    exact = (x * y + 0.7) ** degree
    np.testing.assert_allclose(fm.exact_kernel(X, Y)[0, 0], exact, rtol=1e-12)
    np.testing.assert_allclose(fm.expected_kernel(X, Y)[0, 0], exact, rtol=1e-12)
    lrv = fm.log_relative_variance(X, Y)[0, 0]
    np.testing.assert_allclose(lrv, math.log(fm.variance(X, Y)[0, 0] / exact**2), atol=1e-9)


def test_optimized_maclaurin_at_the_full_degree():
    X = np.array([[2.0], [-1.0], [0.5]])
    fm = OptimizedMaclaurin(
        64, kernel="polynomial", degree=40, coef0=0.7, p_min=40, p_max=40, random_state=0
    ).fit(X)
    assert fm.degree_ == 40
    got = fm.expected_kernel(np.array([[2.0]]), np.array([[-1.0]]))[0, 0]
    np.testing.assert_allclose(got, 1.3**40, rtol=1e-12)


def test_huge_rows_keep_the_closed_form():
    """Rows whose powers overflow (the unit-row path): still the closed form, in range."""
    X, Y = np.array([[1e60]]), np.array([[-1e60]])
    fm = RandomMaclaurin(16, kernel="polynomial", degree=3, coef0=0.0, random_state=0).fit(X)
    np.testing.assert_allclose(fm.expected_kernel(X * 1e-60, Y * 1e-60)[0, 0], -1.0)
    lrv = fm.log_relative_variance(X, Y)[0, 0]
    ref = fm.log_relative_variance(X * 1e-60, Y * 1e-60)[0, 0]
    np.testing.assert_allclose(lrv, ref, rtol=1e-10)
