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
  maximum of the keys before the chunk (rescaled when it grows, as in online softmax).
  Inside a chunk, when the per-feature key maxima grow by at most ``G`` (60 in float32)
  over the chunk, one pivot ``c_ref = max(prefix, first key)`` (causal for every query of
  the chunk) serves a masked ``C x C`` score matrix and ``R_t`` is the bound
  ``max_m (lq_tm + c_end_m)``, within ``e^G`` of the causal maximum: a later key of the
  chunk changes ``R_t`` only as a common factor of numerator and denominator (exact
  cancellation; terms lost to underflow are below ``e^{G-87}`` of the row's largest).
  Otherwise (large jumps of the keys) the exact dyadic scheme runs: queries of the
  second half of every dyadic block see the keys of the first half through the maximum
  of those keys (all earlier than the queries), down to single positions, with the
  exact causal ``R_t``. No stabiliser can let a later token overflow, underflow or
  otherwise change an earlier output beyond rounding.
* causal backward: a forward scan (prefix state) gives the query gradients and every
  intra-chunk gradient (local autograd on recomputed chunk features); a reverse scan
  keeps ``G_m = sum_t exp(lq_tm - R_t + rho_m) g_t`` relative to
  ``rho_m = min_t (R_t - lq_tm)`` over later chunks (every factor ``<= 1`` because
  ``lk_jm <= R_t - lq_tm`` for ``j <= t``) for the key / value gradients.
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
def bidirectional_exp(fmap, x, y, va, keep=None):
    """Bidirectional attention with affine-log features (FAVOR# eq. 4).

    x (..., L, d), y (..., S, d) scaled inputs; va (..., S, e + 1) values with the
    normaliser column last (masked rows zero); keep (..., S) bool or None.
    Four passes over each (L, M) feature tensor: one matmul (row term and constants
    folded in), a max, and an in-place subtract and exp. Returns (..., L, e).
    """
    lk = fmap.log_features_fused(y, "k", keep=keep)  # (..., S, M)
    with torch.no_grad():
        c = lk.amax(dim=-2)  # (..., M) per-feature key max
    pk = lk.sub_(c[..., None, :]).exp_()  # (..., S, M), <= 1
    kv = pk.transpose(-1, -2) @ va  # (..., M, e + 1)
    lq = fmap.log_features_fused(x, "q", shift=c)  # (..., L, M): lq + c
    with torch.no_grad():
        r = lq.amax(dim=-1, keepdim=True)  # (..., L, 1)
    pq = lq.sub_(r).exp_()  # (..., L, M), row max 1
    num = pq @ kv  # (..., L, e + 1)
    return _safe_div(num[..., :-1], num[..., -1])


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
def _levels(lq, lk):
    """Dyadic split of a chunk: for block sizes s = C, C/2, ..., 2 the queries of the second
    half of every block see the keys of the first half through their per-feature maximum
    ``p`` (positions before the queries, so causal).

    lq, lk (B, C, M) contiguous. Returns a list of ``(h, nb, p, z)`` with ``p`` (B, nb, 1, M)
    detached and ``z = lq_B + p`` (B, nb, h, M) for the second-half queries.
    """
    B, C, M = lq.shape
    out = []
    s = C
    while s >= 2:
        h, nb = s // 2, C // s
        with torch.no_grad():
            p = lk.view(B, nb, 2, h, M)[:, :, 0].amax(dim=-2, keepdim=True)  # (B, nb, 1, M)
        z = lq.view(B, nb, 2, h, M)[:, :, 1] + p  # (B, nb, h, M)
        out.append((h, nb, p, z))
        s = h
    return out


def _intra(lq, lk, va, R, levels=None, zd=None):
    """Causal numerator inside one chunk: sum over keys j <= t of the chunk.

    lq, lk (B, C, M) (masked keys: lk = -1e30 and va rows 0), va (B, C, E), R (B, C)
    the causal row stabiliser (``R_t >= lq_tm + lk_jm`` for all j <= t). Every factor is
    ``<= 1``. ``levels`` / ``zd = lq + lk`` may be passed in (then consumed in place).
    Returns (B, C, E).
    """
    B, _, M = lq.shape
    E = va.shape[-1]
    if levels is None:
        levels = _levels(lq, lk)
    zd = lq + lk if zd is None else zd
    # diagonal terms (B, C, E); in-place exps are autograd-safe here (fresh tensors)
    out = zd.sub_(R[..., None]).exp_().sum(-1, keepdim=True) * va
    for h, nb, p, z in levels:
        kf = (lk.view(B, nb, 2, h, M)[:, :, 0] - p).exp_()  # (B, nb, h, M) <= 1
        qf = z.sub_(R.view(B, nb, 2, h)[:, :, 1, :, None]).exp_()  # (B, nb, h, M) <= 1
        vA = va.view(B, nb, 2, h, E)[:, :, 0]  # (B, nb, h, E)
        if h == 1:  # pairs (2i, 2i + 1): elementwise, no tiny matmuls
            part = (qf * kf).sum(-1, keepdim=True) * vA
        else:
            part = (qf @ kf.transpose(-1, -2)) @ vA  # (B, nb, h, E)
        out.view(B, nb, 2, h, E)[:, :, 1] += part
    return out


def _row_stabiliser(lq, zd, levels, c_prev):
    """``R_t = max_m (lq_tm + max_{j <= t} lk_jm)`` from the pieces (no cumulative max):
    the prefix term ``lq + c_prev``, the diagonal ``zd = lq + lk`` and every level's ``z``.
    Returns (R (B, C), z0 = lq + c_prev)."""
    B = lq.shape[0]
    z0 = lq + c_prev[:, None, :]
    R = torch.maximum(z0.amax(dim=-1), zd.amax(dim=-1))  # (B, C)
    for h, nb, _, z in levels:
        Rv = R.view(B, nb, 2, h)[:, :, 1]
        torch.maximum(Rv, z.amax(dim=-1), out=Rv)
    return R, z0


def _growth_bound(dtype) -> float:
    # largest in-chunk growth of the key maxima for the one-pivot path: factors stay below
    # e^G and terms lost to underflow are below e^{G - 87} (float32) of the row maximum
    return 60.0 if dtype in (torch.float32, torch.float16, torch.bfloat16) else 500.0


def _chunk_pivots(lk, c_prev, G):
    """Pivot of the one-pivot path for a chunk, or None where keys grow too much.

    ``c_ref = max(c_prev, lk_0)`` (prefix and the first key: causal for every query of the
    chunk), ``c_end = max(c_prev, max_j lk_j)``. The path is taken when
    ``max(c_end - c_ref) <= G``. Returns (c_ref, c_end) (B, M) or None.
    """
    c_end = torch.maximum(c_prev, lk.amax(dim=1))
    c_ref = torch.maximum(c_prev, lk[:, 0])
    if float((c_end - c_ref).amax()) > G:
        return None
    return c_ref, c_end


def _intra_one_pivot(lq, lk, va, R, c_ref):
    """Intra-chunk numerator with one causal pivot ``c_ref`` (see :func:`_chunk_pivots`):
    ``(tril(Q K^T)) v`` with ``Q = exp(lq - R + c_ref) <= 1``, ``K = exp(lk - c_ref) <= e^G``.
    lq, lk (B, C, M), va (B, C, E), R (B, C), c_ref (B, M). Autograd-safe."""
    qf = (lq - R[..., None]).add_(c_ref[:, None, :]).exp_()
    kf = (lk - c_ref[:, None, :]).exp_()
    return (qf @ kf.transpose(-1, -2)).tril_() @ va


class _CausalExp(torch.autograd.Function):
    """Causal linear attention with O(chunk M e) memory in forward and backward.

    Inputs are the *scaled inputs* and a feature object turning a chunk of them into
    log features, so no (L, M) tensor is ever saved: the backward recomputes the features
    chunk by chunk (a forward scan with the prefix state for the query gradients and all
    intra-chunk gradients, a reverse scan with the suffix state of the queries for the
    key / value gradients of earlier chunks). Saved for backward: the inputs, the output
    (B, L, e) and two (B, L) row statistics.

    Intra-chunk terms: where the per-feature key maxima grow by at most ``G`` inside the
    chunk (the common case), one causal pivot (prefix and first key) and a masked
    ``C x C`` score matrix; otherwise the exact dyadic scheme of :func:`_intra`. The row
    stabiliser is then ``R_t = max_m (lq_tm + c_end_m)``, an upper bound within ``e^G``
    of the causal one: later keys of the chunk change ``R_t`` (a common factor of
    numerator and denominator, exactly cancelling) but can neither overflow nor
    underflow the output of ``t``.
    """

    @staticmethod
    def forward(ctx, xq, xk, va, keep, feat, chunk):
        # xq (B, L, d), xk (B, L, d), va (B, L, E) masked rows zero, keep (B, L) bool
        B, L, _ = xq.shape
        E = va.shape[-1]
        M = feat.n_out
        dt = xq.dtype
        G = _growth_bound(dt)
        S = torch.zeros(B, M, E, dtype=dt, device=xq.device)  # prefix state, rel. to c
        c = torch.full((B, M), _NEG, dtype=dt, device=xq.device)  # prefix key maxima
        num = torch.empty(B, L, E, dtype=dt, device=xq.device)
        Rall = torch.empty(B, L, dtype=dt, device=xq.device)
        for lo in range(0, L, chunk):
            hi = lo + chunk
            kc = None if keep is None else keep[:, lo:hi]
            lq = feat.log_features(xq[:, lo:hi], "q", None)  # (B, C, M)
            lk = feat.log_features(xk[:, lo:hi], "k", kc)  # (B, C, M), masked -1e30
            vc = va[:, lo:hi]
            piv = _chunk_pivots(lk, c, G)
            if piv is not None:
                c_ref, c_new = piv
                R = (lq + c_new[:, None, :]).amax(dim=-1)  # (B, C)
                qf = (lq - R[..., None]).add_(c_ref[:, None, :]).exp_()  # (B, C, M) <= 1
                kf = lk.sub_(c_ref[:, None, :]).exp_()  # (B, C, M) <= e^G
                n = qf @ (S * torch.exp(c - c_ref)[..., None])  # earlier chunks
                n.baddbmm_((qf @ kf.transpose(-1, -2)).tril_(), vc)  # this chunk
                S.mul_(torch.exp(c - c_new)[..., None])
                S.baddbmm_(kf.mul_(torch.exp(c_ref - c_new)[:, None, :]).transpose(-1, -2), vc)
            else:
                levels = _levels(lq, lk)
                zd = lq + lk
                R, z0 = _row_stabiliser(lq, zd, levels, c)
                n = z0.sub_(R[..., None]).exp_() @ S  # keys of earlier chunks
                n += _intra(lq, lk, vc, R, levels, zd)
                c_new = torch.maximum(c, lk.amax(dim=1))  # (B, M)
                S.mul_(torch.exp(c - c_new)[..., None])
                S.baddbmm_(lk.sub_(c_new[:, None, :]).exp_().transpose(-1, -2), vc)
            Rall[:, lo:hi] = R
            num[:, lo:hi] = n
            c = c_new
        den = num[..., -1]
        out = _safe_div(num[..., :-1], den)  # (B, L, e)
        ctx.save_for_backward(
            xq, xk, va, keep if keep is not None else torch.empty(0), out, den, Rall
        )
        ctx.has_keep = keep is not None
        ctx.feat, ctx.chunk = feat, chunk
        return out

    @staticmethod
    def backward(ctx, dout):
        xq, xk, va, keep, out, den, Rall = ctx.saved_tensors
        keep = keep if ctx.has_keep else None
        feat, chunk = ctx.feat, ctx.chunk
        B, L, _ = xq.shape
        E = va.shape[-1]
        M = feat.n_out
        dt = xq.dtype
        G = _growth_bound(dt)
        ok = den > 0
        inv = torch.where(
            ok, 1.0 / torch.where(ok, den, torch.ones_like(den)), torch.zeros_like(den)
        )  # (B, L)
        # gradient w.r.t. the stabilised numerator [N, D]: g = [dO / D, -(dO . out) / D]
        g = torch.cat([dout * inv[..., None], (-(dout * out).sum(-1) * inv)[..., None]], -1)
        dxq = torch.empty_like(xq)
        dxk = torch.empty_like(xk)
        dva = torch.empty_like(va)

        def feats(x, side, lo, hi):
            xc = x[:, lo:hi].detach().requires_grad_(True)
            kc = None if (keep is None or side == "q") else keep[:, lo:hi]
            return xc, feat.log_features(xc, side, kc)

        # float32 / float64 as the forward, even when backward() is called under autocast
        no_autocast = torch.autocast(xq.device.type, enabled=False)
        with torch.enable_grad(), no_autocast:
            # forward scan: query gradients through the prefix state, intra-chunk gradients
            S = torch.zeros(B, M, E, dtype=dt, device=xq.device)
            c = torch.full((B, M), _NEG, dtype=dt, device=xq.device)
            for lo in range(0, L, chunk):
                hi = lo + chunk
                R, gc = Rall[:, lo:hi], g[:, lo:hi]
                xqc, lq = feats(xq, "q", lo, hi)
                xkc, lk = feats(xk, "k", lo, hi)
                vc = va[:, lo:hi].detach().requires_grad_(True)
                with torch.no_grad():
                    lkd = lk.detach()
                    piv = _chunk_pivots(lkd, c, G)
                    qf = (lq.detach() - R[..., None]).add_(c[:, None, :]).exp_()  # (B, C, M)
                    dlq = qf.mul_(gc @ S.transpose(-1, -2))  # (B, C, M)
                if piv is not None:
                    intra = _intra_one_pivot(lq, lk, vc, R, piv[0])
                else:
                    intra = _intra(lq, lk, vc, R)
                dxq[:, lo:hi], dxk[:, lo:hi], dva[:, lo:hi] = torch.autograd.grad(
                    (intra, lq), (xqc, xkc, vc), (gc, dlq)
                )
                with torch.no_grad():
                    c_new = torch.maximum(c, lkd.amax(dim=1))
                    S.mul_(torch.exp(c - c_new)[..., None])
                    S.baddbmm_((lkd - c_new[:, None, :]).exp_().transpose(-1, -2), va[:, lo:hi])
                    c = c_new
            # reverse scan: key / value gradients from the queries of later chunks through
            # G_m = sum_t exp(lq_tm - R_t + rho_m) g_t with rho_m = min_t (R_t - lq_tm) over
            # those chunks (every factor <= 1 since lk_jm <= R_t - lq_tm for j <= t)
            Gs = torch.zeros(B, M, E, dtype=dt, device=xq.device)
            rho = torch.full((B, M), _POS, dtype=dt, device=xq.device)
            for lo in reversed(range(0, L, chunk)):
                hi = lo + chunk
                R = Rall[:, lo:hi]
                if lo + chunk < L:
                    xkc, lk = feats(xk, "k", lo, hi)
                    with torch.no_grad():
                        kf = (lk.detach() - rho[:, None, :]).exp_()  # (B, C, M), <= 1
                        dva[:, lo:hi] += kf @ Gs  # (B, C, E)
                        dlk = kf.mul_(va[:, lo:hi] @ Gs.transpose(-1, -2))
                    (dx,) = torch.autograd.grad(lk, xkc, dlk)
                    dxk[:, lo:hi] += dx
                if lo == 0:
                    break
                with torch.no_grad():
                    lq = feat.log_features(xq[:, lo:hi], "q", None)
                    valid = ok[:, lo:hi, None]  # rows with a visible key
                    gap = torch.where(valid, R[..., None] - lq, _POS)  # (B, C, M)
                    rho_new = torch.minimum(rho, gap.amin(dim=1))
                    qf = torch.where(valid, (rho_new[:, None, :] - gap).exp_(), 0.0)
                    Gs.mul_(torch.exp(rho_new - rho)[..., None])
                    Gs.baddbmm_(qf.transpose(-1, -2), g[:, lo:hi])
                    rho = rho_new
        return dxq, dxk, dva, None, None, None


def causal_exp(xq, xk, va, keep, feat, chunk: int):
    """Causal attention from log features computed chunk by chunk.

    xq, xk (B, L, d) scaled inputs; va (B, L, E) values with the normaliser column last
    (masked rows zero); keep (B, L) bool or None; ``feat`` has ``n_out`` and
    ``log_features(x, side, keep)`` (masked keys -> -1e30); chunk a power of two. ``L`` is
    padded to a multiple of ``chunk`` with masked keys. Returns (B, L, E - 1).
    """
    B, L, _ = xq.shape
    pad = (-L) % chunk
    if pad:
        keep_p = torch.ones(B, L, dtype=torch.bool, device=xq.device) if keep is None else keep
        keep = torch.cat([keep_p, torch.zeros(B, pad, dtype=torch.bool, device=xq.device)], 1)
        xq = torch.nn.functional.pad(xq, (0, 0, 0, pad))
        xk = torch.nn.functional.pad(xk, (0, 0, 0, pad))
        va = torch.nn.functional.pad(va, (0, 0, 0, pad))
    out = _CausalExp.apply(xq, xk, va, keep, feat, chunk)
    return out[:, :L] if pad else out
