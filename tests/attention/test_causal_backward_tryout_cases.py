"""A user training with the causal kernel's backward (one reverse pass over the blocks
from the forward's saved block states): gradients against autograd through the dense
causal formula (FAVOR# eq. 4) for every positive map, masks and ragged lengths, the
chunk-by-chunk path, partial ``requires_grad``, checkpointing, autocast, GQA and
compiled training steps."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import attention_moments, linear_attention  # noqa: E402


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
from kernelkit.attention import _linear as lin  # noqa: E402
from kernelkit.attention import draw_features  # noqa: E402
from kernelkit.attention._maps import EXP_MAPS, build_log_map  # noqa: E402
from kernelkit.attention.functional import _FusedFeatures, _PlainFeatures  # noqa: E402


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


class _Linear:
    """Log features ``x @ W`` (no row term): scaling a key raises them directly."""

    def __init__(self, W):
        self.W, self.n_out = W, W.shape[1]

    def log_features(self, x, side, keep=None):
        lf = x @ self.W.to(x.dtype)
        return lf if keep is None else torch.where(keep[..., None], lf, -1e30)


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
    paths = []
    orig = lin._bwd_block

    def spy(*args):
        res = orig(*args)
        paths.append(res is not None)
        return res

    monkeypatch.setattr(lin, "_bwd_block", spy)
    w = torch.randn(2, 45, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    feat = _Linear(W)
    ref = _grads(lambda a, b, c: _dense(feat, a, b, c, keep), q, k, v, w)
    got = _grads(lambda a, b, c: lin.causal_exp(a, b, c, keep, feat, 4, 16), q, k, v, w, dtype)
    chunked = {"first": 2, "middle": 1, "last": 0}[where]  # reverse order of the blocks
    assert paths == [i != chunked for i in range(3)]
    _assert_grads_close(got, ref, 1e-9 if dtype == torch.float64 else 1e-4)
