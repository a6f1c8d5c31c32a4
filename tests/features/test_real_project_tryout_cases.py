"""The feature maps with the array-likes of a real project: Dask arrays of SciPy sparse
chunks (``dask.array.from_array(S, asarray=False)``) in the methods that compute their
Dask arguments; and guards for what held: read-only, memory-mapped, Fortran-ordered and
nullable-pandas input, sparse matrices in every format (duplicates, explicit zeros, integer
data), threads, clone and pickle, and the mean estimate on degenerate data.

Expected values are exact references: the same seed gives the same draw, so a method
called on a Dask array is compared with the same method on the computed sparse matrix,
with which it shares every operation (equal to the last bit).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from kernelkit.features import (
    SDERF,
    RandomFourierFeatures,
    RandomMaclaurin,
    TensorSketch,
    TensorSRHT,
    TrigRF,
)

SPARSE_MAPS = [RandomFourierFeatures, TrigRF, TensorSketch, RandomMaclaurin]
METHODS = [
    "approx_kernel",
    "exact_kernel",
    "expected_kernel",
    "variance",
    "complex_variance",
    "log_relative_variance",
]


def _sparse_dask(n=60, d=5, chunk=20):
    da = pytest.importorskip("dask.array", reason="dask not installed (the dask extra)")
    S = sp.random(n, d, density=0.4, format="csr", random_state=0)
    return S, da.from_array(S, chunks=(chunk, d), asarray=False)


@pytest.mark.parametrize("cls", SPARSE_MAPS, ids=lambda c: c.__name__)
def test_methods_compute_a_dask_array_of_sparse_chunks(cls):
    # they computed it with numpy.asarray, which wraps the computed sparse matrix in a
    # 0-d object array: "X must be numeric, got dtype object"
    S, dS = _sparse_dask()
    fm = cls(n_features=8, random_state=0).fit(dS)
    for name in METHODS:
        got = getattr(fm, name)(dS[:5], dS[10:17])
        want = getattr(fm, name)(S[:5], S[10:17])
        np.testing.assert_array_equal(got, want, err_msg=name)
    for got, want in zip(fm.transform_scaled(dS[:5]), fm.transform_scaled(S[:5]), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_map_without_sparse_support_names_sparse_dask_chunks():
    S, dS = _sparse_dask()
    fm = SDERF(n_features=8, random_state=0).fit(S.toarray())
    with pytest.raises(TypeError, match=r"^SDERF does not support sparse input \(X is a csr"):
        fm.approx_kernel(dS[:5])


# ------------------------------------------------------------------ guards: what held
GUARD_MAPS = [
    lambda: RandomFourierFeatures(n_features=16, random_state=0),
    lambda: SDERF(n_features=16, kernel="gaussian", random_state=0),
    lambda: TensorSRHT(n_features=16, random_state=0),
]
GUARD_IDS = ["RandomFourierFeatures", "SDERF", "TensorSRHT"]


def _rows(n=12, d=3, seed=0):
    return 0.3 * np.random.default_rng(seed).standard_normal((n, d))


@pytest.mark.parametrize("make", GUARD_MAPS, ids=GUARD_IDS)
def test_array_likes_give_the_features_of_the_float64_array(make, tmp_path):
    X = _rows()
    ref_map = make().fit(X)
    ref, ref_k = ref_map.transform(X), ref_map.approx_kernel(X)
    readonly = X.copy()
    readonly.setflags(write=False)
    mm = np.memmap(tmp_path / "X.dat", dtype=np.float64, mode="w+", shape=X.shape)
    mm[:] = X
    mm.flush()
    forms = {
        "read-only": readonly,
        "memmap": np.memmap(tmp_path / "X.dat", dtype=np.float64, mode="r", shape=X.shape),
        "fortran": np.asfortranarray(X),
        "strided": np.repeat(X, 2, axis=1)[:, ::2],
        "list": X.tolist(),
        "Float64 frame": pd.DataFrame(X, columns=["a", "b", "c"]).astype("Float64"),
    }
    for name, form in forms.items():
        fm = make().fit(form)
        Z = np.asarray(fm.transform(form))
        assert Z.dtype == np.float64, name
        # the same draw; only the memory layout can change BLAS's summation order, a few
        # ulps of each product of d = 3 terms
        np.testing.assert_allclose(Z, ref, rtol=1e-13, atol=1e-15, err_msg=name)
        np.testing.assert_allclose(fm.approx_kernel(form), ref_k, rtol=1e-13, err_msg=name)


@pytest.mark.parametrize("make", [GUARD_MAPS[0], GUARD_MAPS[2]], ids=GUARD_IDS[::2])
def test_sparse_forms_give_the_features_of_the_dense_rows(make):
    X = _rows()
    X[X < -0.2] = 0.0  # some structural zeros
    dense = make().fit(X)
    ref, ref_e, ref_v = dense.transform(X), dense.exact_kernel(X), dense.variance(X)
    coo = sp.coo_array(X)
    halves = sp.coo_array(  # each entry as two duplicate halves: non-canonical
        (np.r_[coo.data, coo.data] / 2, (np.r_[coo.row, coo.row], np.r_[coo.col, coo.col])),
        shape=X.shape,
    )
    zeros = sp.csr_matrix(X)
    zeros.data[::3] = 0.0  # explicit zeros stored in the matrix
    forms = {
        "csr_array": (sp.csr_array(X), X),
        "csc_matrix": (sp.csc_matrix(X), X),
        "coo duplicates": (halves, X),
        "dok_matrix": (sp.dok_matrix(X), X),
        "explicit zeros": (zeros, zeros.toarray()),
        "int data": (sp.csr_array(np.rint(4 * X).astype(np.int64)), np.rint(4 * X)),
    }
    for name, (S, rows) in forms.items():
        want = make().fit(rows)
        fm = make().fit(S)
        Z = fm.transform(S)
        assert isinstance(Z, np.ndarray) and Z.dtype == np.float64, name
        # sparse and dense products differ in summation order only (d = 3 terms)
        np.testing.assert_allclose(Z, want.transform(rows), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(fm.exact_kernel(S), want.exact_kernel(rows), rtol=1e-13)
        np.testing.assert_allclose(fm.variance(S), want.variance(rows), rtol=1e-12)
    np.testing.assert_allclose(ref_e, make().fit(halves).exact_kernel(halves), rtol=1e-13)
    np.testing.assert_allclose(ref_v, make().fit(halves).variance(halves), rtol=1e-12)
    np.testing.assert_allclose(ref, make().fit(halves).transform(halves), rtol=1e-13, atol=1e-15)


def test_threads_and_n_jobs_do_not_change_a_data_dependent_fit():
    from threadpoolctl import threadpool_limits

    # 20 000 x 64 rows: moments summed in row blocks, more than one chunk of them, so
    # that n_jobs=-1 sums the chunks on threads
    X = _rows(n=20_000, d=64) / 8
    ref = SDERF(n_features=16, kernel="gaussian", random_state=0, n_jobs=1).fit(X)
    with threadpool_limits(1):
        one_blas = SDERF(n_features=16, kernel="gaussian", random_state=0).fit(X)
    all_cpus = SDERF(n_features=16, kernel="gaussian", random_state=0, n_jobs=-1).fit(X)
    want = ref.transform(X[:50])
    for fm in (one_blas, all_cpus):
        # the same chunk sums, added in chunk order; BLAS threads change the order within
        # a product: relative round-off below 20 000 * 2**-53 ~ 1e-12 in the moments, and
        # so in the fitted parameters and the features
        np.testing.assert_allclose(fm.transform(X[:50]), want, rtol=1e-9)


@pytest.mark.parametrize("make", GUARD_MAPS, ids=GUARD_IDS)
def test_clone_and_pickle_of_a_fitted_map(make):
    import pickle

    from sklearn.base import clone

    X = _rows()
    fm = make().fit(X)
    fresh = clone(fm)
    assert not hasattr(fresh, "n_features_in_")  # clone keeps parameters, not the fit
    np.testing.assert_array_equal(fresh.fit(X).transform(X), fm.transform(X))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(fm)).transform(X), fm.transform(X))


DEGENERATE = {
    "duplicate rows": np.vstack([_rows(3), _rows(2)]),
    "constant column": np.c_[_rows(5, 2), np.full(5, 0.3)],
    "single row": _rows(1),
    "d = 1": _rows(5, 1),
    "scales 1e-3 to 1": _rows(5) * np.array([1e-3, 1.0, 0.6]),
}


@pytest.mark.parametrize("make", GUARD_MAPS, ids=GUARD_IDS)
@pytest.mark.parametrize("data", DEGENERATE.values(), ids=DEGENERATE.keys())
def test_mean_estimate_on_degenerate_data_within_its_standard_error(make, data):
    # mean of S independent draws vs the kernel: its standard error is sqrt(variance / S)
    # (variance() is that of one draw); 5 standard errors are exceeded with probability
    # below 1e-6 per entry under the CLT (these features are bounded or light-tailed at
    # |x| / l < 1). Where the variance is 0 (x = y for RFF) the estimate is exact.
    S = 200
    params = make().get_params()
    cls = type(make())
    draws = np.array(
        [cls(**{**params, "random_state": s}).fit(data).approx_kernel(data) for s in range(S)]
    )
    fm = make().fit(data)
    K, V = fm.exact_kernel(data), fm.variance(data)
    assert np.all(np.isfinite(draws)) and np.all(np.isfinite(V)) and np.all(V >= 0)
    se = np.sqrt(V / S)
    np.testing.assert_array_less(np.abs(draws.mean(0) - K), 5 * se + 1e-12 * np.abs(K))
