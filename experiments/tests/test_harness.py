"""The shared experiment harness: seeds, the two-standard-error verdicts, aggregation,
plots and the files of a run."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, replace

import numpy as np
import pytest

from kernelkit_experiments import _harness as H
from kernelkit_experiments._summary import claim_counts


def _claim(op=">", threshold=0.0, key="v"):
    return H.Claim("c", "p", key, lambda r: r[key], op=op, threshold=threshold)


def test_judge_two_standard_error_rule():
    runs = [{"v": 1.0}, {"v": 2.0}, {"v": 3.0}]  # mean 2, s.d. 1, s.e. 1/sqrt(3)
    two_se = 2 / math.sqrt(3)  # 1.1547
    v = H.judge(_claim(threshold=2 - two_se - 0.01), runs)
    assert (v.mean, v.sd, v.n, v.verdict) == (2.0, 1.0, 3, "yes")
    assert v.se == pytest.approx(1 / math.sqrt(3))
    assert H.judge(_claim(threshold=2 - two_se + 0.01), runs).verdict == H.TIE
    assert H.judge(_claim(threshold=2 + two_se - 0.01), runs).verdict == H.TIE
    assert H.judge(_claim(threshold=2 + two_se + 0.01), runs).verdict == "no"
    # "<" claims: the same distances, the verdicts swapped
    assert H.judge(_claim("<", 2 - two_se - 0.01), runs).verdict == "no"
    assert H.judge(_claim("<", 2 + two_se + 0.01), runs).verdict == "yes"


def test_judge_noise_free_and_missing_values():
    same = [{"v": 0.5}] * 4  # s.d. 0: any difference is decisive, none is a tie
    assert H.judge(_claim(threshold=0.4), same).verdict == "yes"
    assert H.judge(_claim(threshold=0.6), same).verdict == "no"
    assert H.judge(_claim(threshold=0.5), same).verdict == H.TIE
    # NaN seeds are left out of the statistics; no finite value at all: n/a
    v = H.judge(_claim(), [{"v": 1.0}, {"v": math.nan}, {"v": 3.0}])
    assert (v.mean, v.n) == (2.0, 2)
    assert H.judge(_claim(), [{"v": math.nan}] * 3).verdict == "n/a"
    with pytest.raises(ValueError, match="op"):
        _claim(op=">=")


def test_verdict_counts_keep_ties_apart():
    vs = [H.Verdict(0, 0, 3, w) for w in ("yes", "yes", "no", H.TIE, "n/a")]
    assert H.verdict_counts(vs) == {"yes": 2, "no": 1, "tie": 1, "n/a": 1}


def test_aggregate_matches_numpy_and_ignores_nan():
    rng = np.random.default_rng(0)
    runs = [{"s": float(rng.normal()), "a": rng.normal(size=4)} for _ in range(5)]
    agg = H.aggregate(runs)
    s = np.array([r["s"] for r in runs])
    a = np.stack([r["a"] for r in runs])  # (5, 4)
    assert agg["s"]["mean"] == pytest.approx(s.mean()) and agg["s"]["sd"] == pytest.approx(
        s.std(ddof=1)
    )
    np.testing.assert_allclose(agg["a"]["mean"], a.mean(0))
    np.testing.assert_allclose(agg["a"]["sd"], a.std(0, ddof=1))
    runs[0]["a"] = np.array([np.nan, 1.0, 1.0, 1.0])
    agg = H.aggregate(runs)
    assert agg["a"]["mean"][0] == pytest.approx(a[1:, 0].mean())
    assert agg["a"]["sd"][0] == pytest.approx(a[1:, 0].std(ddof=1))


@dataclass(frozen=True)
class Toy:
    n: int = 3
    offset: float = 0.0


def _toy_compute(config, seed):
    i = seed % 1000  # 0, 1, 2, ...: per-seed values known exactly
    x = np.arange(config.n, dtype=float)
    return {
        "gap": 1.0 + 0.01 * (i % 2),  # decisively above 0
        "noise": (-1.0) ** i + config.offset,  # mean about 0, s.d. about 1: a tie
        "curve": x + i,
        "curve2": 2 * x,
    }


def _toy_check(config):
    if config.n <= 0:
        raise ValueError("n must be > 0")


def _toy_spec(seeds=(5, 5)):
    return H.Spec(
        name="toy",
        title="Toy experiment",
        description="d",
        quick=Toy(),
        full=Toy(n=4),
        compute=_toy_compute,
        claims=lambda c: [
            H.Claim("gap is positive", "yes", "gap", lambda r: r["gap"]),
            H.Claim("gap is negative", "yes", "gap", lambda r: r["gap"], op="<"),
            H.Claim("noise is positive", "yes", "noise", lambda r: r["noise"]),
        ],
        plots=(
            H.Plot(
                "curves.png",
                "two curves",
                lambda c: [
                    H.Panel("curves", {"a": "curve", "b": "curve2"}, "y", range(c.n), "x"),
                    H.Panel("bars", {"gap": "gap", "noise": "noise"}, "value", kind="bar"),
                ],
            ),
        ),
        setup=lambda c: f"## Setup\n\nn = {c.n}",
        sections=lambda c, runs: [f"## Seeds\n\n{len(runs)} runs"],
        seeds=seeds,
        check=_toy_check,
    )


def test_run_seeds_minimums():
    seen = []

    def compute(config, seed):
        seen.append(seed)
        return {"v": 0.0}

    spec = H.Spec("s", "t", "d", Toy(), Toy(), compute, lambda c: [])
    # max(n_seeds, MIN_SEEDS) seeds, however fast they run
    assert len(H.run_seeds(spec, Toy(), seed=2, n_seeds=1, progress=False)) == 3
    assert seen == [2000, 2001, 2002]
    assert len(H.run_seeds(spec, Toy(), 0, n_seeds=4, progress=False)) == 4
    with pytest.raises(ValueError, match="n_seeds"):
        H.run_seeds(spec, Toy(), 0, n_seeds=1000, progress=False)


def test_run_spec_writes_report_json_and_plot(tmp_path):
    res = H.run_spec(_toy_spec(), tmp_path, quick=True, seed=0, progress=False)
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# Toy experiment") and md.index("## Setup") < md.index("claims")
    assert "| gap is positive | yes | gap > 0: 1 ± 0.0055 (n = 5) | yes |" in md
    assert "| gap is negative | yes | gap < 0: 1 ± 0.0055 (n = 5) | no |" in md
    assert "| noise is positive | yes | noise > 0: 0.2 ± 1.1 (n = 5) | tie (within noise) |" in md
    assert "## Seeds\n\n5 runs" in md and "![two curves](curves.png)" in md
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["claim_counts"] == {"yes": 1, "no": 1, "tie": 1, "n/a": 0}
    assert data["seeds"] == [0, 1, 2, 3, 4] and len(data["runs"]) == 5
    assert data["config"] == {"n": 3, "offset": 0.0} and data["quick"] is True
    assert data["claims"][2]["verdict"] == H.TIE and res["claim_counts"]["tie"] == 1
    # the summary reads the same counts back from report.md, ties apart
    assert claim_counts(tmp_path) == {
        "yes": 1,
        "partly": 0,
        "no": 1,
        "tie": 1,
        "other": 0,
        "variant": 0,
    }
    # overrides replace configuration fields and go through the spec's check
    H.run_spec(_toy_spec(), tmp_path / "o", quick=True, progress=False, offset=5.0)
    counts = json.loads((tmp_path / "o" / "results.json").read_text())["claim_counts"]
    assert counts["yes"] == 2 and counts["tie"] == 0
    with pytest.raises(ValueError, match="n must be"):
        H.run_spec(_toy_spec(), tmp_path / "bad", quick=True, progress=False, n=0)


def test_a_series_keeps_its_colour_across_the_panels_of_a_figure():
    """A label missing from one panel does not shift the colours of the others."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = H.aggregate([_toy_compute(Toy(), i) for i in range(3)])
    full = H.Panel("all", {"a": "curve", "b": "curve2", "c": "curve"}, "y", range(3), "x")
    gap = H.Panel("no b", {"a": "curve", "c": "curve"}, "y", range(3), "x")
    colors = H.series_colors([full, gap])
    assert colors == {"a": "C0", "b": "C1", "c": "C2"}
    _, (ax1, ax2) = plt.subplots(1, 2)
    H.draw_panel(ax1, full, agg, 3, colors)
    H.draw_panel(ax2, gap, agg, 3, colors)
    by_label = {ln.get_label(): ln.get_color() for ln in ax2.get_lines()}
    assert by_label == {"a": "C0", "c": "C2"}
    assert [ln.get_color() for ln in ax1.get_lines()] == ["C0", "C1", "C2"]
    many = H.Panel("m", {f"s{i}": "curve" for i in range(12)}, "y", range(3), "x")
    assert len(set(H.series_colors([many]).values())) == 12  # past the 10-colour cycle
    plt.close("all")


