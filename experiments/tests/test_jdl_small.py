"""jdl-small (JDL Figs. 6-7): a tiny end-to-end run with substantive checks."""

from __future__ import annotations

import json

import pytest

from kernelkit_experiments import jdl_small as js

TINY = js.Config(
    ns=(50, 200),
    n_rep=2,
    n_test=500,
    ls_factors=(0.5, 1.0),
    regs=(1e-6, 1e-3),
    regs_poly=(1e-2, 1.0),
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("jdl_small")
    return out, js._run(TINY, out, seed=0, quick=True, progress=False)


def test_module_interface():
    assert js.NAME == "jdl-small" and js.DESCRIPTION
    assert js.FULL.ns == (50, 100, 200) and js.FULL.rel_tol == 1e-6
    assert set(js.FULL.datasets) == {"uniform", "cauchy"}


@pytest.mark.slow
def test_outputs_and_metrics(tiny):
    out, _ = tiny
    for f in ("report.md", "results.json", "fig6_fig7_small.png"):
        assert (out / f).stat().st_size > 0, f
    assert "holds on our data?" in (out / "report.md").read_text()
    data = json.loads((out / "results.json").read_text())
    s = data["summary"]
    assert len(s) == 2 * len(TINY.ns) * 3
    for e in s.values():
        assert 0 <= e["pos_err_pct"] <= 100 and 0 <= e["neg_rn_pct"] <= 100
    for n in TINY.ns:
        for name in ("uniform", "cauchy"):
            # JDL is normalised by construction at any x; CME is not (Figs. 3, 6(b))
            assert s[f"{name} n={n} jdl"]["norm_err_max"] < 1e-10
            assert s[f"{name} n={n} cme"]["norm_err_max"] > 1e-4
        u = s[f"uniform n={n} jdl"]
        # the closed-form truth: conditioning helps over the marginal second moment
        assert u["loss_mean"] < u["baseline_loss_mean"]
        assert s[f"cauchy n={n} jdl"]["loss_mean"] is None  # no second moments exist


def test_bad_dataset(tmp_path):
    with pytest.raises(ValueError, match="unknown data set"):
        js._run(js.Config(datasets=("normal",)), tmp_path, progress=False)
