"""Hybrid Random Features, Fig. 2 / Fig. 5 (Sec. 4.1, App. G): pointwise estimation of the
softmax kernel on the sphere.

Reproduces Choromanski et al., "Hybrid Random Features" (ICLR 2022) offline (closed forms:
Lemma 3.4, Thm 3.5 with the corrections of the user guide's hybrid random features page).

Setup (paper): 64-dim inputs of equal length ``r`` in {1, 1.25, 1.5} at angles ``theta``
over ``[0, pi]``; ``s = 10000`` independent estimates of ``SM(x, y) = exp(x.y)`` per angle;
Trig and FAVOR+ with 128 random features against the angular hybrid at a similar number of
FLOPs "per random feature map creation" (the configuration is not given; our matching
rule is :data:`kernelkit_experiments._hrf_common.FLOP_RULE`). Shown: true value, 5th / 95th
percentile of the estimates, empirical relative error ``sqrt(MSE) / SM``.

Methods: Trig and FAVOR+ (``SM^{++}``) with ``M = 128``; the angular hybrid (eq. 12, 19)
at two FLOP-matched shapes; the normalised Gaussian hybrid of App. F (the "Gaussian hybrid
variant" with "similar gains", Fig. 2 caption), FLOP-matched with ``n = 8``, ``sigma = 1``.

All ``s`` estimates at one radius are computed as one batched array computation over a
stack of ``s`` independent projection matrices (chunked to bound memory); each draw is
evaluated at every angle, as one feature map would be. The batched estimators equal the
library's maps for the same draws (``tests/experiments/test_hrf_pointwise.py``).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from . import _hrf_common as H
from ._report import Report, markdown_table

__all__ = ["DESCRIPTION", "FULL", "NAME", "QUICK", "Config", "compute", "run"]

NAME = "hrf-pointwise"
DESCRIPTION = (
    "Hybrid RF Figs. 2/5: pointwise relative error of the softmax kernel on the sphere "
    "(d = 64) vs angle, Trig / FAVOR+ vs FLOP-matched angular hybrids"
)


@dataclass(frozen=True)
class Config:
    d: int = 64
    radii: tuple[float, ...] = (1.0, 1.25, 1.5)
    n_angles: int = 25  # uniform grid over [0, pi], endpoints included
    n_estimates: int = 10000  # s, independent draws per angle
    n_features: int = 128  # M of Trig and FAVOR+
    #: hybrid shapes: None = largest square m = n within the FLOP budget, an int = that n
    hybrid_n: tuple[int | None, ...] = (None, 8)
    #: normalised Gaussian hybrids (App. F): n of each (m FLOP-matched); () = none
    gauss_n: tuple[int, ...] = (8,)
    gauss_sigma: float = 1.0  # sigma of the lambda projections t_j ~ N(0, sigma^2 I)
    chunk: int = 500  # draws per batched block


FULL = Config()
QUICK = Config(n_angles=13, n_estimates=2000)


def _methods(config: Config):
    """Method label -> (kind, m, n)."""
    M, d = config.n_features, config.d
    out = {f"Trig ({M})": ("trig", M, 0), f"FAVOR+ ({M})": ("favor", M, 0)}
    for n in config.hybrid_n:
        m, nn = H.match_angular(M, d, n)
        out[f"HRF-ang ({m},{nn})"] = ("hybrid", m, nn)
    for n in config.gauss_n:
        m, nn = H.match_gauss(M, d, n)
        out[f"HRF-gauss ({m},{nn})"] = ("ngauss", m, nn)
    return out


def _flops(kind: str, m: int, n: int, d: int) -> int:
    return H.gauss_flops(m, n, d) if kind == "ngauss" else H.angular_flops(m, n, d)


def _dim(kind: str, m: int, n: int) -> int:
    """Feature dimension: 4m(n+1) (angular), 4m(2n+1) (normalised Gaussian)."""
    return 4 * m * (2 * n + 1) if kind == "ngauss" else 4 * m * (n + 1)


def _theory(config: Config, kind: str, r: float, thetas, m: int, n: int):
    """Closed-form relative error of a method on the sphere S(r) (Lemma 3.4, Thm 3.5, F.2)."""
    return H.sphere_rel_error(kind, r, thetas, m, max(n, 1), sigma=config.gauss_sigma)


def compute(config: Config, seed: int = 0, progress: bool = True) -> dict:
    """Monte Carlo estimates for every radius and method.

    Returns ``{r: {label: {"eps", "mean", "q05", "q95", "max_abs_err"}}, "_x": ...}`` with
    arrays over the angle grid (``eps`` = empirical ``sqrt(MSE)/SM``).
    """
    from tqdm.auto import tqdm

    thetas = np.linspace(0.0, math.pi, config.n_angles)
    thetas[-1] = math.pi
    methods = _methods(config)
    ss = np.random.SeedSequence(seed)
    out: dict = {"thetas": thetas, "methods": methods, "radii": {}}
    jobs = [(r, lab) for r in config.radii for lab in methods]
    seeds = ss.spawn(len(config.radii) + len(jobs))
    bar = tqdm(jobs, desc="hrf-pointwise", disable=not progress, leave=False)
    for j, (r, label) in enumerate(bar):
        ir = config.radii.index(r)
        X, Y = H.sphere_pairs(config.d, r, thetas, np.random.default_rng(seeds[ir]))
        sm = np.exp(np.sum(X * Y, axis=1))  # (k,)
        kind, m, n = methods[label]
        rng = np.random.default_rng(seeds[len(config.radii) + j])
        est = np.empty((config.n_estimates, thetas.size))  # (s, k)
        rho = -math.expm1(-2.0 * config.gauss_sigma**2 * r * r)  # App. F, for |x| = |y| = r
        t_scale = config.gauss_sigma if kind == "ngauss" else 1.0  # t_j ~ N(0, sigma^2 I)
        for lo in range(0, config.n_estimates, config.chunk):
            hi = min(lo + config.chunk, config.n_estimates)
            W = rng.standard_normal((hi - lo, m, config.d))  # (c, m, d)
            T = (
                t_scale * rng.standard_normal((hi - lo, n, config.d))
                if kind in ("hybrid", "ngauss")
                else None
            )  # (c, n, d)
            est[lo:hi] = H.estimate(kind, W, T, X, Y, rho=rho)
        err = est - sm
        mse = np.mean(err**2, axis=0)  # (k,)
        # standard error of the empirical MSE, for the verdicts
        mse_se = np.std(err**2, axis=0, ddof=1) / math.sqrt(config.n_estimates)
        out["radii"].setdefault(r, {"sm": sm})[label] = {
            "eps": np.sqrt(mse) / sm,
            "eps_theory": _theory(config, kind, r, thetas, m, n),
            "mse": mse,
            "mse_se": mse_se,
            "mean": est.mean(axis=0),
            "q05": np.quantile(est, 0.05, axis=0),
            "q95": np.quantile(est, 0.95, axis=0),
            "max_abs_rel_err": np.max(np.abs(err), axis=0) / sm,
        }
    return out


def _plot_curves(config, res):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    th = res["thetas"]
    fine = np.linspace(0.0, math.pi, 400)
    radii = list(res["radii"])
    fig, axes = plt.subplots(1, len(radii), figsize=(4.6 * len(radii), 3.9), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, r in zip(axes[0], radii, strict=True):
        for i, (label, (kind, m, n)) in enumerate(res["methods"].items()):
            c = res["radii"][r][label]
            ax.plot(th, c["eps"], "o", ms=3.5, color=cmap(i), label=f"{label} MC")
            ax.plot(
                fine, _theory(config, kind, r, fine, m, n), "-", lw=1.2, color=cmap(i), alpha=0.7
            )
        ax.set_title(f"r = {r:g}")
        ax.set_xlabel("θ")
        ax.set_xticks([0, math.pi / 2, math.pi], ["0", "π/2", "π"])
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("relative error √MSE / SM")
    axes[0, -1].legend(fontsize=8)
    fig.suptitle(
        f"Empirical relative error (dots, s = {config.n_estimates}) and closed form "
        f"(lines), d = {config.d}",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def _plot_quantiles(config, res):
    """Paper's panel layout: true value and 5th / 95th percentiles (left axis), empirical
    relative error (right axis); one row per radius, one column per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    th = res["thetas"]
    radii, labels = list(res["radii"]), list(res["methods"])
    fig, axes = plt.subplots(
        len(radii),
        len(labels),
        figsize=(3.6 * len(labels), 2.9 * len(radii)),
        squeeze=False,
        sharex=True,
    )
    for i, r in enumerate(radii):
        sm = res["radii"][r]["sm"]
        for j, label in enumerate(labels):
            c = res["radii"][r][label]
            ax = axes[i, j]
            ax.plot(th, sm, "k-", lw=1.2, label="true SM")
            ax.fill_between(th, c["q05"], c["q95"], color="C0", alpha=0.3, label="5–95 %")
            ax.axhline(0.0, color="r", ls=":", lw=0.8)
            ax2 = ax.twinx()
            ax2.plot(th, c["eps"], "C3o-", ms=2.5, lw=1.0, label="rel. error")
            ax2.tick_params(axis="y", colors="C3", labelsize=7)
            ax.tick_params(labelsize=7)
            if i == 0:
                ax.set_title(label, fontsize=9)
            if j == 0:
                ax.set_ylabel(f"r = {r:g}", fontsize=9)
            if i == len(radii) - 1:
                ax.set_xticks([0, math.pi / 2, math.pi], ["0", "π/2", "π"])
    axes[0, 0].legend(fontsize=7, loc="upper right")
    fig.suptitle(
        "Estimates of SM(x, y): true value, 5th–95th percentile band (left axis), "
        "empirical relative error (red, right axis)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def run(
    out_dir, quick: bool = False, seed: int = 0, config: Config | None = None, progress: bool = True
) -> dict:
    """Run the experiment; writes ``report.md``, ``rel_error.png``, ``estimates.png``,
    ``results.json``.

    Parameters
    ----------
    out_dir : path
    quick : bool
        :data:`QUICK` (2000 estimates, 13 angles) instead of :data:`FULL`.
    seed : int
    config : Config, optional
        Overrides the quick / full configuration (tests).
    """
    config = config or (QUICK if quick else FULL)
    rep = Report(
        out_dir,
        NAME,
        quick=quick,
        title="Hybrid random features: pointwise softmax-kernel estimation (Fig. 2 / Fig. 5)",
    )
    t0 = time.perf_counter()
    res = compute(config, seed, progress)
    methods = res["methods"]
    labels = list(methods)
    budget = H.regular_flops(config.n_features, config.d)
    rep.add(
        "## Setup",
        f"d = {config.d}; |x| = |y| = r ∈ {{{', '.join(f'{r:g}' for r in config.radii)}}}; "
        f"{config.n_angles} angles θ uniformly over [0, π] (endpoints included); "
        f"s = {config.n_estimates} independent estimates per angle (each a fresh draw of "
        "all random projections, i.i.d. N(0, I_d) rows; one draw is evaluated at every "
        f"angle). Seed {seed}.",
        "**Estimators.** Trig = the paper's SM^trig_M (eq. 2, sin/cos, dim 2M); FAVOR+ = "
        "the paper's SM^{++}_M (eq. 3, antithetic ±ω, dim 2M); HRF-ang (m, n) = the "
        "angular hybrid λ̂ SM^{++}_m + (1 − λ̂) SM^trig_m (eq. 12, 19) with λ̂ from n sign "
        "projections, base estimators sharing their projections (variant II of Thm 3.1); "
        "HRF-gauss (m, n) = the normalised bipolar Gaussian hybrid of App. F (eq. 67-70, "
        'the paper\'s "Gaussian hybrid variant" of Fig. 2) with λ̂ = 1/ρ − (1/(nρ)) Σ '
        f"cos(τ_j·(x − y)), τ_j ~ N(0, σ²I), σ = {config.gauss_sigma:g}, ρ = 1 − e^{{−2σ²r²}}, "
        "same shared base estimators (zero variance at θ = 0 only).",
        "**FLOP matching.** " + H.FLOP_RULE + " " + H.GAUSS_FLOP_RULE + " Budget of M = "
        f"{config.n_features}, d = {config.d}: {budget} FLOPs; "
        + "; ".join(
            f"{lab}: {_flops(k, m, n, config.d)} FLOPs, feature dimension {_dim(k, m, n)}"
            for lab, (k, m, n) in methods.items()
            if k in ("hybrid", "ngauss")
        )
        + ".",
    )
    fig = _plot_curves(config, res)
    rep.figure(
        fig,
        "rel_error.png",
        "Relative error vs angle: Monte Carlo (dots) and closed form (Lemma 3.4, "
        "Thm 3.5 / eq. 48-50, Thm F.2; lines).",
    )
    fig = _plot_quantiles(config, res)
    rep.figure(fig, "estimates.png", "Layout of the paper's Fig. 2/5.")

    # ------------------------------------------------------------ max relative error table
    fine = np.linspace(0.0, math.pi, 2001)
    rows, table = [], {}
    for r in config.radii:
        table[r] = {}
        for label, (kind, m, n) in methods.items():
            c = res["radii"][r][label]
            k = int(np.argmax(c["eps"]))
            theory = float(np.max(_theory(config, kind, r, fine, m, n)))
            table[r][label] = {
                "max_eps": float(c["eps"][k]),
                "argmax_theta": float(res["thetas"][k]),
                "max_eps_theory": theory,
            }
            rows.append(
                [f"{r:g}", label, f"{c['eps'][k]:.4f}", f"{res['thetas'][k]:.3f}", f"{theory:.4f}"]
            )
    rep.add(
        "## Max relative error over the angle grid",
        "ε_max = max over θ of the empirical √MSE / SM (Def. 3.3, on S(r)); θ* its argmax "
        "on our grid; closed form = max of the exact expression on a 2001-point grid.",
        markdown_table(["r", "method", "ε_max (MC)", "θ*", "ε_max closed form"], rows),
    )

    # ------------------------------------------------------------ claims
    claims, crow = [], []
    hyb = [lab for lab in labels if methods[lab][0] == "hybrid"]
    gauss = [lab for lab in labels if methods[lab][0] == "ngauss"]
    base = [lab for lab in labels if methods[lab][0] in ("trig", "favor")]
    for r in config.radii:
        best_base = min(table[r][b]["max_eps"] for b in base)
        for h in hyb + gauss:
            ours = table[r][h]["max_eps"]
            ok = ours < best_base
            is_gauss = h in gauss
            claims.append(
                {
                    "claim": ("Gaussian " if is_gauss else "") + "hybrid max relative "
                    "error below Trig and FAVOR+",
                    "r": r,
                    "method": h,
                    "hybrid": ours,
                    "best_baseline": best_base,
                    "ratio": ours / best_base,
                    "holds": H.claim_verdict(ok),
                }
            )
            crow.append(
                [
                    f"ε_max({h}) < ε_max(Trig), ε_max(FAVOR+)",
                    f"{r:g}",
                    'yes (Sec. 4.1: "similar gains" as the angular hybrid)'
                    if is_gauss
                    else "yes (Fig. 2/5, no numbers)",
                    f"{ours:.3f} vs {best_base:.3f} (ratio {ours / best_base:.2f})",
                    H.claim_verdict(ok),
                ]
            )
    # zero variance at theta = 0 and pi for equal norms (Sec. 3, Thm 3.5 limits)
    worst = max(
        float(
            max(res["radii"][r][h]["max_abs_rel_err"][0], res["radii"][r][h]["max_abs_rel_err"][-1])
        )
        for r in config.radii
        for h in hyb
    )
    ok = worst < 1e-9
    claims.append(
        {
            "claim": "hybrid exact at theta = 0 and pi (equal norms)",
            "max_abs_rel_err": worst,
            "holds": H.claim_verdict(ok),
        }
    )
    crow.append(
        [
            "HRF-ang exact at θ = 0 and θ = π (equal norms)",
            "all",
            "yes (zero variance, Sec. 3)",
            f"max |error| / SM = {worst:.1e} over all {config.n_estimates} draws",
            H.claim_verdict(ok),
        ]
    )
    if gauss:  # App. F: trig-estimated lambda -> zero variance at theta = 0, not at pi
        w0 = max(
            float(res["radii"][r][h]["max_abs_rel_err"][0]) for r in config.radii for h in gauss
        )
        wpi = min(float(res["radii"][r][h]["eps"][-1]) for r in config.radii for h in gauss)
        ok = w0 < 1e-9 and wpi > 0
        claims.append(
            {
                "claim": "Gaussian hybrid exact at theta = 0, not at pi",
                "max_abs_rel_err_0": w0,
                "min_eps_pi": wpi,
                "holds": H.claim_verdict(ok),
            }
        )
        crow.append(
            [
                "HRF-gauss exact at θ = 0 only (equal norms)",
                "all",
                "yes (App. F: zero variance at θ = 0 or π, not both)",
                f"max |error| / SM at 0: {w0:.1e}; ε at π ≥ {wpi:.3f}",
                H.claim_verdict(ok),
            ]
        )
    # Lemma 3.4: Trig (a bounded estimator, |estimate| <= e^{r^2}) is worst at theta = pi
    b = base[0]
    ok = all(abs(table[r][b]["argmax_theta"] - math.pi) < 1e-12 for r in config.radii)
    claims.append({"claim": f"{b} max error at theta = pi", "holds": H.claim_verdict(ok)})
    crow.append(
        [
            f"ε({b}) largest at θ = π",
            "all",
            "yes (Lemma 3.4)",
            ", ".join(f"θ* = {table[r][b]['argmax_theta']:.2f}" for r in config.radii),
            H.claim_verdict(ok),
        ]
    )
    # MC against the closed form. Trig is bounded, so the sample MSE has a reliable standard
    # error: z-scores. The FAVOR+ part has heavy tails (4th moment ~ e^{4|x+y|^2}), so its
    # sample MSE converges slowly and from below: report the ratio MC / closed form.
    zs, ratios = [], {}
    for r in config.radii:
        sm = res["radii"][r]["sm"]
        for label in labels:
            c = res["radii"][r][label]
            th_mse = (c["eps_theory"] * sm) ** 2
            live = th_mse > 1e-20 * sm**2  # exact cells (theta = 0 or pi) excluded
            if methods[label][0] == "trig":
                zs.extend(((c["mse"][live] - th_mse[live]) / c["mse_se"][live]).tolist())
            else:
                q = c["eps"][live] / c["eps_theory"][live]
                ratios.setdefault(label, []).extend(q.tolist())
    zmax = float(np.max(np.abs(zs))) if zs else 0.0
    ok = zmax < 5.0
    claims.append(
        {
            "claim": "Trig empirical MSE matches Lemma 2.2",
            "max_abs_z": zmax,
            "holds": H.claim_verdict(ok),
        }
    )
    crow.append(
        [
            "Trig: empirical MSE = Lemma 2.2",
            "all",
            "(theory)",
            f"max |z| = {zmax:.2f} over {len(zs)} (r, θ) cells",
            H.claim_verdict(ok),
        ]
    )
    ratio_text = "; ".join(
        f"{lab}: {min(v):.2f}–{max(v):.2f} (median {np.median(v):.2f})" for lab, v in ratios.items()
    )
    claims.append(
        {
            "claim": "heavy-tailed estimators: MC eps / closed-form eps",
            "range": {lab: [min(v), max(v), float(np.median(v))] for lab, v in ratios.items()},
        }
    )
    rep.add(
        "## Paper claims vs our data",
        'The paper gives Fig. 2/5 without numbers; its claim (Sec. 4.1): "the angular '
        "hybrid estimator most accurately approximates softmax kernel and has smaller "
        'max-relative-error than other estimators".',
        markdown_table(["claim", "r", "paper", "ours", "holds on our data?"], crow),
        "**Heavy tails.** FAVOR+ (and the λ̂ SM^{++} part of the hybrid) has a 4th moment "
        "growing like e^{4|x+y|²}, so with s draws its sample MSE is unreliable near θ = 0 "
        "and underestimates the true MSE there; ratio empirical ε / closed-form ε over the "
        f"non-exact cells: {ratio_text}. The comparison above uses the empirical ε of "
        "every method, which favours FAVOR+ (its closed-form ε_max equals Trig's by Lemma "
        "3.4); the closed-form column of the table gives the exact values.",
    )
    rep.add(
        "## Deviations from the paper",
        "- The hybrid's (m, n) is not stated in the paper; ours follow the FLOP rule above "
        "(two shapes shown: square m = n, and n = 8 as in the paper's other experiments).\n"
        "- The Gaussian hybrid's variant, σ and (m, n) are not given (\"similar gains as for "
        "the angular are obtained by the Gaussian hybrid variant\"); we show App. F's "
        f"normalised variant with trig-estimated λ, σ = {config.gauss_sigma:g} (fixed, not "
        "tuned per r; σ ∈ [0.75, 1] minimised its closed-form ε_max on our r grid) and "
        "n = 8, m FLOP-matched.\n"
        "- Angle grid and the plane of (x, y) are ours (results do not depend on the "
        "plane: the rows of W are isotropic).\n"
        "- Estimates are computed from the estimators' closed forms on batched projection "
        "stacks (not through `FeatureMap` objects, which would need one object per "
        "draw); the test suite checks them against the library maps for identical draws.",
    )
    rep.results.update(
        {
            "config": {
                **asdict(config),
                "flop_rule": H.FLOP_RULE,
                "flop_budget": budget,
                "methods": {k: {"kind": v[0], "m": v[1], "n": v[2]} for k, v in methods.items()},
            },
            "thetas": res["thetas"],
            "curves": {
                str(r): {
                    "sm": res["radii"][r]["sm"],
                    **{lab: {k: v for k, v in res["radii"][r][lab].items()} for lab in labels},
                }
                for r in config.radii
            },
            "max_rel_error": {str(r): v for r, v in table.items()},
            "claims": claims,
            "compute_s": round(time.perf_counter() - t0, 2),
        }
    )
    rep.write()
    return rep.results
