"""The attention kernels' in-place exponential (``exp2(t log2 e)`` on SIMD CPU builds):
its documented error bound, its fallbacks and autograd, and the kernels that use it
(causal forward / backward, bidirectional stream, decoding chunks) against a dense
log-space reference at large query / key norms, with masked keys, GQA, L = 1 and odd
head dims."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit._backend import exponential  # noqa: E402
from kernelkit._backend.exponential import LOG2E, exp2_is_faster, exp_  # noqa: E402
from kernelkit.attention import (  # noqa: E402
    attention_moments,
    draw_features,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)


def _exact_exp(t):
    """exp of the entries of ``t`` in extended precision (x87 long double where NumPy has
    it: 11 more bits than float64), as a float64 array: the reference for the bound."""
    return np.exp(t.double().numpy().astype(np.longdouble))


# ------------------------------------------------------------------ exp_ itself
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exp_is_within_its_documented_error_bound(dtype):
    if np.finfo(np.longdouble).eps >= np.finfo(np.float64).eps:
        pytest.skip("no extended-precision long double for the float64 reference")
    eps = torch.finfo(dtype).eps
    # arguments of every sign and size the kernels make: stabilised (<= 0) and the
    # decoding chunk's key features (up to the growth bound, 60 in float32)
    t = torch.linspace(-80.0, 60.0, 400_001, dtype=torch.float64).to(dtype)
    got = exp_(t.clone()).double().numpy().astype(np.longdouble)
    exact = _exact_exp(t)
    # the docstring's bound: rounding t log2 e contributes at most |t| eps relative, the
    # exponential's own rounding one ulp (eps) -- so (|t| + 1) eps in all
    bound = (np.abs(t.double().numpy()) + 1.0) * eps * exact
    assert np.all(np.abs(got - exact) <= bound)
    # and for stabilised arguments (t <= 0) at most eps of the largest term, exp(0) = 1
    neg = t.numpy() <= 0
    assert float(np.max(np.abs(got - exact)[neg])) <= eps


def test_exp_bound_needs_the_ulp_term():
    """The rounding of ``t log2 e`` alone does not bound the error: near ``t = 0`` (and
    around ``-ln 2``, one ulp from 1) the exponential's own rounding dominates, so the
    bound must carry its ulp (this is what an ``|t| eps``-only bound, or ``eps / e`` of
    the largest term, gets wrong)."""
    if not exp2_is_faster(torch.zeros(1)):
        pytest.skip("this build computes exp_ with exp: nothing rounds t log2 e")
    eps = torch.finfo(torch.float32).eps
    t = torch.linspace(-1.0, 0.0, 200_001, dtype=torch.float32)
    diff = (exp_(t.clone()).double() - torch.exp(t).double()).abs()
    assert float(diff.max()) > eps / math.e  # above what an eps/e claim would allow


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.complex64])
def test_exp_falls_back_to_exp_where_exp2_is_not_faster(dtype):
    t = (torch.linspace(-5, 2, 101) if not dtype.is_complex else torch.randn(101)).to(dtype)
    assert not exp2_is_faster(t)
    got = exp_(t.clone())
    assert torch.equal(got, torch.exp(t))  # the same kernel: bit for bit


def test_exp_uses_exp2_on_simd_cpu_builds_only(monkeypatch):
    t = torch.linspace(-3, 3, 7, dtype=torch.float64)
    monkeypatch.setattr(exponential, "_CPU_EXP2", False)
    assert not exp2_is_faster(t)
    assert torch.equal(exp_(t.clone()), torch.exp(t))
    monkeypatch.setattr(exponential, "_CPU_EXP2", True)
    assert exp2_is_faster(t)
    assert torch.equal(exp_(t.clone()), torch.exp2(t * LOG2E))


def test_cpu_capability_is_read_on_import_of_the_attention_kernels():
    """torch.compile cannot trace ``torch.backends.cpu.get_cpu_capability()`` (a torch op
    that returns a str): the attention kernels read it on import, so that compiled graphs
    only read the cached global."""
    import kernelkit.attention._linear  # noqa: F401

    assert isinstance(exponential._CPU_EXP2, bool)
    assert exponential._CPU_EXP2 == (torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"))


def test_exp_is_in_place_and_differentiable():
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)

    def f(x):
        t = x * 3.0 - 1.0  # a fresh tensor autograd records
        out = exp_(t)
        assert out is t
        return out

    assert torch.autograd.gradcheck(f, (x,))


# ------------------------------------------------------------------ dense reference
def _log_features(x, W, hyperbolic):
    # log of the positive (FAVOR+) features up to a constant: W x - |x|^2 / 2 (the
    # hyperbolic map: both signs of W x); the constants cancel in the ratio
    lin = x @ W.T
    if hyperbolic:
        lin = torch.cat([lin, -lin], dim=-1)
    return lin - 0.5 * (x * x).sum(-1, keepdim=True)


def _dense_reference(q, k, v, W, causal, keep=None, hyperbolic=False):
    """Random-feature attention in log space, float64: ``log A_ij = logsumexp_m (lq_im +
    lk_jm)``, then a softmax over the visible keys (no overflow at any norm)."""
    d = q.shape[-1]
    s = d**-0.25
    lq = _log_features(q.double() * s, W.double(), hyperbolic)  # (..., L, M)
    lk = _log_features(k.double() * s, W.double(), hyperbolic)  # (..., S, M)
    logA = torch.logsumexp(lq[..., :, None, :] + lk[..., None, :, :], dim=-1)  # (..., L, S)
    L, S = logA.shape[-2:]
    vis = torch.ones(L, S, dtype=torch.bool)
    if causal:
        vis = torch.ones(L, S, dtype=torch.bool).tril()
    if keep is not None:
        vis = vis & keep[..., None, :]
    logA = logA.masked_fill(~vis, -math.inf)
    P = torch.softmax(logA, dim=-1).nan_to_num(0.0)  # rows without a visible key: 0
    return P @ v.double(), lq, lk


def _tolerance(lq, lk, dtype):
    # every feature product exp(lq + lk) carries a relative error of about eps |lq + lk|:
    # eps |t| from rounding t log2 e in exp_ (its documented bound), about as much again
    # from the sums that make lq and lk and from the stabilising shifts; the outputs are
    # convex combinations of the values (|v| <= 1 here), so the error carries over: 2 eps
    # (max|lq| + max|lk| + 1), the 1 for the exponentials' own rounding and the ratio
    # (measured: up to ~1/8 of this on these cases)
    eps = torch.finfo(dtype).eps
    return 2 * eps * (float(lq.abs().max()) + float(lk.abs().max()) + 1.0)


CASES = [
    # (norm of q and k rows, L, d)
    (1.0, 1, 8),
    (1.0, 37, 31),
    (10.0, 37, 33),
    (30.0, 70, 16),
    (50.0, 70, 33),
]


def _unit_rows(shape, norm, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    return x / x.norm(dim=-1, keepdim=True) * norm


@pytest.mark.parametrize("hyperbolic", [False, True], ids=["positive", "hyperbolic"])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize(("norm", "L", "d"), CASES)
def test_kernels_match_the_dense_log_space_reference(norm, L, d, causal, hyperbolic):
    name = "hyperbolic" if hyperbolic else "positive"
    q = _unit_rows((2, 2, L, d), norm, 0)
    k = _unit_rows((2, 2, L, d), norm, 1)
    v = _unit_rows((2, 2, L, 3), 1.0, 2)
    W = torch.from_numpy(draw_features(name, 16, d, 0)["W"])
    keep = torch.ones(2, L, dtype=torch.bool)
    keep[1, 1::3] = False  # some padded keys in the second batch element
    out = linear_attention(
        q,
        k,
        v,
        name,
        16,
        is_causal=causal,
        projection=W,
        key_padding_mask=~keep[:, None],
        chunk_size=8,
    )
    ref, lq, lk = _dense_reference(q, k, v, W, causal, keep[:, None], hyperbolic)
    tol = _tolerance(lq, lk, torch.float64)
    assert float((out - ref).abs().max()) <= tol


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_float32_kernels_match_the_dense_reference_at_large_norms(causal):
    L, d = 70, 33
    q = _unit_rows((1, 2, L, d), 20.0, 3)
    k = _unit_rows((1, 2, L, d), 20.0, 4)
    v = _unit_rows((1, 2, L, 3), 1.0, 5)
    W = torch.from_numpy(draw_features("positive", 16, d, 1)["W"])
    out = linear_attention(
        q.float(),
        k.float(),
        v.float(),
        "positive",
        16,
        is_causal=causal,
        projection=W,
        chunk_size=16,
    )
    # the float32 inputs (rounded) are the reference's inputs
    ref, lq, lk = _dense_reference(q.float(), k.float(), v.float(), W.float(), causal)
    assert out.dtype == torch.float32
    assert float((out.double() - ref).abs().max()) <= _tolerance(lq, lk, torch.float32)


def test_gqa_matches_the_dense_reference():
    L, d = 21, 31
    q = _unit_rows((1, 4, L, d), 10.0, 6)
    k = _unit_rows((1, 2, L, d), 10.0, 7)
    v = _unit_rows((1, 2, L, 3), 1.0, 8)
    W = torch.from_numpy(draw_features("positive", 16, d, 2)["W"])
    for causal in (False, True):
        out = linear_attention(
            q, k, v, "positive", 16, is_causal=causal, projection=W, enable_gqa=True, chunk_size=4
        )
        kr, vr = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        ref, lq, lk = _dense_reference(q, kr, vr, W, causal)
        assert float((out - ref).abs().max()) <= _tolerance(lq, lk, torch.float64)


@pytest.mark.parametrize("block", [1, 5], ids=["token", "chunk"])
def test_decoding_matches_the_dense_reference_at_large_norms(block):
    # the decoding chunk's key features run up to e^G above 1 (exp_ of positive
    # arguments); single tokens take the token path
    L, d = 15, 33
    q = _unit_rows((1, 2, L, d), 30.0, 9)
    k = _unit_rows((1, 2, L, d), 30.0, 10)
    v = _unit_rows((1, 2, L, 3), 1.0, 11)
    W = torch.from_numpy(draw_features("positive", 16, d, 3)["W"])
    state = init_decoding_state((1, 2), d, "positive", 16, e=3, projection=W, dtype=torch.float64)
    outs = []
    for lo in range(0, L, block):
        o, state = linear_attention_step(
            q[..., lo : lo + block, :],
            k[..., lo : lo + block, :],
            v[..., lo : lo + block, :],
            state,
        )
        outs.append(o)
    ref, lq, lk = _dense_reference(q, k, v, W, causal=True)
    assert float((torch.cat(outs, -2) - ref).abs().max()) <= _tolerance(lq, lk, torch.float64)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name", ["positive", "hyperbolic"])
def test_gradcheck_against_autograd_of_the_dense_reference(name, causal):
    """The closed-form backward of the kernels (exp_ on the recomputed features) equals
    autograd through the dense reference, float64, masked keys, L = 5, d = 3."""
    q = _unit_rows((1, 1, 5, 3), 3.0, 12).requires_grad_(True)
    k = _unit_rows((1, 1, 5, 3), 3.0, 13).requires_grad_(True)
    v = _unit_rows((1, 1, 5, 2), 1.0, 14).requires_grad_(True)
    W = torch.from_numpy(draw_features(name, 8, 3, 4)["W"])
    keep = torch.tensor([[True, False, True, True, False]])

    def f(q, k, v):
        return linear_attention(
            q,
            k,
            v,
            name,
            8,
            is_causal=causal,
            projection=W,
            key_padding_mask=~keep[:, None],
            chunk_size=2,
        )

    assert torch.autograd.gradcheck(f, (q, k, v))
    g = torch.randn(1, 1, 5, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = torch.autograd.grad((f(q, k, v) * g).sum(), (q, k, v))
    ref_out = _dense_reference(q, k, v, W, causal, keep[:, None], name == "hyperbolic")[0]
    ref = torch.autograd.grad((ref_out * g).sum(), (q, k, v))
    for a, b in zip(got, ref, strict=True):
        # float64, |log features| <= ~15 here: 1e-11 is ~ 2^12 eps x 15
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


# ------------------------------------------------------------------ check_finite=True
@pytest.mark.parametrize(
    ("name", "causal", "where"),
    [
        ("sderf", False, "q"),  # the per-call fit's second moment overflows float32
        ("saderf", False, "k"),
        ("positive", False, "k"),  # a key's squared norm overflows float32
        ("positive", True, "k"),
    ],
)
def test_check_finite_true_is_at_least_the_default_check_on_eager_cpu(name, causal, where):
    """Finite float32 inputs whose features overflow: the default (None) raises a clear
    ``ValueError`` on eager CPU; ``check_finite=True`` ("also checked" on accelerators and
    in compiled graphs) must too, not an eigh failure, NaN output or a dropped key."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 20, 16, generator=g) for _ in range(3))
    {"q": q, "k": k}[where][0, 1, 5] *= 1e20  # |x|^2 ~ 1e41 > float32 max
    mom = None
    if causal and name != "positive":
        mom = attention_moments(torch.randn(64, 16, generator=g), torch.randn(64, 16, generator=g))
    for check in (None, True):
        with pytest.raises(ValueError, match="not finite although"):
            linear_attention(
                q,
                k,
                v,
                name,
                16,
                is_causal=causal,
                random_state=0,
                moments=mom,
                check_finite=check,
            )
    # NaN inputs (otherwise moderate): the error still names the input
    q, k = torch.randn(1, 2, 20, 16, generator=g), torch.randn(1, 2, 20, 16, generator=g)
    q[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="q contains NaN or inf"):
        linear_attention(q, k, v, name, 16, is_causal=causal, random_state=0, check_finite=True)
    with pytest.raises(TypeError, match="check_finite must be None, True or False"):
        linear_attention(q, k, v, name, 16, is_causal=causal, random_state=0, check_finite=1)