def test_panels_have_legends_bands_and_at_most_six_series():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [_toy_compute(Toy(), i) for i in range(4)]
    agg = H.aggregate(runs)
    fig, ax = plt.subplots()
    H.draw_panel(ax, H.Panel("p", {"a": "curve", "b": "curve2"}, "y", range(3), "x"), agg, 4)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert len(ax.collections) == 2  # one s.d. band per series
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    m, s = agg["curve"]["mean"], agg["curve"]["sd"]
    assert band.min() == pytest.approx((m - s).min()) and band.max() == pytest.approx((m + s).max())
    assert "mean ± s.d., 4 seeds" in ax.get_title()
    # reference lines: dashed, in their series' colour, no band
    ref = H.Panel("r", {"a": "curve"}, "y", range(3), reference={"a exact": "curve2"})
    H.draw_panel(ax, ref, agg, 4)
    dashed = ax.get_lines()[-1]
    assert dashed.get_linestyle() == "--" and dashed.get_color() == "C0"
    np.testing.assert_allclose(dashed.get_ydata(), agg["curve2"]["mean"])
    with pytest.raises(ValueError, match="reference"):
        H.draw_panel(ax, H.Panel("r", {}, "y", range(3), reference={"x": "curve"}), agg, 4)
    # bar panels: one bar per series, named on the x axis
    fig2, ax2 = plt.subplots()
    H.draw_panel(ax2, H.Panel("b", {"g": "gap", "n": "noise"}, "v", kind="bar"), agg, 4)
    fig2.canvas.draw()
    assert [t.get_text() for t in ax2.get_xticklabels()] == ["g", "n"]
    plt.close(fig2)
    too_many = H.Panel("busy", {str(i): "curve" for i in range(7)}, "y", range(3))
    with pytest.raises(ValueError, match="at most 6"):
        H.draw_panel(ax, too_many, agg, 4)
    plt.close(fig)


