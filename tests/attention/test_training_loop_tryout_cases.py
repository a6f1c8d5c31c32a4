"""A practitioner's training loop around FavorAttention (tryout).

A tiny transformer block (embedding, LayerNorm, FavorAttention, LayerNorm, MLP, linear
head; E = 32, 4 heads, L = 16) trained with AdamW on a shift task (predict the previous
token causally, the next one bidirectionally) for every feature map, against the same
block with torch's scaled_dot_product_attention; checkpoint and resume (model and
optimizer state dicts mid-training, redraws and running statistics included),
determinism, gradient accumulation, clipping, bfloat16 autocast, eval-mode generation
with the step API, torch.compile, frozen parts, a float64 switch mid-training and the
registration of parameters and buffers."""

from __future__ import annotations

import io
import math

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402

from kernelkit.attention import FEATURE_MAPS, FITTED_MAPS, FavorAttention  # noqa: E402

V, L, E, H = 8, 16, 32, 4  # vocabulary, sequence length, model dim, heads
CAUSAL_MAPS = [m for m in FEATURE_MAPS if m not in ("trig", "hybrid_angular")]


class _Block(nn.Module):
    """Embedding + pre-norm attention + pre-norm MLP + head. ``feature_map="sdpa"``:
    the same block with torch's scaled_dot_product_attention (the reference)."""

    def __init__(self, feature_map, n_features=16, redraw_interval=3, random_state=0, **kw):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.pos = nn.Parameter(0.5 * torch.randn(L, E))
        self.norm1 = nn.LayerNorm(E)
        if feature_map == "sdpa":
            self.attn = nn.MultiheadAttention(E, H, batch_first=True)
        else:
            self.attn = FavorAttention(
                E,
                H,
                feature_map=feature_map,
                n_features=n_features,
                redraw_interval=redraw_interval,
                random_state=random_state,
                **kw,
            )
        self.norm2 = nn.LayerNorm(E)
        self.mlp = nn.Sequential(nn.Linear(E, 2 * E), nn.GELU(), nn.Linear(2 * E, E))
        self.head = nn.Linear(E, V)

    def _attend(self, h, causal):
        if isinstance(self.attn, FavorAttention):
            return self.attn(h, h, h, is_causal=causal)[0]
        # the exact reference: MHA's projections around torch's SDPA
        N, n, _ = h.shape
        q, k, v = nn.functional.linear(h, self.attn.in_proj_weight, self.attn.in_proj_bias).chunk(
            3, -1
        )
        q, k, v = (t.view(N, n, H, E // H).transpose(1, 2) for t in (q, k, v))
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.attn.out_proj(out.transpose(1, 2).reshape(N, n, E))

    def forward(self, tokens, causal):
        x = self.emb(tokens) + self.pos[: tokens.shape[1]]
        x = x + self._attend(self.norm1(x), causal)
        x = x + self.mlp(self.norm2(x))
        return self.head(x)  # (N, L, V)


def _batch(i, causal, N=8):
    """Batch ``i`` of the shift task: random tokens (N, L) and the targets, the previous
    token (causal) or the next one (bidirectional), cyclically."""
    g = torch.Generator().manual_seed(100 + i)
    tokens = torch.randint(0, V, (N, L), generator=g)
    return tokens, torch.roll(tokens, 1 if causal else -1, 1)


def _loss(model, i, causal, N=8):
    tokens, target = _batch(i, causal, N)
    return nn.functional.cross_entropy(model(tokens, causal).reshape(-1, V), target.reshape(-1))


def _build(feature_map, seed=0, lr=1e-2, **kw):
    torch.manual_seed(seed)
    model = _Block(feature_map, **kw)
    return model, torch.optim.AdamW(model.parameters(), lr=lr)


def _train_step(model, opt, i, causal, clip=1.0):
    loss = _loss(model, i, causal)
    opt.zero_grad()
    loss.backward()
    if clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return loss.item()


def _run(model, opt, steps, causal, start=0):
    return [_train_step(model, opt, i, causal) for i in range(start, start + steps)]


def _mean_last(losses, n=5):
    return sum(losses[-n:]) / n


# ------------------------------------------------------------------ training
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("feature_map", list(FEATURE_MAPS))
def test_every_map_learns_the_shift_task_like_sdpa(feature_map, causal):
    """40 AdamW steps with clipping (redraws every 10 calls, running statistics for the
    causal fitted maps): every loss is finite, and the mean of the last five is at least
    0.3 nats below the first loss, as for the SDPA block (whose drop is about 1.1 nats
    causal and 0.8 bidirectional; the maps with M = 16 drop by 0.4 to 0.9).

    The two maps that are not positive are trained with M = 256 and without redraws:
    their normaliser can come close to zero (see the guide), and with M = 16 and redraws
    every 10 steps the outputs blow up at some steps (losses of 8 to 60 nats), so trig
    does not learn there. hybrid_angular has few base projections (one up to M = 71,
    seven at M = 256) and at this size it does not learn in 40 steps even so: only its
    losses being finite is checked."""
    if causal and feature_map in ("trig", "hybrid_angular"):
        with pytest.raises(ValueError, match="bidirectional only"):
            _run(*_build(feature_map), 1, causal)
        return
    ref = _run(*_build("sdpa"), 40, causal)
    assert _mean_last(ref) < ref[0] - 0.3, ref[::5]
    kw = {"n_features": 16, "redraw_interval": 10}
    if feature_map in ("trig", "hybrid_angular"):
        kw = {"n_features": 256, "redraw_interval": None}
    losses = _run(*_build(feature_map, **kw), 40, causal)
    assert all(math.isfinite(x) for x in losses), losses
    if feature_map != "hybrid_angular":
        assert _mean_last(losses) < losses[0] - 0.3, losses[::5]


# ------------------------------------------------------------------ checkpoint and resume
def _save_load(obj):
    """torch.save and torch.load(weights_only=True), as a checkpoint file."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize(
    ("feature_map", "causal"),
    [
        ("positive", True),
        ("positive", False),
        ("sderf", True),
        ("sderf", False),
        ("gerf", True),
        ("hybrid_angular", False),
    ],
)
def test_resumed_training_equals_the_uninterrupted_run(feature_map, causal):
    """Model and optimizer state dicts saved after 4 steps (redraw_interval=3: one redraw
    done, the next due at step 7) and loaded into a model built with other seeds and a
    fresh optimizer: the next 5 steps give the losses, parameters, projections and
    running statistics of the uninterrupted run bit for bit (the same operations on the
    same values), redraws included; the generator of the redraws travels in the
    state_dict."""
    kw = {"n_features": 16, "redraw_interval": 3}
    uninterrupted, opt = _build(feature_map, **kw)
    ref = _run(uninterrupted, opt, 9, causal)
    model, opt = _build(feature_map, **kw)
    first = _run(model, opt, 4, causal)
    ckpt = _save_load({"model": model.state_dict(), "opt": opt.state_dict()})
    del model, opt
    fresh, fresh_opt = _build(feature_map, seed=1, random_state=7, **kw)
    fresh.load_state_dict(ckpt["model"])
    fresh_opt.load_state_dict(ckpt["opt"])
    rest = _run(fresh, fresh_opt, 5, causal, start=4)
    assert first + rest == ref
    done = uninterrupted.state_dict()
    for name, t in fresh.state_dict().items():
        assert torch.equal(t, done[name]), name
    if causal and feature_map in FITTED_MAPS:
        assert int(fresh.attn.num_batches_tracked) == 9


def test_a_checkpoint_without_the_generator_state_still_loads_strictly():
    """A state_dict without the redraw generator's state (saved by an older kernelkit)
    loads with strict=True and restores everything else; the module then redraws from
    its own random_state, as before. The extra state is the generator's, not a copy:
    loading it into a module built with another seed gives that module the same next
    redraw as the saved one."""
    a = FavorAttention(E, H, feature_map="positive", n_features=16, random_state=0)
    a.redraw_features()
    sd = a.state_dict()
    assert sd["_extra_state"].dtype == torch.int64
    old = {k: t for k, t in sd.items() if k != "_extra_state"}
    b = FavorAttention(E, H, feature_map="positive", n_features=16, random_state=3)
    b.load_state_dict(old, strict=True)
    assert torch.equal(b.projection, a.projection)
    c = FavorAttention(E, H, feature_map="positive", n_features=16, random_state=3)
    c.load_state_dict(sd, strict=True)
    for m in (a, b, c):
        m.redraw_features()
    assert torch.equal(c.projection, a.projection)
    assert not torch.equal(b.projection, a.projection)
    with pytest.raises(ValueError, match="redraw generator"):
        c.load_state_dict({**sd, "_extra_state": torch.arange(3)})
