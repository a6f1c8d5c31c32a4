"""Hybrid Random Features, Table 1 (Sec. 4.1): softmax-kernel MSE on UCI data.

Reproduces Choromanski et al., "Hybrid Random Features" (ICLR 2022) offline.

Paper: MSE (in 10^-3) of estimators of ``SM(x, y) = exp(x.y)`` averaged over 100 random
pairs of points of the UCI data sets wine and Boston; the non-HRF estimators use 512
random features, the HRFs are FLOP-matched: HRF-ort / HRF-iid (angular hybrid with
orthogonal / i.i.d. random features), ORF-reg (block-orthogonal RFs), ORF-Had
(Hadamard-based orthogonal RFs) and Halton-R (randomised Halton quasi-Monte Carlo).

Our protocol (the paper states neither the preprocessing, nor the base estimator of the
non-HRF methods, nor what its ± is). The headline reading (``SPEC.reading``):

* data: wine from scikit-learn, Boston from mlxtend; columns standardised, then every
  point put on the unit sphere (``sphere``, r = 1: the equal-norm regime of the paper's
  theory and its robotics experiments); named variant ``global``: the whole set scaled
  to mean norm 1 (norms vary);
* 100 random pairs ``(x, y)`` of distinct points, fixed per data set;
* ORF-reg / ORF-Had / Halton-R are softmax-kernel baselines, run as the paper runs its
  softmax baselines: the positive antithetic estimator ``SM^{++}`` (eq. 3, FAVOR+ on
  ``±w``, :class:`kernelkit.features.HyperbolicRF`, 512 projections) with the respective
  projection sampler (block-orthogonal, Hadamard, randomised Halton); FAVOR+-iid (i.i.d.
  projections) for reference. Named variant ``trig``: the same samplers under the
  trigonometric estimator (eq. 2, sin/cos; the setting of Yu et al. 2016 and Avron et
  al. 2016), with Trig-iid for reference;
* HRF-ort / HRF-iid: :class:`kernelkit.features.AngularHybridRF` with ``(m, n)``
  FLOP-matched to the 512-projection baselines by the paper's rule (App. L: the cost of
  building one input's features; a positive antithetic map and a sin/cos map cost the
  same), ``n = 8`` as in the paper's other experiments, block-orthogonal / i.i.d. ``W``;
* one *trial* (one seed of the harness, :class:`~kernelkit_experiments._harness.Spec`)
  draws every method's random parameters once and evaluates all 100 pairs; its MSE is
  the mean squared error over the pairs. We report mean ± standard deviation over the
  trials and judge each claim on the per-trial differences (two-standard-error rule).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernelkit.features import AngularHybridRF, HyperbolicRF
from kernelkit.features.sampling import SAMPLERS

from . import _harness as HS
from . import _hrf_common as H
from ._report import markdown_table
from .datasets._hrf import hrf_preprocess, load_hrf_uci

__all__ = ["DESCRIPTION", "FULL", "NAME", "PAPER", "QUICK", "SPEC", "Config", "compute", "run"]

NAME = "hrf-uci"
DESCRIPTION = (
    "Hybrid RF Table 1: softmax-kernel MSE on wine and Boston (HRF-ort, HRF-iid, "
    "ORF-reg, ORF-Had, Halton-R)"
)

#: Table 1 of the paper, MSE in 10^-3: (mean, std)
PAPER = {
    "wine": {
        "HRF-ort": (0.70, 0.08),
        "HRF-iid": (0.85, 0.05),
        "ORF-reg": (1.00, 0.04),
        "ORF-Had": (1.10, 0.06),
        "Halton-R": (4.02, 0.1),
    },
    "boston": {
        "HRF-ort": (0.72, 0.06),
        "HRF-iid": (0.79, 0.08),
        "ORF-reg": (1.05, 0.03),
        "ORF-Had": (1.14, 0.02),
        "Halton-R": (2.53, 0.08),
    },
}
PAPER_METHODS = ("HRF-ort", "HRF-iid", "ORF-reg", "ORF-Had", "Halton-R")

#: method -> (estimator, sampler); ``positive``: SM^{++} (eq. 3), ``trig``: eq. 2
METHODS = {
    "HRF-ort": ("hybrid", "orthogonal"),
    "HRF-iid": ("hybrid", "iid"),
    "ORF-reg": ("positive", "orthogonal"),
    "ORF-Had": ("positive", "hadamard"),
    "Halton-R": ("positive", "halton"),
    "FAVOR+-iid": ("positive", "iid"),
    "Trig ORF-reg": ("trig", "orthogonal"),
    "Trig ORF-Had": ("trig", "hadamard"),
    "Trig Halton-R": ("trig", "halton"),
    "Trig-iid": ("trig", "iid"),
}

#: base estimator of the non-HRF methods -> their names (the paper's three, then the
#: i.i.d. reference)
BASELINES = {
    "positive": ("ORF-reg", "ORF-Had", "Halton-R", "FAVOR+-iid"),
    "trig": ("Trig ORF-reg", "Trig ORF-Had", "Trig Halton-R", "Trig-iid"),
}

READING = (
    "ORF-reg, ORF-Had and Halton-R are run as positive antithetic softmax estimators "
    "(SM^{++}, eq. 3) on their samplers, since the paper compares softmax-kernel "
    "estimators and builds its own (hybrid) estimators on SM^{++}, with every point on "
    "the unit sphere (r = 1), the equal-norm regime of its theory and of its robotics "
    "experiments."
)
VARIANTS = {
    "trig": HS.Variant(
        "The same samplers under the trigonometric estimator (eq. 2, sin/cos), the setting "
        "in which ORF (Yu et al., 2016) and Halton QMC (Avron et al., 2016) were introduced, "
        "which the paper does not say it used."
    ),
    "global": HS.Variant(
        "The standardised data scaled by one factor to mean norm 1 (norms vary), a "
        "preprocessing the paper does not state either, further from its equal-norm theory."
    ),
}


@dataclass(frozen=True)
class Config:
    datasets: tuple[str, ...] = ("wine", "boston")
    modes: tuple[str, ...] = ("sphere", "global")
    radius: float = 1.0
    n_pairs: int = 100
    pair_seed: int = 0  # the pairs are fixed per data set; trials redraw the features
    n_features: int = 512  # M of the non-HRF estimators
    n_lambda: int = 8  # n of the hybrids


FULL = Config()
QUICK = Config()


def _jobs(config: Config):
    return [(ds, mode) for ds in config.datasets for mode in config.modes]


@functools.lru_cache(maxsize=16)
def _data(config: Config, ds: str, mode: str) -> dict:
    """The fixed pairs of one data set and preprocessing, with their statistics."""
    rng = np.random.default_rng([config.pair_seed, _jobs(config).index((ds, mode))])
    Z = hrf_preprocess(load_hrf_uci(ds), mode, config.radius)
    d = Z.shape[1]
    i = rng.integers(0, Z.shape[0], size=config.n_pairs)
    j = (i + rng.integers(1, Z.shape[0], size=config.n_pairs)) % Z.shape[0]  # j != i
    Xa, Xb = Z[i], Z[j]  # (P, d)
    dot = np.sum(Xa * Xb, axis=1)  # (P,)
    sm = np.exp(dot)
    m, n = H.match_angular(config.n_features, d, config.n_lambda)
    cos = dot / (np.linalg.norm(Xa, axis=1) * np.linalg.norm(Xb, axis=1))
    closed = None
    if mode == "sphere":  # closed-form MSE (Lemma 2.2, eq. 47), mean over the pairs
        r, theta = config.radius, np.arccos(np.clip(dot / config.radius**2, -1, 1))
        M = config.n_features
        closed = {
            "FAVOR+-iid": np.mean((H.sphere_rel_error("favor", r, theta, M) * sm) ** 2),
            "Trig-iid": np.mean((H.sphere_rel_error("trig", r, theta, M) * sm) ** 2),
            "HRF-iid": np.mean((H.sphere_rel_error("hybrid", r, theta, m, n) * sm) ** 2),
        }
    norms = np.linalg.norm(Z, axis=1)
    return {
        "Xa": Xa,
        "Xb": Xb,
        "sm": sm,
        "d": d,
        "m": m,
        "n": n,
        "closed_form_mse": closed,
        "sm_range": (sm.min(), sm.max()),
        "angle_quartiles": np.quantile(np.arccos(np.clip(cos, -1, 1)), [0.25, 0.5, 0.75]),
        "norm_range": (norms.min(), norms.max()),
    }


def _estimate(name: str, config: Config, data: dict, rng) -> np.ndarray:
    """One draw of a method's estimates of ``SM`` at every pair, shape (P,)."""
    kind, sampler = METHODS[name]
    Xa, Xb = data["Xa"], data["Xb"]
    if kind == "hybrid":
        fm = AngularHybridRF(
            n_features=data["m"], n_lambda=data["n"], sampler=sampler, random_state=rng
        ).fit(Xa, Y=Xb)
        return np.sum(fm.transform(Xa) * fm.transform_y(Xb), axis=1)
    if kind == "positive":  # SM^{++}: FAVOR+ on the antithetic projections [W; -W]
        fm = HyperbolicRF(n_features=config.n_features, sampler=sampler, random_state=rng)
        fm.fit(Xa, Y=Xb)
        return np.sum(fm.transform(Xa) * fm.transform(Xb), axis=1)
    W = SAMPLERS[sampler](config.n_features, data["d"], rng)  # (M, d)
    return H.estimate("trig", W[None], None, Xa, Xb)[0]


