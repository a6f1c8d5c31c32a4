"""Regression tests from a new user's try-out of the estimators (seventh round).

Complex feature maps in ``RandomFeatureRidge``: the objective the coefficients minimise
(the code was right and the documentation wrong: the test of the documentation fails
before its fix, the numerical one pins what it now states and fails on a broken solve);
``RandomFeatures(method="hybrid_clustered")`` on data with fewer distinct rows than its
k-means centres (the message named a parameter ``RandomFeatures`` does not have); bytes
class labels (the message called them mixed, or did not name the estimator and ``y``);
sample weights so far apart that the primal solve fails (the message blamed the noise).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
    RandomFeatures,
)
from kernelkit.features import RandomFourierFeatures

ROOT = Path(__file__).resolve().parents[2]
EPS = np.finfo(np.float64).eps


def _complex_ridge_data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((50, 2))
    y = X[:, 0] + 0.1 * rng.standard_normal(50)
    w = rng.integers(1, 4, 50).astype(float)
    return X, y, w


def _normal_equations(Phi, y, w, alpha):
    """``(A, rhs)`` of ``min_b sum_i w_i |y_i - phi_i^T b|^2 + alpha |b|^2`` (complex
    modulus): ``A = Phi^H W Phi + alpha I``, ``rhs = Phi^H W y``."""
    A = np.conj(Phi).T @ (Phi * w[:, None]) + alpha * np.eye(Phi.shape[1])
    return A, np.conj(Phi).T @ (w * y)


@pytest.mark.parametrize("fit_intercept", [False, True])
def test_ridge_complex_features_minimise_the_complex_modulus_objective(fit_intercept):
    """With complex features (``RandomFourierFeatures(complex=True)``) ``coef_`` is the
    posterior mean weight of the complex random-feature GP (App. D), i.e. the minimiser of
    ``sum_i w_i |y_i - phi_i^T b - c|^2 + alpha |b|^2`` with the complex modulus, and not
    of the real-part residual ``(y_i - Re(phi_i^T b) - c)^2`` that the fit docstring and
    the user guide stated (that objective is ridge on ``[Re Phi, -Im Phi]``, another
    model: here 0.07 away in the predictions)."""
    X, y, w = _complex_ridge_data()
    alpha = 0.3
    fm = RandomFourierFeatures(n_features=40, complex=True, random_state=0)
    est = RandomFeatureRidge(fm, alpha=alpha, fit_intercept=fit_intercept).fit(
        X, y, sample_weight=w
    )
    Phi = est.feature_map_.transform(X)  # (50, 40) complex
    assert np.iscomplexobj(Phi)
    yc = y
    if fit_intercept:  # centred at the weighted means, as the guide says
        Phi = Phi - np.average(Phi, 0, w)
        yc = y - np.average(y, 0, w)
    A, rhs = _normal_equations(Phi, yc, w, alpha)
    b = np.linalg.solve(A, rhs)
    # both are backward-stable solves of systems of condition number kappa (Cholesky of
    # the same matrix in the estimator): forward errors ~ kappa eps |b|, with a factor
    # 100 for the dimension (40) and the differently ordered sums
    kappa = np.linalg.cond(A)
    tol = 100 * kappa * EPS * np.linalg.norm(b)
    assert np.linalg.norm(est.coef_ - b) <= tol
    # the real-part objective's minimiser is far beyond that: the test tells them apart
    R = np.hstack([Phi.real, -Phi.imag])  # Re(phi^T b) = Re(phi) Re(b) - Im(phi) Im(b)
    A_re, rhs_re = _normal_equations(R, yc, w, alpha)
    b_re = np.linalg.solve(A_re, rhs_re)
    b_re = b_re[:40] + 1j * b_re[40:]
    assert np.linalg.norm(b_re - b) > 1e6 * tol


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_ridge_docs_state_the_complex_modulus_objective():
    """The fit docstring and the guide's sample-weight table state the objective that
    ``coef_`` minimises (previous test): the residual ``y_i - phi_i^T b - c`` in the
    modulus, not its real part (they said ``Re(phi_i^T b)`` inside the square)."""
    doc = _flat(RandomFeatureRidge.fit.__doc__)
    guide = _flat((ROOT / "docs" / "guide" / "estimators.md").read_text(encoding="utf-8"))
    row = next(line for line in guide.split("| `RandomFeatureRidge` |")[1:])
    for text in (doc, row[:200]):
        assert "Re(phi_i^T b)" not in text
        assert "|y_i - phi_i^T b - c|^2" in text


@pytest.mark.parametrize("side", ["X", "Y"])
def test_random_features_hybrid_clustered_too_few_distinct_rows_message(side):
    """``RandomFeatures(method="hybrid_clustered")`` fits ``ClusteredHybridRF`` with its
    default two k-means centres per side: on data of one distinct row the error said
    "lower n_clusters", a parameter ``RandomFeatures`` does not have. It names the method,
    the two centres it uses, the side and its distinct rows, and what to do instead."""
    rng = np.random.default_rng(0)
    X = 0.3 * rng.standard_normal((20, 3))
    same = np.tile(X[:1], (10, 1))  # ten copies of one row
    rf = RandomFeatures(method="hybrid_clustered", n_components=256, random_state=0)
    with pytest.raises(ValueError) as info:
        if side == "X":
            rf.fit(same)
        else:
            rf.fit(X, Y=same)
    msg = str(info.value)
    assert "RandomFeatures(method='hybrid_clustered')" in msg
    assert f"1 distinct {side} row" in msg
    assert "ClusteredHybridRF(n_clusters=" in msg  # how to fit one centre instead
    assert "lower n_clusters" not in msg


def test_clustered_hybrid_too_few_distinct_rows_is_a_value_error_with_its_counts():
    """``ClusteredHybridRF`` on fewer distinct rows than centres raises
    ``TooFewDistinctRows``, a ``ValueError`` (scikit-learn's checks and callers catching
    ``ValueError`` see no change) that carries the counts; ``RandomFeatures`` words its
    own message from them, not from the text of the map's."""
    from kernelkit.features import ClusteredHybridRF
    from kernelkit.features.hybrid.clustered import TooFewDistinctRows

    X = np.tile(np.array([[0.1, -0.2, 0.3]]), (7, 1))  # seven copies of one row
    with pytest.raises(TooFewDistinctRows) as info:
        ClusteredHybridRF(n_features=16, n_clusters=3, random_state=0).fit(X)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.n_clusters, err.side, err.n_distinct, err.n_samples) == (3, "X", 1, 7)
    assert "lower n_clusters" in str(err)  # the map's own parameter, in its own terms


