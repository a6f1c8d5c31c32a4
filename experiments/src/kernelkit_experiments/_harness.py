"""One harness for the experiments: a declarative :class:`Spec` per experiment.

An experiment declares its configurations (quick / full), a ``compute(config, seed)``
function that runs *one* seed and returns a flat dict of metrics (floats or 1-d
arrays), its paper :class:`Claim` s and its :class:`Plot` s. :func:`run_spec` does the
rest, the same way for every experiment:

* seeds: ``seed * 1000 + i`` for ``i = 0, 1, ...``; the spec's count for the mode, at
  least :data:`MIN_SEEDS`, and nothing else (not the machine's speed): the same
  ``seed`` gives the same seeds, so the same numbers; a progress bar over seeds;
* aggregation: mean and sample standard deviation (``ddof=1``) of every metric over the
  seeds;
* verdicts that respect noise (:func:`judge`): a claim reads "yes" or "no" only where
  its per-seed value differs from the claim's threshold by more than two standard
  errors (``2 s.d. / sqrt(n)``), otherwise "tie (within noise)";
* named readings: where the paper leaves a protocol choice open, the headline run takes
  the most likely reading (``Spec.reading`` says in one sentence why) and every other
  reading is a named :class:`Variant` (its own sentence why) whose claims get their own
  verdicts and their own table after the headline claims, counted apart. A variant
  either changes configuration fields (its own run) or owns claims of the headline run
  (``Claim(variant=name)``, or claim text starting with ``"Variant (<name>): "``);
* ``report.md`` (claims table with mean ± s.d., one per variant, the experiment's own
  sections, plots), ``results.json`` (config, seeds, per-seed metrics, claims with
  their statistics and variant, the headline verdict counts, each variant's reason,
  counts and own run) and PNG plots with at most :data:`MAX_SERIES` series per panel, a
  legend on every panel, ± 1 s.d. bands (:func:`draw_panel`) and one colour per series
  label across all the experiment's figures (:func:`figure_colors`).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ._report import Report, markdown_table

__all__ = [
    "MAX_SEED",
    "MAX_SERIES",
    "MIN_SEEDS",
    "MIN_SEEDS_FAST",
    "TIE",
    "Claim",
    "Panel",
    "Plot",
    "Spec",
    "Variant",
    "Verdict",
    "aggregate",
    "draw_panel",
    "figure_colors",
    "format_mean_sd",
    "judge",
    "judge_variants",
    "mean_sd",
    "run_seeds",
    "run_spec",
    "series_colors",
    "verdict_counts",
]

#: fewest seeds any claim is judged over
MIN_SEEDS = 3
#: largest base seed (``kernelkit reproduce --seed``): 32 bits, so that the seeds
#: ``seed * 1000 + i`` and the experiments' multiples of them fit torch's 64-bit generators
MAX_SEED = 2**32 - 1
#: seeds of a quick run unless the spec says otherwise (``Spec.seeds``); an experiment
#: whose run takes under a minute asks for at least this many
MIN_SEEDS_FAST = 5
#: most series drawn in one panel (split panels otherwise)
MAX_SERIES = 6
#: the verdict where the difference is within two standard errors
TIE = "tie (within noise)"

_OPS = {">": np.greater, "<": np.less}
#: claim text naming its variant: ``"Variant (<name>): ..."``
VARIANT_PREFIX = re.compile(r"^Variant \(((?:[^()]|\([^()]*\))+)\):\s*")


@dataclass(frozen=True)
class Claim:
    """A paper claim, judged on a per-seed scalar.

    ``value(metrics)`` maps one seed's metrics to a number; the claim holds where the
    mean over seeds is ``op`` (``">"`` or ``"<"``) ``threshold`` by more than two
    standard errors, fails where it is on the other side by as much, and is a tie
    otherwise. ``quantity`` says in words what ``value`` is (shown in the table).
    ``variant`` names the :class:`Variant` (reading) the claim belongs to (None: the
    headline reading); text starting with ``"Variant (<name>): "`` sets it to ``name``.
    """

    text: str
    paper: str
    quantity: str
    value: Callable[[Mapping[str, Any]], float]
    op: str = ">"
    threshold: float = 0.0
    variant: str | None = None

    def __post_init__(self):
        if self.op not in _OPS:
            raise ValueError(f"op must be '>' or '<', got {self.op!r}.")
        if math.isnan(self.threshold):  # every comparison with NaN is False: always "no"
            raise ValueError(f"threshold must be a number, got {self.threshold!r}.")
        m = VARIANT_PREFIX.match(self.text)
        if m:
            if self.variant not in (None, m.group(1)):
                raise ValueError(
                    f"variant={self.variant!r} contradicts the claim text {self.text!r}."
                )
            object.__setattr__(self, "variant", m.group(1))
        if self.variant is not None and not str(self.variant).strip():
            raise ValueError("variant must be a non-empty name or None.")


@dataclass(frozen=True)
class Variant:
    """A named reading of the paper's protocol other than the headline's.

    ``reason``: one sentence, why this is not the headline reading. ``overrides``:
    configuration fields it changes; the variant then gets its own run (same seeds) and
    is judged on the claims of its configuration (unmarked and its own; the sections and
    plots show the headline run). Without overrides, it owns the headline run's claims
    marked with its name. A variant without claims in a run has no table.
    """

    reason: str
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ValueError("a Variant needs a reason: one sentence saying why.")


@dataclass(frozen=True)
class Verdict:
    """A claim's statistics over ``n`` seeds and its verdict ("yes", "no" or :data:`TIE`)."""

    mean: float
    sd: float
    n: int
    verdict: str

    @property
    def se(self) -> float:
        return self.sd / math.sqrt(self.n) if self.n else math.nan


