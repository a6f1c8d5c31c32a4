"""Causal memory bound (saved tensors, allocations in backward) and the FavorAttention
module: MultiheadAttention interface, redraw policy, running statistics, errors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch.profiler import ProfilerActivity, profile  # noqa: E402

from kernelkit.attention import FavorAttention, linear_attention  # noqa: E402
from kernelkit.kernels import softmax_attention  # noqa: E402


# ------------------------------------------------------------------ memory
def _saved_sizes(fn):
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sizes


@pytest.mark.slow
def test_causal_saves_no_feature_sized_tensor_and_allocates_per_chunk():
    """Causal mode saves only O(L (d + e)) tensors for backward (inputs, output, two
    row statistics), never an (L, M) or (L, M, e) one, and no op of the backward
    allocates more than a quarter of one (L, M) float tensor (with chunk = L / 32 the
    largest allocations are a few (chunk, M) blocks and (L, d) gradients): the chunked
    scans work in O(chunk M e). The trig map (which keeps its (L, M) features for autograd)
    shows that the hook sees feature-sized tensors when they are saved."""
    B, H, L, d, e, M = 1, 2, 1024, 8, 8, 128
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, L, n, generator=g, requires_grad=True) for n in (d, d, e))
    out, sizes = _saved_sizes(
        lambda: linear_attention(
            q, k, v, "positive", M, random_state=0, is_causal=True, chunk_size=32
        )
    )
    assert max(sizes) <= B * H * L * (max(d, e) + 1)
    _, sizes_trig = _saved_sizes(lambda: linear_attention(q, k, v, "trig", M, random_state=0))
    assert max(sizes_trig) >= B * H * L * M // 2  # the detector works

    feature_bytes = B * H * L * M * 4
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out.square().sum().backward()
    largest = max(ev.cpu_memory_usage for ev in prof.events())
    assert 0 < largest < feature_bytes / 4, (largest, feature_bytes)
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()


@pytest.mark.parametrize("name", ["positive", "sderf", "aderf"])
def test_bidirectional_streams_in_forward_and_backward(name, monkeypatch):
    """Bidirectional positive maps save only O(L (d + e)) tensors and O(M (d + e)) state
    for backward, and neither pass allocates a tensor near the size of the (L, M)
    features: both stream over blocks of rows (of 1 MiB here, an eighth of the features;
    the CPU default follows the machine's L2 cache)."""
    from kernelkit.attention import _bidirectional

    monkeypatch.setattr(_bidirectional, "_CPU_BLOCK_BYTES", 1 << 20)
    B, H, L, d, e, M = 1, 2, 4096, 8, 8, 256
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, L, n, generator=g, requires_grad=True) for n in (d, d, e))
    feature_bytes = B * H * L * M * 4
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out, sizes = _saved_sizes(lambda: linear_attention(q, k, v, name, M, random_state=0))
    assert max(sizes) <= max(B * H * L * (max(d, e) + 1), B * H * M * (d + 2))
    largest = max(ev.cpu_memory_usage for ev in prof.events())
    assert 0 < largest < feature_bytes / 4, (largest, feature_bytes)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out.square().sum().backward()
    largest = max(ev.cpu_memory_usage for ev in prof.events())
    assert 0 < largest < feature_bytes / 4, (largest, feature_bytes)
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()


# ------------------------------------------------------------------ module
def _x(N=2, L=12, E=16, seed=0):
    return torch.randn(N, L, E, generator=torch.Generator().manual_seed(seed))