def compute(config: Config, seed: int) -> dict:
    """One trial: ``{"<data> <mode> <method>": MSE over the pairs, in 10^-3}``."""
    out = {}
    for k, (ds, mode) in enumerate(_jobs(config)):
        data = _data(config, ds, mode)
        rng = np.random.default_rng([seed, k])
        for name in METHODS:
            est = _estimate(name, config, data, rng)
            out[f"{ds} {mode} {name}"] = 1e3 * np.mean((est - data["sm"]) ** 2)
    return out


# ---------------------------------------------------------------------- claims
#: (preprocessing, base estimator) -> the reading its claims belong to (None: headline);
#: each variant changes one choice of the headline's (trig on global data: table only)
READINGS = {
    ("sphere", "positive"): None,
    ("sphere", "trig"): "trig",
    ("global", "positive"): "global",
}


def _claims_of(ds: str, mode: str, base: str) -> list[HS.Claim]:
    key, var = f"{ds} {mode}", READINGS[mode, base]
    orf, had, halton = BASELINES[base][:3]
    where = f"{ds}, {mode}" + (", trig baselines" if base == "trig" else "")
    out = [
        HS.Claim(
            f"{h} below every non-HRF method ({where})",
            "yes (Table 1)",
            f"MSE [1e-3] {h} - min({orf}, {had}, {halton})",
            lambda r, h=h: r[f"{key} {h}"] - min(r[f"{key} {b}"] for b in (orf, had, halton)),
            op="<",
            variant=var,
        )
        for h in ("HRF-ort", "HRF-iid")
    ]
    out += [
        HS.Claim(
            f"{a} < {b} ({where})",
            "yes (Table 1 ordering)",
            f"MSE [1e-3] {a} - {b}",
            lambda r, a=a, b=b: r[f"{key} {a}"] - r[f"{key} {b}"],
            op="<",
            variant=var,
        )
        for a, b in (("HRF-ort", "HRF-iid"), ("HRF-iid", orf), (orf, had), (had, halton))
        if base == "positive" or a != "HRF-ort"  # (trig: the headline's hybrid claim again)
    ]
    paper_ratio = PAPER[ds]["HRF-ort"][0] / PAPER[ds]["ORF-reg"][0] if ds in PAPER else np.nan
    out.append(
        HS.Claim(
            f"MSE ratio HRF-ort / {orf} below 1 ({where})",
            f"{paper_ratio:.2f}",
            f"MSE ratio HRF-ort / {orf}",
            lambda r: r[f"{key} HRF-ort"] / r[f"{key} {orf}"],
            op="<",
            threshold=1.0,
            variant=var,
        )
    )
    return out