@dataclass(frozen=True)
class Panel:
    """One panel: ``series`` maps a label to a metric name whose per-seed values are
    1-d arrays over ``x`` (``kind="line"``: mean line, ± 1 s.d. band) or scalars
    (``kind="bar"``, one bar per series and ``x`` unused: mean, ± 1 s.d. error bar; on a log
    axis a dot instead of a bar, whose length there would depend on the axis floor) or,
    for ``kind="ecdf"``, samples sorted in increasing order, the same number per seed
    (``x`` unused): the empirical CDF through the mean over seeds of each order statistic,
    with a ± 1 s.d. band of the order statistics (horizontal). ``reference`` (line
    panels): exact values drawn dashed, without a band, in the colour of the series at the
    same position (e.g. a closed form next to its Monte Carlo). ``scale`` multiplies the
    plotted values (means and s.d.; e.g. 100 to plot a fraction in % as the report's
    tables print it)."""

    title: str
    series: Mapping[str, str]
    ylabel: str
    x: Sequence[float] = ()
    xlabel: str = ""
    # keyword-only: a positional True would silently land in ``kind``
    kind: str = field(default="line", kw_only=True)
    logx: bool = field(default=False, kw_only=True)
    logy: bool = field(default=False, kw_only=True)
    reference: Mapping[str, str] = field(default_factory=dict, kw_only=True)
    scale: float = field(default=1.0, kw_only=True)

    def __post_init__(self):
        if self.kind not in ("line", "bar", "ecdf"):
            raise ValueError(f"kind must be 'line', 'bar' or 'ecdf', got {self.kind!r}.")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"scale must be a positive number, got {self.scale!r}.")


@dataclass(frozen=True)
class Plot:
    """A figure: ``panels(config)`` gives its panels (in rows of at most ``ncols``; none:
    the figure is left out), ``caption`` its caption in the report."""

    filename: str
    caption: str
    panels: Callable[[Any], list[Panel]]
    ncols: int = 5


