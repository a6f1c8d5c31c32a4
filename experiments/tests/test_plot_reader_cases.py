"""The experiments' plots as a reader looks at them: a method keeps its colour across the
figures of one report, legends name the methods as the tables do, and a quantity is
plotted in the unit the tables print it in."""

from __future__ import annotations

from dataclasses import dataclass, replace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from kernelkit_experiments import _harness as H
from kernelkit_experiments import favor_classification as fc
from kernelkit_experiments import favor_variance as fv
from kernelkit_experiments._report import Report


@dataclass(frozen=True)
class _Cfg:
    n: int = 3


def _compute(config, seed):
    x = np.arange(config.n, dtype=float)
    return {"a": x + seed % 1000, "b": 2 * x, "c": 3 * x}


def _two_figure_spec():
    """Figure 1 draws methods a, b; figure 2 draws b, c: drawn figure by figure, b would
    take the first colour of the cycle in figure 2 (a's colour in figure 1)."""
    return H.Spec(
        name="two-figures",
        title="two figures",
        description="d",
        quick=_Cfg(),
        full=_Cfg(),
        compute=_compute,
        claims=lambda c: [H.Claim("t", "p", "q", lambda r: 1.0)],
        plots=(
            H.Plot("one.png", "one", lambda c: [H.Panel("1", {"a": "a", "b": "b"}, "y", range(3))]),
            H.Plot("two.png", "two", lambda c: [H.Panel("2", {"b": "b", "c": "c"}, "y", range(3))]),
        ),
        seeds=(3, 3),
    )


def test_a_method_keeps_its_colour_across_the_figures_of_one_report(tmp_path, monkeypatch):
    seen: dict[str, dict[str, str]] = {}
    original = Report.figure

    def spy(self, fig, filename, caption=""):
        seen[filename] = {ln.get_label(): ln.get_color() for ax in fig.axes for ln in ax.lines}
        return original(self, fig, filename, caption)

    monkeypatch.setattr(Report, "figure", spy)
    H.run_spec(_two_figure_spec(), tmp_path, quick=True, progress=False)
    assert set(seen) == {"one.png", "two.png"}
    assert seen["one.png"]["b"] == seen["two.png"]["b"]  # the shared method
    assert len({*seen["one.png"].values(), *seen["two.png"].values()}) == 3  # 3 methods


def test_many_methods_keep_their_colours_without_pale_look_alikes():
    """Over 10 labels in all (jdl-gaussian: methods, then eps values, then laws): shared
    labels keep their colour, no two series of one figure share one, and none gets a
    pale tab20 twin of another (eps = 0.1 / 0.001 came out dark and light purple)."""

    def fig(*labels):
        return [H.Panel("p", dict.fromkeys(labels, "m"), "y", range(3))]

    figures = [
        fig("JDL", "JPDL", "CME", "unconditional"),
        fig("eps = 0.1", "eps = 0.001"),
        fig("JDL", "CME", "g1", "g2", "g3", "g4", "g5"),
        fig("eps = 0.1", "h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8", "h9"),
    ]
    maps = H.figure_colors(figures)
    for m in maps:
        assert len(set(m.values())) == len(m)  # distinct within a figure
        assert set(m.values()) <= {f"C{i}" for i in range(10)}  # the default cycle only
    assert maps[2]["JDL"] == maps[0]["JDL"] and maps[2]["CME"] == maps[0]["CME"]
    assert maps[3]["eps = 0.1"] == maps[1]["eps = 0.1"]
    # a new label avoids the colours earlier figures gave to other methods while it can
    assert not set(maps[1].values()) & set(maps[0].values())
    # few labels in all: the same map everywhere, as series_colors of all panels
    few = H.figure_colors(figures[:2])
    assert few[0] | few[1] == H.series_colors(figures[0] + figures[1])


def test_favor_variance_gap_legend_names_the_methods_of_the_variance_plot():
    """gaps.png used to label its series "SDERF − GERF" etc., so SDERF was brown in
    variance.png and blue in gaps.png; the labels are now the methods' names."""
    cfg = replace(fv.QUICK, regimes=("normal", "heterogen"))  # no data sets to load
    var, gap = fv._variance_panels(cfg), fv._gap_panels(cfg)
    for p in gap:
        assert set(p.series) <= set(fv.METHODS) and "GERF" not in p.series
        assert "[nats]" in p.ylabel
    assert [p.title for p in gap] == [p.title for p in var]
    colors = H.series_colors([p for panels in (var, gap) for p in panels])
    assert len(set(colors.values())) == len(fv.METHODS)  # one colour per method


