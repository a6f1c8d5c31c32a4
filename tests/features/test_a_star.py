"""The scalar solver A*(phi) of FAVOR# Lemma A.1 (derivations page, FAVOR#)."""

from __future__ import annotations

from decimal import Decimal, getcontext

import numpy as np
import pytest
from favor_helpers import textbook_a_star
from hypothesis import given
from hypothesis import strategies as st

from kernelkit.features import a_star

phis = st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False)


def _g(A, phi):
    """The objective of Lemma A.1."""
    return np.log(1 - 4 * A) - 0.5 * np.log(1 - 8 * A) + phi / (1 - 8 * A)


def _reference(phi: float) -> float:
    """Lemma A.1 in 60-digit decimal arithmetic (the textbook form, no cancellation issue)."""
    getcontext().prec = 60
    p = Decimal(phi)
    root = ((2 * p + 1) ** 2 + 8 * p).sqrt()
    return float((1 - 2 * p - root) / 16)


def test_a_star_at_zero_is_zero():
    assert a_star(0.0) == 0.0
    assert a_star(np.zeros(3)).tolist() == [0.0, 0.0, 0.0]


def test_a_star_accurate_over_24_decades():
    phi = np.logspace(-12, 12, 241)
    got = a_star(phi)
    ref = np.array([_reference(p) for p in phi])
    rel = np.abs(got / ref - 1)
    assert rel.max() < 4e-16 * 8, rel.max()
    # the textbook form loses digits for small phi: the test would catch using it
    rel_textbook = np.abs(textbook_a_star(phi) / ref - 1)
    assert rel_textbook.max() > 1e-8


def test_a_star_agrees_with_textbook_form_where_that_is_accurate():
    phi = np.linspace(0.01, 100.0, 1001)
    np.testing.assert_allclose(a_star(phi), textbook_a_star(phi), rtol=1e-12)


@pytest.mark.parametrize("phi", [1e-6, 0.05, 0.7, 3.0, 40.0])
def test_a_star_is_the_grid_minimum(phi):
    A = a_star(phi)
    grid = np.linspace(-phi / 4 - 1.0, 0.1249, 400_001)
    vals = _g(grid, phi)
    k = int(np.argmin(vals))
    assert abs(grid[k] - A) <= 2 * (grid[1] - grid[0])
    assert _g(A, phi) <= vals.min() + 1e-12 * abs(vals.min())


@given(phis)
def test_a_star_properties(phi):
    A = a_star(phi)
    assert isinstance(A, float)
    assert A <= 0.0
    assert 8 * A < 1
    # stationary point of g: g'(A) = -4/(1-4A) + 4/(1-8A) + 8 phi/(1-8A)^2 = 0,
    # written as (1-8A)^2 g'(A) / 4 to avoid scale issues
    r = -((1 - 8 * A) ** 2) / (1 - 4 * A) + (1 - 8 * A) + 2 * phi
    assert abs(r) <= 1e-12 * (1 + 2 * phi + (1 - 8 * A))
    # A* = -phi / (1 + r), r = (1 + 12 phi) / (2 phi + sqrt(4 phi^2 + 12 phi + 1)) in [1, 3]
    assert -phi / 2 * (1 + 1e-15) <= A <= -phi / 4 * (1 - 1e-15)


@given(phis, phis)
def test_a_star_monotone_decreasing(p1, p2):
    lo, hi = min(p1, p2), max(p1, p2)
    assert a_star(lo) >= a_star(hi)
    if hi > lo * (1 + 1e-12) and hi > 0:
        assert a_star(lo) > a_star(hi)


@given(st.lists(phis, min_size=1, max_size=20))
def test_a_star_vectorised_equals_scalar(values):
    arr = np.array(values)
    out = a_star(arr)
    assert isinstance(out, np.ndarray) and out.shape == arr.shape
    np.testing.assert_array_equal(out, [a_star(v) for v in values])


def test_a_star_extreme_inputs_are_finite():
    assert a_star(1e200) == pytest.approx(-1e200 / 4, rel=1e-12)
    assert a_star(5e-324) <= 0.0
    assert a_star(-1.0) == 0.0  # documented: negative phi is clipped
