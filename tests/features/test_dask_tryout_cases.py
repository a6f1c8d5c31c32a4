"""Feature maps and RandomFeatures on the Dask chunkings real pipelines produce.

Uneven, single, one-row and column-split chunks, unknown chunk sizes (a boolean filter),
zero-row chunks, a ``numpy.memmap``, float32 and integer chunks: every map fitted and
applied on them equals the map fitted and applied on the computed array in memory; the
transforms stay lazy (no ``compute`` when called, counted by a scheduler) and a fit reads
each chunk as often as the scale guide's table says. A chunk whose width is not the Dask
array's, and NaN in the rows ``RandomFeatures(method="auto")`` samples, are errors that
name the argument (and the chunk), raised by ``fit``.

Tolerances: the maps fitted on the first chunk or on every row see the same rows and
draws, so only the blocking of the products differs (relative ``1e-13`` of the largest
feature); the FAVOR# maps sum their moments chunk by chunk, in another order than in
memory (relative round-off ``n eps`` ~ ``1e-14`` for n = 60, amplified by the ``d x d``
eigendecomposition of their fit: ``1e-9``); float32 chunks are mapped in float32
(``eps = 6e-8`` per operation over about ``d`` terms and an exponential: ``1e-5``).
"""

from __future__ import annotations

import warnings
from collections import Counter

import numpy as np
import pytest
from favor_helpers import PUBLIC_MAPS

import kernelkit.features as features
from kernelkit.estimators import RandomFeatures
from kernelkit.features import SDERF

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

IDS = [cls.__name__ for cls in PUBLIC_MAPS]
SMALL = {"ClusteredHybridRF": {"n_clusters": 2, "n_lambda": 1, "n_init": 1}}  # fast k-means
N, D = 60, 5


def _map(cls):
    return cls(n_features=16, random_state=0, **SMALL.get(cls.__name__, {}))


def _rows(cls, seed=0):
    rng = np.random.default_rng(seed)
    X = 0.3 * rng.standard_normal((N, D))
    if cls.__name__ == "SphericalRandomFeatures":  # unit rows
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def _int_rows(cls):
    Z = np.random.default_rng(1).integers(-2, 3, size=(N, D))
    Z[(Z**2).sum(axis=1) == 0, 0] = 1  # no zero row (unit-norm maps normalise rows)
    if cls.__name__ == "SphericalRandomFeatures":
        return Z / np.linalg.norm(Z, axis=1, keepdims=True)
    return Z


def _chunkings(cls, tmp_path):
    """(name, in-memory rows, Dask array of the same rows) for each chunking."""
    X = _rows(cls)
    mm = np.memmap(tmp_path / "rows.dat", dtype=np.float64, mode="w+", shape=X.shape)
    mm[:] = X
    mm.flush()
    keep = X[:, 0] > 0
    dX = da.from_array(X, chunks=(13, 2))  # split columns too
    X32 = X.astype(np.float32)
    Zi = _int_rows(cls)
    zero = [da.from_array(X[:0], chunks=(0, D)), da.from_array(X[:30]), da.from_array(X[30:30])]
    return [
        ("uneven", X, da.from_array(X, chunks=((7, 30, 23), D))),
        ("single", X, da.from_array(X, chunks=-1)),
        ("one-row", X, da.from_array(X, chunks=(1, D))),
        ("columns", X, da.from_array(X, chunks=(20, 2))),
        ("zero-rows", X, da.concatenate([*zero, da.from_array(X[30:])])),
        ("unknown", X[keep], dX[dX[:, 0] > 0]),
        ("memmap", X, da.from_array(mm, chunks=(17, D))),
        ("float32", X32, da.from_array(X32, chunks=(17, D))),
        ("int", Zi, da.from_array(Zi, chunks=(17, D))),
    ]


class Computes:
    """A Dask scheduler (``dask.get``) that counts the graphs it is asked to compute."""

    def __init__(self):
        self.calls = 0

    def __call__(self, dsk, keys, **kwargs):
        self.calls += 1
        return dask.get(dsk, keys, **kwargs)


