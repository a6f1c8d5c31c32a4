"""The streaming bidirectional kernel: any block size gives the dense FAVOR# eq. 4 result
with the same features, its closed-form backward matches finite differences across
blocks, and the online key maximum keeps late large-norm keys finite."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import attention_moments  # noqa: E402
from kernelkit.attention._bidirectional import bidirectional_stream, block_rows  # noqa: E402
from kernelkit.attention._maps import build_log_map  # noqa: E402
from kernelkit.attention.functional import _flatten_map, draw_features  # noqa: E402

EXP = ["positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf"]


def _qkv(N=3, L=13, S=17, d=5, e=4, scale=1.0, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(N, L, d, generator=g, dtype=dtype) * scale
    k = torch.randn(N, S, d, generator=g, dtype=dtype) * scale
    v = torch.randn(N, S, e, generator=g, dtype=dtype)
    return q, k, v


def _fmap(name, q, k, M=12, seed=1):
    d = q.shape[-1]
    W = torch.as_tensor(draw_features(name, M, d, seed, "iid")["W"], dtype=q.dtype)
    mom = attention_moments(q[:, None], k[:, None], scale=1.0)  # per (batch, head)
    fmap = build_log_map(name, W, mom, d).to(q.dtype)
    return _flatten_map(fmap, (q.shape[0], 1))


def _dense(q, k, v, fmap, keep=None):
    # out = diag(P Z)^-1 P S with P = exp(lq), S = exp(lk)^T v: no stabiliser (float64)
    lq = fmap.log_features(q, "q")  # (N, L, M)
    lk = fmap.log_features(k, "k")  # (N, S, M)
    if keep is not None:
        lk = torch.where(keep[..., None], lk, float("-inf"))
    P, K = lq.exp(), lk.exp()
    num = P @ (K.transpose(1, 2) @ v)
    den = P @ K.sum(1)[..., None]
    return num / den


@pytest.mark.parametrize("name", EXP)
@pytest.mark.parametrize("rows", [1, 3, 8, 64])
def test_every_block_size_equals_the_dense_formula(name, rows):
    q, k, v = _qkv()
    keep = torch.ones(3, 17, dtype=torch.bool)
    keep[0, :5] = False  # masked keys in the first block(s)
    keep[2, -2:] = False
    fmap = _fmap(name, q, k)
    out = bidirectional_stream(q, k, v, fmap, 1.0, keep, rows=rows)
    torch.testing.assert_close(out, _dense(q, k, v, fmap, keep), rtol=1e-11, atol=1e-12)


def test_scale_is_folded_into_the_blocks():
    q, k, v = _qkv(d=6)
    fmap = _fmap("sderf", q * 0.5**0.5, k * 0.5**0.5)
    out = bidirectional_stream(q, k, v, fmap, 0.5, rows=4)
    ref = _dense(q * 0.5**0.5, k * 0.5**0.5, v, fmap)
    torch.testing.assert_close(out, ref, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("name", ["positive", "saderf", "aderf", "sderf"])
def test_closed_form_backward_matches_finite_differences_across_blocks(name):
    q, k, v = _qkv(N=2, L=9, S=10, d=4, e=3)
    keep = torch.ones(2, 10, dtype=torch.bool)
    keep[1, 3] = False
    fmap = _fmap(name, q, k, M=8)
    args = [t.clone().requires_grad_(True) for t in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda a, b, c: bidirectional_stream(a, b, c, fmap, 0.7, keep, rows=4), args
    )


def test_late_large_keys_rescale_the_state_without_overflow():
    """Keys of norm ~30 sqrt(d) in the last block raise the key maximum by ~1e3: the
    float32 state is rescaled, the output stays finite and equals the one-block result."""
    q, k, v = _qkv(N=2, L=16, S=32, d=8, dtype=torch.float32)
    k[:, -4:] *= 30.0
    fmap = _fmap("positive", q, k, M=16)
    blocks = bidirectional_stream(q, k, v, fmap, 1.0, rows=4)
    whole = bidirectional_stream(q, k, v, fmap, 1.0, rows=64)
    assert torch.isfinite(blocks).all()
    torch.testing.assert_close(blocks, whole, rtol=1e-4, atol=1e-5)


def test_all_keys_masked_gives_zeros_and_zero_gradients():
    q, k, v = _qkv(N=2)
    keep = torch.ones(2, 17, dtype=torch.bool)
    keep[1] = False
    fmap = _fmap("positive", q, k)
    args = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = bidirectional_stream(*args, fmap, 1.0, keep, rows=4)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    out.sum().backward()
    for t in args:
        assert torch.isfinite(t.grad).all()
        assert torch.equal(t.grad[1], torch.zeros_like(t.grad[1]))


def test_block_rows_targets_a_cache_sized_block(monkeypatch):
    from kernelkit.attention import _bidirectional

    monkeypatch.setattr(_bidirectional, "_CPU_BLOCK_BYTES", 1 << 20)
    assert block_rows(8, 256, 4, "cpu") == 128  # 1 MiB of float32 features
    assert block_rows(1, 256, 4, "cpu") == 1024
    assert block_rows(4096, 1024, 8, "cpu") == 16  # never below 16 rows
    assert block_rows(1, 1, 4, "cpu") == 4096  # nor above 4096
    monkeypatch.setattr(_bidirectional, "_CPU_BLOCK_BYTES", 2 << 20)
    assert block_rows(8, 256, 4, "cpu") == 256  # 2 MiB
    assert block_rows(8, 256, 4, "meta") == 4096  # accelerators: 64 MiB, capped


@pytest.mark.parametrize(
    "l2, block",
    [
        (None, 1 << 20),
        (256 << 10, 1 << 20),
        (1 << 20, 1 << 20),
        (2 << 20, 2 << 20),
        (3 << 20, 3 << 20),
        (64 << 20, 8 << 20),
    ],
)
def test_cpu_block_is_one_core_l2_within_1_to_8_mib(l2, block):
    from kernelkit.attention._bidirectional import cpu_block_bytes

    assert cpu_block_bytes(l2) == block


def test_cpu_block_follows_this_machine_cache():
    from kernelkit._backend.cpu_cache import l2_cache_bytes
    from kernelkit.attention._bidirectional import _CPU_BLOCK_BYTES, cpu_block_bytes

    assert _CPU_BLOCK_BYTES == cpu_block_bytes(l2_cache_bytes())
