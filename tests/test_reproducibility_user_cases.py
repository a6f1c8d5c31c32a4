"""Reproducibility, memory layouts and thread safety, as a user running kernelkit in
production sees them.

Same seed, same result across ``n_jobs``, BLAS thread limits, backends and seed types;
the same result for every memory layout of the same values (Fortran order, strided and
reversed views, read-only arrays, memory maps, big-endian dtypes) with the caller's
array left untouched; one fitted object shared by several threads; a fitted object
pickled into worker processes.

Tolerances: "bitwise" where the same arithmetic runs on the same values in the same
order; where BLAS may run on another thread count (a BLAS thread limit is process-wide),
each comparison states the round-off bound it uses.
"""

from __future__ import annotations

import concurrent.futures as cf
import inspect
import pickle
import threading
import warnings

import numpy as np
import pytest

import kernelkit.features as F
from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPRegressor,
    RandomFeatures,
)
from kernelkit.features import (
    SDERF,
    RademacherSketch,
    RandomFourierFeatures,
    RandomMaclaurin,
    TensorSketch,
)

EPS = np.finfo(np.float64).eps

MAP_CLASSES = [
    getattr(F, name)
    for name in F.__all__
    if isinstance(getattr(F, name), type)
    and issubclass(getattr(F, name), F.FeatureMap)
    and not name.endswith("FeatureMap")
]


def _map(cls, **kw):
    params = inspect.signature(cls).parameters
    args = {"n_features": 32, "random_state": 0}
    args.update(kw)
    return cls(**{k: v for k, v in args.items() if k in params})


def _rows(n, d, seed=0):
    return 0.3 * np.random.default_rng(seed).standard_normal((n, d)) / np.sqrt(d)


# --------------------------------------------------------------------- byte order
@pytest.mark.parametrize("cls", [SDERF, TensorSketch, RandomMaclaurin, RandomFourierFeatures])
@pytest.mark.parametrize("dtype", [">f8", ">f4", ">f2"])
def test_big_endian_input_gives_the_native_result(cls, dtype):
    # big-endian data (FITS, HDF5, network formats): the same values in the native byte
    # order give the same arithmetic, so bitwise the same features, in a native dtype
    # (TensorSketch raised SciPy's "does not support dtype >f8"; the others returned
    # big-endian arrays, and '>f2' stayed float16 where native float16 becomes float64)
    X = _rows(40, 5)
    big = X.astype(dtype)
    native = big.astype(np.dtype(dtype).newbyteorder("="))
    expected = cls(n_features=16, random_state=0).fit(native).transform(native)
    out = cls(n_features=16, random_state=0).fit(big).transform(big)
    assert out.dtype.isnative
    assert out.dtype == expected.dtype == (np.float32 if dtype == ">f4" else np.float64)
    np.testing.assert_array_equal(out, expected)


def test_linear_attention_big_endian_numpy_input():
    # torch takes no big-endian array: the call raised "q must be a tensor or an array,
    # got ndarray" for a plain NumPy array of another byte order
    from kernelkit.attention import linear_attention

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 12, 4)) for _ in range(3))
    expected = linear_attention(q, k, v, "sderf", 16, random_state=0)
    out = linear_attention(
        q.astype(">f8"), k.astype(">f8"), v.astype(">f8"), "sderf", 16, random_state=0
    )
    assert out.dtype.isnative
    np.testing.assert_array_equal(out, expected)  # same values, same arithmetic


# --------------------------------------------------------------------- read-only input
def test_linear_attention_read_only_inputs_no_warning(tmp_path):
    # read-only arrays (setflags(write=False), a memmap opened with mode="r") gave torch's
    # "The given NumPy array is not writable" UserWarning on every call; the values are
    # read only, so the result equals that of writeable copies (bitwise) and the files
    # are unchanged
    from kernelkit.attention import draw_features, linear_attention

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 10, 4)) for _ in range(3))
    W = draw_features("positive", 16, 4, 0)["W"]
    expected = linear_attention(q, k, v, "positive", 16, projection=W)
    path = tmp_path / "q.dat"
    np.memmap(path, dtype=np.float64, mode="w+", shape=q.shape)[:] = q
    q_map = np.memmap(path, dtype=np.float64, mode="r", shape=q.shape)
    k_ro, v_ro, W_ro = k.copy(), v.copy(), W.copy()
    for a in (k_ro, v_ro, W_ro):
        a.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = linear_attention(q_map, k_ro, v_ro, "positive", 16, projection=W_ro)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(np.memmap(path, dtype=np.float64, mode="r", shape=q.shape), q)