def test_module_matches_multihead_attention_with_same_weights():
    """Loading nn.MultiheadAttention weights: FAVOR# output -> MHA output as M grows."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    x = _x() * 0.5
    with torch.no_grad():
        ref, _ = mha(x, x, x, need_weights=False)
    errs = []
    for M in (64, 4096):
        m = FavorAttention(16, 2, feature_map="sderf", n_features=M, random_state=0)
        missing = m.load_state_dict(mha.state_dict(), strict=False).missing_keys
        assert set(missing) <= {
            "projection",
            "sign_projection",
            "calls_since_redraw",
            "running_mean_q",
            "running_second_q",
            "running_mean_k",
            "running_second_k",
            "num_batches_tracked",
        }
        with torch.no_grad():
            out, w = m(x, x, x)
        assert w is None and out.shape == ref.shape
        errs.append(float((out - ref).norm() / ref.norm()))  # no grad needed
    assert errs[1] < 0.05 and errs[1] < errs[0] / 2


def test_module_causal_and_padding_against_exact():
    torch.manual_seed(0)
    m = FavorAttention(16, 2, feature_map="positive", n_features=4096, random_state=0)
    x = _x() * 0.5
    kpm = torch.zeros(2, 12, dtype=torch.bool)
    kpm[1, 9:] = True
    out, _ = m(x, x, x, key_padding_mask=kpm, is_causal=True)
    # exact reference with the module's projections
    q, k, v = m._in_projection(x, x, x)
    q, k, v = (t.view(2, 12, 2, 8).transpose(1, 2) for t in (q, k, v))
    ref = softmax_attention(q, k, v, is_causal=True, key_padding_mask=kpm[:, None, :])
    ref = m.out_proj(ref.transpose(1, 2).reshape(2, 12, 16))
    assert float((out - ref).detach().norm() / ref.detach().norm()) < 0.05
    # the causal attn_mask of nn.MultiheadAttention selects the same computation
    causal_mask = torch.nn.Transformer.generate_square_subsequent_mask(12)
    out2, _ = m(x, x, x, key_padding_mask=kpm, attn_mask=causal_mask)
    torch.testing.assert_close(out, out2)
    float_kpm = torch.zeros(2, 12).masked_fill(kpm, float("-inf"))
    out3, _ = m(x, x, x, key_padding_mask=float_kpm, is_causal=True)
    torch.testing.assert_close(out, out3)


def test_module_shapes_batch_first_false_unbatched_kdim_vdim():
    m = FavorAttention(16, 4, kdim=6, vdim=10, feature_map="gerf", n_features=32, random_state=0)
    q, k, v = _x(E=16), _x(L=7, E=6, seed=1), _x(L=7, E=10, seed=2)
    out, _ = m(q, k, v)
    assert out.shape == (2, 12, 16)
    out_u, _ = m(q[0], k[0], v[0])
    torch.testing.assert_close(out_u, out[0])
    mt = FavorAttention(
        16, 4, kdim=6, vdim=10, batch_first=False, feature_map="gerf", n_features=32, random_state=0
    )
    mt.load_state_dict(m.state_dict())
    out_t, _ = mt(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))
    torch.testing.assert_close(out_t.transpose(0, 1), out)


def test_redraw_policy_and_eval_keeps_features():
    m = FavorAttention(
        16, 2, feature_map="positive", n_features=32, redraw_interval=2, random_state=0
    )
    x = _x()
    P0 = m.projection.clone()
    m(x, x, x)
    m(x, x, x)
    assert torch.equal(m.projection, P0)
    m(x, x, x)  # third training call: redrawn
    assert not torch.equal(m.projection, P0)
    m.eval()
    P1 = m.projection.clone()
    a, _ = m(x, x, x)
    for _ in range(4):
        b, _ = m(x, x, x)
    assert torch.equal(m.projection, P1)
    torch.testing.assert_close(a, b)
    # state_dict round trip reproduces the features
    m2 = FavorAttention(16, 2, feature_map="positive", n_features=32, random_state=5)
    m2.load_state_dict(m.state_dict())
    m2.eval()
    torch.testing.assert_close(m2(x, x, x)[0], a)
    never = FavorAttention(16, 2, n_features=32, redraw_interval=None, random_state=0)
    P = never.projection.clone()
    for _ in range(3):
        never(x, x, x)
    assert torch.equal(never.projection, P)


def test_running_statistics_for_causal_fitted_maps():
    """Causal FAVOR# uses statistics of earlier batches only: the first call uses FAVOR+
    features, training calls update the buffers afterwards, eval calls do not."""
    torch.manual_seed(0)
    m = FavorAttention(
        16,
        2,
        feature_map="sderf",
        n_features=64,
        random_state=0,
        redraw_interval=None,
        momentum=None,
    )
    ref = FavorAttention(
        16, 2, feature_map="positive", n_features=64, random_state=0, redraw_interval=None
    )
    ref.load_state_dict(m.state_dict(), strict=False)
    x, x2 = _x(), _x(seed=3)
    out, _ = m(x, x, x, is_causal=True)
    torch.testing.assert_close(out, ref(x, x, x, is_causal=True)[0])
    assert int(m.num_batches_tracked) == 1
    second = m.running_second_q.clone()
    q, _, _ = m._in_projection(x, x, x)
    qh = q.view(2, 12, 2, 8).transpose(1, 2) * 8**-0.25
    expected = (qh.mT @ qh / 12).mean(0)
    torch.testing.assert_close(second, expected.detach(), rtol=1e-5, atol=1e-6)
    m(x2, x2, x2, is_causal=True)
    assert int(m.num_batches_tracked) == 2
    m.eval()
    a, _ = m(x, x, x, is_causal=True)
    assert int(m.num_batches_tracked) == 2
    # bidirectional fits per instance and leaves the buffers alone
    m.train()
    m(x, x, x)
    assert int(m.num_batches_tracked) == 2
    assert torch.isfinite(a).all()


def test_module_backward_and_autocast():
    m = FavorAttention(16, 2, feature_map="sderf", n_features=32, random_state=0)
    x = _x().requires_grad_(True)
    for causal in (False, True):
        out, _ = m(x, x, x, is_causal=causal)
        out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(p.grad is not None for p in m.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = m(x, x, x, is_causal=True)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


def test_module_errors():
    m = FavorAttention(16, 2, n_features=32, random_state=0)
    x = _x()
    with pytest.raises(ValueError, match="embed_dim"):
        m(_x(E=8), _x(E=8), _x(E=8))
    with pytest.raises(TypeError, match="dtype"):
        m(x, x.double(), x)
    with pytest.raises(ValueError, match="key_padding_mask"):
        m(x, x, x, key_padding_mask=torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="key_padding_mask"):
        m(x, x, x, key_padding_mask=torch.zeros(2, 12, dtype=torch.long))
    with pytest.raises(ValueError, match="need_weights"):
        m(x, x, x, need_weights=True)
    with pytest.raises(ValueError, match="causal attn_mask"):  # anti-causal
        m(x, x, x, attn_mask=torch.ones(12, 12, dtype=torch.bool).tril(-1))
    with pytest.raises(ValueError, match="batch / length"):
        m(x, x[:, :5], x)
    with pytest.raises(ValueError, match="2-D"):
        m(x[None], x[None], x[None])
    with pytest.raises(ValueError, match="divisible"):
        FavorAttention(10, 3)
    with pytest.raises(ValueError, match="feature_map"):
        FavorAttention(16, 2, feature_map="nope")
    with pytest.raises(ValueError, match="add_bias_kv"):
        FavorAttention(16, 2, add_bias_kv=True)
    with pytest.raises(ValueError, match="redraw_interval"):
        FavorAttention(16, 2, redraw_interval=-1)
    with pytest.raises(ValueError, match="power of two"):
        FavorAttention(16, 2, chunk_size=48)


@pytest.mark.slow
def test_torch_compile():
    """The bidirectional path compiles (forward and backward) and matches eager; the causal
    path (excluded from compilation) runs inside a compiled module."""
    torch.manual_seed(0)
    m = FavorAttention(
        16, 2, feature_map="sderf", n_features=32, random_state=0, redraw_interval=None
    )
    m.eval()
    x = _x().requires_grad_(True)
    ref, _ = m(x, x, x)
    cm = torch.compile(m)
    out, _ = cm(x, x, x)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    outc, _ = cm(x, x, x, is_causal=True)
    torch.testing.assert_close(outc, m(x, x, x, is_causal=True)[0])


def test_module_rejects_non_finite_input_by_name():
    m = FavorAttention(16, 2, feature_map="sderf", n_features=16, random_state=0)
    x = _x()
    bad = x.clone()
    bad[0, 3, 2] = float("nan")
    with pytest.raises(ValueError, match="key contains NaN"):
        m(x, bad, x)
    bad[0, 3, 2] = float("inf")
    with pytest.raises(ValueError, match="query contains NaN or inf"):
        m(bad, x, x)
