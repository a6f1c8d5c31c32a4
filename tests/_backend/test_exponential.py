"""The attention kernels' in-place exponential (exp2 where ATen's CPU kernel is faster)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit._backend import exponential  # noqa: E402


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize(("dtype", "lowest"), [(torch.float32, -80.0), (torch.float64, -700.0)])
def test_exp_in_place_is_exp_to_rounding(monkeypatch, fast, dtype, lowest):
    # each entry within (2 |t| + 4) eps relative of exp(t) (the argument's and the
    # product's rounding, two ulps of exp2), a few ulps where |t| <= 1 (the terms that
    # dominate a stabilised row), exp(0) = 1 exactly (a row's maximum), in place
    monkeypatch.setattr(exponential, "_cpu_exp2_faster", lambda: fast)
    eps = torch.finfo(dtype).eps
    t = torch.linspace(lowest, 0.0, 100_001, dtype=torch.float64).to(dtype)
    ref = torch.exp(t.double())  # exp of the argument as given
    got = t.clone()
    assert exponential.exp_(got) is got
    rel = (got.double() - ref).abs() / ref
    assert rel.max() <= (2 * abs(lowest) + 4) * eps
    assert rel[t.abs() <= 1.0].max() <= 8 * eps
    assert got[-1] == 1.0


def test_exp_in_place_under_autograd(monkeypatch):
    # recorded by autograd like exp_: the gradient of sum(w * exp(x)) is w * exp(x)
    monkeypatch.setattr(exponential, "_cpu_exp2_faster", lambda: True)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, generator=g, dtype=torch.float64)
    y = exponential.exp_(x * 1.0)  # in place on a fresh tensor
    (y * w).sum().backward()
    torch.testing.assert_close(x.grad, w * torch.exp(x.detach()), rtol=1e-14, atol=0)


def test_exp2_only_where_faster(monkeypatch):
    # exp2 only for CPU float32 / float64 on a SIMD build; bfloat16 keeps exp
    monkeypatch.setattr(exponential, "_cpu_exp2_faster", lambda: True)
    assert exponential.exp2_is_faster(torch.zeros(1))
    assert exponential.exp2_is_faster(torch.zeros(1, dtype=torch.float64))
    assert not exponential.exp2_is_faster(torch.zeros(1, dtype=torch.bfloat16))
    monkeypatch.setattr(exponential, "_cpu_exp2_faster", lambda: False)
    assert not exponential.exp2_is_faster(torch.zeros(1))