@dataclass(frozen=True)
class Spec:
    """An experiment, declared.

    ``compute(config, seed)`` runs one seed and returns ``{metric: float | 1-d array}``;
    ``claims(config)``, ``setup(config)`` (the report's first section) and
    ``sections(config, runs)`` (after the claims: tables, deviations; ``runs`` are the
    per-seed metric dicts) may depend on the configuration. ``seeds`` is the number of
    seeds (quick, full), at least :data:`MIN_SEEDS` (:func:`run_seeds`). ``check(config)``
    raises on a bad configuration. ``reading``: one sentence, why the headline run takes
    its reading of the paper; ``variants``: the other readings by name (:class:`Variant`).
    """

    name: str
    title: str
    description: str
    quick: Any
    full: Any
    compute: Callable[[Any, int], Mapping[str, Any]]
    claims: Callable[[Any], list[Claim]]
    plots: tuple[Plot, ...] = ()
    setup: Callable[[Any], str] = lambda config: ""
    sections: Callable[[Any, list], list[str]] = lambda config, runs: []
    seeds: tuple[int, int] = (MIN_SEEDS_FAST, MIN_SEEDS)
    check: Callable[[Any], None] = lambda config: None
    extra: dict = field(default_factory=dict)
    reading: str = ""
    variants: Mapping[str, Variant] = field(default_factory=dict)


