"""jdl-gaussian (JDL Sec. 5.1) on the harness: a tiny end-to-end run with substantive checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelkit_experiments import _harness as H
from kernelkit_experiments import jdl_gaussian as jg

TINY = {
    "ds": (1, 2),
    "ns": (400, 1600),
    "n_corr": {1600: 3},
    "n_test": 1000,
    "ls_factors": (1.0, 2.0),
    "regs": (1e-6, 1e-4),
    "regs_poly": (1e-3, 1e-1),
    "n_tune_max": 1000,
    "sos_max_d": 1,
    "eps_sweep": (1e-1, 1e-3),
    "eps_ns": (400, 1600),
    "eps_n_corr": 2,
    "time_d": 2,
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("jdl_gaussian")
    return out, jg.run(out, quick=True, seed=0, **TINY)


def test_module_interface():
    assert jg.NAME == jg.SPEC.name == "jdl-gaussian" and jg.DESCRIPTION
    assert jg.FULL.ds == (1, 2, 3) and jg.FULL.ns[0] == 1000 and jg.FULL.ns[-1] == 100_000
    assert jg.FULL.n_test == 5000 and set(jg.FULL.models) == {"jdl", "jpdl", "cme"}
    # headline law of gamma N(0, 1), named variant N(0, 0.3^2)
    assert jg.FULL.gamma_scale == 1.0 and jg.FULL.gamma_variant == 0.3
    # the paper's scale stays written down next to the reduced full mode
    assert jg.PAPER.ns[-1] == 10_000_000 and set(jg.PAPER.n_corr.values()) == {100}
    # every n of the full mode is judged over at least MIN_SEEDS repetitions
    assert all(jg.FULL.n_corr.get(n, 1000) >= H.MIN_SEEDS for n in jg.FULL.ns)
    assert jg.SPEC.seeds[1] >= max(jg.FULL.n_corr.values())


def test_compute_maps_repetitions_onto_seeds():
    """Repetition i = seed mod 1000 runs n only where i < n_corr[n]; same seed, same
    numbers; the same correlation matrix at every n of a seed."""
    cfg = jg.Config(**(TINY | {"ds": (1,), "models": ("jdl",), "eps_sweep": (1e-3,)}))
    a, b = jg.compute(cfg, 2), jg.compute(cfg, 2)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert np.all(np.isfinite(a["d1 jdl/u loss"]))  # i = 2 < 3: n = 1600 runs
    assert np.isnan(a["eps0.001 jdl/u loss"]).all()  # i = 2 >= eps_n_corr
    c = jg.compute(cfg, 3)
    assert np.isfinite(c["d1 jdl/u loss"][0]) and np.isnan(c["d1 jdl/u loss"][1])
    assert np.isnan(c["g0.3 d1 jdl/c loss"][1])  # the variant follows the headline's n


def test_bad_config(tmp_path):
    with pytest.raises(ValueError, match="models"):
        jg.run(tmp_path, quick=True, models=("klr",))
    with pytest.raises(ValueError, match="time_d"):
        jg.run(tmp_path, quick=True, time_d=7)


@pytest.mark.slow
def test_outputs(tiny):
    out, res = tiny
    for f in (
        "report.md",
        "results.json",
        "fig1_loss.png",
        "fig1b_gamma_law.png",
        "fig3_normalization.png",
        "fig5_positivity.png",
        "fig2_fig4_tolerance.png",
        "fig8_time.png",
    ):
        assert (out / f).stat().st_size > 0, f
    text = (out / "report.md").read_text()
    assert "holds on our data?" in text and "Deviations" in text and "gamma ~ N(0, 1^2)" in text
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "jdl-gaussian" and len(data["runs"]) >= 5
    # constrained JPDL only for d <= sos_max_d
    assert "d1 jpdl/c loss" in data["runs"][0] and "d2 jpdl/c loss" not in data["runs"][0]
    variants = [c for c in res["claims"] if c["claim"].startswith("Variant (gamma ~ N(0, 0.3^2))")]
    assert len(variants) == 1


@pytest.mark.slow
def test_the_science(tiny):
    _, res = tiny
    informative = 0
    for r in res["runs"]:
        for d in TINY["ds"]:
            fin = np.isfinite(r[f"d{d} jdl/u loss"])
            base = r[f"d{d} baseline loss"]
            # conditioning on x must help where x carries information (a nearly
            # independent C_j leaves the marginal second moment close to optimal)
            dep = fin & (base > 0.1)
            informative += int(dep.sum())
            assert np.all(r[f"d{d} jdl/u loss"][dep] < 0.5 * base[dep])
            for key in ("jdl/u", "jdl/c", "jpdl/u"):
                assert np.all(r[f"d{d} {key} norm_err"][fin] < 1e-10)
            assert np.all(r[f"d{d} cme/u norm_err"][fin] > 1e-4)  # CME is not (Fig. 3)
            # (29) makes the weights positive on the training grid; at new x the
            # predicted second moments stay PSD in practice
            assert np.all(r[f"d{d} jdl/c pos_err"][fin] <= 0.01)
    assert informative >= 10
    verdicts = {c["claim"]: c for c in res["claims"]}
    assert verdicts["Fig. 3: JDL and JPDL normalisation error is zero"]["verdict"] == "yes"
    # the law of gamma decides Fig. 1(b): under N(0, 1) the constraint costs orders of
    # magnitude, under N(0, 0.3^2) far less (median log10 ratio lower by more than 0.75)
    head = next(c for c in res["claims"] if c["claim"].startswith("Fig. 1(b)"))
    var = next(c for c in res["claims"] if c["claim"].startswith("Variant"))
    assert head["mean"] > 1.0, head
    assert var["mean"] < head["mean"] - 0.75, (head, var)


@pytest.mark.slow
def test_loss_falls_with_n_for_the_same_correlation_matrix(tiny):
    """Same C per seed at every n: more data, lower JDL loss (d = 1, eps = 1e-3)."""
    _, res = tiny
    r = res["runs"][0]
    assert r["eps0.001 jdl/u loss"][1] < r["eps0.001 jdl/u loss"][0]
