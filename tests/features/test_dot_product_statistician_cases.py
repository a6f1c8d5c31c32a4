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