# ---------------------------------------------------------------------- statistics
def mean_sd(values) -> tuple[float, float]:
    """Mean and sample s.d. (``ddof=1``; 0 for a single value) of finite ``values``."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0


def judge(claim: Claim, runs: Sequence[Mapping[str, Any]]) -> Verdict:
    """The claim's verdict over the seeds' metrics (the two-standard-error rule).

    NaN values (a seed without the measurement) are left out. An infinite value (a ratio
    over a zero baseline) is decisive where every seed has the same infinity, and makes
    the claim "n/a" otherwise: there is no finite mean and standard error to judge by."""
    with warnings.catch_warnings():  # empty or all-NaN slices give NaN: "n/a"
        warnings.simplefilter("ignore", RuntimeWarning)
        vals = np.array([float(claim.value(r)) for r in runs])
    vals = vals[~np.isnan(vals)]  # NaN: a seed without this measurement
    n = int(vals.size)
    if n == 0:
        return Verdict(math.nan, math.nan, 0, "n/a")
    if np.isinf(vals).any():  # e.g. a ratio over a zero baseline
        if np.all(vals == vals[0]):  # the same infinity in every seed: no noise
            holds = bool(_OPS[claim.op](vals[0], claim.threshold))
            return Verdict(float(vals[0]), 0.0, n, "yes" if holds else "no")
        return Verdict(math.nan, math.nan, n, "n/a")  # no finite mean and s.e. to judge by
    mean, sd = mean_sd(vals)
    diff = mean - claim.threshold
    if abs(diff) <= 2.0 * sd / math.sqrt(n):  # includes diff == 0 at sd == 0
        return Verdict(mean, sd, n, TIE)
    holds = bool(_OPS[claim.op](mean, claim.threshold))
    return Verdict(mean, sd, n, "yes" if holds else "no")


def verdict_counts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    """``{"yes", "no", "tie", "n/a"}`` counts."""
    counts = {"yes": 0, "no": 0, "tie": 0, "n/a": 0}
    for v in verdicts:
        counts["tie" if v.verdict == TIE else v.verdict] += 1
    return counts


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    """``{metric: {"mean", "sd", "min"}}`` over seeds (arrays keep their shape; NaNs
    ignored): ``min`` is the smallest value any seed gave, which tells the plots whether a
    quantity is non-negative (its ± 1 s.d. band is then clipped at 0).

    Every seed must return the same metrics, each of one shape (NaN where a measurement
    is missing); otherwise a ValueError names the metric and the seed."""
    if not runs:
        raise ValueError("aggregate needs the metrics of at least one seed.")
    for i, r in enumerate(runs):
        if set(r) != set(runs[0]):
            odd = sorted(set(r) ^ set(runs[0]))
            raise ValueError(
                f"seed {i} returned other metrics than seed 0 ({', '.join(map(repr, odd))}); "
                "compute must return the same metrics for every seed (NaN where missing)."
            )
    out = {}
    for key in runs[0]:
        try:
            a = np.asarray([r[key] for r in runs], dtype=np.float64)  # (n_seeds, ...)
        except ValueError as exc:
            raise ValueError(f"metric {key!r} has a different shape in different seeds.") from exc
        n = np.isfinite(a).sum(axis=0)
        with warnings.catch_warnings():  # all-NaN slices: NaN mean, no warning
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(a, axis=0)
            sd = np.where(n > 1, np.nanstd(a, axis=0, ddof=1), np.where(n == 1, 0.0, np.nan))
            low = np.nanmin(a, axis=0) if a.size else np.full(a.shape[1:], np.nan)
        out[key] = {"mean": mean, "sd": sd, "min": low}
    return out


def run_seeds(spec: Spec, config, seed: int, n_seeds: int, progress: bool = True) -> list:
    """Per-seed metrics of ``max(n_seeds, MIN_SEEDS)`` seeds ``seed * 1000 + i``.

    The count depends on nothing else (in particular not on how long the seeds take), so
    that the same ``seed`` reproduces the run on any machine."""
    from tqdm.auto import tqdm

    n = max(int(n_seeds), MIN_SEEDS)
    if n >= 1000:  # seed * 1000 + i must not reach the next base seed's range
        raise ValueError(f"n_seeds must be below 1000, got {n_seeds}.")
    if not 0 <= seed <= MAX_SEED:  # torch's generators take at most 64 bits
        raise ValueError(f"seed must be an integer from 0 to {MAX_SEED}, got {seed}.")
    runs = []
    with tqdm(total=n, desc=spec.name, unit="seed", disable=not progress, leave=False) as bar:
        for i in range(n):
            runs.append(dict(spec.compute(config, seed * 1000 + i)))
            bar.update(1)
    return runs


# ---------------------------------------------------------------------- plots
def series_colors(panels: Sequence[Panel]) -> dict[str, str]:
    """One colour per series label over all ``panels`` (in order of first appearance), so
    that a method keeps its colour in every panel of a figure, also where another series
    is missing from a panel."""
    labels = list(dict.fromkeys(lab for p in panels for lab in p.series))
    if len(labels) <= 10:
        return {lab: f"C{i}" for i, lab in enumerate(labels)}
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    return {lab: matplotlib.colors.to_hex(cmap(i % 20)) for i, lab in enumerate(labels)}


def figure_colors(figures: Sequence[Sequence[Panel]]) -> list[dict[str, str]]:
    """One colour map per figure (each a list of panels) such that a series label keeps
    its colour in every figure of an experiment.

    Up to 10 labels over all figures: one colour of the default cycle each, everywhere.
    More (each figure having at most 10): a label keeps the colour it got in the first
    figure that drew it; a label new to a figure takes the first cycle colour that no
    earlier figure gave to another label, once those run out the first one free in this
    figure (so no two series of one figure share a colour, and the pale halves of
    ``tab20`` pairs are left to figures with more than 10 series, which get
    :func:`series_colors`)."""
    cycle = [f"C{i}" for i in range(10)]
    everywhere = list(dict.fromkeys(lab for panels in figures for p in panels for lab in p.series))
    if len(everywhere) <= len(cycle):
        same = dict(zip(everywhere, cycle, strict=False))
        return [{lab: same[lab] for p in panels for lab in p.series} for panels in figures]
    given: dict[str, str] = {}  # label -> colour, from the first figure that drew it
    out = []
    for panels in figures:
        labels = list(dict.fromkeys(lab for p in panels for lab in p.series))
        if len(labels) > len(cycle):
            out.append(series_colors(panels))
            continue
        colors: dict[str, str] = {}
        for lab in labels:  # the colour from an earlier figure, unless taken here already
            if lab in given and given[lab] not in colors.values():
                colors[lab] = given[lab]
        for lab in labels:
            if lab not in colors:
                free = [c for c in cycle if c not in colors.values()]
                unclaimed = [c for c in free if c not in given.values()]
                colors[lab] = (unclaimed or free)[0]
                given.setdefault(lab, colors[lab])
        out.append({lab: colors[lab] for lab in labels})
    return out


def _any_positive(arrays) -> bool:
    """Whether any of ``arrays`` holds a finite positive value (a log axis can show it)."""
    return any(np.any(np.isfinite(a) & (a > 0)) for a in map(np.asarray, arrays) if a.size)


def draw_panel(
    ax,
    panel: Panel,
    agg: Mapping[str, Mapping[str, np.ndarray]],
    n: int,
    colors: Mapping[str, str] | None = None,
) -> None:
    """Draw ``panel`` from aggregated metrics: mean with ± 1 s.d. (band or error bar), a
    legend, and the seed count in the title. ``colors`` maps series labels to colours
    (:func:`series_colors` of the figure's panels); by default the panel's own series get
    the colours of the cycle in order."""
    if len(panel.reference) > len(panel.series):
        raise ValueError(f"panel {panel.title!r}: more reference lines than series.")
    if len(panel.series) > MAX_SERIES:
        raise ValueError(
            f"panel {panel.title!r} has {len(panel.series)} series; at most {MAX_SERIES} "
            "(split it into panels)."
        )
    absent = [k for k in (*panel.series.values(), *panel.reference.values()) if k not in agg]
    if absent:
        raise ValueError(f"panel {panel.title!r}: no metric {absent[0]!r} in the runs.")
    if panel.scale != 1.0:  # the panel's unit (e.g. % of a fraction): means and s.d. alike
        agg = {
            k: {
                "mean": np.asarray(agg[k]["mean"]) * panel.scale,
                "sd": np.asarray(agg[k]["sd"]) * abs(panel.scale),
                "min": _scaled_min(agg[k], panel.scale),
            }
            for k in (*panel.series.values(), *panel.reference.values())
        }
    colors = colors or series_colors([panel])
    series_color = [colors[lab] for lab in panel.series]
    means = [agg[k]["mean"] for k in (*panel.series.values(), *panel.reference.values())]
    # a log axis only where it has something positive to show (all NaN or zeros: linear)
    logx = (
        panel.logx
        and panel.kind != "bar"
        and _any_positive(means if panel.kind == "ecdf" else [panel.x])
    )
    logy = panel.logy and (panel.kind == "ecdf" or _any_positive(means))
    # the scale first: setting it after the bars' tick labels would reset them
    ax.set_xscale("log" if logx else "linear")
    if panel.kind == "ecdf":
        _draw_ecdf(ax, panel, agg, series_color)
    elif panel.kind == "bar":
        _draw_bars(ax, panel, agg, series_color, logy)
    else:
        x = np.asarray(panel.x, dtype=np.float64)
        for i, (lab, key) in enumerate(panel.series.items()):
            m, s = agg[key]["mean"], agg[key]["sd"]
            ax.plot(x, m, marker="o", ms=3, color=series_color[i], label=lab)
            lo = _band_floor(agg[key], m - s, logy)
            ax.fill_between(x, lo, m + s, color=series_color[i], alpha=0.2, linewidth=0)
        for i, (lab, key) in enumerate(panel.reference.items()):
            ax.plot(x, agg[key]["mean"], "--", lw=1.0, color=series_color[i], label=lab)
        ax.set_xlabel(panel.xlabel)
    if panel.kind == "ecdf" and logx:  # no overlapping minor labels within a decade
        from matplotlib.ticker import NullFormatter

        ax.xaxis.set_minor_formatter(NullFormatter())
    if panel.kind == "line" and 0 < len(panel.x) <= 8:  # the x values themselves as ticks
        ax.set_xticks(list(panel.x), [f"{v:g}" for v in panel.x])
        ax.minorticks_off()
    if logy:
        ax.set_yscale("log")
    ax.set_ylabel(panel.ylabel)
    note = _title_note(panel, agg, logx, logy)
    ax.set_title(f"{panel.title}\n(mean ± s.d., {n} seeds{note})", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:  # no series: say so instead of an empty legend (and matplotlib's warning)
        ax.text(0.5, 0.5, "no series", transform=ax.transAxes, ha="center", va="center")


def _title_note(panel: Panel, agg, logx: bool, logy: bool) -> str:
    """What the panel's title adds after the seed count: axes asked to be logarithmic
    that are not (nothing positive to show), and bands that run off a log axis or are
    cut at 0 on a linear one (the x axis of an ECDF, whose bands are horizontal)."""
    unlogged = [
        a
        for a, asked, got in (("x", panel.logx, logx), ("y", panel.logy, logy))
        if asked and not got
    ]
    note = f"; linear {' and '.join(unlogged)}: no positive values" if unlogged else ""
    if logy and panel.kind != "ecdf" and _reaches_zero(panel, agg):
        note += "; a band reaching 0 ends at the axis"
    elif (not logx if panel.kind == "ecdf" else not logy) and _clipped_at_zero(panel, agg):
        # (an ECDF's band is horizontal: cut at 0 on its x axis, as _draw_ecdf does)
        note += "; bands of values ≥ 0 cut at 0"
    return note


def _scaled_min(stats, scale: float):
    """The smallest seed value after multiplying by ``scale`` (NaN where unknown: an
    aggregate without ``min``, or a negative scale, which turns the minimum into a
    maximum)."""
    low = stats.get("min")
    if low is None or scale < 0:
        return np.full(np.shape(stats["mean"]), np.nan)
    return np.asarray(low) * scale


def _non_negative(stats) -> bool:
    """Whether every seed gave values ``>= 0`` at every point of the series (and gave
    some): a ± 1 s.d. band below 0 would then show values the quantity cannot take. One
    negative value anywhere (a signed quantity, such as a difference) leaves it False."""
    low = stats.get("min")
    if low is None:
        return False
    low = np.asarray(low, dtype=np.float64)
    seen = low[~np.isnan(low)]
    return bool(seen.size) and bool(np.all(seen >= 0))


def _band_floor(stats, lower, logy: bool):
    """The lower edge of a ± 1 s.d. band or error bar on a linear axis: ``mean - s.d.``,
    but at least 0 when every seed value of the quantity is (:func:`_non_negative`); on a log
    axis as it is (:func:`_reaches_zero` notes where it runs off the axis)."""
    lower = np.asarray(lower, dtype=np.float64)
    if logy:
        return lower
    return np.where(lower < 0, 0.0, lower) if _non_negative(stats) else lower


def _clipped_at_zero(panel: Panel, agg) -> bool:
    """Whether some series' band or error bar was cut at 0 (:func:`_band_floor`), which
    the title says."""
    for key in panel.series.values():
        m, s = np.asarray(agg[key]["mean"]), np.asarray(agg[key]["sd"])
        if _non_negative(agg[key]) and np.any(np.isfinite(m) & (m - s < 0)):
            return True
    return False


def _reaches_zero(panel: Panel, agg) -> bool:
    """Whether some series' mean − s.d. is ≤ 0 (where its mean is finite): on a log axis
    its band or error bar then runs off the bottom, which the title says (a slab down to
    the axis floor otherwise reads as a value there)."""
    for key in panel.series.values():
        m, s = np.asarray(agg[key]["mean"]), np.asarray(agg[key]["sd"])
        if np.any(np.isfinite(m) & (m - s <= 0)):
            return True
    return False


def _draw_bars(ax, panel: Panel, agg, series_color, logy: bool) -> None:
    """Bar panel: one bar per series (mean, ± 1 s.d. error bar), named on the x axis."""
    labels = list(panel.series)
    for i, (lab, key) in enumerate(panel.series.items()):
        m, s = float(agg[key]["mean"]), float(agg[key]["sd"])
        if logy:  # a bar on a log axis starts at an arbitrary floor: its length means
            # nothing, so the mean is a dot (with its ± 1 s.d. error bar)
            ax.errorbar(i, m, yerr=s, fmt="o", ms=7, capsize=3, color=series_color[i], label=lab)
        else:  # the error bar's lower half cut at 0 for a non-negative quantity
            below = m - float(_band_floor(agg[key], m - s, False))
            yerr = [[below], [s]] if np.isfinite(below) else s
            ax.bar(i, m, yerr=yerr, capsize=3, color=series_color[i], label=lab)
    ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=7)


def _draw_ecdf(ax, panel: Panel, agg, series_color) -> None:
    """ECDF panel: per-seed sorted samples -> mean order statistics, ± 1 s.d. band."""
    for i, (lab, key) in enumerate(panel.series.items()):
        m, s = np.asarray(agg[key]["mean"]), np.asarray(agg[key]["sd"])  # (n_samples,)
        if m.ndim != 1 or np.any(np.diff(m) < 0):
            raise ValueError(
                f"panel {panel.title!r}: ecdf series {key!r} must be 1-d samples sorted "
                "in increasing order in every seed."
            )
        y = np.arange(1, m.size + 1) / m.size  # ECDF at the k-th order statistic
        c = series_color[i]
        ax.step(m, y, where="post", color=c, label=lab)
        lo = _band_floor(agg[key], m - s, False)  # sorted samples of a quantity >= 0
        ax.fill_betweenx(y, lo, m + s, step="post", color=c, alpha=0.2, linewidth=0)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylim(0.0, 1.02)


def _figure(
    rep: Report, plot: Plot, config, agg, n: int, colors: Mapping[str, str] | None = None
) -> None:
    """Draw ``plot`` into ``rep``; ``colors`` (label -> colour) keeps a method's colour
    across the experiment's figures (default: :func:`series_colors` of this plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = plot.panels(config)
    if not panels:  # nothing of this plot in this configuration
        return
    ncols = min(len(panels), plot.ncols)
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, figsize=(4.2 * ncols, 3.4 * nrows))
    # a method keeps its colour across the panels (and, given ``colors``, the figures)
    colors = colors or series_colors(panels)
    for ax, panel in zip(axes.flat, panels, strict=False):
        draw_panel(ax, panel, agg, n, colors)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    rep.figure(fig, plot.filename, plot.caption)


