"""Stationary kernels depend on differences only: translating the data (and the
queries) by a constant must leave every model unchanged, in any dimension. Above eight
dimensions the kernel matrices come from the norms' form ``|a|^2 + |b|^2 - 2 a.b``,
which must be taken about a point near the data, not about the origin."""

import numpy as np
import pytest

from kernelkit.distributions import ConditionalMeanEmbedding, JointDistribution, LowRankBasis
from kernelkit.distributions._kernels import make_kernel


@pytest.mark.parametrize("offset", [1e6, 1e8])
@pytest.mark.parametrize("d", [9, 20])
def test_kernel_matrix_is_translation_invariant(d, offset):
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((50, d)), rng.standard_normal((30, d))
    exact = np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1))
    K = make_kernel("gaussian", 1.0)(A + offset, B + offset)
    # the differences A - B are exact in float64 up to |A + offset| eps (about 1e-8 at
    # offset 1e8, d = 20: r^2 then moves by about 2 |r| 1e-8 |...| ~ 1e-6 relative)
    np.testing.assert_allclose(K, exact, rtol=0, atol=1e-5 * offset / 1e8 + 1e-12)


def test_low_rank_basis_transform_matches_training_features_far_from_origin():
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((200, 9)) + 1e8
    b = LowRankBasis(rel_tol=1e-6).fit(Z)
    np.testing.assert_allclose(b.transform(Z), b.train_features_, atol=1e-6)


@pytest.mark.parametrize("offset", [1e7, 1e8])
def test_joint_distribution_conditional_is_translation_invariant(offset):
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((300, 9))
    Y = Z[:, :1] + 0.3 * rng.standard_normal((300, 1))
    q = Z[:3]
    est = JointDistribution(lengthscale_x=1.0, lengthscale_y=0.5)
    ref = est.fit(Z, Y).conditional_expectation(Y, q)
    moved = JointDistribution(lengthscale_x=1.0, lengthscale_y=0.5).fit(Z + offset, Y)
    np.testing.assert_allclose(moved.conditional_expectation(Y, q + offset), ref, atol=1e-4)


def test_cme_is_translation_invariant():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((200, 12))
    Y = np.sin(X[:, :1]) + 0.1 * rng.standard_normal((200, 1))
    q = X[:4]
    ref = ConditionalMeanEmbedding(lengthscale_x=2.0).fit(X, Y).conditional_expectation(Y, q)
    moved = ConditionalMeanEmbedding(lengthscale_x=2.0).fit(X + 1e8, Y)
    moved = moved.conditional_expectation(Y, q + 1e8)
    np.testing.assert_allclose(moved, ref, atol=1e-4)


@pytest.mark.parametrize("far", [1e6, 1e8, 1e10])
def test_kernel_matrix_with_a_far_row_in_B_keeps_the_near_columns(far):
    rng = np.random.default_rng(0)
    d = 10
    A, B = rng.standard_normal((50, d)), rng.standard_normal((20, d))
    B[0, 0] = far  # drags the mean of B far from the data
    exact = np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1))
    K = make_kernel("gaussian", 1.0)(A, B)
    np.testing.assert_allclose(K, exact, rtol=0, atol=1e-12)


def test_kernel_matrix_with_two_far_apart_clusters():
    rng = np.random.default_rng(0)
    d = 10
    A = np.vstack([rng.standard_normal((20, d)), rng.standard_normal((20, d)) + 1e8])
    B = np.vstack([rng.standard_normal((10, d)), rng.standard_normal((10, d)) + 1e8])
    exact = np.exp(-0.5 * ((A[:, None] - B[None]) ** 2).sum(-1))
    K = make_kernel("gaussian", 1.0)(A, B)
    # the differences of the points at 1e8 are exact to about 1e-8 (their rounding)
    np.testing.assert_allclose(K, exact, rtol=0, atol=1e-6)
    np.testing.assert_allclose(K[:20, :10], exact[:20, :10], rtol=0, atol=1e-12)
