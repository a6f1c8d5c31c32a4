"""SDERF fitted on degenerate data: rank-deficient moments and their canonical null basis.

Data with fewer rows than dimensions (n = 3, d = 8), a constant-zero column, a constant
non-zero column, duplicated rows and one-hot rows. Where the moment matrix N is
rank-deficient, the fit replaces LAPACK's arbitrary null-space eigenvectors by a
canonical basis and sets ``a_l = 0`` there. Checked: the estimate stays unbiased (on the
fitting data and on new points with components in the null space), ``variance()`` is
the Monte Carlo variance, NumPy and torch features agree, and the features do not depend
on the row order or the memory layout of the fitting data.
"""

from __future__ import annotations

import numpy as np
import pytest
from favor_helpers import Z_BOUND, assert_unbiased, exact_kernel, mc_variance_z, single_products

from kernelkit.features import SDERF

D = 8
#: features per Monte Carlo estimate: the M products f(w_m, x) f(w_m, y) are i.i.d. draws
#: over the projections, so one fit of M features is M independent seeds of one feature
M = 20_000


def _data(name: str) -> np.ndarray:
    rng = np.random.default_rng(3)
    if name == "n3":  # fewer rows than dimensions: N has rank 3
        return rng.standard_normal((3, D)) * 0.3
    if name == "zero_column":  # coordinate 2 unused: N has a 1-dimensional null space
        X = rng.standard_normal((10, D)) * 0.3
        X[:, 2] = 0.0
        return X
    if name == "constant_column":  # full rank through the mean term of N
        X = rng.standard_normal((10, D)) * 0.3
        X[:, 5] = 0.4
        return X
    if name == "duplicated_rows":  # 5 distinct rows of 12: rank 5
        X = rng.standard_normal((5, D)) * 0.3
        return np.vstack([X, X, X[:2]])
    if name == "one_hot":  # rows e_0, e_3, e_3, e_5: rank 3
        return np.eye(D)[[0, 3, 3, 5]] * 0.7
    raise ValueError(name)


CASES = ["n3", "zero_column", "constant_column", "duplicated_rows", "one_hot"]
NULL_DIM = {"n3": 5, "zero_column": 1, "constant_column": 0, "duplicated_rows": 3, "one_hot": 5}


def _null_space(X: np.ndarray) -> np.ndarray:
    """Orthonormal basis (D, r) of the null space of N = mean (x_i + x_j)(x_i + x_j)^T,
    i.e. of the orthogonal complement of the row span of X."""
    _, s, vt = np.linalg.svd(X)
    rank = int(np.sum(s > 1e-10 * s[0]))
    return vt[rank:].T


def _new_points(X: np.ndarray) -> np.ndarray:
    """Two fitting rows moved into the null space, and two points of the null space alone
    (points in the row span where the null space is empty), norms about 0.3."""
    rng = np.random.default_rng(11)
    Q0 = _null_space(X)
    if Q0.shape[1] == 0:
        Q0 = np.eye(D)[:, :2]
    U = rng.standard_normal((4, Q0.shape[1])) @ Q0.T
    U *= 0.3 / np.linalg.norm(U, axis=1, keepdims=True)
    return np.vstack([X[:2] + U[:2], U[2:]])


def _fit(X, kernel="softmax", n_features=M, seed=5):
    return SDERF(n_features=n_features, kernel=kernel, random_state=seed).fit(X)


@pytest.mark.parametrize("name", CASES)
def test_null_space_gets_a_zero(name):
    # the data sets do have the intended null spaces, and the fit zeroes their a_l
    X = _data(name)
    assert _null_space(X).shape[1] == NULL_DIM[name]
    a = np.asarray(_fit(X, n_features=4)._parameters().a)
    assert np.sum(a == 0.0) == NULL_DIM[name]
    assert np.all(a <= 0.0)


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("name", CASES)
def test_unbiased_on_fitting_and_null_space_points(name, kernel):
    X = _data(name)
    fm = _fit(X, kernel)
    for label, A in (("fitting rows", X[:4]), ("new points", _new_points(X))):
        K = exact_kernel(A, A, kernel)
        K_hat = np.asarray(fm.approx_kernel(A, A))
        V = np.asarray(fm.variance(A, A))
        # |z| < Z_BOUND per entry (two-sided p ~ 7e-6) with the SE from variance(), and
        # SE < 0.05 |K| (measured <= 0.03), so a relative bias above ~0.25 is caught; a
        # basis without the QR (not orthonormal) gives max |z| of 9 to 68
        assert_unbiased(K_hat, K, V, label=f"{name} {kernel} {label}")


@pytest.mark.parametrize("name", CASES)
def test_variance_matches_monte_carlo(name):
    X = _data(name)
    fm = _fit(X)
    for label, A in (("fitting rows", X[:4]), ("new points", _new_points(X))):
        g = single_products(fm, A, A)  # (4, 4, M) i.i.d. products
        # variance() is of the mean of M products: M times it is one product's variance;
        # z from the empirical SE of the sample variance (4th central moment)
        z, rel_se = mc_variance_z(g, M * np.asarray(fm.variance(A, A)))
        assert np.abs(z).max() < Z_BOUND, f"{name} {label}: max |z| {np.abs(z).max()}"
        # power: the relative SE of the sample variance is measured <= 0.2; below 0.25 a
        # relative error of the variance above Z_BOUND * 0.25 ~ 1.1 is caught
        assert rel_se.max() < 0.25, f"{name} {label}: relative SE {rel_se.max()}"


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("name", CASES)
def test_numpy_and_torch_transforms_agree(name, kernel):
    torch = pytest.importorskip("torch")
    X = _data(name)
    fm = _fit(X, kernel, n_features=64)
    A = np.vstack([X, _new_points(X)])
    F_np = np.asarray(fm.transform(A))
    F_t = fm.transform(torch.as_tensor(A, dtype=torch.float64))
    assert F_t.dtype == torch.float64
    # features are exp(O(1)) of sums of D = 8 products of O(1) terms: rounding of a few
    # ulp of the exponent, 1e-13 relative leaves a margin of ~100 (measured ~1e-15)
    np.testing.assert_allclose(F_t.numpy(), F_np, rtol=1e-13, atol=0)
    K_t = fm.approx_kernel(torch.as_tensor(A, dtype=torch.float64))
    np.testing.assert_allclose(K_t.numpy(), np.asarray(fm.approx_kernel(A)), rtol=1e-13)


@pytest.mark.parametrize("name", CASES)
def test_features_do_not_depend_on_row_order_or_layout(name):
    X = _data(name)
    A = np.vstack([X, _new_points(X)])  # the new points see the null-space basis
    F = np.asarray(_fit(X, n_features=64).transform(A))
    rng = np.random.default_rng(0)
    copies = [X[rng.permutation(len(X))] for _ in range(3)] + [np.asfortranarray(X)]
    for X2 in copies:
        F2 = np.asarray(_fit(X2, n_features=64).transform(A))
        # the moments change by rounding (another summation order), the eigenvectors of
        # the non-null eigenvalues (gaps >= 1.5e-2 here) by rounding / gap ~ 1e-14; measured
        # up to 1e-14 relative. LAPACK's own null basis instead turns by O(1)
        np.testing.assert_allclose(F2, F, rtol=1e-11, atol=0)
