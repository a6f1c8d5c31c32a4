"""New-user cases of FavorAttention and the decoding step: running statistics that
arrive other than through load_state_dict, mixed input dtypes under autocast, the
constructor's dtype, and feature parameters as autograd constants in decoding."""

import copy

import pytest
import torch
from torch.func import functional_call

from kernelkit.attention import (
    FavorAttention,
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)

E, H = 16, 2


def _trained(**kw):
    torch.manual_seed(0)
    model = FavorAttention(
        E, H, n_features=32, feature_map="sderf", random_state=0, redraw_interval=None, **kw
    )
    fresh = copy.deepcopy(model)
    for _ in range(3):  # causal training updates the running statistics
        x = torch.randn(2, 6, E, dtype=model.in_proj_weight.dtype)
        model(x, x, x, is_causal=True)
    return model.eval(), fresh.eval()


def test_running_statistics_copied_in_place_are_used():
    model, shadow = _trained()
    with torch.no_grad():  # an EMA / swa_utils style in-place copy, no load_state_dict
        for s, m in zip(shadow.buffers(), model.buffers(), strict=True):
            s.copy_(m)
        for s, m in zip(shadow.parameters(), model.parameters(), strict=True):
            s.copy_(m)
        x = torch.randn(2, 6, E)
        ref = model(x, x, x, is_causal=True)[0]
        torch.testing.assert_close(shadow(x, x, x, is_causal=True)[0], ref, rtol=0, atol=0)


def test_running_statistics_through_functional_call_are_used():
    model, fresh = _trained()
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    with torch.no_grad():
        x = torch.randn(2, 6, E)
        ref = model(x, x, x, is_causal=True)[0]
        out = functional_call(fresh, state, (x, x, x), {"is_causal": True})[0]
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_constructor_dtype_float64_gives_float64_running_statistics():
    a = FavorAttention(E, H, n_features=32, random_state=0, dtype=torch.float64)
    b = FavorAttention(E, H, n_features=32, random_state=0).double()
    for name in ("running_mean_q", "running_second_q", "running_mean_k", "running_second_k"):
        assert getattr(a, name).dtype == getattr(b, name).dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.int64, torch.complex64, "float32", int])
def test_constructor_rejects_a_non_floating_dtype_by_name(dtype):
    with pytest.raises(TypeError, match="dtype"):
        FavorAttention(E, H, n_features=32, dtype=dtype)


def test_constructor_takes_python_float_as_float64():
    m = FavorAttention(E, H, n_features=8, dtype=float)
    assert m.in_proj_weight.dtype == m.running_second_q.dtype == torch.float64


def test_float64_input_under_bfloat16_autocast_is_named():
    m = FavorAttention(E, H, n_features=8, random_state=0)
    q, kv = torch.randn(2, 5, E, dtype=torch.float64), torch.randn(2, 5, E)
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(TypeError, match="query"):
        m(q, kv, kv)


def test_poisoned_running_statistics_are_named():
    m, _ = _trained()
    with torch.no_grad():
        m.running_second_q[0, 0, 0] = float("nan")
    x = torch.randn(2, 6, E)
    with pytest.raises(ValueError, match="running_second_q"):
        m(x, x, x, is_causal=True)


def test_a_batch_whose_statistics_overflow_leaves_them_as_they_were():
    m, _ = _trained()
    m.train()
    before = [b.clone() for b in (m.running_mean_q, m.running_second_q, m.num_batches_tracked)]
    x = torch.full((2, 6, E), 1e19)
    with pytest.raises(ValueError):
        m(x, x, x, is_causal=True)
    after = (m.running_mean_q, m.running_second_q, m.num_batches_tracked)
    for a, b in zip(before, after, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_module_accepts_mixed_dtypes_under_autocast():
    torch.manual_seed(0)
    q = torch.randn(2, 5, E).bfloat16()
    mem = torch.randn(2, 7, E)
    m = FavorAttention(E, H, n_features=32, random_state=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(q, mem, mem, need_weights=False)[0]
        ref = m(q, mem.bfloat16(), mem.bfloat16(), need_weights=False)[0]
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref.float(), rtol=0, atol=0)
    with pytest.raises(TypeError, match="share one dtype"):  # outside autocast: an error
        m(q, mem, mem)


def test_module_step_accepts_mixed_dtypes_under_autocast():
    torch.manual_seed(0)
    m = FavorAttention(E, H, n_features=32, random_state=0)
    q, k = torch.randn(2, E).bfloat16(), torch.randn(2, E)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = m.step(q, k, k, m.init_state(2))
        ref, _ = m.step(q, k.bfloat16(), k.bfloat16(), m.init_state(2))
    torch.testing.assert_close(out.float(), ref.float(), rtol=0, atol=0)


def test_functional_step_accepts_mixed_dtypes_under_autocast():
    torch.manual_seed(0)
    q = torch.randn(1, 2, 4, 8).bfloat16()
    k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        full = linear_attention(q, k, v, "positive", 16, is_causal=True, random_state=0)
        st = init_decoding_state((1, 2), 8, "positive", 16, random_state=0)
        out, _ = linear_attention_step(q, k, v, st)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), full.float(), rtol=2e-2, atol=2e-2)
    st = init_decoding_state((1, 2), 8, "positive", 16, random_state=0)
    with pytest.raises(TypeError, match="share one dtype"):
        linear_attention_step(q, k, v, st)


