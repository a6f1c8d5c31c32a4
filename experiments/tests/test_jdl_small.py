"""jdl-small (JDL Figs. 6-7) on the harness: a tiny end-to-end run with substantive checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelkit_experiments import _harness as H
from kernelkit_experiments import jdl_small as js

TINY = {"ns": (50, 100), "n_test": 300, "ls_factors": (1.0,), "regs": (1e-3,), "regs_poly": (0.1,)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("jdl_small")
    return out, js.run(out, quick=True, seed=0, **TINY)


def test_module_interface():
    assert js.NAME == js.SPEC.name == "jdl-small" and js.DESCRIPTION
    assert js.FULL.ns == (50, 100, 200) and js.FULL.rel_tol == 1e-6
    assert set(js.FULL.datasets) == {"uniform", "cauchy"}
    assert js.SPEC.seeds[1] >= H.MIN_SEEDS


def test_compute_one_seed_is_reproducible():
    cfg = js.Config(datasets=("uniform",), models=("jdl",), **TINY)
    a, b = js.compute(cfg, 3), js.compute(cfg, 3)
    assert set(a) == {"uniform jdl " + m for m in js.METRICS} | {"uniform baseline loss"}
    for k in a:
        assert a[k].shape == (2,)
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["uniform jdl loss"], js.compute(cfg, 4)["uniform jdl loss"])


@pytest.mark.slow
def test_outputs_and_metrics(tiny):
    out, res = tiny
    for f in ("report.md", "results.json", "fig6_small_uniform.png", "fig7_small_cauchy.png"):
        assert (out / f).stat().st_size > 0, f
    md = (out / "report.md").read_text()
    assert "holds on our data?" in md and "(n = 5)" in md  # quick: 5 seeds
    data = json.loads((out / "results.json").read_text())
    assert len(data["runs"]) == 5 and sum(data["claim_counts"].values()) == 8
    runs = res["runs"]
    for r in runs:
        for k, v in r.items():
            if "pct" in k:
                v = v[np.isfinite(v)]  # CME has no '% mass <= 0'
                assert np.all((v >= 0) & (v <= 100)), k
        for name in ("uniform", "cauchy"):
            # JDL is normalised by construction at any x; CME is not (Figs. 3, 6(b))
            assert np.all(r[f"{name} jdl norm_err"] < 1e-10)
            assert np.all(r[f"{name} cme norm_err"] > 1e-4)
        # the closed-form truth: conditioning helps over the marginal second moment
        assert np.all(r["uniform jdl loss"] < r["uniform baseline loss"])
        assert np.all(np.isnan(r["cauchy jdl loss"]))  # no second moments exist
    verdicts = {c["claim"]: c["verdict"] for c in res["claims"]}
    assert verdicts["JDL / JPDL normalised by construction (uniform)"] == "yes"


def test_bad_dataset(tmp_path):
    with pytest.raises(ValueError, match="unknown data set"):
        js.run(tmp_path, quick=True, datasets=("normal",))
