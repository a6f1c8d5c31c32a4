"""The causal kernel's accelerator paths, run on the CPU: large blocks (a feature block of
``ACCELERATOR_BLOCK_BYTES``) and chunk states chained by prefix sums instead of one
``addcmul`` per chunk. Every result is checked against FAVOR# eq. 4 computed densely, and
spies make sure the path under test really ran."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from attention_helpers import (  # noqa: E402
    LinearLogFeatures,
    causal_dense_log,
    causal_inputs,
    fused_features,
)

from kernelkit.attention import _linear as lin  # noqa: E402

MAPS = ["positive", "sderf", "saderf", "aderf"]


def _fused_dense(feat, q, k, v, keep=None):
    return causal_dense_log(feat.fmap.log_features(q, "q"), feat.fmap.log_features(k, "k"), v, keep)


class _Calls:
    """Counts the calls of ``lin.name`` (which still runs)."""

    def __init__(self, monkeypatch, name):
        self.n, orig = 0, getattr(lin, name)

        def spy(*args, **kw):
            self.n += 1
            return orig(*args, **kw)

        monkeypatch.setattr(lin, name, spy)


@pytest.fixture
def parallel(monkeypatch):
    """The accelerator's prefix-sum chaining on the CPU; returns spies on both scans."""
    monkeypatch.setattr(lin, "_parallel_scan", lambda device: True)
    return _Calls(monkeypatch, "_prefix_states"), _Calls(monkeypatch, "_suffix_prefix_sums")


def test_block_rows_for_sizes_accelerator_blocks_by_bytes():
    # CPU: the cache-sized rule, unchanged
    for L, chunk in ((1024, 64), (65536, 64), (96, 32), (16, 16)):
        assert lin.block_rows_for(L, chunk, 8, 256, 4, "cpu") == lin._block_rows(L, chunk)
    # accelerators: (B, rows, M) features of at most 64 MiB, whole chunks, at most L
    assert lin.block_rows_for(65536, 64, 8, 256, 4, "cuda") == 8192
    assert lin.block_rows_for(65536, 64, 8, 256, 8, "cuda") == 4096  # float64
    assert lin.block_rows_for(65536, 64, 8, 256, 2, torch.device("cuda")) == 16384
    assert lin.block_rows_for(1024, 64, 8, 256, 4, "cuda") == 1024  # the whole sequence
    assert lin.block_rows_for(65536, 64, 4096, 256, 4, "cuda") == 64  # at least a chunk
    assert lin.block_rows_for(8192, 64, 48, 256, 4, "cuda") == 1344  # 1365 rows: 21 chunks
    assert lin.ACCELERATOR_BLOCK_BYTES == 1 << 26
    # values wider than the features (e + 1 = 257 columns, M = 4): the value-sized
    # buffers set the block, 64 MiB / (8 * 257 * 4 bytes) = 8160 rows -> 127 chunks
    assert lin.block_rows_for(65536, 64, 8, 4, 4, "cuda", values=257) == 8128
    assert lin.block_rows_for(65536, 64, 8, 256, 4, "cuda", values=65) == 8192
    assert lin.block_rows_for(1024, 64, 8, 4, 4, "cpu", values=257) == lin._block_rows(1024, 64)


@pytest.mark.parametrize("name", MAPS)
@pytest.mark.parametrize(
    "chunk,block,mask",
    [(4, 40, "none"), (4, 16, "random"), (2, 32, "leading"), (8, 40, "first_chunks")],
)
def test_prefix_sum_chaining_equals_dense_formula(name, chunk, block, mask, parallel):
    """Chunk states chained by prefix sums give eq. 4, also with masked keys, with chunks
    before the first visible key (pivots -1e30) and with a ragged last block; the
    backward's prefix and suffix sums give the gradients of the dense formula."""
    q, k, v = causal_inputs(L=40)
    g = torch.Generator().manual_seed(2)
    keep = {
        "none": None,
        "random": torch.rand(3, 40, generator=g) > 0.3,
        "leading": torch.arange(40).expand(3, 40) >= torch.tensor([[3], [11], [0]]),
        "first_chunks": torch.arange(40).expand(3, 40) >= 17,
    }[mask]
    feat = fused_features(name, q, k)
    args = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = lin.causal_exp(*args, keep, feat, chunk, block)
    ref_args = [x.clone().requires_grad_(True) for x in (q, k, v)]
    ref = _fused_dense(feat, *ref_args, keep)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    w = torch.randn(out.shape, dtype=out.dtype, generator=g)
    grads = torch.autograd.grad((out * w).sum(), args)
    ref_grads = torch.autograd.grad((ref * w).sum(), ref_args)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    prefix, suffix = parallel
    # every block, forward and backward (left padding included: see the next test)
    assert prefix.n == 2 * -(-40 // block) and suffix.n == -(-40 // block)


@pytest.mark.parametrize("name", MAPS)
def test_gradcheck_with_prefix_sums(name, parallel):
    """Finite differences agree with the analytic backward on the prefix-sum path."""
    q, k, v = causal_inputs(BH=2, L=14, d=3, e=2)
    feat = fused_features(name, q, k, M=6)
    keep = torch.ones(2, 14, dtype=torch.bool)
    keep[:, 0] = False
    keep[0, 9] = False
    args = (q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True))
    assert torch.autograd.gradcheck(
        lambda a, b, c: lin.causal_exp(a, b, c, keep, feat, 2, 14), args, fast_mode=True
    )
    assert parallel[0].n > 0 and parallel[1].n > 0


