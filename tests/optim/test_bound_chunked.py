"""The SGB full-batch bound over Dask chunks, and BoundLogisticRegression on Dask input.

References: the objective, gradient and curvature written out from their definitions
(softmax, one-hot labels, the dense per-sample ``Sigma_j = C_j (x) x_j x_j^T`` of
``MultinomialBound.sigma``), the in-memory :func:`bound_step`, and the in-memory fit of
the same estimator -- threaded scheduler and a two-worker ``distributed.LocalCluster``.

Tolerances: a chunked result is the in-memory one summed in another order; for T sums of
terms bounded by ``a``, the two differ by at most ``~T eps a`` (T <= 2000: ``5e-13 a``),
so ``1e-12`` relative is round-off. The fits run 10-40 monotone bound steps whose map is
smooth, which keeps the difference at round-off too (bounded here by ``1e-10``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import logsumexp, softmax
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from kernelkit.optim import (
    BoundLogisticRegression,
    ChunkedCurvature,
    bound_step,
    chunked_bound,
    chunked_bound_step,
    multinomial_partition_bound,
)

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

RT = 1e-12  # relative round-off of re-ordered sums (module docstring)


def _iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _problem(seed=0, T=600, p=5, n=4, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, p)).astype(dtype)
    W = 0.5 * rng.standard_normal((p, n))
    y = rng.integers(0, n, T)
    return W, X, y


def _definitions(W, X, y, lam, mask):
    """Objective, gradient and dense curvature of the module docstring, written out."""
    T, n = len(X), W.shape[1]
    S = X @ W
    Y = np.eye(n)[y]
    Wp = W * mask[:, None]
    loss = np.mean(logsumexp(S, axis=1) - np.sum(S * Y, axis=1)) + 0.5 * lam * np.sum(Wp * W)
    grad = X.T @ (softmax(S, axis=1) - Y) / T + lam * Wp
    sigma = multinomial_partition_bound(W, X).sigma(X)  # (T, n p, n p): C_j (x) x_j x_j^T
    A = sigma.sum(axis=0) / T + lam * np.eye(n * W.shape[0])
    return loss, grad, A


@pytest.fixture(params=["threads", "sync"])
def scheduler(request):
    with dask.config.set(scheduler=request.param):
        yield request.param


# ----------------------------------------------------------------- the bound's pieces
def test_chunked_bound_equals_its_definition(scheduler):
    W, X, y = _problem()
    lam, mask = 0.3, np.array([1.0, 1.0, 0.0, 1.0, 0.5])
    loss, grad, A = _definitions(W, X, y, lam, mask)
    Xd = da.from_array(X, chunks=((250, 0, 100, 250), (2, 3)))  # uneven, empty, split columns
    b = chunked_bound(W, Xd, da.from_array(y, chunks=170), lam, mask=mask)  # y rechunked
    assert b.n_samples == len(X)
    assert b.loss == pytest.approx(loss, rel=RT)
    np.testing.assert_allclose(b.gradient, grad, rtol=0, atol=RT * np.abs(grad).max())
    curv = b.curvature
    assert curv.shape == A.shape
    np.testing.assert_allclose(curv.todense(), A, rtol=0, atol=RT * np.abs(A).max())
    V = np.random.default_rng(1).standard_normal(W.shape)
    AV = (A @ V.T.ravel()).reshape(W.shape[1], -1).T  # vec(V) column-major
    np.testing.assert_allclose(curv.matvec(V), AV, rtol=0, atol=RT * np.abs(AV).max())
    np.testing.assert_allclose(curv @ V.T.ravel(), AV.T.ravel(), rtol=0, atol=RT * np.abs(AV).max())
    np.testing.assert_allclose(curv.diagonal(), np.diag(A).reshape(W.shape[1], -1).T, rtol=RT)
    C = multinomial_partition_bound(W, X).C
    np.testing.assert_allclose(curv.class_sum(), C.sum(axis=0) / len(X), rtol=0, atol=RT)


def test_numpy_input_and_float32_chunks():
    W, X, y = _problem(seed=2, dtype=np.float32)
    loss, grad, _ = _definitions(W, X.astype(np.float64), y, 0.1, np.ones(len(W)))
    b = chunked_bound(W, X, y, 0.1)  # NumPy: wrapped in chunks
    # float32 logits and products: relative error ~ p eps_32 per term
    assert b.loss == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(b.gradient, grad, rtol=0, atol=1e-5 * np.abs(grad).max())
    assert b.gradient.dtype == np.float64


@pytest.mark.parametrize(
    ("linear_solver", "preconditioner"),
    [("dense", None), ("cg", "jacobi"), ("cg", "kronecker"), ("cg", None)],
)
def test_chunked_bound_step_equals_in_memory_step(linear_solver, preconditioner):
    W, X, y = _problem(seed=3, T=900)
    kw = dict(linear_solver=linear_solver, preconditioner=preconditioner, rtol=1e-13)
    W1, info = bound_step(W, X, y, 0.05, **kw)
    with dask.config.set(scheduler="threads"):
        D1, dinfo = chunked_bound_step(W, da.from_array(X, chunks=200), y, 0.05, **kw)
    # both solve A D = G to 1e-13 (or exactly): cond(A) ~ 1e2 here, so D agrees to ~1e-11
    np.testing.assert_allclose(D1, W1, rtol=0, atol=1e-10 * np.abs(W1).max())
    assert dinfo["batch_loss"] == pytest.approx(info["batch_loss"], rel=RT)
    # the majorisation step never increases the objective
    assert chunked_bound(D1, X, y, 0.05).loss <= dinfo["batch_loss"]


def test_prebuilt_kronecker_preconditioner_is_used_exactly():
    """CG with a prebuilt preconditioner reaches the dense solution of the same system."""
    from kernelkit.optim import KroneckerPreconditioner

    W, X, y = _problem(seed=4, T=500)
    b = chunked_bound(W, da.from_array(X, chunks=128), y, 0.1)
    exact, _ = b.curvature.solve(b.gradient, method="dense")
    for prec in (KroneckerPreconditioner(X), b.curvature.second_moment_preconditioner()):
        D, info = b.curvature.solve(b.gradient, rtol=1e-12, precondition=prec)
        assert info["residual"] <= 1e-12
        np.testing.assert_allclose(D, exact, rtol=0, atol=1e-10 * np.abs(exact).max())


# ----------------------------------------------------------------------- the estimator
def _fit_pair(X, y, Xd, yd, **kw):
    kw = {"solver": "bound", "alpha": 1e-2, "max_epochs": 25, "tol": 1e-12, "random_state": 0, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = BoundLogisticRegression(**kw).fit(X, y)
        with dask.config.set(scheduler="threads"):
            est = BoundLogisticRegression(**kw).fit(Xd, yd)
    return ref, est


def _assert_same_fit(ref, est, X, atol=1e-10):
    np.testing.assert_array_equal(est.classes_, ref.classes_)
    assert (est.n_iter_, est.t_, est.n_features_in_) == (ref.n_iter_, ref.t_, ref.n_features_in_)
    assert est.coef_.dtype == ref.coef_.dtype
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=atol)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=0, atol=atol)
    np.testing.assert_allclose(est.loss_history_, ref.loss_history_, rtol=atol, atol=0)
    assert len(est.time_history_) == len(est.loss_history_)
    np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), rtol=0, atol=atol)


@pytest.mark.parametrize(
    "kw",
    [
        {},  # d = 15: dense Cholesky
        # CG to 1e-12 (each iteration one pass over the chunks): few epochs
        {"linear_solver": "cg", "cg_rtol": 1e-12, "max_epochs": 6},  # Kronecker-preconditioned
        {"linear_solver": "cg", "preconditioner": "jacobi", "cg_rtol": 1e-12, "max_epochs": 4},
        {"fit_intercept": False},
    ],
    ids=["dense", "cg-kronecker", "cg-jacobi", "no-intercept"],
)
def test_dask_fit_equals_in_memory_fit_multiclass(kw):
    X, y = _iris()
    labels = np.array(["setosa", "versicolor", "virginica"])[y]  # string labels, Dask y
    ref, est = _fit_pair(
        X, labels, da.from_array(X, chunks=(40, 4)), da.from_array(labels, chunks=60), **kw
    )
    _assert_same_fit(ref, est, X)
    assert np.all(np.diff(est.loss_history_) <= 1e-14)  # monotone (eta = 1)


def test_dask_fit_equals_in_memory_fit_binary_float32_numpy_y():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    ref, est = _fit_pair(X, y, da.from_array(X, chunks=(100, 30)), y, max_epochs=10)
    _assert_same_fit(ref, est, X)
    X32 = X.astype(np.float32)
    ref, est = _fit_pair(X32, y, da.from_array(X32, chunks=(100, 30)), y, max_epochs=10)
    assert est.coef_.dtype == np.float32
    # float32 chunks: per-chunk products in float32 (as in memory), summed in float64
    _assert_same_fit(ref, est, X32, atol=2e-5)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("binary", [False, True], ids=["multiclass", "binary"])
def test_predictions_on_dask_input_are_lazy_and_equal_numpy(binary):
    X, y = _iris()
    if binary:
        y = (y == 2).astype(int)
    labels = np.array(["a", "b", "c"])[y]
    est = BoundLogisticRegression(solver="bound", max_epochs=5).fit(X, labels)
    dX = da.from_array(X, chunks=(40, 4))
    calls = []

    def counted(block):
        if len(block):  # Dask may call it on an empty array to infer the output's type
            calls.append(len(block))
        return block

    dXc = dX.map_blocks(counted, dtype=dX.dtype)
    outs = {
        name: getattr(est, name)(dXc)
        for name in ("decision_function", "predict", "predict_proba", "predict_log_proba")
    }
    assert not calls  # nothing computed yet
    for name, lazy in outs.items():
        assert isinstance(lazy, da.Array)
        got, ref = lazy.compute(), getattr(est, name)(X)
        if name == "predict":
            np.testing.assert_array_equal(got, ref)
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    assert est.score(dX, da.from_array(labels, chunks=40)) == pytest.approx(est.score(X, labels))
    w = np.linspace(0.5, 2.0, len(X))
    assert est.score(dX, labels, sample_weight=w) == pytest.approx(
        est.score(X, labels, sample_weight=w)
    )
    with pytest.raises(ValueError):
        est.score(dX, da.from_array(np.array(["a", "zz"] * 75), chunks=40))


def test_kronecker_preconditioner_from_a_row_sample_as_in_memory():
    """T > 10 000: both fits draw the same 10 000 rows for the preconditioner's moment."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((10_500, 3))
    y = (X[:, 0] + 0.5 * rng.standard_normal(len(X)) > 0).astype(int) + (X[:, 1] > 1)
    kw = dict(linear_solver="cg", cg_rtol=1e-12, max_epochs=4)
    ref, est = _fit_pair(X, y, da.from_array(X, chunks=(3000, 3)), y, **kw)
    _assert_same_fit(ref, est, X)


