"""Linear-attention kernels (torch): bidirectional and causal, with exact stabilisers.

Notation (per batch element and head): log features ``lq`` (L, M), ``lk`` (S, M),
values ``v`` (S, e). The attention output is

    out_t = sum_j W_tj v_j / sum_j W_tj,    W_tj = sum_m exp(lq_tm + lk_jm)

(FAVOR# eq. 4), with ``j`` over unmasked keys (and ``j <= t`` in causal mode).

Stabilisers (all cancel exactly in the ratio; they are detached, which is exact since
the output does not depend on them):

* bidirectional: a per-feature key maximum ``c_m = max_j lk_jm`` is moved to the query
  side (``lk - c``, ``lq + c``), then the query row maximum ``R_t = max_m (lq_tm + c_m)``
  is subtracted. Every factor is ``<= 1`` and the largest term of every row is exactly 1,
  so neither overflow nor a vanishing denominator is possible at any input norm.
* causal: the same with *causal* maxima, ``c_tm = max_{j <= t} lk_jm`` and
  ``R_t = max_m (lq_tm + c_tm)`` (the largest term among the keys a query may see).
  Keys of earlier chunks enter through a running state kept relative to the prefix
  maximum of the keys before the chunk (rescaled when it grows, as in online softmax);
  inside a chunk, queries of the second half of every dyadic block see the keys of the
  first half through the maximum of those keys (all earlier than the queries), down to
  single positions (diagonal terms). No stabiliser ever uses a later position, so a
  later token cannot change (or underflow) an earlier output.
"""

from __future__ import annotations

import torch

__all__ = ["bidirectional_exp", "bidirectional_plain", "causal_exp"]

_NEG = -1e30  # finite "minus infinity" for maxima over masked / empty sets
_POS = 1e30


def _safe_div(num, den):
    # num (..., L, e), den (..., L): zero rows (no visible key) give zeros, not NaN
    ok = den > 0
    return num / torch.where(ok, den, torch.ones_like(den))[..., None]


# ============================================================== bidirectional
def bidirectional_exp(lq, lk, v, keep=None):
    """Bidirectional attention from log features.

    lq (..., L, M), lk (..., S, M), v (..., S, e), keep (..., S) bool or None.
    Returns (..., L, e).
    """
    if keep is not None:
        lk = torch.where(keep[..., None], lk, float("-inf"))
    with torch.no_grad():
        c = lk.amax(dim=-2, keepdim=True)  # (..., 1, M) per-feature key max
        c = torch.where(torch.isfinite(c), c, torch.zeros_like(c))
    pk = torch.exp(lk - c)  # (..., S, M), <= 1, masked keys 0
    lq = lq + c
    with torch.no_grad():
        r = lq.amax(dim=-1, keepdim=True)  # (..., L, 1)
    pq = torch.exp(lq - r)  # (..., L, M), row max 1
    kv = pk.transpose(-1, -2) @ v  # (..., M, e)
    ks = pk.sum(dim=-2)  # (..., M)
    num = pq @ kv  # (..., L, e)
    den = (pq @ ks[..., None])[..., 0]  # (..., L)
    return _safe_div(num, den)


def bidirectional_plain(fq, fk, v, keep=None):
    """Bidirectional attention from explicit features (relu, elu, trig, hybrids).

    fq (..., L, D), fk (..., S, D), v (..., S, e). Non-positive features (trig, hybrid)
    can give denominators near zero: that is a property of those estimators.
    """
    if keep is not None:
        fk = fk * keep[..., None].to(fk.dtype)
    kv = fk.transpose(-1, -2) @ v  # (..., D, e)
    ks = fk.sum(dim=-2)  # (..., D)
    num = fq @ kv
    den = (fq @ ks[..., None])[..., 0]
    ok = den != 0
    return num / torch.where(ok, den, torch.ones_like(den))[..., None]