def test_favor_classification_plots_accuracy_in_percent_as_its_tables():
    """The tables print test accuracy in % (85.6); the plot showed the fraction (0.856)
    under an axis labelled without a unit."""
    cfg = fc.QUICK
    panel = fc._dataset_panels(cfg)[0]
    assert "%" in panel.ylabel and panel.xlabel.startswith("M (")
    frac = np.linspace(0.5, 0.9, len(cfg.Ms))
    agg = {k: {"mean": frac, "sd": np.full_like(frac, 0.05)} for k in panel.series.values()}
    _, ax = plt.subplots()
    try:
        H.draw_panel(ax, panel, agg, 5)
        line = ax.get_lines()[0]
        # the plotted values are the table's: 100 x the fraction (exact up to round-off)
        np.testing.assert_allclose(line.get_ydata(), 100 * frac, rtol=1e-12)
        band = ax.collections[0].get_paths()[0].vertices[:, 1]  # mean ± s.d., scaled too
        assert band.min() == pytest.approx(100 * (frac.min() - 0.05))
        assert band.max() == pytest.approx(100 * (frac.max() + 0.05))
    finally:
        plt.close("all")


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan")])
def test_panel_scale_must_be_positive(scale):
    with pytest.raises(ValueError, match="scale"):
        H.Panel("t", {"a": "a"}, "y", range(3), scale=scale)


# ----------------------------------------------------------------- sgb-logreg
def test_sgb_lbfgs_records_no_iterate_past_its_budget():
    """SciPy's L-BFGS-B overshoots maxfun by a line search: on breast_cancer with a budget
    of 4 evaluations the trace ended at 5, so the table's final gap (0.706) was not the
    gap the plot ends on at epoch 4 (0.829)."""
    from kernelkit.datasets._sgb import load_sgb_dataset
    from kernelkit_experiments import _sgb_common as C

    problem = C.make_problem(load_sgb_dataset("breast_cancer"), 1e-3)
    for budget in (3, 4, 5):
        tr = C.run_lbfgs(problem, budget)
        assert tr.epochs[0] == 0 and tr.epochs[-1] <= budget, (budget, tr.epochs)


def test_sgb_curve_shows_a_gap_only_once_it_is_reached():
    """An L-BFGS iterate recorded after 2 evaluations was drawn at epoch 1 already."""
    from kernelkit_experiments import _sgb_common as C
    from kernelkit_experiments import sgb_logreg as S

    tr = C.Trace("L-BFGS", {}, 0)
    for e, f in ((0, 10.0), (2, 5.0), (3, 3.0)):
        tr.record(e, 0.0, f)
    # gaps (f - 1) / 1 = 9, 4, 2 at evaluations 0, 2, 3; epoch 1 still has the first
    np.testing.assert_array_equal(S._curve(tr, 1.0, 3), [9.0, 9.0, 4.0, 2.0])


def test_sgb_panels_of_one_data_set_are_told_apart():
    """More methods than fit one panel: the data set's second panel had the same title."""
    from kernelkit_experiments import sgb_logreg as S

    titles = [p.title for p in S._panels(S.SPEC.quick)]
    assert len(titles) == len(set(titles)), titles
    assert any("part 2 of 2" in t for t in titles)  # the quick run splits income


def test_bars_on_a_log_axis_are_drawn_as_dots():
    """dp-gp's Frobenius errors (0.06 to 0.9) were bars on a log axis: each bar started at
    the axis floor, so NC SRF's looked a fraction of the others' length at a third of
    their value. On a log axis the mean is a dot with its error bar; linear: bars."""
    series = {"SRF": "a", "Opt. Macl.": "b"}
    agg = {
        "a": {"mean": np.float64(0.15), "sd": np.float64(0.02)},
        "b": {"mean": np.float64(0.45), "sd": np.float64(0.1)},
    }
    _, (ax_log, ax_lin) = plt.subplots(1, 2)
    try:
        H.draw_panel(ax_log, H.Panel("log", series, "error", kind="bar", logy=True), agg, 5)
        H.draw_panel(ax_lin, H.Panel("lin", series, "error", kind="bar"), agg, 5)
        assert ax_log.get_yscale() == "log" and not ax_log.patches  # no bars
        dots = [ln for ln in ax_log.lines if ln.get_marker() == "o"]
        assert [float(ln.get_ydata()[0]) for ln in dots] == [0.15, 0.45]
        assert ax_log.get_legend_handles_labels()[1] == list(series)
        assert [round(p.get_height(), 12) for p in ax_lin.patches] == [0.15, 0.45]
    finally:
        plt.close("all")