def test_ecdf_panel_draws_mean_order_statistics_with_sd_band():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # two seeds of 4 sorted samples: order statistics (1, 3), (2, 2), (3, 5), (4, 10)
    runs = [{"r": np.array([1.0, 2.0, 3.0, 4.0])}, {"r": np.array([3.0, 2.0, 5.0, 10.0])}]
    agg = H.aggregate(runs)
    fig, ax = plt.subplots()
    H.draw_panel(ax, H.Panel("e", {"ratio": "r"}, "ECDF", xlabel="ratio", kind="ecdf"), agg, 2)
    line = ax.get_lines()[0]
    np.testing.assert_allclose(line.get_xdata(), [2.0, 2.0, 4.0, 7.0])  # mean order stat.
    np.testing.assert_allclose(line.get_ydata(), [0.25, 0.5, 0.75, 1.0])
    assert line.get_drawstyle() == "steps-post"
    band = ax.collections[0].get_paths()[0].vertices[:, 0]  # horizontal ± 1 s.d.
    sd = np.std([[1, 2, 3, 4], [3, 2, 5, 10]], axis=0, ddof=1)  # (sqrt 2, 0, sqrt 2, 3 sqrt 2)
    m = np.array([2.0, 2.0, 4.0, 7.0])
    assert band.min() == pytest.approx((m - sd).min()) and band.max() == pytest.approx(
        (m + sd).max()
    )
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ratio"]
    assert "mean ± s.d., 2 seeds" in ax.get_title()
    unsorted = H.aggregate([{"r": np.array([2.0, 1.0])}])
    with pytest.raises(ValueError, match="sorted"):
        H.draw_panel(ax, H.Panel("e", {"ratio": "r"}, "ECDF", kind="ecdf"), unsorted, 1)
    with pytest.raises(ValueError, match="kind"):
        H.Panel("e", {"ratio": "r"}, "ECDF", kind="cdf")
    plt.close(fig)