# ---------------------------------------------------------------------- the run
def _fmt(mean: float, sd: float) -> str:
    return "n/a" if math.isnan(mean) else f"{mean:.3g} ± {sd:.2g}"


def format_mean_sd(values) -> str:
    """``"mean ± s.d."`` of per-seed ``values`` (for the experiments' tables)."""
    return _fmt(*mean_sd(values))


def _claims_table(claims: Sequence[Claim], verdicts: Sequence[Verdict]) -> str:
    rows = [
        [
            c.text,
            c.paper,
            f"{c.quantity} {c.op} {c.threshold:g}: {_fmt(v.mean, v.sd)} (n = {v.n})",
            v.verdict,
        ]
        for c, v in zip(claims, verdicts, strict=True)
    ]
    return markdown_table(["claim", "paper", "ours (mean ± s.d.)", "holds on our data?"], rows)


def _jsonable_config(config):
    return asdict(config) if is_dataclass(config) else dict(config)


def _claims_json(claims: Sequence[Claim], verdicts: Sequence[Verdict], variant=None):
    return [
        {"claim": c.text, "paper": c.paper, "quantity": c.quantity, "op": c.op}
        | {"threshold": c.threshold, "variant": variant}
        | asdict(v)
        for c, v in zip(claims, verdicts, strict=True)
    ]


