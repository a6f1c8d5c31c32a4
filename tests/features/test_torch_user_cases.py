"""Every map of :mod:`kernelkit.features` with CPU torch tensors, as a deep-learning user
meets them: half-precision tensors in ``fit``, in a mixed call and in a DataFrame, rows
that the torch path handles apart (no rows), gradients (gradcheck, fitted parameters),
``torch.compile``, views and inference mode, persistence and seeding."""

from __future__ import annotations

import numpy as np
import pytest
from favor_helpers import PUBLIC_MAPS, SMALL_CONFIGS

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

MAPS = PUBLIC_MAPS
IDS = [cls.__name__ for cls in MAPS]


def _small(cls, **kw):
    return cls(**{"n_features": 8, **SMALL_CONFIGS.get(cls.__name__, {}), **kw})


def _data(seed=0, n=6, m=5, d=3):
    rng = np.random.default_rng(seed)
    return 0.35 * rng.standard_normal((n, d)), 0.35 * rng.standard_normal((m, d)) + 0.05


def _np(a):
    return a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


# ---------------------------------------------------------------------- bfloat16
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_fit_on_bfloat16_tensors_is_the_fit_on_their_float32_values(cls):
    # transform takes bfloat16 tensors (and returns bfloat16), so fit must too: every
    # bfloat16 value is a float32 value, so the fit on the bfloat16 tensor is the fit on
    # its exact float32 copy, parameter for parameter (the features then agree exactly).
    # NumPy has no bfloat16: the fit's host copy raised torch's "Got unsupported
    # ScalarType BFloat16".
    X, Y = _data()
    Xb, Yb = torch.from_numpy(X).bfloat16(), torch.from_numpy(Y).bfloat16()
    fb = _small(cls, random_state=0).fit(Xb, Y=Yb)
    f32 = _small(cls, random_state=0).fit(Xb.float(), Y=Yb.float())
    X32 = Xb.float()
    torch.testing.assert_close(fb.transform(X32), f32.transform(X32), rtol=0, atol=0)
    out = fb.transform(Xb)
    assert out.dtype == (torch.complex64 if fb.is_complex else torch.bfloat16)


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_a_bfloat16_second_argument_follows_a_numpy_first_one(cls):
    # The mixed-input rule: the second argument takes the first one's backend and dtype.
    # bfloat16 -> float64 is exact, so the result is the float64 result of those values.
    X, Y = _data()
    fm = _small(cls, random_state=0).fit(X, Y=Y)
    Yb = torch.from_numpy(Y).bfloat16()
    out = fm.approx_kernel(X, Yb)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    np.testing.assert_array_equal(out, fm.approx_kernel(X, Yb.double().numpy()))


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_pandas_output_of_a_bfloat16_tensor(cls):
    # A DataFrame holds NumPy columns and NumPy has no bfloat16: the bfloat16 features'
    # values as float32, which holds each of them exactly (as for a tensor that requires
    # grad: the values). scikit-learn's wrapper raised "Got unsupported ScalarType".
    pytest.importorskip("pandas")
    X, _ = _data()
    Xb = torch.from_numpy(X).bfloat16()
    fm = _small(cls, random_state=0).fit(Xb)
    if fm.is_complex:
        pytest.skip("complex features")
    ref = fm.transform(Xb)
    for Xin in (Xb, Xb.clone().requires_grad_(True)):
        out = fm.set_output(transform="pandas").transform(Xin)
        assert list(out.columns) == list(fm.get_feature_names_out())
        assert all(out.dtypes == np.float32)
        np.testing.assert_array_equal(out.to_numpy(), ref.float().numpy())
        out = fm.fit_transform(Xin)
        np.testing.assert_array_equal(out.to_numpy(), ref.float().numpy())
        fm.set_output(transform="default")
