"""A small character-level Transformer language model with pluggable causal attention.

Private helper of the ``tiny-lm`` and ``attention-approx`` experiments (PyTorch only).

Model (GPT-style, pre-LayerNorm): token + learned position embeddings, ``n_layers``
blocks ``x + Attn(LN(x))``, ``x + MLP(LN(x))`` (MLP ``D -> 4D -> D`` with GELU), final
LayerNorm, output head tied to the token embedding. Every attention type uses the same
parameters (a fused ``q, k, v`` projection and an output projection), so with the same
seed every model starts from *identical* weights and sees identical batches; only the
attention function differs:

* ``"exact"``: :func:`torch.nn.functional.scaled_dot_product_attention` with
  ``is_causal=True``;
* any feature-map name of :func:`kernelkit.attention.linear_attention` (``"positive"``
  FAVOR+, ``"gerf"`` FAVOR++, ``"saderf"`` / ``"sderf"`` FAVOR#, ``"hybrid_angular"``,
  ...): causal linear attention with ``n_features`` random features. The random features
  are redrawn every ``redraw_interval`` training steps and fixed in ``eval()`` mode.
  Positive maps run through :class:`kernelkit.attention.FavorAttention` (FAVOR++ /
  FAVOR# parameters from its running moments of earlier batches); signed maps (trig,
  hybrid) use the masked quadratic form of the same causal estimator (see
  :class:`CausalSelfAttention`).

Training (:func:`train_lm`): AdamW, linear warm-up then cosine decay, gradient clipping
at 1, random windows of ``context + 1`` characters drawn from the training ids with a
seeded NumPy generator; the budget is a fixed number of steps x batch x context tokens,
the same for every attention type. Evaluation (:func:`evaluate_bpc`): mean next-character
cross-entropy over non-overlapping validation windows, in bits per character.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "LMConfig",
    "TinyLM",
    "TrainConfig",
    "capture_qkv",
    "evaluate_bpc",
    "num_threads",
    "train_lm",
]


@dataclass(frozen=True)
class LMConfig:
    """Architecture of :class:`TinyLM`."""

    vocab_size: int
    context: int = 128
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    attention: str = "exact"  # "exact" or a linear_attention feature map
    n_features: int = 64  # M, random features per head (linear attention only)
    redraw_interval: int = 100  # training steps between feature redraws (0: never)

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} must be a multiple of n_heads={self.n_heads}."
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class TrainConfig:
    """Budget and optimiser of :func:`train_lm` (identical for every attention type)."""

    steps: int = 200
    batch_size: int = 16
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 20
    grad_clip: float = 1.0
    log_every: int = 10  # steps between recorded training losses
    eval_windows: int = 64  # validation windows for the final bpc (None-like 0: all)


def num_threads() -> int:
    """Torch threads for the tiny-model experiments: 1 (``KERNELKIT_TORCH_THREADS``
    overrides).

    The tensors here are small (a few thousand tokens x 64-128 channels), too small for
    intra-op parallelism to pay off, and on a shared 2-core machine spinning worker threads
    cost much more than they give: measured under load, one training step of the quick
    model took 10-40x more CPU time with 2 threads than with 1. The benchmark, whose
    tensors are large, uses every core instead.
    """
    env = os.environ.get("KERNELKIT_TORCH_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    return 1


@contextlib.contextmanager
def torch_threads(n: int):
    """Set ``torch.set_num_threads(n)`` inside the block, restore afterwards."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


#: maps that kernelkit's causal scan does not support (signed features)
BIDIRECTIONAL_ONLY = ("trig", "hybrid_angular")