#: experiment modules declared as harness specs (the others keep their own ``run``)
CONVERTED = (
    "_harness",
    "favor_variance",
    "jdl_small",
    "jdl_classification",
    "hrf_uci",
    "hrf_clustered",
    "hrf_pointwise",
    "favor_classification",
    "dp_variance",
    "dp_frobenius",
    "dp_gp",
    "attention_approx",
    "tiny_lm",
    "jdl_gaussian",
    "sgb_logreg",
    "mlm_encoder",
)


@pytest.mark.parametrize("module", CONVERTED)
def test_converted_modules_have_no_function_over_80_lines(module):
    import ast
    import importlib

    mod = importlib.import_module(f"kernelkit_experiments.{module}")
    tree = ast.parse(open(mod.__file__).read())
    long = [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert long == []
    if module != "_harness":
        assert isinstance(mod.SPEC, H.Spec) and mod.SPEC.name == mod.NAME


def _variant_spec():
    """The toy with its headline reading, a marked variant ("flipped": claims of the
    headline run), one named only by a claim's text ("text") and one with its own run
    ("shifted": offset 5 turns the noise claim decisive)."""

    def claims(c):
        return [
            H.Claim("gap is positive", "yes", "gap", lambda r: r["gap"]),
            H.Claim("noise is positive", "yes", "noise", lambda r: r["noise"]),
            H.Claim("gap is negative", "yes", "gap", lambda r: r["gap"], "<", variant="flipped"),
            H.Claim("Variant (t (x)): gap above 2", "yes", "gap", lambda r: r["gap"], ">", 2.0),
        ]

    return replace(
        _toy_spec(),
        claims=claims,
        reading="The headline reading is the toy's own.",
        variants={
            "flipped": H.Variant("Flipped, because a reader might."),
            "shifted": H.Variant("Shifted, another reading.", {"offset": 5.0}),
        },
    )


def test_claim_variant_from_text_and_errors():
    assert H.Claim("c", "p", "q", float).variant is None
    assert H.Claim("Variant (trig): c", "p", "q", float).variant == "trig"
    assert H.Claim("Variant (trig): c", "p", "q", float, variant="trig").variant == "trig"
    # names may hold one level of parentheses: "Variant (gamma ~ N(0, 0.3^2)): ..."
    assert H.Claim("Variant (g ~ N(0, 0.3^2)): c", "p", "q", float).variant == "g ~ N(0, 0.3^2)"
    with pytest.raises(ValueError, match="contradicts"):
        H.Claim("Variant (trig): c", "p", "q", float, variant="other")
    with pytest.raises(ValueError, match="variant"):
        H.Claim("c", "p", "q", float, variant=" ")
    with pytest.raises(ValueError, match="reason"):
        H.Variant("")


def test_run_spec_judges_variants_apart(tmp_path):
    res = H.run_spec(_variant_spec(), tmp_path, quick=True, progress=False)
    md = (tmp_path / "report.md").read_text()
    # headline: its reading sentence, the unmarked claims only, counted alone
    head = md[md.index("## Paper's claims vs ours") : md.index("## Variant claims")]
    assert "**Reading.** The headline reading is the toy's own." in head
    assert "gap is positive" in head and "gap is negative" not in head
    assert "Variant (t (x))" not in head
    assert res["claim_counts"] == {"yes": 1, "no": 0, "tie": 1, "n/a": 0}
    # results: every claim, the headline's first, each with its variant
    assert [(c["claim"], c["variant"]) for c in res["claims"]] == [
        ("gap is positive", None),
        ("noise is positive", None),
        ("gap is negative", "flipped"),
        ("gap is positive", "shifted"),
        ("noise is positive", "shifted"),
        ("Variant (t (x)): gap above 2", "t (x)"),
    ]
    # each variant: its own table after the headline claims, in declared order first
    order = [md.index(f"## Variant claims: {v}") for v in ("flipped", "shifted", "t (x)")]
    assert order == sorted(order) and order[0] > md.index("## Paper's claims vs ours")
    assert "**Reading.** Flipped, because a reader might." in md
    assert "| gap is negative | yes | gap < 0: 1 ± 0.0055 (n = 5) | no |" in md
    assert "| Variant (t (x)): gap above 2 | yes | gap > 2: 1 ± 0.0055 (n = 5) | no |" in md
    assert "`offset = 5.0`" in md and "| noise is positive | yes | noise > 0: 5.2" in md
    v = res["variants"]
    assert v["flipped"]["claim_counts"] == {"yes": 0, "no": 1, "tie": 0, "n/a": 0}
    assert v["flipped"]["reason"] == "Flipped, because a reader might."
    assert "runs" not in v["flipped"]  # judged on the headline run
    # the run with overrides: its own seeds and config; the unmarked claims, decisive now
    assert v["shifted"]["config"] == {"n": 3, "offset": 5.0} and len(v["shifted"]["runs"]) == 5
    assert [c["verdict"] for c in res["claims"][3:5]] == ["yes", "yes"]
    assert v["t (x)"]["reason"] == "" and v["t (x)"]["claim_counts"]["no"] == 1
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["variants"].keys() == {"flipped", "shifted", "t (x)"}
    assert data["reading"] == "The headline reading is the toy's own."
    # the summary counts the 4 variant claims apart from the headline's yes / no / tie
    assert claim_counts(tmp_path) == {
        "yes": 1,
        "partly": 0,
        "no": 0,
        "tie": 1,
        "other": 0,
        "variant": 4,
    }
    with pytest.raises(ValueError, match="n must be"):
        bad = replace(_variant_spec(), variants={"bad": H.Variant("Bad.", {"n": 0})})
        H.run_spec(bad, tmp_path / "bad", quick=True, progress=False)


def test_summary_counts_variant_claims_by_text_and_writes_the_column(tmp_path):
    from kernelkit_experiments._summary import claim_verdicts, write_summary

    sec = (
        "#### Paper's claims vs ours\n\n| claim | paper | holds on our data? |\n|---|---|---|\n"
        "| a | x | yes |\n| Variant (lit): b | x | no |\n| **Variant (g ~ N(0, 1)): c** | x | tie |"
    )
    assert claim_verdicts([sec]) == {
        "yes": 1,
        "partly": 0,
        "no": 0,
        "tie": 0,
        "other": 0,
        "variant": 2,
    }
    H.run_spec(_variant_spec(), tmp_path / "toy", quick=True, progress=False)
    text = write_summary(tmp_path, [("toy", "ok", 1.0, "")]).read_text()
    assert "**1 yes, 0 partly, 0 no, 1 tie (within noise)**; **4 variant** claims." in text
    assert "| 1 / 0 / 0 / 1 / 4 |" in text and "#### Variant claims: shifted" in text


def test_judge_infinite_values_are_not_dropped():
    """A ratio over a zero baseline is infinite: decisive when every seed agrees, n/a
    when seeds disagree (there is no finite mean or standard error); never left out."""
    inf = [{"v": math.inf}] * 3
    v = H.judge(_claim(">", 1.0), inf)
    assert (v.mean, v.sd, v.n, v.verdict) == (math.inf, 0.0, 3, "yes")
    assert H.judge(_claim("<", 1.0), inf).verdict == "no"
    assert H.judge(_claim("<", 1.0), [{"v": -math.inf}] * 3).verdict == "yes"
    # one infinite seed among finite ones: the finite ones alone would read "tie"
    mixed = [{"v": 1.0}, {"v": 2.0}, {"v": math.inf}, {"v": math.nan}]
    v = H.judge(_claim(">", 1.0), mixed)
    assert (v.n, v.verdict) == (3, "n/a") and math.isnan(v.mean)
    assert "inf ± 0" in H._claims_table([_claim(">", 1.0)], [H.judge(_claim(">", 1.0), inf)])


def test_claim_threshold_nan_is_refused():
    # every comparison with NaN is False: such a claim would always read "no"
    with pytest.raises(ValueError, match="threshold"):
        _claim(threshold=math.nan)


def test_log_axes_without_positive_values_and_panels_without_series():
    """All-NaN or all-zero data on a log axis, and an empty panel, draw without an error or
    a warning: the axis stays linear and the title says why; an empty panel says so."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nan_runs = [{"c": np.full(3, np.nan), "z": 0.0, "one": np.array([2.0])} for _ in range(3)]
    agg = H.aggregate(nan_runs)
    panels = [
        H.Panel("nan", {"a": "c"}, "y", x=[1, 2, 3], logy=True),
        H.Panel("zero bars", {"a": "z"}, "y", kind="bar", logy=True),
        H.Panel("x at 0", {"a": "one"}, "y", x=[0.0], logx=True),
        H.Panel("one point", {"a": "one"}, "y", x=[10.0], logx=True, logy=True),
        H.Panel("empty", {}, "y", x=[1, 2, 3]),
    ]
    fig, axes = plt.subplots(1, len(panels))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for ax, panel in zip(axes, panels, strict=True):
            H.draw_panel(ax, panel, agg, 3)
        fig.savefig(io.BytesIO(), format="png")
    scales = [(ax.get_xscale(), ax.get_yscale()) for ax in axes]
    assert scales[:4] == [("linear", "linear")] * 3 + [("log", "log")]
    assert axes[0].get_title().endswith("linear y: no positive values)")
    assert axes[2].get_title().endswith("linear x: no positive values)")
    assert "no positive" not in axes[3].get_title()
    assert axes[4].get_legend() is None and axes[4].texts[0].get_text() == "no series"
    plt.close(fig)


def test_missing_or_ragged_metrics_are_named():
    """A metric missing from one seed, of another shape in one seed, or a panel series
    that names no metric: a ValueError that names it (was a bare KeyError, or NumPy's
    'inhomogeneous shape', or a metric silently left out when seed 0 lacked it)."""
    with pytest.raises(ValueError, match=r"seed 1 returned other metrics than seed 0 \('b'\)"):
        H.aggregate([{"a": 1.0}, {"a": 2.0, "b": 3.0}])
    with pytest.raises(ValueError, match=r"seed 2 .*'a'"):
        H.aggregate([{"a": 1.0}, {"a": 1.0}, {}])
    with pytest.raises(ValueError, match="metric 'a' has a different shape"):
        H.aggregate([{"a": [1.0, 2.0]}, {"a": [1.0]}])
    with pytest.raises(ValueError, match="at least one seed"):
        H.aggregate([])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    panel = H.Panel("p", {"A": "a", "B": "typo"}, "y", x=[1.0])
    with pytest.raises(ValueError, match="panel 'p': no metric 'typo'"):
        H.draw_panel(ax, panel, H.aggregate([{"a": [1.0]}]), 1)
    plt.close(fig)
