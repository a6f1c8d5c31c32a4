"""Hybrid Random Features, Table 1 (Sec. 4.1): softmax-kernel MSE on UCI data.

Reproduces Choromanski et al., "Hybrid Random Features" (ICLR 2022) offline.

Paper: MSE (in 10^-3) of estimators of ``SM(x, y) = exp(x.y)`` averaged over 100 random
pairs of points of the UCI data sets wine and Boston; the non-HRF estimators use 512
random features, the HRFs are FLOP-matched: HRF-ort / HRF-iid (angular hybrid with
orthogonal / i.i.d. random features), ORF-reg (block-orthogonal RFs), ORF-Had
(Hadamard-based orthogonal RFs) and Halton-R (randomised Halton quasi-Monte Carlo).

Our protocol (the paper states neither the preprocessing, nor the base estimator of the
non-HRF methods, nor what its ± is):

* data: wine from scikit-learn, Boston from mlxtend; columns standardised, then either
  every point put on the unit sphere (``sphere``, the regime of the paper's theory and its
  robotics experiments) or the whole set scaled to mean norm 1 (``global``: norms vary);
* 100 random pairs ``(x, y)`` of distinct points, fixed per data set;
* ORF-reg / ORF-Had / Halton-R use the trigonometric estimator (eq. 2, sin/cos, 512 RFs)
  with the respective projection sampler of :mod:`kernelkit.features.sampling` (the
  setting of Yu et al. 2016 and Avron et al. 2016); Trig-iid is shown for reference;
* HRF-ort / HRF-iid: :class:`kernelkit.features.AngularHybridRF` with the FLOP-matched
  ``(m, n)`` (``n = 8`` as in the paper's other experiments) and block-orthogonal / i.i.d.
  ``W``;
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

from kernelkit.features import AngularHybridRF
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

#: method -> (estimator, sampler)
METHODS = {
    "HRF-ort": ("hybrid", "orthogonal"),
    "HRF-iid": ("hybrid", "iid"),
    "ORF-reg": ("trig", "orthogonal"),
    "ORF-Had": ("trig", "hadamard"),
    "Halton-R": ("trig", "halton"),
    "Trig-iid": ("trig", "iid"),
}


NON_HRF = ("ORF-reg", "ORF-Had", "Halton-R")


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
        closed = {
            "Trig-iid": np.mean(
                (H.sphere_rel_error("trig", r, theta, config.n_features) * sm) ** 2
            ),
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
def _claims_of(ds: str, mode: str) -> list[HS.Claim]:
    key = f"{ds} {mode}"
    out = [
        HS.Claim(
            f"{h} below every non-HRF method ({ds}, {mode})",
            "yes (Table 1)",
            f"MSE [1e-3] {h} - min(ORF-reg, ORF-Had, Halton-R)",
            lambda r, h=h: r[f"{key} {h}"] - min(r[f"{key} {b}"] for b in NON_HRF),
            op="<",
        )
        for h in ("HRF-ort", "HRF-iid")
    ]
    out += [
        HS.Claim(
            f"{a} < {b} ({ds}, {mode})",
            "yes (Table 1 ordering)",
            f"MSE [1e-3] {a} - {b}",
            lambda r, a=a, b=b: r[f"{key} {a}"] - r[f"{key} {b}"],
            op="<",
        )
        for a, b in (("HRF-ort", "HRF-iid"), ("ORF-reg", "ORF-Had"), ("ORF-Had", "Halton-R"))
    ]
    paper_ratio = PAPER[ds]["HRF-ort"][0] / PAPER[ds]["ORF-reg"][0] if ds in PAPER else np.nan
    out.append(
        HS.Claim(
            f"MSE ratio HRF-ort / ORF-reg below 1 ({ds}, {mode})",
            f"{paper_ratio:.2f}",
            "MSE ratio HRF-ort / ORF-reg",
            lambda r: r[f"{key} HRF-ort"] / r[f"{key} ORF-reg"],
            op="<",
            threshold=1.0,
        )
    )
    return out


def _claims(config: Config) -> list[HS.Claim]:
    """Sec. 4.1: "HRFs outperform all other methods", and Table 1's ordering."""
    return [c for ds, mode in _jobs(config) for c in _claims_of(ds, mode)]


# ---------------------------------------------------------------------- report
def _setup(config: Config) -> str:
    d0 = _data(config, *_jobs(config)[0])
    m, n, d = d0["m"], d0["n"], d0["d"]
    return "\n\n".join(
        [
            "## Setup",
            f"Data: {', '.join(config.datasets)} (wine: scikit-learn's bundled UCI copy; "
            "Boston: mlxtend's bundled copy). Preprocessing (not stated in the paper): "
            "columns standardised, then `sphere` = every point rescaled to norm "
            f"{config.radius:g}, `global` = one factor so that the mean norm is "
            f"{config.radius:g}. {config.n_pairs} random pairs of distinct points per data "
            f"set (pair seed {config.pair_seed}); each trial (seed) is a fresh draw of every "
            "method's random parameters evaluated on all pairs; a trial's MSE is the mean "
            "squared error over the pairs; tables show mean ± s.d. over trials, in 10⁻³.",
            "**Methods.** Non-HRF: the trigonometric estimator (eq. 2, sin/cos) with "
            f"M = {config.n_features} projections drawn by the samplers of "
            "`kernelkit.features.sampling`: ORF-reg = block-orthogonal Haar blocks with χ_d "
            "norms; ORF-Had = structured Hadamard blocks HD₁HD₂HD₃ with χ_d norms (d = 13 is "
            "zero-padded to 16, so rows are only nearly orthogonal); Halton-R = scrambled "
            "Halton points with a uniform random shift (Cranley-Patterson) through the "
            "normal inverse CDF; Trig-iid (not in the paper) for reference. HRF-ort / "
            f"HRF-iid: `AngularHybridRF(n_features=m={m}, n_lambda=n={n})` (shared W, "
            "block-orthogonal / i.i.d.; T i.i.d.).",
            f"**FLOP matching.** {H.FLOP_RULE} d = {d}: budget "
            f"{H.regular_flops(config.n_features, d)}, hybrid ({m}, {n}) "
            f"{H.angular_flops(m, n, d)} FLOPs.",
        ]
    )