# ============================================================== causal
def _intra_chunk(lq, lk, va, R):
    """Causal attention numerator inside one chunk (keys j <= query t in the chunk).

    lq, lk (B, C, M) (masked keys: lk = _NEG, va rows 0), va (B, C, E), R (B, C) the
    causal row stabiliser. C must be a power of two. Dyadic split: at block size s the
    queries of the second half see the keys of the first half through the per-feature
    maximum of those keys (earlier positions only); the diagonal last. All factors <= 1.
    Returns (B, C, E).
    """
    B, C, M = lq.shape
    E = va.shape[-1]
    lqr = lq - R[..., None]  # (B, C, M), lq_tm - R_t
    # diagonal terms: sum_m exp(lq_tm + lk_tm - R_t) v_t
    out = torch.exp(lqr + lk).sum(-1, keepdim=True) * va  # (B, C, E)
    s = C
    while s >= 2:
        h = s // 2
        nb = C // s
        lkb = lk.reshape(B, nb, 2, h, M)
        lqb = lqr.reshape(B, nb, 2, h, M)
        vb = va.reshape(B, nb, 2, h, E)
        with torch.no_grad():
            p = lkb[:, :, 0].amax(dim=-2, keepdim=True)  # (B, nb, 1, M) max of first-half keys
        kf = torch.exp(lkb[:, :, 0] - p)  # (B, nb, h, M) keys of the first half, <= 1
        qf = torch.exp(lqb[:, :, 1] + p)  # (B, nb, h, M) queries of the second half, <= 1
        part = (qf @ kf.transpose(-1, -2)) @ vb[:, :, 0]  # (B, nb, h, E)
        out = out + torch.cat([torch.zeros_like(part), part], dim=2).reshape(B, C, E)
        s = h
    return out


def _chunk_stats(lq, lk, c_prev):
    # causal per-feature key maxima c_tm (B, C, M) and row stabiliser R_t (B, C)
    cc = torch.maximum(torch.cummax(lk, dim=1).values, c_prev[:, None, :])
    R = (lq + cc).amax(dim=-1)
    return cc, R


