"""The feature maps with the array-likes of a real project: Dask arrays of SciPy sparse
chunks (``dask.array.from_array(S, asarray=False)``) in the methods that compute their
Dask arguments.

Expected values are exact references: the same seed gives the same draw, so a method
called on a Dask array is compared with the same method on the computed sparse matrix,
with which it shares every operation (equal to the last bit).
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

from kernelkit.features import SDERF, RandomFourierFeatures, RandomMaclaurin, TensorSketch, TrigRF

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
