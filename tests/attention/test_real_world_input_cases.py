"""Inputs as real models make them: q, k, v sliced from a fused projection and transposed
to ``(B, H, L, d)`` (non-contiguous), keys expanded over heads (stride 0), extra batch
dims, head dims that are not powers of two, odd ``M``, lengths that are not a multiple
of the chunk, sequences shorter than the head dim; ``torch.autocast`` around the
backward, the moments and the decoding steps; gradcheck of the fitted maps where their
parameters are constants; the module's life cycle (state_dict, deepcopy, pickle,
``inference_mode``) and decoding from non-contiguous inputs."""

from __future__ import annotations

import copy
import io
import pickle
import re

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    Moments,
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)

FITTED = ("gerf", "saderf", "aderf", "sderf")
CAUSAL_MAPS = ("positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf", "relu", "elu")


def _fused_qkv(B=2, L=37, H=3, d=48, dtype=torch.float64, seed=0, scale=0.3):
    """q, k, v as ``qkv.chunk(3, -1)`` then ``view(B, L, H, d).transpose(1, 2)``: views
    of one (B, L, 3 H d) tensor, none of them contiguous."""
    g = torch.Generator().manual_seed(seed)
    qkv = scale * torch.randn(B, L, 3 * H * d, generator=g, dtype=dtype)
    return tuple(t.view(B, L, H, d).transpose(1, 2) for t in qkv.chunk(3, dim=-1))


def _per_head(mom):
    """Moments averaged over the batch dim (dim 0): one fit per head."""
    return Moments(*(t.mean(0) for t in (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)))


def _kwargs(name, causal, mom):
    kw = {"is_causal": causal, "random_state": 0}
    if causal and name in FITTED:
        kw["moments"] = mom
    return kw


# ------------------------------------------------------------------ layouts
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["positive", "sderf", "aderf", "relu", "trig", "hybrid_angular"])
def test_fused_projection_views_give_the_contiguous_result(name, causal):
    if causal and name in ("trig", "hybrid_angular"):
        pytest.skip("bidirectional only")
    q, k, v = _fused_qkv()  # d = 48, L = 37: not a multiple of the chunk
    assert not any(t.is_contiguous() for t in (q, k, v))
    qc, kc, vc = (t.contiguous() for t in (q, k, v))
    kw = _kwargs(name, causal, _per_head(attention_moments(qc, kc)))
    out = linear_attention(q, k, v, name, 65, chunk_size=16, **kw)  # M odd
    ref = linear_attention(qc, kc, vc, name, 65, chunk_size=16, **kw)
    # the same arithmetic on the same values: only the order of a few float64 sums may
    # differ with the memory layout, so a few ulps of the O(1) outputs
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-13)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["positive", "sderf"])
def test_expanded_keys_and_their_gradient(name, causal):
    """Keys and values of one head expanded (stride 0) over 4 query heads, as GQA-like
    sharing without ``enable_gqa``: the result and the gradient of the shared key equal
    those of materialised copies (the gradient summed over the heads)."""
    g = torch.Generator().manual_seed(1)
    B, H, L, d = 2, 4, 19, 80
    q = 0.3 * torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    k1, v1 = (0.3 * torch.randn(B, 1, L, d, generator=g, dtype=torch.float64) for _ in range(2))
    mom = _per_head(attention_moments(q, k1.expand(B, H, L, d)))
    kw = _kwargs(name, causal, mom)
    ks = k1.clone().requires_grad_()
    out = linear_attention(q, ks.expand(B, H, L, d), v1.expand(B, H, L, d), name, 33, **kw)
    out.square().sum().backward()
    kr = k1.repeat(1, H, 1, 1).requires_grad_()
    ref = linear_attention(q, kr, v1.repeat(1, H, 1, 1), name, 33, **kw)
    ref.square().sum().backward()
    # float64 rounding of O(1) outputs and gradients (sums over 4 heads of 19 terms)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-13)
    torch.testing.assert_close(ks.grad, kr.grad.sum(1, keepdim=True), rtol=0, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_two_batch_dims_equal_a_loop_over_the_first(causal):
    g = torch.Generator().manual_seed(13)
    q, k, v = (
        0.3 * torch.randn(2, 3, 4, 19, 80, generator=g, dtype=torch.float64) for _ in range(3)
    )
    mom = attention_moments(q, k)
    mom = Moments(*(t.mean((0, 1)) for t in (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)))
    kw = _kwargs("sderf", causal, mom)
    out = linear_attention(q, k, v, "sderf", 33, **kw)
    ref = torch.stack([linear_attention(q[i], k[i], v[i], "sderf", 33, **kw) for i in range(2)])
    # the same per-(batch, head) arithmetic: float64 rounding of O(1) outputs
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-13)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["positive", "sderf"])
def test_fused_views_against_exact_softmax_attention(name, causal):
    """Monte Carlo accuracy on fused-projection views (d = 80) against SDPA: the relative
    error shrinks like M^{-1/2}. Measured over seeds 0-5 at M = 1024 it is 0.032-0.044
    (spread +-10%), at M = 256 twice that; the bound 0.065 at M = 1024 is 1.5 times the
    largest (a scale off by 1.5, a bias that does not shrink, reads 0.08-0.09), and the
    ratio of the two errors must be near sqrt(4) = 2."""
    F = pytest.importorskip("torch.nn.functional")
    q, k, v = _fused_qkv(L=50, d=80, seed=3)
    exact = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    kw = _kwargs(name, causal, _per_head(attention_moments(q, k)))
    errs = [
        float((linear_attention(q, k, v, name, M, **kw) - exact).norm() / exact.norm())
        for M in (256, 1024)
    ]
    assert errs[1] < 0.065
    assert 1.4 < errs[0] / errs[1] < 2.8