@pytest.mark.parametrize("cls", PUBLIC_MAPS, ids=IDS)
def test_every_chunking_gives_the_in_memory_features_lazily(cls, tmp_path):
    counter = Computes()
    for name, X, dX in _chunkings(cls, tmp_path):
        with warnings.catch_warnings():  # a few maps warn on tiny data, in memory too
            warnings.simplefilter("ignore")
            ref = _map(cls).fit(X)
            fm = _map(cls).fit(dX)
            want, want_y = ref.transform(X), ref.transform_y(X)
            with dask.config.set(scheduler=counter):
                counter.calls = 0
                lazy, lazy_y = fm.transform(dX), fm.transform_y(dX)
                assert counter.calls == 0, name  # nothing computed by transform
                got, got_y = lazy.compute(), lazy_y.compute()
        assert lazy.chunks[0] == dX.chunks[0] or np.isnan(dX.shape[0]), name
        assert got.dtype == want.dtype and got.shape == want.shape, name
        rtol = 1e-5 if X.dtype == np.float32 else 1e-9 if cls.fit_reads == "moments" else 1e-13
        for g, w in ((got, want), (got_y, want_y)):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * np.abs(w).max(), err_msg=name)


def _counted(X, rows, log):
    """X in row chunks of ``rows`` whose every computation is logged by chunk index."""

    def block(b, block_info=None):
        log[block_info[None]["chunk-location"][0]] += 1
        return b

    return da.from_array(X, chunks=(rows, -1)).map_blocks(block, dtype=X.dtype)


@pytest.mark.parametrize("cls", PUBLIC_MAPS, ids=IDS)
def test_fit_reads_each_chunk_as_the_guide_says(cls):
    """The first non-empty chunk (dimension-only maps), or every chunk once (the FAVOR#
    moments, the maps that read every row), in as many compute calls as the table says:
    one per chunk tried for the first non-empty chunk, one for the moment pass, one
    for a full read. The transform computes each chunk once, in one call."""
    X = _rows(cls)
    log, counter = Counter(), Counter()

    def scheduler(dsk, keys, **kwargs):
        counter["computes"] += 1
        return dask.get(dsk, keys, **kwargs)

    with warnings.catch_warnings(), dask.config.set(scheduler=scheduler):
        warnings.simplefilter("ignore")
        fm = _map(cls).fit(_counted(X, 20, log))
        # PositiveRF and HyperbolicRF (FAVOR+) read the dimension only, as in the table
        reads = "shape" if cls in (features.PositiveRF, features.HyperbolicRF) else cls.fit_reads
        every = {0: 1, 1: 1, 2: 1}
        assert dict(log) == {"shape": {0: 1}, "moments": every, "all": every}[reads]
        assert counter["computes"] == {"shape": 1, "moments": 2, "all": 1}[reads]
        log.clear()
        counter.clear()
        fm.transform(_counted(X, 20, log)).compute()
    assert dict(log) == {0: 1, 1: 1, 2: 1} and counter["computes"] == 1


def _lying(X, rows, bad):
    """A Dask array of X (its metadata: X's shape) whose chunk ``bad`` drops a column
    when computed (a reader that returns fewer columns for one file)."""

    def block(b, block_info=None):
        return b[:, :-1] if block_info[None]["chunk-location"][0] == bad else b

    return da.from_array(X, chunks=(rows, -1)).map_blocks(block, dtype=X.dtype)


WIDTH_CASES = {  # what fit reads: the first chunk, the moments, every row
    "RandomFourierFeatures-first": (features.RandomFourierFeatures, 0),
    "SDERF-first": (SDERF, 0),
    "SDERF-later": (SDERF, 2),
    "GERF-later": (features.GERF, 1),
    "GaussianHybridRF-later": (features.GaussianHybridRF, 2),
    "OptimizedMaclaurin-later": (features.OptimizedMaclaurin, 1),
}