def test_warm_start_callback_and_stopping_follow_the_in_memory_fit():
    X, y = _iris()
    Xd = da.from_array(X, chunks=(50, 4))
    seen = []

    def callback(est, info):
        seen.append(info["epoch"])
        return info["epoch"] % 3 == 0

    kw = dict(solver="bound", alpha=1e-2, max_epochs=10, warm_start=True, callback=callback)
    with dask.config.set(scheduler="threads"):
        est = BoundLogisticRegression(**kw).fit(Xd, y)
        assert est.n_iter_ == 3 and seen == [1, 2, 3]
        est.fit(Xd, y)  # warm: continues from the fitted parameters
        assert seen == [1, 2, 3, 4, 5, 6]
    ref = BoundLogisticRegression(**kw).fit(X, y).fit(X, y)
    assert est.n_iter_ == ref.n_iter_ == 6
    _assert_same_fit(ref, est, X)
    with (
        dask.config.set(scheduler="threads"),
        pytest.warns(ConvergenceWarning, match="did not converge in 2 epochs"),
    ):
        BoundLogisticRegression(solver="bound", max_epochs=2, tol=1e-12).fit(Xd, y)


# ------------------------------------------------------------------------- bad input
def test_bad_dask_input_is_rejected():
    X, y = _iris()
    Xd = da.from_array(X, chunks=(40, 4))
    with pytest.raises(ValueError, match=r"solver='spfb'.*solver='bound'"):
        BoundLogisticRegression(solver="spfb").fit(Xd, y)
    with pytest.raises(ValueError, match="y has 100 labels but X has 150 rows"):
        BoundLogisticRegression(solver="bound").fit(Xd, y[:100])
    with pytest.raises(ValueError, match="only one class"):
        BoundLogisticRegression(solver="bound").fit(Xd, np.zeros(150))
    with pytest.raises(ValueError, match="y is required"):
        BoundLogisticRegression(solver="bound").fit(Xd, None)
    with pytest.raises(ValueError, match="continuous"):
        BoundLogisticRegression(solver="bound").fit(Xd, y + 0.5)
    Xn = X.copy()
    Xn[95, 2] = np.nan
    with (
        dask.config.set(scheduler="sync"),
        pytest.raises(ValueError, match="BoundLogisticRegression: X: block 2 contains NaN"),
    ):
        BoundLogisticRegression(solver="bound").fit(da.from_array(Xn, chunks=(40, 4)), y)
    with pytest.raises(TypeError, match="real numbers"):
        BoundLogisticRegression(solver="bound").fit(da.from_array(X.astype(str)), y)
    W, Xp, yp = _problem(T=50)
    with pytest.raises(ValueError, match="same p"):
        chunked_bound(W[:3], Xp, yp, 0.1)
    with pytest.raises(TypeError, match="integer class indices"):
        chunked_bound(W, Xp, yp.astype(float), 0.1)
    with dask.config.set(scheduler="sync"), pytest.raises(ValueError, match=r"outside 0\.\.3"):
        chunked_bound(W, Xp, yp + 1, 0.1)
    with pytest.raises(ValueError, match="lam"):
        chunked_bound(W, Xp, yp, -1.0)
    with pytest.raises(ValueError, match="empty"):
        ChunkedCurvature(W, Xp[:0])
    curv = ChunkedCurvature(W, Xp, lam=0.1)
    with pytest.raises(ValueError, match="V must have shape"):
        curv.matvec(np.ones(3))
    with pytest.raises(ValueError, match="G must have shape"):
        curv.solve(np.ones((2, 2)))
    with pytest.raises(ValueError, match="method"):
        curv.solve(np.ones(W.shape), method="qr")
    # the curvature's own error (naming the remedy), not NumPy's LinAlgError
    with pytest.raises(ValueError, match=r"curvature is not positive definite.*lam > 0") as e:
        ChunkedCurvature(W, Xp[:2]).solve(np.ones(W.shape), method="dense")
    assert not isinstance(e.value, np.linalg.LinAlgError)


# ------------------------------------------------------------------------- the cluster
@pytest.mark.slow
def test_local_cluster_fit_equals_in_memory_fit(cluster_client):
    X, y = _iris()
    kw = dict(solver="bound", alpha=1e-2, max_epochs=3, tol=None, random_state=0)
    ref = BoundLogisticRegression(**kw).fit(X, y)
    W, Xp, yp = _problem(seed=6, T=400)
    loss, _, A = _definitions(W, Xp, yp, 0.2, np.ones(len(W)))
    with dask.config.set(scheduler=cluster_client):  # every pass on the two workers
        est = BoundLogisticRegression(**kw).fit(
            da.from_array(X, chunks=(40, 4)), da.from_array(y, chunks=40)
        )
        b = chunked_bound(W, da.from_array(Xp, chunks=100), yp, 0.2)
        dense = b.curvature.todense()
    _assert_same_fit(ref, est, X)
    assert b.loss == pytest.approx(loss, rel=RT)
    np.testing.assert_allclose(dense, A, rtol=0, atol=RT * np.abs(A).max())