def _bytes_label_fits():
    """``(name, fit)`` pairs fitting each classifier on bytes labels, in memory and out of
    core (a Dask array; an iterable of blocks)."""
    import dask.array as da

    X = np.random.default_rng(0).standard_normal((20, 2))
    y = np.array([b"cat", b"dog"] * 10)
    gp = RandomFeatureGPClassifier(RandomFourierFeatures(16, random_state=0), random_state=0)
    nw = NadarayaWatsonClassifier(n_components=16, random_state=0)
    Xd, yd = da.from_array(X, chunks=10), da.from_array(y, chunks=10)
    blocks = [(X[:10], y[:10]), (X[10:], y[10:])]
    return [
        ("RandomFeatureGPClassifier", lambda: gp.fit(X, y)),
        ("RandomFeatureGPClassifier", lambda: gp.fit(Xd, yd)),
        ("RandomFeatureGPClassifier", lambda: gp.fit(blocks, None)),
        ("NadarayaWatsonClassifier", lambda: nw.fit(X, y)),
        ("NadarayaWatsonClassifier", lambda: nw.fit(Xd, yd)),
    ]


@pytest.mark.parametrize("case", range(5))
def test_bytes_labels_error_says_bytes_are_not_supported(case):
    """Bytes labels (``np.array([b"cat", b"dog"])``) are of one sortable type, but
    scikit-learn's classification targets refuse them. In memory the classifiers said
    "class labels must be of one type that can be sorted (...), got bytes", as if the
    labels were mixed; out of core the GP classifier gave scikit-learn's message without
    naming the estimator or ``y``. Now every path names both and says what to do."""
    name, fit = _bytes_label_fits()[case]
    with pytest.raises(TypeError) as info:
        fit()
    msg = str(info.value)
    assert msg.startswith(f"{name}: y: ")
    assert "bytes is not supported" in msg
    assert "one type that can be sorted" not in msg


