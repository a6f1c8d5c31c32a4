"""Loose ends of the paper experiments: jdl-small's CME positivity diagnosis and
sgb-logreg's machine-independent choice of the methods it runs."""

from __future__ import annotations

import numpy as np

from kernelkit_experiments import _jdl_common as C
from kernelkit_experiments import jdl_small as js

# tiny jdl-small: one lengthscale, two regs, 300 test points (about 1 s per seed)
JS_TINY = {
    "datasets": ("uniform",),
    "models": ("cme",),
    "ns": (50, 100),
    "n_test": 300,
    "ls_factors": (1.0,),
    "regs": (1e-6, 1e-2),
}


def test_jdl_small_cme_diagnosis_metrics():
    """compute() records, for CME on the uniform data, what the '% non-PSD' rests on:
    the rate at a looser tolerance, the size of the violations and the rate at every
    reg of the grid (at the selected lengthscales)."""
    cfg = js.Config(**JS_TINY)
    r = js.compute(cfg, 0)
    for key in js.cme_diagnosis_keys(cfg):
        assert r[key].shape == (2,), key
    base = r["uniform cme pos_err_pct"]
    loose = r[f"uniform cme pos_err_pct rtol {js.LOOSE_PSD_RTOL:g}"]
    # a looser tolerance can only drop matrices from the count
    assert np.all(loose <= base)
    # the rate and loss at the selected reg are those of one of the grid's regs
    assert cfg.diag_regs == (0.1,)
    per_reg = np.array([r[f"uniform cme pos_err_pct reg {g:g}"] for g in cfg.regs])
    loss = np.array([r[f"uniform cme loss reg {g:g}"] for g in cfg.regs])
    sel = r["uniform cme log10 reg"]
    for j in range(2):
        k = int(np.flatnonzero(np.isclose(np.log10(cfg.regs), sel[j]))[0])
        assert per_reg[k, j] == base[j] and loss[k, j] == r["uniform cme loss"][j]
    # more regularisation damps the negative weights: no more violations at 0.1 than
    # at 1e-6 (on this seed 0 against tens of %; an exact count, no tolerance)
    assert np.all(r["uniform cme pos_err_pct reg 0.1"] <= per_reg[0])
    # the size of the violations is a negative relative eigenvalue (NaN: none)
    size = r["uniform cme neg_eig_rel"]
    assert np.all(np.isnan(size) | (size < -C.PSD_RTOL))


def test_jdl_small_report_explains_cme_positivity(tmp_path):
    """The report says why CME's '% non-PSD' is not about 0 at larger n, from the run."""
    # all models and data sets: the claims compare the models, Fig. 7 plots the Cauchy set
    tiny = {k: v for k, v in JS_TINY.items() if k not in ("models", "datasets")}
    tiny["regs_poly"] = (0.1,)
    js.run(tmp_path, quick=True, seed=0, **tiny)
    md = (tmp_path / "report.md").read_text()
    assert "Why CME is not about 0 % non-PSD" in md
    head = md.split("Why CME is not about 0 % non-PSD", 1)[1]
    # one row per n with the rate at each reg of the grid and beyond it
    for r in ("1e-06", "0.01", "0.1"):
        assert f"% non-PSD at reg {r}" in head and f"loss (31) at reg {r}" in head
    assert "| 50 |" in head and "| 100 |" in head


# ---------------------------------------------------------------------- sgb-logreg
def _sgb_tiny(max_method_s: float):
    from kernelkit_experiments import sgb_logreg as S

    return S.Config(
        datasets=(S.DataSpec("breast_cancer", 1e-2, 100, 2, ranks=(1, 5)),),
        etas=(1.0,),
        adam_etas=(0.01,),
        schedules=("constant",),
        seeds=1,
        max_method_s=max_method_s,
        lbfgs=False,
        adam=False,
    )


def _sgb_problem():
    from kernelkit.datasets._sgb import load_sgb_dataset
    from kernelkit_experiments import _sgb_common as C

    return C.make_problem(load_sgb_dataset("breast_cancer"), 1e-2)


def test_sgb_which_methods_run_does_not_depend_on_the_measured_time(monkeypatch):
    """The same configuration runs the same methods on a slow and on a fast machine:
    the measured step time is reported, the cost model decides."""
    from kernelkit_experiments import _sgb_common as C
    from kernelkit_experiments import sgb_logreg as S

    if not C.bound_solver_available():
        import pytest

        pytest.skip("kernelkit.optim not available")
    cfg, pr = _sgb_tiny(30.0), _sgb_problem()
    gated = ["SPFB (dense)", "LSPFB k=1", "LSPFB k=5"]
    ran = {}
    for machine, measured in (("slow", (1e4, 1e6)), ("fast", (1e-9, 1e-7))):
        monkeypatch.setattr(S, "estimate_seconds", lambda *a, _m=measured, **k: _m)
        res = S.compare(pr, cfg.datasets[0], cfg, methods=["SGD", "SPFB", *gated])
        ran[machine] = {m for m in res if not m.startswith("_")}
        for m in gated:  # the measured time is kept for the report, next to the model
            assert res["_cost"][m]["measured_s"] == measured[1]
    # the cost model of these tiny problems is far below 30 s: everything runs
    assert ran["slow"] == ran["fast"] == {"SGD", "SPFB", *gated}


def test_sgb_cost_model_pins_the_full_mode_methods():
    """The full mode's gated methods, from the shapes alone (no data, no clock)."""
    from kernelkit_experiments import sgb_logreg as S

    shapes = {  # T, p (with the bias), classes
        "fashion_mnist": (2000, 785, 10),
        "mnist": (2000, 785, 10),
        "digits": (1797, 65, 10),
        "breast_cancer": (569, 31, 2),
        "income": (5000, 76, 2),
    }
    runs = {}
    for spec in S.FULL.datasets:
        T, p, k = shapes[spec.name]
        for m in S.methods_for(spec, S.FULL, bound=True):
            if S.is_gated(m):
                a = S.model_seconds(m, T, p, k, spec, S.FULL)
                assert a == S.model_seconds(m, T, p, k, spec, S.FULL)  # deterministic
                runs[(spec.name, m)] = a[1] <= S.FULL.max_method_s
    skipped = sorted(key for key, ok in runs.items() if not ok)
    # the dense d x d solve at d = 7850 and the rank-100 LSPFB on digits do not fit 30 s
    assert skipped == [
        ("digits", "LSPFB k=100"),
        ("fashion_mnist", "SPFB (dense)"),
        ("mnist", "SPFB (dense)"),
    ]


def test_sgb_report_prints_the_cost_model_next_to_the_measured_time(tmp_path):
    from kernelkit_experiments import _sgb_common as C
    from kernelkit_experiments import sgb_logreg as S

    if not C.bound_solver_available():
        import pytest

        pytest.skip("kernelkit.optim not available")
    S.run(tmp_path, quick=True, config=_sgb_tiny(1e-9))  # the model exceeds any 1e-9 s
    text = (tmp_path / "report.md").read_text()
    assert "**Not run**" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("- `breast_cancer` LSPFB k=5:"))
    assert "cost model" in line and "budget 1e-09 s" in line and "measured here" in line
    # the cost table lists every gated method with the model and the measured seconds
    table = text.split("**Cost model**", 1)[1]
    assert "measured here" in table and "nominal" in table
    for m in ("SPFB (dense)", "LSPFB k=1", "LSPFB k=5"):
        assert f"| breast_cancer | {m} |" in table, m
