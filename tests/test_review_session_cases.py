"""Review of the day's changes: cases the new code missed.

- SDERF's canonical null-space basis with float32 moments: the same basis as from the
  float64 moments of the same data, on NumPy and torch alike.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kernelkit.features import favor


def _rank_deficient_moments(dtype):
    """Moments of 5 queries and 5 keys in d = 16 (rank 9 < 16: a 7-dimensional null space
    spanned by no coordinate axis), in ``dtype``."""
    rng = np.random.default_rng(0)
    x, y = (0.3 * rng.standard_normal((5, 16)) for _ in range(2))
    return favor.moments(x.astype(dtype), y.astype(dtype))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sderf_null_basis_of_float32_moments_is_the_float64_basis(backend):
    """The canonical basis of the null space orthonormalises fixed vectors ``G`` projected
    on it; ``G`` was computed in the moments' dtype, and in float32 ``sin(...) * 43758``
    keeps no correct digit of its fractional part, so float32 moments got another basis
    than float64 ones (and NumPy's float32 another than torch's, 2e-3 apart)."""
    m64 = _rank_deficient_moments(np.float64)
    m32 = _rank_deficient_moments(np.float32)
    if backend == "torch":
        m64, m32 = (
            favor.Moments(*(torch.from_numpy(np.asarray(a)) for a in vars(m).values()))
            for m in (m64, m32)
        )
    Q64, a64 = favor.fit_sderf(m64)
    Q32, a32 = favor.fit_sderf(m32)
    Q64, Q32 = np.asarray(Q64, dtype=np.float64), np.asarray(Q32, dtype=np.float64)
    # float32 moments are the float64 ones rounded (relative 6e-8); the eigenvectors move
    # by that over the relative eigenvalue gap (here > 1e-2 of the largest) and the QR
    # of the d x d projection adds d eps: about 1e-5 at most; 1e-4 leaves a margin and
    # still fails a basis of another G (1e-1 apart)
    np.testing.assert_allclose(Q32, Q64, rtol=0, atol=1e-4)
    np.testing.assert_allclose(np.asarray(a32, dtype=np.float64), a64, rtol=0, atol=1e-5)
