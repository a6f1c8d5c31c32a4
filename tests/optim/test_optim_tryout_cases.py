"""kernelkit.optim tried by an independent tester with the user guide as the only map: one
regression test per defect found (each failed before its fix)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from kernelkit.optim import BoundLogisticRegression, logistic_objective


def _data(T=60, p=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, p))  # (T, p)
    y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=T), [-0.5, 0.5])  # 3 classes
    return X, y


@pytest.mark.parametrize("solver", ["spfb", "bound"])
def test_one_epoch_fit_applies_the_stopping_rule(solver):
    """``fit`` with ``max_epochs=1`` returned an unconverged model silently: the stopping
    rule and its ConvergenceWarning were skipped for every one-epoch run (meant for
    ``partial_fit`` only). One epoch is far from tol = 1e-5 here, so ``fit`` must warn
    with the gradient ratio it reached; ``partial_fit`` stays silent."""
    X, y = _data()
    clf = BoundLogisticRegression(solver=solver, alpha=1e-3, batch_size=20, max_epochs=1)
    with pytest.warns(ConvergenceWarning, match="did not converge in 1 epoch:"):
        clf.fit(X, y)
    assert clf.n_iter_ == 1 and clf.grad_norm_history_[-1] > 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        BoundLogisticRegression(solver=solver, batch_size=20).partial_fit(X, y, classes=[0, 1, 2])


def test_one_epoch_dask_fit_applies_the_stopping_rule():
    """The Dask fit (``solver="bound"``, sums over row chunks) skipped the rule for one
    epoch in the same way."""
    da = pytest.importorskip("dask.array")
    X, y = _data()
    clf = BoundLogisticRegression(solver="bound", alpha=1e-3, max_epochs=1)
    with pytest.warns(ConvergenceWarning, match="did not converge in 1 epoch:"):
        clf.fit(da.from_array(X, chunks=20), da.from_array(y, chunks=20))
    assert clf.n_iter_ == 1 and clf.grad_norm_history_[-1] > 1e-5


def test_one_epoch_fit_that_converges_stops_without_warning():
    """A one-epoch ``fit`` that meets ``tol`` (a loose tol, met after the first epoch)
    converges: no warning."""
    X, y = _data()
    clf = BoundLogisticRegression(solver="bound", alpha=1e-1, max_epochs=1, tol=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf.fit(X, y)
    assert clf.grad_norm_history_[-1] <= 0.9


def test_logistic_objective_names_unsortable_labels():
    """Labels mixing numbers and strings raised NumPy's bare "'<' not supported" from
    ``np.unique`` in ``logistic_objective``; ``fit`` names ``y`` for the same labels."""
    X, _ = _data()
    y = np.array([1, "a"] * 30, dtype=object)
    with pytest.raises(TypeError, match=r"^y: the labels must be mutually comparable"):
        logistic_objective(np.zeros((1, 4)), 0.0, X, y, 1e-3)
