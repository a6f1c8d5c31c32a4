"""Decoding as a server uses it: a dynamically quantized module, resetting the state of
chosen batch rows (a finished sequence replaced by a new one), prompts of different
lengths prefilled in one padded batch, and a state saved with ``state_dict`` /
``weights_only`` and restored, under autocast and ``torch.inference_mode()``."""

from __future__ import annotations

import copy
import io
import warnings

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    attention_moments,
    init_decoding_state,
    linear_attention_step,
)

# float64: the step and a fresh state (or the causal pass) form the same sums of the same
# features in another order (or block split); each output is a ratio of sums of <= 16
# terms exp(log feature) with log features of size ~10, so relative round-off ~1e3 eps
# (eps = 2.2e-16) at worst: 1e-10 leaves a margin of ~1e3
F64_TOL = 1e-10
# float32 (the quantized module: its quantized Linear takes float32): the same sums with
# eps = 1.2e-7, ~1e-6 relative on outputs of size <= ~1; 2e-5 leaves a margin of 10
F32_TOL = 2e-5


def _seq(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _module(feature_map="positive", dtype=torch.float64, **kw):
    m = FavorAttention(
        16, 2, feature_map=feature_map, n_features=32, batch_first=True, random_state=0, **kw
    )
    if feature_map == "sderf":  # statistics, so that the state has fitted features
        m.train()
        with torch.no_grad():
            x = _seq(4, 12, 16, seed=9, dtype=torch.float32)
            m(x, x, x, is_causal=True)
    return m.to(dtype).eval()


# ----------------------------------------------------------- 1. quantize_dynamic
def test_a_dynamically_quantized_module_decodes_as_its_causal_forward():
    """``init_state`` / ``step`` read ``out_proj.weight``'s dtype and device; after
    ``quantize_dynamic(module, {nn.Linear})`` that is a method, so both raised
    ``AttributeError``. Now they read the in-projection, as ``forward``."""
    m = _module(dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation warnings
        try:
            qm = torch.ao.quantization.quantize_dynamic(m, {torch.nn.Linear}, dtype=torch.qint8)
        except (RuntimeError, AttributeError) as exc:  # a build without a quantized engine
            pytest.skip(f"no dynamic quantization here: {exc}")
    assert callable(qm.out_proj.weight)  # the case: weight is a method
    x = _seq(2, 9, 16, dtype=torch.float32)
    seen = []
    hook = qm.out_proj.register_forward_hook(lambda mod, a, out: seen.append(a[0]))
    with torch.no_grad():
        full, _ = qm(x, x, x, is_causal=True)
        state = qm.init_state(2)
        assert state.dtype == torch.float32
        y, state = qm.step(x[:, :6], x[:, :6], x[:, :6], state)  # prefill
        y_6, state = qm.step(x[:, 6], x[:, 6], x[:, 6], state, inplace=True)  # one token
        y_t, state = qm.step(x[:, 7:], x[:, 7:], x[:, 7:], state)
    hook.remove()
    # the attention the quantized out_proj receives: the forward's, to float32 round-off
    a_full, a_pre, a_6, a_post = seen
    torch.testing.assert_close(a_pre, a_full[:, :6], rtol=0, atol=F32_TOL)
    torch.testing.assert_close(a_6[:, 0], a_full[:, 6], rtol=0, atol=F32_TOL)
    torch.testing.assert_close(a_post, a_full[:, 7:], rtol=0, atol=F32_TOL)
    # out_proj quantizes its input per call (its range sets the uint8 scale), so the
    # outputs agree to the int8 rounding, as the quantized forward agrees with the float
    # one: per-tensor int8 weights err by <= max|W| / 254 and uint8 activations by
    # <= max|a| / 255, each of the E = 16 products by <= max|W| max|a| (1/254 + 1/255 +
    # their product), for each of the two calls compared
    W, amax = m.out_proj.weight, a_full.abs().max()
    bound = 2 * 16 * W.abs().max() * amax * 2.01 / 254
    assert (y - full[:, :6]).abs().max() <= bound
    assert (y_6 - full[:, 6]).abs().max() <= bound
    assert (y_t - full[:, 7:]).abs().max() <= bound


def test_a_quantized_gqa_module_makes_and_checks_its_state():
    # GQA: no packed in_proj_weight; the dtype comes from q_proj_weight
    m = FavorAttention(
        16, 4, num_kv_heads=2, n_features=32, batch_first=True, random_state=0
    ).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            qm = torch.ao.quantization.quantize_dynamic(m, {torch.nn.Linear}, dtype=torch.qint8)
        except (RuntimeError, AttributeError) as exc:
            pytest.skip(f"no dynamic quantization here: {exc}")
    x = _seq(1, 4, 16, dtype=torch.float32)
    with torch.no_grad():
        state = qm.init_state(1)
        y, state = qm.step(x, x, x, state)
    assert y.shape == x.shape and state.kv_heads == 2 and torch.isfinite(y).all()
    with pytest.raises(TypeError, match="init_state"):  # the dtype check still holds
        qm.init_state(1, dtype=torch.float64)


# ----------------------------------------------------------- 2. per-row reset
def _fresh_row(state_args, q, k, v, rows):
    st = init_decoding_state((len(rows), 2), 8, **state_args)
    return linear_attention_step(q[rows], k[rows], v[rows], st, **_gqa_kw(state_args))


def _gqa_kw(state_args):
    return {"enable_gqa": True} if state_args.get("enable_gqa") else {}


def _cases():
    mom = attention_moments(_seq(1, 2, 20, 8, seed=5), _seq(1, 2, 20, 8, seed=6))
    base = {"n_features": 32, "random_state": 0, "dtype": torch.float64}
    return {
        "positive": {**base, "feature_map": "positive"},
        "sderf_per_head": {**base, "feature_map": "sderf", "moments": mom},
        "gqa_grouped": {**base, "feature_map": "positive", "enable_gqa": True, "num_kv_heads": 1},
    }


@pytest.mark.parametrize("case", ["positive", "sderf_per_head", "gqa_grouped"])
@pytest.mark.parametrize("how", ["bool", "index", "inplace"])
def test_reset_rows_start_new_sequences_and_leave_the_others(case, how):
    args = _cases()[case]
    hk = 1 if args.get("enable_gqa") else 2
    kw = _gqa_kw(args)
    q = _seq(3, 2, 12, 8, seed=1)
    k, v = _seq(3, hk, 12, 8, seed=2), _seq(3, hk, 12, 8, seed=3)
    state = init_decoding_state((3, 2), 8, **args)
    with torch.no_grad():
        _, state = linear_attention_step(q[..., :5, :], k[..., :5, :], v[..., :5, :], state, **kw)
        cont = state.clone()  # the batch continued without a reset
        if how == "bool":
            reset = state.reset(torch.tensor([False, True, False]))
        elif how == "index":
            reset = state.reset(torch.tensor([1]))
        else:
            reset = state.clone().reset(torch.tensor([False, True, False]), inplace=True)
        assert reset.t == state.t == 5  # the batch's count, kept
        # row 1 starts a new sequence (tokens 5: of row 1) at its block, then one token
        out_b, reset = linear_attention_step(
            q[..., 5:9, :], k[..., 5:9, :], v[..., 5:9, :], reset, **kw
        )
        out_t, reset = linear_attention_step(
            q[..., 9, :], k[..., 9, :], v[..., 9, :], reset, inplace=True, **kw
        )
        ref_b, _ = linear_attention_step(q[..., 5:9, :], k[..., 5:9, :], v[..., 5:9, :], cont, **kw)
        ref_t, _ = linear_attention_step(q[..., 9, :], k[..., 9, :], v[..., 9, :], _, **kw)
        fresh_b, fst = _fresh_row(args, q[..., 5:9, :], k[..., 5:9, :], v[..., 5:9, :], [1])
        fresh_t, _ = linear_attention_step(q[1:2, :, 9], k[1:2, :, 9], v[1:2, :, 9], fst, **kw)
    tol = {"rtol": F64_TOL, "atol": F64_TOL}
    torch.testing.assert_close(out_b[1:2], fresh_b, **tol)
    torch.testing.assert_close(out_t[1:2], fresh_t, **tol)
    # the other rows: the continuation without reset, bit for bit (the same operations)
    keep = [0, 2]
    assert torch.equal(out_b[keep], ref_b[keep]) and torch.equal(out_t[keep], ref_t[keep])


def test_reset_is_not_a_no_op_and_leaves_its_input():
    st = init_decoding_state((2, 2), 8, "positive", 32, random_state=0, dtype=torch.float64)
    _, st = linear_attention_step(
        _seq(2, 2, 3, 8), _seq(2, 2, 3, 8, seed=1), _seq(2, 2, 3, 8, seed=2), st
    )
    before = st.kvz.clone()
    r = st.reset(torch.tensor([True, False]))
    assert torch.equal(st.kvz, before)  # out of place: the input state as it was
    assert (r.kvz[0] == 0).all() and (r.c[0] == -1e30).all() and torch.equal(r.kvz[1], before[1])
    assert torch.equal(st.reset(torch.tensor(True)).kvz, torch.zeros_like(before))  # k = 0: all


def test_reset_in_place_shares_the_tensors_and_makes_the_input_stale():
    st = init_decoding_state((2, 2), 8, "positive", 32, random_state=0)
    with torch.no_grad():
        _, st = linear_attention_step(
            _seq(2, 2, 3, 8, dtype=torch.float32),
            _seq(2, 2, 3, 8, seed=1, dtype=torch.float32),
            _seq(2, 2, 3, 8, seed=2, dtype=torch.float32),
            st,
        )
        r = st.reset(torch.tensor([0]), inplace=True)
    assert r.kvz.data_ptr() == st.kvz.data_ptr() and (r.kvz[0] == 0).all()
    with pytest.raises(ValueError, match="stale"):
        linear_attention_step(*(_seq(2, 2, 8, dtype=torch.float32) for _ in range(3)), st)


def test_reset_gradients_flow_to_the_kept_rows_only():
    k = _seq(2, 2, 4, 8, seed=1).requires_grad_(True)
    st = init_decoding_state((2, 2), 8, "positive", 32, random_state=0, dtype=torch.float64)
    _, st = linear_attention_step(_seq(2, 2, 4, 8), k, _seq(2, 2, 4, 8, seed=2), st)
    st = st.reset(torch.tensor([True, False]))
    out, _ = linear_attention_step(
        _seq(2, 2, 8, seed=3), _seq(2, 2, 8, seed=4), _seq(2, 2, 8, seed=5), st
    )
    out.sum().backward()
    assert (k.grad[0] == 0).all() and (k.grad[1] != 0).any()


def test_reset_checks_its_mask_and_mode():
    st = init_decoding_state((2, 2), 8, "positive", 32, random_state=0)
    with pytest.raises(ValueError, match="leading batch dims"):
        st.reset(torch.tensor([True, False, True]))
    with pytest.raises(TypeError, match="bool tensor"):
        st.reset(torch.tensor([1.0, 0.0]))
    gq = init_decoding_state(
        (2, 4), 8, "positive", 32, random_state=0, enable_gqa=True, num_kv_heads=2
    )
    with pytest.raises(ValueError, match="GQA"):
        gq.reset(torch.ones(2, 4, dtype=torch.bool))
    with torch.inference_mode():
        inf = st.clone()
    with pytest.raises(ValueError, match="inference_mode"):
        inf.reset(torch.tensor([True, False]), inplace=True)
    assert (inf.reset(torch.tensor([True, False])).c[0] == -1e30).all()  # out of place: fine
    with torch.inference_mode():  # in place inside it: fine
        assert inf.reset(torch.tensor([True, False]), inplace=True).t == 0
    g = st.to(torch.float64)
    g = linear_attention_step(*(_seq(2, 2, 8).requires_grad_(True) for _ in range(3)), g)[1]
    with pytest.raises(ValueError, match="autograd"):
        g.reset(torch.tensor([True, False]), inplace=True)


def test_inplace_step_of_a_state_with_autograd_history_is_refused():
    """Inputs that need no grad, but a state that carries a graph from earlier steps: an
    in-place step would overwrite tensors autograd needs. Refused with the step's message
    (as for inputs that require grad), the state left as it was; under no_grad it runs.
    An in-place reset of it is refused with the reset's message."""
    st = init_decoding_state((2, 2), 8, "positive", 32, random_state=0).to(torch.float64)
    _, g = linear_attention_step(
        *(_seq(2, 2, 8, seed=s).requires_grad_(True) for s in range(3)), st
    )
    q = _seq(2, 2, 8, seed=5)
    assert g.kvz.requires_grad and not q.requires_grad
    before = g.kvz.detach().clone()
    for x in (q, _seq(2, 2, 5, 8, seed=6)):  # a token, a block
        with pytest.raises(ValueError, match=r"autograd needs; use it under torch\.no_grad\(\)"):
            linear_attention_step(x, x, x, g, inplace=True)
    # a reset names the state's way out
    with pytest.raises(ValueError, match=r"reset under torch\.no_grad\(\), or a state without"):
        g.reset(torch.tensor([True, False]), inplace=True)
    assert torch.equal(g.kvz.detach(), before)
    with torch.no_grad():
        linear_attention_step(q, q, q, g.clone(), inplace=True)


@pytest.mark.slow
@pytest.mark.parametrize("inplace", [False, True])
def test_module_reset_and_step_compile_fullgraph(inplace):
    """A decode step that resets finished rows and steps every row, compiled with
    ``fullgraph=True``: no graph break (the mask stays on the device), equal to eager."""
    torch._dynamo.reset()
    m = _module(dtype=torch.float32)
    x = _seq(3, 8, 16, dtype=torch.float32)

    def dec(x_t, st, done):
        st = st.reset(done, inplace=inplace)
        return m.step(x_t, x_t, x_t, st, inplace=inplace)

    cdec = torch.compile(dec, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        _, st = m.step(x[:, :4], x[:, :4], x[:, :4], m.init_state(3))
        se = st.clone()
        outs, refs = [], []
        for t in range(4, 8):
            done = torch.tensor([t == 5, False, t == 6])
            o, st = cdec(x[:, t], st, done)
            r, se = dec(x[:, t], se, done)
            outs.append(o)
            refs.append(r)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.stack(outs), torch.stack(refs), rtol=F32_TOL, atol=F32_TOL)


def test_module_state_reset_row_equals_a_fresh_module_state():
    m = _module("sderf")
    x = _seq(3, 10, 16)
    with torch.no_grad():
        _, st = m.step(x[:, :6], x[:, :6], x[:, :6], m.init_state(3))
        st = st.reset(torch.tensor([False, False, True]))
        y, st = m.step(x[:, 6:], x[:, 6:], x[:, 6:], st)
        ref, _ = m.step(x[2:, 6:], x[2:, 6:], x[2:, 6:], m.init_state(1))
    torch.testing.assert_close(y[2:], ref, rtol=F64_TOL, atol=F64_TOL)


# ----------------------------------------------------------- 3. variable-length batches
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("lengths", [(3, 7, 5), (70, 100, 81)])  # block / kernel paths
def test_padded_prompts_prefill_then_step_as_each_alone(side, lengths):
    m = _module("sderf")
    P, new = max(lengths), 3
    prompts = [_seq(n, 16, seed=10 + i) for i, n in enumerate(lengths)]
    tokens = _seq(3, new, 16, seed=20)
    batch = torch.zeros(3, P, 16, dtype=torch.float64)
    pad = torch.ones(3, P, dtype=torch.bool)
    for i, p in enumerate(prompts):
        sl = slice(P - len(p), P) if side == "left" else slice(0, len(p))
        batch[i, sl], pad[i, sl] = p, False
    with torch.no_grad():
        y, st = m.step(batch, batch, batch, m.init_state(3), key_padding_mask=pad)
        outs = [m.step(tokens[:, j], tokens[:, j], tokens[:, j], st)[0] for j in range(1)]
        _, st = m.step(tokens[:, 0], tokens[:, 0], tokens[:, 0], st)
        rest, _ = m.step(tokens[:, 1:], tokens[:, 1:], tokens[:, 1:], st, inplace=True)
        for i, p in enumerate(prompts):
            alone = p[None]
            ya, sa = m.step(alone, alone, alone, m.init_state(1))
            ta = tokens[i : i + 1]
            oa, sa = m.step(ta[:, 0], ta[:, 0], ta[:, 0], sa)
            ra, _ = m.step(ta[:, 1:], ta[:, 1:], ta[:, 1:], sa)
            sl = slice(P - len(p), P) if side == "left" else slice(0, len(p))
            tol = {"rtol": F64_TOL, "atol": F64_TOL}
            torch.testing.assert_close(y[i : i + 1, sl], ya, **tol)  # the real positions
            torch.testing.assert_close(outs[0][i : i + 1], oa, **tol)
            torch.testing.assert_close(rest[i : i + 1], ra, **tol)


# ----------------------------------------------------------- 4. deployment
def test_state_dict_saves_with_weights_only_and_restores():
    m = _module("sderf")
    x = _seq(2, 9, 16)
    with torch.no_grad():
        _, st = m.step(x[:, :5], x[:, :5], x[:, :5], m.init_state(2))
        buf = io.BytesIO()
        torch.save(st.state_dict(), buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=True)
        m2 = copy.deepcopy(m)  # a served copy: the same features from its buffers
        back = m2.init_state(2).restore(loaded)
        assert back.t == 5
        y, _ = m.step(x[:, 5:], x[:, 5:], x[:, 5:], st)
        y2, _ = m2.step(x[:, 5:], x[:, 5:], x[:, 5:], back)
    assert torch.equal(y, y2)  # the same tensors, features and operations
    with pytest.raises(ValueError, match="shape"):
        m.init_state(3).restore(loaded)
    with pytest.raises(ValueError, match="keys"):
        m.init_state(2).restore({"kvz": loaded["kvz"]})


def test_state_dict_restores_on_the_receiving_states_dtype_and_refuses_stale():
    st = init_decoding_state((1, 2), 8, "positive", 32, random_state=0)
    with torch.no_grad():
        _, st2 = linear_attention_step(
            *(_seq(1, 2, 8, dtype=torch.float32) for _ in range(3)), st, inplace=True
        )
    with pytest.raises(ValueError, match="stale"):
        st.state_dict()
    back = st2.to(torch.float64).restore(st2.state_dict())
    assert back.kvz.dtype == torch.float64 and torch.equal(back.kvz, st2.kvz.double())
    same = st2.restore(st2.state_dict())  # a copy, not the saved tensors: no aliasing
    assert torch.equal(same.kvz, st2.kvz) and same.kvz.data_ptr() != st2.kvz.data_ptr()


def test_step_under_autocast_keeps_a_float32_state_and_equals_the_forward():
    m = _module(dtype=torch.float32)
    x = _seq(2, 7, 16, dtype=torch.float32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        full, _ = m(x, x, x, is_causal=True)
        y, st = m.step(x[:, :4], x[:, :4], x[:, :4], m.init_state(2))
        y_t, st = m.step(x[:, 4], x[:, 4], x[:, 4], st, inplace=True)
    assert st.dtype == torch.float32 and y.dtype == full.dtype == torch.bfloat16
    # the same bfloat16 projections and float32 attention: equal up to bfloat16's
    # rounding of the attention output (8 bits: 2^-8 relative, on outputs of size ~1)
    torch.testing.assert_close(y.float(), full[:, :4].float(), rtol=0, atol=2**-7)
    torch.testing.assert_close(y_t.float(), full[:, 4].float(), rtol=0, atol=2**-7)


def test_functional_step_under_autocast_computes_in_the_states_dtype():
    # float32 inputs under a bfloat16 autocast: the step turns autocast off (as
    # linear_attention), so it equals the step outside autocast to float32 round-off
    # (the same operations: 1e-6 leaves a margin of ~10 over a few eps = 1.2e-7 on
    # outputs of size ~1); bfloat16 products would err by ~2^-8 relative
    q, k, v = (_seq(2, 2, 6, 8, seed=s, dtype=torch.float32) for s in (1, 2, 3))
    st = init_decoding_state((2, 2), 8, "positive", 32, random_state=0)
    ref, ref_st = linear_attention_step(q, k, v, st)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, out_st = linear_attention_step(q, k, v, st)
        out_t, _ = linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], out_st)
    ref_t, _ = linear_attention_step(q[..., 0, :], k[..., 0, :], v[..., 0, :], ref_st)
    assert out.dtype == out_st.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out_t, ref_t, rtol=1e-6, atol=1e-6)


