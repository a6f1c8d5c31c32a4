"""Regression tests from trying the JDL data generators as a new user would.

Covers: the Archakov-Hansen correlation for extreme ``gamma`` (the fixed-point iteration
alone stalled above ``tol`` at the rounding floor), and clear errors for an invalid
covariance ``C``, non-finite ``X``, non-numeric ``scale`` and negative seeds.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.datasets import (
    archakov_hansen_correlation,
    gaussian_conditional_moments,
    random_correlation_matrix,
    sample_cauchy_chain,
    sample_gaussian,
    uniform_chain_conditional_moments,
)


def test_archakov_hansen_extreme_gamma_matches_mpmath():
    # |gamma| = 30: the old iteration stopped at max |log diag| = 7.5e-11 > tol and raised.
    # Reference: diag(expm(A[x])) = 1 solved at 60 digits. C is within a few eps of the
    # rank-deficient limit [[1, -1, -1], [-1, 1, 1], [-1, 1, 1]]; the float result carries
    # the rounding of expm and of the final rescaling, a few eps (1e-14 covers it).
    mpmath = pytest.importorskip("mpmath", reason="mpmath not installed (the test extra)")
    gamma = [-30.0, 0.0, 30.0]

    def expm(x):
        a, b, c = gamma
        return mpmath.expm(mpmath.matrix([[x[0], a, b], [a, x[1], c], [b, c, x[2]]]))

    with mpmath.workdps(60):
        x = mpmath.findroot(
            lambda u, v, w: [mpmath.log(expm([u, v, w])[i, i]) for i in range(3)],
            (-20, -10, -20),
        )
        ref = np.array(expm(x).tolist(), dtype=np.float64)
    np.testing.assert_allclose(archakov_hansen_correlation(gamma), ref, rtol=0, atol=1e-14)


@pytest.mark.parametrize("seed", [2, 3])
def test_random_correlation_matrix_large_scale(seed):
    # scale = 10 gives |gamma| up to ~25; the old code raised RuntimeError for these seeds
    p = 6
    C = random_correlation_matrix(p, seed, scale=10.0)
    np.testing.assert_array_equal(C, C.T)
    np.testing.assert_array_equal(np.diag(C), np.ones(p))
    # positive semi-definite up to the rounding of the eigenvalues (p eps |C|_2 <= p^2 eps)
    assert np.linalg.eigvalsh(C).min() >= -(p**2) * np.finfo(np.float64).eps
    assert np.all(np.abs(C) <= 1.0)


@pytest.mark.parametrize(
    ("C", "match"),
    [
        (-np.eye(3), "C must be positive definite"),  # old: numpy LinAlgError
        (np.triu(np.full((3, 3), 0.5)) + 0.5 * np.eye(3), "C must be symmetric"),  # old: used
        (np.full((3, 3), np.nan), "C must be finite"),  # old: NaN data, silently
    ],
)
def test_gaussian_data_reject_invalid_covariance(C, match):
    with pytest.raises(ValueError, match=match):
        sample_gaussian(C, 4, 1, random_state=0)
    with pytest.raises(ValueError, match=match):
        gaussian_conditional_moments(C, np.zeros((2, 1)))


def test_conditional_moments_reject_non_finite_or_columnless_X():
    C = random_correlation_matrix(4, 0)
    X = np.zeros((2, 2))
    X[1, 0] = np.nan
    with pytest.raises(ValueError, match="X must be finite"):  # old: NaN moments
        gaussian_conditional_moments(C, X)
    with pytest.raises(ValueError, match="X must be finite"):
        uniform_chain_conditional_moments(X)
    with pytest.raises(ValueError, match="X must be two-dimensional with >= 1 column"):
        uniform_chain_conditional_moments(np.zeros((2, 0)))  # old: IndexError
    with pytest.raises(TypeError, match="p must be an integer"):
        uniform_chain_conditional_moments(np.zeros((2, 3)), p=6.5)  # old: accepted


def test_generators_name_bad_scale_and_seed():
    with pytest.raises(TypeError, match="scale must be a real number"):
        random_correlation_matrix(3, 0, scale="1")  # old: numpy's isfinite message
    with pytest.raises(TypeError, match="scale must be a real number"):
        sample_cauchy_chain(3, 0, scale=None)
    with pytest.raises(ValueError, match="random_state must be a non-negative int"):
        sample_cauchy_chain(3, -1)  # old: numpy's "expected non-negative integer"