# ------------------------------------------------------------------ autocast
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["positive", "hyperbolic", "sderf"])
def test_backward_inside_autocast_region_gives_the_float32_gradients(name, causal):
    """``loss.backward()`` called inside ``torch.autocast`` (common in training loops,
    though PyTorch recommends outside): the closed-form backward of the positive maps
    must run in float32 as its forward did, not mix autocast's bfloat16 products into
    its float32 state (bidirectional: a dtype error from ``baddbmm_``). Bidirectional
    relu / elu / trig use plain autograd, whose backward follows autocast as PyTorch's
    own ops do."""
    g = torch.Generator().manual_seed(2)
    q0, k0, v0 = (torch.randn(1, 2, 9, 8, generator=g) for _ in range(3))
    mom = attention_moments(q0, k0)
    kw = _kwargs(name, causal, mom)
    grads = []
    for inside in (False, True):
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = linear_attention(q, k, v, name, 16, **kw)
            loss = out.float().square().sum()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        assert out.dtype == torch.float32
        grads.append([t.grad for t in (q, k, v)])
    for a, b in zip(*grads, strict=True):
        # the same float32 computation (autocast off inside): equal up to float32 sums
        # of O(10) terms of size O(1), i.e. well within 1e-5 relative
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_module_trains_under_autocast_with_backward_inside(causal):
    fav = FavorAttention(48, 4, feature_map="sderf", n_features=32, random_state=0)
    fav.eval()  # the same features and statistics for both passes
    x0 = torch.randn(2, 13, 48, generator=torch.Generator().manual_seed(9))
    grads = []
    for inside in (False, True):
        x = x0.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = fav(x, x, x, is_causal=causal)
            assert out.dtype == torch.bfloat16  # out_proj follows autocast
            loss = out.float().square().mean()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        grads.append(x.grad)
    # the projections' backward runs in bfloat16 either way (autocast recorded them);
    # the attention's in float32 either way: the same arithmetic, so equal up to float32
    # rounding of the attention gradients (far below one bfloat16 ulp, 2^-8 relative)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ autograd
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", ["positive", "sderf"])
def test_gradcheck_small_cases(name, causal):
    """float64 gradcheck with L = 7 over chunks of 4 (a partial chunk). A fitted map is
    differentiable as documented only with its parameters constant: given ``moments``
    (bidirectional ones fitted per call are constants for autograd by design)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (0.5 * torch.randn(1, 2, 7, 5, generator=g, dtype=torch.float64) for _ in range(3))
    calib = (0.5 * torch.randn(4, 2, 20, 5, generator=g, dtype=torch.float64) for _ in range(2))
    kw = {"is_causal": causal, "random_state": 0, "chunk_size": 4}
    if name == "sderf":
        kw["moments"] = _per_head(attention_moments(*calib))
    args = tuple(t.requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(lambda a, b, c: linear_attention(a, b, c, name, 9, **kw), args)


@pytest.mark.parametrize("causal", [False, True])
def test_only_some_inputs_require_grad(causal):
    q0, k0, v0 = _fused_qkv(B=1, L=11, H=2, d=10, seed=4)
    kw = _kwargs("sderf", causal, _per_head(attention_moments(q0, k0)))
    full = [t.detach().clone().requires_grad_() for t in (q0, k0, v0)]
    linear_attention(*full, "sderf", 17, **kw).square().sum().backward()
    for i in range(3):
        ts = [t.detach().clone().requires_grad_(j == i) for j, t in enumerate((q0, k0, v0))]
        linear_attention(*ts, "sderf", 17, **kw).square().sum().backward()
        torch.testing.assert_close(ts[i].grad, full[i].grad, rtol=0, atol=0)
        assert all(ts[j].grad is None for j in range(3) if j != i)


# ------------------------------------------------------------------ module life cycle
def _trained_module(causal, feature_map="sderf"):
    torch.manual_seed(5)
    fav = FavorAttention(80, 4, feature_map=feature_map, n_features=33, redraw_interval=2)
    for _ in range(3):
        x = torch.randn(2, 13, 80)
        fav(x, x, x, is_causal=causal)[0].sum().backward()
    return fav.eval()


@pytest.mark.parametrize("causal", [False, True])
def test_module_copies_reproduce_outputs(causal):
    fav = _trained_module(causal)
    x = torch.randn(13, 2, 80).transpose(0, 1)  # non-contiguous batch-first input
    with torch.no_grad():
        ref, _ = fav(x, x, x, is_causal=causal)
        fresh = FavorAttention(80, 4, feature_map="sderf", n_features=33, random_state=9)
        fresh.load_state_dict(fav.state_dict())
        buf = io.BytesIO()
        torch.save(fav, buf)
        buf.seek(0)
        copies = [
            fresh.eval(),
            copy.deepcopy(fav),
            pickle.loads(pickle.dumps(fav)),
            torch.load(buf, weights_only=False),
        ]
        for other in copies:
            assert torch.equal(other(x, x, x, is_causal=causal)[0], ref)


# ------------------------------------------------------------------ decoding
@pytest.mark.parametrize("name", CAUSAL_MAPS)
def test_prefill_and_steps_from_fused_views_equal_causal_pass(name):
    q, k, v = _fused_qkv(L=37, d=48)
    kw = _kwargs(name, True, _per_head(attention_moments(q, k)))
    full = linear_attention(q, k, v, name, 33, **kw)
    kw.pop("is_causal")
    state = init_decoding_state((2, 3), 48, name, 33, dtype=torch.float64, **kw)
    outs = []
    with torch.no_grad():
        y, state = linear_attention_step(q[..., :19, :], k[..., :19, :], v[..., :19, :], state)
        outs.append(y)
        for t in range(19, 37):
            y, state = linear_attention_step(
                q[..., t, :], k[..., t, :], v[..., t, :], state, inplace=True
            )
            outs.append(y.unsqueeze(-2))
    # the step computes the causal pass's ratio with the same stabilisers (guide,
    # "Why stepping equals the causal pass"): equal to float64 rounding of O(1) values
    torch.testing.assert_close(torch.cat(outs, dim=-2), full, rtol=0, atol=1e-12)
    assert state.t == 37


def test_step_with_another_batch_size_names_the_remedy():
    q, k, v = _fused_qkv(B=2)
    state = init_decoding_state((2, 3), 48, "positive", 16, random_state=0, dtype=torch.float64)
    with pytest.raises(ValueError, match=re.escape("the state's batch_shape=(2, 3)")):
        linear_attention_step(q[:1, :, 0], k[:1, :, 0], v[:1, :, 0], state)
    fav = FavorAttention(48, 4, feature_map="positive", n_features=16, random_state=0).eval()
    with pytest.raises(ValueError, match="init_state"):
        fav.step(torch.randn(1, 48), torch.randn(1, 48), torch.randn(1, 48), fav.init_state(2))


@pytest.mark.parametrize("causal", [False, True])
def test_redraw_under_inference_mode_leaves_ordinary_buffers(causal):
    """A training-mode module run under ``torch.inference_mode()`` (an evaluation loop
    that forgot ``eval()``) redraws its projections there: the new buffers must stay
    ordinary tensors, as BatchNorm's running statistics do, so that a later
    ``load_state_dict`` (an in-place copy) and training still work."""
    torch.manual_seed(6)
    fav = FavorAttention(48, 4, feature_map="sderf", n_features=32, redraw_interval=1)
    x = torch.randn(2, 9, 48)
    with torch.inference_mode():
        for _ in range(2):  # the second call redraws
            fav(x, x, x, is_causal=causal)
    assert not any(b.is_inference() for b in fav.buffers())
    with torch.inference_mode():
        fav.redraw_features()  # called by hand there too
    assert not any(b.is_inference() for b in fav.buffers())
    src = FavorAttention(48, 4, feature_map="sderf", n_features=32, random_state=1)
    src(x, x, x, is_causal=causal)  # statistics (causal) and projections to load
    fav.load_state_dict(src.state_dict())
    with torch.no_grad():
        assert torch.equal(
            fav.eval()(x, x, x, is_causal=causal)[0], src.eval()(x, x, x, is_causal=causal)[0]
        )


@pytest.mark.parametrize("batch_first", [True, False])
def test_step_shape_error_names_the_modules_layout(batch_first):
    """A wrong-rank token (an unbatched ``(E,)`` vector) to a sequence-first module: the
    error names that module's block layout, ``(T, N, E)``, not the batch-first one."""
    fav = FavorAttention(48, 4, n_features=16, batch_first=batch_first, random_state=0).eval()
    layout = "(N, T, E)" if batch_first else "(T, N, E)"
    x = torch.randn(48)
    with pytest.raises(
        ValueError, match=re.escape(f"query_t must be (N, E) for one token or {layout}")
    ) as err:
        fav.step(x, x, x, fav.init_state(1))
    assert "like query_t" not in str(err.value)
    with pytest.raises(ValueError, match="like query_t"):  # the other inputs: as query_t
        fav.step(torch.randn(1, 48), x, x, fav.init_state(1))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_sderf_gradients_of_a_short_sequence_do_not_depend_on_the_layout(dtype):
    """SDERF fitted per call on a sequence shorter than the head dim (L = 21 queries and
    keys, d = 48): the second moment ``N`` of FAVOR# Thm 4.3 has rank 2L - 1 = 41, so a
    7-dimensional null space whose eigenvectors LAPACK picks arbitrarily. The outputs do
    not see that choice (the inputs have no component there) but the closed-form
    gradients ``dl W_x^T`` do: a transposed view and its contiguous copy, whose moments
    differ by rounding, gave gradients 30% apart. The null space's basis must be a
    function of the data alone, like the eigenvectors' signs."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (0.3 * torch.randn(2, 3, 48, 21, generator=g, dtype=dtype).mT for _ in range(3))
    grads = []
    for ins in ((q, k, v), tuple(t.contiguous() for t in (q, k, v))):
        ts = [t.detach().clone().requires_grad_() for t in ins]
        linear_attention(*ts, "sderf", 64, random_state=0).square().sum().backward()
        grads.append([t.grad for t in ts])
    # the fit is continuous in the moments once the null basis is canonical: rounding of
    # the moments (eps of the dtype, relative to the eigenvalue gap of about 5e-4 of the
    # largest) moves the gradients by about eps / 5e-4; allow 1e3 eps relative
    eps = torch.finfo(dtype).eps
    for a, b in zip(*grads, strict=True):
        assert float((a - b).norm() / b.norm()) < 1e3 * eps


def test_sderf_null_space_basis_is_canonical():
    """The fit itself: rank-deficient moments (zero columns, as inputs with unused
    features give) perturbed by rounding give the same rotation to that rounding."""
    from kernelkit.features.favor import Moments as FMoments
    from kernelkit.features.favor import fit_sderf

    g = torch.Generator().manual_seed(8)
    x, y = (torch.randn(4, 500, 16, generator=g, dtype=torch.float64) for _ in range(2))
    x[..., 10:], y[..., 10:] = 0.0, 0.0  # a 6-dimensional null space
    mom = FMoments(x.mean(1), x.mT @ x / 500, y.mean(1), y.mT @ y / 500)
    noise = 1e-15 * torch.randn(4, 16, 16, generator=g, dtype=torch.float64)
    noisy = FMoments(mom.mean_x, mom.second_x + (noise + noise.mT), mom.mean_y, mom.second_y)
    Q1, a1 = fit_sderf(mom)
    Q2, a2 = fit_sderf(noisy)
    # a perturbation of 1e-15 against an eigenvalue gap of O(1): eigenvectors move by
    # about 1e-15; 1e-10 leaves room for the d x d products and still fails an arbitrary
    # basis (O(1) apart)
    torch.testing.assert_close(Q1, Q2, rtol=0, atol=1e-10)
    torch.testing.assert_close(a1, a2, rtol=0, atol=1e-12)
    assert torch.allclose(
        Q1 @ Q1.mT, torch.eye(16, dtype=torch.float64).expand(4, 16, 16), atol=1e-12
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_moments_under_autocast_are_computed_in_float32(dtype):
    """Moments of half-precision projections, taken inside the ``torch.autocast`` region
    that made them (as ``FavorAttention`` does for its running statistics): their
    products must not run in autocast's half precision, whose rounded sums lose bits
    (bfloat16) or overflow to inf (float16, sums of 4096 squares of 30)."""
    g = torch.Generator().manual_seed(10)
    q, k = (30.0 * torch.randn(2, 4096, 16, generator=g) for _ in range(2))
    q, k = q.to(dtype), k.to(dtype)
    ref = attention_moments(q, k)
    with torch.autocast("cpu", dtype=dtype):
        got = attention_moments(q, k)
    # the same float32 sums of the same half-precision inputs, reported in float64:
    # equal up to float32 summation order (4096 terms: well within 1e-5 relative)
    for a, b in zip(
        (got.mean_x, got.second_x, got.mean_y, got.second_y),
        (ref.mean_x, ref.second_x, ref.mean_y, ref.second_y),
        strict=True,
    ):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()))


def test_module_running_statistics_under_float16_autocast():
    """A causal FAVOR# training step under float16 autocast with large activations (x of
    scale 30): the running statistics stay finite and the next step fits from them
    (was: inf second moments, then LinAlgError from eigh)."""
    torch.manual_seed(11)
    fav = FavorAttention(32, 2, feature_map="sderf", n_features=16, random_state=0)
    ref = copy.deepcopy(fav)
    x = 30.0 * torch.randn(1, 4096, 32)
    with torch.autocast("cpu", dtype=torch.float16):
        for _ in range(2):
            out, _ = fav(x, x, x, is_causal=True)
    assert torch.isfinite(out).all()
    for _ in range(2):
        ref(x, x, x, is_causal=True)
    # float16 projections (2^-11 relative rounding per entry) against float32 ones:
    # second moments within about 2 * 2^-11 ~ 1e-3 relative; allow 1e-2
    for name in ("running_mean_q", "running_second_q", "running_mean_k", "running_second_k"):
        a, b = getattr(fav, name), getattr(ref, name)
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2 * float(b.abs().max()))


@pytest.mark.parametrize("name", ["positive", "sderf"])
def test_decoding_step_under_autocast_computes_in_float32(name):
    """A generation loop inside ``torch.autocast`` (the usual way to run a model in
    mixed precision): the step must compute in float32 as the causal forward does under
    autocast, not in bfloat16 (outputs 2e-2 off and a state accumulating bfloat16
    products)."""
    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=g) for _ in range(3))
    mom = _per_head(attention_moments(q, k)) if name == "sderf" else None
    state0 = init_decoding_state((1, 2), 16, name, 32, random_state=0, moments=mom)
    outs = []
    for enabled in (False, True):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            y, state = linear_attention_step(q[..., :39, :], k[..., :39, :], v[..., :39, :], state0)
            y_t, state = linear_attention_step(q[..., 39, :], k[..., 39, :], v[..., 39, :], state)
            full = linear_attention(q, k, v, name, 32, is_causal=True, random_state=0, moments=mom)
        assert y.dtype == y_t.dtype == torch.float32
        outs.append((y, y_t, state.kvz, full))
    # the same float32 arithmetic with autocast on and off: equal up to float32
    # rounding (1e-5 relative; bfloat16 products are off by about 2^-8 = 4e-3)
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    # and the steps equal the causal forward under autocast, as they do without it
    torch.testing.assert_close(outs[1][1], outs[1][3][..., 39, :], rtol=1e-5, atol=1e-5)
