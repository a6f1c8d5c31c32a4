"""Linear-attention kernels (torch): bidirectional and causal, with exact stabilisers.

Notation (per batch element and head): log features ``lq`` (L, M), ``lk`` (S, M),
values ``v`` (S, e). The attention output is

    out_t = sum_j W_tj v_j / sum_j W_tj,    W_tj = sum_m exp(lq_tm + lk_jm)

(FAVOR# eq. 4), with ``j`` over unmasked keys (and ``j <= t`` in causal mode). Adding a
constant to a query's row ``lq_t`` changes nothing, so the query features may leave out
their row term ``-|B x_t|^2 / 2`` (the fused features do): ``R_t`` below then lacks it too.

Stabilisers (all cancel exactly in the ratio; they are detached, which is exact since
the output does not depend on them):

* bidirectional (positive maps: :mod:`kernelkit.attention._bidirectional`, streamed): a
  per-feature key maximum ``c_m = max_j lk_jm`` is moved to the query side (``lk - c``,
  ``lq + c``), then the query row maximum ``R_t = max_m (lq_tm + c_m)`` is subtracted.
  Every factor is ``<= 1`` and the largest term of every row is exactly 1, so neither
  overflow nor a vanishing denominator is possible at any input norm.
* causal: the same with *causal* maxima, ``c_tm = max_{j <= t} lk_jm`` and
  ``R_t = max_m (lq_tm + c_tm)`` (the largest term among the keys a query may see).
  Keys of earlier chunks enter through a running state kept relative to the prefix
  maximum of the keys before the chunk (rescaled when it grows, as in online softmax).
  Inside a chunk, when the per-feature key maxima grow by at most ``G`` (60 in float32)
  over the chunk (growth ``c_end - max(prefix, first key)``, the first key being causal
  for every query of the chunk), the chunk's pivot is ``c_end = max(prefix, max_j lk_j)``:
  a masked ``C x C`` score matrix of ``Q = exp(lq - R + c_end) <= 1`` and ``K = exp(lk -
  c_end) <= 1``, and ``R_t = max_m (lq_tm + c_end_m)``, within ``e^G`` of the causal
  maximum: a later key of the chunk changes ``R_t`` and the pivot only as common
  factors of numerator and denominator (exact cancellation; terms lost to underflow are
  below ``e^{G-87}`` of the row's largest, as every factor is at least the term it
  carries). Otherwise (large jumps of the keys) the exact dyadic scheme runs: queries of
  the second half of every dyadic block see the keys of the first half through the
  maximum of those keys (all earlier than the queries), down to single positions, with
  the exact causal ``R_t``. No stabiliser can let a later token overflow, underflow or
  otherwise change an earlier output beyond rounding.
* chunks are processed in blocks: the features of a block come from one product, the
  chunks of a block are batched (scores, chunk states ``K^T v``), and the states are
  chained by one ``addcmul`` per chunk (CPU; on accelerators by prefix sums relative to
  the block's last pivot, :func:`_prefix_states`, where the block's pivots spread by at
  most ``G``); a block with a large key jump runs chunk by chunk (the one-pivot path
  where a chunk allows it, else the dyadic scheme). Blocks are cache-sized on the CPU
  and 64 MiB of features on accelerators (:func:`block_rows_for`).
* causal backward (analytic; the features are exponentials of affine maps): one pass over
  the blocks in reverse order, the features of each block recomputed once. The prefix
  side starts from the state and maxima the forward kept at the block's start (an
  (M, e + 1) state per block, ``M / block`` of the output's size; inference keeps none)
  and gives the query gradients and every intra-chunk gradient (``dA = tril(g v^T)``,
  ``dQ = dA K + g S^T``, ``dK = dA^T Q``, ``dv = A^T g``; local autograd in blocks with
  large key jumps); the suffix side keeps ``G_m = sum_t exp(lq_tm - R_t + rho_m) g_t``
  relative to ``rho_m = min_t (R_t - lq_tm)`` over later chunks (every factor ``<= 1``
  because ``lk_jm <= R_t - lq_tm`` for ``j <= t``) for the key / value gradients. ``dlq``
  and the summed ``dlk`` reach the inputs through the feature object's ``vjp`` (``dx = dl
  W^T - (sum_m dl_m) B^T B x``) or autograd on recomputed features.
"""

from __future__ import annotations

import contextlib
import math

import torch

from .._backend import exponential
from .._backend.exponential import exp_

__all__ = ["autocast_off", "bidirectional_plain", "causal_exp", "fit_chunk"]

exponential._cpu_exp2_faster()  # read the CPU build once, outside any traced graph

_NEG = -1e30  # finite "minus infinity" for maxima over masked / empty sets
_POS = 1e30


