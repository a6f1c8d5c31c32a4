"""Helpers shared by the attention tests: seeded inputs and relative errors."""

from __future__ import annotations

import torch


def qkv(q_shape, k_shape=None, e=3, scale=1.0, dtype=torch.float64, seed=0):
    """Seeded q (q_shape), k (k_shape, default q_shape) scaled by ``scale``, and v with
    k's leading dims and last dim ``e``; drawn in that order from one generator."""
    g = torch.Generator().manual_seed(seed)
    k_shape = q_shape if k_shape is None else k_shape
    q = torch.randn(*q_shape, generator=g, dtype=dtype) * scale
    k = torch.randn(*k_shape, generator=g, dtype=dtype) * scale
    v = torch.randn(*k_shape[:-1], e, generator=g, dtype=dtype)
    return q, k, v


def rel_error(a, b) -> float:
    """``|a - b| / |b|`` in the Frobenius norm."""
    return float(((a - b).norm() / b.norm()).detach())


def causal_inputs(BH=3, L=40, d=5, e=3, scale=1.0, dtype=torch.float64, seed=0):
    """Seeded q, k (BH, L, d) scaled by ``scale`` and v (BH, L, e): the flattened
    (batch x heads) inputs of the causal kernel (:func:`qkv`)."""
    return qkv((BH, L, d), e=e, scale=scale, dtype=dtype, seed=seed)


def fused_features(name, q, k, M=16):
    """The causal kernel's feature object of map ``name`` with ``M`` features, fitted to
    the moments of q, k (BH, L, d) (per-instance parameters, as the causal path flattens
    them), projections of seed 0, in q's dtype."""
    from kernelkit.attention import attention_moments, draw_features
    from kernelkit.attention._maps import build_log_map
    from kernelkit.attention.functional import _FusedFeatures

    mom = attention_moments(q, k)
    W = torch.as_tensor(draw_features(name, M, q.shape[-1], 0)["W"])
    return _FusedFeatures(build_log_map(name, W, mom, q.shape[-1]).to(q.dtype))


def causal_dense_log(lq, lk, v, keep=None):
    """FAVOR# eq. 4, causal, from log features lq, lk (B, L, M) and values v (B, L, e) in
    float64 log space (``log W_tj = logsumexp_m (lq_tm + lk_jm)``), so any growth of the
    keys is exact; ``keep`` (B, L) bool or None; rows with no visible key give zeros."""
    lq, lk, v = lq.double(), lk.double(), v.double()
    logw = torch.logsumexp(lq[:, :, None, :] + lk[:, None, :, :], dim=-1)  # (B, L, L)
    L = logw.shape[-1]
    hide = ~torch.tril(torch.ones(L, L, dtype=torch.bool))
    if keep is not None:
        hide = hide | ~keep[:, None, :]
    logw = logw.masked_fill(hide, -torch.inf)
    seen = ~hide.all(-1, keepdim=True)  # rows with a visible key
    p = torch.softmax(torch.where(seen, logw, 0.0), dim=-1)
    return torch.where(seen, p @ v, 0.0)


class LinearLogFeatures:
    """Log features ``x @ W`` (no row term; masked keys ``-1e30``), the feature object of
    the causal kernel's tests: scaling a key raises its log features directly, so key
    jumps beyond the growth bound are easy to place. ``W`` (d, M)."""

    def __init__(self, W):
        self.W, self.n_out = W, W.shape[1]

    def log_features(self, x, side, keep=None):
        lf = x @ self.W.to(x.dtype)
        return lf if keep is None else torch.where(keep[..., None], lf, -1e30)


def spy_paths(monkeypatch, module, name):
    """Record, for every call of ``module.name`` (a function that returns None where it
    declines, as the batched block functions of the causal kernel), whether it returned
    a result (True) or None (False), in call order."""
    paths = []
    orig = getattr(module, name)

    def spy(*args, **kwargs):
        res = orig(*args, **kwargs)
        paths.append(res is not None)
        return res

    monkeypatch.setattr(module, name, spy)
    return paths


def batched_block_paths(monkeypatch):
    """Record, for every block of a causal backward (in the order the backward takes them,
    last block first), whether it ran on the batched one-pivot path (True) or chunk by
    chunk (False): a spy on ``kernelkit.attention._linear._bwd_block``."""
    from kernelkit.attention import _linear as lin

    return spy_paths(monkeypatch, lin, "_bwd_block")


def step_in_blocks(q, k, v, state, blocks, pad=None, single_tokens=True, **step_kw):
    """Outputs (..., L, e) of ``linear_attention_step`` through ``blocks`` (lengths along
    the sequence axis -2 of q, k, v (..., L, .) and of ``pad`` (..., L)), concatenated,
    and the final state. ``single_tokens``: a block of length 1 is passed as one token
    (..., d), the step's token form; otherwise as a (..., 1, d) block. ``step_kw`` go to
    every step (``enable_gqa``, ``inplace``)."""
    from kernelkit.attention import linear_attention_step

    outs, lo = [], 0
    for n in blocks:
        one = single_tokens and n == 1
        sl = lo if one else slice(lo, lo + n)
        m = None if pad is None else pad[..., sl]
        o, state = linear_attention_step(
            q[..., sl, :], k[..., sl, :], v[..., sl, :], state, key_padding_mask=m, **step_kw
        )
        outs.append(o[..., None, :] if one else o)
        lo += n
    assert lo == q.shape[-2]
    return torch.cat(outs, dim=-2), state
