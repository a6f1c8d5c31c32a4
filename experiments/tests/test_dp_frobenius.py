"""``kernelkit reproduce dp-frobenius`` (dot-product features, Fig. 6) on a tiny config.

The full tiny run (every method, both centrings, two degrees, two D, two seeds, the plot)
takes ~8 s: the tests that read it are marked slow; the single-setting checks are fast.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelkit import datasets
from kernelkit.experiments import get_experiment
from kernelkit_experiments import dp_frobenius as dpf

TINY = dpf.tiny_config()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp-frobenius")
    res = dpf.run(out, quick=True, seed=0, config=TINY)
    return out, res


def test_registered():
    assert get_experiment("dp-frobenius") is dpf
    assert dpf.NAME == "dp-frobenius"


@pytest.mark.slow
def test_run_writes_report_plot_and_json(tiny_run):
    out, _ = tiny_run
    for name in ("report.md", "results.json", "frobenius.png"):
        assert (out / name).is_file()
    assert (out / "frobenius.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "report.md").read_text()
    assert "holds on our data?" in report and "frobenius.png" in report
    for label in dpf.METHODS:
        assert label.label in report
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "dp-frobenius"
    assert data["config"]["d0"] == 64 and data["config"]["d"] == 64
    errs = data["errors"]
    assert set(errs) == {"non-centred", "centred"}
    for cn in errs:
        for p in TINY.degrees:
            for k in TINY.multipliers:
                cell = errs[cn][str(p)][str(k)]
                assert set(cell) == {m.label for m in dpf.METHODS}
                for v in cell.values():
                    assert len(v) == TINY.n_seeds and np.all(np.isfinite(v))
                    assert np.all(np.asarray(v) > 0)


@pytest.mark.slow
def test_allocations_respect_the_budget(tiny_run):
    _, res = tiny_run
    d = res["config"]["d"]
    for cn, by_p in res["allocations"].items():
        for p, by_k in by_p.items():
            for k, by_m in by_k.items():
                for label, a in by_m.items():
                    Dn = np.asarray(a["n_features_per_degree"])
                    assert Dn[1:].sum() == k * d, (cn, p, k, label)
                    if "degree" in a:  # Optimized Maclaurin
                        assert len(Dn) == a["degree"] + 1 and np.all(Dn[1:] >= 1)
                        assert TINY.p_min <= a["degree"] <= min(p, TINY.p_max)
                        if "SRHT" in label:
                            assert Dn[1] <= d


@pytest.mark.slow
def test_claims_cover_the_fig6_findings(tiny_run):
    _, res = tiny_run
    claims = {c["claim"]: c for c in res["claims"]}
    assert len(claims) >= 9
    assert any("beats Rnd. Macl." in c for c in claims)
    assert any("Complex SRHT beats TensorSketch" in c for c in claims)
    assert any("non-centred" in c for c in claims)
    for c in claims.values():
        assert c["holds"].split(" ")[0] in ("yes", "mostly", "no", "n/a")


def test_errors_are_relative_frobenius_errors():
    """One setting recomputed by hand: eq. 57 (a = 2) on unit-normalised centred inputs,
    the same seed, |K - K_hat|_F / |K|_F."""
    cfg = dpf.tiny_config(
        degrees=(3,), multipliers=(1,), n_seeds=1, centring=(True,), methods=("Radem.",)
    )
    res = dpf.compute(cfg, seed=0, progress=False)
    Xtr, Xte, _ = dpf.load_data(cfg)
    Xtr, Xte = dpf.prepare(Xtr, Xte, True)
    np.testing.assert_allclose(np.linalg.norm(Xte, axis=1), 1.0)
    from kernelkit.features import RademacherSketch
    from kernelkit.metrics import relative_frobenius_error

    s = int(np.random.default_rng([0, 1, 3, 1, 0]).integers(2**31))
    fm = RademacherSketch(64, degree=3, coef0=0.5, random_state=s).fit(Xte)
    K = (0.5 + 0.5 * Xte @ Xte.T) ** 3
    expect = relative_frobenius_error(K, fm.approx_kernel(Xte * np.sqrt(0.5)))
    assert res["errors"]["centred"][3][1]["Radem."][0] == pytest.approx(expect, rel=1e-10)


@pytest.mark.slow
def test_mnist_fallback(monkeypatch, tmp_path):
    monkeypatch.setattr(datasets, "fashion_mnist_available", lambda: False)
    cfg = dpf.tiny_config(
        degrees=(3,),
        multipliers=(1,),
        n_seeds=1,
        centring=(False,),
        methods=("SRHT", "Opt. Macl. SRHT"),
    )
    res = dpf.run(tmp_path, quick=True, config=cfg)
    assert res["data"]["dataset"].startswith("MNIST")
    assert "fallback" in (tmp_path / "report.md").read_text()


@pytest.mark.skipif(not datasets.fashion_mnist_available(), reason="no Fashion-MNIST")
def test_uses_fashion_mnist_when_installed():
    Xtr, Xte, info = dpf.load_data(dpf.tiny_config())
    assert info == {"dataset": "Fashion-MNIST", "fallback": None}
    assert Xtr.shape == (TINY.n_train, 64) and Xte.shape == (TINY.n_test, 64)
