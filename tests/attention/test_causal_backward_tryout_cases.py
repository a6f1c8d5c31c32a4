"""A user training with the causal kernel's backward (one reverse pass over the blocks
from the forward's saved block states): gradients against autograd through the dense
causal formula (FAVOR# eq. 4) for every positive map, masks and ragged lengths, the
chunk-by-chunk path, partial ``requires_grad``, checkpointing, autocast, GQA and
compiled training steps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import LinearLogFeatures, batched_block_paths  # noqa: E402

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    attention_moments,
    draw_features,
    linear_attention,
)
from kernelkit.attention import _linear as lin  # noqa: E402
from kernelkit.attention._maps import EXP_MAPS, build_log_map  # noqa: E402
from kernelkit.attention.functional import _FusedFeatures, _PlainFeatures  # noqa: E402


def _qkv4(B=2, H=2, L=45, d=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, L, d, generator=g) for _ in range(3)]


@pytest.mark.slow
def test_compiled_causal_training_step_with_left_padding_equals_eager():
    """torch.compile(fullgraph=True) of a causal training step whose padding mask hides
    the first keys (left padding: the first block runs chunk by chunk): the compiled
    backward op gives eager's gradients instead of failing in its local autograd."""
    q, k, v = _qkv4()
    w = _qkv4(seed=2)[0]
    mask = torch.zeros(2, 45, dtype=torch.bool)
    mask[0, :3] = True  # left padding of the first sequence
    mom = attention_moments(*_qkv4(seed=3)[:2])

    def step(q, k, v):
        out = linear_attention(
            q, k, v, "sderf", 16, is_causal=True, moments=mom, random_state=0,
            chunk_size=8, key_padding_mask=mask,
        )  # fmt: skip
        return (out * w).sum()

    def grads(f):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        f(*leaves).backward()
        return [t.grad for t in leaves]

    torch._dynamo.reset()
    try:
        got = grads(torch.compile(step, fullgraph=True, backend="aot_eager"))
    finally:
        torch._dynamo.reset()
    for x, y in zip(got, grads(step), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ against the dense formula


def _data(B=2, L=40, d=4, e=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, L, n, generator=g, dtype=dtype) for n in (d, d, e)]


def _features(name, q, k, M=8):
    if name in ("relu", "elu"):
        return _PlainFeatures(name, q.shape[-1])
    W = torch.as_tensor(draw_features(name, M, q.shape[-1], 0)["W"])
    return _FusedFeatures(build_log_map(name, W, attention_moments(q, k), q.shape[-1]))


def _log_features(feat, x, side):
    # the map's full log features (the queries' row term too: it cancels in the output)
    return feat.fmap.log_features(x, side) if hasattr(feat, "fmap") else feat.log_features(x, side)


def _dense(feat, q, k, v, keep=None):
    """FAVOR# eq. 4, causal, from ``W_tj = sum_m exp(lq_tm + lk_jm)`` as a softmax over the
    visible keys of ``log W`` (logsumexp: exact at any key norm); rows with no visible key
    give zeros."""
    lq, lk = _log_features(feat, q, "q"), _log_features(feat, k, "k")
    logW = torch.logsumexp(lq[:, :, None, :] + lk[:, None, :, :], dim=-1)  # (B, L, L)
    L = q.shape[1]
    vis = torch.tril(torch.ones(L, L, dtype=torch.bool))[None]  # (1, L, L)
    if keep is not None:
        vis = vis & keep[:, None, :]
    seen = vis.any(-1, keepdim=True)  # (B, L, 1)
    P = torch.softmax(torch.where(vis, logW, -torch.inf).where(seen, 0.0), dim=-1) * seen
    return P @ v


def _grads(fn, q, k, v, w, dtype=torch.float64):
    """Output and gradients of ``sum(w * fn(q, k, v))`` (in float64 for comparison)."""
    a, b, c = (x.detach().to(dtype).requires_grad_(True) for x in (q, k, v))
    out = fn(a, b, c)
    (out * w.to(dtype)).sum().backward()
    return [t.double() for t in (out.detach(), a.grad, b.grad, c.grad)]


def _assert_grads_close(got, ref, tol):
    # relative to each tensor's largest entry (gradients of O(1) inputs)
    for x, y in zip(got, ref, strict=True):
        assert torch.isfinite(x).all()
        torch.testing.assert_close(x, y, rtol=0, atol=tol * float(y.abs().max() + 1.0))


