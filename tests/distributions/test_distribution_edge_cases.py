"""kernelkit.distributions on the inputs a new user brings: extreme lengthscales, far
queries, pandas targets, unseen labels, non-numeric values, empty inputs; and exact
references on discrete data, where the kernels are indicators."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kernelkit.distributions import (
    KERNEL_NAMES,
    ConditionalMeanEmbedding,
    JointDistribution,
    KernelLogisticRegression,
    LowRankBasis,
    PolynomialJointDistribution,
    clipped_log_loss,
    holdout_select,
)
from kernelkit.distributions._kernels import make_kernel


def _data(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    Y = X[:, :1] + 0.3 * rng.standard_normal((n, 1))
    return X, Y


def _indicator(A, B):
    """``k(a, b) = 1(a = b)``: the limit of every named kernel as the lengthscale -> 0."""
    return np.all(A[:, None, :] == B[None, :, :], axis=-1).astype(np.float64)


def _ones(A, B):
    """``k(a, b) = 1``: the limit of every named kernel as the lengthscale -> inf."""
    return np.ones((A.shape[0], B.shape[0]))


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
@pytest.mark.parametrize("ls", [1e-300, 1e-160, 1e160, 1e300])
def test_extreme_lengthscales_give_the_kernel_limits(kernel, ls):
    """1 / l^2 is 0 or not finite in float64 beyond l ~ 1e+-154 (and l^2 raised
    ZeroDivisionError / OverflowError, or 0 * inf gave NaN). The kernel of distinct
    points is then exactly the indicator (l -> 0) or the constant 1 (l -> inf), so the fit
    equals the fit with that kernel given as a callable: the same 0/1 kernel values, the
    same pivots, so the same arithmetic up to the order of the sums (1e-12)."""
    X, Y = _data()
    limit = _indicator if ls < 1 else _ones
    kw = {"reg": 1e-3, "rel_tol": 1e-10}
    named = JointDistribution(
        kernel_x=kernel, kernel_y=kernel, lengthscale_x=ls, lengthscale_y=ls, **kw
    ).fit(X, Y)
    ref = JointDistribution(kernel_x=limit, kernel_y=limit, **kw).fit(X, Y)
    got = named.conditional_expectation(Y, X[:5])
    want = ref.conditional_expectation(Y, X[:5])
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    K = make_kernel(kernel, ls)(X[:4], np.vstack([X[:2], X[2:4] + 1.0]))
    np.testing.assert_array_equal(K, limit(X[:4], np.vstack([X[:2], X[2:4] + 1.0])))


@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_queries_far_outside_the_data_are_exact_zeros_without_warnings(kernel):
    """A squared distance that overflows is inf and the kernel there is its limit 0
    (every named kernel is below 1e-300 already at distance 1e3 here): the features are
    exactly 0, with no overflow warning and no NaN (Matern's exp(-r) (1 + r) was
    0 * inf)."""
    X, _ = _data()
    basis = LowRankBasis(kernel, 1.0, rel_tol=1e-6).fit(X)
    far = np.array([[1e300, 1e300], [-1e200, 3.0], [1e155, -1e155]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        psi = basis.transform(far)
    np.testing.assert_array_equal(psi, 0.0)


@pytest.mark.parametrize(
    "Estimator", [JointDistribution, ConditionalMeanEmbedding, PolynomialJointDistribution]
)
def test_pandas_series_target_equals_numpy(Estimator):
    """A 1-D pandas ``Y`` (a Series has ``ndim`` but no ``reshape``) raised AttributeError;
    it is the same column as the NumPy array, so the fits are identical."""
    pd = pytest.importorskip("pandas")
    X, Y = _data()
    frame = pd.DataFrame(X, columns=["u", "v"])
    a = Estimator().fit(frame, pd.Series(Y[:, 0], name="y"))
    b = Estimator().fit(X, Y)
    np.testing.assert_array_equal(
        a.conditional_expectation(Y, frame[:4]), b.conditional_expectation(Y, X[:4])
    )
    assert a.score(frame, pd.Series(Y[:, 0])) == b.score(X, Y)


def test_joint_distribution_takes_a_list_of_block_pairs():
    """The documented iterable of ``(X_block, Y_block)`` pairs, given as a list, was
    taken for array-like X and failed with "requires y to be passed". The blocks hold the
    same rows, so the fit is the fit on the arrays (identical: same exact path)."""
    X, Y = _data(60)
    blocks = [(X[i : i + 20], Y[i : i + 20, 0]) for i in range(0, 60, 20)]
    want = JointDistribution().fit(X, Y).conditional_expectation(Y, X[:4])
    for given in (blocks, tuple(blocks), iter(blocks)):
        got = JointDistribution().fit(given).conditional_expectation(Y, X[:4])
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="pass Y=None"):
        JointDistribution().fit(blocks, Y)


def test_klr_score_rejects_labels_unseen_at_fit():
    """Labels outside ``classes_`` silently counted as the negative class in (32)."""
    X, _ = _data(60)
    y = np.where(X[:, 0] > 0, "yes", "no")
    klr = KernelLogisticRegression().fit(X, y)
    assert np.isfinite(klr.score(X, y))
    with pytest.raises(ValueError, match=r"not seen at fit.*'maybe'"):
        klr.score(X, np.where(X[:, 0] > 0, "yes", "maybe"))
    with pytest.raises(ValueError, match="not seen at fit"):
        KernelLogisticRegression().fit(X, (X[:, 0] > 0).astype(int)).score(X, np.full(60, 5))


def test_klr_probabilities_of_confident_rows_keep_their_precision():
    """``1 - expit(d)`` is exactly 0 for d > 37 (and loses digits long before); the
    class-0 probability is ``expit(-d)``, to a few ulps of relative error (1e-15)."""
    X, _ = _data(60)
    klr = KernelLogisticRegression(reg=1e-12).fit(X, X[:, 0] > 0)  # separable: large |d|
    d = klr.decision_function(X)
    assert d.max() > 40  # rows where 1 - expit(d) was 0
    P = klr.predict_proba(X)
    np.testing.assert_allclose(P[:, 0], 1.0 / (1.0 + np.exp(d)), rtol=1e-15, atol=0)
    eps = np.finfo(np.float64).eps  # each term within an ulp of its value: the sum within 2 eps
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=2 * eps)


def test_klr_decision_function_over_several_slabs_is_psi_c_row_by_row():
    """``decision_function`` forms the basis values a slab of rows at a time: over three
    slabs (the last one short) every row, in order, is ``psi(x)^T c`` of one call.

    The two differ only in the order of BLAS's sums: ``psi = k_piv(x) T`` over ``k``
    pivots, then ``psi . c`` over ``m`` terms, each sum within ``n eps`` of the sum of
    its terms' moduli (``n`` terms); with Gaussian kernel values in (0, 1], ``|k_piv|``
    is at most 1, hence the bound ``2 eps (m |psi| |c| + k (1^T |T|) |c|)`` per row."""
    from kernelkit._backend.chunks import FIRST_SLAB_ROWS, SLAB_ELEMENTS

    X, _ = _data(200)
    klr = KernelLogisticRegression(max_rank=64).fit(X, X[:, 0] > 0)
    T, c = klr.basis_.coef_, klr.coef_  # (k, m), (m,)
    k, m = T.shape
    rows = max(FIRST_SLAB_ROWS, SLAB_ELEMENTS // m)
    Xq = np.random.default_rng(1).standard_normal((2 * rows + 37, 2))
    d = klr.decision_function(Xq)
    Psi = klr.basis_.transform(Xq)  # (n, m)
    eps = np.finfo(np.float64).eps
    tol = 2 * eps * (m * np.abs(Psi) @ np.abs(c) + k * np.abs(T).sum(axis=0) @ np.abs(c))
    assert d.shape == (len(Xq),)
    assert np.all(np.abs(d - Psi @ c) <= tol)


@pytest.mark.parametrize("labels", [["a", None], ["a", 1]])
def test_klr_names_labels_that_cannot_be_sorted(labels):
    """Labels of mixed types failed inside NumPy's sort with no mention of y."""
    X, _ = _data(40)
    with pytest.raises(TypeError, match="y: the labels must be mutually comparable"):
        KernelLogisticRegression().fit(X, np.array(labels * 20, dtype=object))