def test_feature_map_read_only_numpy_second_argument_of_a_torch_call():
    # a NumPy second argument follows the first's backend (torch): a read-only one gave
    # torch's not-writable warning; its kernel equals that of a writeable copy (bitwise)
    torch = pytest.importorskip("torch")
    X = _rows(30, 4)
    Y = _rows(20, 4, seed=1)
    Xt = torch.from_numpy(X)
    fm = SDERF(n_features=16, random_state=0).fit(Xt)
    expected = fm.approx_kernel(Xt, torch.from_numpy(Y.copy()))
    Y_ro = Y.copy()
    Y_ro.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = fm.approx_kernel(Xt, Y_ro)
        out_be = fm.approx_kernel(Xt, Y.astype(">f8"))
    assert torch.equal(out, expected)
    assert torch.equal(out_be, expected)


# --------------------------------------------------------------------- layouts
@pytest.mark.parametrize("cls", MAP_CLASSES, ids=lambda c: c.__name__)
def test_every_layout_gives_the_contiguous_result_and_leaves_the_input(cls, tmp_path):
    # Fortran order, strided / double-transposed / reversed views, read-only arrays and
    # memory maps hold the same values: the features agree with those of the contiguous
    # copy to a few ulps (BLAS may take another kernel for another layout: 64 eps of the
    # largest feature bounds a reordered sum of d = 6 products), and the caller's array
    # is not modified
    X = _rows(60, 6, seed=3)
    fm = _map(cls).fit(X)
    expected = np.asarray(fm.transform(X))
    tol = 64 * EPS * np.abs(expected).max()
    wide = np.zeros((60, 12))
    wide[:, ::2] = X
    read_only = X.copy()
    read_only.setflags(write=False)
    mm = np.memmap(tmp_path / "x.dat", dtype=np.float64, mode="w+", shape=X.shape)
    mm[:] = X
    layouts = {
        "fortran": np.asfortranarray(X),
        "strided": wide[:, ::2],
        "TT": X.T.T,
        "read_only": read_only,
        "memmap": mm,
    }
    for name, V in layouts.items():
        before = np.array(V, copy=True)
        out = np.asarray(fm.transform(V))
        np.testing.assert_allclose(out, expected, rtol=0, atol=tol, err_msg=name)
        refit = np.asarray(_map(cls).fit(V).transform(V))
        np.testing.assert_allclose(refit, expected, rtol=0, atol=tol, err_msg=name)
        np.testing.assert_array_equal(V, before, err_msg=name)
    reversed_out = np.asarray(fm.transform(X[::-1]))
    np.testing.assert_allclose(reversed_out, expected[::-1], rtol=0, atol=tol)
    for bad in (np.float64(1.0), X[0]):
        with pytest.raises(ValueError, match="2-D"):
            fm.transform(bad)


# --------------------------------------------------------------------- n_jobs
@pytest.mark.parametrize(
    "make",
    [
        lambda nj: RandomMaclaurin(n_features=64, random_state=0, n_jobs=nj),
        lambda nj: RademacherSketch(n_features=23, degree=2, random_state=0, n_jobs=nj),
    ],
    ids=["RandomMaclaurin", "RademacherSketch-23"],
)
def test_n_jobs_one_gives_the_threaded_result_bitwise(make):
    # "results never depend on the thread count": n_jobs=1 ran its row blocks with BLAS
    # on its default thread count, n_jobs > 1 with BLAS on one thread, and a threaded
    # OpenBLAS splits a 46-column GEMM differently (1 ulp in some entries). Every block
    # now runs with BLAS on one thread, so the results are bitwise equal. The output
    # (6000 x 46) is above the one-block size, so the rows are blocked.
    X = _rows(6000, 8)
    expected = make(1).fit(X).transform(X)
    for nj in (2, -1, None):
        np.testing.assert_array_equal(make(nj).fit(X).transform(X), expected)


# --------------------------------------------------------------------- seeds
@pytest.mark.parametrize("cls", [SDERF, RandomFourierFeatures, TensorSketch, RandomMaclaurin])
def test_seed_types_follow_the_contract(cls):
    # an int gives the same draw on every fit; a Generator is the stream it names (its
    # first draw is that of default_rng(seed), i.e. of the int) and advances; a legacy
    # RandomState is a stream too (a seed drawn from it per fit) and advances
    X = _rows(25, 4)
    fm = cls(n_features=16, random_state=0)
    first = fm.fit(X).transform(X)
    np.testing.assert_array_equal(fm.fit(X).transform(X), first)
    g = np.random.default_rng(0)
    np.testing.assert_array_equal(cls(n_features=16, random_state=g).fit(X).transform(X), first)
    second = cls(n_features=16, random_state=g).fit(X).transform(X)
    assert not np.array_equal(second, first)
    rs = np.random.RandomState(0)
    a = cls(n_features=16, random_state=rs).fit(X).transform(X)
    b = cls(n_features=16, random_state=rs).fit(X).transform(X)
    assert not np.array_equal(a, b)


