"""Tryout of the overflow warnings of the positive feature maps (NumPy and torch CPU
inputs): a row whose squared norm overflows must not hide the overflow of other rows."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kernelkit.features import GERF, SDERF

torch = pytest.importorskip("torch")


def _data():
    # float32 data scaled by 12: the fitted maps' features of some rows overflow float32
    # (log features past 88.7); row 3 scaled by 1e19 more has a squared norm past
    # float32's max (its row term is -inf, so its own features are 0, not inf)
    X = (np.random.default_rng(0).normal(size=(40, 6)) * 12).astype(np.float32)
    Xh = X.copy()
    Xh[3] *= 1e19
    return X, Xh


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("cls", [GERF, SDERF])
def test_a_row_whose_squared_norm_overflows_does_not_hide_overflowing_features(cls, backend):
    # the per-row bound |x| max|w| + max c + row is inf + (-inf) = NaN for the huge row;
    # the bound's maximum over the rows was then NaN, "NaN > limit" is False, so the full
    # check was skipped and the overflow warning of the other rows lost (NumPy also warned
    # "invalid value encountered in add" from inside kernelkit)
    X, Xh = _data()
    conv = torch.from_numpy if backend == "torch" else np.asarray
    est = cls(n_features=32, random_state=0).fit(conv(X))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = np.asarray(est.transform(conv(Xh)))
    assert np.isinf(out).any() and not np.isnan(out).any()
    assert [str(x.message)[:26] for x in w] == ["Some features of X overflo"]
    assert w[0].category is RuntimeWarning and w[0].filename == __file__


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_transform_of_inputs_that_require_grad_warns_nothing(dtype):
    # the overflow bound was read with float() from a tensor that required grad: torch's
    # UserWarning "Converting a tensor with requires_grad=True to a scalar" on every call
    # (and a graph recorded for the bound); the features need no warning here. torch
    # warns that once per process unless set_warn_always
    X = torch.randn(30, 6, dtype=dtype, requires_grad=True)
    est = GERF(n_features=16, random_state=0).fit(X.detach())
    always = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = est.transform(X)
            out.sum().backward()
    finally:
        torch.set_warn_always(always)
    assert [str(x.message) for x in w] == []
    assert X.grad is not None and torch.isfinite(X.grad).all()
