"""ConditionalMeanEmbedding and KernelLogisticRegression on Dask arrays and a LocalCluster.

References: the exact in-memory fit (all rows as the pivot sample), the NumPy fit of the
same pivot sample, explicit dense features of the fitted basis (the closed form of (44)
and the optimality condition of the KLR objective), and the in-memory predictions.

Tolerances: the chunked statistics are the in-memory sums in another order (relative
round-off ``~n eps``, n <= 4000: ``1e-12``), the basis is a rotation of them (its
eigenvectors move by round-off over the eigen-gaps), so fitted coefficients and outputs
agree to ``1e-9`` relative. KLR's L-BFGS is compared where it converges (``reg = 1``, 40
iterations) or over its first 30 iterations: a long ill-conditioned run amplifies
round-off along its path (its own tolerance is then the limit).
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.distributions import BasisCache, ConditionalMeanEmbedding, KernelLogisticRegression

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

CME_KW = {"lengthscale_x": 0.6, "lengthscale_y": 0.6, "reg": 1e-4, "rel_tol": 1e-3}
KLR_KW = {"lengthscale": 1.0, "reg": 1.0, "rel_tol": 1e-4}
XQ = np.array([[-1.2, 0.3], [0.0, 0.0], [0.9, -0.5], [1.5, 1.0]])


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    Y = 0.8 * X[:, :1] + 0.6 * rng.standard_normal((n, 1))
    labels = np.where(X[:, 0] - X[:, 1] + 0.5 * rng.standard_normal(n) > 0, "yes", "no")
    return X, Y, labels


@pytest.fixture(scope="module")
def data():
    return _data()


def _close(got, want, rtol=1e-9, what=""):
    got = got.compute() if hasattr(got, "compute") else got
    scale = max(np.abs(want).max(), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale, err_msg=what)


def _cme_outputs(model, X, Y):
    return {
        "coef": model.coef_,
        "mean": model.conditional_expectation(Y, XQ),
        "second": model.conditional_expectation(lambda y: y**2, XQ),
        "weights": model.conditional_weights(XQ),
        "norm": model.normalization(XQ),
        "loss": model.validation_loss(X[:300], Y[:300]),
    }


# --------------------------------------------------------------------------------- CME
@pytest.mark.parametrize("constraint", [None, "normalized", "positive"])
def test_cme_dask_with_all_rows_equals_exact_fit(data, constraint):
    X, Y, _ = data
    exact = ConditionalMeanEmbedding(constraint=constraint, **CME_KW).fit(X, Y)
    Xd, Yd = da.from_array(X, chunks=(700, 1)), da.from_array(Y[:, 0], chunks=1100)
    with dask.config.set(scheduler="threads"):
        model = ConditionalMeanEmbedding(constraint=constraint, pivot_sample=len(X), **CME_KW).fit(
            Xd, Yd
        )
        np.testing.assert_array_equal(model.basis_y_.pivots_, exact.basis_y_.pivots_)
        assert model.pivot_rows_ is None and model.n_features_in_ == 2
        got = _cme_outputs(model, X, Y)
    for key, want in _cme_outputs(exact, X, Y).items():
        _close(got[key], want, what=key)


def test_cme_dask_equals_numpy_fit_of_the_same_sample(data):
    X, Y, _ = data
    ref = ConditionalMeanEmbedding(pivot_sample=700, random_state=4, **CME_KW).fit(X, Y)
    assert ref.basis_x_.factor_t_ is None and len(ref.pivot_rows_) == 700
    with dask.config.set(scheduler="threads"):
        model = ConditionalMeanEmbedding(pivot_sample=700, random_state=4, **CME_KW).fit(
            da.from_array(X, chunks=(800, 2)), Y
        )
        np.testing.assert_array_equal(model.pivot_rows_, ref.pivot_rows_)
        got = _cme_outputs(model, X, Y)
        Yd = da.from_array(Y, chunks=(500, 1))  # Dask f values: only the pivot rows are read
        _close(model.conditional_expectation(Yd, XQ), ref.conditional_expectation(Y, XQ))
    for key, want in _cme_outputs(ref, X, Y).items():
        _close(got[key], want, what=key)


def test_cme_sampled_fit_is_the_closed_form_on_explicit_features(data):
    """``F = A_Y^T A_X / (lambda_X + n reg)`` (44) with ``A`` the basis at all n rows."""
    X, Y, _ = data
    n, reg = len(X), CME_KW["reg"]
    model = ConditionalMeanEmbedding(pivot_sample=600, random_state=0, **CME_KW).fit(
        da.from_array(X, chunks=(1000, 2)), da.from_array(Y, chunks=(1000, 1))
    )
    Ax, Ay = model.basis_x_.transform(X), model.basis_y_.transform(Y)  # (n, m_X), (n, m_Y)
    lam = model.basis_x_.eigenvalues_
    np.testing.assert_allclose(Ax.T @ Ax, np.diag(lam), rtol=0, atol=1e-10 * lam.max())
    F = (Ay.T @ Ax) / (lam + n * reg)
    np.testing.assert_allclose(model.coef_, F, rtol=0, atol=1e-10 * np.abs(F).max())
    # the pivot y's are training rows: weights sit in those columns
    rows = model.pivot_rows_[model.basis_y_.pivots_]
    np.testing.assert_array_equal(model.Y_pivots_, Y[rows])
    w = model.conditional_weights(XQ)
    np.testing.assert_allclose(w[:, rows], model.pivot_weights(XQ), rtol=0, atol=0)
    assert np.count_nonzero(w) <= w.shape[0] * len(rows)


def test_cme_predictions_on_dask_stay_lazy(data):
    X, Y, _ = data
    model = ConditionalMeanEmbedding(**CME_KW).fit(X[:1500], Y[:1500])
    calls = []

    def rows(block):
        calls.append(len(block))
        return block

    Xs = np.repeat(XQ, 30, axis=0)
    Xn = da.from_array(Xs, chunks=(50, 2)).map_blocks(rows, meta=np.empty((0, 0)))
    with dask.config.set(scheduler="threads"):
        lazy = {
            "pivot_weights": model.pivot_weights(Xn),
            "conditional_weights": model.conditional_weights(Xn),
            "normalization": model.normalization(Xn),
            "mean": model.conditional_expectation(Y[:1500], Xn),
            "prob": model.conditional_probability(lambda y: y[:, 0] <= 0, Xn),
        }
        assert calls == [] and all(isinstance(v, da.Array) for v in lazy.values())
        want = {
            "pivot_weights": model.pivot_weights(Xs),
            "conditional_weights": model.conditional_weights(Xs),
            "normalization": model.normalization(Xs),
            "mean": model.conditional_expectation(Y[:1500], Xs),
            "prob": model.conditional_probability(lambda y: y[:, 0] <= 0, Xs),
        }
        for key, value in lazy.items():
            np.testing.assert_allclose(value.compute(), want[key], rtol=0, atol=1e-14)
        loss = model.validation_loss(da.from_array(X[2000:], chunks=(300, 2)), Y[2000:])
    assert sum(calls) >= len(Xs)
    assert loss == pytest.approx(model.validation_loss(X[2000:], Y[2000:]), rel=1e-12)


# --------------------------------------------------------------------------------- KLR
def test_klr_dask_with_all_rows_equals_exact_fit(data):
    X, _, labels = data
    exact = KernelLogisticRegression(**KLR_KW).fit(X, labels)
    Xd, yd = da.from_array(X, chunks=(700, 2)), da.from_array(labels, chunks=700)
    with dask.config.set(scheduler="threads"):
        model = KernelLogisticRegression(pivot_sample=len(X), **KLR_KW).fit(Xd, yd)
        d, proba, pred = (
            model.decision_function(Xd),
            model.predict_proba(Xd),
            model.predict(Xd),
        )
        assert all(isinstance(v, da.Array) for v in (d, proba, pred))
        score = model.score(Xd, yd)
        d, proba, pred = dask.compute(d, proba, pred)
    np.testing.assert_array_equal(model.classes_, ["no", "yes"])
    assert model.n_iter_ == exact.n_iter_
    _close(model.coef_, exact.coef_, what="coef")
    _close(d, exact.decision_function(X), what="decision")
    _close(proba, exact.predict_proba(X), what="proba")
    np.testing.assert_array_equal(pred, exact.predict(X))
    assert score == pytest.approx(exact.score(X, labels), rel=1e-9)


def test_klr_dask_equals_numpy_fit_of_the_same_sample_along_the_path(data):
    """reg = 1e-2: 30 L-BFGS iterations of the same objective (to round-off) agree."""
    X, _, labels = data
    kw = dict(KLR_KW, reg=1e-2, max_iter=30, pivot_sample=500, random_state=2)
    ref = KernelLogisticRegression(**kw).fit(X, labels)
    assert ref.basis_.factor_t_ is None and len(ref.pivot_rows_) == 500
    with dask.config.set(scheduler="threads"):
        model = KernelLogisticRegression(**kw).fit(da.from_array(X, chunks=(900, 2)), labels)
    np.testing.assert_array_equal(model.pivot_rows_, ref.pivot_rows_)
    assert model.n_iter_ == ref.n_iter_ == 30
    _close(model.coef_, ref.coef_, what="coef")


def test_klr_sampled_fit_minimises_its_objective_on_explicit_features(data):
    """The fit minimises ``f(c) = sum_i logaddexp(0, a_i) - t_i a_i + reg ||c||^2`` with
    ``a = A c`` and ``A`` the basis at all n rows; reference: Newton's method on f.

    L-BFGS stops at a relative decrease ``ftol = 1e-14`` of ``f ~ 2e3``: there the
    gradient is ``g ~ sqrt(2 L f ftol) ~ 1e-4`` (``L <= n / 4``, the largest curvature), so
    ``|c - c*| <= g / (2 reg)`` and ``f(c) - f* <= g^2 / (4 reg) ~ 1e-9``.
    """
    from scipy.special import expit

    X, _, labels = data
    reg = KLR_KW["reg"]
    model = KernelLogisticRegression(pivot_sample=400, random_state=0, **KLR_KW).fit(
        da.from_array(X, chunks=(1000, 2)), da.from_array(labels, chunks=1000)
    )
    A = model.basis_.transform(X)  # (n, m)
    t = (labels == "yes").astype(float)

    def f(c):
        a = A @ c
        return np.sum(np.logaddexp(0.0, a) - t * a) + reg * c @ c

    c = np.zeros(A.shape[1])
    for _ in range(30):  # Newton: f is smooth and 2 reg-strongly convex
        p = expit(A @ c)
        H = (A * (p * (1 - p))[:, None]).T @ A + 2 * reg * np.eye(len(c))
        c = c - np.linalg.solve(H, A.T @ (p - t) + 2 * reg * c)
    np.testing.assert_allclose(model.coef_, c, rtol=0, atol=1e-4 / (2 * reg))
    assert -1e-10 < f(model.coef_) - f(c) < 1e-9  # c: the optimum up to round-off


# ------------------------------------------------------------------------ bad input
def test_bad_dask_input_is_rejected(data):
    X, Y, labels = data
    Xd = da.from_array(X, chunks=(1000, 2))
    with pytest.raises(ValueError, match="requires y"):
        ConditionalMeanEmbedding().fit(Xd, None)
    with pytest.raises(ValueError, match="rows"):
        ConditionalMeanEmbedding().fit(Xd, Y[:100])
    with pytest.raises(ValueError, match="pivot_sample"):
        ConditionalMeanEmbedding(pivot_sample=1).fit(Xd, Y)
    with pytest.warns(UserWarning, match="basis_cache is not used"):
        ConditionalMeanEmbedding(basis_cache=BasisCache(), pivot_sample=200).fit(X[:500], Y[:500])
    Xn = X.copy()
    Xn[2500, 0] = np.nan
    with dask.config.set(scheduler="sync"), pytest.raises(ValueError, match="X: block 2 contains"):
        ConditionalMeanEmbedding(pivot_sample=100, random_state=0).fit(
            da.from_array(Xn, chunks=(1000, 2)), Y
        )
    with dask.config.set(scheduler="sync"), pytest.raises(ValueError, match="X: block 2 contains"):
        KernelLogisticRegression(pivot_sample=100, random_state=0).fit(
            da.from_array(Xn, chunks=(1000, 2)), labels
        )
    with pytest.raises(ValueError, match="binary"):
        KernelLogisticRegression().fit(Xd, np.arange(len(X)) % 3)
    with pytest.raises(ValueError, match="y has 10 labels but X has 3000 rows"):
        KernelLogisticRegression().fit(Xd, labels[:10])
    with pytest.raises(ValueError, match="continuous"):
        KernelLogisticRegression().fit(Xd, X[:, 0])
    model = KernelLogisticRegression(pivot_sample=200, random_state=0).fit(X[:600], labels[:600])
    with pytest.raises(ValueError, match="3 features"):
        model.decision_function(da.zeros((5, 3), chunks=(5, 3)))
    cme = ConditionalMeanEmbedding(pivot_sample=200, random_state=0).fit(X[:600], Y[:600])
    with pytest.raises(ValueError, match="3 features"):
        cme.pivot_weights(da.zeros((5, 3), chunks=(5, 3)))
    with pytest.raises(ValueError, match="first dimension 600"):
        cme.conditional_expectation(da.from_array(Y[:500]), XQ)


# -------------------------------------------------------------------------- the cluster
@pytest.mark.slow
def test_local_cluster_fits_equal_in_memory_fits(cluster_client):
    X, Y, labels = _data(n=2000, seed=1)
    cme_ref = ConditionalMeanEmbedding(pivot_sample=500, random_state=0, **CME_KW).fit(X, Y)
    klr_ref = KernelLogisticRegression(pivot_sample=500, random_state=0, **KLR_KW).fit(X, labels)
    Xd = da.from_array(X, chunks=(500, 2))
    with dask.config.set(scheduler=cluster_client):  # every pass on the two workers
        cme = ConditionalMeanEmbedding(pivot_sample=500, random_state=0, **CME_KW).fit(
            Xd, da.from_array(Y, chunks=(500, 1))
        )
        klr = KernelLogisticRegression(pivot_sample=500, random_state=0, **KLR_KW).fit(
            Xd, da.from_array(labels, chunks=500)
        )
        mean = cme.conditional_expectation(Y, da.from_array(XQ, chunks=(2, 2))).compute()
        proba = klr.predict_proba(Xd).compute()
    _close(cme.coef_, cme_ref.coef_, what="cme coef")
    _close(mean, cme_ref.conditional_expectation(Y, XQ), what="cme mean")
    assert klr.n_iter_ == klr_ref.n_iter_
    _close(klr.coef_, klr_ref.coef_, what="klr coef")
    _close(proba, klr_ref.predict_proba(X), what="klr proba")
