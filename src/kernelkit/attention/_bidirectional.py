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
  exactly 1: neither overflow nor a vanishing denominator at any input norm.

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

__all__ = ["bidirectional_stream", "block_rows"]

_NEG = -1e30  # finite "minus infinity": log features of masked keys
#: target bytes of one (N, rows, M) block of features (about half an L2 cache on CPU)
_CPU_BLOCK_BYTES = 1 << 20
_GPU_BLOCK_BYTES = 1 << 26


def block_rows(N: int, M: int, itemsize: int, device) -> int:
    """Rows per block: a power of two in [16, 4096] with ``N rows M itemsize`` about
    ``_CPU_BLOCK_BYTES`` (``_GPU_BLOCK_BYTES`` on accelerators, where launches are the
    cost)."""
    target = _CPU_BLOCK_BYTES if torch.device(device).type == "cpu" else _GPU_BLOCK_BYTES
    rows = max(1, target // max(1, N * M * itemsize))
    return int(min(4096, max(16, 1 << (rows.bit_length() - 1))))


class _Side:
    """One side's weights: ``[W; 1]`` (..., d + 1, M) for ``[x, row] @ [W; 1]``, the input
    transform ``B`` of the row term (None, (..., d) diagonal or (..., d, d)), and the
    ``B^T B`` of the gradient of the row term."""

    def __init__(self, W, B, s):
        # W (d, M) shared or (N, d, M) per batch element and head
        ones = torch.ones((*W.shape[:-2], 1, W.shape[-1]), dtype=W.dtype, device=W.device)
        self.W = W
        self.Wa = torch.cat([W, ones], dim=-2)  # (..., d + 1, M)
        self.s = s
        self.B = B
        self.diag = B is not None and B.dim() == W.dim() - 1
        if B is None:
            self.BtB = None
        elif self.diag:
            self.BtB = B * B  # (..., d)
        else:
            self.BtB = B.transpose(-1, -2) @ B  # (..., d, d), symmetric

    def _bx(self, x):
        # B x for x (N, b, d)
        if self.B is None:
            return x
        if self.diag:
            return x * (self.B if self.B.dim() == 1 else self.B[:, None, :])
        return x @ self.B.transpose(-1, -2)

    def row(self, x, keep=None):
        """Row term ``-|B x|^2 / 2`` (N, b, 1) of scaled ``x`` (N, b, d); masked rows
        ``-1e30`` (their log features are then ``-1e30`` up to rounding)."""
        bx = self._bx(x)
        row = (bx * bx).sum(-1, keepdim=True).mul_(-0.5)
        if keep is not None:
            row = torch.where(keep[..., None], row, torch.full_like(row, _NEG))
        return row

    def grad_input(self, dl, x):
        """``d/dq`` of ``sum dl * log features`` for a block of ``q`` with ``x = s q``:
        ``s (dl W^T - (sum_m dl_m) B^T B x)``; dl (N, b, M), x (N, b, d)."""
        dx = dl @ self.W.transpose(-1, -2)  # (N, b, d)
        if self.BtB is None:
            btbx = x
        elif self.diag:
            btbx = x * (self.BtB if self.BtB.dim() == 1 else self.BtB[:, None, :])
        else:
            btbx = x @ self.BtB
        dx.sub_(dl.sum(-1, keepdim=True) * btbx)
        return dx.mul_(self.s)


def _values(v, keep):
    # [v, 1] (N, b, e + 1), masked rows zero
    va = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    if keep is not None:
        va.mul_(keep[..., None].to(va.dtype))
    return va


def _key_pass(k, v, keep, side, rows):
    """Online key state: ``K'`` (N, M), the per-feature maximum of the keys' log features
    (without ``c``), and ``[S, z]`` (N, M, e + 1) relative to ``exp(K')``."""
    S = k.shape[1]
    kmax = state = None
    for lo in range(0, S, rows):
        hi = min(lo + rows, S)
        kb = None if keep is None else keep[:, lo:hi]
        y = k[:, lo:hi] * side.s  # (N, b, d)
        lk = torch.cat([y, side.row(y, kb)], dim=-1) @ side.Wa  # (N, b, M)
        bmax = lk.amax(dim=1)  # (N, M)
        if state is None:
            kmax = bmax
        else:
            new = torch.maximum(kmax, bmax)
            state.mul_(torch.exp(kmax - new)[..., None])  # <= 1
            kmax = new
        pk = lk.sub_(kmax[:, None, :]).exp_()  # (N, b, M), <= 1
        va = _values(v[:, lo:hi], kb)  # (N, b, e + 1)
        if state is None:
            state = pk.transpose(1, 2) @ va  # (N, M, e + 1)
        else:
            state.baddbmm_(pk.transpose(1, 2), va)
    return kmax, state


def _query_weights(side, shift):
    # [W; 1; shift] (N, d + 2, M) for [x, row, 1]
    N = shift.shape[0]
    Wa = torch.broadcast_to(side.Wa, (N, *side.Wa.shape[-2:]))
    return torch.cat([Wa, shift[:, None, :]], dim=-2)


def _query_probs(q, lo, hi, side, Wq):
    """Stabilised query factors ``exp(lq + 2c + K' - R)`` (N, b, M) (row maximum exactly
    1) and the scaled block ``x`` (N, b, d)."""
    x = q[:, lo:hi] * side.s
    row = side.row(x)
    lq = torch.cat([x, row, torch.ones_like(row)], dim=-1) @ Wq  # (N, b, M)
    return lq.sub_(lq.amax(dim=-1, keepdim=True)).exp_(), x


class _BidirectionalExp(torch.autograd.Function):
    """Streaming bidirectional attention (module docstring); saves only the inputs, the
    output, the (N, M, e + 1) key state, its (N, M) maximum, the (N, d + 2, M) query
    weights and the (N, L) denominators."""

    @staticmethod
    def forward(ctx, q, k, v, keep, sides, c, rows):
        # q (N, L, d), k (N, S, d), v (N, S, e), keep (N, S) bool or None
        sq, sk = sides
        N, L, _ = q.shape
        e = v.shape[-1]
        kmax, state = _key_pass(k, v, keep, sk, rows)
        shift = kmax if c is None else kmax + 2.0 * c  # (N, M)
        Wq = _query_weights(sq, shift)  # (N, d + 2, M)
        out = torch.empty(N, L, e, dtype=q.dtype, device=q.device)
        den = torch.empty(N, L, dtype=q.dtype, device=q.device)
        for lo in range(0, L, rows):
            hi = min(lo + rows, L)
            pq, _ = _query_probs(q, lo, hi, sq, Wq)
            num = pq @ state  # (N, b, e + 1)
            d = num[..., e]
            den[:, lo:hi] = d
            safe = torch.where(d > 0, d, torch.ones_like(d))  # no visible key: zeros
            torch.div(num[..., :e], safe[..., None], out=out[:, lo:hi])
        ctx.save_for_backward(q, k, v, keep, kmax, state, Wq, out, den)
        ctx.sides, ctx.rows = sides, rows
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, keep, kmax, state, Wq, out, den = ctx.saved_tensors
        sq, sk = ctx.sides
        rows = ctx.rows
        L, S, e = q.shape[1], k.shape[1], v.shape[-1]
        ok = den > 0
        inv = torch.where(ok, 1.0 / torch.where(ok, den, torch.ones_like(den)), 0.0)  # (N, L)
        dq = torch.empty_like(q)
        dstate = torch.zeros_like(state)  # (N, M, e + 1)
        for lo in range(0, L, rows):
            hi = min(lo + rows, L)
            pq, x = _query_probs(q, lo, hi, sq, Wq)
            ib = inv[:, lo:hi, None]
            g = torch.cat(
                [dout[:, lo:hi] * ib, -(dout[:, lo:hi] * out[:, lo:hi]).sum(-1, keepdim=True) * ib],
                dim=-1,
            )  # (N, b, e + 1)
            dstate.baddbmm_(pq.transpose(1, 2), g)
            dl = pq.mul_(g @ state.transpose(1, 2))  # (N, b, M)
            dq[:, lo:hi] = sq.grad_input(dl, x)
        dk = torch.empty_like(k)
        dv = torch.empty_like(v)
        for lo in range(0, S, rows):
            hi = min(lo + rows, S)
            kb = None if keep is None else keep[:, lo:hi]
            y = k[:, lo:hi] * sk.s
            lk = torch.cat([y, sk.row(y, kb)], dim=-1) @ sk.Wa  # (N, b, M)
            pk = lk.sub_(kmax[:, None, :]).exp_()  # (N, b, M), <= 1
            va = _values(v[:, lo:hi], kb)
            dva = pk @ dstate  # (N, b, e + 1)
            dv[:, lo:hi] = dva[..., :e] if kb is None else dva[..., :e] * kb[..., None]
            dl = pk.mul_(va @ dstate.transpose(1, 2))  # (N, b, M)
            dk[:, lo:hi] = sk.grad_input(dl, y)
        return dq, dk, dv, None, None, None, None


def bidirectional_stream(q, k, v, fmap, scale: float, keep=None, rows=None):
    """Bidirectional FAVOR attention (FAVOR# eq. 4) streamed over blocks of rows.

    q (N, L, d), k (N, S, d), v (N, S, e) *unscaled* inputs of one dtype; ``fmap`` a
    :class:`~kernelkit.attention._maps.LogFeatureMap` whose tensors have no batch dims
    or a leading ``N``; ``scale`` the attention scale (inputs are multiplied by
    ``sqrt(scale)`` block by block); keep (N, S) bool or None (False = padded key).
    Rows without a visible key give zeros. Returns (N, L, e).
    """
    s = float(scale) ** 0.5
    sides = (_Side(fmap.W_q, fmap.B_q, s), _Side(fmap.W_k, fmap.B_k, s))
    if rows is None:
        rows = block_rows(q.shape[0], fmap.n_out, q.element_size(), q.device)
    return _BidirectionalExp.apply(q, k, v, keep, sides, fmap.c, int(rows))