def test_a_state_made_under_inference_mode_steps_with_autograd_after_clone():
    """A prompt prefilled under ``torch.inference_mode()`` (init_state there too), then a
    step that autograd records (the module's parameters require grad, no ``no_grad``):
    the state's feature parameters are inference tensors, which autograd cannot save,
    and torch's error said "make a clone", but ``state.clone()`` shared them, so the
    clone failed the same way. Now the step names the ways out and ``clone`` (outside
    inference mode) copies those parameters."""
    m = _module(dtype=torch.float32)
    x = _seq(2, 6, 16, dtype=torch.float32)
    with torch.inference_mode():
        _, st = m.step(x[:, :5], x[:, :5], x[:, :5], m.init_state(2))
    with torch.no_grad():  # made outside: the same prefix, no graph (as the other's)
        _, ref_st = m.step(x[:, :5], x[:, :5], x[:, :5], m.init_state(2))
    with pytest.raises(ValueError, match="inference_mode"):
        m.step(x[:, 5], x[:, 5], x[:, 5], st)
    y, _ = m.step(x[:, 5], x[:, 5], x[:, 5], st.clone())
    y.square().sum().backward()
    grad = m.in_proj_weight.grad.clone()
    m.zero_grad()
    ref, _ = m.step(x[:, 5], x[:, 5], x[:, 5], ref_st)
    ref.square().sum().backward()
    # the same operations on the same values: equal to float32 round-off
    torch.testing.assert_close(y, ref, rtol=F32_TOL, atol=F32_TOL)
    torch.testing.assert_close(grad, m.in_proj_weight.grad, rtol=F32_TOL, atol=F32_TOL)
    with torch.no_grad():  # and without autograd, the state itself steps
        assert m.step(x[:, 5], x[:, 5], x[:, 5], st)[0].shape == (2, 16)
