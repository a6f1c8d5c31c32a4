"""Streaming bidirectional attention with positive affine-log features (torch).

Per batch element and head, with queries ``q`` (L, d), keys ``k`` (S, d), values ``v``
(S, e), scaled inputs ``x = s q``, ``y = s k`` (``s = sqrt(scale)``) and log features

    lq_tm = x_t . Wq_m + c_m - |B_q x_t|^2 / 2,     lk_jm = y_j . Wk_m + c_m - |B_k y_j|^2 / 2

(:class:`kernelkit.attention._maps.LogFeatureMap`), the output is FAVOR# eq. 4:

    out_t = sum_m exp(lq_tm) S_m / sum_m exp(lq_tm) z_m,
    S_m = sum_j exp(lk_jm) v_j,   z_m = sum_j exp(lk_jm).

Nothing of size (L, M) is formed for the whole sequence: keys and queries are read in
blocks of rows (:func:`block_rows`), in the forward and in the backward pass.

Stabilisers (exactly cancelling, so detached):

* keys: the per-feature key maximum ``K_m = max_j lk_jm`` is kept online, as in online
  softmax: the state ``[S, z]`` is held relative to ``exp(K_m)`` and rescaled by
  ``exp(K_old - K_new) <= 1`` when a block raises it. Every key factor is ``<= 1``.
* queries: ``K`` moves to the query side and the row maximum ``R_t = max_m (lq_tm + K_m)``
  is subtracted, so every query factor is ``<= 1`` and the largest term of every row is
  exactly 1: neither overflow nor a vanishing denominator at any input norm. The query
  row term ``-|B_q x_t|^2 / 2`` is the same for every feature of the row, so this
  subtraction removes it exactly: it is never computed (nor its gradient, which is zero).

The constant ``c`` enters the key side only through ``K`` (a per-feature constant
cancels against its maximum), so the keys are computed without it and the query side
adds ``2 c + K'`` with ``K'`` the maximum of the keys' log features without ``c``.

Backward (exact: the output does not depend on the stabilisers): with
``g_t = [dout_t / D_t, -(dout_t . out_t) / D_t]`` the gradient of the stabilised
numerator ``[N_t, D_t]``, a pass over query blocks gives ``dS = sum_t p_t^T g_t`` and
``dlq = p o (g [S, z]^T)``; a pass over key blocks gives ``d[v, 1] = p_k dS`` and
``dlk = p_k o ([v, 1] dS^T)``. The log features are affine in the inputs up to the row
term, so ``dx = dl W^T - (sum_m dl_m) B^T B x`` in closed form (no autograd graph).
"""

from __future__ import annotations

import torch

from .._backend.cpu_cache import l2_cache_bytes
from .._backend.exponential import exp_
from ._linear import ACCELERATOR_BLOCK_BYTES, autocast_off, first_order_only

__all__ = ["bidirectional_stream", "block_rows", "cpu_block_bytes"]

_NEG = -1e30  # finite "minus infinity": log features of masked keys
#: bounds of the CPU block: 1 MiB where the L2 is smaller or unknown (the fixed size used
#: before, chosen on an earlier 2-core host), and at most 8 MiB
_CPU_BLOCK_MIN, _CPU_BLOCK_MAX = 1 << 20, 1 << 23


def cpu_block_bytes(l2: int | None) -> int:
    """Target bytes of one (N, rows, M) block of features on the CPU for ``l2`` bytes of
    L2 cache per CPU (:func:`kernelkit._backend.cpu_cache.l2_cache_bytes`; None: unknown):
    ``l2`` within [1 MiB, 8 MiB]. On a 2-core host
    with 2 MiB of L2 per core, 2 MiB blocks made bidirectional attention 10-15% faster
    than 1 MiB ones from L = 1024 to 65536 (forward and forward + backward), and 8 MiB
    blocks slower again at L = 4096."""
    if l2 is None:
        return _CPU_BLOCK_MIN
    return int(min(_CPU_BLOCK_MAX, max(_CPU_BLOCK_MIN, l2)))


#: target bytes of one (N, rows, M) block of features on the CPU, read once at import (a
#: constant to compiled graphs)
_CPU_BLOCK_BYTES = cpu_block_bytes(l2_cache_bytes())