def test_a_log_panel_says_where_a_band_reaches_zero():
    """dp-variance / attention-approx: seeds with s.d. above the mean drew a band down to
    the log axis's floor, a slab that reads as values there; the title now says why."""
    x = [1.0, 2.0, 3.0]
    wide = {"mean": np.array([1.0, 10.0, 100.0]), "sd": np.array([0.5, 20.0, 50.0])}
    tight = {"mean": np.array([1.0, 10.0, 100.0]), "sd": np.array([0.5, 5.0, 50.0])}
    note = "a band reaching 0 ends at the axis"
    _, axes = plt.subplots(1, 3)
    try:
        H.draw_panel(axes[0], H.Panel("w", {"A": "a"}, "MSE", x, logy=True), {"a": wide}, 5)
        H.draw_panel(axes[1], H.Panel("t", {"A": "a"}, "MSE", x, logy=True), {"a": tight}, 5)
        H.draw_panel(axes[2], H.Panel("lin", {"A": "a"}, "MSE", x), {"a": wide}, 5)
        assert note in axes[0].get_title()
        assert note not in axes[1].get_title()  # every mean − s.d. > 0
        assert note not in axes[2].get_title()  # linear axis: the band shows below 0
    finally:
        plt.close("all")


def _band_bottom(ax):
    """The lowest y of the panel's filled bands."""
    return min(p.get_paths()[0].vertices[:, 1].min() for p in ax.collections)


def test_a_band_of_a_non_negative_quantity_stops_at_zero():
    """An error or a run time whose s.d. over seeds exceeds its mean drew a ± 1 s.d.
    band below 0 on a linear axis: values the quantity cannot take. Where every seed gave
    a value >= 0, the band (and a bar's error bar) is cut at 0 and the title says so; a
    quantity with negative seed values keeps its band as it is."""
    x = [1.0, 2.0, 3.0]
    runs = [{"err": np.array([0.1, 1.0, 2.0])}, {"err": np.array([0.1, 5.0, 2.2])}]
    runs += [{"err": np.array([0.1, 0.2, 2.1])}]
    agg = H.aggregate(runs)  # err[1]: mean 2.07, s.d. 2.55 -> mean - s.d. < 0
    assert np.array_equal(agg["err"]["min"], [0.1, 0.2, 2.0])
    signed = H.aggregate([{"err": r["err"] - 0.15} for r in runs])  # a seed value < 0
    note = "bands of values ≥ 0 cut at 0"
    _, axes = plt.subplots(1, 4)
    try:
        H.draw_panel(axes[0], H.Panel("e", {"A": "err"}, "error", x), agg, 3)
        H.draw_panel(axes[1], H.Panel("s", {"A": "err"}, "error", x), signed, 3)
        assert _band_bottom(axes[0]) == 0.0 and note in axes[0].get_title()
        assert _band_bottom(axes[1]) < -0.4 and note not in axes[1].get_title()
        # a bar of the middle value: its error bar stops at 0, its upper half is the s.d.
        one = {"e": {k: v[1] for k, v in agg["err"].items()}}
        H.draw_panel(axes[2], H.Panel("b", {"A": "e"}, "error", x, kind="bar"), one, 3)
        seg = axes[2].collections[0].get_segments()[0]  # the error bar's line
        assert min(seg[:, 1]) == 0.0
        assert np.isclose(max(seg[:, 1]), agg["err"]["mean"][1] + agg["err"]["sd"][1])
        # an aggregate from before "min" existed (no information): drawn as before
        old = {"e": {"mean": agg["err"]["mean"], "sd": agg["err"]["sd"]}}
        H.draw_panel(axes[3], H.Panel("o", {"A": "e"}, "error", x), old, 3)
        assert _band_bottom(axes[3]) < 0 and note not in axes[3].get_title()
    finally:
        plt.close("all")


def test_an_ecdf_band_cut_at_zero_is_said_in_the_title():
    """The ECDF's horizontal ± 1 s.d. band of the order statistics is cut at 0 for a
    quantity >= 0, as a line panel's band: its title must say so too (it said nothing,
    so the band's edge at 0 read as a measured spread)."""
    runs = [{"t": np.array([0.0, 0.1, 3.0])}, {"t": np.array([0.0, 2.0, 3.1])}]
    runs += [{"t": np.array([0.05, 0.2, 3.2])}]
    agg = H.aggregate(runs)  # t[1]: mean 0.77, s.d. 1.07 -> mean - s.d. < 0
    note = "bands of values ≥ 0 cut at 0"
    _, axes = plt.subplots(1, 2)
    try:
        H.draw_panel(axes[0], H.Panel("e", {"A": "t"}, "CDF", kind="ecdf"), agg, 3)
        left = min(p.get_paths()[0].vertices[:, 0].min() for p in axes[0].collections)
        assert left == 0.0 and note in axes[0].get_title()
        # a band that stays above 0 is not cut, and the title says nothing
        up = H.aggregate([{"t": r["t"] + 5.0} for r in runs])
        H.draw_panel(axes[1], H.Panel("u", {"A": "t"}, "CDF", kind="ecdf"), up, 3)
        assert note not in axes[1].get_title()
    finally:
        plt.close("all")
