"""Out-of-core fits of RandomFeatureRidge / RandomFeatureGPRegressor (Dask, block iterables).

The chunked fit reduces Phi^H Phi, Phi^H Y and sums over row chunks and solves the same
primal system, so it must equal the in-memory primal fit to floating-point tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

from kernelkit.estimators import RandomFeatureGPRegressor, RandomFeatureRidge
from kernelkit.features import SDERF, GaussianSketch, RandomFourierFeatures

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")


def _data(n=3000, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)
    return X, y


def _blocks(X, y, size):
    return ((X[i : i + size], y[i : i + size]) for i in range(0, len(X), size))


MAPS = [
    RandomFourierFeatures(n_features=96, lengthscale=1.5, random_state=0),
    GaussianSketch(n_features=48, degree=2, complex=True, random_state=1),
]


@pytest.mark.parametrize("fm", MAPS, ids=["rff", "complex-sketch"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_ridge_dask_and_blocks_equal_in_memory(fm, fit_intercept):
    X, y = _data()
    ref = RandomFeatureRidge(fm, alpha=0.3, fit_intercept=fit_intercept, solver="primal").fit(X, y)
    lazy = RandomFeatureRidge(fm, alpha=0.3, fit_intercept=fit_intercept).fit(
        da.from_array(X, chunks=(700, 5)), y
    )
    it = RandomFeatureRidge(fm, alpha=0.3, fit_intercept=fit_intercept).fit(
        _blocks(X, y, 999), None
    )
    scale = np.abs(ref.coef_).max()
    for est in (lazy, it):
        np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-10 * scale)
        np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=0, atol=1e-10)
        assert est.n_samples_seen_ == len(X)
    pred = lazy.predict(da.from_array(X, chunks=(1000, 5)))
    assert isinstance(pred, da.Array)  # lazy
    np.testing.assert_allclose(pred.compute(), ref.predict(X), rtol=0, atol=1e-10)


def test_ridge_chunked_multi_target_and_dask_targets():
    X, y = _data()
    Y = np.c_[y, 2 * y - 1]
    ref = RandomFeatureRidge(MAPS[0], alpha=0.1, solver="primal").fit(X, Y)
    est = RandomFeatureRidge(MAPS[0], alpha=0.1).fit(
        da.from_array(X, chunks=(500, 5)), da.from_array(Y, chunks=(800, 2))
    )
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-10 * np.abs(ref.coef_).max())
    pred = est.predict(da.from_array(X[:100], chunks=(30, 5)))
    assert pred.shape == (100, 2)
    np.testing.assert_allclose(pred.compute(), ref.predict(X[:100]), atol=1e-10)


def test_data_dependent_map_fitted_on_all_dask_rows_or_the_first_block():
    """A Dask X: SDERF is fitted on the moments of every row (as in memory); an iterable
    of blocks (read once): on the first block."""
    X, y = _data(d=4)
    X = 0.3 * X
    fm = SDERF(n_features=32, kernel="gaussian", random_state=0)
    est = RandomFeatureRidge(fm, alpha=0.5).fit(da.from_array(X, chunks=(600, 4)), y)
    ref_map = clone(fm).fit(X)
    np.testing.assert_allclose(
        est.feature_map_.transform(X[:5]), ref_map.transform(X[:5]), rtol=1e-10
    )
    blocks = iter([(X[:600], y[:600]), (X[600:], y[600:])])
    streamed = RandomFeatureRidge(fm, alpha=0.5).fit(blocks, None)
    first_map = clone(fm).fit(X[:600])
    np.testing.assert_allclose(
        streamed.feature_map_.transform(X[:5]), first_map.transform(X[:5]), rtol=1e-12
    )


@pytest.mark.parametrize("normalize_y", [True, False])
def test_gp_dask_equals_in_memory(normalize_y):
    X, y = _data()
    Y = np.c_[y, 3 * y + 2]
    kw = dict(noise=0.1, amplitude=2.0, normalize_y=normalize_y)
    ref = RandomFeatureGPRegressor(MAPS[0], solver="primal", **kw).fit(X, Y)
    est = RandomFeatureGPRegressor(MAPS[0], **kw).fit(da.from_array(X, chunks=(700, 5)), Y)
    m1, s1 = ref.predict(X[:200], return_std=True)
    m2, s2 = est.predict(da.from_array(X[:200], chunks=(64, 5)), return_std=True)
    assert isinstance(m2, da.Array) and isinstance(s2, da.Array)
    np.testing.assert_allclose(m2.compute(), m1, rtol=0, atol=1e-10 * np.abs(m1).max())
    np.testing.assert_allclose(s2.compute(), s1, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="return_cov"):
        est.predict(da.from_array(X[:10], chunks=5), return_cov=True)


def test_chunked_bad_input():
    X, y = _data(n=200)
    with pytest.raises(ValueError, match="dual"):
        RandomFeatureRidge(solver="dual").fit(da.from_array(X, chunks=50), y)
    with pytest.raises(ValueError, match="rows"):
        RandomFeatureRidge().fit(da.from_array(X, chunks=50), y[:150])
    with pytest.raises(ValueError, match="y=None"):
        RandomFeatureRidge().fit(_blocks(X, y, 50), y)
    with pytest.raises(ValueError, match="empty"):
        RandomFeatureRidge().fit(iter([]), None)
    with pytest.raises(ValueError, match="every block of the iterable is empty"):
        RandomFeatureRidge().fit(iter([(X[:0], y[:0])]), None)
    bad = X.copy()
    bad[120, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        RandomFeatureRidge().fit(da.from_array(bad, chunks=50), y)
    with pytest.raises(ValueError, match="NaN"):
        RandomFeatureRidge().fit(_blocks(bad, y, 50), None)
    blocks = [(X[:50], y[:50]), (X[50:100, :3], y[50:100])]
    with pytest.raises(ValueError, match="shape"):
        RandomFeatureRidge().fit(iter(blocks), None)
    with pytest.raises(TypeError, match="pairs"):
        RandomFeatureRidge().fit(iter([X[:5]]), None)
    with pytest.raises(ValueError, match="block 0 had 1-D blocks"):
        RandomFeatureRidge().fit(iter([(X[:50], y[:50]), (X[50:60], np.ones((10, 2)))]), None)
    with pytest.raises(ValueError, match="y is required"):
        RandomFeatureRidge().fit(da.from_array(X, chunks=50), None)


def test_empty_dask_chunks_are_skipped():
    X, y = _data(n=1000)
    ref = RandomFeatureRidge(MAPS[0], alpha=0.3, solver="primal").fit(X, y)
    Xd = da.from_array(X, chunks=((400, 0, 600), (5,)))
    est = RandomFeatureRidge(MAPS[0], alpha=0.3).fit(Xd, y)
    assert est.n_samples_seen_ == 1000
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-10 * np.abs(ref.coef_).max())


@pytest.mark.slow
def test_distributed_local_cluster_two_workers(cluster_client):
    X, y = _data(n=4000)
    ref = RandomFeatureRidge(MAPS[0], alpha=0.3, solver="primal").fit(X, y)
    with dask.config.set(scheduler=cluster_client):  # every pass on the two workers
        Xd = da.from_array(X, chunks=(500, 5))
        est = RandomFeatureRidge(MAPS[0], alpha=0.3).fit(Xd, y)
        pred = est.predict(Xd).compute()
        gp = RandomFeatureGPRegressor(MAPS[0], noise=0.2).fit(Xd, y)
        gmean = gp.predict(Xd).compute()
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-10 * np.abs(ref.coef_).max())
    np.testing.assert_allclose(pred, ref.predict(X), atol=1e-10)
    gref = RandomFeatureGPRegressor(MAPS[0], noise=0.2, solver="primal").fit(X, y)
    np.testing.assert_allclose(gmean, gref.predict(X), atol=1e-10)


@pytest.mark.parametrize(
    "fm",
    [
        RandomFourierFeatures(n_features=33, lengthscale=1.5, random_state=0),  # odd: phase col
        GaussianSketch(n_features=16, degree=2, complex=True, random_state=1),
    ],
    ids=["rff-odd", "complex-sketch"],
)
def test_block_stats_in_slabs_equal_direct_sums(fm, monkeypatch):
    """Slab-wise accumulation (dsyrk upper triangle + mirror) = the sums written out."""
    from kernelkit.estimators import _chunked

    X, y = _data(n=1000)
    Y = np.c_[y, y**2]
    fm = fm.fit(X)
    Phi = fm.transform(X)
    monkeypatch.setattr(_chunked, "_SLAB_BYTES", 100 * Phi.itemsize * Phi.shape[1])
    monkeypatch.setattr(_chunked, "_FIRST_SLAB", 37)  # slabs of 37, 100, ..., 100, 63 rows
    st = _chunked.block_stats(fm, X, Y, amplitude=2.0)
    P = np.sqrt(2.0) * Phi
    G = np.conj(P).T @ P
    assert st.n == len(X)
    tol = 1e-12 * np.abs(G).max()
    np.testing.assert_allclose(st.gram, G, rtol=0, atol=tol)
    np.testing.assert_array_equal(st.gram, np.conj(st.gram).T)  # exactly Hermitian
    # means of n = 1000 terms summed in another order (slabs vs numpy's pairwise sum):
    # each is within (n - 1) eps mean|y| of the exact mean, so they differ by at most
    # 2 n eps mean|y| (a relative bound fails where the mean cancels to ~1e-3, as the
    # y column did in some draws)
    mean_tol = 2.0 * len(Y) * np.finfo(float).eps * np.abs(Y).mean(axis=0)
    # target sums relative to the block mean y_ref
    np.testing.assert_array_less(np.abs(st.y_ref - Y.mean(axis=0)), mean_tol)
    Yc = Y - st.y_ref
    np.testing.assert_allclose(st.rhs, np.conj(P).T @ Yc, rtol=0, atol=1e-12 * np.abs(Y).sum())
    np.testing.assert_allclose(st.s_phi, P.sum(axis=0), rtol=0, atol=1e-12 * len(X))
    assert np.all(np.abs(st.s_y) <= 1e-13 * np.abs(Y).sum(axis=0))
    np.testing.assert_array_less(np.abs(st.y_mean - Y.mean(axis=0)), mean_tol)
    np.testing.assert_allclose(st.ss_y, ((Y - Y.mean(axis=0)) ** 2).sum(axis=0), rtol=1e-13)


@pytest.mark.parametrize("kind", ["uniform", "positive", "with-zeros", "signed"])
def test_gram_primal_weighted_equals_definition(kind):
    from kernelkit.estimators._posterior import gram_primal

    rng = np.random.default_rng(3)
    Phi = rng.standard_normal((300, 20))
    w = {
        "uniform": np.full(300, 0.7),
        "positive": rng.uniform(0.1, 2.0, 300),
        "with-zeros": np.where(rng.random(300) < 0.3, 0.0, 1.5),
        "signed": rng.standard_normal(300),
    }[kind]
    ref = (Phi * w[:, None]).T @ Phi
    np.testing.assert_allclose(
        gram_primal(Phi, w), ref, rtol=0, atol=1e-12 * np.abs(Phi).max() ** 2 * np.abs(w).sum()
    )


def test_threaded_dask_runs_blas_single_threaded():
    """Under the threaded scheduler each task's BLAS runs one thread; otherwise untouched."""
    import dask
    from threadpoolctl import threadpool_info

    from kernelkit._backend.chunks import blas_threads_for_dask

    def blas_threads():
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    before = blas_threads()
    result = dask.delayed(sum)([1, 2])
    with dask.config.set(scheduler="threads"), blas_threads_for_dask(result, 2):
        assert set(blas_threads()) <= {1}
    assert blas_threads() == before
    for scheduler, n_chunks in (("sync", 2), ("threads", 1)):
        with dask.config.set(scheduler=scheduler), blas_threads_for_dask(result, n_chunks):
            assert blas_threads() == before