def _table(config: Config, runs: list) -> str:
    agg = HS.aggregate(runs)

    def cell(key):
        return f"{float(agg[key]['mean']):.3f} ± {float(agg[key]['sd']):.3f}"

    rows = [
        [f"{ds} ({mode})", *[cell(f"{ds} {mode} {k}") for k in METHODS]]
        for ds, mode in _jobs(config)
    ]
    rows += [
        [
            f"{ds} (paper)",
            *[
                f"{PAPER[ds][k][0]:.2f} ± {PAPER[ds][k][1]:.2f}" if k in PAPER[ds] else "—"
                for k in METHODS
            ],
        ]
        for ds in config.datasets
        if ds in PAPER
    ]
    return (
        f"## Table 1: MSE [10⁻³] over {len(runs)} trials, ours next to the paper's\n\n"
        + markdown_table(["data (preprocessing)", *METHODS], rows)
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
        [ds, f"{1e3 * c:.3f}", k, f"{np.mean([r[f'{ds} sphere {k}'] for r in runs]):.3f}"]
        for ds, mode in _jobs(config)
        if mode == "sphere"
        for k, c in _data(config, ds, mode)["closed_form_mse"].items()
    ]
    closed = (
        "\n\n**Closed form** (i.i.d. projections, equal norms: Lemma 2.2 and the corrected "
        "eq. 47, averaged over our pairs) against the Monte Carlo mean, `sphere` "
        "preprocessing, in 10⁻³:\n\n"
        + markdown_table(["data", "closed form", "method", "Monte Carlo"], closed_rows)
        if closed_rows
        else ""
    )
    return f"**Data statistics** (our pairs): {stats}.{closed}"


_WHY = (
    "**Why the hybrid loses here.** The angular hybrid has zero variance only at "
    "θ = 0 and θ = π (equal norms); its MSE is E[λ̂²] MSE⁺⁺_m + E[(1−λ̂)²] MSE^trig_m "
    "(Thm 3.1) with E[λ̂²] = t(t − t/n + 1/n), t = θ/π. Pairs of standardised UCI "
    "points sit at angles around π/2 (quartiles above), where λ̂ ≈ 1/2 and the hybrid "
    "averages two estimators with m < M projections each; at small but non-zero angles "
    "the FAVOR+ part (MSE ∝ e^{|x+y|²}) enters with weight ≈ t/n and dominates Trig's "
    "MSE ∝ (1 − e^{−|x−y|²})². The closed-form column above confirms that the Monte "
    "Carlo numbers are what the theory predicts for these pairs; the hybrid's "
    "advantage is in the *maximum* relative error over the sphere (see "
    "`hrf-pointwise`), not in the MSE at typical pairs of these data sets. Orthogonal "
    "and quasi-Monte Carlo samplers reduce Trig's MSE a further 2–3× (ORF-reg, "
    "ORF-Had, Halton-R vs Trig-iid)."
)

_DEVIATIONS = (
    "## Deviations from the paper\n\n"
    "- Preprocessing, the non-HRF base estimator (trig here), the hybrid's (m, n) and "
    "the meaning of ± are not stated in the paper; ours are described above. The "
    "absolute MSE scale depends on the preprocessing (norms), so only orderings and "
    "ratios are comparable with the paper's numbers.\n"
    "- Boston comes from mlxtend (same 506 × 13 UCI table).\n"
    "- ORF-Had on d = 13 pads to 16 and truncates the Hadamard rows (not exactly "
    "orthogonal, discrete directions: only approximately unbiased)."
)


def _sections(config: Config, runs: list) -> list[str]:
    return [_table(config, runs), _data_notes(config, runs), _WHY, _DEVIATIONS]


def _panels(config: Config) -> list[HS.Panel]:
    return [
        HS.Panel(
            f"{ds} ({mode})",
            {k: f"{ds} {mode} {k}" for k in METHODS},
            "MSE per trial [10⁻³]",
            kind="bar",
        )
        for ds, mode in _jobs(config)
    ]


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
            "MSE of every method over the pairs, mean ± s.d. over trials (the paper's means "
            "are in the table).",
            _panels,
        ),
    ),
    setup=_setup,
    sections=_sections,
    seeds=(20, 200),
)


def run(out_dir: Path, quick: bool = False, seed: int = 0, **overrides) -> dict:
    """``kernelkit reproduce hrf-uci [--quick]``: 20 trials (quick) or 200; ``overrides``
    replace Config fields."""
    return HS.run_spec(SPEC, out_dir, quick=quick, seed=seed, **overrides)
