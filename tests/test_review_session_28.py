"""Review of this change set: a float32 bandwidth of a hybrid (its square underflowed in
float32 although the value was in range), large integers for ``BasisCache`` (rejected
by NumPy's ``isfinite``), ``derf_log_weights(out=...)`` with a buffer it must ignore
(batched parameters, another dtype, memory shared with ``W``), and the overflow message
of attention outputs whose values overflowed."""

import fractions
import warnings

import numpy as np
import pytest
import torch

from kernelkit.distributions import BasisCache
from kernelkit.features import ClusteredHybridRF, GaussianHybridRF, favor

rng = np.random.default_rng(0)
X = 0.5 * rng.standard_normal((30, 3))


@pytest.mark.parametrize(
    "make",
    [
        lambda v: ClusteredHybridRF(4, n_clusters=2, mixture="gaussian", tau=v, random_state=0),
        lambda v: GaussianHybridRF(8, 4, lambda_bandwidth=v, random_state=0),
    ],
)
def test_float32_bandwidth_computes_as_its_float64_value(make):
    v = np.float32(1e-25)
    a, b = make(v).fit(X), make(float(v)).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Ka = a.approx_kernel(X[:3])
    np.testing.assert_array_equal(Ka, b.approx_kernel(X[:3]))
    np.testing.assert_array_equal(a.transform(X[:3]), b.transform(X[:3]))


@pytest.mark.parametrize("value", [2**64, fractions.Fraction(3, 1), np.uint64(2**63)])
def test_basis_cache_takes_any_positive_integer(value):
    assert BasisCache(value).max_entries == int(value)


def _sderf_parts():
    from kernelkit.features import SDERF

    fm = SDERF(n_features=8, random_state=0).fit(rng.normal(size=(50, 3)) / 3)
    return fm._parameters(), fm._projections()


def test_out_of_another_dtype_is_ignored():
    params, W = _sderf_parts()
    ref = favor.derf_log_weights(params, W)
    buf = np.zeros((3, 8), dtype=np.float32)
    got = favor.derf_log_weights(params, W, out=buf)
    assert got[0] is not buf and got[0].dtype == np.float64 and not buf.any()
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a, b)


def test_out_sharing_memory_with_w_is_ignored():
    params, W = _sderf_parts()
    ref = favor.derf_log_weights(params, W.copy())
    W2 = W.copy()
    got = favor.derf_log_weights(params, W2, out=W2.T)
    np.testing.assert_array_equal(W2, W)  # W untouched
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a, b)


def test_out_of_batched_parameters_is_ignored():
    params, W = _sderf_parts()
    batched = favor.DERFParameters(
        np.stack([params.a, params.a]),
        np.stack([params.B_x, params.B_x]),
        None,
        orthogonal=True,
        rotate_projections=True,
    )
    batched.B_y = batched.B_x
    ref = favor.derf_log_weights(batched, W)
    got = favor.derf_log_weights(batched, W, out=np.zeros((3, 8)))
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a, b)


def test_overflowing_values_are_named_in_the_message():
    from kernelkit.attention import linear_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    with pytest.raises(ValueError, match="values"):
        linear_attention(q, k, v.sign() * 3e38, "relu", 16)
