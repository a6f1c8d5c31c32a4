"""Approximation error of linear attention against exact softmax attention vs M.

``kernelkit reproduce attention-approx``: for every feature map of
:func:`kernelkit.attention.linear_attention` and M in {16, 32, 64, 128, 256} random
features, the error against exact attention (:func:`kernelkit.kernels.softmax_attention`):

* **output error**: relative L2 (Frobenius) error ``|Y^ - Y| / |Y|`` of the ``(L, d)``
  output of one (batch element, head), averaged over instances and feature draws;
* **attention-matrix error** (small L): the same for the ``(L, L)`` attention matrix
  itself, obtained by passing the identity as values (``v = I_L``: the output *is* the
  row-normalised matrix ``diag(P S^T 1)^{-1} P S^T``).

Regimes (queries / keys / values):

* ``normal``: the FAVOR# paper's regime (Sec. 5.1) at kernel scale: ``x = q d^{-1/4}``,
  ``y = k d^{-1/4}`` i.i.d. N(0, sigma^2 I), sigma = 0.25, d = 64 (``|x|^2 ~ 4``, logits
  ``x.y`` of standard deviation 0.5); values N(0, 1);
* ``heterogen``: the paper's "heterogen" regime: as ``normal`` but ``y ~ N(sigma 1,
  sigma^2 I)``. The shift adds the same ``x.(sigma 1)`` to every logit of a query, so the
  *exact* attention is distributed as for ``normal``; only the estimators see the larger
  key norms;
* ``unit`` (full run): q, k with i.i.d. N(0, 1) entries, the usual random test input of
  SDPA (sigma = d^{-1/4}, ``|x|^2 ~ 8``, logits of unit variance): a hard case for every
  random-feature map;
* ``lm``: structured queries, keys and values captured from every layer and head of the
  small character-level Transformer of ``tiny-lm`` trained briefly with exact attention
  in this run (checkpoint cached in the output directory) on validation text.

Modes: bidirectional (FAVOR++/FAVOR# parameters fitted per instance from its own queries
and keys) and causal (the fitted maps take their parameters from the moments of an
independent calibration batch of the same regime, as
:class:`~kernelkit.attention.FavorAttention` does from running statistics; trig and the
angular hybrid are not positive and bidirectional only).
Cost (one torch thread): quick ~20 s, full ~4 min of CPU (L = 1024, 5 draws, four
regimes, the LM trained 500 steps once and cached).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ._report import Report, markdown_table

__all__ = ["DESCRIPTION", "FULL", "MAPS", "NAME", "QUICK", "Config", "compute_errors", "run"]

NAME = "attention-approx"
DESCRIPTION = (
    "Linear attention: error of every feature map against exact softmax attention "
    "vs number of features (random and trained-LM queries/keys, bidirectional and "
    "causal)"
)

#: feature map -> label
MAPS = {
    "relu": "ReLU (no RF)",
    "elu": "ELU+1 (no RF)",
    "trig": "Trig",
    "positive": "FAVOR+ (positive)",
    "hyperbolic": "hyperbolic",
    "gerf": "FAVOR++ (GERF)",
    "saderf": "FAVOR# SADERF",
    "aderf": "FAVOR# ADERF",
    "sderf": "FAVOR# SDERF",
    "hybrid_angular": "hybrid (angular)",
}
DETERMINISTIC = ("relu", "elu")  # no random features: not softmax estimators
REGIMES = ("normal", "heterogen", "unit", "lm")
#: random regimes: (sigma at kernel scale or None for d^{-1/4}, key mean in units of sigma)
RANDOM_REGIMES = {"normal": (0.25, 0.0), "heterogen": (0.25, 1.0), "unit": (None, 0.0)}
MODES = ("bidirectional", "causal")


@dataclass(frozen=True)
class Config:
    Ms: tuple = (16, 32, 64, 128, 256)
    d: int = 64  # head dimension of the random regimes
    L_out: int = 1024  # sequence length for the output error (random regimes)
    L_mat: int = 256  # sequence length for the attention-matrix error
    batch: int = 2
    heads: int = 4
    n_draws: int = 5  # feature draws (random_state) per configuration
    regimes: tuple = REGIMES
    modes: tuple = MODES
    maps: tuple = tuple(MAPS)
    # the small LM (lm regime): architecture, training budget, windows used
    lm_corpus: str = "pydoc"
    lm_context: int = 128
    lm_d_model: int = 128
    lm_heads: int = 4
    lm_layers: int = 3
    lm_steps: int = 500
    lm_batch: int = 16
    lm_windows: int = 4  # validation windows evaluated (x layers x heads instances)
    lm_calib_windows: int = 16  # other windows whose moments fit the causal parameters


FULL = Config()
QUICK = Config(
    L_out=256,
    L_mat=64,
    batch=1,
    heads=4,
    n_draws=3,
    regimes=("normal", "heterogen", "lm"),
    lm_context=64,
    lm_d_model=64,
    lm_heads=4,
    lm_layers=2,
    lm_steps=100,
    lm_batch=8,
    lm_windows=2,
    lm_calib_windows=8,
)


# ----------------------------------------------------------------------------- data
def _random_qkv(regime, cfg, L, seed):
    """(q, k, v) each (batch, heads, L, d) float32, and a calibration (q, k) pair."""
    import torch

    g = torch.Generator().manual_seed(int(seed))
    shape = (cfg.batch, cfg.heads, L, cfg.d)
    sigma, mean = RANDOM_REGIMES[regime]
    sigma = cfg.d**-0.25 if sigma is None else sigma
    s = sigma * cfg.d**0.25  # q = d^{1/4} x, x ~ N(mean sigma 1, sigma^2 I)
    q, k, v, qc, kc = (torch.randn(shape, generator=g) for _ in range(5))
    return q * s, (k + mean) * s, v, qc * s, (kc + mean) * s


def _lm_checkpoint(cfg, seed, out_dir: Path, corpus):
    """Train (or load from ``out_dir``) the exact-attention tiny LM; returns (model, info)."""
    import torch

    from ._tiny_transformer import LMConfig, TinyLM, TrainConfig, train_lm

    lm = LMConfig(
        vocab_size=corpus.vocab_size,
        context=cfg.lm_context,
        d_model=cfg.lm_d_model,
        n_heads=cfg.lm_heads,
        n_layers=cfg.lm_layers,
        attention="exact",
    )
    tc = TrainConfig(
        steps=cfg.lm_steps,
        batch_size=cfg.lm_batch,
        warmup=max(1, cfg.lm_steps // 10),
        log_every=max(1, cfg.lm_steps // 20),
        eval_windows=32,
    )
    key = {
        "lm_config": asdict(lm),
        "train_config": asdict(tc),
        "seed": seed,
        "corpus_sha256": corpus.sha256,
    }
    path = out_dir / "lm_checkpoint.pt"
    if path.is_file():
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        if ckpt.get("key") == key:
            model = TinyLM(lm, seed=seed)
            model.load_state_dict(ckpt["state_dict"])
            return model.eval(), {**ckpt["info"], "cached": True}
    r = train_lm(lm, tc, corpus.train, corpus.valid, seed=seed, progress="tiny LM (exact)")
    info = {
        "valid_bpc": r["valid_bpc"],
        "final_train_bits": r["curve"][-1][1],
        "first_train_bits": r["curve"][0][1],
        "train_seconds": r["train_seconds"],
    }
    torch.save({"key": key, "state_dict": r["model"].state_dict(), "info": info}, path)
    return r["model"].eval(), {**info, "cached": False}


def _lm_qkv(model, corpus, cfg):
    """Captured (q, k, v) of every layer on evaluation windows, each (layers, windows,
    heads, T, dh), and calibration (q, k) from the other windows, (layers, calib, heads, T,
    dh). The ``windows + calib`` windows are evenly spaced over the validation text; the
    evaluation windows are spread among them."""
    import torch

    from ._tiny_transformer import _windows, capture_qkv

    T = cfg.lm_context
    n = cfg.lm_windows + cfg.lm_calib_windows
    starts = np.linspace(0, corpus.valid.size - T - 1, n).round().astype(np.int64)
    ids = _windows(corpus.valid, starts, T)  # (n, T)
    with torch.no_grad(), capture_qkv(model) as store:
        model(ids)
    q, k, v = (torch.stack([layer[0][i] for layer in store]) for i in range(3))
    # (layers, n, H, T, dh): windows 0, n / w, 2 n / w, ... evaluate, the rest calibrate
    ev = torch.arange(cfg.lm_windows) * (n // cfg.lm_windows)
    cal = torch.tensor([i for i in range(n) if i not in set(ev.tolist())])
    return q[:, ev], k[:, ev], v[:, ev], q[:, cal], k[:, cal]


def _calibration_moments(qc, kc, batch_dims):
    """Moments of the calibration batch averaged over its batch axis ``batch_dims``,
    broadcastable to the evaluation batch."""
    from kernelkit.attention import Moments, attention_moments

    m = attention_moments(qc, kc)
    return Moments(
        *(
            t.mean(dim=batch_dims, keepdim=True)
            for t in (m.mean_x, m.second_x, m.mean_y, m.second_y)
        )
    )


# ----------------------------------------------------------------------------- errors
def _rel_err(approx, exact):
    """Relative Frobenius error over the last two dims, per instance: (...,)."""
    import torch

    num = torch.linalg.matrix_norm(approx.double() - exact.double())
    return num / torch.linalg.matrix_norm(exact.double())


def compute_errors(
    q, k, v, maps, Ms, n_draws, causal, calib=None, seed=0, matrix_L=None, progress=None
):
    """Mean relative errors of every map and M on one set of inputs.

    Parameters
    ----------
    q, k, v : tensors (..., L, d)
    maps : sequence of feature-map names
    Ms : sequence of int
    n_draws : int
        Feature draws (``random_state = seed + draw``) averaged over.
    causal : bool
    calib : Moments, optional
        Fitted-map parameters in causal mode (required there).
    matrix_L : int, optional
        Also the attention-matrix error on the first ``matrix_L`` positions.

    Returns
    -------
    dict ``{map: {"output": [mean per M], "output_se": [...], "matrix": [...],
    "matrix_se": [...], "finite": bool, "error": str (if the map refused)}}``; standard
    errors over the draws (the instances of one draw share the features).
    """
    import torch

    from kernelkit.attention import FITTED_MAPS, linear_attention
    from kernelkit.kernels import softmax_attention

    from ._tiny_transformer import BIDIRECTIONAL_ONLY, masked_causal_attention

    def attend(qq, kk, vv, fm, M, rs, kw):
        if causal and fm in BIDIRECTIONAL_ONLY:  # no causal scan: exact masked O(L^2) form
            return masked_causal_attention(qq, kk, vv, fm, M, rs)
        return linear_attention(qq, kk, vv, fm, M, random_state=rs, **kw)

    exact = softmax_attention(q, k, v, is_causal=causal)  # (..., L, e)
    eye = None
    if matrix_L:
        Lm = min(matrix_L, q.shape[-2])
        qm, km = q[..., :Lm, :], k[..., :Lm, :]
        eye = torch.eye(Lm, dtype=q.dtype).expand(*q.shape[:-2], Lm, Lm)
        exact_mat = softmax_attention(qm, km, eye, is_causal=causal)  # (..., Lm, Lm)
    out = {}
    for fm in maps:
        kw = {"is_causal": causal}
        if causal and fm in FITTED_MAPS:
            kw["moments"] = calib
        draws = 1 if fm in DETERMINISTIC else n_draws
        res = {"output": [], "output_se": [], "matrix": [], "matrix_se": [], "finite": True}
        done = 0
        try:
            for M in Ms:
                eo, em = [], []
                for r in range(draws):
                    with torch.no_grad():
                        y = attend(q, k, v, fm, M, seed + r, kw)
                        e = _rel_err(y, exact)
                        if eye is not None:
                            a = attend(qm, km, eye, fm, M, seed + r, kw)
                            em.append(float(_rel_err(a, exact_mat).mean()))
                    res["finite"] &= bool(torch.isfinite(e).all())
                    eo.append(float(e.mean()))
                for key, vals in (("output", eo), ("matrix", em)):
                    if vals:
                        arr = np.asarray(vals)
                        res[key].append(float(arr.mean()))
                        res[key + "_se"].append(
                            float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
                        )
                done += 1
                if progress is not None:
                    progress.update(1)
        except ValueError as exc:  # e.g. a fitted map in causal mode without moments
            res = {"error": str(exc)}
            if progress is not None:
                progress.update(len(Ms) - done)
        out[fm] = res
    return out


def _slope(Ms, errs):
    """Least-squares slope of log(error) vs log(M) (-1/2 for a Monte Carlo rate)."""
    e = np.asarray(errs, dtype=float)
    if e.size < 2 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        return float("nan")
    return float(np.polyfit(np.log(np.asarray(Ms, float)), np.log(e), 1)[0])


# ----------------------------------------------------------------------------- plots
def _plot(results, cfg, metric):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = [r for r in cfg.regimes if r in results]
    fig, axes = plt.subplots(
        len(regimes),
        len(cfg.modes),
        squeeze=False,
        figsize=(5.2 * len(cfg.modes), 3.6 * len(regimes)),
    )
    cmap = plt.get_cmap("tab10")
    for i, reg in enumerate(regimes):
        for j, mode in enumerate(cfg.modes):
            ax = axes[i, j]
            per = results[reg][mode]
            for c, fm in enumerate(cfg.maps):
                r = per.get(fm, {})
                vals = np.asarray(r.get(metric, []), dtype=float)
                if vals.size != len(cfg.Ms):
                    continue
                vals = np.where(np.isfinite(vals) & (vals > 0), vals, np.nan)
                style = "--" if fm in DETERMINISTIC else "-o"
                lw = 2.0 if fm in ("sderf", "saderf", "gerf", "positive") else 1.1
                ax.plot(cfg.Ms, vals, style, color=cmap(c), lw=lw, ms=3, label=MAPS[fm])
            # the signed maps (trig, hybrid) can be orders of magnitude off: keep the axis
            # on the positive maps and name what leaves it
            core = [
                v
                for fm, r in per.items()
                if fm not in ("trig", "hybrid_angular") and "error" not in r
                for v in r.get(metric, [])
                if np.isfinite(v) and v > 0
            ]
            if core:
                top = 4.0 * max(core)
                ax.set_ylim(min(core) / 2.0, top)
                off = [
                    MAPS[fm]
                    for fm, r in per.items()
                    if "error" not in r
                    and any(v > top for v in r.get(metric, []) if np.isfinite(v))
                ]
                if off:
                    ax.text(
                        0.02,
                        0.97,
                        "off-scale: " + ", ".join(off),
                        transform=ax.transAxes,
                        va="top",
                        fontsize=7,
                        color="dimgrey",
                    )
            ref = per.get("positive", {}).get(metric)
            if ref and np.isfinite(ref[0]) and ref[0] > 0:
                ax.plot(
                    cfg.Ms,
                    ref[0] * (np.asarray(cfg.Ms) / cfg.Ms[0]) ** -0.5,
                    ":",
                    color="grey",
                    label="∝ M^-1/2",
                )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{reg}, {mode}", fontsize=10)
            ax.set_xlabel("M (random features)")
            ax.set_ylabel("mean relative L2 error")
            ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    for ax in axes.flat:  # the causal panel lacks trig / hybrid: collect all labels
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8, bbox_to_anchor=(0.5, -0.01))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


# ----------------------------------------------------------------------------- run
def run(
    out_dir, quick: bool = False, seed: int = 0, config: Config | None = None, **overrides
) -> dict:
    """Compute the errors and write ``report.md``, ``output_error.png``,
    ``matrix_error.png`` and ``results.json`` (plus the cached ``lm_checkpoint.pt``).

    Parameters
    ----------
    out_dir : path
    quick : bool
        :data:`QUICK` (L = 256, 2 draws, LM trained 60 steps) instead of :data:`FULL`.
    seed : int
    config : Config, optional
        Overrides the quick / full configuration; ``overrides`` replace single fields.
    """
    from tqdm.auto import tqdm

    from ._tiny_transformer import num_threads, torch_threads
    from .datasets._text import load_text_corpus

    cfg = replace(config or (QUICK if quick else FULL), **overrides)
    bad = [m for m in cfg.maps if m not in MAPS] + [r for r in cfg.regimes if r not in REGIMES]
    bad += [m for m in cfg.modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown maps / regimes / modes {bad}.")
    rep = Report(
        out_dir, NAME, quick=quick, title="Linear attention vs exact softmax attention: error vs M"
    )
    out_dir = Path(out_dir)
    threads = num_threads()
    results, lm_info, shapes = {}, None, {}
    n_units = len(cfg.regimes) * len(cfg.modes) * len(cfg.maps) * len(cfg.Ms)
    with torch_threads(threads), tqdm(total=n_units, desc=NAME, leave=False) as bar:
        for r_i, regime in enumerate(cfg.regimes):
            if regime == "lm":
                corpus = load_text_corpus(cfg.lm_corpus)
                model, lm_info = _lm_checkpoint(cfg, seed, out_dir, corpus)
                q, k, v, qc, kc = _lm_qkv(model, corpus, cfg)
                # (layers, windows, H, T, dh) -> instances (layers * windows, H, T, dh)
                q, k, v = (t.flatten(0, 1).contiguous() for t in (q, k, v))
                calib = _calibration_moments(qc, kc, 1)  # (layers, 1, H, ...)
                calib = type(calib)(
                    *(
                        t.flatten(0, 1)
                        for t in (calib.mean_x, calib.second_x, calib.mean_y, calib.second_y)
                    )
                )
                # calibration moments per (layer, head); expand over the windows
                calib = type(calib)(
                    *(
                        t.repeat_interleave(cfg.lm_windows, dim=0)
                        for t in (calib.mean_x, calib.second_x, calib.mean_y, calib.second_y)
                    )
                )
                L_mat = min(cfg.L_mat, cfg.lm_context)
            else:
                q, k, v, qc, kc = _random_qkv(regime, cfg, cfg.L_out, seed * 1000 + r_i)
                calib = _calibration_moments(qc, kc, 0)
                L_mat = cfg.L_mat
            shapes[regime] = {"q": list(q.shape), "matrix_L": L_mat}
            results[regime] = {}
            for mode in cfg.modes:
                bar.set_postfix_str(f"{regime}, {mode}")
                results[regime][mode] = compute_errors(
                    q,
                    k,
                    v,
                    cfg.maps,
                    cfg.Ms,
                    cfg.n_draws,
                    mode == "causal",
                    calib,
                    seed=seed,
                    matrix_L=L_mat,
                    progress=bar,
                )
    _write(rep, cfg, results, lm_info, shapes, seed, threads)
    return rep.results


def _write(rep, cfg, results, lm_info, shapes, seed, threads):
    Ms = list(cfg.Ms)
    rep.add(
        "## Setup",
        f"M ∈ {{{', '.join(map(str, Ms))}}}; {cfg.n_draws} feature draws (random_state "
        f"{seed}..{seed + cfg.n_draws - 1}, block-orthogonal projections) per point; error = "
        "relative Frobenius error of one (batch element, head) instance, averaged over "
        "instances and draws (± one standard error over the draws in `results.json`). "
        "Exact reference: `kernelkit.kernels.softmax_attention` (scale 1/√d). The "
        "attention-matrix error passes v = I_L, so the approximate output is the "
        "row-normalised matrix itself.",
        "**Regimes.**\n\n"
        + "\n".join(
            f"- `{reg}`: q shape {shapes[reg]['q']} (instances, heads, L, d); matrix "
            f"error at L = {shapes[reg]['matrix_L']}"
            + {
                "normal": "; x = q d^-1/4, y = k d^-1/4 ~ N(0, 0.25² I) (paper's normal "
                "regime at σ = 0.25; logits of std 0.5), v ~ N(0, 1).",
                "heterogen": "; as normal but y ~ N(0.25·1, 0.25² I) (paper's heterogen "
                "regime; exact attention distributed as for normal, key norms "
                "larger).",
                "unit": "; q, k, v with N(0, 1) entries (σ = d^-1/4: logits of unit "
                "variance, |x|² ≈ 8).",
                "lm": "; queries/keys/values of every layer and head of the tiny "
                "exact-attention LM on validation windows.",
            }[reg]
            for reg in results
        ),
        "**Causal mode.** FAVOR++/FAVOR# parameters come from the moments of an "
        "independent calibration batch of the same regime (random: a fresh draw; lm: "
        f"{cfg.lm_calib_windows} other validation windows, per layer and head), because a "
        "causal fit on the sequence itself would leak later tokens. Trig and the angular "
        "hybrid have no causal scan in `kernelkit.attention` (signed features): their "
        "causal estimator is computed exactly from the bidirectional attention matrix "
        "(values = identity), masked to j ≤ t and renormalised per row (O(L²)).",
    )
    if lm_info is not None:
        rep.add(
            f"**Tiny LM** (`lm` regime): corpus `{cfg.lm_corpus}`, {cfg.lm_layers} layers, "
            f"d_model {cfg.lm_d_model}, {cfg.lm_heads} heads (head dim "
            f"{cfg.lm_d_model // cfg.lm_heads}), context {cfg.lm_context}, trained "
            f"{cfg.lm_steps} steps x batch {cfg.lm_batch} with exact attention: training "
            f"loss {lm_info['first_train_bits']:.2f} -> {lm_info['final_train_bits']:.2f} "
            f"bits, validation {lm_info['valid_bpc']:.3f} bpc"
            + (
                " (checkpoint reused from this output directory)."
                if lm_info["cached"]
                else " (checkpoint cached as `lm_checkpoint.pt`)."
            )
        )
    rep.figure(
        _plot(results, cfg, "output"),
        "output_error.png",
        "Mean relative L2 error of the attention output vs M (log-log); dashed: "
        "ReLU / ELU+1 linear attention (no random features, not softmax "
        "estimators); dotted: M^-1/2 through FAVOR+ at the smallest M. Trig and the "
        "hybrid leave the axis where named (values in the tables).",
    )
    rep.figure(
        _plot(results, cfg, "matrix"),
        "matrix_error.png",
        "Mean relative Frobenius error of the attention matrix vs M (small L).",
    )

    # ---- tables at the largest and smallest M
    for metric, title in (("output", "output"), ("matrix", "attention matrix")):
        for mi in (len(Ms) - 1, 0):
            header = ["feature map"] + [
                f"{reg} {mode[:5]}" for reg in results for mode in cfg.modes
            ]
            rows = []
            for fm in cfg.maps:
                row = [MAPS[fm]]
                for reg in results:
                    for mode in cfg.modes:
                        r = results[reg][mode][fm]
                        row.append("n/a" if "error" in r else _fmt(r[metric][mi]))
                rows.append(row)
            best = _best_row(results, cfg, metric, mi)
            rows.append(["**best**", *best])
            rep.add(f"### Relative {title} error at M = {Ms[mi]}", markdown_table(header, rows))
    # ---- slopes
    rows = []
    slopes = {}
    for fm in cfg.maps:
        if fm in DETERMINISTIC:
            continue
        row = [MAPS[fm]]
        for reg in results:
            for mode in cfg.modes:
                r = results[reg][mode][fm]
                s = float("nan") if "error" in r else _slope(Ms, r["output"])
                slopes.setdefault(fm, {}).setdefault(reg, {})[mode] = s
                row.append("n/a" if "error" in r else f"{s:.2f}")
        rows.append(row)
    rep.add(
        "### Convergence rate",
        "Least-squares slope of log(output error) vs log M (Monte Carlo rate: −0.5; a "
        "flatter slope means a bias or heavy tails dominate at these M).",
        markdown_table(
            ["feature map"] + [f"{reg} {mode[:5]}" for reg in results for mode in cfg.modes], rows
        ),
    )

    claims = _claims(results, cfg, slopes)
    rep.add(
        "## Paper vs ours",
        markdown_table(
            ["claim", "paper / note", "ours", "holds on our data?"],
            [[c["claim"], c["paper"], c["ours"], c["holds"]] for c in claims],
        ),
    )
    rep.add("## Which maps win", _discussion(results, cfg))
    rep.add(
        "## Deviations from the paper's protocol",
        "- The paper compares the *variance of kernel estimates* (Sec. 5.1, one feature, "
        "closed form) and downstream accuracy; it has no attention-output error vs M plot. "
        "We measure the error of the normalised attention output and matrix, which is what "
        "a Transformer sees; the ordering claims are compared, not the numbers.\n"
        "- One σ (0.25) per synthetic regime instead of the paper's sweep 0.1 ≤ σ ≤ 1 "
        "(`favor-variance` sweeps σ); `mnist` / `cifar10` regimes are replaced by queries "
        "and keys of a trained model (`lm`), the structured data that matters for attention.\n"
        f"- Few draws ({cfg.n_draws}) and instances; one seed. ReLU / ELU+1 do not "
        "depend on M (not estimators of softmax attention) and are shown for scale.\n"
        "- Causal FAVOR++/FAVOR# use calibration moments (see Setup); the paper does not "
        "treat causal attention.",
    )
    if rep.quick:
        rep.add(
            f"**Quick mode**: L = {cfg.L_out}, {cfg.n_draws} draws, no `unit` regime and "
            "a briefly trained LM: errors are noisy, orderings between close maps may "
            "flip."
        )
    rep.results.update(
        {
            "config": asdict(cfg),
            "seed": seed,
            "threads": threads,
            "lm": lm_info,
            "shapes": shapes,
            "errors": results,
            "slopes": slopes,
            "claims": claims,
        }
    )
    rep.write()


def _fmt(x):
    return "nan" if not np.isfinite(x) else (f"{x:.3g}" if x < 100 else f"{x:.2e}")


def _best_row(results, cfg, metric, mi):
    best = []
    for reg in results:
        for mode in cfg.modes:
            cands = {
                fm: r[metric][mi]
                for fm, r in results[reg][mode].items()
                if "error" not in r and fm not in DETERMINISTIC and np.isfinite(r[metric][mi])
            }
            best.append(MAPS[min(cands, key=cands.get)] if cands else "n/a")
    return best


def _claims(results, cfg, slopes):
    def compare(a, b, metric="output", modes=("bidirectional",)):
        """How many (regime, mode, M) points have error(a) <= error(b)."""
        wins = total = 0
        for reg in results:
            for mode in modes:
                if mode not in results[reg]:
                    continue
                ra, rb = results[reg][mode].get(a, {}), results[reg][mode].get(b, {})
                if "error" in ra or "error" in rb or not ra or not rb:
                    continue
                for x, y in zip(ra[metric], rb[metric], strict=True):
                    total += 1
                    wins += bool(x <= y)
        return wins, total

    def verdict(w, t):
        if t == 0:
            return "n/a"
        return "yes" if w >= 0.8 * t else ("partly" if w >= 0.5 * t else "no")

    claims = []

    def add(claim, paper, a, b, modes=("bidirectional",)):
        w, t = compare(a, b, modes=modes)
        claims.append(
            {
                "claim": claim,
                "paper": paper,
                "ours": f"{w}/{t} (regime, M) points",
                "holds": verdict(w, t),
            }
        )

    add(
        "FAVOR# SDERF error <= FAVOR++ (GERF)",
        "Sec. 5.1: SDERF outperforms or matches all methods everywhere; ≈e^5 lower variance "
        "than GERF on heterogen / MNIST",
        "sderf",
        "gerf",
    )
    add("FAVOR# SDERF error <= FAVOR+ (positive)", "Sec. 5.1, Fig. 1-2", "sderf", "positive")
    add(
        "FAVOR++ (GERF) error <= FAVOR+ (positive)",
        "PosRF ⊂ GERF, A fitted (Sec. 3.1); FAVOR++ beats FAVOR+ on GLUE (Table 1)",
        "gerf",
        "positive",
    )
    add("FAVOR# SADERF error <= FAVOR++ (GERF)", "GERF ⊂ SADERF (Sec. 4.3)", "saderf", "gerf")
    add("FAVOR# ADERF error <= FAVOR# SADERF", "SADERF ⊂ ADERF (Fig. 1 top)", "aderf", "saderf")
    add(
        "causal: FAVOR# SDERF error <= FAVOR+ (calibration moments)",
        "not covered by the paper (kernelkit's extrapolation)",
        "sderf",
        "positive",
        modes=("causal",),
    )
    add(
        "hybrid (angular) error <= FAVOR+ (positive)",
        "Hybrid RF paper: hybrids beat positive and trig estimators pointwise",
        "hybrid_angular",
        "positive",
    )
    add(
        "FAVOR+ (positive) error <= Trig",
        "Performer: trig features are not positive, unsuitable for the attention normaliser",
        "positive",
        "trig",
    )
    s = [v for reg in slopes.get("positive", {}).values() for v in reg.values() if np.isfinite(v)]
    ok = [abs(x + 0.5) <= 0.15 for x in s]
    claims.append(
        {
            "claim": "FAVOR+ output error ∝ M^-1/2",
            "paper": "Monte Carlo rate",
            "ours": "slopes " + ", ".join(f"{x:.2f}" for x in s),
            "holds": "n/a" if not s else ("yes" if all(ok) else ("partly" if any(ok) else "no")),
        }
    )
    return claims


def _rf_errors(results, mode, mi):
    """{regime: {map: output error at M index mi}} for the random-feature maps."""
    return {
        reg: {
            fm: r["output"][mi]
            for fm, r in results[reg][mode].items()
            if "error" not in r and fm not in DETERMINISTIC
        }
        for reg in results
    }


def _reading(results, cfg):
    """Data-driven reading of the tables, related to the FAVOR# claims."""
    Ms = list(cfg.Ms)
    out = []
    bi = _rf_errors(results, "bidirectional", -1)
    hard = [
        reg for reg, e in bi.items() if e and min(v for v in e.values() if np.isfinite(v)) > 1.0
    ]
    if hard:
        out.append(
            f"- **No random-feature map is accurate on {', '.join(f'`{r}`' for r in hard)} at "
            f"M = {Ms[-1]}**: every map's relative output error exceeds 1 (the exact output "
            "is small there -- nearly uniform attention averages the values -- and the "
            "log-normal feature weights at |x|² of 4-8 are so heavy-tailed that the error "
            "falls far slower than M^-1/2; see the slopes). ReLU / ELU+1, although biased, are "
            "closer to softmax attention there."
        )
    for reg, e in bi.items():
        e = {k: v for k, v in e.items() if np.isfinite(v)}
        if not e or "positive" not in e:
            continue
        best = min(e, key=e.get)
        fitted = {k: e[k] for k in ("gerf", "saderf", "aderf", "sderf") if k in e}
        if best in fitted:
            out.append(
                f"- `{reg}`: the best map is {MAPS[best]} ({_fmt(e[best])}, "
                f"{e[best] / e['positive']:.2f}x FAVOR+'s error at M = {Ms[-1]})."
            )
        else:
            out.append(
                f"- `{reg}`: {MAPS[best]} is best ({_fmt(e[best])}); the fitted maps "
                "do not improve on it."
            )
    lm = {k: v for k, v in bi.get("lm", {}).items() if np.isfinite(v)}
    if "sderf" in lm and "positive" in lm:
        others = {k: v for k, v in lm.items() if k not in ("sderf", "positive")}
        nxt = min(others, key=others.get) if others else None
        verdict = "the best map" if lm["sderf"] <= min(lm.values()) else "not the best map"
        out.append(
            f"- On queries and keys of the trained model (`lm`), SDERF is {verdict}: "
            f"{lm['sderf'] / lm['positive']:.2f}x FAVOR+'s error"
            + (f" (next: {MAPS[nxt]}, {others[nxt] / lm['positive']:.2f}x)" if nxt else "")
            + ". SDERF adapts to the full second-moment matrix of q and k (its eigenbasis), "
            "which is anisotropic in a trained model; GERF fits one scalar, SADERF / ADERF "
            "rescale the two sides against each other. The paper finds SDERF best in "
            "Sec. 5.1 and uses it for speech."
        )
    out.append(
        "- Relation to the paper: the fitted maps minimise objective (14), the mean log "
        "*second moment of the kernel estimates* over query-key pairs, which orders them "
        "PosRF ≥ GERF ≥ SADERF ≥ ADERF and GERF ≥ SDERF exactly (checked in "
        "`favor-variance`). The error of the *normalised* attention output is a different "
        "quantity (a ratio of two correlated estimates, weighted by the values), so the "
        "ordering need not carry over, and the table above shows where it does not "
        "(e.g. GERF vs FAVOR+). The paper's large gains (≈e^5 in variance on heterogen / "
        "MNIST) are gains in log-variance of single kernel values at M = 1; in the "
        "normalised output they appear as the factors listed above."
    )
    out.append(
        "- Trig and the angular hybrid have signed features, so the attention normaliser "
        "Σ_j P_i·S_j can approach zero: their output errors are orders of magnitude larger "
        "(the hybrid, at equal output dimension 4m(n+1) ≤ M, also has only m = M/36 "
        "projections). ReLU / ELU+1 are different kernels whose error no M removes."
    )
    return out


def _discussion(results, cfg):
    Ms = list(cfg.Ms)
    lines = []
    for reg in results:
        for mode in cfg.modes:
            per = results[reg][mode]
            at = {
                fm: r["output"][-1]
                for fm, r in per.items()
                if "error" not in r and fm not in DETERMINISTIC and np.isfinite(r["output"][-1])
            }
            if not at:
                continue
            order = sorted(at, key=at.get)
            ref = at.get("positive")
            rel = f"; {MAPS[order[0]]} at {at[order[0]] / ref:.2f}x FAVOR+'s error" if ref else ""
            lines.append(
                f"- `{reg}`, {mode}, M = {Ms[-1]}: "
                + " < ".join(f"{MAPS[fm]} {_fmt(at[fm])}" for fm in order[:4])
                + (" < ..." if len(order) > 4 else "")
                + rel
                + "."
            )
    lines.append("")
    lines += _reading(results, cfg)
    return "\n".join(lines)