def _rule(n: int) -> str:
    return (
        f"Each claim is judged over {n} seeds: 'yes' or 'no' where the mean differs from "
        "the threshold by more than two standard errors (2 s.d. / sqrt(n)), otherwise "
        f"'{TIE}'."
    )


def judge_variants(spec: Spec, config, claims, runs, seed: int, n_seeds: int, progress=True):
    """``{name: {"variant", "config", "runs", "claims", "verdicts"}}`` for the spec's
    declared variants (in order) and then any other variant named by a claim.

    A variant with ``overrides`` runs ``n_seeds`` seeds on ``config`` with them and is
    judged on its configuration's unmarked claims and its own; one without is judged on
    the headline ``runs``, on the claims marked with its name."""
    names = list(spec.variants) + [
        c.variant for c in claims if c.variant and c.variant not in spec.variants
    ]
    out = {}
    for name in dict.fromkeys(names):
        var = spec.variants.get(name)
        vconfig, vruns, vclaims = config, runs, [c for c in claims if c.variant == name]
        if var is not None and var.overrides:
            vconfig = replace(config, **var.overrides)
            spec.check(vconfig)
            vruns = run_seeds(spec, vconfig, seed, n_seeds, progress)
            vclaims = [c for c in spec.claims(vconfig) if c.variant in (None, name)]
        out[name] = {
            "variant": var,
            "config": vconfig,
            "runs": vruns,
            "claims": vclaims,
            "verdicts": [judge(c, vruns) for c in vclaims],
        }
    return out


