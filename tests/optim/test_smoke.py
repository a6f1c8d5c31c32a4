"""Smoke test: the optim package imports and a tiny SPFB fit runs."""

from __future__ import annotations

import numpy as np

from kernelkit.optim import BoundLogisticRegression


def test_spfb_fit_runs():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int)
    clf = BoundLogisticRegression(max_epochs=5, batch_size=20, random_state=0).fit(X, y)
    assert clf.score(X, y) > 0.8
