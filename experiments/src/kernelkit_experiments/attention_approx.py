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
  ``y = k d^{-1/4}`` i.i.d. N(0, sigma^2 I), sigma = 0.25, d = 64; values N(0, 1);
* ``heterogen``: the paper's "heterogen" regime: as ``normal`` but ``y ~ N(sigma 1,
  sigma^2 I)`` (exact attention distributed as for ``normal``; larger key norms);
* ``unit`` (full run): q, k with i.i.d. N(0, 1) entries (sigma = d^{-1/4}, logits of unit
  variance): a hard case for every random-feature map;
* ``lm``: queries, keys and values captured from every layer and head of the small
  character-level Transformer of ``tiny-lm``, trained once per process with exact
  attention, on validation windows at a random offset per seed.

Modes: bidirectional (FAVOR++/FAVOR# parameters fitted per instance) and causal (the
fitted maps take their parameters from the moments of an independent calibration batch
of the same regime; trig and the hybrids use the exact masked O(L^2) form).

The angular hybrid (HRF paper eq. 12, 19, ``n = 8`` sign projections) gets ``m = M / 8``
base projections (``m n = M``, output dimension ``4 m (n + 1) = 4.5 M``), the budget of
the HRF paper's comparisons, which match hybrids to regular maps by the cost of
computing the features rather than by output dimension. The named variant
``hybrid_dim`` is the equal-output-dimension matching (``m = M / 36``,
:func:`kernelkit.attention.hybrid_base_size`, ``linear_attention``'s default).

Declared as a :class:`~kernelkit_experiments._harness.Spec`: one seed is fresh random
inputs, fresh LM windows and ``n_draws`` fresh feature draws.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import _harness as H
from ._report import markdown_table

__all__ = [
    "DESCRIPTION",
    "FULL",
    "MAPS",
    "NAME",
    "QUICK",
    "SPEC",
    "Config",
    "compute",
    "compute_errors",
    "run",
]

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
    "hybrid_angular": "hybrid (m = M/8)",
    "hybrid_dim": "hybrid (m = M/36)",
}
DETERMINISTIC = ("relu", "elu")  # no random features: not softmax estimators
HYBRIDS = ("hybrid_angular", "hybrid_dim")
#: plot families (at most six series a panel)
FAMILIES = {
    "FAVOR maps": ("positive", "gerf", "saderf", "aderf", "sderf", "hyperbolic"),
    "other maps": ("positive", "trig", "hybrid_angular", "hybrid_dim", "relu", "elu"),
}
REGIMES = ("normal", "heterogen", "unit", "lm")
#: random regimes: (sigma at kernel scale or None for d^{-1/4}, key mean in units of sigma)
RANDOM_REGIMES = {"normal": (0.25, 0.0), "heterogen": (0.25, 1.0), "unit": (None, 0.0)}
MODES = ("bidirectional", "causal")
#: sign projections n of the hybrid's coefficient
HYBRID_SIGNS = 8


@dataclass(frozen=True)
class Config:
    Ms: tuple = (16, 32, 64, 128, 256)
    d: int = 64  # head dimension of the random regimes
    L_out: int = 1024  # sequence length for the output error (random regimes)
    L_mat: int = 256  # sequence length for the attention-matrix error
    batch: int = 2
    heads: int = 4
    n_draws: int = 2  # feature draws (random_state) per seed and configuration
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
    Ms=(16, 64, 256),
    L_out=128,
    L_mat=64,
    batch=1,
    heads=2,
    n_draws=1,
    regimes=("normal", "heterogen", "lm"),
    lm_context=64,
    lm_d_model=64,
    lm_heads=4,
    lm_layers=2,
    lm_steps=60,
    lm_batch=8,
    lm_windows=1,
    lm_calib_windows=4,
)


