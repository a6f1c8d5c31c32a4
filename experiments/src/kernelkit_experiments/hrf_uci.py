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
* one *trial* draws every method's random parameters once and evaluates all 100 pairs;
  its MSE is the mean squared error over the pairs. We report mean ± standard deviation
  over the trials.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from kernelkit.features import AngularHybridRF
from kernelkit.features.sampling import SAMPLERS
from kernelkit_experiments.datasets._hrf import hrf_preprocess, load_hrf_uci

from . import _hrf_common as H
from ._report import Report, markdown_table

__all__ = ["DESCRIPTION", "FULL", "NAME", "PAPER", "QUICK", "Config", "compute", "run"]

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


@dataclass(frozen=True)
class Config:
    datasets: tuple[str, ...] = ("wine", "boston")
    modes: tuple[str, ...] = ("sphere", "global")
    radius: float = 1.0
    n_pairs: int = 100
    n_trials: int = 200
    n_features: int = 512  # M of the non-HRF estimators
    n_lambda: int = 8  # n of the hybrids


FULL = Config()
QUICK = Config(n_trials=20)


def _pairs(n_points, n_pairs, rng):
    i = rng.integers(0, n_points, size=n_pairs)
    j = (i + rng.integers(1, n_points, size=n_pairs)) % n_points  # j != i
    return i, j


def compute(config: Config, seed: int = 0, progress: bool = True) -> dict:
    """Per-trial MSEs ``{dataset: {mode: {method: ndarray (n_trials,)}}}`` plus the pairs'
    statistics (``"_info"``)."""
    from tqdm.auto import tqdm

    out, info = {}, {}
    root = np.random.SeedSequence(seed)
    jobs = [(ds, mode) for ds in config.datasets for mode in config.modes]
    seeds = root.spawn(len(jobs))
    bar = tqdm(total=len(jobs) * config.n_trials, desc="hrf-uci", disable=not progress, leave=False)
    for (ds, mode), ss in zip(jobs, seeds, strict=True):
        rng = np.random.default_rng(ss)
        Z = hrf_preprocess(load_hrf_uci(ds), mode, config.radius)
        d = Z.shape[1]
        i, j = _pairs(Z.shape[0], config.n_pairs, rng)
        Xa, Xb = Z[i], Z[j]  # (P, d)
        sm = np.exp(np.sum(Xa * Xb, axis=1))  # (P,)
        m, n = H.match_angular(config.n_features, d, config.n_lambda)
        mse = {k: np.empty(config.n_trials) for k in METHODS}
        for t in range(config.n_trials):
            for name, (kind, sampler) in METHODS.items():
                if kind == "hybrid":
                    fm = AngularHybridRF(
                        n_features=m, n_lambda=n, sampler=sampler, random_state=rng
                    ).fit(Xa, Y=Xb)
                    est = np.sum(fm.transform(Xa) * fm.transform_y(Xb), axis=1)  # (P,)
                else:
                    W = SAMPLERS[sampler](config.n_features, d, rng)  # (M, d)
                    est = H.estimate("trig", W[None], None, Xa, Xb)[0]  # (P,)
                mse[name][t] = np.mean((est - sm) ** 2)
            bar.update(1)
        out.setdefault(ds, {})[mode] = mse
        cos = np.sum(Xa * Xb, axis=1) / (np.linalg.norm(Xa, axis=1) * np.linalg.norm(Xb, axis=1))
        theta = np.arccos(np.clip(np.sum(Xa * Xb, axis=1) / config.radius**2, -1, 1))
        closed = None
        if mode == "sphere":  # closed-form MSE (Lemma 2.2, eq. 47), mean over the pairs
            r = config.radius
            closed = {
                "Trig-iid": float(
                    np.mean((H.sphere_rel_error("trig", r, theta, config.n_features) * sm) ** 2)
                ),
                "HRF-iid": float(np.mean((H.sphere_rel_error("hybrid", r, theta, m, n) * sm) ** 2)),
            }
        info.setdefault(ds, {})[mode] = {
            "closed_form_mse": closed,
            "n_points": int(Z.shape[0]),
            "d": int(d),
            "hybrid_m": m,
            "hybrid_n": n,
            "sm_range": [float(sm.min()), float(sm.max())],
            "angle_quartiles": np.quantile(
                np.arccos(np.clip(cos, -1, 1)), [0.0, 0.25, 0.5, 0.75, 1.0]
            ).tolist(),
            "norm_range": [
                float(np.linalg.norm(Z, axis=1).min()),
                float(np.linalg.norm(Z, axis=1).max()),
            ],
        }
    bar.close()
    out["_info"] = info
    return out


def _verdict(a, b):
    """``a`` (HRF trials) below ``b`` (baseline trials)? 'yes' if the difference of the
    means exceeds 2 standard errors, 'yes (n.s.)' if it has the right sign only."""
    diff = b.mean() - a.mean()
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    if diff > 2 * se:
        return "yes"
    return "yes (n.s.)" if diff > 0 else "no"


