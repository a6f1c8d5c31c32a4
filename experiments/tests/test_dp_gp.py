"""``kernelkit reproduce dp-gp`` (dot-product features, Table 3), on a tiny configuration."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from kernelkit.experiments import get_experiment
from kernelkit_experiments import claim_counts, dp_gp

TINY = {
    "regression": ("boston",),
    "classification": ("digits",),
    "n_max": 220,
    "m_max": 60,
    "noise_grid": (2.0**-4, 1.0),
    "alpha_grid": (1e-2,),
    "n_mc": 50,
    "maclaurin_subsample": 80,
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp-gp")
    return out, dp_gp.run(out, quick=True, seed=0, progress=False, **TINY)


def test_registered():
    assert get_experiment("dp-gp") is dp_gp
    assert dp_gp.NAME == "dp-gp" and dp_gp.SPEC.name == dp_gp.NAME


def test_writes_report_plot_and_json(tiny_run):
    out, _ = tiny_run
    for name in ("report.md", "results.json", "frobenius.png"):
        assert (out / name).is_file()
    report = (out / "report.md").read_text()
    assert "Table 3" in report and "(3.410)" in report  # paper's Boston value alongside
    assert "digits (n = 220, d = 64, D = 320)" in report
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "dp-gp" and len(data["runs"]) >= 5
    assert len(data["claims"]) == 3 and all(c["n"] == len(data["runs"]) for c in data["claims"])
    counts = claim_counts(out)  # the summary reads the verdicts of the claims table
    assert sum(counts.values()) == 3 and counts["other"] == 0


def test_metrics_are_finite_and_sane(tiny_run):
    _, res = tiny_run
    assert dp_gp._methods() == ("baseline", "maclaurin")
    for r in res["runs"]:
        for name in ("boston", "digits"):
            for cen in ("NC", "C"):
                key = f"polynomial {name} {cen}"
                assert r[f"{key} reg"] in TINY["noise_grid"] + TINY["alpha_grid"]
                for method in dp_gp.METHODS:
                    m = {k: r[f"{key} {method} {k}"] for k in ("mnll", "frob", "kl", "perf")}
                    assert np.isfinite(m["mnll"]) and m["frob"] > 0 and m["kl"] >= 0
                    if name == "digits":
                        assert 0 <= m["perf"] <= 100  # error rate in %
                    else:
                        assert 0 < m["perf"] < 1.0  # NMSE: better than predicting the mean
                p_star = r[f"{key} maclaurin p_star"]
                assert 2 <= p_star <= 7 and p_star == int(p_star)


def test_exact_posterior_is_the_gp_formula():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((12, 3))
    K = (0.5 + A @ A.T / 4) ** 3  # (12, 12) positive semi-definite
    tr, te = np.arange(9), np.arange(9, 12)
    y, noise = rng.standard_normal(9), np.full(9, 0.3)
    mu, var = dp_gp._exact_posterior(K[np.ix_(tr, tr)], K[np.ix_(te, tr)], np.diag(K)[te], y, noise)
    Kinv = np.linalg.inv(K[np.ix_(tr, tr)] + np.diag(noise))
    np.testing.assert_allclose(mu, K[np.ix_(te, tr)] @ Kinv @ y, rtol=1e-10)
    cov = K[np.ix_(te, te)] - K[np.ix_(te, tr)] @ Kinv @ K[np.ix_(tr, te)]
    np.testing.assert_allclose(var, np.diag(cov), rtol=1e-8)


def test_claim_values(monkeypatch):
    monkeypatch.setattr(dp_gp, "_available", lambda config: ({"a": "r", "b": "r"}, {}))
    cfg = replace(dp_gp.QUICK, regression=("a", "b"), classification=())
    r = {}
    for name, (mnll_b, mnll_m, frob_b, frob_m) in {
        "a": (1, 0.5, 0.1, 0.2),
        "b": (-1, -0.5, 0.3, 0.6),
    }.items():
        for cen in ("NC", "C"):
            r[f"polynomial {name} {cen} baseline mnll"] = mnll_b
            r[f"polynomial {name} {cen} maclaurin mnll"] = mnll_m
            r[f"polynomial {name} {cen} baseline frob"] = frob_b
            r[f"polynomial {name} {cen} maclaurin frob"] = frob_m
    mnll, frob, nc_frob = (c.value(r) for c in dp_gp._claims(cfg))
    assert mnll == 0.5  # lower on "a" only (MNLL compared by value: "b" is negative)
    assert frob == 0.0
    assert nc_frob == pytest.approx(np.log(2.0))  # SRF lower by a factor 2 on both


def test_preprocessing_and_kernel():
    rng = np.random.default_rng(0)
    Xtr, Xte = rng.uniform(2, 5, size=(20, 3)), rng.uniform(2, 5, size=(5, 3))
    A, _ = dp_gp._preprocess(Xtr, Xte, centre=False, unit=True)
    np.testing.assert_allclose(np.linalg.norm(A, axis=1), 1.0)
    assert A.min() >= 0  # non-centred data stay non-negative
    C, _ = dp_gp._preprocess(Xtr, Xte, centre=True, unit=False)
    np.testing.assert_allclose(C.mean(0), 0.0, atol=1e-12)
    k = dp_gp._Kernel("polynomial", degree=3)
    # eq. 57 with a = 2 on unit vectors: ((1 + x.y) / 2)^p
    np.testing.assert_allclose(k.exact(k.prep(A), k.prep(A)), ((1 + A @ A.T) / 2) ** 3)
    assert dp_gp._pad_dim(13) == 16 and dp_gp._pad_dim(64) == 64