def _growing_keys(L, d, growth, dtype, seed=0):
    """Queries, keys and values whose key log features ``x @ W`` rise by about ``growth``
    along the sequence (steadily: by ``growth / L`` a row)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, L, d, generator=g, dtype=torch.float64) * 0.3
    k = torch.randn(2, L, d, generator=g, dtype=torch.float64) * 0.3
    k[..., 0] += torch.linspace(0.0, growth, L, dtype=torch.float64)
    v = torch.randn(2, L, 3, generator=g, dtype=torch.float64)
    W = torch.zeros(d, 12, dtype=torch.float64)
    W[0] = 1.0  # every feature carries the rising coordinate
    W[1:] = torch.randn(d - 1, 12, generator=g, dtype=torch.float64) * 0.5
    return (*(t.to(dtype) for t in (q, k, v)), W.to(dtype))


@pytest.mark.parametrize(
    "dtype,growth,prefix_sums",
    [
        (torch.float32, 30.0, True),
        (torch.float32, 200.0, False),  # spread > 60: e^-200 underflows float32
        (torch.float64, 300.0, True),
        (torch.float64, 1500.0, False),  # spread > 500
    ],
)
def test_spread_of_pivots_chooses_prefix_sums_or_the_chain(dtype, growth, prefix_sums, parallel):
    """Pivots that spread by less than the growth bound over a block are chained by prefix
    sums; by more, the block falls back to the chunk-by-chunk chain (the keys grow by
    less than the bound inside every chunk, so both stay on the one-pivot path). Both
    give eq. 4 to the dtype's precision, forward and backward, nothing lost or
    overflowing."""
    L = 128
    q, k, v, W = _growing_keys(L, 4, growth, dtype)
    feat = LinearLogFeatures(W)
    args = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = lin.causal_exp(*args, None, feat, 8, L)  # one block of 16 chunks
    ref_args = [x.double().clone().requires_grad_(True) for x in (q, k, v)]
    ref = causal_dense_log(ref_args[0] @ W.double(), ref_args[1] @ W.double(), ref_args[2])
    tol = 1e-9 if dtype == torch.float64 else 2e-4
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    w = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((out.double() * w).sum(), args)
    ref_grads = torch.autograd.grad((ref * w).sum(), ref_args)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=tol, atol=tol * float(b.abs().max()))
    # forward and backward prefix sums for the one block, or none
    assert parallel[0].n == (2 if prefix_sums else 0)


def test_prefix_sums_equal_the_chain_on_a_long_sequence(monkeypatch):
    """Prefix sums over a block of 64 chunks and the CPU's per-chunk chain over blocks of
    8 give the same outputs and gradients (float64, round-off)."""
    q, k, v = causal_inputs(BH=2, L=512, d=8, scale=0.8)
    feat = fused_features("sderf", q, k, M=24)
    res = []
    for parallel, block in ((False, None), (True, 512)):
        monkeypatch.setattr(lin, "_parallel_scan", lambda device, p=parallel: p)
        a, b, c = (x.clone().requires_grad_(True) for x in (q, k, v))
        out = lin.causal_exp(a, b, c, None, feat, 8, block)
        out.sin().sum().backward()
        res.append((out.detach(), a.grad, b.grad, c.grad))
    for x, y in zip(*res, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("parallel_scan", [False, True])
def test_left_padding_keeps_the_batched_path(parallel_scan, monkeypatch):
    """Left-padded rows (a masked first key and no key before it) no longer send their
    block chunk by chunk: the first visible key stands for the first key. Outputs and
    gradients equal eq. 4, padded rows give zero."""
    from attention_helpers import spy_paths

    monkeypatch.setattr(lin, "_parallel_scan", lambda device: parallel_scan)
    q, k, v = causal_inputs(BH=3, L=64)
    feat = fused_features("sderf", q, k)
    keep = torch.arange(64).expand(3, 64) >= torch.tensor([[5], [21], [40]])
    fwd = spy_paths(monkeypatch, lin, "_fwd_block")
    bwd = spy_paths(monkeypatch, lin, "_bwd_block")
    args = [x.clone().requires_grad_(True) for x in (q, k, v)]
    out = lin.causal_exp(*args, keep, feat, 8, 32)
    ref_args = [x.clone().requires_grad_(True) for x in (q, k, v)]
    ref = _fused_dense(feat, *ref_args, keep)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    assert torch.all(out[~keep] == 0)
    grads = torch.autograd.grad(out.cos().sum(), args)
    ref_grads = torch.autograd.grad(ref.cos().sum(), ref_args)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    assert fwd == [True, True] and bwd == [True, True]


def test_masked_first_key_after_earlier_keys_still_bounds_the_growth(monkeypatch):
    """With keys before the chunk, a masked first key does not hand the growth check to
    the chunk's first visible key: a query between them sees only the earlier keys, and a
    visible key 120 above them (float32: e^-120 underflows) must send the chunk to the
    exact path, so that query's output keeps its value."""
    from attention_helpers import spy_paths

    d, M, L = 3, 4, 32
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, L, d, generator=g) * 0.3
    k = torch.randn(1, L, d, generator=g) * 0.3
    v = torch.randn(1, L, 2, generator=g)
    W = torch.zeros(d, M)
    W[0] = 1.0
    k[0, 17, 0] += 120.0  # the chunk [16, 24): key 16 masked, 17 (visible) jumps
    keep = torch.ones(1, L, dtype=torch.bool)
    keep[0, 16] = False
    fwd = spy_paths(monkeypatch, lin, "_fwd_block")
    out = lin.causal_exp(q, k, v, keep, LinearLogFeatures(W), 8, 32)
    ref = causal_dense_log(q @ W, k @ W, v, keep)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
    assert fwd == [False]
