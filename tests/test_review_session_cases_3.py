"""Review of the day's changes, third session: cases the merged changes missed.

- The variances widen a half-precision tensor to float32 before the map's preparation;
  SphericalRandomFeatures(normalize=False) then checked the unit rows of a float16 /
  bfloat16 input with float32's tolerance, so a tensor that transform and approx_kernel
  accept (rows unit to the half dtype's precision) was rejected by the variances.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.features import SphericalRandomFeatures


def _unit_rows(n: int, d: int, seed: int = 0) -> np.ndarray:
    X = np.random.default_rng(seed).standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


@pytest.mark.parametrize("method", ["variance", "complex_variance", "log_relative_variance"])
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_srf_variances_accept_half_unit_rows_as_transform_does(method, dtype_name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype_name)
    X, Y = _unit_rows(20, 5, seed=0), _unit_rows(15, 5, seed=1)
    srf = SphericalRandomFeatures(normalize=False, random_state=0).fit(X)
    TX, TY = torch.tensor(X).to(dtype), torch.tensor(Y).to(dtype)  # unit to the dtype only
    srf.transform(TX)  # accepted: the tolerance is the dtype's eps
    out = getattr(srf, method)(TX, TY)
    assert out.dtype == dtype
    ref = getattr(srf, method)(X, Y)  # float64, the exact unit rows
    # Tolerance: each coordinate of the input is rounded by eps / 2 relative, which moves
    # |x - y|^2 (unit rows) by at most ~2 eps |x| |y| = 2 eps, relative to |x - y|^2 >= 0.5
    # on the pairs checked at most 4 eps; the variance is a smooth function of it with a
    # derivative of order 1 in relative terms, plus one rounding of the output (eps / 2):
    # 8 eps in relative terms (absolute for the logarithm).
    eps = torch.finfo(dtype).eps
    far = ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1) >= 0.5
    got = out.to(torch.float64).numpy()
    if method == "log_relative_variance":
        np.testing.assert_allclose(got[far], ref[far], rtol=0, atol=8 * eps)
    else:
        np.testing.assert_allclose(got[far], ref[far], rtol=8 * eps, atol=0)


def test_srf_variances_still_reject_half_rows_off_the_sphere():
    torch = pytest.importorskip("torch")
    X = 1.01 * _unit_rows(20, 5)  # 1 % off, many times bfloat16's eps (2^-7 ~ 0.8 %)
    srf = SphericalRandomFeatures(normalize=False, random_state=0).fit(_unit_rows(20, 5))
    with pytest.raises(ValueError, match="unit-norm rows of Y"):
        srf.variance(torch.tensor(_unit_rows(4, 5)).half(), torch.tensor(1.05 * X).half())
    with pytest.raises(ValueError, match="unit-norm rows of X"):
        srf.log_relative_variance(torch.tensor(1.05 * X).to(torch.bfloat16))
