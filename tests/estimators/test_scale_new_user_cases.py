"""Regression tests for what a user with more data than memory brings to the estimators.

Large in-memory fits on any number of threads, Dask arrays whose first chunk is empty
(after boolean filtering), predictions on Dask arrays of the wrong rank, width or dtype,
boolean columns and targets in chunks, iterables that are lists or already consumed or
given to the in-memory classifiers, the threads of Dask's tasks, and the GP's mean and
standard deviation of a Dask X. Each test fails on the code before its fix.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from sklearn.base import clone
from threadpoolctl import threadpool_limits

import kernelkit.estimators._chunked as chunked
from kernelkit._backend.parallel import effective_n_jobs
from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
)
from kernelkit.features import RandomFourierFeatures

FM = RandomFourierFeatures(n_features=48, lengthscale=1.5, random_state=0)


def _data(n=2500, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


def _coef_atol(ref, X, alpha):
    """Round-off bound of ``ref``'s coefficients (fitted on ``X``) when the same sums are
    formed in another order: ``cond(G_c / alpha + I) n eps |coef|``, ``G_c`` the Gram
    matrix of the centred features (the primal system solved by Cholesky)."""
    Phi = ref.feature_map_.transform(np.asarray(X, dtype=float))
    Phi = Phi - Phi.mean(axis=0)  # (n, D) centred
    cond = np.linalg.cond(Phi.T @ Phi / alpha + np.eye(Phi.shape[1]))
    return cond * len(X) * np.finfo(float).eps * np.abs(ref.coef_).max()


@pytest.mark.parametrize(
    "est", [RandomFeatureRidge(FM, alpha=0.3), RandomFeatureGPRegressor(FM, noise=0.2)]
)
def test_blocked_fit_is_the_same_on_any_number_of_threads(est, monkeypatch):
    """The row blocks of a large in-memory fit were one per thread, so n_jobs=1 and 2
    summed the statistics in different orders; now their number depends on n alone and
    the models are bitwise equal (BLAS on one thread in both, as the blocks run)."""
    monkeypatch.setattr(chunked, "STREAM_ENTRIES", 1000)
    X, y = _data()  # 2500 rows: two blocks of at least 1024 rows
    with threadpool_limits(1):
        one, two, all_ = (clone(est).set_params(n_jobs=k).fit(X, y) for k in (1, 2, -1))
        assert chunked.use_blocked_statistics(one.feature_map_, X, "auto")
        preds = [m.predict(X[:200]) for m in (one, two, all_)]
    np.testing.assert_array_equal(preds[1], preds[0])
    np.testing.assert_array_equal(preds[2], preds[0])


def test_dask_fit_whose_first_chunk_is_empty():
    """Boolean filtering can empty the first chunk; the feature map was fitted on it
    ("Found array with 0 sample(s)"). Now on the first non-empty chunk: the same model as
    the in-memory fit of the kept rows, to round-off."""
    da = pytest.importorskip("dask.array")
    X, y = _data(n=1200)
    X[:400, 0] = -np.abs(X[:400, 0])  # no kept row in the first chunk
    Xd, yd = da.from_array(X, chunks=(400, 4)), da.from_array(y, chunks=400)
    keep = Xd[:, 0] > 0  # unknown chunk sizes, the first one 0
    est = RandomFeatureRidge(FM, alpha=0.3).fit(Xd[keep], yd[keep])
    m = X[:, 0] > 0
    ref = RandomFeatureRidge(FM, alpha=0.3, solver="primal").fit(X[m], y[m])
    assert est.n_samples_seen_ == m.sum()
    atol = _coef_atol(ref, X[m], 0.3)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=atol)
    np.testing.assert_allclose(est.predict(X[:50]), ref.predict(X[:50]), rtol=0, atol=atol)


@pytest.mark.parametrize(
    "est", [RandomFeatureRidge(FM, alpha=0.3), RandomFeatureGPRegressor(FM, noise=0.2)]
)
def test_predict_on_dask_checks_its_input_when_called_and_stays_lazy(est):
    """A 1-D Dask X raised numpy's AxisError and a wrong width or dtype surfaced only at
    compute(); now each is named when predict is called, and rows of unknown count
    (boolean filtering) are still mapped lazily, without running the filter."""
    da = pytest.importorskip("dask.array")
    X, y = _data(n=600)
    est = clone(est).fit(X, y)
    name = type(est).__name__
    with pytest.raises(ValueError, match=f"{name}: X must be 2-D"):
        est.predict(da.from_array(y, chunks=100))
    with pytest.raises(ValueError, match=f"{name}: X has 3 features, but .* 4 features"):
        est.predict(da.from_array(X[:, :3], chunks=100))
    with pytest.raises(TypeError, match=f"{name}: X must hold real numbers"):
        est.predict(da.from_array(X + 1j, chunks=100))
    calls = []

    def source(block):
        calls.append(len(block))
        return block

    Xd = da.from_array(X, chunks=(100, 4)).map_blocks(source, meta=np.empty((0, 0)))
    pred = est.predict(Xd[Xd[:, 0] > 0])
    assert calls == [] and np.isnan(pred.shape[0])  # nothing computed yet
    # the same D-term dot products on fewer rows at a time: |phi_j| <= sqrt(2 / D), so
    # they differ by at most D eps sqrt(2 / D) sum |w| (w: the weights of the features)
    w = est.coef_ if hasattr(est, "coef_") else est.posterior_.coef
    D = FM.n_features
    atol = D * np.finfo(float).eps * np.sqrt(2 / D) * np.abs(w).sum()
    np.testing.assert_allclose(pred.compute(), est.predict(X[X[:, 0] > 0]), rtol=0, atol=atol)


def test_boolean_columns_and_targets_in_chunks_are_numbers_as_in_memory():
    """In memory, bool X and y are taken as 0 / 1 (scikit-learn's policy); in Dask
    arrays and blocks they were a TypeError. Now the same model as in memory."""
    da = pytest.importorskip("dask.array")
    X, y = _data(n=900)
    Xb, yb = X > 0, y > 0  # (n, 4) and (n,) bool
    ref = RandomFeatureRidge(FM, alpha=0.3, solver="primal").fit(Xb, yb)
    lazy = RandomFeatureRidge(FM, alpha=0.3).fit(
        da.from_array(Xb, chunks=(300, 4)), da.from_array(yb, chunks=300)
    )
    blocks = RandomFeatureRidge(FM, alpha=0.3).fit(
        ((Xb[i : i + 300], yb[i : i + 300]) for i in range(0, 900, 300)), None
    )
    atol = _coef_atol(ref, Xb, 0.3)
    for est in (lazy, blocks):
        np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=atol)


def test_a_list_of_pairs_and_a_consumed_generator_are_explained():
    """A list of (X_block, y_block) pairs was taken as array-like X with y missing
    ("requires y to be passed"); it is now fitted block by block, as the iterator over it
    is. A list of rows without y says what to pass; refitting a consumed generator said
    only that the iterable is empty. Both messages now say what to do."""
    X, y = _data(n=400)
    pairs = [(X[:200], y[:200]), (X[200:], y[200:])]
    with pytest.raises(ValueError, match=r"RandomFeatureRidge: y is required.*\[\(X0, y0\)"):
        RandomFeatureRidge(FM).fit([list(row) for row in X], None)
    ref = RandomFeatureRidge(FM, solver="primal").fit(X, y)
    for given in (pairs, tuple(pairs), iter(pairs)):
        np.testing.assert_allclose(
            RandomFeatureRidge(FM).fit(given, None).coef_,
            ref.coef_,
            rtol=0,
            atol=_coef_atol(ref, X, 1.0),
        )
    blocks = iter(pairs)
    RandomFeatureGPRegressor(FM).fit(blocks, None)
    with pytest.raises(ValueError, match="yields its blocks once: make a new one"):
        RandomFeatureGPRegressor(FM).fit(blocks, None)


@pytest.mark.parametrize("cls", [NadarayaWatsonClassifier])
def test_in_memory_classifiers_name_an_iterable_of_blocks(cls):
    """The Nadaraya-Watson classifier fits in memory; an iterable of (X_block, y_block)
    pairs got scikit-learn's "requires y to be passed" (with y=None) or "float() argument
    must be ... not 'generator'". Now a TypeError that names the estimators that take
    blocks (RandomFeatureGPClassifier among them: it fits blocks chunk by chunk)."""
    X, y = _data(n=100)
    labels = (y > 0).astype(int)
    for target in (None, labels):
        blocks = ((X[i : i + 50], labels[i : i + 50]) for i in range(0, 100, 50))
        with pytest.raises(TypeError, match=f"{cls.__name__} fits in memory.*generator"):
            cls(random_state=0).fit(blocks, target)


class _RecordingMap(RandomFourierFeatures):
    """Random Fourier features that record kernelkit's default thread count
    (``n_jobs=None``) each time they map rows (one entry per call)."""

    seen: ClassVar[list] = []

    def transform(self, X):
        _RecordingMap.seen.append(effective_n_jobs(None))
        return super().transform(X)


def test_threaded_dask_tasks_add_no_kernelkit_threads(monkeypatch):
    """Under Dask's threaded scheduler each task (one per core) mapped its rows on
    kernelkit's default threads, the cores again: up to 2 cores - 1 threads beyond the
    cores. Now the default is one thread inside the tasks (BLAS already was), and the
    same as before outside them."""
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    monkeypatch.setenv("KERNELKIT_NUM_THREADS", "3")  # the default outside: 3 threads
    X, y = _data(n=1200)
    fm = _RecordingMap(n_features=48, lengthscale=1.5, random_state=0)
    _RecordingMap.seen.clear()
    with dask.config.set(scheduler="threads"):
        RandomFeatureRidge(fm, alpha=0.3).fit(da.from_array(X, chunks=(300, 4)), y)
    assert len(_RecordingMap.seen) >= 4  # every chunk's rows mapped in its task
    assert set(_RecordingMap.seen) == {1}
    assert effective_n_jobs(None) == 3  # restored after the fit


@pytest.mark.parametrize("targets", [1, 2])
def test_gp_mean_and_std_on_dask_map_each_chunk_once(targets):
    """predict(return_std=True) on a Dask X built two graphs that each mapped every chunk
    to features; now one task per chunk gives both (computed together: one map each)."""
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    X, y = _data(n=600)
    Y = y if targets == 1 else np.c_[y, np.cos(X[:, 1])]
    fm = _RecordingMap(n_features=48, lengthscale=1.5, random_state=0)
    gp = RandomFeatureGPRegressor(fm, noise=0.2).fit(X, Y)
    mean, std = gp.predict(da.from_array(X, chunks=(150, 4)), return_std=True)
    _RecordingMap.seen.clear()
    with dask.config.set(scheduler="sync"):
        mean, std = dask.compute(mean, std)
    assert len(_RecordingMap.seen) == 4  # one map of each of the 4 chunks
    # each chunk's task is the NumPy prediction of its rows (the in-memory comparison of
    # the whole array is test_chunked.py's): the same numbers, in their places
    chunks = [gp.predict(X[i : i + 150], return_std=True) for i in range(0, 600, 150)]
    np.testing.assert_array_equal(mean, np.concatenate([m for m, _ in chunks]))
    np.testing.assert_array_equal(std, np.concatenate([s for _, s in chunks]))
