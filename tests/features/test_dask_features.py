"""Feature maps on Dask arrays: lazy transforms and fits that read only what they need.

Every map fitted on a Dask array gives the features of the same map fitted on the same
rows in memory; ``transform`` / ``transform_y`` stay lazy, keep the row chunks and check
each block when it is computed; maps whose fit needs the dimension only never compute
more than the first chunk, and the FAVOR# maps read the moments of all rows.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from favor_helpers import PUBLIC_MAPS
from sklearn.base import clone

import kernelkit.features as features
from kernelkit.features import GERF, SDERF, PositiveRF

da = pytest.importorskip("dask.array")

MAPS = PUBLIC_MAPS
IDS = [cls.__name__ for cls in MAPS]
SMALL = {"ClusteredHybridRF": {"n_clusters": 2}}


def _data(cls, n=300, m=200, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = 0.3 * rng.standard_normal((n, d))
    Y = 0.3 * rng.standard_normal((m, d)) + 0.1
    if cls.__name__ == "SphericalRandomFeatures":  # unit rows
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    return X, Y


def _map(cls):
    return cls(n_features=32, random_state=0, **SMALL.get(cls.__name__, {}))


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_fit_and_transform_on_dask_equal_the_in_memory_map(cls):
    X, Y = _data(cls)
    dX = da.from_array(X, chunks=((70, 130, 100), (2, 3)))  # uneven rows, split columns
    dY = da.from_array(Y, chunks=(64, 5))
    ref = _map(cls).fit(X, Y=Y)
    fm = _map(cls).fit(dX, Y=dY)
    assert fm.n_features_in_ == 5
    out, out_y = fm.transform(dX), fm.transform_y(dY)
    assert isinstance(out, da.Array) and isinstance(out_y, da.Array)  # lazy
    assert out.chunks[0] == (70, 130, 100) and out_y.chunks[0] == dY.chunks[0]
    assert out.shape == (300, ref.output_dim) and out.dtype == ref.transform(X).dtype
    # "shape" and "all" maps are fitted on the same draws and rows; the FAVOR# maps on
    # moments summed chunk by chunk (a different order of the sums: round-off of
    # n eps = 3e-14 relative, through the d x d eigendecomposition of the fit)
    rtol = 1e-10 if cls.fit_reads == "moments" else 1e-13
    for got, want in ((out.compute(), ref.transform(X)), (out_y.compute(), ref.transform_y(Y))):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())


def _only_first_chunk_computable(X, rows):
    """A Dask array of X whose chunks after the first raise when computed."""

    def block(b, block_info=None):
        if block_info[None]["chunk-location"][0] > 0:
            raise AssertionError("a chunk after the first was computed")
        return b

    return da.from_array(X, chunks=(rows, -1)).map_blocks(block, dtype=X.dtype)


@pytest.mark.parametrize(
    "cls", [c for c in MAPS if c.fit_reads == "shape"], ids=lambda c: c.__name__
)
def test_dimension_only_fits_compute_only_the_first_chunk(cls):
    X, Y = _data(cls)
    fm = _map(cls).fit(_only_first_chunk_computable(X, 50))
    ref = _map(cls).fit(X)
    np.testing.assert_allclose(fm.transform(Y), ref.transform(Y), rtol=1e-13, atol=1e-15)


def test_favor_sharpfit_reads_the_moments_of_all_rows():
    """SDERF's parameters come from all rows: equal to the in-memory fit, different from a
    fit on the first chunk (so the comparison can fail)."""
    X, Y = _data(SDERF, n=400, m=300)
    X[200:] *= 3.0  # later rows change the moments
    dX, dY = da.from_array(X, chunks=100), da.from_array(Y, chunks=100)
    fm = SDERF(n_features=16, random_state=1).fit(dX, Y=dY)
    ref = SDERF(n_features=16, random_state=1).fit(X, Y=Y)
    first = SDERF(n_features=16, random_state=1).fit(X[:100], Y=Y[:100])
    np.testing.assert_allclose(fm.A_, ref.A_, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(np.abs(fm.B_x_), np.abs(ref.B_x_), rtol=1e-9, atol=1e-12)
    assert np.abs(fm.A_ - first.A_).max() > 1e-3
    # GERF with diagonal moments and a lengthscale: the scaled inputs' moments
    g = GERF(n_features=16, lengthscale=1.7, random_state=1).fit(dX, Y=dY)
    g_ref = GERF(n_features=16, lengthscale=1.7, random_state=1).fit(X, Y=Y)
    np.testing.assert_allclose(g.A_, g_ref.A_, rtol=1e-12)


def test_unknown_chunk_sizes_and_an_empty_first_chunk():
    X, _ = _data(SDERF)
    dX = da.from_array(X, chunks=50)
    keep = dX[:, 0] > -10.0  # all rows, chunk sizes unknown to Dask
    keep[:50] = False  # the first chunk is emptied
    filtered = dX[keep]
    assert np.isnan(filtered.shape[0])
    fm = SDERF(n_features=16, random_state=0).fit(filtered)
    ref = SDERF(n_features=16, random_state=0).fit(X[50:])
    np.testing.assert_allclose(fm.A_, ref.A_, rtol=1e-11, atol=1e-14)
    out = fm.transform(filtered).compute()
    np.testing.assert_allclose(out, ref.transform(X[50:]), rtol=1e-10)


def test_transform_checks_each_block_when_computed():
    X, _ = _data(PositiveRF)
    X[250, 1] = np.nan
    fm = PositiveRF(n_features=8, random_state=0).fit(X[:100])
    lazy = fm.transform(da.from_array(X, chunks=100))  # no error yet: nothing computed
    with pytest.raises(ValueError, match="X contains NaN"):
        lazy.compute()


def test_favor_sharp_fit_rejects_non_finite_rows_in_any_chunk():
    X, _ = _data(SDERF)
    X[250, 1] = np.inf
    with pytest.raises(ValueError, match=r"^X contains NaN or infinity"):
        SDERF(n_features=8).fit(da.from_array(X, chunks=100))


def test_float32_chunks_give_float32_features():
    X, _ = _data(PositiveRF)
    X32 = X.astype(np.float32)
    fm = PositiveRF(n_features=8, random_state=0).fit(X32)
    out = fm.transform(da.from_array(X32, chunks=100))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.compute(), fm.transform(X32), rtol=1e-6)


def test_bad_dask_input_is_named_before_computing():
    X, _ = _data(PositiveRF)
    fm = PositiveRF(n_features=8, random_state=0).fit(X)
    with pytest.raises(ValueError, match=r"^X has 4 features, but the model was fitted with 5"):
        fm.transform(da.from_array(X[:, :4], chunks=100))
    with pytest.raises(ValueError, match=r"^Y must be a 2-D array"):
        fm.transform_y(da.from_array(X[:, 0], chunks=100))
    with pytest.raises(ValueError, match=r"^Complex data not supported: X"):
        PositiveRF().fit(da.from_array(X + 1j, chunks=100))
    with pytest.raises(TypeError, match=r"^X must hold real numbers"):
        PositiveRF().fit(da.from_array(X.astype(str), chunks=100))
    with pytest.raises(ValueError, match=r"^Y has 4 features, but the model was fitted with 5"):
        SDERF().fit(da.from_array(X, chunks=100), Y=da.from_array(X[:, :4], chunks=100))


def test_random_features_on_dask_equals_in_memory_and_auto_picks_the_same_map():
    from kernelkit.estimators import RandomFeatures

    X, Y = _data(SDERF, n=400, m=300)
    dX, dY = da.from_array(X, chunks=150), da.from_array(Y, chunks=100)
    for method in ("sderf", "auto"):
        kw = dict(method=method, n_components=64, auto_sample_size=120, random_state=3)
        rf = RandomFeatures(**kw).fit(dX, Y=dY)
        ref = RandomFeatures(**kw).fit(X, Y=Y)
        assert rf.method_ == ref.method_
        if method == "auto":
            assert rf.variance_estimates_.keys() == ref.variance_estimates_.keys()
            for name, value in ref.variance_estimates_.items():
                np.testing.assert_allclose(rf.variance_estimates_[name], value, rtol=1e-9)
        out = rf.transform(dX)
        assert isinstance(out, da.Array) and out.chunks[0] == dX.chunks[0]
        np.testing.assert_allclose(out.compute(), ref.transform(X), rtol=1e-9)
        np.testing.assert_allclose(rf.transform_y(dY).compute(), ref.transform_y(Y), rtol=1e-9)
    with pytest.raises(ValueError, match=r"^X has 4 features, but the model was fitted with 5"):
        rf.transform(dX[:, :4])


@pytest.mark.parametrize("estimator", ["ridge", "gp"])
def test_estimators_fit_a_favor_sharp_map_on_every_dask_row(estimator):
    """RandomFeatureRidge / GP with an SDERF map on a Dask X: the map is fitted on the
    moments of every row, so the model equals the in-memory fit (it was fitted on the
    first chunk, whose moments differ here)."""
    from kernelkit.estimators import RandomFeatureGPRegressor, RandomFeatureRidge

    rng = np.random.default_rng(5)
    X = 0.3 * rng.standard_normal((600, 4))
    X[300:] *= 2.5  # later chunks change the moments
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(600)
    fm = SDERF(n_features=32, kernel="gaussian", random_state=0)
    est = (
        RandomFeatureRidge(fm, alpha=0.1) if estimator == "ridge" else RandomFeatureGPRegressor(fm)
    )
    chunked = clone(est).fit(da.from_array(X, chunks=150), y)
    in_memory = clone(est).set_params(solver="primal").fit(X, y)
    np.testing.assert_allclose(chunked.feature_map_.A_, in_memory.feature_map_.A_, rtol=1e-11)
    # predictions: the same model up to the order of the sums (cond(G) n eps, G the
    # regularised 32 x 32 Gram of the features)
    np.testing.assert_allclose(chunked.predict(X[:50]), in_memory.predict(X[:50]), atol=1e-8)
    first = SDERF(n_features=32, kernel="gaussian", random_state=0).fit(X[:150])
    assert np.abs(first.A_ - in_memory.feature_map_.A_).max() > 1e-3  # the test can fail


def test_empty_dask_inputs_are_named():
    """No rows (none at all, or every chunk emptied by a filter): the message names X or
    Y, as in memory (it named neither)."""
    X, Y = _data(SDERF)
    dX, dY = da.from_array(X, chunks=100), da.from_array(Y, chunks=100)
    for cls in (SDERF, PositiveRF, features.RandomFourierFeatures):
        with pytest.raises(ValueError, match=r"^X is empty: found 0 samples \(shape \(0, 5\)\)"):
            cls(n_features=8).fit(da.zeros((0, 5), chunks=2))
        with pytest.raises(ValueError, match=r"^X is empty: found 0 samples"):
            cls(n_features=8).fit(dX[dX[:, 0] > 100.0])  # unknown sizes, all chunks empty
        with pytest.raises(ValueError, match=r"^Y is empty: found 0 samples"):
            cls(n_features=8).fit(dX, Y=dY[dY[:, 0] > 100.0])


def test_sparse_backed_chunks_follow_the_in_memory_sparse_policy():
    """Dask chunks holding SciPy sparse matrices: maps that accept sparse input fit and
    transform them as the dense rows (the fit raised an IndexError); the others raise the
    in-memory TypeError."""
    S = sp.random(300, 5, density=0.4, format="csr", random_state=0)
    dS = da.from_array(S, chunks=(100, 5), asarray=False)
    for cls in (features.RandomFourierFeatures, PositiveRF):
        fm = cls(n_features=16, random_state=0).fit(dS)
        ref = cls(n_features=16, random_state=0).fit(S.toarray())
        out = fm.transform(dS)
        assert isinstance(out, da.Array)
        # the same draws; sparse and dense products differ in summation order only
        want = ref.transform(S.toarray())
        np.testing.assert_allclose(out.compute(), want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
    with pytest.raises(TypeError, match=r"^SDERF does not support sparse input \(X is a csr"):
        SDERF(n_features=8).fit(dS)
    lazy_error = r"^SDERF does not support sparse input \(Y is a csr"
    with pytest.raises(TypeError, match=lazy_error):  # at once, not when computed
        SDERF(n_features=8).fit(S.toarray()).transform_y(dS)


def test_set_output_container_with_a_dask_x_is_an_error():
    """set_output(transform="pandas") would compute the lazy features into one DataFrame
    (it did, silently): a ValueError says so; NumPy input is still wrapped."""
    from kernelkit.estimators import RandomFeatures

    pd = pytest.importorskip("pandas")
    X, _ = _data(SDERF)
    dX = da.from_array(X, chunks=100)
    for est in (SDERF(n_features=8, random_state=0), RandomFeatures(n_components=8)):
        est.fit(dX).set_output(transform="pandas")
        with pytest.raises(ValueError, match=r"transform of a Dask X returns a lazy Dask"):
            est.transform(dX)
        with pytest.raises(ValueError, match=r"set_output\(transform='pandas'\)"):
            est.fit_transform(dX)
        assert isinstance(est.transform(X), pd.DataFrame)
        est.set_output(transform="default")
        assert isinstance(est.transform(dX), da.Array)


def _counted(Z, rows, log):
    """A Dask array of Z (row chunks of ``rows``) that records the index of every chunk
    computed in ``log``."""

    def block(b, block_info=None):
        log.append(block_info[None]["chunk-location"][0])
        return b

    return da.from_array(Z, chunks=(rows, -1)).map_blocks(block, dtype=Z.dtype)


@pytest.mark.parametrize(
    "cls", [c for c in MAPS if c.fit_reads != "shape"], ids=lambda c: c.__name__
)
def test_fits_compute_each_chunk_once(cls):
    """The FAVOR# fits read the first chunk and the moments of the others, each chunk once
    (chunk 0 was computed twice); the fits that read every row compute X and Y in one pass
    (an upstream shared by X and Y was computed twice: here X and Y are the columns of one
    array). PositiveRF and HyperbolicRF need no moments: the first chunks only."""
    X, Y = _data(cls, n=400, m=400)
    ref = _map(cls).fit(X, Y=Y)
    if cls.fit_reads == "all":
        log = []
        Z = _counted(np.hstack([X, Y]), 100, log)  # 4 chunks of (100, 10)
        fm = _map(cls).fit(Z[:, :5], Y=Z[:, 5:])
        assert sorted(log) == [0, 1, 2, 3]
    else:
        log_x, log_y = [], []
        fm = _map(cls).fit(_counted(X, 100, log_x), Y=_counted(Y, 150, log_y))
        no_moments = cls in (PositiveRF, features.HyperbolicRF)
        assert sorted(log_x) == ([0] if no_moments else [0, 1, 2, 3])
        assert sorted(log_y) == ([0] if no_moments else [0, 1, 2])
    want = ref.transform(X)
    # moments summed in another order: n eps round-off through the d x d fit (see above)
    np.testing.assert_allclose(fm.transform(X), want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


def test_random_features_auto_on_sparse_chunks_compares_the_sparse_candidates():
    """RandomFeatures(method="auto") on a Dask X of SciPy sparse chunks compares the
    candidates that accept sparse input, as on the sparse matrix in memory (it tried GERF
    on the sparse sample and raised a TypeError)."""
    from kernelkit.estimators import RandomFeatures

    S = sp.random(400, 5, density=0.4, format="csr", random_state=0)
    dS = da.from_array(S, chunks=(100, 5), asarray=False)
    kw = dict(method="auto", n_components=16, auto_sample_size=150, random_state=0)
    rf = RandomFeatures(**kw).fit(dS)
    ref = RandomFeatures(**kw).fit(S)
    assert rf.method_ == ref.method_
    assert rf.variance_estimates_ == ref.variance_estimates_  # the same sampled rows
    want = ref.transform(S)
    np.testing.assert_allclose(rf.transform(dS).compute(), want, rtol=1e-13, atol=1e-13)


def test_unknown_width_is_named_before_computing():
    """Columns selected by a Dask mask leave the width unknown: a ValueError naming X or Y
    (it was Dask's error from rechunking, naming neither)."""
    from kernelkit.estimators import RandomFeatures

    X, _ = _data(SDERF)
    dX = da.from_array(X, chunks=100)
    Z = dX[:, da.from_array(np.array([True, False, True, True, True]))]  # (300, nan)
    with pytest.raises(ValueError, match=r"^X has an unknown number of columns"):
        SDERF(n_features=8).fit(Z)
    with pytest.raises(ValueError, match=r"^Y has an unknown number of columns"):
        SDERF(n_features=8).fit(dX, Y=Z)
    with pytest.raises(ValueError, match=r"^Y has an unknown number of columns"):
        PositiveRF(n_features=8).fit(X[:, :4]).transform_y(Z)
    with pytest.raises(ValueError, match=r"^X has an unknown number of columns"):
        RandomFeatures(n_components=8).fit(X).transform(Z)


def test_keys_passed_positionally_with_a_dask_x_are_caught():
    """fit(dX, dY) puts the keys in scikit-learn's ignored y: as in memory, a TypeError
    (other row count) or a warning (data-dependent map); it was silently ignored."""
    X, Y = _data(SDERF)
    dX, dY = da.from_array(X, chunks=100), da.from_array(Y, chunks=100)
    with pytest.raises(TypeError, match=r"^SDERF.fit got a second data set of shape \(200, 5\)"):
        SDERF(n_features=8).fit(dX, dY)
    with pytest.warns(UserWarning, match=r"^SDERF.fit ignores its positional argument y"):
        SDERF(n_features=8).fit(dX, da.from_array(X[::-1], chunks=100))
    keep = dX[:, 0] > -10.0  # unknown row counts are not compared: a warning at most
    with pytest.warns(UserWarning, match=r"^SDERF.fit ignores its positional argument y"):
        SDERF(n_features=8).fit(dX[keep], dY[dY[:, 0] > -10.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a target (one column) is no set of keys
        SDERF(n_features=8).fit(dX, dX[:, :1])


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_lazy_features_belong_to_the_map_as_fitted_at_transform(cls):
    """transform / transform_y of a Dask array give the features of the map as fitted when
    they are called: a refit before compute (another draw, another width) changes nothing
    (the graph read the map's parameters when computed)."""
    X, Y = _data(cls)
    fm = _map(cls).fit(X, Y=Y)
    want, want_y = fm.transform(X), fm.transform_y(Y)
    out = fm.transform(da.from_array(X, chunks=100))
    out_y = fm.transform_y(da.from_array(Y, chunks=100))
    fm.set_params(random_state=1, n_features=16).fit(X, Y=Y)
    assert fm.output_dim != want.shape[1] or np.abs(fm.transform(X) - want).max() > 1e-3
    for got, ref in ((out.compute(), want), (out_y.compute(), want_y)):  # chunked: round-off
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-13 * np.abs(ref).max())


@pytest.mark.parametrize("cls", [SDERF, GERF], ids=lambda c: c.__name__)
def test_one_chunk_moments_are_the_in_memory_moments_bit_for_bit(cls):
    """A chunk's moment sums and the in-memory moments are one function (row blocks of a
    fixed size, summed in order), so a fit on a one-chunk Dask array reads bit for bit the
    moments of the in-memory fit (the chunk's sums were one Gram product of the whole
    chunk, which differs in the last bits). 9001 x 64 rows take the blocked path."""
    from kernelkit.features import favor

    rng = np.random.default_rng(11)
    X = 0.1 * rng.standard_normal((9001, 64)) + 0.05
    assert favor.moments_are_threaded(X)
    fm = cls(n_features=16, random_state=0).fit(da.from_array(X, chunks=(-1, 16)))
    ref = cls(n_features=16, random_state=0).fit(X)
    np.testing.assert_array_equal(fm.A_, ref.A_)
    if ref.B_x_ is not None:
        np.testing.assert_array_equal(fm.B_x_, ref.B_x_)


def _blas_threads():
    from threadpoolctl import threadpool_info

    return min((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=1)


@pytest.mark.parametrize("cls", [PositiveRF, features.RandomFourierFeatures], ids=["PRF", "RFF"])
def test_lazy_transform_tasks_run_on_one_thread_under_the_threaded_scheduler(cls, monkeypatch):
    """Under Dask's threaded scheduler (several worker threads) each chunk task of a lazy
    transform runs on one thread, BLAS and kernelkit's (it used kernelkit's default
    thread count, here 4, and BLAS's: cores x cores threads); under the synchronous
    scheduler it keeps them. The features are bit for bit those of each chunk in memory:
    a 10 000-row chunk takes the threaded row-block path in memory, a 500-row chunk the
    one-call path. The BLAS limit is set and restored by the worker threads (threadpoolctl
    ignored it from any thread but the first to set one, the main thread)."""
    from concurrent.futures import ThreadPoolExecutor

    import dask

    from kernelkit._backend.parallel import SingleThreadedBlas, effective_n_jobs

    monkeypatch.setenv("KERNELKIT_NUM_THREADS", "4")
    with SingleThreadedBlas():  # as in-memory fits do: the main thread sets a limit first
        pass
    rng = np.random.default_rng(3)
    X = 0.3 * rng.standard_normal((20500, 16))
    fm = cls(n_features=64, random_state=0).fit(X)
    seen = []
    features_of = cls._features

    def spy(self, Xb, xp, side):
        seen.append((effective_n_jobs(None), _blas_threads()))
        return features_of(self, Xb, xp, side)

    monkeypatch.setattr(cls, "_features", spy)
    dX = da.from_array(X, chunks=((10000, 10000, 500), 16))
    lazy = fm.transform(dX)
    outside = effective_n_jobs(None), _blas_threads()
    assert outside[0] == 4
    with ThreadPoolExecutor(2) as pool:
        configs = (
            ({"scheduler": "threads", "num_workers": 3}, (1, 1)),
            ({"scheduler": "threads", "pool": pool}, (1, 1)),  # a pool of the user's
            ({"scheduler": "threads", "num_workers": 1}, outside),  # one task at a time
            ({"scheduler": "sync"}, outside),
        )
        for config, want in configs:
            seen.clear()
            with dask.config.set(**config):
                out = lazy.compute()
            assert seen == [want] * 3, config
            # the in-memory reference with BLAS on the task's threads: the 500-row
            # chunk's one call is a BLAS product, which a multi-threaded OpenBLAS may
            # round differently at the edges of its own thread partition (seen on an
            # AVX-512 machine, and on a loaded 2-core one: 1 ulp in 117 of 32 000
            # entries); the 10 000-row chunks still take the threaded path. So to
            # rounding: a 16-term logit (|x . w| <= 5 here) rounds to 16 eps times 5 at
            # most, which exp turns into a relative error below 2e-14 (cos into an
            # absolute one below 2e-14 of the largest feature)
            blas_one = want[1] == 1
            with SingleThreadedBlas() if blas_one else contextlib.nullcontext():
                for lo, hi in ((0, 10000), (10000, 20000), (20000, 20500)):
                    ref = fm.transform(X[lo:hi])
                    tol = 2e-14 * np.max(np.abs(ref))
                    np.testing.assert_allclose(out[lo:hi], ref, rtol=2e-14, atol=tol)
    assert (effective_n_jobs(None), _blas_threads()) == outside  # restored


def test_lazy_transform_on_a_distributed_cluster_is_unchanged(cluster_client):
    """On ``distributed`` workers a task keeps its threads (one each: the workers start
    with one BLAS thread), and the features are those of each chunk in memory."""
    import dask

    from kernelkit._backend.chunks import one_thread_per_task

    rng = np.random.default_rng(4)
    X = 0.3 * rng.standard_normal((3000, 8))
    fm = PositiveRF(n_features=32, random_state=0).fit(X)
    with dask.config.set(scheduler=cluster_client):
        out = fm.transform(da.from_array(X, chunks=1000)).compute()
    for lo in range(0, 3000, 1000):
        np.testing.assert_array_equal(out[lo : lo + 1000], fm.transform(X[lo : lo + 1000]))
    context = cluster_client.submit(lambda: type(one_thread_per_task()).__name__, pure=False)
    assert context.result() == "nullcontext"