def test_lazy_predictions_run_one_thread_per_task_on_the_threaded_scheduler(monkeypatch):
    """Each row chunk of a lazy ``predict`` computes on one kernelkit thread under the
    threaded scheduler (it used kernelkit's default, here 4, in each of the scheduler's
    threads), with the in-memory predictions bit for bit."""
    from kernelkit._backend.parallel import effective_n_jobs

    monkeypatch.setenv("KERNELKIT_NUM_THREADS", "4")
    X, y = _data(n=2000)
    est = RandomFeatureRidge(MAPS[0], alpha=0.1).fit(X, y)
    seen = []
    predict = RandomFeatureRidge.predict

    def spy(self, Z):
        if not isinstance(Z, da.Array):  # a row chunk, inside its task
            seen.append(effective_n_jobs(None))
        return predict(self, Z)

    monkeypatch.setattr(RandomFeatureRidge, "predict", spy)
    lazy = est.predict(da.from_array(X, chunks=500))
    for scheduler, want in (("threads", 1), ("sync", 4)):
        seen.clear()
        with dask.config.set(scheduler=scheduler, num_workers=2):
            out = lazy.compute()
        assert seen == [want] * 4
        np.testing.assert_array_equal(out, predict(est, X))


@pytest.mark.parametrize("fm", MAPS)
def test_large_in_memory_primal_fits_stream_blocks_with_the_same_result(fm, monkeypatch):
    """Above STREAM_ENTRIES (n x D) an in-memory primal fit reduces statistics over row
    blocks in threads instead of forming all features: the same model to round-off."""
    import kernelkit.estimators._chunked as chunked

    X, y = _data(n=3000)
    Y2 = np.column_stack([y, np.cos(X[:, 1])])
    for est, target in [
        (RandomFeatureRidge(fm, alpha=0.3), y),
        (RandomFeatureRidge(fm, alpha=0.3, fit_intercept=False), Y2),
        (RandomFeatureGPRegressor(fm, noise=0.2), y),
        (RandomFeatureGPRegressor(fm, noise=0.2, normalize_y=True), Y2),
    ]:
        monkeypatch.setattr(chunked, "STREAM_ENTRIES", 1 << 62)
        direct = clone(est).fit(X, target)
        monkeypatch.setattr(chunked, "STREAM_ENTRIES", 1000)
        assert chunked.use_blocked_statistics(direct.feature_map_, X, "auto")
        streamed = clone(est).fit(X, target)
        np.testing.assert_allclose(streamed.predict(X[:200]), direct.predict(X[:200]), atol=1e-10)
        if isinstance(est, RandomFeatureGPRegressor):
            np.testing.assert_allclose(
                streamed.predict(X[:50], return_std=True)[1],
                direct.predict(X[:50], return_std=True)[1],
                atol=1e-10,
            )