def _claims(config: Config) -> list[HS.Claim]:
    """Sec. 4.1: "HRFs outperform all other methods", and Table 1's ordering
    HRF-ort < HRF-iid < ORF-reg < ORF-Had < Halton-R; every reading (headline first)."""
    return [
        c
        for mode, base in READINGS
        for ds in config.datasets
        if mode in config.modes
        for c in _claims_of(ds, mode, base)
    ]


# ---------------------------------------------------------------------- report
def _setup(config: Config) -> str:
    d0 = _data(config, *_jobs(config)[0])
    m, n, d = d0["m"], d0["n"], d0["d"]
    return "\n\n".join(
        [
            "## Setup",
            f"Data: {', '.join(config.datasets)} (wine: scikit-learn's bundled UCI copy; "
            "Boston: mlxtend's bundled copy). Preprocessing (not stated in the paper): "
            "columns standardised, then `sphere` (headline) = every point rescaled to norm "
            f"{config.radius:g}, `global` (variant) = one factor so that the mean norm is "
            f"{config.radius:g}. {config.n_pairs} random pairs of distinct points per data "
            f"set (pair seed {config.pair_seed}); each trial (seed) is a fresh draw of every "
            "method's random parameters evaluated on all pairs; a trial's MSE is the mean "
            "squared error over the pairs; tables show mean ± s.d. over trials, in 10⁻³.",
            "**Methods.** Non-HRF, headline: the positive antithetic softmax estimator "
            f"SM^{{++}} (eq. 3; `HyperbolicRF`, M = {config.n_features} projections, "
            f"dimension {2 * config.n_features}) with the projections of "
            "`kernelkit.features.sampling`: ORF-reg = block-orthogonal Haar blocks with χ_d "
            "norms; ORF-Had = structured Hadamard blocks HD₁HD₂HD₃ with χ_d norms (d = 13 is "
            "zero-padded to 16, so rows are only nearly orthogonal); Halton-R = scrambled "
            "Halton points with a uniform random shift (Cranley-Patterson) through the "
            "normal inverse CDF; FAVOR+-iid (not in the paper) for reference. Variant "
            "`trig`: the same samplers under the trigonometric estimator (eq. 2, sin/cos, "
            "M projections), Trig-iid for reference. HRF-ort / HRF-iid: "
            f"`AngularHybridRF(n_features=m={m}, n_lambda=n={n})` (shared W, "
            "block-orthogonal / i.i.d.; T i.i.d.); the same hybrid draws enter both readings.",
            f"**FLOP matching** (the paper's rule). {H.FLOP_RULE} d = {d}: budget "
            f"{H.regular_flops(config.n_features, d)} (SM^{{++}} and trig alike), hybrid "
            f"({m}, {n}) {H.angular_flops(m, n, d)} FLOPs.",
        ]
    )


