"""BoundLogisticRegression keeps its fitted model when a Dask fit fails on a late chunk.

The Dask fit reset the coefficients, classes and histories before the first pass over
the chunks, so a NaN, an infinity or a chunk of another width late in the array left a
model of zeros (``predict_proba`` 0.5 everywhere) behind the correct ``ValueError``; the
NumPy fit, and the other estimators' Dask fits, keep the earlier model.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.optim import BoundLogisticRegression

da = pytest.importorskip("dask.array")


def _data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 5))
    y = (X[:, 0] + 0.3 * rng.standard_normal(2000) > 0).astype(int)
    return X, y


@pytest.mark.parametrize("bad", ["nan", "inf", "width"])
def test_failed_dask_fit_keeps_the_earlier_model(bad):
    X, y = _data()
    clf = BoundLogisticRegression(solver="bound", alpha=1e-3, max_epochs=5, tol=None).fit(X, y)
    state = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in vars(clf).items()}
    p0 = clf.predict_proba(X[:3])
    if bad == "width":  # the last chunk computes to 6 columns (declared 5)

        def widen(b, block_info=None):
            last = block_info[0]["chunk-location"][0] == 3
            return np.ones((len(b), 6)) if last else b

        Xd = da.from_array(X, chunks=(500, 5)).map_blocks(widen, dtype=float)
    else:
        Xb = X.copy()
        Xb[1900, 0] = np.nan if bad == "nan" else np.inf
        Xd = da.from_array(Xb, chunks=(500, 5))
    with pytest.raises(ValueError):
        clf.fit(Xd, y)
    np.testing.assert_array_equal(clf.predict_proba(X[:3]), p0)
    for key, value in state.items():
        now = vars(clf)[key]
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(now, value, err_msg=key)


@pytest.mark.parametrize("solver", ["bound", "spfb"])
def test_failed_warm_started_fit_keeps_the_histories(solver, monkeypatch):
    """A warm start appends to the fitted model's histories in place: the restore kept
    the list object and so the new entries (6 entries against n_iter_ 5)."""
    X, y = _data()
    clf = BoundLogisticRegression(
        solver=solver, alpha=1e-3, max_epochs=5, tol=None, warm_start=True
    ).fit(X, y)
    history, n_iter = list(clf.loss_history_), clf.n_iter_
    original = BoundLogisticRegression._sync_coef
    calls = []

    def failing(self):
        calls.append(1)
        if len(calls) >= 2:
            raise RuntimeError("interrupted")
        return original(self)

    monkeypatch.setattr(BoundLogisticRegression, "_sync_coef", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        clf.fit(X, y)
    assert clf.loss_history_ == history and clf.n_iter_ == n_iter
