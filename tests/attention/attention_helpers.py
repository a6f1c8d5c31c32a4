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
    return float((a - b).norm() / b.norm())


def batched_block_paths(monkeypatch):
    """Record, for every block of a causal backward (in the order the backward takes them,
    last block first), whether it ran on the batched one-pivot path (True) or chunk by
    chunk (False): a spy on ``kernelkit.attention._linear._bwd_block``."""
    from kernelkit.attention import _linear as lin

    paths = []
    orig = lin._bwd_block

    def spy(*args):
        res = orig(*args)
        paths.append(res is not None)
        return res

    monkeypatch.setattr(lin, "_bwd_block", spy)
    return paths
