"""The causal scan as opaque custom ops, for ``torch.compile(fullgraph=True)``.

The eager causal kernel (:func:`kernelkit.attention._linear.causal_exp`) chooses per
block between a one-pivot and an exact path from the data (a host read of the keys'
growth) and reuses workspace buffers: neither traces into a graph. Inside compiled
graphs it therefore runs as one custom op, ``kernelkit::causal_linear_attention``, with
a fake (shape-only) implementation for tracing and an autograd formula whose backward is
a second op that recomputes the forward under autograd and returns the input gradients
(the eager kernel's streamed backward). Eager calls never go through here.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._linear import _CausalExp, block_rows_for, causal_exp, fit_chunk
from ._maps import LogFeatureMap

__all__ = ["causal"]


def _features(kind, W_q, W_k, c, B_q, B_k, input_scale, d):
    from .functional import _FusedFeatures, _PlainFeatures

    if kind == "exp":
        return _FusedFeatures(LogFeatureMap(W_q, W_k, c, B_q, B_k), input_scale=input_scale)
    return _PlainFeatures(kind, d)


def _run(xq, xk, v, keep, W_q, W_k, c, B_q, B_k, kind, input_scale, chunk):
    feat = _features(kind, W_q, W_k, c, B_q, B_k, input_scale, xq.shape[-1])
    return causal_exp(xq, xk, v, keep, feat, chunk)  # fits the chunk to the concrete L


@torch.library.custom_op("kernelkit::causal_linear_attention", mutates_args=())
def _causal_op(
    xq: Tensor,
    xk: Tensor,
    v: Tensor,
    keep: Tensor | None,
    W_q: Tensor | None,
    W_k: Tensor | None,
    c: Tensor | None,
    B_q: Tensor | None,
    B_k: Tensor | None,
    kind: str,
    input_scale: float,
    chunk: int,
) -> Tensor:
    """Causal attention (B, L, e) of xq, xk (B, L, d), v (B, L, e)."""
    with torch.no_grad():
        return _run(xq, xk, v, keep, W_q, W_k, c, B_q, B_k, kind, input_scale, chunk).clone()


@_causal_op.register_fake
def _(xq, xk, v, keep, W_q, W_k, c, B_q, B_k, kind, input_scale, chunk):
    return xq.new_empty((xq.shape[0], xq.shape[1], v.shape[-1]), dtype=v.dtype)


class _Ctx:
    """Stands in for the autograd context of the eager Function (forward saves into it,
    backward reads it): custom ops run below autograd, so the Function is called
    directly."""

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


@torch.library.custom_op("kernelkit::causal_linear_attention_backward", mutates_args=())
def _causal_backward_op(
    dout: Tensor,
    xq: Tensor,
    xk: Tensor,
    v: Tensor,
    keep: Tensor | None,
    W_q: Tensor | None,
    W_k: Tensor | None,
    c: Tensor | None,
    B_q: Tensor | None,
    B_k: Tensor | None,
    kind: str,
    input_scale: float,
    chunk: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients w.r.t. xq, xk, v of ``sum(dout * causal attention)``: the eager
    kernel's forward (recomputed) and streamed backward."""
    feat = _features(kind, W_q, W_k, c, B_q, B_k, input_scale, xq.shape[-1])
    L = xq.shape[1]
    chunk = fit_chunk(chunk, L)
    pad = (-L) % chunk
    if pad:  # as causal_exp pads: masked keys, zero values and output gradients
        B = xq.shape[0]
        ones = torch.ones(B, L, dtype=torch.bool, device=xq.device)
        tail = torch.zeros(B, pad, dtype=torch.bool, device=xq.device)
        keep = torch.cat([ones if keep is None else keep, tail], 1)
        xq, xk, v, dout = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (xq, xk, v, dout))
    ctx = _Ctx()
    with torch.no_grad():
        block = block_rows_for(
            L + pad,
            chunk,
            xq.shape[0],
            feat.n_out,
            xq.element_size(),
            xq.device,
            v.shape[-1] + 1,
        )
        _CausalExp.forward(ctx, xq, xk, v, keep, feat, chunk, block)
        dq, dk, dv = _CausalExp.backward(ctx, dout)[:3]
    if pad:
        dq, dk, dv = (t[:, :L].contiguous() for t in (dq, dk, dv))
    return dq, dk, dv


@_causal_backward_op.register_fake
def _(dout, xq, xk, v, keep, W_q, W_k, c, B_q, B_k, kind, input_scale, chunk):
    return torch.empty_like(xq), torch.empty_like(xk), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:9])
    ctx.rest = inputs[9:]


def _backward(ctx, dout):
    dq, dk, dv = _causal_backward_op(dout.contiguous(), *ctx.saved_tensors, *ctx.rest)
    return dq, dk, dv, *([None] * 9)


_causal_op.register_autograd(_backward, setup_context=_setup_context)


def causal(xq, xk, v, keep, feat, chunk: int):
    """:func:`~kernelkit.attention._linear.causal_exp` as one custom op (compiled graphs).

    ``feat`` is the eager feature object (fused affine-log features, or relu / elu).
    """
    if hasattr(feat, "fmap"):  # fused affine-log features
        fm = feat.fmap
        args = (fm.W_q, fm.W_k, fm.c, fm.B_q, fm.B_k, "exp", feat.r)
    else:
        args = (None, None, None, None, None, feat.name, 1.0)
    return _causal_op(xq, xk, v, keep, *args, int(chunk))
