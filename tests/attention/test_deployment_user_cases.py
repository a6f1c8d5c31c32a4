"""Serving causal linear attention, as an inference engineer would: a prompt prefilled
with the causal call and decoded token by token for every causal map (batches of
different prompt lengths, grouped-query attention, ``d_v != d``, one token of one head),
and the state handling around it (copies of a state with autograd history, truncated
backpropagation, ``state.to(dtype)`` as ``Tensor.to``, a state of another module,
``torch.compile`` of the module's step). The reference is always the causal
full-sequence pass."""

from __future__ import annotations

import copy
import io

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import qkv  # noqa: E402
from attention_helpers import rel_error as _rel  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FITTED_MAPS,
    FavorAttention,
    Moments,
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)

CAUSAL_MAPS = ("positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf", "relu", "elu")
# float64 round-off: every output is a ratio of sums of at most 80 stabilised terms of
# size <= 1 (eps 2.2e-16 each, relative), computed in two orders (blocks vs tokens);
# 1e-12 leaves a margin of about 50 over the 80 eps of the worst case
TOL64 = 1e-12


def _calibration_moments(H, d, Hkv=None, seed=1):
    """Per-head moments (H, ...) of other data, as a deployment takes them from a
    calibration set (``enable_gqa``: each query head gets its key head's)."""
    q, k, _ = qkv((4, H, 24, d), (4, Hkv or H, 24, d), scale=0.5, seed=seed)
    m = attention_moments(q, k, enable_gqa=Hkv is not None)
    return Moments(*(t.mean(0) for t in (m.mean_x, m.second_x, m.mean_y, m.second_y)))


def _lm_module(feature_map="sderf", E=16, H=2, **kw):
    """A FavorAttention trained for two steps (running statistics for the fitted maps),
    in eval mode, its parameters still requiring grad as in a served model."""
    m = FavorAttention(E, H, feature_map=feature_map, n_features=16, random_state=0, **kw)
    x = torch.randn(3, 10, E, generator=torch.Generator().manual_seed(5))
    for _ in range(2):
        m(x, x, x, is_causal=True)[0].square().mean().backward()
    return m.eval()


# ------------------------------------------------------------------ what held
@pytest.mark.parametrize("feature_map", CAUSAL_MAPS)
@pytest.mark.parametrize(
    ("B", "H", "Hkv", "L", "P", "d", "e"),
    [
        (2, 4, None, 80, 70, 4, 3),  # a prefill of more than one chunk (the kernel's path)
        (2, 4, 2, 12, 9, 4, 5),  # GQA, d_v > d
        (1, 1, None, 1, 0, 3, 3),  # one token of one head, no prompt
    ],
)
def test_prefill_then_decode_equals_the_causal_pass(feature_map, B, H, Hkv, L, P, d, e):
    """A prompt of ``P`` tokens stepped as one block, the rest token by token: equal to
    ``linear_attention(..., is_causal=True)`` on the whole sequence to round-off."""
    q, k, v = qkv((B, H, L, d), (B, Hkv or H, L, d), e=e, scale=0.5)
    mom = _calibration_moments(H, d, Hkv) if feature_map in FITTED_MAPS else None
    gqa = {"enable_gqa": True} if Hkv else {}
    kw = {"random_state": 0, "moments": mom}
    ref = linear_attention(q, k, v, feature_map, 16, is_causal=True, **kw, **gqa)
    st = init_decoding_state(
        (B, H), d, feature_map, 16, e=e, dtype=q.dtype, num_kv_heads=Hkv, **kw, **gqa
    )
    outs = []
    if P:
        o, st = linear_attention_step(q[..., :P, :], k[..., :P, :], v[..., :P, :], st, **gqa)
        outs.append(o)
    for t in range(P, L):
        o, st = linear_attention_step(q[..., t, :], k[..., t, :], v[..., t, :], st, **gqa)
        outs.append(o[..., None, :])
    assert _rel(torch.cat(outs, -2), ref) < TOL64 and st.t == L


