"""Torch feature maps for linear attention: parameters per (batch, head) and log features.

Every positive map of the softmax family is a positive dense-exponential random feature
with diagonal ``A`` on linearly transformed inputs (FAVOR# Thm 4.1 with ``A = diag(a)``).
The parameters and the affine part of the log features come from
:mod:`kernelkit.features.favor`, the one derivation of the FAVOR++ / FAVOR# fits in
kernelkit (:func:`~kernelkit.features.favor.fit_derf`,
:func:`~kernelkit.features.favor.derf_log_weights`); this module only adapts them to the
attention kernels of :mod:`kernelkit.attention._linear`:

    log f(w_m, x) = x . W_x[:, m] + c_m - |B_x x|^2 / 2

with ``W_x = B_x^T diag(sqrt(1 - 4 a)) W^T`` (``B`` folded into the projections, so the
input transform only enters the row term) and ``c_m = sum_l [log(1 - 4 a_l)/4 +
a_l w_ml^2] - log(M)/2``. The part of ``c`` common to every feature cancels in the
attention normalisation. Inputs are already scaled, ``x = q d^{-1/4}``, so
``E f(w, x) f(w, y) = exp(q.k / sqrt(d))``.

==================  ======================  ==========================================
map                 ``B_x`` / ``B_y``       ``a``
==================  ======================  ==========================================
positive (FAVOR+)   identity                0 (eq. 8-9)
hyperbolic          identity                0, on the projections ``[W; -W]``
gerf (FAVOR++)      identity                ``A*(phi)`` (eq. 10-11, Lemma A.1)
saderf              ``diag(psi)^{+-1}``     ``A*(phi)`` of ``(psi x, y / psi)`` (eq. 20)
aderf               ``B~1`` / ``B~2``       ``A*(phi)`` of ``(B~1 x, B~2 y)`` (Thm 4.2)
sderf               ``Q3^T`` (both sides)   ``A*(L3_l)`` per coordinate (Thm 4.3)
==================  ======================  ==========================================

Only SADERF and ADERF keep an input transform for the row term (:class:`LogFeatureMap`
``B_q``, ``B_k``); SDERF's ``Q3^T`` is orthogonal (``|Q3^T x| = |x|``) and query and key
sides share one map. SDERF turns the projections by ``Q3^T`` too, and ADERF's ``B~k``
come turned by its singular vectors, so that both maps are continuous functions of the
queries and keys (a bfloat16 rounding of them moves the output by about that rounding;
see :class:`kernelkit.features.favor.DERFParameters` ``rotate_projections``).

Parameters are fitted from first and second moments of the queries
and keys (:class:`kernelkit.features.favor.Moments`), in float64 for the ``d x d``
decompositions, batched over all leading dimensions; they are constants for autograd
(detached): the FAVOR# fits treat them as constants of the data, not functions to
differentiate through.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, fields, replace

import torch

from .._backend import ThreadFlag
from ..features import favor
from ._linear import autocast_off

__all__ = [
    "EXP_MAPS",
    "FEATURE_MAPS",
    "FITTED_MAPS",
    "LogFeatureMap",
    "build_log_map",
    "build_log_map_for",
    "fit_moments",
]

#: maps written as exponentials of an affine function of x (positive features)
EXP_MAPS = ("positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf")
#: maps whose parameters are fitted from the data (FAVOR++ / FAVOR#)
FITTED_MAPS = ("gerf", "saderf", "aderf", "sderf")
#: every supported name
FEATURE_MAPS = ("relu", "elu", "trig", *EXP_MAPS, "hybrid_angular")


def fit_moments(x, y, key_weights=None, full=True, query_weights=None) -> favor.Moments:
    """:func:`kernelkit.features.favor.moments` of ``x`` (..., L, d) and ``y`` (..., S, d),
    detached and without autograd, returned in float64.

    The sums run in the inputs' floating dtype (float32 or float64), also inside a
    ``torch.autocast`` region, and are cast to float64 for the fits. ``key_weights``
    (..., S), ``query_weights`` (..., L): non-negative weights of the keys / queries
    summing to one per row (padding excluded); None means uniform.
    """
    # autocast off: its half-precision products would round the sums (bfloat16) or
    # overflow them (float16) when the moments are taken inside an autocast region, as
    # FavorAttention's running statistics are
    with torch.no_grad(), autocast_off(x.device.type):
        x, y = x.detach(), y.detach()
        mom = favor.moments(x, y, full=full, key_weights=key_weights, query_weights=query_weights)
        return favor.Moments(
            mom.mean_x.double(), mom.second_x.double(), mom.mean_y.double(), mom.second_y.double()
        )


@dataclass
class LogFeatureMap:
    """Parameters of the affine-log features of one attention call (see module doc).

    ``W_q``, ``W_k``: (..., d, M) or (d, M), the projections with the input transform
    folded in (``W_x``, ``W_y`` of :func:`kernelkit.features.favor.derf_log_weights`);
    ``c``: (..., M) or None. ``B_q``, ``B_k``: the input transforms of the row term
    ``-|B x|^2 / 2``: None (``B`` orthogonal or the identity: ``-|x|^2 / 2``), a (..., d)
    diagonal or a (..., d, d) matrix (``B x`` is ``x @ B^T``), with the leading dims of
    ``W``. Leading dims broadcast against the batch dims of the inputs.
    """

    W_q: torch.Tensor
    W_k: torch.Tensor
    c: torch.Tensor | None = None
    B_q: torch.Tensor | None = None
    B_k: torch.Tensor | None = None

    @property
    def n_out(self) -> int:
        return self.W_q.shape[-1]

    def _row(self, x, side):
        # row term -|B x|^2 / 2, (..., L, 1)
        B = self.B_q if side == "q" else self.B_k
        if B is not None:
            W = self.W_q if side == "q" else self.W_k
            x = x * B[..., None, :] if B.dim() == W.dim() - 1 else x @ B.transpose(-1, -2)
        return -0.5 * (x * x).sum(-1, keepdim=True)

    def log_features(self, x: torch.Tensor, side: str) -> torch.Tensor:
        """``log f(w_m, x)`` for x (..., L, d): shape (..., L, M), up to a common constant."""
        W = self.W_q if side == "q" else self.W_k
        out = x @ W  # (..., L, M)
        row = self._row(x, side)  # (..., L, 1)
        if self.c is not None:
            return out + (row + self.c[..., None, :])
        return out + row

    def augmented_weights(self, side, shift=None):
        """``[W; 1; c + shift]`` (..., d + 2, M) for :meth:`log_features_fused`."""
        W = self.W_q if side == "q" else self.W_k
        c = self.c
        if shift is not None:
            c = shift if c is None else c + shift
        if c is None:
            c = torch.zeros(W.shape[-1], dtype=W.dtype, device=W.device)
        lead = torch.broadcast_shapes(W.shape[:-2], c.shape[:-1])
        Wb = torch.broadcast_to(W, (*lead, *W.shape[-2:]))
        ones = torch.ones((*lead, 1, W.shape[-1]), dtype=W.dtype, device=W.device)
        cb = torch.broadcast_to(c, (*lead, c.shape[-1]))[..., None, :]
        return torch.cat([Wb, ones, cb], dim=-2)

    def log_features_fused(self, x, side, shift=None, keep=None, Wa=None, row=None):
        """``log_features(x) + shift`` in one matmul: ``[x, row, 1] @ [W; 1; c + shift]``.

        x (..., L, d); shift (..., M) or None; keep (..., L) bool or None: masked rows
        get the row term ``-1e30``, which absorbs the rest, so their log features are
        exactly ``-1e30`` (callers also zero their values). ``Wa`` may hold
        :meth:`augmented_weights` precomputed; ``row`` (..., L, 1) may replace the row
        term ``-|B x|^2 / 2`` (e.g. zero where it cancels). Returns a fresh contiguous
        (..., L, M) tensor that may be modified in place.
        """
        if row is None:
            row = self._row(x, side)  # (..., L, 1)
        if keep is not None:
            row = torch.where(keep[..., None], row, torch.full_like(row, -1e30))
        xa = torch.cat([x, row, torch.ones_like(row)], dim=-1)  # (..., L, d + 2)
        if Wa is None:
            Wa = self.augmented_weights(side, shift)
        return xa @ Wa

    def to(self, dtype) -> LogFeatureMap:
        def cv(t):
            return None if t is None else t.to(dtype)

        return LogFeatureMap(cv(self.W_q), cv(self.W_k), cv(self.c), cv(self.B_q), cv(self.B_k))


def build_log_map(name: str, W: torch.Tensor, mom: favor.Moments | None, d: int) -> LogFeatureMap:
    """Feature parameters of map ``name`` for projections ``W`` (M, d) (float tensor).

    ``mom`` holds the float64 moments to fit from (ignored by the unfitted maps
    ``positive`` and ``hyperbolic``; required by :data:`FITTED_MAPS`). The parameters are
    :func:`kernelkit.features.favor.fit_derf` (FAVOR# Thm 4.1-4.3, eq. 20) and the log
    weights :func:`kernelkit.features.favor.derf_log_weights`; hyperbolic features are the
    positive map on ``[W; -W]`` (as :class:`kernelkit.features.HyperbolicRF`). Returns
    float64 parameters; the caller casts to the compute dtype. The moments enter
    detached: the fitted parameters are constants of the data (module docstring), so
    moments that require grad get no gradient (nor eigh's NaN gradient at repeated
    eigenvalues). A ``W`` that requires grad keeps its graph (the decoding step
    differentiates its features; :func:`~kernelkit.attention.linear_attention` refuses
    such a projection for these maps).
    """
    if mom is not None:
        mom = favor.Moments(*(_detached(getattr(mom, f.name)) for f in fields(mom)))
    W = W.double()
    if name == "hyperbolic":
        W, name = torch.cat([W, -W], dim=0), "positive"  # (2M, d)
    if name not in favor.DERF_MAPS:
        raise ValueError(f"unknown exponential feature map {name!r}.")
    if name == "positive":
        params = favor.DERFParameters(W.new_zeros(d))  # a = 0, B = I, on W's device
    elif mom is None:
        raise ValueError(f"feature map {name!r} needs moments to fit its parameters.")
    else:
        params = _fit_on_host(name, mom)
    # the fits give a <= 0: no data-dependent check (host sync, graph break)
    W_x, W_y, const = favor.derf_log_weights(params, W, check=False)  # (..., d, M), (..., M)
    if params.orthogonal:  # |B x| = |x|: the row term needs no transform
        return LogFeatureMap(W_x, W_y, const)
    return LogFeatureMap(W_x, W_y, const, params.B_x, params.B_y)


#: maps whose fits decompose d x d matrices (eigh, svd), which wait for the device anyway
_MATRIX_FITS = ("aderf", "sderf")


def _fit_on_host(name: str, mom: favor.Moments) -> favor.DERFParameters:
    """:func:`kernelkit.features.favor.fit_derf` of the moments (..., d[, d]); for the maps
    whose fits decompose matrices (ADERF, SDERF) run on the CPU where the moments live on
    an accelerator (outside compiled graphs), the parameters then moved to the moments'
    device (both moves are differentiable).

    Those fits work on a few ``d x d`` matrices per head: dozens of tiny operations and
    batched eigendecompositions, which on a GPU are bound by kernel launches and wait for
    the device in any case. On an H200, ``torch.linalg.eigh`` of eight 64 x 64 float64
    matrices took 5.6 ms on the device and 2.1 ms through the CPU, copies included. The
    diagonal fits (GERF, SADERF) stay on the device: elementwise, and without a host
    synchronisation there.
    """
    dev = mom.mean_x.device
    if dev.type == "cpu" or name not in _MATRIX_FITS or torch.compiler.is_compiling():
        return favor.fit_derf(name, mom)
    host = favor.Moments(*(getattr(mom, f.name).cpu() for f in fields(mom)))
    params = favor.fit_derf(name, host)
    # one move per tensor: SDERF's B_x is its B_y (``symmetric``), and stays so
    copies: dict[int, torch.Tensor] = {}
    moved = {}
    for f in fields(params):
        t = getattr(params, f.name)
        if isinstance(t, torch.Tensor):
            if id(t) not in copies:
                copies[id(t)] = t.to(dev)
            moved[f.name] = copies[id(t)]
    return replace(params, **moved)


def _detached(t):
    # a tensor without a graph is passed as it is (no new tensor object)
    return t.detach() if isinstance(t, torch.Tensor) and t.requires_grad else t


def scale_inputs(q, k, scale):
    """``x = q sqrt(scale)``, ``y = k sqrt(scale)`` so that ``x.y = scale q.k``."""
    r = math.sqrt(scale)
    return q * r, k * r


#: recent builds for moments given by the caller, most recent last: (map, d, projection
#: shape and dtype, sums of the projection and moments) -> (projection, moments,
#: LogFeatureMap), see build_log_map_for
_BUILT: OrderedDict = OrderedDict()
#: how many builds are kept (a model's layers each have their own statistics)
_BUILT_MAX = 16
#: guards _BUILT's order and size (the comparisons run outside it, on the entry's copies)
_BUILT_LOCK = threading.Lock()
#: set (per thread) while moments of the call itself are passed as given ones
_NOT_KEPT = ThreadFlag()


def _after_fork_in_child() -> None:
    # a child forked while another thread held the lock would wait for it for ever
    global _BUILT_LOCK
    _BUILT_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def builds_not_kept():
    """Context: :func:`build_log_map_for` builds every time and keeps nothing, for callers
    that pass moments of the call itself (a module's per-batch moments of a padded batch),
    which no later call reuses (in the calling thread only)."""
    return _NOT_KEPT.on()


def build_log_map_for(name: str, W: torch.Tensor, mom: favor.Moments | None, d: int):
    """:func:`build_log_map` (same arguments and shapes: W (M, d), moments (..., d[, d]);
    the FAVOR# Thm 4.1-4.3 fits) for moments the caller passes (calibration statistics, a
    module's running statistics in eval mode), where the same moments come back call after
    call: a recent build (the last ``_BUILT_MAX``, found by the sums of the projection and
    the moments) is reused where the projection and the four moment tensors are equal to
    those it was built from, instead of a fit with an eigendecomposition per head (about
    2 ms for 8 heads of d = 64). Equal inputs give the same parameters (the fits are
    deterministic, eigenvector signs included), so a reused build is what a new one would
    be. Eager CPU only: in compiled graphs and on accelerators (where the comparison would
    wait for the device) every call builds; under ``torch.inference_mode()`` a build is
    reused but not kept (its tensors could not serve autograd later).
    """
    fields = None if mom is None else (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)
    if (
        fields is None
        or torch.compiler.is_compiling()
        or bool(_NOT_KEPT)
        or not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in (W, *fields))
        or (torch.is_grad_enabled() and W.requires_grad)  # a build carrying W's graph
    ):
        return build_log_map(name, W, mom, d)
    with torch.no_grad():
        key = (name, d, tuple(W.shape), W.dtype, *(float(t.sum()) for t in (W, *fields)))
    with _BUILT_LOCK:
        hit = _BUILT.get(key)
    if hit is not None and _equal(hit[0], W) and all(map(_equal, hit[1], fields)):
        with _BUILT_LOCK:  # another thread may have evicted it meanwhile
            if key in _BUILT:
                _BUILT.move_to_end(key)
        return hit[2]
    fmap = build_log_map(name, W, mom, d)
    if not torch.is_inference_mode_enabled():
        with torch.no_grad():
            entry = (W.detach().clone(), tuple(t.detach().clone() for t in fields), fmap)
        with _BUILT_LOCK:
            _BUILT[key] = entry
            _BUILT.move_to_end(key)
            while len(_BUILT) > _BUILT_MAX:
                _BUILT.popitem(last=False)
    return fmap


def _equal(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
