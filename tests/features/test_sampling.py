"""Projection samplers: i.i.d. Gaussian and block-orthogonal (ORF) rows, marginally N(0, I)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from kernelkit.features import block_orthogonal_projection, draw_projection, gaussian_projection
from kernelkit.features.sampling import haar_orthogonal

Z = 4.5


def test_gaussian_projection_shape_seed_and_moments():
    W = gaussian_projection(30_000, 5, random_state=0)
    assert W.shape == (30_000, 5) and W.dtype == np.float64
    np.testing.assert_array_equal(W, gaussian_projection(30_000, 5, random_state=0))
    np.testing.assert_array_equal(W, gaussian_projection(30_000, 5, np.random.default_rng(0)))
    assert not np.allclose(W, gaussian_projection(30_000, 5, random_state=1))
    _check_standard_normal_rows(W)


@pytest.mark.parametrize("M,d", [(8, 8), (50, 7), (3, 10), (1, 1), (64, 4)])
def test_block_orthogonal_rows_orthogonal_within_blocks(M, d):
    W = block_orthogonal_projection(M, d, random_state=1)
    assert W.shape == (M, d)
    U = W / np.linalg.norm(W, axis=1, keepdims=True)
    for lo in range(0, M, d):
        G = U[lo : lo + d] @ U[lo : lo + d].T
        np.testing.assert_allclose(G, np.eye(G.shape[0]), atol=1e-12)
    if M > d:  # rows of different blocks are independent, not orthogonal
        assert np.abs(U[:d] @ U[d : 2 * d].T).max() > 1e-3


def test_block_orthogonal_norms_are_chi_distributed():
    d, M = 6, 60_000
    W = block_orthogonal_projection(M, d, random_state=2)
    sq = np.sum(W * W, axis=1)  # chi^2_d: mean d, variance 2d (independent across rows)
    assert abs(sq.mean() - d) / np.sqrt(2 * d / M) < Z
    var_se = np.sqrt((np.mean((sq - d) ** 4) - (2 * d) ** 2) / M)
    assert abs(sq.var() - 2 * d) / var_se < Z
    assert stats.kstest(sq, stats.chi2(d).cdf).pvalue > 1e-4
    # norms are not all equal (a plain orthogonal matrix would have unit rows)
    assert sq.std() > 1.0


def test_block_orthogonal_rows_are_marginally_standard_normal():
    W = block_orthogonal_projection(60_000, 5, random_state=3)
    _check_standard_normal_rows(W)


def _check_standard_normal_rows(W):
    M, d = W.shape
    mean = W.mean(0)
    assert np.abs(mean).max() * np.sqrt(M) < Z
    C = W.T @ W / M  # E w w^T = I; SE of entries: sqrt(2/M) diagonal, sqrt(1/M) off-diagonal
    se = np.where(np.eye(d, dtype=bool), np.sqrt(2.0 / M), np.sqrt(1.0 / M))
    assert np.abs((C - np.eye(d)) / se).max() < Z
    for k in range(d):  # each coordinate is N(0, 1)
        assert stats.kstest(W[:, k], "norm").pvalue > 1e-4
    # fourth moment 3 (Gaussian, not e.g. uniform on a sphere times a constant)
    m4 = np.mean(W**4, axis=0)
    assert np.abs((m4 - 3.0) / np.sqrt(96.0 / M)).max() < Z


def test_haar_orthogonal_is_orthogonal_and_unbiased():
    """Without the sign correction Q_00 would be biased (LAPACK's R has a sign convention)."""
    rng = np.random.default_rng(4)
    d, n = 3, 4000
    Qs = np.stack([haar_orthogonal(d, rng) for _ in range(n)])
    np.testing.assert_allclose(Qs[0] @ Qs[0].T, np.eye(d), atol=1e-12)
    # Haar: every entry has mean 0 and variance 1/d
    mean = Qs.mean(0)
    assert np.abs(mean).max() / np.sqrt(1.0 / (d * n)) < Z
    np.testing.assert_allclose(Qs.var(0), 1.0 / d, atol=Z * np.sqrt(2.0 / n) / d * 1.5)
    # determinant is +-1 with equal probability (O(d), not SO(d))
    dets = np.linalg.det(Qs)
    np.testing.assert_allclose(np.abs(dets), 1.0, atol=1e-10)
    assert abs(np.mean(dets)) * np.sqrt(n) < Z


def test_draw_projection_dispatch_and_seed_determinism():
    a = draw_projection(20, 4, 5)
    np.testing.assert_array_equal(a, gaussian_projection(20, 4, 5))
    b = draw_projection(20, 4, 5, sampler="orthogonal")
    np.testing.assert_array_equal(b, block_orthogonal_projection(20, 4, 5))
    U = b[:4] / np.linalg.norm(b[:4], axis=1, keepdims=True)
    np.testing.assert_allclose(U @ U.T, np.eye(4), atol=1e-12)


@pytest.mark.parametrize("fn", [gaussian_projection, block_orthogonal_projection])
def test_sampler_bad_arguments(fn):
    with pytest.raises(ValueError, match="n_features"):
        fn(0, 3)
    with pytest.raises(ValueError, match="d must be >= 1"):
        fn(3, 0)
    with pytest.raises(TypeError, match="n_features"):
        fn(2.5, 3)
    with pytest.raises(TypeError, match="random_state"):
        fn(3, 3, random_state="x")


# ---------------------------------------------------------------- Halton-R and ORF-Had
def test_halton_rows_are_exactly_marginally_standard_normal():
    """Over the randomisation (scramble + Cranley-Patterson shift) every row position is
    N(0, I): stack row k of many independent draws."""
    from kernelkit.features import halton_projection

    rng = np.random.default_rng(11)
    draws = np.stack([halton_projection(4, 3, rng) for _ in range(3000)])  # (R, 4, 3)
    for k in range(4):
        _check_standard_normal_rows(draws[:, k, :])
    # the unscrambled (shift-only) variant is marginally N(0, I) too
    draws = np.stack([halton_projection(3, 2, rng, scramble=False) for _ in range(2000)])
    _check_standard_normal_rows(draws[:, 1, :])


def test_halton_rows_have_low_discrepancy():
    """Within one draw the rows are negatively dependent: the mean of g(w) over the rows
    of a draw varies much less than for i.i.d. rows (QMC variance reduction)."""
    from kernelkit.features import halton_projection

    rng = np.random.default_rng(12)
    M, d, R = 64, 3, 400
    v = np.array([0.6, -0.3, 0.5])

    def spread(sampler):
        return np.var([np.cos(sampler(M, d, rng) @ v).mean() for _ in range(R)])

    qmc, iid = spread(halton_projection), spread(gaussian_projection)
    assert qmc < 0.5 * iid  # measured ratio ~0.35 (M = 64, d = 3)
    W = halton_projection(M, d, 5)
    np.testing.assert_array_equal(W, halton_projection(M, d, 5))
    assert np.all(np.isfinite(W)) and W.shape == (M, d)


def test_hadamard_chi_norms_and_orthogonality():
    from kernelkit.features import structured_hadamard_projection

    d = 8  # power of two: rows of a block are exactly orthogonal
    W = structured_hadamard_projection(16, d, 3, chi_norms=True)
    U = W / np.linalg.norm(W, axis=1, keepdims=True)
    np.testing.assert_allclose(U[:8] @ U[:8].T, np.eye(8), atol=1e-12)
    sq = np.concatenate(
        [
            np.sum(structured_hadamard_projection(64, d, s, chi_norms=True) ** 2, axis=1)
            for s in range(300)
        ]
    )
    assert stats.kstest(sq, stats.chi2(d).cdf).pvalue > 1e-4
    # without chi norms: fixed norm sqrt(d) (SORF, unchanged default)
    W0 = structured_hadamard_projection(16, d, 3)
    np.testing.assert_allclose(np.sum(W0**2, axis=1), d)
    np.testing.assert_allclose(U, W0 / np.sqrt(d), atol=1e-12)  # same directions


def test_draw_projection_sampler_option():
    from kernelkit.features import halton_projection, structured_hadamard_projection
    from kernelkit.features.sampling import SAMPLERS

    assert set(SAMPLERS) == {"iid", "orthogonal", "sorf", "hadamard", "halton"}
    np.testing.assert_array_equal(
        draw_projection(10, 3, 4, sampler="halton"), halton_projection(10, 3, 4)
    )
    np.testing.assert_array_equal(
        draw_projection(10, 4, 4, sampler="hadamard"),
        structured_hadamard_projection(10, 4, 4, chi_norms=True),
    )
    np.testing.assert_array_equal(
        draw_projection(10, 4, 4, sampler="sorf"), structured_hadamard_projection(10, 4, 4)
    )
    np.testing.assert_array_equal(
        draw_projection(10, 4, 4, sampler="orthogonal"), block_orthogonal_projection(10, 4, 4)
    )
    np.testing.assert_array_equal(draw_projection(10, 4, 4), gaussian_projection(10, 4, 4))
    with pytest.raises(ValueError, match="Unknown sampler"):
        draw_projection(10, 4, 4, sampler="sobol")
    with pytest.raises(ValueError, match="sampler"):
        draw_projection(10, 4, 4, sampler=3)


def test_feature_maps_draw_projections_with_sampler():
    """Every Gaussian-projection map passes ``sampler`` to draw_projection, so e.g. PositiveRF
    and the angular hybrid take "halton" / "hadamard" (Table 1's Halton-R and ORF-Had)."""
    from kernelkit.features import AngularHybridRF, PositiveRF, halton_projection

    X = np.random.default_rng(0).normal(size=(5, 4)) * 0.3
    fm = PositiveRF(16, sampler="halton", random_state=1).fit(X)
    np.testing.assert_array_equal(fm.projection_, halton_projection(16, 4, 1))
    fm = AngularHybridRF(8, 2, sampler="hadamard", random_state=1).fit(X)
    assert fm.projection_.shape == (8, 4) and np.all(np.isfinite(fm.approx_kernel(X)))


@pytest.mark.parametrize("fn_name", ["halton_projection", "structured_hadamard_projection"])
def test_new_sampler_bad_arguments(fn_name):
    import kernelkit.features as F

    fn = getattr(F, fn_name)
    with pytest.raises(ValueError, match="n_features"):
        fn(0, 3)
    with pytest.raises(ValueError, match="d must be >= 1"):
        fn(3, 0)
    with pytest.raises(TypeError, match="random_state"):
        fn(3, 3, random_state="x")