@pytest.mark.parametrize("case", WIDTH_CASES, ids=list(WIDTH_CASES))
def test_fit_names_a_chunk_of_the_wrong_width(case):
    """A chunk with fewer columns than the Dask array says: a ValueError naming X and
    the chunk at fit. A first chunk of 4 columns fitted a 4-dimensional map in silence
    (the next transform of the same array failed); later chunks gave Dask's or NumPy's
    errors ("operands could not be broadcast together with shapes (31,) (21,)", "all
    the input array dimensions ... must match exactly"), naming neither."""
    cls, bad = WIDTH_CASES[case]
    X = _rows(cls)
    with pytest.raises(ValueError, match=rf"^X: block {bad} has shape \(20, 4\); expected 5 "):
        _map(cls).fit(_lying(X, 20, bad))
    with pytest.raises(ValueError, match=rf"^Y: block {bad} has shape \(20, 4\); expected 5 "):
        _map(cls).fit(X, Y=_lying(X, 20, bad))


def test_kernel_methods_and_auto_sample_name_a_chunk_of_the_wrong_width():
    """The methods that compute a Dask argument, and the rows method="auto" compares the
    candidates on, check each chunk's width before Dask joins the chunks."""
    X = _rows(SDERF)
    fm = SDERF(n_features=8, random_state=0).fit(X)
    with pytest.raises(ValueError, match=r"^Y: block 1 has shape \(20, 4\); expected 5 "):
        fm.approx_kernel(X, _lying(X, 20, 1))
    with pytest.raises(ValueError, match=r"^X: block 2 has shape \(20, 4\); expected 5 "):
        fm.variance(_lying(X, 20, 2))
    auto = RandomFeatures(method="auto", n_components=16, random_state=0)
    with pytest.raises(ValueError, match=r"^X: block 1 has shape \(20, 4\); expected 5 "):
        auto.fit(_lying(X, 20, 1))


def test_auto_names_nan_in_the_rows_it_samples():
    """NaN in the rows method="auto" samples: a ValueError naming X, as in memory (the
    candidates' variances were NaN, and the fit said that no candidate "has a finite
    variance on this data")."""
    X = _rows(SDERF)
    X[45, 2] = np.nan
    kw = dict(method="auto", n_components=16, random_state=0)
    with pytest.raises(ValueError, match=r"Input X contains NaN"):
        RandomFeatures(**kw).fit(X)  # in memory
    with pytest.raises(ValueError, match=r"^X: block 2 contains NaN or infinity"):
        RandomFeatures(**kw).fit(da.from_array(X, chunks=20))
    with pytest.raises(ValueError, match=r"^Y: block 2 contains NaN or infinity"):
        RandomFeatures(**kw).fit(_rows(SDERF), Y=da.from_array(X, chunks=20))


@pytest.mark.parametrize("scheduler", ["threads", "processes"])
def test_schedulers_give_the_synchronous_features(scheduler):
    """Fits and transforms under the threaded and the process scheduler (the maps and
    the graph's functions pickled) equal the synchronous ones bit for bit: each chunk
    is mapped by the same code on the same rows."""
    maps = [SDERF, features.RandomFourierFeatures, features.GaussianHybridRF, features.TensorSRHT]
    X = _rows(SDERF)
    dX = da.from_array(X, chunks=(20, 2))
    with dask.config.set(scheduler="sync"):
        want = [_map(cls).fit(dX).transform(dX).compute() for cls in maps]
    # fork: the workers start without importing kernelkit again (spawn takes ~10 s here);
    # the tasks and the maps are still pickled (cloudpickle) to reach them
    config = {"scheduler": scheduler, "num_workers": 2, "multiprocessing.context": "fork"}
    with dask.config.set(config):
        got = dask.compute(*[_map(cls).fit(dX).transform(dX) for cls in maps])
    for cls, g, w in zip(maps, got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=cls.__name__)