@pytest.mark.parametrize("cls", [RandomFeatureGPClassifier, NadarayaWatsonClassifier])
def test_mixed_type_labels_error_unchanged(cls):
    """Control: labels of two types (numbers and strings) keep the message that names
    their types (passes before and after the fix of bytes labels)."""
    X = np.random.default_rng(0).standard_normal((20, 2))
    y = np.array(["a", 1] * 10, dtype=object)  # a string first: scikit-learn sorts them
    with pytest.raises(TypeError, match=r"one type that can be sorted .* got int, str"):
        cls(random_state=0).fit(X, y)


def _huge_weight_data():
    rng = np.random.default_rng(18)
    X = rng.standard_normal((60, 2))
    y = X[:, 0]
    return X, y, np.where(y > 0, "a", "b")


@pytest.mark.parametrize("kind", ["ridge", "gp", "gpc"])
def test_primal_solve_failing_on_far_apart_sample_weights_names_them(kind):
    """One row of weight 1e200 among weights 1 (60 rows, 32 features: the primal form)
    makes ``B = I + Phi^H W Phi / noise`` of entries ~1e200 whose Cholesky factorisation
    cancels to negative pivots: the error blamed the noise ("increase the noise /
    regularisation", which does not help) and did not name ``sample_weight``. It now
    names it, its spread, and the ``n x n`` form that solves it."""
    X, y, labels = _huge_weight_data()
    w = np.ones(60)
    w[0] = 1e200
    fm = RandomFourierFeatures(32, random_state=0)
    est = {
        "ridge": RandomFeatureRidge(fm, alpha=1.0),
        "gp": RandomFeatureGPRegressor(fm, noise=0.1),
        "gpc": RandomFeatureGPClassifier(fm, random_state=0),
    }[kind]
    target = labels if kind == "gpc" else y
    with pytest.raises(np.linalg.LinAlgError) as info:
        est.fit(X, target, sample_weight=w)
    msg = str(info.value)
    assert f"{type(est).__name__}: sample_weight spans 1e+200" in msg
    assert "solver='dual'" in msg


def test_dual_solve_of_far_apart_sample_weights_is_the_limit():
    """The remedy the message gives: ``solver="dual"`` fits the weights of the previous
    test. A weight of 1e200 is the row's exact constraint; a weight of 1e8 differs from it
    by a noise ``0.1 / 1e8`` on that row, so the posterior means (of order 1) agree to
    ~1e-9 (measured 1.4e-9). The reference is the dual formula ``Phi_s Phi^T (Phi Phi^T +
    diag(noise / w))^-1 y`` at weight 1e8, solved here with NumPy: 1e-6 leaves room for
    the conditioning of the 60 x 60 system."""
    X, y, _ = _huge_weight_data()
    fm = RandomFourierFeatures(32, random_state=0)
    gp = RandomFeatureGPRegressor(fm, noise=0.1, solver="dual")
    w = np.ones(60)
    w[0] = 1e200
    huge = gp.fit(X, y, sample_weight=w).predict(X)
    w[0] = 1e8
    Phi = gp.feature_map_.transform(X)  # the map does not depend on the weights
    reference = Phi @ Phi.T @ np.linalg.solve(Phi @ Phi.T + np.diag(0.1 / w), y)
    np.testing.assert_allclose(huge, reference, rtol=0, atol=1e-6)


def test_primal_solve_failing_without_far_apart_weights_keeps_its_message():
    """Control: a failure not due to the weights (equal weights; a noise of 1e-20 in the
    primal form of 128 features for 60 rows, whose ``B`` has condition ~1e20) blames the
    noise and says nothing of the weights (passes before and after the fix)."""
    X, y, _ = _huge_weight_data()
    fm = RandomFourierFeatures(128, random_state=0)
    est = RandomFeatureGPRegressor(fm, noise=1e-20, solver="primal")
    with pytest.raises(np.linalg.LinAlgError) as info:
        est.fit(X, y, sample_weight=np.full(60, 2.0))
    assert "increase the noise" in str(info.value)
    assert "sample_weight" not in str(info.value)