def _check(cfg: Config) -> None:
    bad = [m for m in cfg.maps if m not in MAPS] + [r for r in cfg.regimes if r not in REGIMES]
    bad += [m for m in cfg.modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown maps / regimes / modes {bad}.")
    if cfg.n_draws < 1 or not cfg.Ms:
        raise ValueError("n_draws must be >= 1 and Ms non-empty.")


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


_LM_CACHE: dict = {}


def _lm_model(cfg, seed):
    """The exact-attention tiny LM of ``cfg`` trained with ``seed`` (once per process);
    returns (model, corpus, info)."""
    from ._tiny_transformer import LMConfig, TrainConfig, train_lm
    from .datasets._text import load_text_corpus

    corpus = load_text_corpus(cfg.lm_corpus)
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
    key = (repr(asdict(lm)), repr(asdict(tc)), seed, corpus.sha256)
    if key not in _LM_CACHE:
        r = train_lm(lm, tc, corpus.train, corpus.valid, seed=seed, progress=None)
        info = {"valid_bpc": r["valid_bpc"], "first_train_bits": r["curve"][0][1]}
        _LM_CACHE.clear()  # one model at a time
        _LM_CACHE[key] = (r["model"].eval(), corpus, info | {"final_train_bits": r["curve"][-1][1]})
    return _LM_CACHE[key]


def _lm_qkv(model, corpus, cfg, seed):
    """Captured (q, k, v) of every layer on evaluation windows, each (layers, windows,
    heads, T, dh), and calibration (q, k) from the other windows, (layers, calib, heads, T,
    dh). The ``windows + calib`` windows are evenly spaced over the validation text from
    a random offset of the seed; the evaluation windows are spread among them."""
    import torch

    from ._tiny_transformer import _windows, capture_qkv

    T = cfg.lm_context
    n = cfg.lm_windows + cfg.lm_calib_windows
    hi = corpus.valid.size - T - 1
    starts = np.linspace(0, hi, n + 1)[:-1].round().astype(np.int64)
    starts += np.random.default_rng([seed, 7]).integers(0, max(1, hi // n))  # per seed
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


def _inputs(cfg, regime, seed):
    """(q, k, v) (instances, heads, L, d), calibration moments and the matrix-error L of
    one regime and seed; the LM's info (or None)."""
    if regime != "lm":
        q, k, v, qc, kc = _random_qkv(regime, cfg, cfg.L_out, seed * 10 + REGIMES.index(regime))
        return q, k, v, _calibration_moments(qc, kc, 0), cfg.L_mat, None
    model, corpus, info = _lm_model(cfg, seed // 1000)
    q, k, v, qc, kc = _lm_qkv(model, corpus, cfg, seed)
    # (layers, windows, H, T, dh) -> instances (layers * windows, H, T, dh)
    q, k, v = (t.flatten(0, 1).contiguous() for t in (q, k, v))
    m = _calibration_moments(qc, kc, 1)  # (layers, 1, H, ...): per (layer, head)
    m = type(m)(
        *(
            t.flatten(0, 1).repeat_interleave(cfg.lm_windows, dim=0)
            for t in (m.mean_x, m.second_x, m.mean_y, m.second_y)
        )
    )
    return q, k, v, m, min(cfg.L_mat, cfg.lm_context), info


# ----------------------------------------------------------------------------- errors
def _rel_err(approx, exact):
    """Relative Frobenius error over the last two dims, per instance: (...,)."""
    import torch

    num = torch.linalg.matrix_norm(approx.double() - exact.double())
    return num / torch.linalg.matrix_norm(exact.double())


def _hybrid_projection(M, d, seed):
    """The ``m = M / 8`` hybrid's projections ``{"W": (m, d), "T": (8, d)}``, drawn in the
    order of :func:`kernelkit.attention.draw_features` (block-orthogonal ``W``)."""
    from kernelkit.features import draw_projection

    rng = np.random.default_rng(seed)
    W = draw_projection(max(1, M // 8), d, rng, sampler="orthogonal")
    return {"W": W, "T": rng.standard_normal((HYBRID_SIGNS, d))}


def _attend(q, k, v, fm, M, rs, causal, calib):
    """One estimate of (causal) softmax attention with map ``fm`` (M features, seed rs)."""
    from kernelkit.attention import FITTED_MAPS, linear_attention

    from ._tiny_transformer import masked_causal_attention

    name, kw = ("hybrid_angular" if fm in HYBRIDS else fm), {}
    if fm == "hybrid_angular":  # m = M / 8 (the default hybrid_dim: m = M / 36)
        kw["projection"] = _hybrid_projection(M, q.shape[-1], rs)
    if causal and name in ("trig", "hybrid_angular"):  # no causal scan: masked O(L^2) form
        return masked_causal_attention(q, k, v, name, M, rs, **kw)
    if causal and fm in FITTED_MAPS:
        kw["moments"] = calib
    return linear_attention(q, k, v, name, M, random_state=rs, is_causal=causal, **kw)


def _mean_se(vals):
    a = np.asarray(vals, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0


def compute_errors(q, k, v, maps, Ms, n_draws, causal, calib=None, seed=0, matrix_L=None):
    """Mean relative errors of every map and M on one set of inputs.

    q, k, v : tensors (..., L, d); ``n_draws`` feature draws (``random_state = seed +
    draw``) averaged over; ``calib``: the fitted maps' moments in causal mode (required
    there); ``matrix_L``: also the attention-matrix error on the first ``matrix_L``
    positions. Returns ``{map: {"output": [mean per M], "output_se": [...], "matrix":
    [...], "matrix_se": [...], "matrix_neg": [...], "matrix_max": [...], "finite":
    bool}}`` or ``{map: {"error": str}}`` where the map refused; standard errors over the
    draws; ``matrix_neg``: the share of negative entries of the estimated attention matrix
    and ``matrix_max`` its largest ``|entry|`` (both 0 <= ... <= 1 for softmax weights),
    means over the draws.
    """
    import torch

    from kernelkit.kernels import softmax_attention

    exact = softmax_attention(q, k, v, is_causal=causal)  # (..., L, e)
    if matrix_L:
        Lm = min(matrix_L, q.shape[-2])
        qm, km = q[..., :Lm, :], k[..., :Lm, :]
        eye = torch.eye(Lm, dtype=q.dtype).expand(*q.shape[:-2], Lm, Lm)
        exact_mat = softmax_attention(qm, km, eye, is_causal=causal)  # (..., Lm, Lm)
    out = {}
    for fm in maps:
        draws = 1 if fm in DETERMINISTIC else n_draws
        res = {"output": [], "output_se": [], "matrix": [], "matrix_se": [], "finite": True}
        res |= {"matrix_neg": [], "matrix_max": []}
        try:
            for M in Ms:
                eo, em, neg, big = [], [], [], []
                for r in range(draws):
                    with torch.no_grad():
                        e = _rel_err(_attend(q, k, v, fm, M, seed + r, causal, calib), exact)
                        if matrix_L:
                            a = _attend(qm, km, eye, fm, M, seed + r, causal, calib)
                            em.append(float(_rel_err(a, exact_mat).mean()))
                            neg.append(float((a < 0).double().mean()))
                            big.append(float(a.abs().amax()))
                    res["finite"] &= bool(torch.isfinite(e).all())
                    eo.append(float(e.mean()))
                for key, vals in (("output", eo), ("matrix", em)):
                    if vals:
                        mean, se = _mean_se(vals)
                        res[key].append(mean)
                        res[key + "_se"].append(se)
                if neg:
                    res["matrix_neg"].append(float(np.mean(neg)))
                    res["matrix_max"].append(float(np.mean(big)))
        except ValueError as exc:  # e.g. a fitted map in causal mode without moments
            res = {"error": str(exc)}
        out[fm] = res
    return out


def _slope(Ms, errs):
    """Least-squares slope of log(error) vs log(M) (-1/2 for a Monte Carlo rate)."""
    e = np.asarray(errs, dtype=float)
    if e.size < 2 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        return float("nan")
    return float(np.polyfit(np.log(np.asarray(Ms, float)), np.log(e), 1)[0])


# ----------------------------------------------------------------------------- one seed
def compute(cfg: Config, seed: int) -> dict:
    """One seed: ``{"<output|matrix> <regime> <mode> <map>": (len(Ms),)}`` (NaN where a
    map refused) and the LM's ``"lm valid_bpc"``."""
    from ._tiny_transformer import num_threads, torch_threads

    out, nan = {}, np.full(len(cfg.Ms), np.nan)
    with torch_threads(num_threads()):
        for regime in cfg.regimes:
            q, k, v, calib, L_mat, info = _inputs(cfg, regime, seed)
            if info is not None:
                out["lm valid_bpc"] = info["valid_bpc"]
            for mode in cfg.modes:
                res = compute_errors(
                    q, k, v, cfg.maps, cfg.Ms, cfg.n_draws, mode == "causal", calib,
                    seed=seed * cfg.n_draws, matrix_L=L_mat,
                )  # fmt: skip
                for fm, r in res.items():
                    for metric in ("output", "matrix", "matrix_neg", "matrix_max"):
                        out[f"{metric} {regime} {mode} {fm}"] = np.asarray(r.get(metric, nan))
    return out


# ----------------------------------------------------------------------------- claims
EXTRAPOLATION = "kernelkit's own extrapolation"


def _lr(r, cfg, a, b, metric, modes):
    """log10(error of b / error of a), mean over (regime, mode, M): > 0 where a wins."""
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.concatenate(
            [
                np.log10(r[f"{metric} {reg} {mode} {b}"] / r[f"{metric} {reg} {mode} {a}"])
                for reg in cfg.regimes
                for mode in modes
            ]
        )
    return float(np.mean(v[np.isfinite(v)])) if np.isfinite(v).any() else math.nan


#: (a, b, claim text, paper, metric, modes): "a's error below b's"
_PAIRS = (
    ("sderf", "gerf", "", "FAVOR# Sec. 5.1: SDERF outperforms or matches all methods "
     "(variance of kernel estimates)", "output", ("bidirectional",)),
    ("sderf", "positive", "", "FAVOR# Sec. 5.1, Figs. 1-2", "output", ("bidirectional",)),
    ("gerf", "positive", "", "FAVOR++: PosRF is a special case of GERF, A fitted "
     "(FAVOR# Sec. 3.1)", "output", ("bidirectional",)),
    ("saderf", "gerf", "", "FAVOR# Sec. 4.3: GERF is a special case of SADERF", "output",
     ("bidirectional",)),
    ("aderf", "saderf", "", "FAVOR# Fig. 1: SADERF is a special case of ADERF", "output",
     ("bidirectional",)),
    ("sderf", "positive", "causal: ", f"{EXTRAPOLATION} (the paper has no causal "
     "attention; calibration moments)", "output", ("causal",)),
    ("hybrid_angular", "positive", "", "HRF Fig. 3: hybrids approximate the softmax "
     "matrix better than FAVOR+ (cost-matched)", "matrix", ("bidirectional",)),
    ("hybrid_angular", "positive", "output: ", f"{EXTRAPOLATION} (HRF Fig. 3 judges the "
     "matrix, not the attention output)", "output", ("bidirectional",)),
    ("positive", "trig", "", "Performer: trig features are not positive, unsuitable for "
     "the attention normaliser", "output", ("bidirectional",)),
)  # fmt: skip


def _claims(cfg: Config) -> list[H.Claim]:
    """Orderings of the maps (per seed: mean log10 error ratio over regimes and M)."""
    out = []
    for a, b, pre, paper, metric, modes in _PAIRS:
        if a not in cfg.maps or b not in cfg.maps or not set(modes) <= set(cfg.modes):
            continue
        out.append(
            H.Claim(
                f"{pre}{MAPS[a]} {metric} error < {MAPS[b]}",
                paper,
                f"log10({b} / {a} {metric} error), mean over regimes and M",
                lambda r, a=a, b=b, metric=metric, modes=modes: _lr(r, cfg, a, b, metric, modes),
            )
        )
    if "hybrid_dim" in cfg.maps and "positive" in cfg.maps:
        out.append(
            H.Claim(
                "Variant (equal-dimension hybrid, m = M/36): hybrid matrix error < FAVOR+",
                "HRF Fig. 3 (cost-matched there, not dimension-matched)",
                "log10(positive / hybrid_dim matrix error), mean over regimes and M",
                lambda r: _lr(r, cfg, "hybrid_dim", "positive", "matrix", ("bidirectional",)),
            )
        )
    if "positive" in cfg.maps and len(cfg.Ms) > 1:

        def rate(r):
            s = [_slope(cfg.Ms, r[f"output {reg} bidirectional positive"]) for reg in cfg.regimes]
            return abs(float(np.nanmean(s)) + 0.5)

        out.append(
            H.Claim(
                "FAVOR+ output error ∝ M^-1/2 (slope within 0.15 of -1/2)",
                f"{EXTRAPOLATION} (Monte Carlo rate of the kernel estimates)",
                "|slope of log error vs log M + 0.5|, mean slope over regimes",
                rate,
                op="<",
                threshold=0.15,
            )
        )
    return out


# ----------------------------------------------------------------------------- report
_REGIME_TEXT = {
    "normal": "x = q d^-1/4, y = k d^-1/4 ~ N(0, 0.25² I) (paper's normal regime at "
    "σ = 0.25; logits of std 0.5), v ~ N(0, 1)",
    "heterogen": "as normal but y ~ N(0.25·1, 0.25² I) (paper's heterogen regime; exact "
    "attention distributed as for normal, key norms larger)",
    "unit": "q, k, v with N(0, 1) entries (σ = d^-1/4: logits of unit variance)",
    "lm": "queries/keys/values of every layer and head of the tiny exact-attention LM on "
    "validation windows (a random offset per seed)",
}


def _setup(cfg: Config) -> str:
    lm = (
        f" Tiny LM (`lm`): corpus `{cfg.lm_corpus}`, {cfg.lm_layers} layers, d_model "
        f"{cfg.lm_d_model}, {cfg.lm_heads} heads, context {cfg.lm_context}, trained "
        f"{cfg.lm_steps} steps x batch {cfg.lm_batch} with exact attention (once per run; "
        f"validation bpc in the results), {cfg.lm_windows} evaluation and "
        f"{cfg.lm_calib_windows} calibration windows."
        if "lm" in cfg.regimes
        else ""
    )
    return (
        "## Setup\n\n"
        f"M ∈ {{{', '.join(map(str, cfg.Ms))}}}; per seed fresh inputs and {cfg.n_draws} "
        "feature draws (block-orthogonal projections); error = relative Frobenius error "
        "of one (batch element, head) instance, averaged over instances and draws. Exact "
        "reference: `kernelkit.kernels.softmax_attention` (scale 1/√d); the "
        "attention-matrix error passes v = I_L. Random regimes: d = "
        f"{cfg.d}, L = {cfg.L_out} (matrix: {cfg.L_mat}), {cfg.batch} x {cfg.heads} "
        "instances.\n\n"
        + "\n".join(f"- `{reg}`: {_REGIME_TEXT[reg]}." for reg in cfg.regimes)
        + "\n\n**Hybrid budget.** The angular hybrid (n = 8 sign projections) gets m = M/8 "
        "base projections (output dimension 4m(n+1) = 4.5 M): the HRF paper matches "
        "hybrids to the regular maps by the cost of computing the features, not by output "
        "dimension, and m = M/8 is the reading of that rule chosen here because it gives "
        "the hybrid as many random projections (m n = M) as FAVOR+. The equal-dimension "
        "matching (m = M/36, `linear_attention`'s default) is kept as a named variant. "
        "**Causal mode**: FAVOR++/FAVOR# parameters from the moments of an independent "
        "calibration batch of the same regime; trig and the hybrids via the exact masked "
        "O(L²) form of their bidirectional matrix." + lm
    )


def _cell(agg, key, j):
    if key not in agg or not np.isfinite(agg[key]["mean"][j]):
        return "n/a"
    return f"{agg[key]['mean'][j]:.3g} ± {agg[key]['sd'][j]:.2g}"


def _positivity(cfg: Config, runs: list, agg) -> str:
    """Why Trig and the hybrid lose to FAVOR+ on these errors: the share of negative
    weights and the largest |weight| of their estimated attention matrices."""
    cols = [(reg, "bidirectional") for reg in cfg.regimes]
    rows = []
    for fm in cfg.maps:
        cells = []
        for reg, mode in cols:
            neg, big = (agg.get(f"{m} {reg} {mode} {fm}") for m in ("matrix_neg", "matrix_max"))
            ok = neg is not None and np.size(neg["mean"]) and np.isfinite(neg["mean"][-1])
            cells.append(f"{100 * neg['mean'][-1]:.3g} % / {big['mean'][-1]:.3g}" if ok else "n/a")
        rows.append([MAPS[fm], *cells])
    return (
        "## Positivity: why Trig and the hybrids lose to FAVOR+ here\n\n"
        "Attention divides each row of estimated kernel values by its estimated sum (the "
        "normaliser). FAVOR+, FAVOR++ and FAVOR# are positive; Trig and the angular hybrid "
        "(through its trigonometric half) are not: a share of their estimated weights is "
        "negative, and a row whose estimated sum comes near zero gets weights far outside "
        "[0, 1]. Where that happens (the table: a sizeable share of negative weights, a "
        "largest |weight| above 1), it dominates their relative errors, which are then of "
        "Trig's order, not FAVOR+'s; where it does not, the hybrid can beat FAVOR+. The "
        "HRF paper's Fig. 3 measures something else: the softmax over "
        "an LSTM's output classes, compared by 1-d Wasserstein and Kolmogorov-Smirnov "
        "distances, with the share of negative estimates reported apart; its ordering "
        "(hybrid better than FAVOR+) is for those metrics, not for this relative error. "
        f"Per map at M = {cfg.Ms[-1]}, bidirectional attention matrix: share of "
        "negative weights / largest |weight| (exact softmax: 0 % / at most 1), mean over "
        f"{len(runs)} seeds.\n\n" + markdown_table(["feature map", *(reg for reg, _ in cols)], rows)
    )


def _sections(cfg: Config, runs: list) -> list[str]:
    agg = H.aggregate(runs)
    cols = [(reg, mode) for reg in cfg.regimes for mode in cfg.modes]
    short = {"bidirectional": "bidir", "causal": "causal"}
    header = ["feature map"] + [f"{reg} {short.get(mode, mode)}" for reg, mode in cols]
    out = []
    for metric in ("output", "matrix"):
        rows = [
            [MAPS[fm]] + [_cell(agg, f"{metric} {reg} {mode} {fm}", -1) for reg, mode in cols]
            for fm in cfg.maps
        ]
        out.append(
            f"## Relative {metric} error at M = {cfg.Ms[-1]} (mean ± s.d. over {len(runs)} "
            "seeds)\n\n" + markdown_table(header, rows)
        )
    rows = []
    for fm in (m for m in cfg.maps if m not in DETERMINISTIC):
        s = [_slope(cfg.Ms, agg[f"output {reg} {mode} {fm}"]["mean"]) for reg, mode in cols]
        rows.append([MAPS[fm]] + [f"{x:.2f}" for x in s])
    out.append(
        "## Convergence rate\n\nLeast-squares slope of log(mean output error) vs log M "
        "(Monte Carlo rate: −0.5; flatter: a bias or heavy tails dominate at these M).\n\n"
        + markdown_table(header, rows)
    )
    out.append(_positivity(cfg, runs, agg))
    if "lm valid_bpc" in agg:
        out.append(f"Tiny LM validation: {float(agg['lm valid_bpc']['mean']):.3f} bpc.")
    out.append(
        "## Deviations from the paper's protocol\n\n"
        "- The FAVOR# paper compares the *variance of kernel estimates* (Sec. 5.1) and "
        "downstream accuracy; it has no attention-output error vs M plot. The orderings "
        "are compared on the error of the normalised attention output, which is what a "
        "Transformer sees; claims the papers do not make are marked as kernelkit's own "
        "extrapolation.\n"
        "- One σ (0.25) per synthetic regime instead of the paper's sweep 0.1 ≤ σ ≤ 1 "
        "(`favor-variance` sweeps σ); `mnist` / `cifar10` are replaced by queries and keys "
        "of a trained model (`lm`).\n"
        "- The hybrid's budget (m = M/8) reads the HRF paper's cost matching (see Setup); "
        "the paper does not give its (m, n) for Fig. 3.\n"
        "- ReLU / ELU+1 do not depend on M (not estimators of softmax attention); shown "
        "for scale."
    )
    return out


def _panels(metric):
    def panels(cfg: Config) -> list[H.Panel]:
        return [
            H.Panel(
                f"{reg}, {mode}: {fam}",
                {MAPS[fm]: f"{metric} {reg} {mode} {fm}" for fm in maps if fm in cfg.maps},
                f"relative {metric} error",
                cfg.Ms,
                "M (features)",
                logx=True,
                logy=True,
            )
            for reg in cfg.regimes
            for mode in cfg.modes
            for fam, maps in FAMILIES.items()
        ]

    return panels


SPEC = H.Spec(
    name=NAME,
    title="Linear attention vs exact softmax attention: error vs M",
    description=DESCRIPTION,
    quick=QUICK,
    full=FULL,
    compute=compute,
    claims=_claims,
    plots=(
        H.Plot(
            "output_error.png",
            "Relative L2 error of the attention output vs M (log-log), FAVOR maps and the "
            "others in separate panels (FAVOR+ in both).",
            _panels("output"),
            4,
        ),
        H.Plot(
            "matrix_error.png",
            "Relative Frobenius error of the attention matrix vs M (small L).",
            _panels("matrix"),
            4,
        ),
    ),
    setup=_setup,
    sections=_sections,
    seeds=(5, 3),
    check=_check,
)


def run(out_dir: Path, quick: bool = False, seed: int = 0, **overrides) -> dict:
    """``kernelkit reproduce attention-approx [--quick]``; ``overrides`` replace Config
    fields."""
    return H.run_spec(SPEC, out_dir, quick=quick, seed=seed, **overrides)
