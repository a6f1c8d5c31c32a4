"""JDL Sec. 5.2: binary classification as a conditional distribution, JDL vs CME vs KLR.

Paper protocol (Figs. 9-11): daily excess returns ``z_t`` of the 25 Fama-French portfolios;
``y_t = sum_{i <= d} z_{t,i}``, ``x_t = (z_{t-1,1}, ..., z_{t-1,d})``; for each of 100
subsamples of size n, train on 4n/5, validate kernel and regularisation parameters on
n/5 with loss (32), test on 5000 further points; ``q`` = the 1 % quantile of the sampled
``y``; the target is ``P(Y <= q | x)``: ``sum_j w_j(x) 1(y_j <= q)`` for JDL, the CME
expectation of the indicator, and ``sigmoid(psi(x)^T c)`` for KLR (App. D). Metrics: loss
(32) (clipped logistic loss, eta = 1e-12), the % of negative "probabilities" (Fig. 10),
and the time to fit and evaluate the test points (Fig. 11).

**Offline stand-in** (the daily data of Sec. 5.2 are not available offline): the
monthly 3x3 size/value portfolios shipped with ``linearmodels`` (819 months,
1949-2017; excess returns = returns minus RF), giving 818 lagged pairs;
``d in {1, 5, 9}`` (the paper: 1, 5, 10, 25), ``n in {200, 400, 600}`` (the paper: 1000
to 20000) and the test set is every pair not drawn (218 to 618 points; the paper: 5000).
Subsamples are random draws without replacement (the paper's scheme is not given), 100
per (d, n) in full mode (the paper's number, :data:`PAPER`). With
so few points the 1 % event has 2-6 occurrences per subsample; a 5 % event is run as a
supplementary setting. Results are not comparable in level with the paper's.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from kernelkit.datasets._jdl import french_classification_data

from . import _jdl_common as C
from ._report import Report, markdown_table

__all__ = ["DESCRIPTION", "FULL", "NAME", "PAPER", "QUICK", "Config", "run"]

NAME = "jdl-classification"
DESCRIPTION = "JDL Sec. 5.2: classification as a conditional distribution, JDL vs CME vs KLR"

VARIANTS = (("jdl", False), ("jdl", True), ("cme", False), ("cme", True), ("klr", False))


@dataclass(frozen=True)
class Config:
    ds: tuple[int, ...] = (1, 5, 9)
    ns: tuple[int, ...] = (200, 400, 600)
    #: subsamples per (d, n) (the paper: 100)
    n_sub: int = 20
    quantiles: tuple[float, ...] = (0.01, 0.05)
    variants: tuple = VARIANTS
    rel_tol: float = 1e-3
    ls_factors: tuple[float, ...] = (0.5, 1.0, 2.0)
    regs: tuple[float, ...] = (1e-6, 1e-4, 1e-2)
    regs_klr: tuple[float, ...] = (1e-2, 1e-1, 1.0)
    eta: float = 1e-12


#: The paper's number of subsamples per (d, n) (its data, d = 25 and n up to 20000 cannot
#: be had offline; see the module docstring).
PAPER = Config(n_sub=100)
#: Full mode: the paper's 100 subsamples per (d, n, quantile) (~1.3 CPU-s per subsample at
#: d = 9, n = 600; about 14 CPU-minutes in all).
FULL = PAPER
QUICK = Config(
    n_sub=2, ls_factors=(1.0,), regs=(1e-5, 1e-3), regs_klr=(1e-2, 1.0), quantiles=(0.01,)
)


def _key(kind, con):
    return f"{kind}/{'c' if con else 'u'}"


def _label(key):
    kind, v = key.split("/")
    if kind == "klr":
        return "KLR"
    return f"{C.MODEL_LABELS[kind]} ({'constrained' if v == 'c' else 'unconstrained'})"


def _run_one(cfg, X_all, y_all, n, q_level, rep, seed):
    from kernelkit.distributions import clipped_log_loss

    N = len(X_all)
    rng = np.random.default_rng([seed, X_all.shape[1], n, rep, int(q_level * 1e4)])
    perm = rng.permutation(N)
    idx, test = perm[:n], perm[n:]
    n_tr = n - n // 5
    tr, va = idx[:n_tr], idx[n_tr:]
    q = float(np.quantile(y_all[idx], q_level))  # 1 % quantile of the sampled y
    Xtr, ytr = X_all[tr], y_all[tr]
    Ytr = ytr[:, None]
    Xva, lva = X_all[va], y_all[va] <= q
    Xte, lte = X_all[test], y_all[test] <= q
    event = (ytr <= q).astype(np.float64)
    ls_x = [f * C.median_distance(Xtr) for f in cfg.ls_factors]
    ls_y = [f * C.median_distance(Ytr) for f in cfg.ls_factors]

    def proba(model, Xq):
        if hasattr(model, "predict_proba"):
            return model.predict_proba(Xq)[:, list(model.classes_).index(True)]
        return model.conditional_probability(event, Xq)

    out = {
        "baseline": {"loss": clipped_log_loss(lte, np.full(len(lte), event.mean()), cfg.eta)},
        "positives": {"train": int(event.sum()), "test": int(lte.sum())},
    }
    from kernelkit.distributions import BasisCache

    cache = BasisCache()  # all models share the factorisations of (X, l) and (Y, l)
    for kind, con in cfg.variants:
        key = _key(kind, con)
        if kind == "klr":
            if event.sum() == 0 or event.sum() == len(event):
                out[key] = {"error": "one class only in the training labels"}
                continue
            grid = [{"lengthscale": lx, "reg": r} for lx in ls_x for r in cfg.regs_klr]
            Yfit = ytr <= q
        else:
            grid = C.grid_for(kind, ls_x, ls_y, cfg.regs, ())
            Yfit = Ytr
        try:
            model, params, vloss, _ = C.select(
                kind,
                con,
                Xtr,
                Yfit,
                grid,
                lambda m: clipped_log_loss(lva, proba(m, Xva), cfg.eta),
                cfg.rel_tol,
                cache=cache,
            )
        except RuntimeError as exc:
            out[key] = {"error": str(exc)}
            continue
        t0 = time.perf_counter()  # Fig. 11: fit + test evaluation with the chosen params
        model = C.fit_model(kind, con, Xtr, Yfit, params, cfg.rel_tol)
        p = proba(model, Xte)
        elapsed = time.perf_counter() - t0
        out[key] = {
            "loss": clipped_log_loss(lte, p, cfg.eta),
            "neg": C.negative_fraction(p),
            "nonpos_mass": C.nonpositive_mass_fraction(model, Xte),
            "time_s": elapsed,
            "val_loss": vloss,
            "params": params,
        }
    return out


def _vals(runs, key, metric):
    return np.array([r[key][metric] for r in runs if metric in r.get(key, {})])


def _run(cfg: Config, out_dir, seed=0, quick=False, progress=True):
    from tqdm.auto import tqdm

    rep = Report(
        out_dir,
        NAME,
        quick=quick,
        title="JDL Sec. 5.2: binary classification "
        "(offline stand-in: monthly French size/value portfolios)",
    )
    data = {d: french_classification_data(d) for d in cfg.ds}
    res = {}
    total = len(cfg.quantiles) * len(cfg.ds) * len(cfg.ns) * cfg.n_sub
    with (
        tqdm(total=total, desc=NAME, disable=not progress) as pbar,
        C.quiet_mass_warnings(),
    ):  # recorded per run as "nonpos_mass" in results.json
        for ql in cfg.quantiles:
            for d in cfg.ds:
                for n in cfg.ns:
                    runs = []
                    for r in range(cfg.n_sub):
                        pbar.set_postfix_str(f"q={ql:g} d={d} n={n}")
                        runs.append(_run_one(cfg, *data[d], n, ql, r, seed))
                        pbar.update(1)
                    res[(ql, d, n)] = runs

    keys = [_key(k, c) for k, c in cfg.variants]
    rows, summary = [], {}
    for (ql, d, n), runs in res.items():
        base = _vals(runs, "baseline", "loss")
        pos = np.mean([r["positives"]["test"] for r in runs])
        for key in keys:
            loss = _vals(runs, key, "loss")
            if loss.size == 0:
                continue
            e = {
                "loss_mean": float(loss.mean()),
                "loss_se": float(loss.std(ddof=1) / np.sqrt(loss.size)) if loss.size > 1 else 0.0,
                "neg_pct": 100 * float(_vals(runs, key, "neg").mean()),
                "time_s": float(np.median(_vals(runs, key, "time_s"))),
                "baseline_loss": float(base.mean()),
                "n_ok": int(loss.size),
            }
            summary[f"q={ql:g} d={d} n={n} {key}"] = e
            rows.append(
                [
                    f"{ql:g}",
                    d,
                    n,
                    _label(key),
                    e["loss_mean"],
                    e["loss_se"],
                    e["baseline_loss"],
                    e["neg_pct"],
                    e["time_s"],
                    f"{pos:.1f}",
                    f"{e['n_ok']}/{cfg.n_sub}",
                ]
            )

    claims = _claims(cfg, summary)
    rep.add(
        "## Setup and stand-in data\n\n"
        "The paper's daily 25-portfolio Fama-French data (1927-2022, > 25,000 days) are not "
        "available offline. Stand-in: `linearmodels.datasets.french`, monthly 1949-01 to "
        "2017-03, the 9 size/value portfolios S1V1 ... S5V5 minus RF, 818 lagged pairs "
        f"(x_t = z_(t-1), y_t = sum of the first d of z_t). d in {list(cfg.ds)}, n in "
        f"{list(cfg.ns)}, {cfg.n_sub} random subsamples each, 4/5 training, 1/5 validation "
        "(loss (32)), test = all pairs not drawn; event quantile levels "
        f"{list(cfg.quantiles)} (the paper: 0.01). Lengthscale factors "
        f"{list(cfg.ls_factors)} x median distance (x and y separately), reg in "
        f"{list(cfg.regs)} (KLR {list(cfg.regs_klr)}), relative tolerance {cfg.rel_tol:g}. "
        "The 'unconditional' column is loss (32) of the constant training frequency.\n\n"
        f"**Scale.** This run: {cfg.n_sub} subsamples per (d, n), d in {list(cfg.ds)}, n in "
        f"{list(cfg.ns)} monthly points. The paper: {PAPER.n_sub} subsamples, d in "
        "{1, 5, 10, 25}, n = 1000 to 20000 daily points, 5000 test points (`PAPER` in the "
        "module holds what can be scaled offline: the subsample count). With 2-6 occurrences "
        "of the 1 % event per subsample its losses are noisy.",
        "## Paper's claims vs ours\n\nThe paper reports Figs. 9-11 only; claims from the "
        "text of Sec. 5.2 (loss axes there: 0.04-0.22 unconstrained, 0-0.35 constrained, "
        "at d = 25, n = 1000-20000 daily points).\n\n"
        + markdown_table(["paper (Sec. 5.2)", "ours", "holds on our data?"], claims),
        "## Results\n\n"
        + markdown_table(
            [
                "quantile",
                "d",
                "n",
                "model",
                "loss (32)",
                "s.e.",
                "unconditional",
                "% p < 0",
                "median time s",
                "test events",
                "fits ok",
            ],
            rows,
            floatfmt=".3g",
        ),
    )
    _figures(rep, cfg, summary, keys)
    rep.add(
        "## Deviations\n\n- Monthly 9-portfolio stand-in instead of the daily "
        "25-portfolio data; smaller d and n; test set = the rest (218-618 points) "
        "instead of 5000 points.\n- Random subsamples (scheme not given); hyper-parameter "
        "grids are library choices; models are not refit on the validation fifth.\n"
        "- KLR has no intercept (as in the paper) and is fitted by L-BFGS.\n"
        "- Constrained CME: (51) + (52); constrained JDL: (20) + (29)."
    )
    rep.results.update({"config": asdict(cfg), "summary": summary, "claims": claims, "seed": seed})
    rep.write()
    return {"claims": claims, "summary": summary, "report": str(Path(out_dir) / "report.md")}


def _yn(b):
    return "yes" if b else "no"


def _claims(cfg, summary):
    ql = cfg.quantiles[0]
    d = max(cfg.ds)

    def g(n, key, m="loss_mean", dd=d):
        return summary.get(f"q={ql:g} d={dd} n={n} {key}", {}).get(m, np.nan)

    ns = cfg.ns
    out = []
    small = ns[0]
    out.append(
        [
            f"Fig. 9(a): unconstrained JDL beats CME at small n (d = {d}, n = {small})",
            f"JDL {g(small, 'jdl/u'):.3g}, CME {g(small, 'cme/u'):.3g}",
            _yn(g(small, "jdl/u") < g(small, "cme/u")),
        ]
    )
    par = [g(n, "jdl/c") <= 1.1 * g(n, "klr/u") for n in ns]
    out.append(
        [
            "Fig. 9(b): constrained JDL on par with KLR, except small n in high d "
            "(ours: loss at most 10 % above KLR's, n > smallest)",
            ", ".join(f"n={n}: {g(n, 'jdl/c'):.3g} vs {g(n, 'klr/u'):.3g}" for n in ns),
            _yn(all(par[1:])),
        ]
    )
    hurt = [g(n, "cme/c") > 1.1 * g(n, "cme/u") for n in ns]
    out.append(
        [
            "Fig. 9(b): constraints severely hinder CME (ours: loss > 10 % higher at most n)",
            ", ".join(f"n={n}: {g(n, 'cme/u'):.3g} -> {g(n, 'cme/c'):.3g}" for n in ns),
            _yn(sum(hurt) > len(ns) / 2),
        ]
    )
    negj = max(g(n, "jdl/c", "neg_pct", dd) for n in ns for dd in cfg.ds)
    out.append(
        [
            "Fig. 10: constraints cut JDL's negative probabilities to zero",
            f"max % p < 0, constrained JDL: {negj:.2g} (unconstrained: "
            f"{max(g(n, 'jdl/u', 'neg_pct', dd) for n in ns for dd in cfg.ds):.2g})",
            _yn(negj == 0),
        ]
    )
    cu = np.nanmean([g(n, "cme/u", "neg_pct", dd) for n in ns for dd in cfg.ds])
    cc = np.nanmean([g(n, "cme/c", "neg_pct", dd) for n in ns for dd in cfg.ds])
    out.append(
        [
            "Fig. 10: constraints cut CME's negative probabilities 2-5 fold",
            f"mean % p < 0: {cu:.2g} -> {cc:.2g}",
            _yn(cc * 2 <= cu if cu > 0 else cc == 0),
        ]
    )
    kn = max(g(n, "klr/u", "neg_pct", dd) for n in ns for dd in cfg.ds)
    out.append(["KLR positive by construction", f"max % p < 0: {kn:.2g}", _yn(kn == 0)])
    tj, tc, tk = (np.nanmean([g(n, k, "time_s") for n in ns]) for k in ("jdl/c", "cme/c", "klr/u"))
    out.append(
        [
            f"Fig. 11: constrained CME and JDL comparable in time, KLR slightly slower (d = {d})",
            f"median s: JDL {tj:.3g}, CME {tc:.3g}, KLR {tk:.3g}",
            _yn(0.5 <= tj / tc <= 2 and tk >= tj),
        ]
    )
    return out


def _figures(rep, cfg, summary, keys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ql = cfg.quantiles[0]
    for metric, lab, fname, cap in (
        ("loss_mean", "loss (32)", "fig9_loss.png", "Fig. 9: loss (32) vs n"),
        ("neg_pct", "% p < 0", "fig10_negative.png", "Fig. 10: % negative probabilities"),
        ("time_s", "seconds (fit + test)", "fig11_time.png", "Fig. 11: time to fit and evaluate"),
    ):
        fig, axes = plt.subplots(1, len(cfg.ds), squeeze=False, figsize=(4.2 * len(cfg.ds), 3.3))
        for ax, d in zip(axes[0], cfg.ds, strict=True):
            for key in keys:
                ys = [
                    summary.get(f"q={ql:g} d={d} n={n} {key}", {}).get(metric, np.nan)
                    for n in cfg.ns
                ]
                ax.plot(
                    cfg.ns,
                    ys,
                    marker="o",
                    ls="--" if key.endswith("/c") else "-",
                    label=_label(key),
                )
            if metric == "loss_mean":
                ax.plot(
                    cfg.ns,
                    [
                        summary.get(f"q={ql:g} d={d} n={n} jdl/u", {}).get("baseline_loss", np.nan)
                        for n in cfg.ns
                    ],
                    color="gray",
                    marker="x",
                    label="unconditional",
                )
            ax.set_title(f"d = {d}, quantile {ql:g}")
            ax.set_xlabel("n")
            ax.set_ylabel(lab)
            ax.legend(fontsize=6)
        fig.tight_layout()
        rep.figure(fig, fname, f"{cap} (monthly stand-in data; mean over subsamples).")


def run(out_dir: Path, quick: bool = False, seed: int = 0, **overrides) -> dict:
    """``kernelkit reproduce jdl-classification [--quick]``; ``overrides`` replace Config."""
    return _run(replace(QUICK if quick else FULL, **overrides), out_dir, seed=seed, quick=quick)