@pytest.mark.parametrize("scale", [1e-300, 1e-200, 1e200, 1e300])
def test_polynomial_standardisation_is_scale_invariant(scale):
    """``X.std`` squares the data: it overflowed beyond |x| ~ 1e154 (scale inf: all
    monomials constant) and underflowed to 0 below ~1e-154 (scale reset to 1: the same),
    so the model silently became independence. Standardised inputs are the same up to
    a few ulps at any scale, so the conditional expectations agree to 1e-12 (the fits
    solve well-conditioned m = 6 systems)."""
    X, Y = _data(50)
    ref = PolynomialJointDistribution(degree=2).fit(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = PolynomialJointDistribution(degree=2).fit(X * scale, Y * scale)
        values = got.conditional_expectation(Y, X[:5] * scale)
    np.testing.assert_allclose(values, ref.conditional_expectation(Y, X[:5]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("values", [np.full(30, "a"), np.ones(30) * 1j])
def test_cme_rejects_non_real_f(values):
    """Complex f lost its imaginary part with only a ComplexWarning; strings failed in
    NumPy's conversion without naming f. JointDistribution already raised this TypeError."""
    X, Y = _data()
    for model in (ConditionalMeanEmbedding().fit(X, Y), JointDistribution().fit(X, Y)):
        with pytest.raises(TypeError, match="f values must be real"):
            model.conditional_expectation(values, X[:2])


def test_clipped_log_loss_rejects_empty_and_non_numeric_labels():
    """An empty input gave NaN with RuntimeWarnings; string labels a NumPy message."""
    with pytest.raises(ValueError, match="empty"):
        clipped_log_loss([], [])
    with pytest.raises(TypeError, match="labels must be 0/1 or bool"):
        clipped_log_loss(["a", "b"], [0.5, 0.5])
    # the loss itself, by hand: -(log 0.9 + log(1 - 0.2)) / 2
    assert clipped_log_loss([True, False], [0.9, 0.2]) == pytest.approx(
        -(np.log(0.9) + np.log(0.8)) / 2, rel=1e-15
    )


def test_holdout_select_names_an_empty_grid():
    """``{"reg": []}`` has no grid points; it was reported as non-finite losses."""
    X, Y = _data()
    with pytest.raises(ValueError, match="no grid points"):
        holdout_select(JointDistribution(), {"reg": []}, X, Y)


# ---------------------------------------------------------------- exact discrete references
def _discrete(n=400, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4  # 6 of the 12 (a, b) cells occur
    counts = np.zeros((3, 4))
    np.add.at(counts, (a, b), 1.0)
    return a[:, None].astype(float), b[:, None].astype(float), counts


@pytest.mark.parametrize("constraint", [None, "normalized"])
@pytest.mark.parametrize("Estimator", [JointDistribution, ConditionalMeanEmbedding])
def test_indicator_kernels_give_the_conditional_counts(Estimator, constraint):
    """With indicator kernels on discrete X and Y the bases span every function of the
    levels, and the unregularised optimum of (8) is the empirical density ratio, so
    ``Q(Y = b | X = a) = count(a, b) / count(a)`` (for the CME: (44) with ``reg -> 0``).
    ``reg = 1e-12`` biases the coefficients by a relative ``reg n^2 / (c_a c_b)`` (c the
    level counts, >= 40 here; eigenvalues of the indicator Gram), below 1e-10: 1e-9."""
    X, Y, counts = _discrete()
    model = Estimator(
        kernel_x=_indicator, kernel_y=_indicator, reg=1e-12, rel_tol=1e-14, constraint=constraint
    ).fit(X, Y)
    levels = np.array([[0.0], [1.0], [2.0]])
    P = np.stack(
        [model.conditional_probability(Y[:, 0] == b, levels) for b in range(4)], axis=1
    )  # (3, 4)
    np.testing.assert_allclose(P, counts / counts.sum(axis=1, keepdims=True), atol=1e-9)


def test_klr_indicator_kernel_gives_the_event_frequencies():
    """KLR on the indicator basis has one free logit per level; ``reg = 1e-9`` shifts
    each by about ``2 reg c / (count p (1 - p))`` (<= 1e-8 here), and L-BFGS stops at a
    gradient of 1e-10: probabilities within 1e-7 of the frequency of the event per level."""
    X, Y, counts = _discrete()
    event = Y[:, 0] >= 2
    klr = KernelLogisticRegression(kernel=_indicator, reg=1e-9, rel_tol=1e-14).fit(X, event)
    p = klr.predict_proba(np.array([[0.0], [1.0], [2.0]]))[:, 1]
    np.testing.assert_allclose(p, counts[:, 2:].sum(axis=1) / counts.sum(axis=1), atol=1e-7)


def test_polynomial_monomial_count_is_checked_before_anything_is_built():
    """degree 4 on 40 features is C(44, 4) = 135751 monomials (a 137 GiB Gram matrix):
    refused up front, naming degree and max_monomials, for the basis and for the joint
    model (either side); raising max_monomials deliberately lets a count through."""
    from kernelkit.distributions import PolynomialBasis, PolynomialJointDistribution

    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((30, 40)), rng.standard_normal((30, 2))
    with pytest.raises(ValueError, match=r"degree=4 on 40 features .* = 135751 .*max_monomials"):
        PolynomialBasis(degree=4).fit(X)
    for a, b in ((X, Y), (Y, X)):
        with pytest.raises(ValueError, match=r"C\(44, 4\) = 135751"):
            PolynomialJointDistribution(degree=4).fit(a, b)
    # 2 features, degree 3: C(5, 3) = 10 monomials
    with pytest.raises(ValueError, match="max_monomials=9"):
        PolynomialBasis(degree=3, max_monomials=9).fit(Y)
    basis = PolynomialBasis(degree=3, max_monomials=10).fit(Y)
    assert basis.exponents_.shape == (10, 2)
    model = PolynomialJointDistribution(degree=2, max_monomials=6).fit(Y, Y[:, :1])
    assert model.basis_x_.exponents_.shape == (6, 2)
    with pytest.raises(ValueError, match="max_monomials"):
        PolynomialBasis(max_monomials=0).fit(Y)
