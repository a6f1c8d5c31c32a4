"""The dot-product maps read as a statistician would: Monte Carlo checks of the mean and
of ``variance`` / ``complex_variance`` on hard inputs (one-hot and sparse rows, zero rows,
rows of very different norms, ``d = 1``, padded TensorSRHT, ``x = -y``, ``coef0`` 0 and
large, ``gamma != 1``), and what Optimized Maclaurin's fitted allocation depends on.

Tolerances of the Monte Carlo checks come from the spread of the draws themselves: a
mean is compared with a z-score ``|mean - E| / (sd / sqrt(S))`` and a second moment with
the standard error of the squared deviations; the bound 5 leaves a false-alarm rate of
about 1e-6 per entry under the normal approximation (at most a few dozen entries per
test). Entries whose estimate is exact (zero spread up to rounding) are compared with the
exact value directly.
"""

import numpy as np

from kernelkit.features import (
    OptimizedMaclaurin,
)

Z_MAX = 5.0


# ====================================================================== Optimized Maclaurin
def _two_scale_rows(n=300, d=4, seed=0):
    rng = np.random.default_rng(seed)
    half = n // 2
    return np.concatenate(
        [0.2 * rng.standard_normal((half, d)), 1.5 * rng.standard_normal((n - half, d))]
    )


def test_optimized_maclaurin_subsample_does_not_depend_on_row_order():
    """With more rows than ``n_subsample`` the objective reads a random subsample; the
    contract says the allocation is fitted on the data set ``X``: a permutation of its rows
    must give the same allocation (and, with the same seed, the same features). Before the
    fix the subsample was drawn by position, and 10 orders of these rows gave 6 different
    allocations (truncation degrees 5 to 7)."""
    X = _two_scale_rows()
    ref = OptimizedMaclaurin(24, kernel="softmax", n_subsample=40, random_state=0).fit(X)
    for k in range(6):
        perm = np.random.default_rng(k).permutation(len(X))
        fm = OptimizedMaclaurin(24, kernel="softmax", n_subsample=40, random_state=0).fit(X[perm])
        assert fm.degree_ == ref.degree_
        np.testing.assert_array_equal(fm.n_features_per_degree_, ref.n_features_per_degree_)
        # same allocation and same sketch stream: the same map (rounding only)
        np.testing.assert_allclose(fm.transform(X[:5]), ref.transform(X[:5]), rtol=1e-12)


# ====================================================================== TensorSketch cost
def test_tensor_sketch_memory_does_not_grow_with_d_times_D():
    """The guide gives TensorSketch a cost of ``O(p (nnz + D log D))`` per point: the count
    sketches have one non-zero per input coordinate and degree. They used to be stored as
    a dense ``(d~, p D)`` matrix (here 20001 x 512 float64 = 82 MB; 10 GB for a
    bag-of-words ``d = 1e5``, ``D = 4096``, ``p = 3``) and applied by a dense product. Fit
    and transform of sparse rows now allocate ``O(p d + n p D)``: the bound 8 MB is 10x
    the ``O(p d)`` hash tables and output and 1/10 of the dense matrix."""
    import tracemalloc

    import scipy.sparse as sp

    from kernelkit.features import TensorSketch

    d, D = 20_000, 256
    X = sp.random(50, d, density=1e-3, format="csr", random_state=0)
    tracemalloc.start()
    try:
        fm = TensorSketch(D, degree=2, coef0=1.0, random_state=0).fit(X)
        F = fm.transform(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert F.shape == (50, D)
    assert peak < 8e6, peak
    # the features are still the count sketch of x~ (x) x~: Gram matrix vs its definition
    Xd = np.hstack([X.toarray(), np.ones((50, 1))])
    rows = np.arange(d + 1)
    C = [sp.csr_matrix((fm.signs_[i], (rows, fm.hashes_[i])), shape=(d + 1, D)) for i in (0, 1)]
    U = [np.asarray(Xd @ Ci) for Ci in C]
    ref = np.fft.irfft(np.fft.rfft(U[0], axis=1) * np.fft.rfft(U[1], axis=1), n=D, axis=1)
    np.testing.assert_allclose(F, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


def test_optimized_maclaurin_advances_a_generator_random_state():
    """The contract: a ``Generator`` passed as ``random_state`` is a stream, and "the object
    passed advances" with every fit, as with every other map. Optimized Maclaurin derived
    its streams with ``Generator.spawn``, which leaves the generator's own stream where it
    was: the next map fitted with it drew as if this fit had not happened."""
    X = _two_scale_rows(60, 3)
    for cls_kw in (dict(kernel="softmax"), dict(kernel="polynomial", degree=3)):
        g = np.random.default_rng(5)
        OptimizedMaclaurin(16, random_state=g, **cls_kw).fit(X)
        assert g.random() != np.random.default_rng(5).random()
    # and it stays reproducible: an int seed, or equal generators, give equal maps
    a = OptimizedMaclaurin(16, kernel="softmax", random_state=np.random.default_rng(3)).fit(X)
    b = OptimizedMaclaurin(16, kernel="softmax", random_state=np.random.default_rng(3)).fit(X)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