def block_rows(N: int, M: int, itemsize: int, device) -> int:
    """Rows per block: a power of two in [16, 4096] with ``N rows M itemsize`` about
    ``_CPU_BLOCK_BYTES`` (one CPU's share of the L2 cache, :func:`cpu_block_bytes`;
    ``ACCELERATOR_BLOCK_BYTES`` on accelerators, where launches are the cost)."""
    target = _CPU_BLOCK_BYTES if torch.device(device).type == "cpu" else ACCELERATOR_BLOCK_BYTES
    rows = max(1, target // max(1, N * M * itemsize))
    return int(min(4096, max(16, 1 << (rows.bit_length() - 1))))


class _Side:
    """One side's weights and row terms.

    ``Wa = [s W; 1]`` (..., d + 1, M) for ``[u, row] @ Wa`` with *unscaled* rows ``u``
    (the scale ``s`` folded into ``W``); the row term ``-s^2 |B u|^2 / 2`` is computed
    once for the whole sequence, (N, L) with masked rows ``-1e30``: a norm reduction for
    ``B`` None, chunks of :data:`_ROW_CHUNK` rows otherwise; ``s^2 B^T B`` serves the
    gradient of the row term. ``row_term=False`` (queries: the row maximum removes it)
    keeps only ``s W``.
    """

    def __init__(self, W, B, s, u, keep, row_term=True, check=False):
        # W (d, M) shared or (N, d, M) per batch element and head; u (N, L, d); keep (N, L)
        self.Ws = W * s
        self.rows = None
        if not row_term:
            return
        ones = torch.ones((*W.shape[:-2], 1, W.shape[-1]), dtype=W.dtype, device=W.device)
        self.Wa = torch.cat([self.Ws, ones], dim=-2)  # (..., d + 1, M)
        self.s2 = s * s
        self.B = B
        self.diag = B is not None and B.dim() == W.dim() - 1
        u = u.detach()
        if B is None:
            rows = torch.linalg.vector_norm(u, dim=-1).square_().mul_(-0.5 * self.s2)
            self.BtB = None
        else:
            if self.diag:
                self.BtB = B * B * self.s2  # (..., d)
            else:
                self.BtB = (B.transpose(-1, -2) @ B) * self.s2  # (..., d, d), symmetric
            rows = _transformed_rows(u, B, self.diag, -0.5 * self.s2)
        if check:  # before padding is applied
            from .functional import _all_finite, _check_masked_keys, _raise_not_finite

            if not _all_finite(rows):
                _raise_not_finite("the squared norm of a key", k=u)
            if keep is not None:  # visible keys all below the masked keys' -1e30
                _check_masked_keys(rows, keep, k=u)
        self.rows = rows if keep is None else torch.where(keep, rows, _NEG)  # (N, L)

    def row(self, lo, hi):
        """Row term (N, b, 1) of the rows ``lo:hi``; masked rows ``-1e30`` (their log
        features are then ``-1e30`` up to rounding)."""
        return self.rows[:, lo:hi, None]

    def grad_input(self, dl, u):
        """Gradient w.r.t. unscaled rows ``u`` (N, b, d) of ``sum dl * log features``:
        ``dl (s W)^T - (sum_m dl_m) s^2 B^T B u`` (the first term only without a row
        term); dl (N, b, M)."""
        du = dl @ self.Ws.transpose(-1, -2)  # (N, b, d)
        if self.rows is None:
            return du
        total = dl.sum(-1, keepdim=True)  # (N, b, 1)
        if self.BtB is None:
            return du.sub_(u * total.mul_(self.s2))
        if self.diag:
            btbu = u * (self.BtB if self.BtB.dim() == 1 else self.BtB[:, None, :])
        else:
            btbu = u @ self.BtB
        return du.sub_(btbu.mul_(total))


#: rows per chunk of the row-term pass of transformed inputs (a (N, rows, d) temporary)
_ROW_CHUNK = 4096


def _transformed_rows(u, B, diag, factor):
    """``factor |B u_t|^2`` (N, L) of u (N, L, d) in chunks of rows: for diagonal ``B`` one
    square and one product with ``B^2`` per chunk, else ``|u B^T|^2``."""
    N, L, _ = u.shape
    rows = torch.empty(N, L, dtype=u.dtype, device=u.device)
    if diag:
        w = (B * B * factor)[..., :, None]  # (d, 1) or (N, d, 1)
    for lo in range(0, L, _ROW_CHUNK):
        uc = u[:, lo : lo + _ROW_CHUNK]  # (N, c, d)
        if diag:
            rows[:, lo : lo + _ROW_CHUNK] = ((uc * uc) @ w)[..., 0]
        else:
            bu = uc @ B.transpose(-1, -2)
            rows[:, lo : lo + _ROW_CHUNK] = (bu * bu).sum(-1).mul_(factor)
    return rows


class _Blocks:
    """Row blocks of one call: ``[v, 1]`` blocks (masked rows zero) without a (S, e + 1)
    copy of the values, and the ones column of the query weights."""

    def __init__(self, v, keep, rows):
        N = v.shape[0]
        self.ones = torch.ones(N, rows, 1, dtype=v.dtype, device=v.device)
        self.keep = None if keep is None else keep[..., None].to(v.dtype)  # (N, S, 1)
        self.v = v

    def values(self, lo, hi):
        # [v, 1] (N, b, e + 1)
        va = torch.cat([self.v[:, lo:hi], self.ones[:, : hi - lo]], dim=-1)
        return va if self.keep is None else va.mul_(self.keep[:, lo:hi])


def _key_pass(k, side, blocks, rows):
    """Online key state: ``K'`` (N, M), the per-feature maximum of the keys' log features
    (without ``c``), and ``[S, z]`` (N, M, e + 1) relative to ``exp(K')``."""
    S = k.shape[1]
    kmax = state = None
    for lo in range(0, S, rows):
        hi = min(lo + rows, S)
        u = k[:, lo:hi]  # (N, b, d)
        lk = torch.cat([u, side.row(lo, hi)], dim=-1) @ side.Wa  # (N, b, M)
        bmax = lk.amax(dim=1)  # (N, M)
        if state is None:
            kmax = bmax
        else:
            new = torch.maximum(kmax, bmax)
            state.mul_(torch.exp(kmax - new)[..., None])  # <= 1
            kmax = new
        pk = exp_(lk.sub_(kmax[:, None, :]))  # (N, b, M), <= 1
        va = blocks.values(lo, hi)  # (N, b, e + 1)
        if state is None:
            state = pk.transpose(1, 2) @ va  # (N, M, e + 1)
        else:
            state.baddbmm_(pk.transpose(1, 2), va)
    return kmax, state


def _query_probs(q, lo, hi, side, shift):
    """Stabilised query factors ``exp(lq + 2c + K' - R)`` (N, b, M) (row maximum exactly
    1; ``lq`` without its row term, which the maximum removes) and the block
    ``u = q[:, lo:hi]`` (N, b, d). shift (N, M) is ``2c + K'``."""
    u = q[:, lo:hi]
    N, _, d = u.shape
    Ws = torch.broadcast_to(side.Ws, (N, d, shift.shape[-1]))
    lq = torch.baddbmm(shift[:, None, :], u, Ws)  # (N, b, M)
    return exp_(lq.sub_(lq.amax(dim=-1, keepdim=True))), u


class _BidirectionalExp(torch.autograd.Function):
    """Streaming bidirectional attention (module docstring); saves only the inputs, the
    output, the (N, M, e + 1) key state, its (N, M) maximum, the (N, M) query shift and
    the (N, L) denominators."""

    @staticmethod
    def forward(ctx, q, k, v, keep, sides, c, rows):
        # q (N, L, d), k (N, S, d), v (N, S, e), keep (N, S) bool or None
        sq, sk = sides
        N, L, _ = q.shape
        e = v.shape[-1]
        blocks = _Blocks(v, keep, rows)
        kmax, state = _key_pass(k, sk, blocks, rows)
        shift = kmax if c is None else kmax + 2.0 * c  # (N, M)
        out = torch.empty(N, L, e, dtype=q.dtype, device=q.device)
        den = torch.empty(N, L, dtype=q.dtype, device=q.device)
        for lo in range(0, L, rows):
            hi = min(lo + rows, L)
            pq, _ = _query_probs(q, lo, hi, sq, shift)
            num = pq @ state  # (N, b, e + 1)
            d = num[..., e:]  # (N, b, 1)
            den[:, lo:hi] = d[..., 0]
            if keep is not None:  # a head without a visible key: zeros, not 0 / 0
                d = torch.where(d > 0, d, 1.0)
            # (without a mask every denominator is >= 1: the row maximum of the query
            # factors is 1 and every z_m >= 1, its key maximum's own term)
            torch.div(num[..., :e], d, out=out[:, lo:hi])
        ctx.save_for_backward(q, k, v, keep, kmax, state, shift, out, den)
        ctx.sides, ctx.rows, ctx.blocks = sides, rows, blocks
        return out

    @staticmethod
    def backward(ctx, dout):
        # in the forward's dtype, even when backward() is called under autocast (whose
        # bfloat16 / float16 products would otherwise meet the float32 state)
        with autocast_off(dout.device.type):
            return _BidirectionalExp._backward(ctx, dout)

    @staticmethod
    def _backward(ctx, dout):
        q, k, v, keep, kmax, state, shift, out, den = ctx.saved_tensors
        first_order_only(q, k, v)
        sq, sk = ctx.sides
        rows, blocks = ctx.rows, ctx.blocks
        L, S, e = q.shape[1], k.shape[1], v.shape[-1]
        ok = den > 0
        inv = torch.where(ok, 1.0 / torch.where(ok, den, torch.ones_like(den)), 0.0)  # (N, L)
        dq = torch.empty_like(q)
        dstate = torch.zeros_like(state)  # (N, M, e + 1)
        for lo in range(0, L, rows):
            hi = min(lo + rows, L)
            pq, u = _query_probs(q, lo, hi, sq, shift)
            ib = inv[:, lo:hi, None]
            g = torch.cat(
                [dout[:, lo:hi] * ib, -(dout[:, lo:hi] * out[:, lo:hi]).sum(-1, keepdim=True) * ib],
                dim=-1,
            )  # (N, b, e + 1)
            dstate.baddbmm_(pq.transpose(1, 2), g)
            dl = pq.mul_(g @ state.transpose(1, 2))  # (N, b, M)
            dq[:, lo:hi] = sq.grad_input(dl, u)
        dk = torch.empty_like(k)
        dv = torch.empty_like(v)
        for lo in range(0, S, rows):
            hi = min(lo + rows, S)
            kb = None if keep is None else keep[:, lo:hi]
            u = k[:, lo:hi]
            lk = torch.cat([u, sk.row(lo, hi)], dim=-1) @ sk.Wa  # (N, b, M)
            pk = exp_(lk.sub_(kmax[:, None, :]))  # (N, b, M), <= 1
            va = blocks.values(lo, hi)  # (N, b, e + 1)
            dva = pk @ dstate  # (N, b, e + 1)
            dv[:, lo:hi] = dva[..., :e] if kb is None else dva[..., :e] * kb[..., None]
            dl = pk.mul_(va @ dstate.transpose(1, 2))  # (N, b, M)
            dk[:, lo:hi] = sk.grad_input(dl, u)
        return dq, dk, dv, None, None, None, None


def bidirectional_stream(q, k, v, fmap, scale: float, keep=None, rows=None, check=False):
    """Bidirectional FAVOR attention (FAVOR# eq. 4) streamed over blocks of rows.

    q (N, L, d), k (N, S, d), v (N, S, e) *unscaled* inputs of one dtype; ``fmap`` a
    :class:`~kernelkit.attention._maps.LogFeatureMap` whose tensors have no batch dims
    or a leading ``N``; ``scale`` the attention scale (inputs are multiplied by
    ``sqrt(scale)`` block by block); keep (N, S) bool or None (False = padded key).
    Rows without a visible key give zeros. ``check``: raise where a key's squared norm
    is not finite (NaN / inf in ``k``, or an overflow that would silently drop the key).
    Returns (N, L, e).
    """
    s = float(scale) ** 0.5
    sides = (
        _Side(fmap.W_q, None, s, q, None, row_term=False),
        _Side(fmap.W_k, fmap.B_k, s, k, keep, check=check),
    )
    if rows is None:
        rows = block_rows(q.shape[0], fmap.n_out, q.element_size(), q.device)
    return _BidirectionalExp.apply(q, k, v, keep, sides, fmap.c, int(rows))