@pytest.mark.parametrize("feature_map", ["positive", "sderf", "elu"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_prompts_of_different_lengths_decode_as_alone(feature_map, side):
    """Two prompts (5 and 70 tokens) padded to one batch and prefilled with
    ``key_padding_mask``, then 3 tokens each: every sequence equals its own causal pass."""
    H, d, e, lens, extra = 2, 4, 3, (5, 70), 3
    mom = _calibration_moments(H, d) if feature_map in FITTED_MAPS else None
    seqs = [qkv((1, H, n + extra, d), e=e, scale=0.5, seed=s) for s, n in enumerate(lens)]
    Lp = max(lens)
    Q, K = (torch.zeros(2, H, Lp, d, dtype=torch.float64) for _ in range(2))
    Vp = torch.zeros(2, H, Lp, e, dtype=torch.float64)
    pad = torch.ones(2, 1, Lp, dtype=torch.bool)
    for b, (n, (q, k, v)) in enumerate(zip(lens, seqs, strict=True)):
        sl = slice(Lp - n, Lp) if side == "left" else slice(0, n)
        Q[b, :, sl], K[b, :, sl], Vp[b, :, sl], pad[b, :, sl] = (
            q[0, :, :n],
            k[0, :, :n],
            v[0, :, :n],
            False,
        )
    st = init_decoding_state(
        (2, H), d, feature_map, 16, e=e, random_state=0, moments=mom, dtype=Q.dtype
    )
    prompt_out, st = linear_attention_step(Q, K, Vp, st, key_padding_mask=pad)
    steps = []
    for i in range(extra):
        q_t, k_t, v_t = (
            torch.cat([s[j][:, :, n + i] for n, s in zip(lens, seqs, strict=True)])
            for j in range(3)
        )
        o, st = linear_attention_step(q_t, k_t, v_t, st)
        steps.append(o)
    steps = torch.stack(steps, -2)
    for b, (n, (q, k, v)) in enumerate(zip(lens, seqs, strict=True)):
        ref = linear_attention(
            q, k, v, feature_map, 16, is_causal=True, random_state=0, moments=mom
        )[0]
        sl = slice(Lp - n, Lp) if side == "left" else slice(0, n)
        assert _rel(prompt_out[b][:, sl], ref[:, :n]) < TOL64
        assert _rel(steps[b], ref[:, n:]) < TOL64


def test_module_state_dict_reloads_projections_and_outputs_exactly():
    """A served module saved with ``torch.save(state_dict)`` (weights_only load) into a
    module built with another seed: the same projection and statistics buffers, and
    identical forward (both modes) and step outputs."""
    m = _lm_module("sderf")
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = FavorAttention(16, 2, feature_map="sderf", n_features=16, random_state=123)
    m2.load_state_dict(torch.load(buf, weights_only=True))
    m2.eval()
    assert torch.equal(m2.projection, m.projection)
    assert torch.equal(m2.running_second_k, m.running_second_k)
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for causal in (False, True):
            assert torch.equal(m(x, x, x, is_causal=causal)[0], m2(x, x, x, is_causal=causal)[0])
        a, _ = m.step(x, x, x, m.init_state(2))
        b, _ = m2.step(x, x, x, m2.init_state(2))
    assert torch.equal(a, b)


# ------------------------------------------------------------------ defects found
def test_state_to_takes_a_positional_dtype_as_tensor_to():
    """``state.to(torch.float64)``, as ``Tensor.to(dtype)`` and ``Module.to(dtype)``
    (after ``module.to(torch.float64)``), converts the state; before, it was passed to
    ``torch.device`` and raised its TypeError."""
    q, k, v = qkv((2, 2, 6, 4), scale=0.5, dtype=torch.float32)
    st = init_decoding_state((2, 2), 4, "positive", 16, e=3, random_state=0)
    _, st = linear_attention_step(q[..., :5, :], k[..., :5, :], v[..., :5, :], st)
    s64 = st.to(torch.float64)
    assert s64.dtype == torch.float64 and s64.params.fmap.W_q.dtype == torch.float64
    assert torch.equal(s64.kvz, st.to(dtype=torch.float64).kvz)
    a, _ = linear_attention_step(*(t[..., 5, :].double() for t in (q, k, v)), s64)
    b, _ = linear_attention_step(
        *(t[..., 5, :].double() for t in (q, k, v)), st.to("cpu", torch.float64)
    )
    assert torch.equal(a, b)
    with pytest.raises(TypeError, match="two dtypes"):
        st.to(torch.float64, torch.float32)
    with pytest.raises(TypeError, match="device must be"):
        st.to(object())


def _outcome(f):
    """What ``f()`` gives: a device, or the type of its exception."""
    try:
        return f().device
    except Exception as exc:  # compared by type, not swallowed
        return type(exc)


def test_state_to_takes_a_numpy_int_device_index_as_an_int():
    """A device index from NumPy (``np.int64(0)``, e.g. an entry of a rank array) is an
    index to ``torch.device`` and ``Tensor.to``; the device check of ``state.to`` took
    only a Python ``int`` and raised a ``TypeError``. Both indices now give the same
    outcome: the device where one exists, torch's error on a machine without it."""
    np = pytest.importorskip("numpy")
    st = init_decoding_state((1, 2), 4, "positive", 8, random_state=0)
    for index in (0, 1):
        assert _outcome(lambda i=index: st.to(np.int64(i))) == _outcome(lambda i=index: st.to(i))
    assert _outcome(lambda: st.to(np.int64(0))) is not TypeError
    with pytest.raises(TypeError, match="device must be"):
        st.to(np.bool_(True))


def test_a_state_with_autograd_history_is_cloned_not_deep_copied():
    """A module stepped outside ``torch.no_grad()`` (its parameters require grad) returns
    a state with autograd history, which ``copy.deepcopy`` (the guide's way to share a
    prefilled state) cannot copy: it raised torch's error about graph leaves. Now it
    names ``state.clone()``, which copies the tensors (history kept), so two beams
    decoded in place from clones of one prompt equal two fresh decodes."""
    m = _lm_module("sderf")
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(3))
    _, st = m.step(x[:, :5], x[:, :5], x[:, :5], m.init_state(2))
    assert st.kvz.requires_grad
    with pytest.raises(RuntimeError, match=r"state\.clone\(\)"):
        copy.deepcopy(st)
    a, b = st.clone(), st.clone()
    assert a.kvz.requires_grad and a.kvz.data_ptr() != st.kvz.data_ptr()
    with torch.no_grad():
        ref, _ = m(x[:, :6], x[:, :6], x[:, :6], is_causal=True)
        oa, a = m.step(x[:, 5], x[:, 5], x[:, 5], a, inplace=True)
        ob, b = m.step(x[:, 5], x[:, 5], x[:, 5], b, inplace=True)
        oa, a = m.step(x[:, 6], x[:, 6], x[:, 6], a, inplace=True)  # only beam a moves on
        ref7, _ = m(x[:, :7], x[:, :7], x[:, :7], is_causal=True)
        # the prompt state is untouched by the in-place steps of its clones
        o5, _ = m.step(x[:, 5], x[:, 5], x[:, 5], st)
    # float32: eps 1.2e-7 times sums of at most 7 terms and the in/out projections
    assert _rel(ob, ref[:, 5]) < 1e-5 and _rel(o5, ref[:, 5]) < 1e-5
    assert _rel(oa, ref7[:, 6]) < 1e-5
    # a clone keeps the history: gradients reach the module's parameters through it
    # (the prompt's keys and values add to the gradient of the in-projection what the
    # detached state, a constant, does not)
    grads = []
    for s in (st.clone(), st.detach()):
        o, _ = m.step(x[:, 5], x[:, 5], x[:, 5], s)
        grads.append(torch.autograd.grad(o.sum(), m.in_proj_weight)[0])
    full, _ = m(x[:, :6], x[:, :6], x[:, :6], is_causal=True)
    g_full = torch.autograd.grad(full[:, 5].sum(), m.in_proj_weight)[0]
    assert _rel(grads[0], g_full) < 1e-5 and _rel(grads[1], g_full) > 1e-2
    # a stale state is refused by clone as by the step
    with torch.no_grad():
        c = st.clone()
        m.step(x[:, 5], x[:, 5], x[:, 5], c, inplace=True)
    with pytest.raises(ValueError, match="stale"):
        c.clone()


def test_detach_truncates_backpropagation():
    """``state.detach()`` drops the history (truncated backpropagation through time):
    the loss of the second segment reaches its own inputs with the gradients of a
    reference whose first segment is a constant, and not the first segment's inputs.
    The detached state shares the tensors, so an in-place step of it makes the original
    stale."""
    q, k, v = qkv((1, 2, 10, 4), scale=0.5)
    ins = [t.clone().requires_grad_(True) for t in (q, k, v)]
    st = init_decoding_state((1, 2), 4, "positive", 16, e=3, random_state=0, dtype=q.dtype)
    _, st = linear_attention_step(*(t[..., :6, :] for t in ins), st)
    det = st.detach()
    assert not det.kvz.requires_grad and det.kvz.data_ptr() == st.kvz.data_ptr()
    o, _ = linear_attention_step(*(t[..., 6:, :] for t in ins), det)
    g = torch.autograd.grad(o.square().sum(), ins)
    # reference: the same two segments, the first computed without autograd
    ref_ins = [t.clone().requires_grad_(True) for t in (q, k, v)]
    st0 = init_decoding_state((1, 2), 4, "positive", 16, e=3, random_state=0, dtype=q.dtype)
    with torch.no_grad():
        _, st0 = linear_attention_step(*(t[..., :6, :] for t in ref_ins), st0)
    o_ref, _ = linear_attention_step(*(t[..., 6:, :] for t in ref_ins), st0)
    g_ref = torch.autograd.grad(o_ref.square().sum(), ref_ins)
    assert torch.equal(o, o_ref)
    for a, b in zip(g, g_ref, strict=True):
        assert torch.equal(a[..., :6, :], torch.zeros_like(a[..., :6, :]))
        assert _rel(a[..., 6:, :], b[..., 6:, :]) < TOL64
    with torch.no_grad():
        linear_attention_step(q[..., 6, :], k[..., 6, :], v[..., 6, :], det, inplace=True)
    with pytest.raises(ValueError, match="stale"):
        linear_attention_step(q[..., 6, :], k[..., 6, :], v[..., 6, :], st)


def test_module_step_refuses_a_state_of_another_scale():
    """A state made by ``init_decoding_state`` with this module's heads, head dim, map
    and feature count but another softmax ``scale`` was accepted and attended with that
    scale, silently; the module's steps use ``1 / sqrt(head_dim)``, so it is refused."""
    m = _lm_module("positive")
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(4))
    good = init_decoding_state((2, 2), 8, "positive", 16, random_state=0)
    bad = init_decoding_state((2, 2), 8, "positive", 16, random_state=0, scale=1.0)
    with torch.no_grad():
        m.step(x, x, x, good)
        with pytest.raises(ValueError, match="scale"):
            m.step(x, x, x, bad)


