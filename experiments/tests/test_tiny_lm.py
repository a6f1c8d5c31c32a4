"""``kernelkit reproduce tiny-lm`` and its Transformer (``experiments._tiny_transformer``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernelkit_experiments import tiny_lm  # noqa: E402
from kernelkit_experiments._tiny_transformer import (  # noqa: E402
    LMConfig,
    TinyLM,
    TrainConfig,
    _windows,
    evaluate_bpc,
    torch_threads,
    train_lm,
)
from kernelkit_experiments.datasets._text import load_text_corpus  # noqa: E402

pytestmark = pytest.mark.torch

ATTENTIONS = ("exact", "positive", "gerf", "saderf", "sderf", "hybrid_angular", "relu")


def _cfg(attention="exact", **kw):
    base = dict(
        vocab_size=17,
        context=32,
        d_model=32,
        n_heads=4,
        n_layers=2,
        attention=attention,
        n_features=16,
        redraw_interval=3,
    )
    base.update(kw)
    return LMConfig(**base)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # tiny tensors: worker threads only spin (see _tiny_transformer.num_threads)
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def corpus():
    return load_text_corpus("pydoc", max_chars=120_000)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_model_is_causal_in_outputs_and_gradients(attention):
    """Logits (and their gradients w.r.t. the inputs) at positions t < 20 must not change
    when tokens at positions >= 20 change -- including after the running moments of the
    fitted maps have been updated by a training step."""
    torch.manual_seed(0)
    model = TinyLM(_cfg(attention), seed=1)
    ids = torch.randint(0, 17, (3, 33))
    model.train()
    model.loss(ids).backward()  # one training forward: moments / redraw counters move
    model.eval()
    other = ids.clone()
    other[:, 20:] = (other[:, 20:] + 5) % 17

    def run(x):
        emb = model.tok(x[:, :32]).detach().requires_grad_(True)
        h = emb + model.pos(torch.arange(32))
        for blk in model.blocks:
            h = blk(h)
        logits = model.head(model.ln_f(h))
        logits[:, :20].sum().backward()
        return logits.detach(), emb.grad[:, :20]

    a, ga = run(ids)
    b, gb = run(other)
    torch.testing.assert_close(a[:, :20], b[:, :20], atol=1e-5, rtol=0)
    torch.testing.assert_close(ga, gb, atol=1e-5, rtol=0)
    assert (a[:, 20:] - b[:, 20:]).abs().max() > 1e-3  # later positions do see the change


def test_initial_weights_do_not_depend_on_the_attention_type():
    """Same seed, same initial values, whether attention is SDPA with own projections,
    FavorAttention (in_proj / out_proj) or the masked signed-map path."""
    ref = [p.detach() for p in TinyLM(_cfg("exact"), seed=3).parameters()]
    for att in ("positive", "sderf", "hybrid_angular"):
        model = TinyLM(_cfg(att), seed=3)
        if att in ("positive", "sderf"):
            assert model.blocks[0].attn.mha is not None  # the kernelkit module is used
        params = [p.detach() for p in model.parameters()]
        assert len(params) == len(ref)
        for p, r in zip(params, ref, strict=True):
            torch.testing.assert_close(p, r, rtol=0, atol=0)
    assert not torch.equal(next(TinyLM(_cfg(), seed=4).parameters()), ref[0])


def test_fitted_maps_track_running_moments_in_training_only():
    """Causal FAVOR# in the LM takes its parameters from FavorAttention's running moments:
    zero before training, updated once per training forward, frozen in eval()."""
    model = TinyLM(_cfg("sderf"), seed=0)
    mha = model.blocks[0].attn.mha
    assert int(mha.num_batches_tracked) == 0
    ids = torch.randint(0, 17, (2, 33))
    model.train()
    model.loss(ids)
    model.loss(ids)
    assert int(mha.num_batches_tracked) == 2
    frozen = mha.running_second_k.clone()
    assert float(frozen.abs().sum()) > 0
    model.eval()
    with torch.no_grad():
        model.loss(ids)
    assert int(mha.num_batches_tracked) == 2
    torch.testing.assert_close(mha.running_second_k, frozen, rtol=0, atol=0)


def test_evaluate_bpc_matches_a_direct_computation():
    torch.manual_seed(0)
    model = TinyLM(_cfg(), seed=0).eval()
    data = np.random.default_rng(0).integers(0, 17, 200)
    T = 32
    starts = np.arange(0, data.size - T - 1, T)
    nll = 0.0
    with torch.no_grad():
        for s in starts:
            ids = torch.from_numpy(data[s : s + T + 1])[None]
            logp = torch.log_softmax(model(ids[:, :-1]), -1)[0]
            nll -= float(logp[torch.arange(T), ids[0, 1:]].sum())
    direct = nll / (starts.size * T) / math.log(2)
    assert evaluate_bpc(model, data, batch_size=2) == pytest.approx(direct, rel=1e-5)
    # an untrained model predicts nearly uniformly: close to log2(vocab)
    assert abs(direct - math.log2(17)) < 0.3


@pytest.mark.slow
def test_exact_training_loss_decreases_and_bpc_is_below_uniform(corpus):
    cfg = LMConfig(vocab_size=corpus.vocab_size, context=32, d_model=32, n_heads=4, n_layers=1)
    tc = TrainConfig(steps=40, batch_size=8, lr=3e-3, warmup=5, log_every=5, eval_windows=16)
    r = train_lm(cfg, tc, corpus.train, corpus.valid, seed=0)
    bits = [b for _, b in r["curve"]]
    # starts near log2(V) = 6.6 bits (uniform); 40 steps of Adam learn at least the
    # character frequencies (unigram entropy of the corpus ~ 4.6 bits)
    assert bits[0] > 5.5
    assert bits[-1] < bits[0] - 1.0
    assert r["finite"] and math.isfinite(r["valid_bpc"])
    assert r["valid_bpc"] < math.log2(corpus.vocab_size) - 1.0
    assert r["train_tokens_per_s"] > 0 and r["eval_tokens_per_s"] > 0


@pytest.mark.parametrize("attention", ["exact", "positive"])
def test_divergence_is_recorded_not_raised(attention):
    """A run whose loss becomes non-finite stops there (weights never see the NaN) and
    reports NaN bpc instead of crashing the experiment (an absurd lr forces it)."""
    data = np.random.default_rng(0).integers(0, 17, 5000)
    cfg = _cfg(attention, context=16, d_model=16, n_heads=2, n_layers=1, n_features=8)
    tc = TrainConfig(steps=30, batch_size=4, lr=1e6, warmup=1, log_every=5, eval_windows=4)
    r = train_lm(cfg, tc, data, data, seed=0)
    assert r["diverged_at"] is not None and r["diverged_at"] < 30
    assert not r["finite"] and math.isnan(r["valid_bpc"])
    assert all(math.isfinite(b) for _, b in r["curve"])


def test_windows_and_lengths():
    data = np.arange(100)
    w = _windows(data, np.array([0, 10]), 5)
    assert w.tolist() == [[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]]
    model = TinyLM(_cfg(), seed=0)
    with pytest.raises(ValueError, match="exceeds the context"):
        model(torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises(ValueError, match="multiple of"):
        _cfg(d_model=30)


TINY = dict(
    corpus="pydoc",
    context=32,
    d_model=32,
    n_heads=4,
    n_layers=1,
    n_features=16,
    steps=12,
    batch_size=4,
    warmup=2,
    log_every=4,
    eval_windows=8,
    max_chars=60_000,
    methods=("exact", "FAVOR+", "FAVOR++", "FAVOR# (SDERF)", "hybrid (angular)"),
)


def test_compute_one_seed_is_reproducible_and_paired():
    """Same seed, same numbers; every method starts from the same weights and batches, so
    the first logged training losses agree closely (measured within 3e-4 bits)."""
    cfg = tiny_lm.Config(**TINY)
    a, b = tiny_lm.compute(cfg, 5), tiny_lm.compute(cfg, 5)
    for label in cfg.methods:
        assert a[f"{label} bpc"] == b[f"{label} bpc"], label
        assert a[f"{label} curve"].shape == (3,) and a[f"{label} diverged"] == 0.0
        assert abs(a[f"{label} curve"][0] - a["exact curve"][0]) < 0.01, label
    c = tiny_lm.compute(cfg, 6)
    assert c["exact bpc"] != a["exact bpc"]  # another seed: other weights and batches


@pytest.mark.slow
def test_run_writes_report_table_and_plot(tmp_path):
    res = tiny_lm.run(tmp_path, quick=True, seed=0, **TINY)
    report = (tmp_path / "report.md").read_text()
    assert (tmp_path / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "holds on our data?" in report and "Deviations" in report
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["runs"]) == 5  # quick: five seeds
    log2v = math.log2(load_text_corpus("pydoc", max_chars=60_000).vocab_size)
    for r in data["runs"]:
        for label in TINY["methods"]:
            assert 0 < r[f"{label} bpc"] < log2v + 0.5, label
            # the loss falls from the uniform predictor's log2(V) within 12 steps
            assert r[f"{label} curve"][-1] < r[f"{label} curve"][0], label
    # claims over seeds: 3 comparisons among these methods and the exact reference
    claims = {c["claim"]: c for c in res["claims"]}
    assert set(claims) == {
        "FAVOR++ beats FAVOR+",
        "FAVOR# (SDERF) at least as good as FAVOR++",
        "exact softmax attention is the reference (lowest bpc)",
    }
    assert all(c["n"] == len(data["runs"]) for c in claims.values())
    with pytest.raises(ValueError, match="unknown methods"):
        tiny_lm.run(tmp_path, quick=True, methods=("exact", "FAVOR+++"))
