"""mlm-encoder: the masked character encoder, its masking rule, and the experiment run."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernelkit_experiments import _tiny_encoder as E  # noqa: E402
from kernelkit_experiments import mlm_encoder as mlm  # noqa: E402


def test_mask_batch_follows_berts_rule():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=(400, 128))
    inputs, targets = E.mask_batch(ids, 50, 0.25, np.random.default_rng(1))
    inputs, targets = inputs.numpy(), targets.numpy()
    chosen = targets >= 0
    n = chosen.sum()
    # every row has a target; about the rate are chosen (binomial s.e. ~ 0.0015)
    assert chosen.any(axis=1).all()
    assert abs(chosen.mean() - 0.25) < 0.01
    np.testing.assert_array_equal(targets[chosen], ids[chosen])
    np.testing.assert_array_equal(inputs[~chosen], ids[~chosen])  # unchosen stay
    masked = (inputs == 50) & chosen
    assert abs(masked.sum() / n - 0.8) < 0.02  # 80 % mask id (s.e. ~ 0.004)
    changed = chosen & (inputs != 50) & (inputs != ids)
    # 10 % random characters, of which 1/50 happen to equal the original
    assert abs(changed.sum() / n - 0.1 * 49 / 50) < 0.015


def test_every_attention_starts_from_the_same_weights():
    models = {
        a: E.MaskedLM(E.EncoderConfig(30, context=8, attention=a, n_features=4), seed=3)
        for a in ("exact", "positive", "sderf")
    }
    ref = [p.detach() for p in models["exact"].parameters()]
    for a in ("positive", "sderf"):
        got = [p.detach() for p in models[a].parameters()]
        assert [p.shape for p in got] == [p.shape for p in ref]
        for p, q in zip(got, ref, strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_features_approach_exact_attention_with_many_features():
    # the same weights (exact model's fused projection loaded into FavorAttention): the
    # random-feature encoder's logits approach the exact ones as M grows
    cfg = E.EncoderConfig(30, context=16, d_model=32, n_heads=2, n_layers=1)
    exact = E.MaskedLM(cfg, seed=0).eval()
    ids = torch.randint(0, 30, (4, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = exact(ids)
    errs = []
    for M in (8, 2048):
        fav = E.MaskedLM(
            E.EncoderConfig(
                30, context=16, d_model=32, n_heads=2, n_layers=1, attention="sderf", n_features=M
            ),
            seed=0,
        ).eval()
        with torch.no_grad():
            errs.append(float((fav(ids) - ref).abs().mean()))
    assert errs[1] < 0.25 * errs[0]


def test_training_lowers_the_masked_loss():
    rng = np.random.default_rng(0)
    # a learnable text: a repeated phrase, so context predicts the masked characters
    data = np.tile(rng.integers(0, 20, size=37), 300)
    cfg = E.EncoderConfig(
        20, context=16, d_model=32, n_heads=2, n_layers=1, attention="sderf", n_features=8
    )
    before = E.evaluate_mlm(E.MaskedLM(cfg, seed=0), data, 32, 0.25)["bits"]
    r = E.train_mlm(
        cfg,
        E.MLMTrainConfig(steps=60, batch_size=16, lr=1e-2, warmup=5, eval_windows=32),
        data,
        data,
        seed=0,
    )
    assert r["finite"] and r["valid_bits"] < before - 0.5


def test_capture_qk_needs_an_exact_model():
    cfg = E.EncoderConfig(20, context=8, d_model=16, n_heads=2, n_layers=2)
    data = np.arange(200) % 20
    qk = E.capture_qk(E.MaskedLM(cfg), data, 3)
    assert len(qk) == 2 and qk[0][0].shape == (3, 2, 8, 8)
    with pytest.raises(ValueError, match="exact"):
        E.capture_qk(E.MaskedLM(E.EncoderConfig(20, context=8, attention="positive")), data, 3)


def test_quick_run_writes_report_with_claims(tmp_path):
    res = mlm.run(
        tmp_path, quick=True, progress=False, steps=4, attentions=("exact", "gerf", "sderf")
    )
    report = (tmp_path / "report.md").read_text()
    assert "FAVOR# (SDERF) beats FAVOR++" in report and "kernel variance" in report.lower()
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["runs"]) == 5  # quick: five seeds
    for r in res["runs"]:
        assert all(np.isfinite(r[f"logvar {k}"]) for k in mlm.VARIANCE_MAPS)
        assert all(np.isfinite(r[f"{a} bits"]) for a in ("exact", "gerf", "sderf"))
    assert (tmp_path / "mlm_results.png").exists()


def test_bad_attention_list():
    with pytest.raises(ValueError, match="exact"):
        mlm.run(None, quick=True, attentions=("gerf",))
