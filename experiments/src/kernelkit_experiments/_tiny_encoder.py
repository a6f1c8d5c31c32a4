"""A small bidirectional Transformer encoder trained as a masked character model.

Private helper of the ``mlm-encoder`` experiment (PyTorch only): the bidirectional
setting in which FAVOR# was evaluated on trained models (FAVOR# Sec. 5.3: speech
encoders and BERT-style masked-LM pretraining), at a size that trains in minutes on a
CPU.

Model (pre-LayerNorm encoder): token + learned position embeddings, ``n_layers`` blocks
``x + Attn(LN(x))``, ``x + MLP(LN(x))`` (MLP ``D -> 4D -> D``, GELU), final LayerNorm,
output head tied to the token embedding. Every attention type has parameters of the same
shapes in the same order (a fused ``q, k, v`` input projection and an output projection,
both with bias), so with one seed every model starts from identical weights and sees
identical batches and masks; only the attention differs:

* ``"exact"``: :func:`torch.nn.functional.scaled_dot_product_attention` (bidirectional);
* a positive map of :func:`kernelkit.attention.linear_attention` (``"positive"`` FAVOR+,
  ``"gerf"`` FAVOR++, ``"saderf"`` / ``"sderf"`` FAVOR#) through
  :class:`kernelkit.attention.FavorAttention`: bidirectional, so the FAVOR++ / FAVOR#
  parameters are fitted in closed form to every batch element's and head's own queries
  and keys (FAVOR# eq. 4 with Thm 4.2-4.3), projections redrawn every
  ``redraw_interval`` training calls and fixed in ``eval()``.

Task: BERT's masking rule on windows of ``context`` characters: each position is chosen
with probability ``mask_rate``; a chosen position's input becomes the mask id (80 %), a
random character (10 %) or stays (10 %); the loss is the cross-entropy at chosen positions
only. Validation uses fixed windows and masks (one seeded draw), so every model is scored
on the same positions.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._tiny_transformer import Block, _lr, init_parameters  # _lr: warm-up, cosine decay

__all__ = [
    "EncoderConfig",
    "MLMTrainConfig",
    "MaskedLM",
    "capture_qk",
    "evaluate_mlm",
    "mask_batch",
    "train_mlm",
]


@dataclass(frozen=True)
class EncoderConfig:
    """Architecture of :class:`MaskedLM`; ``vocab_size`` excludes the mask id."""

    vocab_size: int
    context: int = 128
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    attention: str = "exact"  # "exact" or a positive linear_attention feature map
    n_features: int = 16  # M, random features per head
    redraw_interval: int = 50  # training calls between projection redraws (0: never)

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} must be a multiple of n_heads={self.n_heads}."
            )


@dataclass(frozen=True)
class MLMTrainConfig:
    """Budget and optimiser of :func:`train_mlm` (the same for every attention type)."""

    steps: int = 300
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup: int = 30
    grad_clip: float = 1.0
    mask_rate: float = 0.15
    eval_windows: int = 256


class SelfAttention(nn.Module):
    """Bidirectional multi-head self-attention, exact or random-feature; ``(B, T, D)``."""

    def __init__(self, cfg: EncoderConfig, layer: int, seed: int):
        super().__init__()
        self.cfg = cfg
        self.mha = None
        self.captured: list | None = None  # set by capture_qk (exact attention only)
        if cfg.attention == "exact":
            self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
            self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        else:
            from kernelkit.attention import FavorAttention

            state = np.random.SeedSequence([seed, layer]).generate_state(1)[0]
            self.mha = FavorAttention(
                cfg.d_model,
                cfg.n_heads,
                batch_first=True,
                feature_map=cfg.attention,
                n_features=cfg.n_features,
                redraw_interval=cfg.redraw_interval or None,
                random_state=int(state),
            )

    def forward(self, x):
        if self.mha is not None:
            return self.mha(x, x, x, need_weights=False)[0]
        B, T, D = x.shape
        H = self.cfg.n_heads
        q, k, v = self.qkv(x).view(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4)  # 3 x (B,H,T,dh)
        if self.captured is not None:
            self.captured.append((q.detach().clone(), k.detach().clone()))
        y = F.scaled_dot_product_attention(q, k, v)  # (B, H, T, dh)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class MaskedLM(nn.Module):
    """Encoder with a tied output head; ``forward(ids (B, T)) -> logits (B, T, V)``.

    The embedding has ``vocab_size + 1`` rows (the last is the mask id); parameters are
    drawn from ``torch.manual_seed(seed)`` (normal, std 0.02; residual output projections
    scaled by ``1 / sqrt(2 n_layers)``) independently of ``cfg.attention``.
    """

    def __init__(self, cfg: EncoderConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.tok = nn.Embedding(cfg.vocab_size + 1, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(
            Block(cfg.d_model, SelfAttention(cfg, i, seed)) for i in range(cfg.n_layers)
        )
        self.ln_f = nn.LayerNorm(cfg.d_model)
        init_parameters(self, cfg.n_layers, seed)  # independent of the attention type
        torch.random.set_rng_state(gen_state)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(T, device=ids.device))  # (B, T, D)
        for blk in self.blocks:
            x = blk(x)
        # tied head over the real characters only (the mask id is never a target)
        return self.ln_f(x) @ self.tok.weight[: self.cfg.vocab_size].T  # (B, T, V)


def mask_batch(ids: np.ndarray, vocab_size: int, rate: float, rng: np.random.Generator):
    """BERT masking of ``ids`` (B, T): ``(inputs, targets)`` with targets ``-100`` where the
    loss ignores a position; the mask id is ``vocab_size``."""
    chosen = rng.random(ids.shape) < rate
    chosen[np.arange(ids.shape[0]), rng.integers(0, ids.shape[1], ids.shape[0])] = True
    action = rng.random(ids.shape)
    inputs = ids.copy()
    inputs[chosen & (action < 0.8)] = vocab_size
    swap = chosen & (action >= 0.8) & (action < 0.9)
    inputs[swap] = rng.integers(0, vocab_size, int(swap.sum()))
    targets = np.where(chosen, ids, -100)
    return torch.from_numpy(inputs), torch.from_numpy(targets)


def _windows(data: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    return data[starts[:, None] + np.arange(length)[None, :]]  # (B, length)


@torch.no_grad()
def evaluate_mlm(model: MaskedLM, data: np.ndarray, n_windows: int, rate: float) -> dict:
    """Masked-character loss (bits) and accuracy on ``n_windows`` fixed windows and masks
    (evenly spaced over ``data``; masks from a fixed seed)."""
    T, V = model.cfg.context, model.cfg.vocab_size
    starts = np.linspace(0, data.size - T - 1, n_windows).round().astype(np.int64)
    inputs, targets = mask_batch(_windows(data, starts, T), V, rate, np.random.default_rng(12345))
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for i in range(0, n_windows, 64):
        logits = model(inputs[i : i + 64])  # (b, T, V)
        tgt = targets[i : i + 64]
        keep = tgt >= 0
        loss_sum += float(F.cross_entropy(logits[keep], tgt[keep], reduction="sum"))
        correct += int((logits[keep].argmax(-1) == tgt[keep]).sum())
        count += int(keep.sum())
    model.train(was_training)
    return {"bits": loss_sum / count / math.log(2.0), "accuracy": correct / count, "n": count}


def train_mlm(
    cfg: EncoderConfig, tc: MLMTrainConfig, train: np.ndarray, valid: np.ndarray, seed: int = 0
) -> dict:
    """Train a :class:`MaskedLM` for ``tc.steps`` steps (AdamW, warm-up then cosine decay,
    gradient clipping); batches and masks depend only on ``seed``.

    Returns a dict with ``valid_bits``, ``valid_accuracy`` (masked positions), ``curve``
    (training loss in bits every 10 steps), ``train_seconds``, ``finite`` and the configs.
    """
    model = MaskedLM(cfg, seed=seed)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": tc.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=tc.lr,
        betas=(0.9, 0.98),
    )
    rng = np.random.default_rng([seed, 11])  # the same batches and masks for every attention
    T, curve, window, t0, finite = cfg.context, [], [], time.perf_counter(), True
    for step in range(tc.steps):
        starts = rng.integers(0, train.size - T, size=tc.batch_size)
        inputs, targets = mask_batch(_windows(train, starts, T), cfg.vocab_size, tc.mask_rate, rng)
        for g in opt.param_groups:
            g["lr"] = _lr(step, tc)
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        if not torch.isfinite(loss):
            finite = False
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        window.append(float(loss.detach()) / math.log(2.0))
        if (step + 1) % 10 == 0:
            curve.append((step + 1, float(np.mean(window))))
            window = []
    seconds = time.perf_counter() - t0
    scores = evaluate_mlm(model, valid, tc.eval_windows, tc.mask_rate) if finite else {}
    return {
        "model": model,
        "valid_bits": scores.get("bits", float("nan")),
        "valid_accuracy": scores.get("accuracy", float("nan")),
        "curve": curve,
        "train_seconds": seconds,
        "finite": finite,
        "encoder_config": asdict(cfg),
        "train_config": asdict(tc),
    }


@torch.no_grad()
def capture_qk(model: MaskedLM, data: np.ndarray, n_windows: int) -> list:
    """Queries and keys ``[(q, k) per layer]``, each ``(n_windows, H, T, dh)``, of an exact
    model on ``n_windows`` evenly spaced unmasked windows of ``data``."""
    if model.cfg.attention != "exact":
        raise ValueError("capture_qk reads the projections of an exact-attention model.")
    T = model.cfg.context
    starts = np.linspace(0, data.size - T - 1, n_windows).round().astype(np.int64)
    for blk in model.blocks:
        blk.attn.captured = []
    was_training = model.training
    model.eval()
    try:
        model(torch.from_numpy(_windows(data, starts, T)))
        return [blk.attn.captured[0] for blk in model.blocks]
    finally:
        model.train(was_training)
        for blk in model.blocks:
            blk.attn.captured = None
