"""CUDA: linear attention, its gradients, the decoding step and the module give on a GPU
what they give on the CPU, in float64 to round-off and in bfloat16 to its precision; the
seeded hot path makes no host sync; compiled (fullgraph) equals eager.

Skipped where no CUDA device is present (the CPU suite covers the same code paths)."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
pytestmark = pytest.mark.torch

from kernelkit.attention import (  # noqa: E402
    FEATURE_MAPS,
    FITTED_MAPS,
    FavorAttention,
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)

CUDA = torch.device("cuda")
B, H, L, D, E, M = 2, 3, 150, 8, 5, 32
#: maps that can be causal (trig features are signed: bidirectional only)
CAUSAL_MAPS = [m for m in FEATURE_MAPS if m not in ("trig", "hybrid_angular")]


def _qkv(dtype=torch.float64, seed=0, L=L, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, H, L, D, generator=g, dtype=dtype) * 0.7 for _ in range(2))
    v = torch.randn(B, H, L, E, generator=g, dtype=dtype)
    return tuple(t.to(device) for t in (q, k, v))


def _moments(device="cpu", dtype=torch.float64):
    qc, kc, _ = _qkv(dtype=dtype, seed=7, L=64, device=device)  # calibration data
    return attention_moments(qc, kc)


def _kw(name, causal, device="cpu"):
    kw = {"feature_map": name, "n_features": M, "is_causal": causal, "random_state": 3}
    if causal and name in FITTED_MAPS:
        kw["moments"] = _moments(device)
    return kw


def _rel(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", FEATURE_MAPS)
def test_cuda_equals_cpu_forward_and_backward_float64(name, causal):
    if causal and name not in CAUSAL_MAPS:
        pytest.skip(f"{name} features are not positive: no causal mode")
    g = torch.Generator().manual_seed(11)
    grad = torch.randn(B, H, L, E, generator=g, dtype=torch.float64)
    outs, grads = {}, {}
    for dev in ("cpu", "cuda"):
        leaves = [t.requires_grad_(True) for t in _qkv(device=dev)]
        out = linear_attention(*leaves, **_kw(name, causal, dev))
        assert out.device.type == dev and out.dtype == torch.float64
        out.backward(grad.to(dev))
        outs[dev], grads[dev] = out, [t.grad for t in leaves]
    assert _rel(outs["cuda"], outs["cpu"]) < 1e-9
    for gc, gg in zip(grads["cpu"], grads["cuda"], strict=True):
        assert _rel(gg, gc) < 1e-8


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", ["positive", "saderf", "sderf"])
def test_cuda_bfloat16_is_computed_in_float32(name, causal):
    """bf16 inputs: the output is bf16, equal to the float32 computation on the same
    (bf16-rounded) inputs to bf16 rounding of the output."""
    q, k, v = (t.to(CUDA, torch.bfloat16) for t in _qkv(torch.float32))
    kw = _kw(name, causal, "cuda")
    out = linear_attention(q, k, v, **kw)
    ref = linear_attention(q.float(), k.float(), v.float(), **kw)
    assert out.dtype == torch.bfloat16 and out.device.type == "cuda"
    assert _rel(out, ref) < 1e-2
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    linear_attention(*leaves, **kw).float().square().sum().backward()
    assert all(t.grad.dtype == torch.bfloat16 and torch.isfinite(t.grad).all() for t in leaves)


@pytest.mark.parametrize("name", CAUSAL_MAPS)
def test_cuda_decoding_steps_equal_causal_attention(name):
    q, k, v = _qkv(device="cuda")
    mom = _moments("cuda") if name in FITTED_MAPS else None
    full = linear_attention(q, k, v, feature_map=name, n_features=M, is_causal=True,
                            random_state=3, moments=mom)  # fmt: skip
    state = init_decoding_state(
        (B, H), D, name, M, e=E, random_state=3, moments=mom, dtype=torch.float64, device=CUDA
    )
    outs = []
    for lo, hi in ((0, 1), (1, 40), *((t, t + 1) for t in range(40, L))):
        o, state = linear_attention_step(q[..., lo:hi, :], k[..., lo:hi, :], v[..., lo:hi, :],
                                         state, inplace=True)  # fmt: skip
        outs.append(o)
    steps = torch.cat(outs, dim=-2)
    assert steps.device.type == "cuda"
    assert _rel(steps, full) < 1e-10


@pytest.mark.parametrize("name", ["positive", "sderf"])
def test_cuda_module_equals_cpu_module(name):
    torch.manual_seed(0)
    cpu = FavorAttention(16, 2, feature_map=name, n_features=M, random_state=0).double()
    gpu = copy.deepcopy(cpu).to(CUDA)
    x = torch.randn(2, 30, 16, dtype=torch.float64)
    for causal in (False, True):
        ref, _ = cpu(x, x, x, is_causal=causal)
        out, _ = gpu(x.to(CUDA), x.to(CUDA), x.to(CUDA), is_causal=causal)
        assert _rel(out, ref) < 1e-9
    for name_, buf in cpu.named_buffers():
        assert _rel(dict(gpu.named_buffers())[name_].double(), buf.double()) < 1e-9 or (
            buf.numel() == 0 or buf.double().norm() == 0
        )


@pytest.mark.parametrize("name", ["positive", "saderf"])
def test_cuda_seeded_bidirectional_call_makes_no_host_sync(name):
    """After the first call (which draws the projections and copies them to the device
    once), a seeded bidirectional float32 call never waits for the device (the
    finite-input check is off on CUDA by default). SDERF / ADERF / GERF are left out:
    ``torch.linalg.eigh`` itself synchronises on CUDA to check its solver's status. The
    causal scan reads one scalar per block of chunks to choose its path (user guide,
    "Attention", GPU measurements)."""
    q, k, v = _qkv(torch.float32, device="cuda")
    kw = _kw(name, False, "cuda")
    linear_attention(q, k, v, **kw)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = linear_attention(q, k, v, **kw)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(out).all()


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_cuda_compiled_fullgraph_equals_eager(causal):
    torch._dynamo.reset()
    q, k, v = (t.requires_grad_(True) for t in _qkv(torch.float32, device="cuda"))
    kw = _kw("sderf", causal, "cuda")

    def f(q, k, v):
        return linear_attention(q, k, v, **kw)

    ref = f(q, k, v)
    ref.square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    out = torch.compile(f, fullgraph=True)(q, k, v)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    for t, g in zip((q, k, v), grads, strict=True):
        torch.testing.assert_close(t.grad, g, rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()