class _CausalExp(torch.autograd.Function):
    """Causal linear attention with O(chunk M e) memory in forward and backward.

    Inputs are the *scaled inputs* and a callable turning a chunk of them into log
    features, so no (L, M) tensor is ever saved: the backward recomputes the features
    chunk by chunk (one forward scan for the query gradients with the prefix state, one
    reverse scan for the key / value gradients with the suffix state of the queries).
    """

    @staticmethod
    def forward(ctx, xq, xk, va, keep, fmap, chunk):
        # xq (B, L, d), xk (B, L, d), va (B, L, E) masked rows zero, keep (B, L) bool
        B, L, _ = xq.shape
        E = va.shape[-1]
        M = fmap.n_out
        dt = xq.dtype
        S = torch.zeros(B, M, E, dtype=dt, device=xq.device)
        c = torch.full((B, M), _NEG, dtype=dt, device=xq.device)
        num = torch.empty(B, L, E, dtype=dt, device=xq.device)
        Rall = torch.empty(B, L, dtype=dt, device=xq.device)
        for lo in range(0, L, chunk):
            hi = lo + chunk
            lq = fmap.log_features(xq[:, lo:hi], "q")  # (B, C, M)
            lk = fmap.log_features(xk[:, lo:hi], "k")
            if keep is not None:
                lk = torch.where(keep[:, lo:hi, None], lk, _NEG)
            vc = va[:, lo:hi]
            cc, R = _chunk_stats(lq, lk, c)
            Rall[:, lo:hi] = R
            n = torch.exp(lq - R[..., None] + c[:, None, :]) @ S  # earlier chunks
            n += _intra_chunk(lq, lk, vc, R)
            num[:, lo:hi] = n
            c_new = cc[:, -1]  # (B, M)
            S.mul_(torch.exp(c - c_new)[..., None])
            S.add_(torch.exp(lk - c_new[:, None, :]).transpose(-1, -2) @ vc)
            c = c_new
        den = num[..., -1]
        out = _safe_div(num[..., :-1], den)  # (B, L, e)
        ctx.save_for_backward(xq, xk, va, keep if keep is not None else torch.empty(0),
                              out, den, Rall)
        ctx.has_keep = keep is not None
        ctx.fmap, ctx.chunk = fmap, chunk
        return out

    @staticmethod
    def backward(ctx, dout):
        xq, xk, va, keep, out, den, Rall = ctx.saved_tensors
        keep = keep if ctx.has_keep else None
        fmap, chunk = ctx.fmap, ctx.chunk
        B, L, _ = xq.shape
        E = va.shape[-1]
        M = fmap.n_out
        dt = xq.dtype
        ok = den > 0
        inv = torch.where(ok, 1.0 / torch.where(ok, den, torch.ones_like(den)),
                          torch.zeros_like(den))  # (B, L)
        # gradient w.r.t. the stabilised numerator [N, D]: g = [dO / D, -(dO . out) / D]
        g = torch.cat([dout * inv[..., None], (-(dout * out).sum(-1) * inv)[..., None]], -1)
        dxq = torch.zeros_like(xq)
        dxk = torch.zeros_like(xk)
        dva = torch.zeros_like(va)

        def feats(x, side, lo, hi, need):
            xc = x[:, lo:hi].detach().requires_grad_(need)
            lf = fmap.log_features(xc, side)
            if side == "k" and keep is not None:
                lf = torch.where(keep[:, lo:hi, None], lf, _NEG)
            return xc, lf

        # forward scan: query gradients through the prefix state
        with torch.enable_grad():
            S = torch.zeros(B, M, E, dtype=dt, device=xq.device)
            c = torch.full((B, M), _NEG, dtype=dt, device=xq.device)
            for lo in range(0, L, chunk):
                hi = lo + chunk
                R = Rall[:, lo:hi]
                xc, lq = feats(xq, "q", lo, hi, True)
                with torch.no_grad():
                    _, lk = feats(xk, "k", lo, hi, False)
                    qf = torch.exp(lq.detach() - R[..., None] + c[:, None, :])  # (B, C, M)
                    dlq = qf * (g[:, lo:hi] @ S.transpose(-1, -2))  # (B, C, M)
                (dx,) = torch.autograd.grad(lq, xc, dlq)
                dxq[:, lo:hi] += dx
                with torch.no_grad():
                    c_new = torch.maximum(c, lk.amax(dim=1))
                    S.mul_(torch.exp(c - c_new)[..., None])
                    S.add_(torch.exp(lk - c_new[:, None, :]).transpose(-1, -2) @ va[:, lo:hi])
                    c = c_new
            # reverse scan: key / value gradients through the suffix state of the queries,
            # G_m = sum_t exp(lq_tm - R_t + rho_m) g_t with rho_m = min_t (R_t - lq_tm)
            G = torch.zeros(B, M, E, dtype=dt, device=xq.device)
            rho = torch.full((B, M), _POS, dtype=dt, device=xq.device)
            starts = list(range(0, L, chunk))
            for lo in reversed(starts):
                hi = lo + chunk
                R = Rall[:, lo:hi]
                xqc, lq = feats(xq, "q", lo, hi, True)
                xkc, lk = feats(xk, "k", lo, hi, True)
                vc = va[:, lo:hi].detach().requires_grad_(True)
                with torch.no_grad():
                    kf = torch.exp(lk.detach() - rho[:, None, :])  # (B, C, M), <= 1
                    dv_inter = kf @ G  # (B, C, E)
                    dlk_inter = kf * (vc.detach() @ G.transpose(-1, -2))
                intra = _intra_chunk(lq, lk, vc, R)
                dxq_c, dxk_c, dv = torch.autograd.grad(
                    (intra, lk), (xqc, xkc, vc), (g[:, lo:hi], dlk_inter))
                dxq[:, lo:hi] += dxq_c
                dxk[:, lo:hi] += dxk_c
                dva[:, lo:hi] = dv + dv_inter
                with torch.no_grad():
                    valid = ok[:, lo:hi, None]  # rows with a visible key
                    gap = torch.where(valid, R[..., None] - lq.detach(), _POS)  # (B, C, M)
                    rho_new = torch.minimum(rho, gap.amin(dim=1))
                    qf = torch.where(valid, torch.exp(-gap + rho_new[:, None, :]), 0.0)
                    G.mul_(torch.exp(rho_new - rho)[..., None])
                    G.add_(qf.transpose(-1, -2) @ g[:, lo:hi])
                    rho = rho_new
        return dxq, dxk, dva, None, None, None


def causal_exp(xq, xk, va, keep, fmap, chunk: int):
    """Causal attention from affine-log features computed chunk by chunk.

    xq, xk (B, L, d) scaled inputs; va (B, L, E) values (masked rows zero; callers append
    a ones column for the normaliser as the last column); keep (B, L) bool or None; fmap
    has ``n_out`` and ``log_features(x, side)``; chunk a power of two. ``L`` is padded to
    a multiple of ``chunk`` with masked keys. Returns the normalised output (B, L, E - 1).
    """
    B, L, _ = xq.shape
    pad = (-L) % chunk
    if pad:
        keep_p = torch.ones(B, L, dtype=torch.bool, device=xq.device) if keep is None else keep
        keep = torch.cat([keep_p, torch.zeros(B, pad, dtype=torch.bool, device=xq.device)], 1)
        xq = torch.nn.functional.pad(xq, (0, 0, 0, pad))
        xk = torch.nn.functional.pad(xk, (0, 0, 0, pad))
        va = torch.nn.functional.pad(va, (0, 0, 0, pad))
    out = _CausalExp.apply(xq, xk, va, keep, fmap, chunk)
    return out[:, :L] if pad else out