def _table(config: Config, runs: list, base: str) -> str:
    agg = HS.aggregate(runs)
    cols = ("HRF-ort", "HRF-iid", *BASELINES[base])

    def cell(key):
        return f"{float(agg[key]['mean']):.3f} ± {float(agg[key]['sd']):.3f}"

    def paper(ds, k):
        k = k.removeprefix("Trig ")
        return f"{PAPER[ds][k][0]:.2f} ± {PAPER[ds][k][1]:.2f}" if k in PAPER[ds] else "—"

    rows = [
        [f"{ds} ({mode})", *[cell(f"{ds} {mode} {k}") for k in cols]] for ds, mode in _jobs(config)
    ]
    rows += [
        [f"{ds} (paper)", *[paper(ds, k) for k in cols]] for ds in config.datasets if ds in PAPER
    ]
    title = "ours next to the paper's" if base == "positive" else "variant `trig` (trig baselines)"
    return f"## Table 1: MSE [10⁻³] over {len(runs)} trials, {title}\n\n" + markdown_table(
        ["data (preprocessing)", *cols], rows
    )


def _data_notes(config: Config, runs: list) -> str:
    stats = "; ".join(
        f"{ds}/{mode}: SM ∈ [{v['sm_range'][0]:.2f}, {v['sm_range'][1]:.2f}], angle "
        f"quartiles {', '.join(f'{a:.2f}' for a in v['angle_quartiles'])}, norms "
        f"[{v['norm_range'][0]:.2f}, {v['norm_range'][1]:.2f}]"
        for ds, mode in _jobs(config)
        for v in [_data(config, ds, mode)]
    )
    closed_rows = [
        [ds, f"{1e3 * c:.3f}", k, HS.format_mean_sd([r[f"{ds} sphere {k}"] for r in runs])]
        for ds, mode in _jobs(config)
        if mode == "sphere"
        for k, c in _data(config, ds, mode)["closed_form_mse"].items()
    ]
    closed = (
        "\n\n**Closed form** (i.i.d. projections, equal norms: Lemma 2.2 and the corrected "
        "eq. 47, averaged over our pairs) against the Monte Carlo (mean ± s.d. over "
        "trials), `sphere` preprocessing, in 10⁻³:\n\n"
        + markdown_table(["data", "closed form", "method", "Monte Carlo"], closed_rows)
        if closed_rows
        else ""
    )
    return f"**Data statistics** (our pairs): {stats}.{closed}"