# --------------------------------------------------------------------- threads
def test_shared_map_transform_from_four_threads():
    # one fitted map, four threads, inputs of different sizes and layouts (some of them
    # blocked on kernelkit's pool): each call returns its own features. A concurrent
    # call may set BLAS to one thread meanwhile (the limit is process-wide), which moves
    # a GEMM's sums by a few ulps: 16 eps of the largest feature bounds a reordered sum
    # of d = 8 products
    maps = [
        RandomFourierFeatures(n_features=64, random_state=0),
        RandomMaclaurin(n_features=64, random_state=0),
        SDERF(n_features=64, random_state=0),
    ]
    inputs = [_rows(n, 8, seed=n) for n in (3000, 1500, 700, 2500)]
    inputs += [inputs[1][::-1], np.asfortranarray(inputs[2])]
    for fm in maps:
        fm.fit(inputs[0])
        serial = [fm.transform(x) for x in inputs]
        jobs = list(range(len(inputs))) * 2
        with cf.ThreadPoolExecutor(4) as ex:
            results = list(ex.map(lambda i, fm=fm: (i, fm.transform(inputs[i])), jobs))
        for i, out in results:
            tol = 16 * EPS * np.abs(serial[i]).max()
            np.testing.assert_allclose(out, serial[i], rtol=0, atol=tol)


def test_shared_estimators_predict_and_concurrent_fits():
    # predictions of shared fitted estimators from four threads on different queries,
    # and fits of two different estimators at once, equal the serial ones. The outputs
    # are normalised kernel-weighted averages / a ridge solve of 256 features: a BLAS
    # thread change moves each sum by at most (terms) eps relative; 1e3 eps covers the
    # 256-term sums and the (noise-regularised, well-conditioned here) solve
    X = _rows(400, 5, seed=7) * 5
    y_cls = (X[:, 0] > 0).astype(int)
    y_reg = np.sin(X.sum(axis=1))
    queries = [_rows(n, 5, seed=n) * 5 for n in (2500, 1800, 1200, 3000)]

    def fit_nw():
        return NadarayaWatsonClassifier(n_components=32, random_state=0).fit(X, y_cls)

    def fit_gp():
        return RandomFeatureGPRegressor(random_state=0).fit(X, y_reg)

    nw, gp = fit_nw(), fit_gp()
    expected = [(nw.predict_proba(Q), gp.predict(Q)) for Q in queries]
    expected_fit = (nw.predict_proba(X), gp.predict(X))
    with cf.ThreadPoolExecutor(4) as ex:
        outs = list(
            ex.map(
                lambda i: (i % 4, nw.predict_proba(queries[i % 4]), gp.predict(queries[i % 4])),
                range(8),
            )
        )
        fits = list(
            ex.map(lambda i: fit_gp().predict(X) if i % 2 else fit_nw().predict_proba(X), range(8))
        )
    for i, p, r in outs:
        np.testing.assert_allclose(p, expected[i][0], rtol=0, atol=1e3 * EPS)
        np.testing.assert_allclose(r, expected[i][1], rtol=0, atol=1e3 * EPS * np.abs(y_reg).max())
    for i, out in enumerate(fits):
        ref = expected_fit[i % 2 == 1]
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e3 * EPS * np.abs(ref).max())


def test_linear_attention_threads_with_different_moments():
    # the module-level cache of fitted maps (attention/_maps.py) under four threads:
    # each call gets the map of its own moments. The second moments have the same sums
    # as the first (heads swapped, coordinates permuted), so the cache's key collides and
    # only the comparison of the stored copies tells them apart; bitwise, since each call
    # runs the same torch kernels on the same tensors
    torch = pytest.importorskip("torch")
    from kernelkit.attention import attention_moments, linear_attention
    from kernelkit.features.favor import Moments

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 16, 4, dtype=torch.float64, generator=gen) for _ in range(3))
    m0 = attention_moments(q, k)
    perm = torch.tensor([1, 0, 3, 2])

    def swapped(t, matrix):
        t = t.flip(0)[..., perm]
        return t[..., perm, :] if matrix else t

    m1 = Moments(
        swapped(m0.mean_x, False),
        swapped(m0.second_x, True),
        swapped(m0.mean_y, False),
        swapped(m0.second_y, True),
    )
    moments = [m0, m1]
    for name in ("sderf", "aderf"):
        serial = [linear_attention(q, k, v, name, 32, random_state=0, moments=m) for m in moments]
        assert not torch.equal(serial[0], serial[1])
        with cf.ThreadPoolExecutor(4) as ex:
            results = list(
                ex.map(
                    lambda i, name=name: (
                        i % 2,
                        linear_attention(q, k, v, name, 32, random_state=0, moments=moments[i % 2]),
                    ),
                    range(24),
                )
            )
        for j, out in results:
            assert torch.equal(out, serial[j])