def _isotropic_moments(d, dt):
    mom = attention_moments(torch.randn(1, 1, 6, d, dtype=dt), torch.randn(1, 1, 6, d, dtype=dt))
    eye = torch.eye(d, dtype=dt)[None]
    return type(mom)(
        torch.zeros(1, d, dtype=dt, requires_grad=True),
        eye.clone().requires_grad_(),
        torch.zeros(1, d, dtype=dt, requires_grad=True),
        (2 * eye).requires_grad_(),
    )


def test_decoding_moments_are_autograd_constants():
    torch.manual_seed(0)
    d, dt = 4, torch.float64
    q, k, v = (torch.randn(1, 1, 6, d, dtype=dt) for _ in range(3))
    mom = _isotropic_moments(d, dt)
    full = linear_attention(q, k, v, "sderf", 8, is_causal=True, moments=mom, random_state=0)
    st = init_decoding_state((1, 1), d, "sderf", 8, moments=mom, random_state=0, dtype=dt)
    out, _ = linear_attention_step(q, k, v, st)
    assert not out.requires_grad and not full.requires_grad
    torch.testing.assert_close(out, full)
    # in-place decoding with grad mode on and inputs that need no grad
    st = init_decoding_state((1, 1), d, "sderf", 8, moments=mom, random_state=0, dtype=dt)
    for t in range(3):
        _, st = linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], st, inplace=True)


def test_cloned_layers_get_their_own_generators_by_redraw_features():
    from torch import nn

    layer = nn.TransformerEncoderLayer(E, H, batch_first=True)
    layer.self_attn = FavorAttention(E, H, n_features=8, random_state=0, redraw_interval=1)
    enc = nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False)
    attn = [lay.self_attn for lay in enc.layers]
    assert all(torch.equal(a.projection, attn[0].projection) for a in attn)  # clones
    for i, a in enumerate(attn):
        a.redraw_features(random_state=i)
    x = torch.randn(2, 5, E)
    for _ in range(2):  # training-mode redraws follow each layer's own generator
        enc(x)
        P = [a.projection.clone() for a in attn]
        assert not torch.equal(P[0], P[1]) and not torch.equal(P[1], P[2])
    # the same seed gives the same draws
    again = FavorAttention(E, H, n_features=8, random_state=5)
    again.redraw_features(random_state=1)
    ref = FavorAttention(E, H, n_features=8, random_state=7)
    ref.redraw_features(random_state=1)
    torch.testing.assert_close(again.projection, ref.projection, rtol=0, atol=0)


@pytest.mark.parametrize("fm", ["positive", "sderf"])
def test_module_names_overflow_of_finite_inputs(fm):
    torch.manual_seed(0)
    m = FavorAttention(E, H, n_features=32, feature_map=fm, random_state=0)
    x = 1e30 * torch.randn(2, 5, E)  # finite, but the features overflow float32
    for mode in (m.train, m.eval):
        mode()
        with pytest.raises(ValueError, match="overflow"):
            m(x, x, x)
        with pytest.raises(ValueError, match="overflow"):  # keys not silently dropped
            m(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match="overflow"):
        m.step(x[:, 0], x[:, 0], x[:, 0], m.init_state(2))


def test_decoding_step_names_overflow_of_finite_inputs():
    q = torch.zeros(1, 1, 4, 2)
    v = torch.full((1, 1, 4, 2), 3e38)  # finite float32 values whose sums overflow
    st = init_decoding_state((1, 1), 2, "positive", 8, random_state=0)
    with pytest.raises(ValueError, match="overflow"):
        for t in range(4):
            _, st = linear_attention_step(q[..., t, :], q[..., t, :], v[..., t, :], st)
    st = init_decoding_state((1, 1), 2, "positive", 8, random_state=0)
    with pytest.raises(ValueError, match="overflow"):
        linear_attention_step(q, q, v, st)