def masked_causal_attention(q, k, v, feature_map, n_features, random_state, projection=None):
    """Causal random-feature attention of a map without a causal scan (trig, hybrid).

    Computes ``Y_t = sum_{j <= t} P_t.S_j v_j / sum_{j <= t} P_t.S_j`` exactly but at
    O(L^2) cost: the bidirectional matrix ``A = diag(P S^T 1)^{-1} P S^T`` from
    :func:`kernelkit.attention.linear_attention` with values ``I_L`` (same features),
    masked to ``j <= t`` and renormalised per row (the bidirectional normaliser cancels).
    A row whose masked sum is exactly zero gives zeros.

    q, k (..., L, d), v (..., L, e) -> (..., L, e). ``projection``: fixed projections
    (as for :func:`~kernelkit.attention.linear_attention`) instead of drawing them.
    """
    from kernelkit.attention import linear_attention

    L = q.shape[-2]
    eye = torch.eye(L, dtype=q.dtype, device=q.device).expand(*q.shape[:-2], L, L)
    a = linear_attention(
        q, k, eye, feature_map, n_features, random_state=random_state, projection=projection
    )  # (..., L, L)
    a = a.masked_fill(torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1), 0.0)
    den = a.sum(-1, keepdim=True)  # (..., L, 1)
    return (a / torch.where(den != 0, den, torch.ones_like(den))) @ v


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with an exact or a linear attention core.

    Input and output ``(B, T, D)``; heads ``(B, H, T, D / H)``. Three implementations, with
    parameters of the same shapes in the same order (a fused ``(3D, D)`` input projection
    with bias, then a ``(D, D)`` output projection with bias), so that :class:`TinyLM`
    initialises every variant to the same values:

    * ``"exact"``: own projections + :func:`torch.nn.functional.scaled_dot_product_attention`
      (``is_causal=True``);
    * positive maps (FAVOR+, FAVOR++, FAVOR#, ReLU, ELU, ...): a
      :class:`kernelkit.attention.FavorAttention` called with ``is_causal=True`` -- the
      drop-in module itself: it redraws its projections every ``redraw_interval`` training
      calls, keeps them in ``eval()``, and fits FAVOR++ / FAVOR# parameters from running
      moments of earlier batches (FAVOR+ features before the first update);
    * signed maps (:data:`BIDIRECTIONAL_ONLY`: trig, hybrid), which have no causal scan in
      kernelkit: own projections, and the causal estimator computed exactly but
      quadratically from :func:`kernelkit.attention.linear_attention` -- the bidirectional
      matrix ``A = diag(P S^T 1)^{-1} P S^T`` (values ``v = I``), masked to ``j <= t`` and
      renormalised per row; the bidirectional normaliser cancels, leaving
      ``P_t S_j / sum_{j' <= t} P_t S_j'``. Features are redrawn like the module's.
    """

    def __init__(self, cfg: LMConfig, layer: int, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.layer = layer
        self.seed = seed
        self.step = 0  # training forwards seen (drives the redraw of the signed maps)
        self.captured: list | None = None  # set by capture_qkv
        self.mha = None
        if cfg.attention not in ("exact", *BIDIRECTIONAL_ONLY):
            from kernelkit.attention import FavorAttention

            self.mha = FavorAttention(
                cfg.d_model,
                cfg.n_heads,
                batch_first=True,
                feature_map=cfg.attention,
                n_features=cfg.n_features,
                redraw_interval=cfg.redraw_interval or None,
                random_state=self._seed(0),
            )
        else:
            self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
            self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def _seed(self, period: int) -> int:
        # distinct, deterministic seed per (run seed, layer, redraw period)
        return int(np.random.SeedSequence([self.seed, self.layer, period]).generate_state(1)[0])

    def forward(self, x):
        B, T, D = x.shape
        if self.mha is not None:
            return self.mha(x, x, x, need_weights=False, is_causal=True)[0]
        H, dh = self.cfg.n_heads, self.cfg.head_dim
        q, k, v = self.qkv(x).view(B, T, 3, H, dh).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, dh)
        if self.captured is not None:
            self.captured.append(tuple(t.detach().clone() for t in (q, k, v)))
        if self.cfg.attention == "exact":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, dh)
        else:
            period = 0
            if self.training and self.cfg.redraw_interval > 0:
                period = self.step // self.cfg.redraw_interval
            y = masked_causal_attention(
                q, k, v, self.cfg.attention, self.cfg.n_features, self._seed(period)
            )  # (B, H, T, dh)
        if self.training:
            self.step += 1
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    """Pre-LayerNorm block ``x + attn(LN(x))``, ``x + MLP(LN(x))`` (MLP ``D -> 4D -> D``,
    GELU) around the attention module ``attn`` (``(B, T, D) -> (B, T, D)``)."""

    def __init__(self, d_model: int, attn: nn.Module):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = attn
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def init_parameters(model: nn.Module, n_layers: int, seed: int) -> None:
    """Draw ``model``'s parameters from ``torch.manual_seed(seed)``: matrices normal with
    std 0.02 (residual output projections ``/ sqrt(2 n_layers)``), biases zero.

    Re-seeding here makes the values independent of the attention type (module
    constructors consume different amounts of randomness; the parameters have the same
    shapes in the same order for every type)."""
    torch.manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            std = 0.02
            if name.endswith(("attn.proj.weight", "attn.mha.out_proj.weight", "mlp.2.weight")):
                std /= math.sqrt(2 * n_layers)
            nn.init.normal_(p, 0.0, std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)


class TinyLM(nn.Module):
    """Character-level GPT-style model; ``forward(ids (B, T)) -> logits (B, T, V)``.

    Parameters are initialised from ``torch.manual_seed(seed)`` (normal, std 0.02;
    residual output projections scaled by ``1 / sqrt(2 n_layers)``), independent of
    ``cfg.attention``.
    """

    def __init__(self, cfg: LMConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(
            Block(cfg.d_model, CausalSelfAttention(cfg, i, seed)) for i in range(cfg.n_layers)
        )
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied
        init_parameters(self, cfg.n_layers, seed)
        torch.random.set_rng_state(gen_state)

    def forward(self, ids):
        T = ids.shape[1]
        if T > self.cfg.context:
            raise ValueError(f"sequence length {T} exceeds the context {self.cfg.context}.")
        x = self.tok(ids) + self.pos(torch.arange(T, device=ids.device))  # (B, T, D)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))  # (B, T, V)

    def loss(self, ids):
        """Mean next-token cross-entropy (nats) of windows ``ids`` (B, T + 1)."""
        logits = self(ids[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def _windows(data: np.ndarray, starts: np.ndarray, length: int) -> torch.Tensor:
    idx = starts[:, None] + np.arange(length)[None, :]  # (B, length)
    return torch.from_numpy(data[idx])


def _lr(step: int, tc: TrainConfig) -> float:
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    frac = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * frac)))


def evaluate_bpc(
    model: TinyLM, data: np.ndarray, max_windows: int = 0, batch_size: int = 32
) -> float:
    """Validation bits per character: mean cross-entropy over non-overlapping windows.

    Windows of ``context + 1`` ids start every ``context`` ids (each target character is
    predicted once); ``max_windows`` > 0 keeps that many, evenly spaced over ``data``.
    """
    return _evaluate(model, data, max_windows, batch_size)[0]


@torch.no_grad()
def _evaluate(model, data, max_windows, batch_size):
    """(bits per character, number of predicted characters)."""
    T = model.cfg.context
    starts = np.arange(0, data.size - T - 1, T)
    if max_windows and starts.size > max_windows:
        starts = starts[np.linspace(0, starts.size - 1, max_windows).round().astype(int)]
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, starts.size, batch_size):
        ids = _windows(data, starts[i : i + batch_size], T + 1)
        logits = model(ids[:, :-1])
        total += float(
            F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum"
            )
        )
        count += ids[:, 1:].numel()
    model.train(was_training)
    return total / count / math.log(2.0), count


def _optimizer(model, tc: TrainConfig):
    """AdamW with weight decay on the matrices only."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": tc.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=tc.lr,
        betas=(0.9, 0.95),
    )


def _final_eval(model, valid, tc: TrainConfig) -> tuple[float, int, float]:
    """(validation bpc, tokens evaluated, seconds); NaN bpc where activations blew up."""
    bpc, n_eval, t0 = float("nan"), 0, time.perf_counter()
    try:
        bpc, n_eval = _evaluate(model, valid, tc.eval_windows, 32)
    except ValueError as exc:
        if "NaN or inf" not in str(exc):
            raise
    return bpc, n_eval, time.perf_counter() - t0


def train_lm(
    cfg: LMConfig,
    tc: TrainConfig,
    train: np.ndarray,
    valid: np.ndarray,
    seed: int = 0,
    progress: str | None = None,
) -> dict:
    """Train a :class:`TinyLM` for ``tc.steps`` steps; returns the model and its record.

    Returns
    -------
    dict with ``model``, ``curve`` (list of ``(step, mean training loss in bits)`` over the
    last ``log_every`` steps), ``valid_bpc``, ``train_tokens_per_s`` (tokens over the time
    spent in training steps), ``eval_tokens_per_s``, ``train_seconds``, ``finite``
    (every loss and the bpc finite), ``diverged_at`` (the step whose loss was not finite:
    training stops there, before the NaN reaches the weights, and ``valid_bpc`` is NaN;
    None otherwise) and the configs.
    """
    from tqdm.auto import tqdm

    model = TinyLM(cfg, seed=seed)
    model.train()
    opt = _optimizer(model, tc)
    rng = np.random.default_rng([seed, 7])  # the same batches for every attention type
    T = cfg.context
    curve, window, t_train = [], [], 0.0
    bar = tqdm(range(tc.steps), desc=progress, leave=False, disable=progress is None)
    diverged_at = None
    steps_done = 0
    for step in bar:
        starts = rng.integers(0, train.size - T - 1, size=tc.batch_size)
        ids = _windows(train, starts, T + 1)
        for g in opt.param_groups:
            g["lr"] = _lr(step, tc)
        t0 = time.perf_counter()
        try:
            loss = model.loss(ids)
        except ValueError as exc:  # kernelkit's finite-input check: activations blew up
            if "NaN or inf" not in str(exc):
                raise
            loss = torch.tensor(float("nan"))
        val = float(loss.detach()) / math.log(2.0)
        if not math.isfinite(val):  # diverged: stop before the NaN reaches the weights
            diverged_at = step + 1
            t_train += time.perf_counter() - t0
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        t_train += time.perf_counter() - t0
        steps_done += 1
        window.append(val)
        if (step + 1) % tc.log_every == 0 or step + 1 == tc.steps:
            curve.append((step + 1, float(np.mean(window))))
            window = []
            bar.set_postfix(bits=f"{curve[-1][1]:.3f}")
    bar.close()
    if window:  # partial window before a divergence
        curve.append((steps_done, float(np.mean(window))))
    bpc, n_eval, t_eval = float("nan"), 0, 0.0
    if diverged_at is None:
        bpc, n_eval, t_eval = _final_eval(model, valid, tc)
    return {
        "model": model,
        "curve": curve,
        "valid_bpc": bpc,
        "finite": diverged_at is None and math.isfinite(bpc),
        "diverged_at": diverged_at,
        "train_tokens_per_s": steps_done * tc.batch_size * T / max(t_train, 1e-12),
        "eval_tokens_per_s": n_eval / t_eval if t_eval > 0 else float("nan"),
        "train_seconds": t_train,
        "lm_config": asdict(cfg),
        "train_config": asdict(tc),
    }


@contextlib.contextmanager
def capture_qkv(model: TinyLM):
    """Collect every layer's ``(q, k, v)`` (each ``(B, H, T, dh)``) during the block.

    Yields a list with one list of captured tuples per layer (one tuple per forward).
    """
    store = [[] for _ in model.blocks]
    for blk, s in zip(model.blocks, store, strict=True):
        blk.attn.captured = s
    try:
        yield store
    finally:
        for blk in model.blocks:
            blk.attn.captured = None
