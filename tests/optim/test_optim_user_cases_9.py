"""New-user cases of BoundLogisticRegression: the descent check of the full-batch bound
step compares objectives of one problem only; a failed partial_fit leaves the estimator
as it was; the default inverse_t0 time scale of a stream does not depend on how later
calls cut it."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from kernelkit.optim import BoundLogisticRegression


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = rng.integers(0, 3, n)
    X[:, 0] += y
    return X, y


def test_bound_partial_fit_on_a_new_batch_is_not_called_divergence():
    X, y = _data()
    est = BoundLogisticRegression(solver="bound", alpha=1e-2)
    est.partial_fit(X[y == 0], y[y == 0], classes=[0, 1, 2])  # class 0 only
    before = est.objective(X[y != 0], y[y != 0])
    est.partial_fit(X[y != 0], y[y != 0])  # another problem: its objective may be higher
    # the bound step (eta0 = 1) never raises the objective of the data it steps on
    assert est.objective(X[y != 0], y[y != 0]) <= before + 1e-12


@pytest.mark.parametrize("dask", [False, True])
def test_bound_warm_start_after_a_larger_alpha_is_not_called_divergence(dask):
    X, y = _data()
    Xf = da.from_array(X, chunks=(50, 4)) if dask else X
    est = BoundLogisticRegression(solver="bound", alpha=1e-3, warm_start=True).fit(Xf, y)
    est.set_params(alpha=1e-1)
    start = est.objective(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning at the default max_epochs
        est.fit(Xf, y)
    assert est.objective(X, y) <= start + 1e-12
    ref = BoundLogisticRegression(solver="bound", alpha=1e-1, max_epochs=500).fit(X, y)
    assert est.objective(X, y) <= ref.objective(X, y) + 1e-3


def test_failed_first_partial_fit_leaves_the_estimator_unfitted():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    y = np.array(["a", "b", "c", "d"] * 5)
    est = BoundLogisticRegression()
    with pytest.raises(ValueError, match=r"not in classes \['a', 'b', 'c'\]"):
        est.partial_fit(X, y, classes=["a", "b", "c"])
    with pytest.raises(NotFittedError):
        check_is_fitted(est)
    est.partial_fit(X, y, classes=["a", "b", "c", "d"])  # the corrected call
    assert est.classes_.tolist() == ["a", "b", "c", "d"]


def test_failed_first_partial_fit_with_too_large_rank_leaves_the_estimator_unfitted():
    X, y = _data(50)
    est = BoundLogisticRegression(solver="lspfb", rank=100)
    with pytest.raises(ValueError, match="rank=100"):
        est.partial_fit(X, y, classes=[0, 1, 2])
    with pytest.raises(NotFittedError):
        check_is_fitted(est)


def test_failed_later_partial_fit_keeps_the_model():
    X, y = _data()
    est = BoundLogisticRegression(random_state=0).partial_fit(X, y, classes=[0, 1, 2])
    coef, n_iter = est.coef_.copy(), est.n_iter_
    bad = y.copy()
    bad[0] = 7
    with pytest.raises(ValueError, match="not in classes_"):
        est.partial_fit(X, bad)
    assert est.n_iter_ == n_iter
    np.testing.assert_array_equal(est.coef_, coef)


def test_partial_fit_schedule_does_not_depend_on_how_later_calls_cut_the_stream():
    X, y = _data(1000)
    kw = dict(solver="sgd", alpha=1e-3, batch_size=50, shuffle=False, random_state=0)
    a = BoundLogisticRegression(**kw).partial_fit(X, y, classes=[0, 1, 2])
    b = BoundLogisticRegression(**kw).partial_fit(X, y, classes=[0, 1, 2])
    a.partial_fit(X, y)  # the same 20 mini-batch steps ...
    for s in range(0, 1000, 50):  # ... one per call
        b.partial_fit(X[s : s + 50], y[s : s + 50])
    assert a.t_ == b.t_ == 40
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=0, atol=1e-12)
