"""Fits for moments the caller passes are reused while projection and moments are equal
(the per-head eigendecomposition is the fixed cost of FAVOR# at short L)."""

from __future__ import annotations

from collections import OrderedDict

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    Moments,
    _maps,
    attention_moments,
    functional,
    linear_attention,
)


def _data(seed=0, L=40):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, L, 8, generator=g, dtype=torch.float64) for _ in range(3))
    calib = attention_moments(*(torch.randn(2, 3, 32, 8, generator=g) for _ in range(2)))
    return q, k, v, calib


@pytest.fixture
def builds(monkeypatch):
    # count the fits, starting from an empty cache
    monkeypatch.setattr(_maps, "_BUILT", OrderedDict())
    calls = []
    real = _maps.build_log_map

    def counted(*args):
        calls.append(args[0])
        return real(*args)

    monkeypatch.setattr(_maps, "build_log_map", counted)
    monkeypatch.setattr(functional, "build_log_map", counted)
    return calls


def _fresh(monkeypatch, *args, **kw):
    # the same call with nothing to reuse
    monkeypatch.setattr(_maps, "_BUILT", OrderedDict())
    return linear_attention(*args, **kw)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ["sderf", "saderf", "gerf", "aderf"])
def test_equal_moments_are_fitted_once_and_give_what_a_new_fit_gives(
    builds, monkeypatch, name, causal
):
    q, k, v, calib = _data()
    kw = dict(feature_map=name, n_features=16, is_causal=causal, random_state=0)
    first = linear_attention(q, k, v, moments=calib, **kw)
    # new tensors with equal values (as a module's .double() of its buffers gives)
    same = Moments(
        *(t.clone() for t in (calib.mean_x, calib.second_x, calib.mean_y, calib.second_y))
    )
    again = linear_attention(q, k, v, moments=same, **kw)
    assert builds == [name]  # one fit
    assert torch.equal(again, first)
    assert torch.equal(again, _fresh(monkeypatch, q, k, v, moments=same, **kw))


def test_changed_moments_or_projection_are_fitted_again(builds, monkeypatch):
    q, k, v, calib = _data()
    kw = dict(feature_map="sderf", n_features=16, is_causal=True)
    linear_attention(q, k, v, moments=calib, random_state=0, **kw)
    calib.second_y.mul_(1.5)  # in place: the values the cache holds are its own copies
    out = linear_attention(q, k, v, moments=calib, random_state=0, **kw)
    assert len(builds) == 2
    assert torch.equal(out, _fresh(monkeypatch, q, k, v, moments=calib, random_state=0, **kw))
    n = len(builds)
    other = linear_attention(q, k, v, moments=calib, random_state=1, **kw)  # new projection
    assert len(builds) == n + 1
    assert not torch.allclose(other, out)


def test_moments_of_the_call_itself_are_fitted_every_time(builds):
    # bidirectional without moments: fitted from q and k on every call, nothing kept
    q, k, v, _ = _data()
    for _ in range(2):
        linear_attention(q, k, v, "sderf", 16, random_state=0)
    assert builds == ["sderf", "sderf"]
    assert _maps._BUILT == {}


def test_a_fit_under_inference_mode_is_not_kept_for_autograd(builds):
    # a build made under inference_mode holds inference tensors: not kept, so a later
    # training call builds its own and its backward works
    q, k, v, calib = _data()
    kw = dict(feature_map="sderf", n_features=16, is_causal=True, random_state=0, moments=calib)
    with torch.inference_mode():
        ref = linear_attention(q, k, v, **kw)
    assert _maps._BUILT == {}
    qg = q.clone().requires_grad_(True)
    out = linear_attention(qg, k, v, **kw)
    out.sum().backward()
    assert qg.grad is not None and torch.isfinite(qg.grad).all()
    torch.testing.assert_close(out.detach(), ref, rtol=1e-12, atol=0)
    with torch.inference_mode():  # a kept (ordinary) build serves inference_mode calls
        linear_attention(q, k, v, **kw)
    assert len(builds) == 2


def test_a_module_in_eval_mode_fits_its_running_statistics_once(builds):
    torch.manual_seed(0)
    attn = FavorAttention(16, 2, feature_map="sderf", n_features=16)
    x = torch.randn(3, 20, 16)
    attn.train()
    attn(x, x, x, is_causal=True)  # running statistics
    attn.eval()
    builds.clear()
    with torch.no_grad():
        a, _ = attn(x, x, x, is_causal=True)
        b, _ = attn(x, x, x, is_causal=True)
    assert builds == ["sderf"]
    assert torch.equal(a, b)


def test_layers_with_their_own_statistics_each_keep_their_fit(builds):
    # a model's layers alternate between moments: each keeps its own build (up to
    # _BUILT_MAX), and the oldest goes first beyond that
    q, k, v, _ = _data()
    layers = [_data(seed)[3] for seed in range(1, 4)]
    kw = dict(feature_map="sderf", n_features=16, is_causal=True, random_state=0)
    outs = [[linear_attention(q, k, v, moments=m, **kw) for m in layers] for _ in range(3)]
    assert len(builds) == 3
    assert all(torch.equal(a, b) for rnd in outs[1:] for a, b in zip(rnd, outs[0], strict=True))
    for seed in range(4, 4 + _maps._BUILT_MAX):  # push them out
        linear_attention(q, k, v, moments=_data(seed)[3], **kw)
    assert len(_maps._BUILT) == _maps._BUILT_MAX
    linear_attention(q, k, v, moments=layers[0], **kw)
    assert len(builds) == 3 + _maps._BUILT_MAX + 1