# --------------------------------------------------------------------- processes
def _transform_pickled(blob, X):
    return pickle.loads(blob).transform(X)


def test_pickled_objects_in_joblib_workers():
    # a fitted map and estimator pickled into two joblib worker processes (forked: no
    # interpreter start-up) give bitwise the parent's output: inputs below the blocking
    # size, so the same calls on the same values (GEMMs 32 / 64 columns wide, which this
    # BLAS computes alike on any thread count)
    joblib = pytest.importorskip("joblib")
    X = _rows(300, 6)
    objs = [
        TensorSketch(n_features=32, random_state=0).fit(X),
        RandomFeatures(n_components=32, random_state=0).fit(X),
    ]
    expected = [o.transform(X) for o in objs]
    outs = joblib.Parallel(n_jobs=2, backend="multiprocessing")(
        joblib.delayed(_transform_pickled)(pickle.dumps(o), X) for o in objs
    )
    for out, exp in zip(outs, expected, strict=True):
        np.testing.assert_array_equal(out, exp)


def test_first_calls_from_threads_with_different_thread_counts(monkeypatch):
    # threads whose first calls into kernelkit ask for different n_jobs at once: the
    # shared pool grows, and a thread that had looked the old pool up just before it was
    # replaced (and shut down) raised "cannot schedule new futures after shutdown".
    # Each round starts from no pool, as a fresh process does; the results are exact
    # (integer sums)
    from kernelkit._backend import parallel

    pools = []
    errors = []

    def user(threads):
        try:
            out = parallel.pool_map(lambda i: sum(range(i * 100)), range(32), threads)
            assert out == [sum(range(i * 100)) for i in range(32)]
        except Exception as exc:  # collected: the assertion below names them
            errors.append(repr(exc))

    for _ in range(60):
        state = {"pool": None, "size": 0, "pid": None}
        monkeypatch.setattr(parallel, "_pool_state", state)
        workers = [threading.Thread(target=user, args=(k,)) for k in range(2, 10)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        pools.append(state["pool"])
    for pool in pools:
        if pool is not None:
            pool.shutdown(wait=True)
    assert not errors, errors[:3]


def test_concurrent_fits_leave_the_warning_filters_alone():
    # RandomFeatures(method="auto") silenced the biased-sampler warnings of its ranking
    # with warnings.catch_warnings, which saves and restores the process-wide filter
    # list: fits in four threads left its "ignore" filter installed for good. The
    # warnings are now silenced per thread; the filter list is unchanged, and a fit in
    # the calling thread still emits none of them
    from kernelkit.estimators import RandomFeatures

    X = _rows(60, 3, seed=5) * 10
    before = list(warnings.filters)

    def fit(seed):
        RandomFeatures(
            method="auto", n_components=16, sampler="sorf", random_state=seed, auto_sample_size=30
        ).fit(X)

    with cf.ThreadPoolExecutor(4) as ex:
        list(ex.map(fit, range(24)))
    assert warnings.filters == before
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit(0)
    # outside the ranking the warning is still given
    fm = SDERF(n_features=16, sampler="sorf", random_state=0).fit(X)
    with pytest.warns(UserWarning, match="i.i.d. projections"):
        fm.variance(X[:3], X[:3])


def test_chunked_classifier_fit_with_distinct_labels_no_warning_filter():
    # the classes of a chunked GP classifier fit are checked with scikit-learn's
    # check_classification_targets, whose "more unique classes than 50 % of the samples"
    # warning (the list of distinct classes always has it) was silenced with
    # warnings.catch_warnings; now each label is checked twice, so it is not raised,
    # the filter list is not touched, and continuous labels are still refused
    from kernelkit.estimators import RandomFeatureGPClassifier

    X = _rows(120, 3, seed=6) * 5
    y = np.arange(120) % 30  # 30 classes
    blocks = [(X[i : i + 40], y[i : i + 40]) for i in range(0, 120, 40)]
    before = list(warnings.filters)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = RandomFeatureGPClassifier(n_samples=20, random_state=0).fit(blocks, None)
    assert warnings.filters == before
    np.testing.assert_array_equal(model.classes_, np.arange(30))
    bad = [(X[:40], X[:40, 0])]
    with pytest.raises(ValueError, match="Unknown label type"):
        RandomFeatureGPClassifier(n_samples=20, random_state=0).fit(bad, None)


def _fork_while_held(hold, target, args=(), join_s=30):
    """Fork a child running ``target(*args, queue)`` while another thread of this process
    is inside ``hold()`` (a context manager: a lock, a BLAS limit); ``(hung, queue)``,
    ``hung`` whether the child was still running after ``join_s`` seconds (then killed)."""
    import multiprocessing

    entered, release = threading.Event(), threading.Event()

    def holder():
        with hold():
            entered.set()
            release.wait(30)

    thread = threading.Thread(target=holder)
    thread.start()
    entered.wait(10)
    ctx = multiprocessing.get_context("fork")
    try:
        queue = ctx.Queue()
        child = ctx.Process(target=target, args=(*args, queue))
        child.start()
        child.join(join_s)
        hung = child.is_alive()
        if hung:
            child.kill()
            child.join()
    finally:
        release.set()
        thread.join()
    return hung, queue


def _child_uses_the_pool(queue):
    from kernelkit._backend import parallel

    with parallel.SingleThreadedBlas():
        out = parallel.pool_map(lambda i: i * i, range(16), 2)
    queue.put((out, parallel._blas_state["users"], parallel._blas_threads()))


@pytest.mark.skipif(not hasattr(__import__("os"), "register_at_fork"), reason="no fork")
def test_fork_while_a_kernelkit_thread_holds_the_lock_or_the_blas_limit():
    # a program that forks workers (multiprocessing's default on Linux) while one of its
    # threads runs kernelkit: the child inherited kernelkit's lock as held (its first
    # parallel call then waited for ever) and the single-thread BLAS limit of the
    # parent's thread as in use (never lifted in the child). The child now starts with a
    # fresh lock, no pool and the parent's original BLAS thread count
    import contextlib

    from kernelkit._backend import parallel

    orig = parallel._blas_threads()

    def hold():
        stack = contextlib.ExitStack()
        stack.enter_context(parallel.SingleThreadedBlas())
        stack.enter_context(parallel._lock)
        return stack

    hung, queue = _fork_while_held(hold, _child_uses_the_pool, join_s=20)
    assert not hung, "the forked child's first parallel call waited for ever"
    out, users, threads = queue.get(timeout=10)
    assert out == [i * i for i in range(16)]
    assert users == 0
    assert threads == orig  # the parent's limit of one thread is not the child's


def _child_takes_the_map_cache_lock(queue):
    from kernelkit.attention import _maps

    got = _maps._BUILT_LOCK.acquire(timeout=10)
    if got:
        _maps._BUILT_LOCK.release()
    queue.put(got)


@pytest.mark.skipif(not hasattr(__import__("os"), "register_at_fork"), reason="no fork")
def test_fork_while_a_thread_holds_the_attention_map_cache_lock():
    # the cache of fitted attention maps is guarded by a module-level lock: a child
    # forked while another thread held it would wait for it for ever in its first
    # linear_attention with given moments. The child takes the lock itself (a torch
    # computation in a forked child can hang in torch's own thread pools, so the check
    # stops at the lock)
    pytest.importorskip("torch")
    from kernelkit.attention import _maps

    _, queue = _fork_while_held(lambda: _maps._BUILT_LOCK, _child_takes_the_map_cache_lock)
    assert queue.get(timeout=10), "the forked child found the map cache's lock held"


def _child_fits_through_the_basis_cache(cache, X, queue):
    basis = cache.fit(X)  # a hit: the entry fitted in the parent
    queue.put((cache.hits, basis.n_components_))


@pytest.mark.skipif(not hasattr(__import__("os"), "register_at_fork"), reason="no fork")
def test_fork_while_a_thread_holds_a_basis_cache_lock():
    # a BasisCache shared by a grid search's fits guards its entries with a lock: a child
    # forked (multiprocessing's default on Linux) while another thread held it waited for
    # it for ever on its first fit through the cache; now it gets a fresh lock and the
    # entries fitted in the parent
    from kernelkit.distributions import BasisCache

    X = np.random.default_rng(3).standard_normal((60, 2))
    cache = BasisCache()
    rank = cache.fit(X).n_components_
    hung, queue = _fork_while_held(
        lambda: cache._lock, _child_fits_through_the_basis_cache, (cache, X)
    )
    assert not hung, "the forked child waited for ever on the cache's lock"
    assert queue.get(timeout=10) == (1, rank)  # served from the parent's entry