def _plot(config, res):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = [(ds, mode) for ds in config.datasets for mode in config.modes]
    fig, axes = plt.subplots(1, len(jobs), figsize=(3.6 * len(jobs), 3.6), squeeze=False)
    for ax, (ds, mode) in zip(axes[0], jobs, strict=True):
        mse = res[ds][mode]
        names = list(mse)
        ax.boxplot([1e3 * mse[k] for k in names], showfliers=False)
        ax.set_xticks(range(1, len(names) + 1), names, rotation=45, fontsize=8)
        if ds in PAPER:
            ax.plot(
                range(1, len(PAPER_METHODS) + 1),
                [PAPER[ds][k][0] for k in PAPER_METHODS],
                "r*",
                ms=9,
                label="paper",
            )
        ax.set_title(f"{ds} ({mode})", fontsize=10)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("MSE per trial  [10⁻³]")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(
        "Softmax-kernel MSE over 100 pairs, distribution over trials (boxes) and "
        "the paper's Table 1 (stars)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def run(
    out_dir, quick: bool = False, seed: int = 0, config: Config | None = None, progress: bool = True
) -> dict:
    """Run the experiment; writes ``report.md``, ``mse.png`` and ``results.json``.

    Parameters
    ----------
    out_dir : path
    quick : bool
        :data:`QUICK` (20 trials) instead of :data:`FULL` (200 trials).
    seed : int
    config : Config, optional
        Overrides the quick / full configuration (tests).
    """
    config = config or (QUICK if quick else FULL)
    rep = Report(
        out_dir,
        NAME,
        quick=quick,
        title="Hybrid random features: softmax-kernel MSE on UCI data (Table 1)",
    )
    t0 = time.perf_counter()
    res = compute(config, seed, progress)
    info = res.pop("_info")
    d0 = next(iter(info.values()))[config.modes[0]]
    rep.add(
        "## Setup",
        f"Data: {', '.join(config.datasets)} (wine: scikit-learn's bundled UCI copy; Boston: "
        "mlxtend's bundled copy). Preprocessing (not stated in the paper): columns "
        "standardised, then `sphere` = every point rescaled to norm "
        f"{config.radius:g}, `global` = one factor so that the mean norm is "
        f"{config.radius:g}. {config.n_pairs} random pairs of distinct points per data set "
        f"(seed {seed}); {config.n_trials} trials, each a fresh draw of every method's "
        "random parameters evaluated on all pairs; a trial's MSE is the mean squared error "
        "over the pairs; tables show mean ± std over trials, in units of 10⁻³.",
        "**Methods.** Non-HRF: the trigonometric estimator (eq. 2, sin/cos) with "
        f"M = {config.n_features} projections drawn by the samplers of "
        "`kernelkit.features.sampling`: ORF-reg = block-orthogonal Haar blocks with χ_d "
        "norms; ORF-Had = structured Hadamard blocks HD₁HD₂HD₃ with χ_d norms (d = 13 is "
        "zero-padded to 16, so rows are only nearly orthogonal); Halton-R = scrambled "
        "Halton points with a uniform random shift (Cranley-Patterson) through the "
        "normal inverse CDF; Trig-iid (not in the paper) for reference. HRF-ort / HRF-iid: "
        f"`AngularHybridRF(n_features=m={d0['hybrid_m']}, n_lambda=n={d0['hybrid_n']})` "
        "(shared W, block-orthogonal / i.i.d.; T i.i.d.).",
        "**FLOP matching.** " + H.FLOP_RULE + f" d = {d0['d']}: budget "
        f"{H.regular_flops(config.n_features, d0['d'])}, hybrid "
        f"({d0['hybrid_m']}, {d0['hybrid_n']}) "
        f"{H.angular_flops(d0['hybrid_m'], d0['hybrid_n'], d0['d'])} FLOPs.",
    )
    rows = [
        [
            f"{ds} ({mode})",
            *[
                f"{1e3 * res[ds][mode][k].mean():.3f} ± {1e3 * res[ds][mode][k].std(ddof=1):.3f}"
                for k in METHODS
            ],
        ]
        for ds in config.datasets
        for mode in config.modes
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
    rep.add(
        "## Table 1: MSE [10⁻³], ours next to the paper's",
        markdown_table(["data (preprocessing)", *METHODS], rows),
    )
    rep.add(
        "**Data statistics** (our pairs): "
        + "; ".join(
            f"{ds}/{mode}: SM ∈ [{v['sm_range'][0]:.2f}, {v['sm_range'][1]:.2f}], angle "
            f"quartiles {', '.join(f'{a:.2f}' for a in v['angle_quartiles'][1:4])}, norms "
            f"[{v['norm_range'][0]:.2f}, {v['norm_range'][1]:.2f}]"
            for ds, dv in info.items()
            for mode, v in dv.items()
        )
        + "."
    )
    closed_rows = [
        [ds, f"{1e3 * v['closed_form_mse'][k]:.3f}", k, f"{1e3 * res[ds]['sphere'][k].mean():.3f}"]
        for ds, dv in info.items()
        for mode, v in dv.items()
        if v["closed_form_mse"]
        for k in v["closed_form_mse"]
    ]
    if closed_rows:
        rep.add(
            "**Closed form** (i.i.d. projections, equal norms: Lemma 2.2 and the "
            "corrected eq. 47, averaged over our pairs) against the Monte Carlo mean, "
            "`sphere` preprocessing, in 10⁻³:",
            markdown_table(["data", "closed form", "method", "Monte Carlo"], closed_rows),
        )
    fig = _plot(config, res)
    rep.figure(fig, "mse.png", "Per-trial MSE of every method (boxes) and the paper's means.")

    # ------------------------------------------------------------ claims
    claims, crow = [], []
    for ds in config.datasets:
        for mode in config.modes:
            mse = res[ds][mode]
            for h in ("HRF-ort", "HRF-iid"):
                best = min(("ORF-reg", "ORF-Had", "Halton-R"), key=lambda k: mse[k].mean())
                v = _verdict(mse[h], mse[best])
                claims.append(
                    {
                        "dataset": ds,
                        "mode": mode,
                        "claim": f"{h} < all non-HRF",
                        "best_non_hrf": best,
                        "holds": v,
                    }
                )
                crow.append(
                    [
                        f"{h} below every non-HRF method",
                        f"{ds} ({mode})",
                        "yes",
                        f"{1e3 * mse[h].mean():.3f} vs best non-HRF {best} "
                        f"{1e3 * mse[best].mean():.3f}",
                        v,
                    ]
                )
            for a, b in (("HRF-ort", "HRF-iid"), ("ORF-reg", "ORF-Had"), ("ORF-Had", "Halton-R")):
                v = _verdict(mse[a], mse[b])
                claims.append({"dataset": ds, "mode": mode, "claim": f"{a} < {b}", "holds": v})
                crow.append(
                    [
                        f"{a} < {b}",
                        f"{ds} ({mode})",
                        "yes",
                        f"{1e3 * mse[a].mean():.3f} vs {1e3 * mse[b].mean():.3f}",
                        v,
                    ]
                )
            ratio = mse["HRF-ort"].mean() / mse["ORF-reg"].mean()
            paper_ratio = (
                PAPER[ds]["HRF-ort"][0] / PAPER[ds]["ORF-reg"][0] if ds in PAPER else float("nan")
            )
            claims.append(
                {
                    "dataset": ds,
                    "mode": mode,
                    "claim": "HRF-ort / ORF-reg",
                    "ours": ratio,
                    "paper": paper_ratio,
                }
            )
            crow.append(
                [
                    "MSE ratio HRF-ort / ORF-reg",
                    f"{ds} ({mode})",
                    f"{paper_ratio:.2f}",
                    f"{ratio:.2f}",
                    "yes" if ratio < 1 else "no",
                ]
            )
    rep.add(
        "## Paper claims vs our data",
        'Paper (Sec. 4.1): "HRFs outperform all other methods" (Table 1 ordering: HRF-ort '
        '< HRF-iid < ORF-reg < ORF-Had < Halton-R on both data sets). Verdict "yes" when '
        'our mean is lower by more than 2 standard errors (over trials), "yes (n.s.)" '
        'when lower but within 2 standard errors, "no" otherwise.',
        markdown_table(["claim", "data", "paper", "ours", "holds on our data?"], crow),
    )
    rep.add(
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
        "ORF-Had, Halton-R vs Trig-iid).",
    )
    rep.add(
        "## Deviations from the paper",
        "- Preprocessing, the non-HRF base estimator (trig here), the hybrid's (m, n) and "
        "the meaning of ± are not stated in the paper; ours are described above. The "
        "absolute MSE scale depends on the preprocessing (norms), so only orderings and "
        "ratios are comparable with the paper's numbers.\n"
        "- Boston comes from mlxtend (same 506 × 13 UCI table).\n"
        "- ORF-Had on d = 13 pads to 16 and truncates the Hadamard rows (not exactly "
        "orthogonal, discrete directions: only approximately unbiased).",
    )
    rep.results.update(
        {
            "config": {
                **asdict(config),
                "flop_rule": H.FLOP_RULE,
                "methods": {k: {"estimator": e, "sampler": s} for k, (e, s) in METHODS.items()},
            },
            "data": info,
            "mse_1e3": {
                ds: {
                    mode: {
                        k: {"mean": 1e3 * v.mean(), "std": 1e3 * v.std(ddof=1)}
                        for k, v in dm.items()
                    }
                    for mode, dm in dv.items()
                }
                for ds, dv in res.items()
            },
            "per_trial_mse": res,
            "paper_1e3": PAPER,
            "claims": claims,
            "compute_s": round(time.perf_counter() - t0, 2),
        }
    )
    rep.write()
    return rep.results