def _variant_section(name: str, v: dict) -> str:
    reason = f"**Reading.** {v['variant'].reason}\n\n" if v["variant"] else ""
    changes = v["variant"].overrides if v["variant"] else {}
    how = (
        "Its own run, with " + ", ".join(f"`{k} = {val!r}`" for k, val in changes.items())
        if changes
        else "Judged on the headline run"
    )
    return (
        f"## Variant claims: {name}\n\n{reason}{how}; not counted with the headline "
        f"claims. {_rule(len(v['runs']))}\n\n" + _claims_table(v["claims"], v["verdicts"])
    )


def run_spec(
    spec: Spec,
    out_dir,
    quick: bool = False,
    seed: int = 0,
    progress: bool = True,
    **overrides,
) -> dict:
    """Run ``spec`` into ``out_dir`` (``overrides`` replace configuration fields);
    returns the results dict also written to ``results.json``."""
    config = replace(spec.quick if quick else spec.full, **overrides)
    spec.check(config)
    rep = Report(out_dir, spec.name, quick=quick, title=spec.title)
    n_seeds = spec.seeds[0 if quick else 1]
    runs = run_seeds(spec, config, seed, n_seeds, progress)
    claims = spec.claims(config)
    head = [c for c in claims if c.variant is None]
    verdicts = [judge(c, runs) for c in head]
    variants = judge_variants(spec, config, claims, runs, seed, n_seeds, progress)
    n = len(runs)
    rep.add(spec.setup(config))
    reading = f"**Reading.** {spec.reading}\n\n" if spec.reading else ""
    rep.add(f"## Paper's claims vs ours\n\n{reading}{_rule(n)}\n\n" + _claims_table(head, verdicts))
    rep.add(*(_variant_section(name, v) for name, v in variants.items() if v["claims"]))
    rep.add(*spec.sections(config, runs))
    agg = aggregate(runs)
    # a method keeps its colour over all the experiment's figures, not per figure: a
    # reader comparing two figures of one report finds a method by its colour in both
    colors = figure_colors([plot.panels(config) for plot in spec.plots])
    for plot, plot_colors in zip(spec.plots, colors, strict=True):
        _figure(rep, plot, config, agg, n, plot_colors)
    rep.results.update(
        {
            "config": _jsonable_config(config),
            "seeds": [seed * 1000 + i for i in range(n)],
            "runs": runs,
            "reading": spec.reading,
            # every claim, the headline's first; "variant" names a variant's claims
            "claims": _claims_json(head, verdicts)
            + [
                c
                for name, v in variants.items()
                for c in _claims_json(v["claims"], v["verdicts"], name)
            ],
            "claim_counts": verdict_counts(verdicts),  # the headline claims only
            "variants": {
                name: {
                    "reason": v["variant"].reason if v["variant"] else "",
                    "overrides": dict(v["variant"].overrides) if v["variant"] else {},
                    "claim_counts": verdict_counts(v["verdicts"]),
                }
                | (
                    {
                        "config": _jsonable_config(v["config"]),
                        "seeds": [seed * 1000 + i for i in range(len(v["runs"]))],
                        "runs": v["runs"],
                    }
                    if v["runs"] is not runs
                    else {}
                )
                for name, v in variants.items()
            },
        }
    )
    rep.write()
    return rep.results | {"report": str(Path(out_dir) / "report.md")}
