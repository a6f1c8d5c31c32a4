"""jdl-gaussian (JDL Sec. 5.1): a tiny end-to-end run with substantive checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelkit_experiments import jdl_gaussian as jg

TINY = jg.Config(
    ds=(1, 2),
    ns=(400, 1600),
    n_corr={400: 2, 1600: 1},
    n_test=1000,
    ls_factors=(1.0, 2.0),
    regs=(1e-6, 1e-4),
    regs_poly=(1e-3, 1e-1),
    n_tune_max=1000,
    sos_max_d=1,
    eps_sweep=(1e-1, 1e-3),
    eps_ns=(400, 1600),
    eps_n_corr=1,
    time_d=2,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("jdl_gaussian")
    return out, jg._run(TINY, out, seed=0, quick=True, progress=False)


def test_module_interface():
    assert jg.NAME == "jdl-gaussian" and jg.DESCRIPTION
    assert jg.FULL.ds == (1, 2, 3) and jg.FULL.ns[0] == 1000 and jg.FULL.ns[-1] == 100_000
    assert jg.FULL.n_test == 5000 and set(jg.FULL.models) == {"jdl", "jpdl", "cme"}
    # the paper's scale stays written down next to the reduced full mode
    assert jg.PAPER.ns[-1] == 10_000_000 and set(jg.PAPER.n_corr.values()) == {100}
    assert all(n in jg.FULL.n_corr for n in jg.FULL.ns)


@pytest.mark.slow
def test_outputs(tiny):
    out, _ = tiny
    for f in (
        "report.md",
        "results.json",
        "fig1_loss.png",
        "fig3_normalization.png",
        "fig5_positivity.png",
        "fig2_fig4_tolerance.png",
        "fig8_time.png",
    ):
        assert (out / f).stat().st_size > 0, f
    text = (out / "report.md").read_text()
    assert "holds on our data?" in text and "Deviations" in text
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "jdl-gaussian"
    # constrained JPDL only for d <= sos_max_d
    assert "d=1 n=400 jpdl/c" in data["summary"] and "d=2 n=400 jpdl/c" not in data["summary"]


@pytest.mark.slow
def test_jdl_beats_unconditional_and_is_normalised(tiny):
    _, res = tiny
    s = res["summary"]
    for d in TINY.ds:
        for n in TINY.ns:
            e = s[f"d={d} n={n} jdl/u"]
            # conditioning on x must help: the marginal second moment is far worse
            assert e["loss_mean"] < 0.5 * e["baseline_loss_mean"], (d, n, e)
            for key in ("jdl/u", "jdl/c", "jpdl/u"):
                assert s[f"d={d} n={n} {key}"]["norm_err_max"] < 1e-10
            # CME is not normalised (Fig. 3)
            assert s[f"d={d} n={n} cme/u"]["norm_err_max"] > 1e-4
            # (29) makes the weights positive on the training grid; at new x the predicted
            # second moments stay PSD in practice
            assert s[f"d={d} n={n} jdl/c"]["pos_err_mean"] <= 0.01
            assert e["m_x_mean"] >= 2


@pytest.mark.slow
def test_loss_falls_with_n_for_same_correlation_matrix(tiny):
    """Same C_0 at both n (seeded per (d, j)): more data, lower loss for JDL (d = 1)."""
    out, _ = tiny
    data = json.loads((out / "results.json").read_text())
    runs = data["sweep"]
    lo = runs["eps=0.001 n=400"][0]["jdl/u"]["loss"]
    hi = runs["eps=0.001 n=1600"][0]["jdl/u"]["loss"]
    assert hi < lo


def test_same_correlation_matrix_across_n():
    a = jg._run_one(TINY, 1, 400, 0, 0, [("jdl", False)])
    b = jg._run_one(TINY, 1, 400, 0, 0, [("jdl", False)])
    assert a["jdl/u"]["loss"] == b["jdl/u"]["loss"]  # deterministic given the seed
    assert np.isfinite(a["baseline"]["loss"])