def _masks(L):
    """Key masks (True = visible): none, a batch row with no visible key, a masked first
    key, masked last rows, masked whole chunks / blocks, random."""
    out = [None]
    keep = torch.ones(2, L, dtype=torch.bool)
    keep[0] = False
    out.append(keep)
    keep = torch.ones(2, L, dtype=torch.bool)
    keep[:, 0] = False
    out.append(keep)
    keep = torch.ones(2, L, dtype=torch.bool)
    keep[:, -3:] = False
    out.append(keep)
    keep = torch.ones(2, L, dtype=torch.bool)
    keep[:, 4:12] = False
    keep[1, 16:32] = False
    out.append(keep)
    out.append(torch.rand(2, L, generator=torch.Generator().manual_seed(3)) > 0.5)
    return out


@pytest.mark.parametrize("name", [*EXP_MAPS, "relu", "elu"])
def test_gradients_equal_dense_autograd_for_every_map_mask_and_length(name):
    """Every positive map and relu / elu, L = 1, 2, 3 (chunk > L), ragged last chunks and
    blocks, many blocks, the default block; each key mask of :func:`_masks`: output and
    gradients equal autograd through the dense float64 formula (rounding only)."""
    for L, chunk, block in [(1, 4, 16), (2, 4, 16), (3, 8, 8), (37, 4, 16), (50, 4, 8),
                            (33, 2, 32), (70, 64, None)]:  # fmt: skip
        q, k, v = _data(L=L)
        feat = _features(name, q, k)
        w = torch.randn(2, L, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
        for keep in _masks(L):
            args = (keep, feat, chunk, block)
            ref = _grads(lambda a, b, c, kp=args: _dense(kp[1], a, b, c, kp[0]), q, k, v, w)
            got = _grads(lambda a, b, c, kp=args: lin.causal_exp(a, b, c, *kp), q, k, v, w)
            _assert_grads_close(got, ref, 1e-10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_chunk_by_chunk_block_anywhere_equals_dense(dtype, where, monkeypatch):
    """A key jump beyond the growth bound (float64 500, float32 60) in the first, middle or
    last of three blocks (the last one ragged) sends that block chunk by chunk while the
    others stay batched; with a mask (whole chunk, a batch row whose first keys are
    hidden), the gradients equal autograd through the exact dense formula."""
    q, k, v = _data(L=45, d=6, seed=4)
    W = torch.randn(6, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    j = {"first": 6, "middle": 21, "last": 43}[where]
    k[:, j] *= 250.0 if dtype == torch.float64 else 40.0  # log features jump by >> bound
    keep = torch.ones(2, 45, dtype=torch.bool)
    keep[1, 1:9] = False  # whole chunks, the first key still visible
    keep[0, 28:32] = False
    paths = batched_block_paths(monkeypatch)
    w = torch.randn(2, 45, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    feat = LinearLogFeatures(W)
    ref = _grads(lambda a, b, c: _dense(feat, a, b, c, keep), q, k, v, w)
    got = _grads(lambda a, b, c: lin.causal_exp(a, b, c, keep, feat, 4, 16), q, k, v, w, dtype)
    chunked = {"first": 2, "middle": 1, "last": 0}[where]  # reverse order of the blocks
    assert paths == [i != chunked for i in range(3)]
    _assert_grads_close(got, ref, 1e-9 if dtype == torch.float64 else 1e-4)


# ------------------------------------------------------------ training workflows
_MOM = attention_moments(*_qkv4(H=1, L=30, seed=7)[:2])  # (2, 1): every head count


def _attend(q, k, v, **kw):
    return linear_attention(
        q, k, v, "sderf", 32, is_causal=True, moments=_MOM, random_state=0, chunk_size=8, **kw
    )


def _public_grads(req=(True, True, True), dtype=torch.float32, ctx=None, **kw):
    """Output and gradients of ``sum(w * out)`` for leaves requiring grad as ``req``."""
    q, k, v = (t.to(dtype).requires_grad_(r) for t, r in zip(_qkv4(), req, strict=True))
    w = _qkv4(seed=2)[0]
    out = _attend(q, k, v, **kw)
    (out.float() * w).sum().backward()
    return out.detach(), *(t.grad for t in (q, k, v))


def test_only_some_inputs_requiring_grad_get_the_full_gradients():
    """v only, q only, k only, q and k: the same gradients as with all three, and none for
    the inputs that do not require them."""
    full = _public_grads()
    for req in [(False, False, True), (True, False, False), (False, True, False)]:
        got = _public_grads(req)
        for r, g, ref in zip(req, got[1:], full[1:], strict=True):
            if r:
                torch.testing.assert_close(g, ref, rtol=0, atol=0)
            else:
                assert g is None


@pytest.mark.parametrize("left_pad", [False, True])
def test_no_grad_and_inference_forwards_then_training_forward_and_double_backward(left_pad):
    """An inference forward (no_grad, inference_mode) keeps no states and gives the
    training forward's output; backward twice through one graph (retain_graph) gives the
    same gradients twice, also where the first block runs chunk by chunk (left padding:
    its saved state must survive the first backward)."""
    mask = torch.zeros(2, 45, dtype=torch.bool)
    mask[1, :3] = left_pad
    q, k, v = (t.requires_grad_(True) for t in _qkv4())
    with torch.no_grad():
        o1 = _attend(q, k, v, key_padding_mask=mask)
    with torch.inference_mode():
        o2 = _attend(q, k, v, key_padding_mask=mask)
    out = _attend(q, k, v, key_padding_mask=mask)
    torch.testing.assert_close(o1, out.detach(), rtol=0, atol=0)
    torch.testing.assert_close(o2, out.detach(), rtol=0, atol=0)
    w = _qkv4(seed=2)[0]
    (out * w).sum().backward(retain_graph=True)
    first = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    (out * w).sum().backward()
    for g, t, ref in zip(first, (q, k, v), _public_grads(key_padding_mask=mask)[1:], strict=True):
        torch.testing.assert_close(t.grad, g, rtol=0, atol=0)
        torch.testing.assert_close(g, ref, rtol=0, atol=0)


def test_autocast_forward_and_half_inputs_match_float32_gradients():
    """Forward under autocast (bfloat16, CPU) with backward outside: float32 output and the
    float32 gradients. float16 / bfloat16 inputs (computed in float32): finite gradients
    within the rounding of the half output gradient and the half result."""
    ref = _public_grads()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q, k, v = (t.requires_grad_(True) for t in _qkv4())
        out = _attend(q, k, v)
    assert out.dtype == torch.float32
    (out * _qkv4(seed=2)[0]).sum().backward()
    for t, g in zip((q, k, v), ref[1:], strict=True):
        torch.testing.assert_close(t.grad, g, rtol=1e-6, atol=1e-7)
    for dtype in (torch.float16, torch.bfloat16):
        eps = torch.finfo(dtype).eps
        ref = _public_grads(dtype=dtype)  # half leaves, half output
        q, k, v = (t.to(dtype).float().requires_grad_(True) for t in _qkv4())
        out = _attend(q, k, v)  # the same inputs in float32
        dout = (_qkv4(seed=2)[0]).to(dtype).float()  # the output gradient reaches it in half
        (out * dout).sum().backward()
        for g, t in zip(ref[1:], (q, k, v), strict=True):
            assert g.dtype == dtype and torch.isfinite(g).all()
            torch.testing.assert_close(g.float(), t.grad, rtol=0, atol=4 * eps * t.grad.abs().max())


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointed_causal_favor_attention_training_equals_plain(reentrant):
    """torch.utils.checkpoint around a causal grouped-query FavorAttention in training (the
    forward recomputed in the backward; the reentrant variant runs it first under no_grad,
    without block states): the gradients of the input and every parameter are those of
    the plain training step."""
    import copy

    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    m0 = FavorAttention(32, 4, feature_map="sderf", n_features=16, chunk_size=8, random_state=0,
                        num_kv_heads=2, redraw_interval=None).train()  # fmt: skip
    x = torch.randn(2, 45, 32, generator=torch.Generator().manual_seed(1))
    mask = torch.zeros(2, 45, dtype=torch.bool)
    mask[1, :4] = True
    m0(x, x, x, key_padding_mask=mask, is_causal=True)  # running statistics from a first batch
    w = torch.randn(2, 45, 32, generator=torch.Generator().manual_seed(2))

    def step(wrap):
        m = copy.deepcopy(m0)
        xx = x.clone().requires_grad_(True)

        def f(t):
            return m(t, t, t, key_padding_mask=mask, is_causal=True)[0]

        out = checkpoint(f, xx, use_reentrant=reentrant) if wrap else f(xx)
        (out * w).sum().backward()
        return [xx.grad, *(p.grad for p in m.parameters() if p.requires_grad)]

    ref = step(False)
    assert all(g is not None for g in ref)
    for g, r in zip(step(True), ref, strict=True):
        torch.testing.assert_close(g, r, rtol=0, atol=0)


def test_gqa_causal_training_equals_repeated_key_heads():
    """enable_gqa=True causal training: the gradients of the shared key / value heads are
    the sums over their query groups (as with the heads repeated)."""
    q = _qkv4(H=4)[0]
    k, v = _qkv4(H=2, seed=3)[1:]
    w = _qkv4(H=4, seed=2)[0]
    res = []
    for gqa in (True, False):
        a, b, c = (t.clone().requires_grad_(True) for t in (q, k, v))
        kk, vv = (b, c) if gqa else (b.repeat_interleave(2, 1), c.repeat_interleave(2, 1))
        (_attend(a, kk, vv, enable_gqa=gqa) * w).sum().backward()
        res.append((a.grad, b.grad, c.grad))
    for g, r in zip(*res, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)


def test_long_sequence_loss_on_early_rows_gives_exact_zeros_later(monkeypatch):
    """L = 8192 (16 blocks of 512), float32, a loss on the first 40 rows only: the
    gradients of every later query, key and value are exactly zero (no later position
    reaches them), all finite, and the early ones equal those of the 40-row prefix alone;
    also with a key jump far beyond the growth bound at row 5000 (its block chunk by
    chunk)."""
    q, k, v = _data(B=2, L=8192, d=16, e=16, seed=8, dtype=torch.float32)
    W = 0.3 * torch.randn(16, 32, generator=torch.Generator().manual_seed(10))
    feat = LinearLogFeatures(W)
    T = 40
    w = torch.randn(2, T, 16, generator=torch.Generator().manual_seed(9))
    prefix = _grads(lambda a, b, c: lin.causal_exp(a, b, c, None, feat, 64), q[:, :T], k[:, :T],
                    v[:, :T], w, torch.float32)  # fmt: skip
    calls = []
    orig = lin._bwd_chunks
    monkeypatch.setattr(lin, "_bwd_chunks", lambda *a: calls.append(1) or orig(*a))
    for jump in (1.0, 100.0):  # log features of row 5000 up by about 180 > 60
        k2 = k.clone()
        k2[:, 5000] *= jump
        a, b, c = (t.clone().requires_grad_(True) for t in (q, k2, v))
        (lin.causal_exp(a, b, c, None, feat, 64)[:, :T] * w).sum().backward()
        assert len(calls) == (jump > 1)
        for g, p in zip((a.grad, b.grad, c.grad), prefix[1:], strict=True):
            assert torch.isfinite(g).all()
            assert torch.all(g[:, T:] == 0)
            torch.testing.assert_close(g[:, :T].double(), p, rtol=1e-4, atol=1e-5)


def test_saved_tensors_are_the_inputs_output_row_stats_and_block_states_only():
    """Memory: a training forward saves, besides its inputs, the output (B, L, e), two
    (B, L) row statistics and the block states (B, blocks, M, e + 1) and maxima
    (B, blocks, M); a forward under no_grad, or with no input requiring grad, never
    allocates the block states (no operation returns a tensor of their shape) and saves
    nothing."""
    from torch.utils._python_dispatch import TorchDispatchMode

    B, L, e, block, chunk, M = 2, 96, 3, 32, 8, 8
    states = (B, L // block, M, e + 1)  # (2, 3, 8, 4); a block's chunk states: (2, 4, 8, 4)

    class Shapes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, tuple | list) else (out,):
                if isinstance(t, torch.Tensor):
                    made.append(tuple(t.shape))
            return out

    q, k, v = _data(B=B, L=L, e=e)
    feat = _features("sderf", q, k, M=M)
    saved, made = [], []

    def pack(t):
        saved.append(t)
        return t

    for grad_mode, req in ((True, True), (False, True), (True, False)):
        saved.clear()
        made.clear()
        leaves = [t.clone().requires_grad_(req) for t in (q, k, v)]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Shapes():
            with torch.set_grad_enabled(grad_mode):
                out = lin.causal_exp(*leaves, None, feat, chunk, block)
        if not (grad_mode and req):
            assert saved == [] and states not in made
            continue
        assert states in made
        extra = [t for t in saved if not any(t is x for x in leaves) and t.numel()]
        assert any(t is out for t in extra)
        shapes = sorted(tuple(t.shape) for t in extra)
        assert shapes == sorted([(B, L, e), (B, L), (B, L), states, states[:3]])


def test_empty_sequence_trains_through_the_kernel():
    """``causal_exp`` with no rows (L = 0, no blocks, so empty block states that were
    nevertheless kept): forward and backward run and give what the public function gives,
    an empty output and empty gradients, instead of "ran without keeping its block
    states"."""
    feat = _PlainFeatures("elu", 4)
    q, k, v = (torch.randn(2, 0, 4, dtype=torch.float64).requires_grad_(True) for _ in "qkv")
    out = lin.causal_exp(q, k, v, None, feat, 4)
    out.sum().backward()
    ref = linear_attention(q[:, None], k[:, None], v[:, None], "elu", is_causal=True)
    torch.testing.assert_close(out, ref[:, 0], rtol=0, atol=0)
    for t in (q, k, v):
        torch.testing.assert_close(t.grad, torch.zeros_like(t), rtol=0, atol=0)