def autocast_off(device_type: str):
    """A context in which ``torch.autocast`` is off for ``device_type``, so that products
    run in their inputs' own dtype (float32 sums and states, not autocast's float16 /
    bfloat16); a null context where autocast is not on, or has no such device (``meta``,
    on which ``torch.autocast`` itself raises)."""
    # a traced call (torch.compile) runs on a device autocast knows, and Dynamo of some
    # torch versions (2.11) cannot trace is_autocast_available: a graph break there made
    # fullgraph=True fail
    known = torch.compiler.is_compiling() or torch.amp.is_autocast_available(device_type)
    if known and torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def first_order_only(*inputs):
    """Raise where a closed-form backward would be differentiated (``create_graph=True``
    with inputs that require grad): it runs without autograd, so second derivatives
    would be silently missing."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        raise RuntimeError(
            "linear attention with a positive feature map (causal relu / elu too) has a "
            "closed-form backward that is not differentiable: second derivatives "
            "(create_graph=True, double backward) are not supported. The 'trig' and "
            "'hybrid_angular' maps and bidirectional 'relu' / 'elu' use plain autograd."
        )


def _safe_div(num, den):
    # num (..., L, e), den (..., L): zero rows (no visible key) give zeros, not NaN
    ok = den > 0
    return num / torch.where(ok, den, torch.ones_like(den))[..., None]


# ============================================================== bidirectional
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
    # largest in-chunk growth of the key maxima for the one-pivot path: R_t stays within
    # e^G of the causal row maximum, so terms lost to underflow are below e^{G - 87}
    # (float32) of the row's largest
    return 60.0 if dtype in (torch.float32, torch.float16, torch.bfloat16) else 500.0


def _chunk_pivots(lk, c_prev, G):
    """Pivot ``c_end = max(c_prev, max_j lk_j)`` (B, M) of the one-pivot path for a chunk,
    or None where keys grow too much: the path is taken when ``max(c_end - c_ref) <= G``
    with ``c_ref = max(c_prev, lk_0)`` (prefix and the first key: causal for every query
    of the chunk).
    """
    c_end = torch.maximum(c_prev, lk.amax(dim=1))
    if float((c_end - torch.maximum(c_prev, lk[:, 0])).amax()) > G:
        return None
    return c_end


def _intra_one_pivot(lq, lk, va, R, c_end):
    """Intra-chunk numerator with the pivot ``c_end`` (see :func:`_chunk_pivots`):
    ``(tril(Q K^T)) v`` with ``Q = exp(lq - R + c_end) <= 1``, ``K = exp(lk - c_end) <= 1``.
    lq, lk (B, C, M), va (B, C, E), R (B, C), c_end (B, M). Autograd-safe."""
    qf = (lq + c_end[:, None, :]).sub_(R[..., None]).exp_()
    kf = (lk - c_end[:, None, :]).exp_()
    return (qf @ kf.transpose(-1, -2)).tril_() @ va


def _block_pivots(lk, c0, G, masked=True):
    """Pivots of the one-pivot path for the ``n`` chunks of a block, or None where the keys
    of some chunk grow by more than ``G`` (:func:`_chunk_pivots` for every chunk at once).

    lk (B, n, C, M) log key features (masked -1e30); c0 (B, M) prefix key maxima before
    the block. The growth of a chunk is ``c_end - max(c_prev, lk_0)`` (prefix and first
    key: causal for every query of the chunk; the first visible key where none precedes
    the chunk, see :func:`_chunk_maxima`). Returns (c_prev, c_end, parallel): the
    prefix maxima before and after each chunk, each (B, n, M) (``c_end`` is the chunk's
    pivot), and whether the chunk states may be chained by prefix sums
    (:func:`_prefix_states`: on accelerators, where the pivots of the block spread by at
    most ``G``; read with the growth, in one host read). ``masked`` False: no key is
    masked, so every chunk's first key is its first visible one (the same pivots,
    without looking for it).
    """
    c_prev, c_end, growth = _chunk_maxima(lk, c0, first_visible=masked)
    if not _parallel_scan(lk.device):
        if float(growth.amax()) > G:
            return None
        return c_prev, c_end, False
    grown, spread = torch.stack([growth.amax(), _spread(c_end).amax()]).tolist()
    if grown > G:
        return None
    return c_prev, c_end, spread <= G


def _parallel_scan(device) -> bool:
    """Whether the chunk states of a block are chained by prefix sums (a fixed number of
    kernel launches per block: accelerators, whose blocks hold many chunks) rather than
    by one ``addcmul`` per chunk (the CPU, whose cache-sized blocks hold a few)."""
    return torch.device(device).type != "cpu"


def _spread(c_end):
    """``c_last - c_first`` (B, M) of the pivots c_end (B, n, M) of a block (non-decreasing
    along the chunks), ``c_first`` the first that is not ``-1e30`` (no visible key yet)."""
    last = c_end[:, -1]
    first = torch.where(c_end > _NEG / 2, c_end, last[:, None]).amin(dim=1)
    return last - first


def _prefix_states(S, U, c, c_end, G, Sb, S_out=None):
    """The states entering every chunk of a block, by prefix sums (:func:`_scan`'s result
    with ``Sb`` scaled to the pivots, in a fixed number of operations).

    With the chunk states ``U_j = K_j^T va_j`` (B, n, M, E) relative to the pivots
    ``c_end_j`` (B, n, M) and the state ``S`` (B, M, E) entering the block relative to
    ``c`` (B, M), the state entering chunk ``i`` relative to its pivot is

        Sb_i = exp(c - c_end_i) S + exp(c_last - c_end_i) sum_{j < i} exp(c_end_j - c_last) U_j

    with ``c_last`` the block's last pivot: every factor of the sum ``<= 1`` and, as the
    pivots spread by at most ``G`` (checked by :func:`_block_pivots`), ``>= e^{-G}``, so
    no term underflows and the exclusive prefix sum carries the same rounding as the
    chunk-by-chunk chain. ``U`` is consumed (it holds the inclusive sums after); ``Sb``
    (B, n, M, E) is the output buffer. Returns (Sb, the state leaving the block relative
    to ``c_last``, written into ``S_out``, which may be ``S``; None for ``S_out`` None).
    """
    c_last = c_end[:, -1:]  # (B, 1, M)
    U.mul_(torch.exp(c_end - c_last)[..., None]).cumsum_(dim=1)  # inclusive, rel. c_last
    Sb[:, 0].zero_()
    Sb[:, 1:] = U[:, :-1]
    # chunks before the first visible key: an empty sum, and a finite factor for it
    Sb.mul_(torch.exp((c_last - c_end).clamp_(max=G))[..., None])
    Sb.addcmul_(S[:, None], torch.exp(c[:, None] - c_end)[..., None])
    if S_out is None:
        return Sb, None
    return Sb, torch.addcmul(U[:, -1], S, torch.exp(c - c_last[:, 0])[..., None], out=S_out)


def _chunk_maxima(lk, c0, first_visible=False):
    """The key maxima around every chunk and their growth inside it.

    lk (..., n, C, M) log key features of ``n`` consecutive chunks (masked -1e30), c0
    (..., M) the maxima of the keys before them. Returns (c_prev, c_end, growth), each
    (..., n, M): the maxima before and after each chunk, and ``c_end - max(c_prev, lk_0)``,
    the growth beyond the maxima that every query of the chunk sees (prefix and first
    key), which the one-pivot path bounds by ``G``.

    ``first_visible``: where no key precedes the chunk (``c_prev`` -1e30), its first
    *visible* key stands for ``lk_0``: the queries before it see no key at all (their
    output is zero whatever the pivot), and every later query sees it. So a masked first
    key (left padding) does not send the chunk off the one-pivot path. With an earlier
    key, ``lk_0`` stays: the queries before the first visible key see only the prefix.
    """
    c_end = torch.cummax(lk.amax(dim=-2), dim=-2).values  # (..., n, M)
    torch.maximum(c_end, c0[..., None, :], out=c_end)
    c_prev = torch.cat([c0[..., None, :], c_end[..., :-1, :]], dim=-2)  # (..., n, M)
    first = lk[..., 0, :]  # (..., n, M)
    if first_visible:
        # masked rows are -1e30 in every feature; j0 = 0 where a chunk has none visible
        j0 = (lk[..., 0] > _NEG / 2).to(torch.uint8).argmax(dim=-1, keepdim=True)  # (..., n, 1)
        seen = torch.take_along_dim(lk, j0[..., None], dim=-2).squeeze(-2)  # (..., n, M)
        first = torch.where(c_prev > _NEG / 2, first, seen)
    return c_prev, c_end, c_end - torch.maximum(c_prev, first)


class _Workspace:
    """Reusable buffers for the per-block tensors of one call: ``ws(name, *shape)`` is a
    contiguous view of a flat buffer kept across blocks (fresh MiB-sized allocations on
    every block cost page faults that rival the arithmetic)."""

    def __init__(self, dtype, device):
        self.dtype, self.device, self.bufs = dtype, device, {}

    def __call__(self, name, *shape):
        n = math.prod(shape)
        b = self.bufs.get(name)
        if b is None or b.numel() < n:
            b = torch.empty(n, dtype=self.dtype, device=self.device)
            self.bufs[name] = b
        return b[:n].view(shape)


def _scan(H, U, decay, Hb, H_out, reverse=False):
    """Chunk states of a block in one pass of ``addcmul`` (no other per-chunk work).

    H (B, M, E) the state entering the block; U (B, n, M, E) the chunk contributions;
    decay (B, n, M) factors ``<= 1``; Hb (B, n, M, E) the output buffer. Forward:
    ``Hb_0 = H``, ``Hb_{i+1} = Hb_i decay_i + U_i``; reverse: ``Hb_{n-1} = H``,
    ``Hb_{i-1} = Hb_i decay_i + U_i``. Returns (Hb, the state leaving the block, written
    into ``H_out`` (B, M, E), which may hold ``H``: it is read first). ``H_out`` None:
    the state leaving the block is not needed, and its step is not taken (returns None).
    """
    n = U.shape[1]
    # per-chunk views made once (one unbind each, not an indexing call per step)
    Us, Hs, ds = U.unbind(1), Hb.unbind(1), decay.unsqueeze(-1).unbind(1)
    order, step = (range(n - 1, -1, -1), -1) if reverse else (range(n), 1)
    Hs[order[0]].copy_(H)
    for i in order:
        if 0 <= i + step < n:
            dst = Hs[i + step]
        elif H_out is None:
            return Hb, None
        else:
            dst = H_out
        H = torch.addcmul(Us[i], Hs[i], ds[i], out=dst)
    return Hb, H


def _feats(feat, x, side, keep, out):
    """Log features (B, rows, M) of x (B, rows, d), into ``out`` where the feature object
    has ``log_features_into``."""
    into = getattr(feat, "log_features_into", None)
    if into is None:
        return feat.log_features(x, side, keep).reshape(out.shape)
    return into(x, side, keep, out)


def _values(v, keep, lo, hi, out):
    """``[v, 1]`` rows ``lo:hi`` into ``out`` (B, rows, e + 1), masked rows zero (by a
    product: NaN / inf in a padded value still reaches the output, as with SDPA, for the
    finite check)."""
    e = v.shape[-1]
    out[..., :e] = v[:, lo:hi]
    if keep is None:
        out[..., e] = 1.0
    else:
        kb = keep[:, lo:hi]
        out[..., e] = kb
        out[..., :e].mul_(kb[..., None])
    return out


def _num_grad(dout, out, inv, lo, hi, buf):
    """Gradient w.r.t. the stabilised numerator ``[N, D]`` of rows ``lo:hi`` into ``buf``:
    ``g = [dO / D, -(dO . out) / D]`` (B, rows, e + 1); zero on rows with no visible key."""
    e = dout.shape[-1]
    d, o, iv = dout[:, lo:hi], out[:, lo:hi], inv[:, lo:hi, None]
    torch.mul(d, iv, out=buf[..., :e])
    buf[..., e] = (buf[..., :e] * o).sum(-1).neg_()
    return buf


def _feature_vjp(feat, x, side, dl, keep, out, accumulate=False):
    """``dl`` (B, rows, M) through the log features of ``x`` (B, rows, d) into ``out``
    (assigned or accumulated): the feature object's analytic ``vjp`` where it has one,
    else autograd on recomputed features."""
    vjp = getattr(feat, "vjp", None)
    if vjp is not None:
        return vjp(x, side, dl, out, accumulate)
    with torch.enable_grad():
        xc = x.detach().requires_grad_(True)
        (dx,) = torch.autograd.grad(feat.log_features(xc, side, keep), xc, dl)
    return out.add_(dx) if accumulate else out.copy_(dx)


def _fwd_block(lq, lk, va, c, S, G, ws, masked=True):
    """Forward of one block of ``n`` chunks on the one-pivot path (all chunks batched).

    lq, lk (B, n, C, M) fresh log features (consumed in place), va (B, n, C, E), c (B, M)
    prefix key maxima, S (B, M, E) prefix state relative to ``c``; ``masked``: whether
    some key may be masked (:func:`_block_pivots`). Returns None where a
    chunk's keys grow by more than ``G``; else (num (B, n C, E), R (B, n C), S, c) with
    the state and maxima after the block.
    """
    piv = _block_pivots(lk, c, G, masked)
    if piv is None:
        return None
    c_prev, c_end, parallel = piv
    B, n, C, M = lq.shape
    E = va.shape[-1]
    z = lq.add_(c_end[:, :, None, :])  # (B, n, C, M): lq + c_end
    R = z.amax(dim=-1)  # (B, n, C)
    qf = exp_(z.sub_(R[..., None]))  # (B, n, C, M) <= 1, row max 1
    kf = exp_(lk.sub_(c_end[:, :, None, :]))  # (B, n, C, M) <= 1
    qf3, kf3, va3 = qf.view(B * n, C, M), kf.view(B * n, C, M), va.view(B * n, C, E)
    A = torch.bmm(qf3, kf3.transpose(1, 2), out=ws("A", B * n, C, C)).tril_()
    U = ws("U", B, n, M, E)  # chunk states K^T v
    torch.bmm(kf3.transpose(1, 2), va3, out=U.view(B * n, M, E))
    if parallel:  # relative to the pivots c_end
        Sb, S = _prefix_states(S, U, c, c_end, G, ws("Sb", B, n, M, E), ws("S", B, M, E))
    else:
        decay = torch.exp(c_prev - c_end)  # (B, n, M) <= 1
        Sb, S = _scan(S, U, decay, ws("Sb", B, n, M, E), ws("S", B, M, E))  # rel. c_prev
        Sb.mul_(decay[..., None])  # relative to the pivots c_end
    num = torch.bmm(qf3, Sb.view(B * n, M, E), out=ws("num", B * n, C, E)).baddbmm_(A, va3)
    return num.view(B, n * C, E), R.view(B, n * C), S, c_end[:, -1]


def _fwd_chunks(lq, lk, va, c, S, G, chunk):
    """Forward of one block chunk by chunk (blocks with large key jumps): the one-pivot
    path where a chunk allows it, else the exact dyadic scheme. lq, lk (B, rows, M),
    va (B, rows, E). Returns as :func:`_fwd_block`."""
    B, rows, _ = lq.shape
    num = torch.empty_like(va)
    Rb = torch.empty(B, rows, dtype=lq.dtype, device=lq.device)
    for lo in range(0, rows, chunk):
        hi = lo + chunk
        q, k, vc = lq[:, lo:hi].contiguous(), lk[:, lo:hi].contiguous(), va[:, lo:hi].contiguous()
        c_new = _chunk_pivots(k, c, G)
        if c_new is not None:
            z = q.add_(c_new[:, None, :])  # (B, C, M): lq + c_end
            R = z.amax(dim=-1)  # (B, C)
            qf = exp_(z.sub_(R[..., None]))  # (B, C, M) <= 1
            kf = exp_(k.sub_(c_new[:, None, :]))  # (B, C, M) <= 1
            S.mul_(torch.exp(c - c_new)[..., None])  # relative to the pivot c_end
            n = qf @ S  # earlier chunks
            n.baddbmm_((qf @ kf.transpose(-1, -2)).tril_(), vc)  # this chunk
            S.baddbmm_(kf.transpose(-1, -2), vc)
        else:
            levels = _levels(q, k)
            zd = q + k
            R, z0 = _row_stabiliser(q, zd, levels, c)
            n = exp_(z0.sub_(R[..., None])) @ S  # keys of earlier chunks
            n += _intra(q, k, vc, R, levels, zd)
            c_new = torch.maximum(c, k.amax(dim=1))  # (B, M)
            S.mul_(torch.exp(c - c_new)[..., None])
            S.baddbmm_(exp_(k.sub_(c_new[:, None, :])).transpose(-1, -2), vc)
        Rb[:, lo:hi] = R
        num[:, lo:hi] = n
        c = c_new
    return num, Rb, S, c


def _bwd_block(lq, lk, va, g, R, c, S, G, ws, valid, rho, Gs):
    """Gradients of one block on the one-pivot path (all chunks batched), both sides.

    Prefix side, analytic: with ``A = tril(Q K^T)`` and ``N = A va + Q S``, ``dA =
    tril(g va^T)``, ``dQ = dA K + g S^T``, ``dK = dA^T Q``, ``dva = A^T g`` and ``dlq = dQ
    * Q``, ``dlk = dK * K`` (the features are exponentials). Suffix side (the queries of
    later chunks, :func:`_suffix_states`): its key features ``exp(lk - rho_n)`` are the
    prefix ones ``K = exp(lk - c_end)`` times ``f = exp(c_end - rho_n) <= 1`` per chunk
    and feature (``c_end <= rho_n``: every later query's stabiliser covers the keys up to
    the chunk's end), so ``f`` is folded into the suffix state ``Hf = f Hn`` and both
    sides share one product each: ``dva = A^T g + K Hf`` and ``dlk = (dA^T Q + va Hf^T)
    * K``. The factors are ``<= 1``, and a suffix key feature that underflows here
    underflows when computed directly too.

    lq, lk (B, n, C, M) log features (consumed: lk becomes K, lq serves the suffix
    side), va, g (B, n, C, E), R (B, n, C), c (B, M), S (B, M, E) the prefix maxima and
    state before the block; valid, rho, Gs as :func:`_suffix_states`. Returns None where
    a chunk's keys grow by more than ``G`` (lq, lk untouched); else (dlq (B, n C, M),
    dlk (B, n C, M), dva (B, n C, E)) in workspace buffers, and the suffix's ``rho`` and ``Gs``.
    """
    piv = _block_pivots(lk, c, G, masked=valid is not None)  # valid None: no key masked
    if piv is None:
        return None
    c_prev, c_end, parallel = piv
    B, n, C, M = lq.shape
    E = va.shape[-1]
    # into their own buffers (one pass each, as in place): lq then serves the suffix side
    qf = torch.add(lq, c_end[:, :, None, :], out=ws("qf", B, n, C, M))
    exp_(qf.sub_(R[..., None]))  # (B, n, C, M) <= 1
    kf = exp_(lk.sub_(c_end[:, :, None, :]))  # (B, n, C, M) <= 1
    Hn, rho_n, rho, Gs = _suffix_states(lq, g, R, valid, rho, Gs, ws)
    Hf = torch.mul(Hn, torch.exp(c_end - rho_n)[..., None], out=ws("Hf", B, n, M, E))
    qf3, kf3, Hf3 = qf.view(B * n, C, M), kf.view(B * n, C, M), Hf.view(B * n, M, E)
    va3, g3 = va.view(B * n, C, E), g.view(B * n, C, E)
    A = torch.bmm(qf3, kf3.transpose(1, 2), out=ws("A", B * n, C, C)).tril_()
    dA = torch.bmm(g3, va3.transpose(1, 2), out=ws("dA", B * n, C, C)).tril_()
    dva = torch.bmm(A.transpose(1, 2), g3, out=ws("dva", B * n, C, E)).baddbmm_(kf3, Hf3)
    dq = torch.bmm(dA, kf3, out=ws("dq", B * n, C, M))
    dlk = torch.bmm(dA.transpose(1, 2), qf3, out=ws("dlk", B * n, C, M))
    dlk.baddbmm_(va3, Hf3.transpose(1, 2)).mul_(kf3)
    U = ws("U", B, n, M, E)
    torch.bmm(kf3.transpose(1, 2), va3, out=U.view(B * n, M, E))
    if parallel:  # relative to c_end; the state after the block is not needed
        Sb, _ = _prefix_states(S, U, c, c_end, G, ws("Sb", B, n, M, E))
    else:
        decay = torch.exp(c_prev - c_end)  # (B, n, M) <= 1
        Sb, _ = _scan(S, U, decay, ws("Sb", B, n, M, E), None)  # the state after: not needed
        Sb.mul_(decay[..., None])  # relative to c_end
    dlq = dq.baddbmm_(g3, Sb.view(B * n, M, E).transpose(1, 2)).mul_(qf3)
    return dlq.view(B, n * C, M), dlk.view(B, n * C, M), dva.view(B, n * C, E), rho, Gs


def _bwd_chunks(feat, xq, xk, keep, va, g, R, c, S, G, chunk):
    """Prefix-side gradients of one block chunk by chunk with local autograd (blocks with
    large key jumps; the dyadic scheme where needed). xq, xk (B, rows, d), keep (B, rows)
    or None, va, g (B, rows, E), R (B, rows), c (B, M) and S (B, M, E) the prefix maxima
    and state entering the block (S is updated in place, chunk by chunk). Returns (dxq,
    dxk, dva).

    Local autograd where it records; ``torch.func.vjp`` where it does not (inside the
    compiled backward op, a custom op), the same gradients at some extra cost per chunk."""
    dxq, dxk, dva = torch.empty_like(xq), torch.empty_like(xk), torch.empty_like(va)
    with torch.enable_grad():
        recording = torch.ones(1, requires_grad=True).mul(1.0).requires_grad
    for lo in range(0, xq.shape[1], chunk):
        hi = lo + chunk
        Rc, gc = R[:, lo:hi], g[:, lo:hi]
        kc = None if keep is None else keep[:, lo:hi]

        def local(xqc, xkc, vc, Rc=Rc, kc=kc, c=c):
            # (intra-chunk numerator (B, C, E), lq (B, C, M)), aux: lk (B, C, M) detached
            lq = feat.log_features(xqc, "q", None)
            lk = feat.log_features(xkc, "k", kc)
            piv = _chunk_pivots(lk.detach(), c, G)
            if piv is not None:
                intra = _intra_one_pivot(lq, lk, vc, Rc, piv)
            else:
                intra = _intra(lq, lk, vc, Rc)
            return (intra, lq), lk.detach()

        vc = va[:, lo:hi].contiguous()
        if recording:
            xs = [t.detach().requires_grad_(True) for t in (xq[:, lo:hi], xk[:, lo:hi], vc)]
            with torch.enable_grad():
                (intra, lq), lkd = local(*xs)
            pull = lambda cot, o=(intra, lq), xs=xs: torch.autograd.grad(o, xs, cot)  # noqa: E731
            lq = lq.detach()
        else:
            (_, lq), pull, lkd = torch.func.vjp(local, xq[:, lo:hi], xk[:, lo:hi], vc, has_aux=True)
        with torch.no_grad():
            qf = exp_((lq - Rc[..., None]).add_(c[:, None, :]))  # (B, C, M)
            dlq = qf.mul_(gc @ S.transpose(-1, -2))  # (B, C, M)
            dxq[:, lo:hi], dxk[:, lo:hi], dva[:, lo:hi] = pull((gc, dlq))
            if hi >= xq.shape[1]:  # the state after the block: not needed
                break
            c_new = torch.maximum(c, lkd.amax(dim=1))
            S.mul_(torch.exp(c - c_new)[..., None])
            S.baddbmm_(exp_(lkd - c_new[:, None, :]).transpose(-1, -2), vc)
            c = c_new
    return dxq, dxk, dva


def _suffix_states(lq, g, R, valid, rho, Gs, ws):
    """Suffix states of one block: for every chunk, the queries of *later* chunks summed
    by a reverse scan, ``Hn = sum_t exp(lq_t - R_t + rho_n) g_t`` relative to ``rho_n,m =
    min_t (R_t - lq_tm)`` over those queries (every factor ``<= 1``; ``lk_jm <= R_t -
    lq_tm`` for ``j <= t``).

    lq (B, n, C, M) fresh (consumed), g (B, n, C, E), R (B, n, C), valid (B, n, C) rows
    with a visible key (None: every row, as without a mask each query sees itself), rho
    (B, M), Gs (B, M, E) from later blocks. Returns (Hn (B, n, M, E) in the workspace
    buffer "Sb", rho_n (B, n, M), and rho, Gs with the block's queries included).
    """
    B, n, C, M = lq.shape
    E = g.shape[-1]
    z = lq.sub_(R[..., None])  # lq - R
    if valid is not None:
        z.masked_fill_(~valid[..., None], _NEG)
    # rho_c = min over the rows of chunks >= i of R - lq = -(max of z), by a reverse cummax
    rho_c = torch.flip(torch.cummax(torch.flip(z.amax(dim=2), (1,)), dim=1).values, (1,)).neg_()
    rho_c = torch.minimum(rho_c, rho[:, None, :])  # (B, n, M): over chunks >= i
    rho_n = torch.cat([rho_c[:, 1:], rho[:, None, :]], dim=1)  # over chunks > i
    qf = exp_(z.add_(rho_c[:, :, None, :]))  # (B, n, C, M) <= 1
    # "U" and "Sb" as the prefix side's scan: that runs after Hn is used (see _bwd_block)
    V = ws("U", B, n, M, E)
    torch.bmm(qf.view(B * n, C, M).transpose(1, 2), g.view(B * n, C, E), out=V.view(B * n, M, E))
    Hb, Gout = ws("Sb", B, n, M, E), ws("Gs", B, M, E)
    if _parallel_scan(lq.device) and _suffix_spread(rho_c) <= _growth_bound(lq.dtype):
        Hn, Gs = _suffix_prefix_sums(Gs, V, rho, rho_c, rho_n, _growth_bound(lq.dtype), Hb, Gout)
    else:
        Hn, Gs = _scan(Gs, V, torch.exp(rho_c - rho_n), Hb, Gout, reverse=True)
    return Hn, rho_n, rho_c[:, 0], Gs


def _suffix_spread(rho_c) -> float:
    """``max_i rho_c_i - rho_c_0`` over the chunks of a block with a visible query in or
    after them (``rho_c`` (B, n, M) non-decreasing along the chunks, ``1e30`` where none):
    one host read."""
    ref = rho_c[:, :1]
    return float((torch.where(rho_c < _POS / 2, rho_c, ref) - ref).amax())


def _suffix_prefix_sums(Gs, V, rho, rho_c, rho_n, G, Hn, G_out):
    """:func:`_scan` in reverse (the suffix states of :func:`_suffix_states`) by a reversed
    prefix sum: with ``V_j`` (B, n, M, E) relative to ``rho_c_j`` and ``Gs`` (B, M, E)
    relative to ``rho`` (B, M),

        Hn_i = exp(rho_n_i - rho) Gs + exp(rho_n_i - r) sum_{j > i} exp(r - rho_c_j) V_j

    with ``r = rho_c_0``, the smallest: every factor of the sum ``<= 1`` and, as the
    ``rho_c`` spread by at most ``G`` (:func:`_suffix_spread`), ``>= e^{-G}``. ``V`` is
    consumed. Returns (Hn, the state leaving the block towards earlier ones, relative to
    ``r``, in ``G_out``).
    """
    r = rho_c[:, :1]  # (B, 1, M)
    V.mul_(torch.exp(r - rho_c)[..., None])
    W = torch.flip(V, (1,)).cumsum_(dim=1)  # W_k = sum_{j >= n - 1 - k} (B, n, M, E)
    Hn[:, -1].zero_()
    Hn[:, :-1] = torch.flip(W[:, :-1], (1,))  # sum_{j > i}
    # chunks with no visible query after them: an empty sum, and a finite factor for it
    Hn.mul_(torch.exp((rho_n - r).clamp_(max=G))[..., None])
    Hn.addcmul_(Gs[:, None], torch.exp(rho_n - rho[:, None])[..., None])
    return Hn, torch.addcmul(W[:, -1], Gs, torch.exp(r[:, 0] - rho)[..., None], out=G_out)


def _bwd_suffix(lq, lk, va, g, R, valid, rho, Gs, ws):
    """Key / value gradients of one block from the queries of later chunks (the blocks
    that run chunk by chunk): :func:`_suffix_states`, then ``dva = exp(lk - rho_n) Hn``
    and ``dlk = (va Hn^T) * exp(lk - rho_n)``.

    lq, lk (B, n, C, M) fresh (consumed), va (B, n, C, E), the rest as
    :func:`_suffix_states`. Returns (dlk (B, n C, M), dva (B, n C, E), rho, Gs).
    """
    B, n, C, M = lq.shape
    E = va.shape[-1]
    Hn, rho_n, rho, Gs = _suffix_states(lq, g, R, valid, rho, Gs, ws)
    kf = exp_(lk.sub_(rho_n[:, :, None, :])).view(B * n, C, M)  # <= 1
    Hn3, va3 = Hn.view(B * n, M, E), va.view(B * n, C, E)
    dva = torch.bmm(kf, Hn3, out=ws("dva_s", B * n, C, E))
    dlk = torch.bmm(va3, Hn3.transpose(1, 2), out=ws("dlk_s", B * n, C, M)).mul_(kf)
    return dlk.view(B, n * C, M), dva.view(B, n * C, E), rho, Gs


class _CausalExp(torch.autograd.Function):
    """Causal linear attention with O(block M e) memory in forward and backward.

    Inputs are the *scaled inputs*, the values and a feature object turning rows of
    them into log features, so no (L, M) tensor is ever formed or saved. The sequence
    is processed in blocks of ``n`` chunks: features of a block in one product, then
    every chunk of the block in batched products (masked ``C x C`` scores, chunk states
    ``K^T v``), the states chained by one ``addcmul`` per chunk (by prefix sums on
    accelerators). The backward recomputes
    the features block by block, once, in one reverse pass: from the prefix state the
    forward kept at the block's start, the query gradients and all intra-chunk
    gradients; from the suffix state of the queries, the key / value gradients from later
    chunks; all analytic (the features are exponentials; the feature object's ``vjp``
    maps ``dlq``, ``dlk`` to the inputs). Saved for backward: the inputs, the output
    (B, L, e), two (B, L) row statistics and, where a backward can follow, the prefix
    state (B, blocks, M, e + 1) and maxima (B, blocks, M) entering every block.

    Intra-chunk terms: where the per-feature key maxima grow by at most ``G`` inside every
    chunk of a block (the common case), one causal pivot per chunk (prefix and first key)
    and a masked ``C x C`` score matrix; otherwise the block runs chunk by chunk, with the
    exact dyadic scheme of :func:`_intra` where needed. The row stabiliser is then ``R_t =
    max_m (lq_tm + c_end_m)``, an upper bound within ``e^G`` of the causal one: later keys
    of the chunk change ``R_t`` (a common factor of numerator and denominator, exactly
    cancelling) but can neither overflow nor underflow the output of ``t``.
    """

    @staticmethod
    def forward(ctx, xq, xk, v, keep, feat, chunk, block, keep_states=True):
        # xq (B, L, d), xk (B, L, d), v (B, L, e), keep (B, L) bool or None; keep_states:
        # save the prefix state and maxima entering every block for the backward
        B, L, _ = xq.shape
        e = v.shape[-1]
        M = feat.n_out
        dt, dev = xq.dtype, xq.device
        G = _growth_bound(dt)
        ws = _Workspace(dt, dev)
        S = torch.zeros(B, M, e + 1, dtype=dt, device=dev)  # prefix state, rel. to c
        c = torch.full((B, M), _NEG, dtype=dt, device=dev)  # prefix key maxima
        out = torch.empty(B, L, e, dtype=dt, device=dev)
        den = torch.empty(B, L, dtype=dt, device=dev)
        Rall = torch.empty(B, L, dtype=dt, device=dev)
        nblk = -(-L // block)
        if keep_states:  # (B, blocks, M, e + 1), (B, blocks, M): M / block of the output
            S_in = torch.empty(B, nblk, M, e + 1, dtype=dt, device=dev)
            c_in = torch.empty(B, nblk, M, dtype=dt, device=dev)
        for bi, lo in enumerate(range(0, L, block)):
            hi = min(lo + block, L)
            n = (hi - lo) // chunk
            if keep_states:
                S_in[:, bi] = S
                c_in[:, bi] = c
            kb = None if keep is None else keep[:, lo:hi]
            lq = _feats(feat, xq[:, lo:hi], "q", None, ws("lq", B, hi - lo, M))
            lk = _feats(feat, xk[:, lo:hi], "k", kb, ws("lk", B, hi - lo, M))
            va = _values(v, keep, lo, hi, ws("va", B, hi - lo, e + 1))  # (B, rows, e + 1)
            res = _fwd_block(
                lq.view(B, n, chunk, M),
                lk.view(B, n, chunk, M),
                va.view(B, n, chunk, -1),
                c,
                S,
                G,
                ws,
                masked=keep is not None,
            )
            if res is None:
                res = _fwd_chunks(lq, lk, va, c, S, G, chunk)
            num, Rall[:, lo:hi], S, c = res
            dn = den[:, lo:hi]
            dn.copy_(num[..., e])
            torch.div(num[..., :e], torch.where(dn > 0, dn, 1.0)[..., None], out=out[:, lo:hi])
        if not keep_states:
            S_in = c_in = torch.empty(0)
        ctx.save_for_backward(
            xq, xk, v, keep if keep is not None else torch.empty(0), out, den, Rall, S_in, c_in
        )
        ctx.has_keep, ctx.keep_states = keep is not None, keep_states
        ctx.feat, ctx.chunk, ctx.block = feat, chunk, block
        return out

    @staticmethod
    def backward(ctx, dout):
        xq, xk, v, keep, out, den, Rall, S_in, c_in = ctx.saved_tensors
        first_order_only(xq, xk, v)
        if not ctx.keep_states:  # (an empty S_in may also be an empty batch or sequence)
            raise RuntimeError("the causal forward ran without keeping its block states.")
        keep = keep if ctx.has_keep else None
        feat, chunk, block = ctx.feat, ctx.chunk, ctx.block
        B, L, _ = xq.shape
        e = v.shape[-1]
        M = feat.n_out
        dt, dev = xq.dtype, xq.device
        G = _growth_bound(dt)
        ws = _Workspace(dt, dev)
        ok = den > 0  # rows with a visible key
        inv = torch.where(ok, 1.0 / torch.where(ok, den, 1.0), 0.0)  # (B, L)
        dout = dout.contiguous()
        dxq = torch.empty_like(xq)
        dxk = torch.empty_like(xk)
        dv = torch.empty_like(v)
        blocks = [(lo, min(lo + block, L)) for lo in range(0, L, block)]

        # float32 / float64 as the forward, even when backward() is called under autocast
        with torch.no_grad(), autocast_off(dev.type):
            # one reverse pass over the blocks, features computed once per block: the
            # prefix side (query gradients through the saved state entering the block,
            # intra-chunk gradients) and the suffix side (key / value gradients from the
            # queries of later chunks, a reverse scan)
            Gs = torch.zeros(B, M, e + 1, dtype=dt, device=dev)
            rho = torch.full((B, M), _POS, dtype=dt, device=dev)
            for bi in range(len(blocks) - 1, -1, -1):
                lo, hi = blocks[bi]
                n, rows = (hi - lo) // chunk, hi - lo
                kb = None if keep is None else keep[:, lo:hi]
                va = _values(v, keep, lo, hi, ws("va", B, rows, e + 1))
                g = _num_grad(dout, out, inv, lo, hi, ws("g", B, rows, e + 1))
                lq = _feats(feat, xq[:, lo:hi], "q", None, ws("lq", B, rows, M))
                lk = _feats(feat, xk[:, lo:hi], "k", kb, ws("lk", B, rows, M))
                R = Rall[:, lo:hi].view(B, n, chunk)
                va4, g4 = va.view(B, n, chunk, -1), g.view(B, n, chunk, -1)
                lq4, lk4 = lq.view(B, n, chunk, M), lk.view(B, n, chunk, M)
                c, S = c_in[:, bi], S_in[:, bi]
                valid = None if keep is None else ok[:, lo:hi].view(B, n, chunk)
                pre = _bwd_block(lq4, lk4, va4, g4, R, c, S, G, ws, valid, rho, Gs)
                if pre is None:  # large key jumps: chunk by chunk, local autograd
                    dxq[:, lo:hi], dxk[:, lo:hi], dva_p = _bwd_chunks(
                        feat, xq[:, lo:hi], xk[:, lo:hi], kb, va, g, Rall[:, lo:hi],
                        c, S.clone(), G, chunk,
                    )  # fmt: skip
                    dlk_s, dva_s, rho, Gs = _bwd_suffix(lq4, lk4, va4, g4, R, valid, rho, Gs, ws)
                    dv[:, lo:hi] = (dva_p + dva_s)[..., :e]
                    _feature_vjp(feat, xk[:, lo:hi], "k", dlk_s, kb, dxk[:, lo:hi], True)
                else:  # both sides in one (see _bwd_block)
                    dlq, dlk, dva, rho, Gs = pre
                    dv[:, lo:hi] = dva[..., :e]
                    _feature_vjp(feat, xq[:, lo:hi], "q", dlq, None, dxq[:, lo:hi])
                    _feature_vjp(feat, xk[:, lo:hi], "k", dlk, kb, dxk[:, lo:hi])
            if keep is not None:
                dv.masked_fill_(~keep[..., None], 0.0)
        return dxq, dxk, dv, None, None, None, None, None


#: target bytes of one (B, rows, M) block of log features on accelerators, where kernel
#: launches and host reads, not cache sizes, are the cost (as the bidirectional stream's)
ACCELERATOR_BLOCK_BYTES = 1 << 26


def _block_rows(L: int, chunk: int) -> int:
    """Rows per block on the CPU: a multiple of ``chunk``, ``max(4 chunk, L / 8)`` capped at
    512 (the working set, a few (rows, M) blocks, stays bounded and a fraction of long
    sequences; short ones still get blocks of several chunks), at least one chunk."""
    return chunk * max(1, min(512, max(4 * chunk, L // 8)) // chunk)


def block_rows_for(
    L: int, chunk: int, B: int, M: int, itemsize: int, device, values: int = 0
) -> int:
    """Rows per block of the causal kernel for ``L`` rows (a multiple of ``chunk``) of
    ``B`` batch elements and heads with ``M`` features and ``values`` value columns
    (``e + 1``) of ``itemsize`` bytes.

    CPU: :func:`_block_rows` (cache-sized working sets). Accelerators: the most whole chunks
    with a (B, rows, max(M, values)) block, the widest of the per-row buffers (features,
    values, outputs and their gradients), of at most :data:`ACCELERATOR_BLOCK_BYTES`, at
    most ``L`` and at least one chunk. Every block costs a fixed number of kernel launches
    and one host read (the choice of path), so on a GPU few large blocks are several times
    faster than the CPU's: on an H200, causal FAVOR+ at L = 65536 (8 heads, d = 64, M = 256,
    float32) took 94 ms with 512-row blocks and 18 ms with 8192 rows.
    """
    if torch.device(device).type == "cpu":
        return _block_rows(L, chunk)
    rows = ACCELERATOR_BLOCK_BYTES // max(1, B * max(M, values) * itemsize)
    return chunk * max(1, min(rows, L) // chunk)


def fit_chunk(chunk: int, L: int) -> int:
    """The causal chunk for ``L`` rows: ``chunk``, or the smallest power of two holding
    ``L`` if that is smaller (no more padding than needed). Applied to the concrete ``L``
    inside the kernel (and the compiled ops), so that a compiled graph never branches on a
    symbolic length (``dynamic=True`` traces one graph for all lengths)."""
    return min(chunk, 1 << max(0, (L - 1).bit_length()))


def causal_exp(xq, xk, v, keep, feat, chunk: int, block: int | None = None):
    """Causal attention from log features computed block by block (FAVOR# eq. 4).

    xq, xk (B, L, d) scaled inputs; v (B, L, e) values; keep (B, L) bool or None;
    ``feat`` has ``n_out``, ``log_features(x, side, keep)`` (masked keys -> -1e30) and
    optionally ``vjp(x, side, dl)`` (the gradient of ``sum(dl * log_features(x))``
    w.r.t. ``x``; autograd on recomputed features otherwise); chunk a power of two;
    block the rows per block (a multiple of ``chunk``; default :func:`block_rows_for`). The
    chunk is at most the smallest power of two holding ``L`` (:func:`fit_chunk`); ``L`` is
    padded to a multiple of it with masked keys. Returns (B, L, e).
    """
    B, L, _ = xq.shape
    chunk = fit_chunk(chunk, L)
    pad = (-L) % chunk
    if pad:
        keep_p = torch.ones(B, L, dtype=torch.bool, device=xq.device) if keep is None else keep
        keep = torch.cat([keep_p, torch.zeros(B, pad, dtype=torch.bool, device=xq.device)], 1)
        xq = torch.nn.functional.pad(xq, (0, 0, 0, pad))
        xk = torch.nn.functional.pad(xk, (0, 0, 0, pad))
        v = torch.nn.functional.pad(v, (0, 0, 0, pad))
    if block is None:
        block = block_rows_for(
            L + pad, chunk, B, feat.n_out, xq.element_size(), xq.device, v.shape[-1] + 1
        )
    # the block states are kept only where a backward can follow
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (xq, xk, v))
    out = _CausalExp.apply(xq, xk, v, keep, feat, chunk, block, grad)
    return out[:, :L] if pad else out