@pytest.mark.slow
def test_compiled_module_step_decodes_cloned_beams_without_a_recompile_per_token():
    """``torch.compile(fullgraph=True)`` of ``FavorAttention.step`` in place, on clones
    of one prefilled state and on a state converted with ``state.to(dtype)``: equal to
    eager and at most two graphs over 8 tokens (the second when ``state.t`` becomes
    dynamic), whatever the beams."""
    from torch._dynamo.utils import counters

    m = _lm_module("sderf")
    x = torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(6))
    torch._dynamo.reset()
    counters.clear()

    def dec(x_t, st):
        return m.step(x_t, x_t, x_t, st, inplace=True)

    cdec = torch.compile(dec, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        _, st = m.step(x[:, :4], x[:, :4], x[:, :4], m.init_state(2))
        st = st.to(torch.float32)  # no conversion: the same state
        beams = [st.clone(), st.clone()]
        eager = st.clone()
        for t in range(4, 12):
            for i in range(2):
                o, beams[i] = cdec(x[:, t], beams[i])
            r, eager = m.step(x[:, t], x[:, t], x[:, t], eager)
            for b in beams:
                assert b.t == t + 1
            # float32: eps 1.2e-7 times the sums of at most 12 terms and the projections
            torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(beams[0].kvz, beams[1].kvz, rtol=0, atol=0)
    assert counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])
    torch._dynamo.reset()


