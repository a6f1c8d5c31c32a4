"""Estimators and distribution models on the Dask chunkings of real pipelines.

Uneven, one-row and column-split chunks, unknown chunk sizes (a boolean filter of X and
y), zero-row chunks, a ``numpy.memmap``, float32 and integer chunks: the ridge, GP and
Nadaraya-Watson estimators, ``JointDistribution``, ``ConditionalMeanEmbedding`` and
``KernelLogisticRegression`` fitted on them predict what the in-memory fit on the
computed arrays predicts; predictions of a Dask X stay lazy (no ``compute`` when called,
counted by a scheduler); the threaded and process schedulers give the synchronous
result; a chunk whose width is not its Dask array's is a ``ValueError`` naming X and the
chunk at ``fit``.

Tolerances: a chunked fit sums the same statistics (``Phi^T Phi`` of 16 features, or the
pivoted-Cholesky factor's ``L^T L``) in another order, a relative round-off of ``n eps``
(~1e-14 for n = 60), amplified by the condition number of the regularised systems (at
most ~1e4 here): ``1e-8`` relative to the largest output. float32 chunks are mapped in
float32 (``eps = 6e-8`` relative per feature, through the same systems): ``1e-3``.
Schedulers: the same tasks on the same chunks, combined in the same tree: ``1e-12``
(BLAS may block the small products differently in another process).
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest

from kernelkit.distributions import (
    ConditionalMeanEmbedding,
    JointDistribution,
    KernelLogisticRegression,
)
from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
    RandomFeatures,
)
from kernelkit.features import SDERF, RandomFourierFeatures
from kernelkit.optim import BoundLogisticRegression

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

N, D = 60, 3
DIST_KW = dict(lengthscale_x=0.8, lengthscale_y=0.8, reg=1e-4, pivot_sample=40, random_state=0)

ESTIMATORS = {
    "ridge-rff": lambda: RandomFeatureRidge(RandomFourierFeatures(16, random_state=0), alpha=0.1),
    "ridge-sderf": lambda: RandomFeatureRidge(
        SDERF(16, kernel="gaussian", random_state=0), alpha=0.1
    ),
    "gp": lambda: RandomFeatureGPRegressor(RandomFourierFeatures(16, random_state=0)),
    "gp-classifier": lambda: RandomFeatureGPClassifier(
        RandomFourierFeatures(16), n_samples=200, random_state=0
    ),
    "nadaraya-watson": lambda: NadarayaWatsonClassifier(n_components=16, random_state=0),
    "joint": lambda: JointDistribution(**DIST_KW),
    "cme": lambda: ConditionalMeanEmbedding(**DIST_KW),
    "klr": lambda: KernelLogisticRegression(
        lengthscale=1.0, reg=1.0, pivot_sample=40, random_state=0
    ),
}
CLASSIFIERS = ("gp-classifier", "nadaraya-watson", "klr")
XQ = np.array([[-1.0, 0.0, 0.5], [1.0, 0.2, 0.0], [0.3, -0.4, 0.1]])  # query points


def _data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(N)
    labels = np.where(X[:, 0] + 0.3 * rng.standard_normal(N) > 0, "up", "down")
    return X, y, labels


def _chunkings(tmp_path):
    """(name, X, in-memory row mask, Dask X, Dask row mask or None) for each chunking."""
    X, _, _ = _data()
    mm = np.memmap(tmp_path / "rows.dat", dtype=np.float64, mode="w+", shape=X.shape)
    mm[:] = X
    mm.flush()
    Zi = np.random.default_rng(1).integers(-2, 3, size=(N, D))
    dX = da.from_array(X, chunks=(13, 2))
    keep = X[:, 0] > -0.3
    zero = [da.from_array(X[:0], chunks=(0, D)), da.from_array(X[:30]), da.from_array(X[30:30])]
    return [
        ("uneven", X, None, da.from_array(X, chunks=((7, 30, 23), D))),
        ("single", X, None, da.from_array(X, chunks=-1)),
        ("one-row", X, None, da.from_array(X, chunks=(1, D))),
        ("columns", X, None, da.from_array(X, chunks=(20, 2))),
        ("zero-rows", X, None, da.concatenate([*zero, da.from_array(X[30:])])),
        ("unknown", X, keep, dX),
        ("memmap", X, None, da.from_array(mm, chunks=(17, D))),
        ("float32", X.astype(np.float32), None, da.from_array(X.astype(np.float32), chunks=17)),
        ("int", Zi, None, da.from_array(Zi, chunks=(17, D))),
    ]


def _output(name, model, X, targets):
    """What the model predicts for X: probabilities, means (and GP std), or the
    conditional mean at X of the training ``targets`` (n, 1)."""
    if name in CLASSIFIERS:
        return model.predict_proba(X)
    if name == "gp":
        mean, std = model.predict(X, return_std=True)
        return da.stack([mean, std], axis=1) if hasattr(mean, "dask") else np.c_[mean, std]
    if name in ("joint", "cme"):
        return model.conditional_expectation(targets, X)
    return model.predict(X)


class Computes:
    """A Dask scheduler (``dask.get``) counting the graphs it is asked to compute."""

    def __init__(self):
        self.calls = 0

    def __call__(self, dsk, keys, **kwargs):
        self.calls += 1
        return dask.get(dsk, keys, **kwargs)


@pytest.mark.parametrize("name", ESTIMATORS, ids=list(ESTIMATORS))
def test_every_chunking_fits_the_in_memory_model_and_predicts_lazily(name, tmp_path):
    _, y, labels = _data()
    t = labels if name in CLASSIFIERS else y[:, None] if name in ("joint", "cme") else y
    counter = Computes()
    for chunking, X, keep, dX in _chunkings(tmp_path):
        if keep is None:
            Xn, tn, dt = X, t, da.from_array(t, chunks=(dX.chunks[0], *t.shape[1:]))
        else:  # a boolean filter of X and of its targets: unknown chunk sizes
            mask = dX[:, 0] > -0.3
            Xn, tn, dX = X[keep], t[keep], dX[mask]
            dt = da.from_array(t, chunks=(13, *t.shape[1:]))[mask]
            assert np.isnan(dX.shape[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. few pivots on integer rows, in both fits
            ref = ESTIMATORS[name]().fit(Xn, tn)
            model = ESTIMATORS[name]().fit(dX, dt)
            f = tn if name in ("joint", "cme") else None  # the f values (n, 1)
            want = np.asarray(_output(name, ref, Xn, f), dtype=np.float64)
            dq = da.from_array(np.asarray(Xn), chunks=7)
            with dask.config.set(scheduler=counter):
                counter.calls = 0
                lazy = _output(name, model, dq, f)
                if name != "nadaraya-watson":  # NW computes X (scale guide)
                    # a joint model fitted on Dask keeps its training samples lazy: the
                    # call forms f^T A (one pass over them), the rest stays lazy
                    assert isinstance(lazy, da.Array), chunking
                    assert counter.calls == (name == "joint"), chunking
                got = np.asarray(lazy.compute() if hasattr(lazy, "dask") else lazy)
        rtol = 1e-3 if X.dtype == np.float32 else 1e-8
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=rtol * scale, err_msg=chunking)


def _lying(X, rows, bad):
    """A Dask array of X (its metadata: X's shape) whose chunk ``bad`` drops a column when
    computed (a reader that returns fewer columns for one file)."""

    def block(b, block_info=None):
        return b[:, :-1] if block_info[None]["chunk-location"][0] == bad else b

    return da.from_array(X, chunks=(rows, -1)).map_blocks(block, dtype=X.dtype)


@pytest.mark.parametrize("name", ["ridge-rff", "gp", "gp-classifier"])
def test_a_first_chunk_of_the_wrong_width_is_named(name):
    """The first chunk sets the model's width: one column short, it was taken as the
    width, and the error blamed every correct chunk ("block 1 has shape (20, 3);
    expected 2 columns")."""
    X, y, labels = _data()
    t = labels if name in CLASSIFIERS else y
    match = r": X: block 0 has shape \(20, 2\); expected 3 columns"
    with pytest.raises(ValueError, match=match):
        ESTIMATORS[name]().fit(_lying(X, 20, 0), da.from_array(t, chunks=20))


WIDTH_FITS = {
    "nadaraya-watson": ESTIMATORS["nadaraya-watson"],
    "joint": ESTIMATORS["joint"],
    "cme": ESTIMATORS["cme"],
    "klr": ESTIMATORS["klr"],
    "bound-logistic": lambda: BoundLogisticRegression(solver="bound", max_epochs=2, tol=None),
}


@pytest.mark.parametrize("name", WIDTH_FITS, ids=list(WIDTH_FITS))
def test_a_later_chunk_of_the_wrong_width_is_named_at_fit(name):
    """Dask joined the chunks with "all the input array dimensions ... must match
    exactly" or "could not broadcast input array from shape (20,2) into shape (20,3)"
    (the pivot sample, Nadaraya-Watson's computed X), or the bound logistic fit named
    the shapes with its bias column ("(20, 3); expected 4 columns")."""
    X, y, labels = _data()
    t = labels if name in ("nadaraya-watson", "klr", "bound-logistic") else y[:, None]
    with pytest.raises(ValueError, match=r"X: block 2 has shape \(20, 2\); expected 3 columns"):
        WIDTH_FITS[name]().fit(_lying(X, 20, 2), da.from_array(t, chunks=20))


@pytest.mark.parametrize("scheduler", ["threads", "processes"])
def test_schedulers_give_the_synchronous_models(scheduler):
    """Fits (a tree of chunk statistics, the FAVOR# moments, the pivot pass) and lazy
    predictions under the threaded and the process scheduler (estimators, maps and
    tasks pickled) equal the synchronous ones."""
    X, y, labels = _data()
    dX = da.from_array(X, chunks=(20, 2))
    names = ["ridge-sderf", "gp", "gp-classifier", "cme"]

    def outputs():
        got = []
        for name in names:
            t = labels if name in CLASSIFIERS else y[:, None] if name == "cme" else y
            model = ESTIMATORS[name]().fit(dX, da.from_array(t, chunks=(20, *t.shape[1:])))
            got.append(_output(name, model, dX, y[:, None]))
        return [np.asarray(a) for a in dask.compute(*got)]

    with dask.config.set(scheduler="sync"):
        want = outputs()
    # fork: the workers start without importing kernelkit again (spawn takes ~10 s here)
    config = {"scheduler": scheduler, "num_workers": 2, "multiprocessing.context": "fork"}
    with dask.config.set(config):
        got = outputs()
    for name, g, w in zip(names, got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-12 * np.abs(w).max(), err_msg=name)


READS = {  # estimator, and whether its map reads the FAVOR# moments (one more pass)
    "ridge-rff": (ESTIMATORS["ridge-rff"], False),
    "ridge-sderf": (ESTIMATORS["ridge-sderf"], True),
    "gp": (ESTIMATORS["gp"], False),
    "gp-classifier": (lambda: RandomFeatureGPClassifier(SDERF(16), random_state=0), True),
    "random-features-map": (
        lambda: RandomFeatureRidge(RandomFeatures(method="positive", n_components=16)),
        False,
    ),
}


@pytest.mark.parametrize("name", READS, ids=list(READS))
def test_fit_reads_each_chunk_once_plus_the_moment_pass(name):
    """X and y as columns of one array (one upstream, as a DataFrame's): a fit reads
    every chunk once for its statistics, and once more for the moments of a FAVOR# map
    (scale guide), in one compute per pass after the first chunk's. The first chunk was
    read three times (X and y apart, then again by the map's fit and the statistics),
    in four or five computes."""
    X, y, _ = _data()
    t = (X[:, 0] > 0).astype(float) if name == "gp-classifier" else y
    log, counter = Counter(), Computes()

    def block(b, block_info=None):
        log[block_info[None]["chunk-location"][0]] += 1
        return b

    Z = da.from_array(np.c_[X, t], chunks=(20, -1)).map_blocks(block, dtype=float)
    make, moments = READS[name]
    with dask.config.set(scheduler=counter):
        make().fit(Z[:, :D], Z[:, D])
    assert dict(log) == ({0: 1, 1: 2, 2: 2} if moments else {0: 1, 1: 1, 2: 1})
    assert counter.calls == 2 + moments  # the first chunk, the statistics (the moments)


@pytest.mark.parametrize("cls", [JointDistribution, ConditionalMeanEmbedding])
def test_distribution_fits_read_the_sample_and_one_pass(cls):
    """X and Y as columns of one array: the pivot sample (here every row) and one pass
    over all rows for the statistics (scale guide), each chunk read once per step; the
    pass read every chunk twice (once for X, once for Y)."""
    X, y, _ = _data()
    log, counter = Counter(), Computes()

    def block(b, block_info=None):
        log[block_info[None]["chunk-location"][0]] += 1
        return b

    Z = da.from_array(np.c_[X, y], chunks=(20, -1)).map_blocks(block, dtype=float)
    with dask.config.set(scheduler=counter):
        cls(**{**DIST_KW, "pivot_sample": N}).fit(Z[:, :D], Z[:, D:])
    assert dict(log) == {0: 2, 1: 2, 2: 2}
    assert counter.calls == 2


UNKNOWN = {  # model, target, the passes of its fit after the one for the chunk sizes
    "ridge": (ESTIMATORS["ridge-rff"], "y", 1),
    "gp-classifier": (lambda: RandomFeatureGPClassifier(random_state=0), "labels", 1),
    "joint": (lambda: JointDistribution(**{**DIST_KW, "pivot_sample": N}), "Y", 2),
    "bound-logistic": (
        lambda: BoundLogisticRegression(solver="bound", max_epochs=1, tol=None),
        "labels",
        None,  # several passes (epochs, curvature): only the sizes' pass is counted
    ),
}


@pytest.mark.parametrize("name", UNKNOWN, ids=list(UNKNOWN))
def test_unknown_chunk_sizes_of_x_and_y_take_one_pass(name):
    """X and y filtered by one boolean mask (unknown chunk sizes): their sizes are
    computed together, in one pass (each was computed on its own: every chunk read once
    more), then the fit's own passes (scale guide)."""
    X, y, _ = _data()
    t = {"y": y, "Y": y, "labels": (X[:, 0] > 0).astype(float)}[UNKNOWN[name][1]]
    log = Counter()

    def block(b, block_info=None):
        log[block_info[None]["chunk-location"][0]] += 1
        return b

    Z = da.from_array(np.c_[X, t], chunks=(20, -1)).map_blocks(block, dtype=float)
    Z = Z[Z[:, 0] > -0.5]  # unknown chunk sizes
    make, target, passes = UNKNOWN[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one epoch: no convergence
        make().fit(Z[:, :D], Z[:, D:] if target == "Y" else Z[:, D])
    if passes is not None:
        assert dict(log) == {k: 1 + passes for k in range(3)}
    else:  # the bound fit: as often as with known sizes, plus one
        known = Counter()
        Zk = da.from_array(np.c_[X, t], chunks=(20, -1)).map_blocks(block, dtype=float)
        log, reads = known, dict(log)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            make().fit(Zk[:, :D], Zk[:, D])
        assert reads == {k: 1 + known[k] for k in range(3)}
