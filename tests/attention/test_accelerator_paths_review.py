"""Review cases for the causal kernel's accelerator settings and the host fits: the fits
of the matrix maps on the host where the moments live on an accelerator, the chunk
states chained by prefix sums (forced on the CPU) and the first-visible-key rule, each
against what the CPU computes or FAVOR# eq. 4 computed densely."""

from __future__ import annotations

from dataclasses import fields

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import _maps, attention_moments, draw_features  # noqa: E402
from kernelkit.features import favor  # noqa: E402


def _on_fake_accelerator(monkeypatch, mom):
    """``mom`` with its tensors on the ``meta`` device (not the CPU, so the fits take the
    accelerator's route), whose host copies (``.cpu()``) are the real moments: the fit on
    the host runs on real numbers, and the parameters go back to ``meta``."""
    pairs = [(getattr(mom, f.name).to("meta"), getattr(mom, f.name)) for f in fields(mom)]
    real_cpu = torch.Tensor.cpu

    def cpu(self, *args, **kw):
        for dev, host in pairs:
            if dev is self:
                return host
        return real_cpu(self, *args, **kw)

    monkeypatch.setattr(torch.Tensor, "cpu", cpu)
    return favor.Moments(*(dev for dev, _ in pairs))


def test_host_fit_keeps_one_rotation_for_both_sides_of_sderf(monkeypatch):
    """SDERF's fit is one rotation for both sides (``B_x is B_y``: ``symmetric``), and
    its log map then has one weight for queries and keys (``W_q is W_k``, which a
    decoding state uses to compute both sides' features in one product). The fit on the
    host must bring the parameters back as they were fitted: moving ``B_x`` and ``B_y``
    one by one made two tensors, parameters that look edited (another branch of
    ``derf_log_weights``, two weights, two feature products per decoding step)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 24, 4, generator=g, dtype=torch.float64)
    k = torch.randn(2, 24, 4, generator=g, dtype=torch.float64) * 0.7
    mom = attention_moments(q, k)
    on_cpu = favor.fit_derf("sderf", mom)
    assert on_cpu.symmetric  # what the fit gives, and what the CPU keeps
    dev = _on_fake_accelerator(monkeypatch, mom)
    params = _maps._fit_on_host("sderf", dev)
    assert params.B_x.is_meta and params.a.is_meta  # the host fit ran, moved back
    assert params.symmetric and params.orthogonal and params.rotate_projections
    W = torch.as_tensor(draw_features("sderf", 8, 4, 0)["W"]).to("meta")
    fmap = _maps.build_log_map("sderf", W, dev, 4)
    assert fmap.W_q is fmap.W_k
    # ADERF's two sides stay two tensors
    aderf = _maps._fit_on_host("aderf", dev)
    assert aderf.B_x.is_meta and aderf.B_y.is_meta and not aderf.symmetric