def test_module_init_state_refuses_a_dtype_its_step_would_refuse():
    """``init_state(batch_size, dtype=torch.float64)`` on a float32 module made a float64
    state, which ``step`` then refused as "converted after init_state?"; now the
    documented argument raises at once, naming ``module.to``. Half dtypes compute in
    float32 and still give a state the float32 module steps."""
    m = _lm_module("positive")
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(7))
    with pytest.raises(TypeError, match=r"module\.to\(torch\.float64\)"):
        m.init_state(2, dtype=torch.float64)
    with torch.no_grad():
        a, _ = m.step(x, x, x, m.init_state(2, dtype=torch.bfloat16))
        b, _ = m.step(x, x, x, m.init_state(2))
        m64 = copy.deepcopy(m).double()
        c, _ = m64.step(x.double(), x.double(), x.double(), m64.init_state(2, dtype=torch.float64))
    assert torch.equal(a, b)
    # float32 against float64: eps 1.2e-7 times the one-token sums and the projections
    assert _rel(b.double(), c) < 1e-5


def test_a_state_made_under_inference_mode_is_cloned_for_later_use():
    """A prompt prefilled under ``torch.inference_mode()`` holds inference tensors: an
    in-place step outside it raises and names ``state.clone()``, whose ordinary tensors
    are then stepped in place (and with autograd) as a fresh decode is."""
    q, k, v = qkv((2, 2, 8, 4), scale=0.5)
    with torch.inference_mode():
        st = init_decoding_state(
            (2, 2),
            4,
            "sderf",
            16,
            e=3,
            random_state=0,
            dtype=q.dtype,
            moments=_calibration_moments(2, 4),
        )
        _, st = linear_attention_step(q[..., :6, :], k[..., :6, :], v[..., :6, :], st)
    ref = linear_attention(
        q, k, v, "sderf", 16, is_causal=True, random_state=0, moments=_calibration_moments(2, 4)
    )
    tok = [t[..., 6, :] for t in (q, k, v)]
    with torch.no_grad(), pytest.raises(ValueError, match=r"state\.clone\(\)"):
        linear_attention_step(*tok, st, inplace=True)
    c = st.clone()
    assert not c.kvz.is_inference()
    with torch.no_grad():
        o, c = linear_attention_step(*tok, c, inplace=True)
    assert _rel(o, ref[..., 6, :]) < TOL64
    vg = v[..., 7, :].clone().requires_grad_(True)
    o, _ = linear_attention_step(q[..., 7, :], k[..., 7, :], vg, c.clone())
    o.sum().backward()
    assert _rel(o, ref[..., 7, :]) < TOL64 and vg.grad is not None


def test_states_compare_by_identity():
    """A serving loop keeps the states of its live sequences in a list: ``state in
    states`` and ``states.remove(state)`` compared the states' tensors field by field and
    raised "Boolean value of Tensor ... is ambiguous"; states compare by identity."""
    a = init_decoding_state((1, 2), 4, "positive", 8, random_state=0)
    b = a.clone()
    live = [a, b]
    assert b in live and a != b and a == a
    live.remove(b)
    assert live == [a] and len({a, b}) == 2