_WHY = (
    "**Why the verdict depends on the baselines' estimator.** The angular hybrid's MSE is "
    "E[λ̂²] MSE⁺⁺_m + E[(1−λ̂)²] MSE^trig_m (Thm 3.1) with E[λ̂²] = t(t − t/n + 1/n), "
    "t = θ/π. Pairs of standardised UCI points sit at angles around π/2 (quartiles "
    "above), where both weights are about 1/4 to 1/3; at r = 1 the SM^{++} part's MSE "
    "(∝ e^{|x+y|²}) is several times the trig part's, so the hybrid, with m < M "
    "projections, lands between the two (closed-form table: a fraction of FAVOR+-iid's "
    "MSE, above Trig-iid's). It therefore beats the positive (SM^{++}) baselines of the "
    "headline reading and loses to the trig baselines of variant `trig`; its guaranteed "
    "advantage is in the maximum relative error over the sphere (see `hrf-pointwise`), "
    "not in the MSE at typical pairs. The positive estimators' squared errors are "
    "heavy-tailed (one draw can dominate a trial's MSE), so their per-trial s.d. is "
    "large and the orderings among ORF-reg, ORF-Had and Halton-R need many trials to "
    "leave the noise; under the trig estimator, orthogonal and quasi-Monte Carlo "
    "samplers reduce the MSE 2–3× (Trig ORF-reg, Trig ORF-Had, Trig Halton-R vs "
    "Trig-iid)."
)

_DEVIATIONS = (
    "## Deviations from the paper\n\n"
    "- Preprocessing, the non-HRF base estimator, the hybrid's (m, n) and the meaning of "
    "± are not stated in the paper; our readings are described above (headline and "
    "named variants). The absolute MSE scale depends on the preprocessing (norms), so "
    "only orderings and ratios are comparable with the paper's numbers.\n"
    "- Boston comes from mlxtend (same 506 × 13 UCI table).\n"
    "- ORF-Had on d = 13 pads to 16 and truncates the Hadamard rows (not exactly "
    "orthogonal, discrete directions: only approximately unbiased)."
)


def _sections(config: Config, runs: list) -> list[str]:
    tables = [_table(config, runs, base) for base in BASELINES]
    return [*tables, _data_notes(config, runs), _WHY, _DEVIATIONS]


def _panels(base: str):
    def panels(config: Config) -> list[HS.Panel]:
        cols = ("HRF-ort", "HRF-iid", *BASELINES[base])
        return [
            HS.Panel(
                f"{ds} ({mode})" + (", trig baselines" if base == "trig" else ""),
                {k: f"{ds} {mode} {k}" for k in cols},
                "MSE per trial [10⁻³]",
                kind="bar",
            )
            for ds, mode in _jobs(config)
        ]

    return panels


SPEC = HS.Spec(
    name=NAME,
    title="Hybrid random features: softmax-kernel MSE on UCI data (Table 1)",
    description=DESCRIPTION,
    quick=QUICK,
    full=FULL,
    compute=compute,
    claims=_claims,
    plots=(
        HS.Plot(
            "mse.png",
            "MSE of the hybrids and the positive (SM^{++}) baselines over the pairs, mean ± "
            "s.d. over trials (the paper's means are in the table).",
            _panels("positive"),
        ),
        HS.Plot(
            "mse_trig.png",
            "Variant `trig`: the hybrids against the same samplers under the trigonometric "
            "estimator, mean ± s.d. over trials.",
            _panels("trig"),
        ),
    ),
    setup=_setup,
    sections=_sections,
    seeds=(20, 200),
    reading=READING,
    variants=VARIANTS,
)


def run(out_dir: Path, quick: bool = False, seed: int = 0, **overrides) -> dict:
    """``kernelkit reproduce hrf-uci [--quick]``: 20 trials (quick) or 200; ``overrides``
    replace Config fields."""
    return HS.run_spec(SPEC, out_dir, quick=quick, seed=seed, **overrides)
