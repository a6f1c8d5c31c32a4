"""``FavorAttention``: multi-head random-feature attention with the interface of
``torch.nn.MultiheadAttention(batch_first=True)``.

Differences from ``nn.MultiheadAttention`` (the attention matrix is never formed):

* ``need_weights=True`` raises (no weights exist); ``forward`` returns ``(out, None)``.
* ``attn_mask``, ``(L, S)`` or ``(N * num_heads, L, S)`` (bool ``True`` or float
  ``-inf`` = blocked), may only be the causal mask (blocked above the diagonal, top left
  aligned), a key padding (the same keys blocked in every row and in every head of a
  batch element; joined to ``key_padding_mask``), both combined, or None;
  ``is_causal=True`` alone selects causal attention.
* ``dropout`` is applied to the attention output of every head (before ``out_proj``),
  not to attention weights. ``add_bias_kv`` / ``add_zero_attn`` are not supported.
* ``key_padding_mask``: bool (True = padded) or float (``-inf`` or the dtype's
  minimum = padded, 0 = kept). Called as self-attention (``query is key``), the padded
  positions are left out of the fitted parameters as queries too.

Random features: one projection matrix (``n_features x head_dim``, drawn by ``sampler``,
block-orthogonal by default) shared by the heads, a buffer (saved in the ``state_dict``).
In training mode it is redrawn every ``redraw_interval`` forward calls (None or 0: never);
``eval()`` keeps it. The redraw generator's state is the module's extra state in the
``state_dict``, so a resumed training run redraws as the uninterrupted one.

Data-dependent maps (``gerf``, ``saderf``, ``aderf``, ``sderf``):

* bidirectional: fitted per batch element and head from that call's queries and keys;
* causal: fitted from running statistics (means and second moments of the scaled
  queries per query head and of the scaled keys per key head, buffers ``running_*``),
  updated *after* each training forward from that batch (exponential average with
  ``momentum``; None: cumulative), so a batch never uses its own tokens and a position
  never sees later positions. Until the first update (``num_batches_tracked == 0``)
  they use FAVOR+ features (``A = 0``). Padded keys (and, in self-attention, queries)
  stay out of the statistics; a fully padded sequence stays out of the batch mean, and a
  batch without keys updates nothing.

Grouped-query attention (``num_kv_heads < num_heads``, as Llama's
``num_key_value_heads``): the keys and values are projected to ``num_kv_heads`` heads,
each serving ``g = num_heads / num_kv_heads`` query heads (query head ``h`` reads key
head ``h // g``, as SDPA's ``enable_gqa``); ``forward`` calls
``linear_attention(..., enable_gqa=True)`` and ``init_state`` makes a grouped decoding
state. See :class:`FavorAttention`.

``torch.compile``: both modes trace with ``fullgraph=True`` in eval mode (or with
``redraw_interval=None``); the causal scan is one custom op in compiled graphs
(:mod:`kernelkit.attention._compiled`); a feature redraw (NumPy) runs eagerly, outside
the graph. A compiled graph cannot read an ``attn_mask``'s values: pass
``is_causal=True`` with the causal mask (as ``nn.TransformerEncoderLayer`` does), which is
then trusted, as ``nn.MultiheadAttention`` trusts it.
"""

from __future__ import annotations

import math
import numbers
import secrets
from collections import deque
from contextlib import nullcontext

import numpy as np
import torch
from torch import nn

from .._backend import check_random_state
from ..features.favor import Moments
from ._maps import FEATURE_MAPS, FITTED_MAPS, builds_not_kept
from .decoding import (
    LinearAttentionState,
    _feature_digest,
    _features_diff,
    _init_decoding_state,
    _same_features,
    linear_attention_step,
)
from .functional import (
    _all_finite,
    _check_is_causal,
    _check_sampler,
    _eager_checked,
    _finite_check,
    _float_blocked,
    _raise_not_finite,
    _split_blocked_mask,
    _tensor_arg,
    attention_moments,
    draw_features,
    linear_attention,
)

__all__ = ["FavorAttention"]


def _compute_dtype(dtype):
    """The dtype the attention computes in for inputs of ``dtype`` (float16 / bfloat16
    in float32, as :func:`~kernelkit.attention.init_decoding_state`)."""
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}.")
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _no_fused_fast_path(module, args):
    """A no-op forward pre-hook. ``nn.TransformerEncoderLayer`` skips its fused fast path
    (``torch._transformer_encoder_layer_fwd``, exact softmax attention computed from
    ``self_attn.in_proj_weight``) when any submodule has a hook, so that in eval mode a
    ``FavorAttention`` layer still runs its own forward."""
    return None


# the redraw generator's state in the state_dict (extra state): a PCG64 state and
# increment, 128 bits each as four 32-bit words (low first), then has_uint32 and uinteger
_RNG_WORDS = 10


def _rng_state_tensor(rng) -> torch.Tensor:
    """The state of a PCG64 ``numpy.random.Generator`` as an int64 tensor of
    ``_RNG_WORDS`` words; empty for another bit generator (not saved)."""
    st = rng.bit_generator.state
    if st.get("bit_generator") != "PCG64":
        return torch.zeros(0, dtype=torch.int64)
    words = [
        (int(v) >> (32 * i)) & 0xFFFFFFFF
        for v in (st["state"]["state"], st["state"]["inc"])
        for i in range(4)
    ]
    words += [int(st["has_uint32"]), int(st["uinteger"])]
    return torch.tensor(words, dtype=torch.int64)


def _rng_state_dict(t: torch.Tensor) -> dict:
    """Inverse of :func:`_rng_state_tensor`: the PCG64 ``bit_generator.state`` dict."""
    w = [int(x) for x in t.tolist()]
    if len(w) != _RNG_WORDS or any(x < 0 or x > 0xFFFFFFFF for x in w):
        raise ValueError(
            "FavorAttention's _extra_state must be the state of its redraw generator, "
            f"{_RNG_WORDS} 32-bit words as saved by state_dict(); got {len(w)} values."
        )

    def join(ws):
        return sum(x << (32 * i) for i, x in enumerate(ws))

    return {
        "bit_generator": "PCG64",
        "state": {"state": join(w[:4]), "inc": join(w[4:8])},
        "has_uint32": w[8],
        "uinteger": w[9],
    }


_REDRAW_BREAK = (
    "FavorAttention redraws its random features every redraw_interval training calls, "
    "with NumPy outside the compiled graph: a graph break. Under "
    "torch.compile(fullgraph=True) build it with redraw_interval=None and call "
    "redraw_features() yourself between compiled steps, or compile without fullgraph."
)


#: training calls a module keeps for checkpoint recomputations (their projections, and
#: the running statistics the causal fitted maps read)
_RECORDED_CALLS = 64


class _Call:
    """One training call of a :class:`FavorAttention`: the fingerprint of its inputs,
    whether it was self-attention, the projections it used and, for causal fitted maps,
    the statistics it read; ``recomputed_in``: the backward passes (graph task ids) that
    recomputed it already."""

    __slots__ = ("fingerprint", "moments", "projection", "recomputed_in", "self_attention")

    def __init__(self, fingerprint, self_attention):
        self.fingerprint = fingerprint
        self.self_attention = self_attention
        self.projection = {}
        self.moments = None
        self.recomputed_in = set()

    def matches(self, fp) -> bool:
        a, b = self.fingerprint, fp
        return a[0] == b[0] and torch.equal(a[1], b[1])

    def same_state(self, other) -> bool:
        """Whether ``other`` used the same projections and statistics (then which of two
        calls on equal inputs a recomputation takes does not matter)."""
        if self.projection.keys() != other.projection.keys():
            return False
        if any(self.projection[k] is not other.projection[k] for k in self.projection):
            return False
        a, b = self.moments, other.moments
        if a is None or b is None:
            return a is b
        pairs = zip(
            (a.mean_x, a.second_x, a.mean_y, a.second_y),
            (b.mean_x, b.second_x, b.mean_y, b.second_y),
            strict=True,
        )
        return all(torch.equal(x, y) for x, y in pairs)


def _fingerprint(query, key):
    """``(key, values)``: the shapes, dtype and device of ``query`` and ``key``, and for
    each its sum, norm and a strided sum (a stride prime to the row length, so that a
    permutation of the rows changes it), accumulated in float32 at least (float64 for
    float64 inputs): a tensor on their device, with no host read when recorded (compared
    during the backward pass, where a recomputation gives the same values). By value,
    not identity: a reentrant checkpoint passes detached copies, so ``key is query``
    does not survive it. About 1% of a training forward."""
    parts = []
    with torch.no_grad():
        for t in (query, key):
            f = t.detach().reshape(-1)
            acc = torch.float64 if f.dtype == torch.float64 else torch.float32
            step = next((p for p in (7, 11, 13, 17, 19) if t.shape[-1] % p), 23)
            parts += [f.sum(dtype=acc), torch.linalg.vector_norm(f, dtype=acc)]
            parts.append(f[1::step].sum(dtype=acc))
        values = torch.stack([p.to(torch.float64) for p in parts])
        meta = (tuple(query.shape), tuple(key.shape), query.dtype, key.dtype, str(query.device))
        return meta, values


def _copied(mom):
    """A copy of the Moments ``mom`` (None stays None)."""
    if mom is None:
        return None
    fields = (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)
    return Moments(*(t.detach().clone() for t in fields))


class FavorAttention(nn.Module):
    """Multi-head linear attention (FAVOR+ / FAVOR++ / FAVOR# / hybrid / linear maps).

    A replacement for ``torch.nn.MultiheadAttention(batch_first=True)``: same constructor
    arguments, parameters (``in_proj_weight`` or ``q/k/v_proj_weight``, ``in_proj_bias``,
    ``out_proj``; an MHA ``state_dict`` loads with ``strict=False``) and forward
    signature; ``forward`` returns ``(out, None)``. ``num_kv_heads`` makes it
    grouped-query attention (Llama-style, fewer key / value heads than query heads).

    Parameters
    ----------
    embed_dim : int
        Model dimension ``E`` (``head_dim = E / num_heads``).
    num_heads : int
        Number of heads.
    dropout : float
        Dropout on the attention output of every head, before ``out_proj`` (training
        only). ``nn.MultiheadAttention`` drops attention *weights*, which linear
        attention never forms.
    bias : bool
        Biases of the input and output projections.
    add_bias_kv, add_zero_attn : bool
        Not supported (must be False).
    kdim, vdim : int, optional
        Key / value input dimensions (default ``embed_dim``).
    batch_first : bool
        ``(N, L, E)`` inputs (default True); ``(L, N, E)`` otherwise.
    device, dtype
        Of the parameters.
    feature_map : str
        One of :data:`kernelkit.attention.FEATURE_MAPS` (default ``"sderf"``, FAVOR#).
    n_features : int
        Feature dimension per head ``M`` (as in :func:`linear_attention`).
    redraw_interval : int or None
        In training mode the projections are redrawn every this many forward calls
        (None or 0: never). ``eval()`` keeps them fixed.
    sampler : {"orthogonal", "iid", "sorf", "hadamard", "halton"}
        How the projections are drawn (:func:`kernelkit.features.draw_projection`);
        default block-orthogonal.
    chunk_size : int
        Causal chunk length (power of two).
    momentum : float or None
        Update of the running statistics of causal fitted maps (exponential average;
        None: cumulative average).
    random_state : None, int or numpy.random.Generator
        Seeds the projections (drawn with NumPy). None: a seed drawn from torch's global
        generator, so that ``torch.manual_seed`` makes the module (its first projections
        and its redraws) reproducible, as it does its weights. The generator's state is
        in the ``state_dict`` (its ``_extra_state``), so a module loaded to resume
        training redraws the projections the saved one would have drawn (a ``state_dict``
        without it, as a MultiheadAttention's or one saved by an older kernelkit, leaves
        the module's own generator; so does a Generator other than NumPy's default
        PCG64, whose state is not saved). Modules built with one shared Generator each
        save its state: load them into modules that share one too, or they all redraw
        the same projections.
    num_kv_heads : int, optional
        Key / value heads ``Hkv`` (grouped-query attention), a divisor of ``num_heads``;
        None (default): ``num_heads``, plain multi-head attention with the parameters of
        ``nn.MultiheadAttention``. With ``Hkv < num_heads`` each key / value head serves
        ``g = num_heads / Hkv`` query heads (query head ``h`` reads key head ``h // g``,
        as ``enable_gqa`` in :func:`linear_attention` and SDPA), and the parameters are
        ``q_proj_weight`` (E, E), ``k_proj_weight`` (Hkv head_dim, kdim),
        ``v_proj_weight`` (Hkv head_dim, vdim) (never ``in_proj_weight``: the packed
        (3 E, E) layout cannot hold them), ``in_proj_bias`` (E + 2 Hkv head_dim) =
        ``[b_q, b_k, b_v]`` and ``out_proj`` (E, E) as without GQA.

    Notes
    -----
    * ``need_weights=True`` raises (no weights exist).
    * ``attn_mask``, ``(L, S)`` or ``(N * num_heads, L, S)`` (bool ``True`` or float
      ``-inf`` = blocked), may only be the causal mask (blocked above the diagonal, top
      left aligned), a key padding (the same keys blocked in every row and in every head
      of a batch element; joined to ``key_padding_mask``), both combined, or None;
      ``is_causal=True`` alone selects causal attention.
    * ``key_padding_mask``: bool (True = padded) or float (``-inf`` or the dtype's
      minimum = padded, 0 = kept).
      Called as self-attention (``query is key``), the padded positions are left out of
      the fitted parameters (and the running statistics) as queries too, so the real rows
      do not depend on the padding.
    * Random features: one projection matrix (buffer ``projection``, plus
      ``sign_projection`` for ``hybrid_angular``) shared by the heads and saved in the
      ``state_dict``, with the state of the generator that redraws it (``_extra_state``),
      so that training resumed from a checkpoint redraws as the uninterrupted run.
    * Fitted maps (``gerf``, ``saderf``, ``aderf``, ``sderf``): bidirectional calls fit
      their parameters per batch element and head from that call's queries and keys;
      causal calls use running statistics (buffers ``running_mean_q``,
      ``running_second_q``, ``running_mean_k``, ``running_second_k``: means and second
      moments of the scaled queries per query head, ``(num_heads, head_dim[, head_dim])``,
      and of the scaled keys per key / value head, ``(num_kv_heads, head_dim[,
      head_dim])``) updated *after* each causal training forward, so no call sees its own
      tokens. Until the first update (``num_batches_tracked == 0``) they use FAVOR+
      features. ``eval()`` freezes them.
    * Grouped-query attention (``num_kv_heads < num_heads``): ``forward`` calls
      :func:`linear_attention` with ``enable_gqa=True``, which forms the key features
      once per key head where they are shared by a group (bidirectional, unfitted maps)
      and repeats the keys only where they are not (causal, per-head fits). The key
      statistics are kept per key head because they describe the keys that head's
      ``g`` query heads all attend; query head ``h`` is fitted from its own query
      statistics and those of key head ``h // g``, the same in ``forward`` and
      ``init_state``, so stepping equals the causal forward. A fitted map's key features
      then differ per query head, so its decoding state is per query head; the unfitted
      maps (and fitted ones before the first update) keep one per key head.
    * ``torch.compile``: both modes compile with ``fullgraph=True`` in eval mode (the
      causal scan as one custom op); a redraw in training mode runs eagerly
      (``torch.compiler.disable``). In a compiled graph an ``attn_mask`` must come with
      ``is_causal=True`` (its values cannot be read there; the hint is trusted).
    * Activation checkpointing (``torch.utils.checkpoint``): the forward rerun during the
      backward pass neither redraws nor updates the running statistics, and uses those
      of the module's last call, so gradients are those of the original call.
    * As ``self_attn`` of ``nn.TransformerEncoderLayer``: a (no-op) forward pre-hook
      keeps the layer's fused eval-mode fast path, which would compute exact softmax
      attention from ``in_proj_weight``, from bypassing this module. The nested tensors
      of ``nn.TransformerEncoder``'s eval fast path with a padding mask (also inside
      ``nn.Transformer``) are padded back, attended with that mask and nested again.
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        dropout=0.0,
        bias=True,
        add_bias_kv=False,
        add_zero_attn=False,
        kdim=None,
        vdim=None,
        batch_first=True,
        device=None,
        dtype=None,
        *,
        feature_map="sderf",
        n_features=256,
        redraw_interval=1000,
        sampler="orthogonal",
        chunk_size=64,
        momentum=0.1,
        random_state=None,
        num_kv_heads=None,
    ):
        super().__init__()
        for name, val in (
            ("embed_dim", embed_dim),
            ("num_heads", num_heads),
            ("kdim", 1 if kdim is None else kdim),
            ("vdim", 1 if vdim is None else vdim),
            ("num_kv_heads", 1 if num_kv_heads is None else num_kv_heads),
        ):
            if isinstance(val, bool) or not isinstance(val, numbers.Integral) or val < 1:
                raise ValueError(f"{name} must be a positive integer, got {val!r}.")
        for name, val in (
            ("dropout", dropout),
            ("momentum", 0.5 if momentum is None else momentum),
        ):
            if isinstance(val, bool) or not isinstance(val, numbers.Real):
                raise TypeError(f"{name} must be a float, got {val!r}.")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}.")
        if num_kv_heads is not None and num_heads % num_kv_heads:
            raise ValueError(
                f"num_kv_heads={num_kv_heads} must divide num_heads={num_heads} (grouped-query "
                "attention: each key / value head serves a group of query heads)."
            )
        if add_bias_kv or add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn are not supported by FavorAttention.")
        if not (0.0 <= float(dropout) < 1.0):
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}.")
        if not isinstance(feature_map, str) or feature_map.lower() not in FEATURE_MAPS:
            raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}.")
        if (
            isinstance(n_features, bool)
            or not isinstance(n_features, numbers.Integral)
            or n_features < 1
        ):
            raise ValueError(f"n_features must be a positive integer, got {n_features!r}.")
        if redraw_interval is not None and (
            isinstance(redraw_interval, bool)
            or not isinstance(redraw_interval, numbers.Integral)
            or redraw_interval < 0
        ):
            raise ValueError(
                f"redraw_interval must be None or a non-negative integer, got {redraw_interval!r}."
            )
        if momentum is not None and not (0.0 < float(momentum) <= 1.0):
            raise ValueError(f"momentum must be None or in (0, 1], got {momentum!r}.")
        if (
            isinstance(chunk_size, bool)
            or not isinstance(chunk_size, numbers.Integral)
            or chunk_size < 1
            or chunk_size & (chunk_size - 1)
        ):
            raise ValueError(f"chunk_size must be a power of two, got {chunk_size!r}.")
        if dtype is not None:  # what torch takes (float: float64), then checked floating
            try:
                dtype = torch.empty((), dtype=dtype).dtype
            except (TypeError, RuntimeError):
                dtype = repr(dtype)
            if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
                raise TypeError(
                    "dtype must be None or a floating dtype (torch.float32, float, ...; "
                    f"the parameters'), got {dtype}."
                )
        fk = {"device": device, "dtype": dtype}
        self.embed_dim = int(embed_dim)
        self.kdim = self.embed_dim if kdim is None else int(kdim)
        self.vdim = self.embed_dim if vdim is None else int(vdim)
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.num_heads = int(num_heads)
        self.head_dim = self.embed_dim // self.num_heads
        self.num_kv_heads = self.num_heads if num_kv_heads is None else int(num_kv_heads)
        # grouped-query attention: fewer key / value heads than query heads
        self._gqa = self.num_kv_heads != self.num_heads
        if self._gqa:  # no packed in_proj_weight (3 E, E): q, k, v weights differ in size
            self._qkv_same_embed_dim = False
        self.dropout = float(dropout)
        self.batch_first = bool(batch_first)
        self.feature_map = feature_map.lower()
        self.n_features = int(n_features)
        self.redraw_interval = redraw_interval
        self.sampler = _check_sampler(sampler)
        self.chunk_size = int(chunk_size)
        self.momentum = momentum
        E, Ekv = self.embed_dim, self.num_kv_heads * self.head_dim
        try:
            if self._qkv_same_embed_dim:
                self.in_proj_weight = nn.Parameter(torch.empty(3 * E, E, **fk))
                self.register_parameter("q_proj_weight", None)
                self.register_parameter("k_proj_weight", None)
                self.register_parameter("v_proj_weight", None)
            else:  # (GQA: k, v project to the Hkv key / value heads, Ekv = Hkv head_dim)
                self.q_proj_weight = nn.Parameter(torch.empty(E, E, **fk))
                self.k_proj_weight = nn.Parameter(torch.empty(Ekv, self.kdim, **fk))
                self.v_proj_weight = nn.Parameter(torch.empty(Ekv, self.vdim, **fk))
                self.register_parameter("in_proj_weight", None)
            if bias:  # [b_q (E), b_k (Ekv), b_v (Ekv)]
                self.in_proj_bias = nn.Parameter(torch.empty(E + 2 * Ekv, **fk))
            else:
                self.register_parameter("in_proj_bias", None)
            self.out_proj = nn.Linear(E, E, bias=bias, **fk)
        except torch.OutOfMemoryError:  # a full device: callers catch it to retry smaller
            raise
        except RuntimeError as exc:  # torch's allocator / size errors name no argument
            raise ValueError(
                f"The projection weights of embed_dim={E}, kdim={self.kdim}, vdim={self.vdim} "
                f"cannot be allocated on device={device!r} ({exc}): reduce them, or choose "
                "an available device."
            ) from exc
        self._reset_parameters()

        if random_state is None:  # torch's global generator: torch.manual_seed fixes it
            random_state = int(torch.randint(0, 2**62, (), dtype=torch.int64, device="cpu"))
        self._rng = check_random_state(random_state)
        hd, H = self.head_dim, self.num_heads
        # in the module's dtype, as its parameters; redraws keep the buffers' dtype and
        # device (those of a later .to() / .half() / .double())
        self.register_buffer("projection", torch.empty(0, device=device, dtype=dtype))
        self.register_buffer("sign_projection", torch.empty(0, device=device, dtype=dtype))
        self.register_buffer("calls_since_redraw", torch.zeros((), dtype=torch.long, device=device))
        self.redraw_features()
        # allocated for every map (tiny), so state dicts load across feature maps; the
        # queries' per query head, the keys' per key / value head (GQA: Hkv < H)
        # float32, or float64 for a float64 module (as .double() makes them): half-precision
        # sums would round the statistics
        Hkv = self.num_kv_heads
        sk = {"device": device, "dtype": torch.float64 if dtype == torch.float64 else None}
        self.register_buffer("running_mean_q", torch.zeros(H, hd, **sk))
        self.register_buffer("running_second_q", torch.zeros(H, hd, hd, **sk))
        self.register_buffer("running_mean_k", torch.zeros(Hkv, hd, **sk))
        self.register_buffer("running_second_k", torch.zeros(Hkv, hd, hd, **sk))
        self.register_buffer(
            "num_batches_tracked", torch.zeros((), dtype=torch.long, device=device)
        )
        self._any_tracked = False  # its host mirror (see _tracked)
        # marks the decoding states of this module (and of its copies: copy.deepcopy
        # keeps it), which step accepts without comparing their features (see _check_state)
        self._decoding_token = secrets.token_hex(8)
        # inside nn.TransformerEncoderLayer in eval mode, keep torch's fused exact-softmax
        # fast path from replacing this module (it reads only the in_proj weights)
        self.register_forward_pre_hook(_no_fused_fast_path)

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            nn.init.xavier_uniform_(self.q_proj_weight)
            nn.init.xavier_uniform_(self.k_proj_weight)
            nn.init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self):
        """The constructor arguments that ``repr(module)`` shows.

        Returns
        -------
        str
        """
        kv = f"num_kv_heads={self.num_kv_heads}, " if self._gqa else ""
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, {kv}"
            f"feature_map={self.feature_map!r}, n_features={self.n_features}, "
            f"redraw_interval={self.redraw_interval}"
        )

    @torch.compiler.disable
    def redraw_features(self, random_state=None):
        """Draw new random projections (NumPy) into the ``projection`` buffers, each in
        the dtype and on the device of the buffer it replaces (the module's, after
        ``.to()``, ``.half()``, ``.double()``).

        Parameters
        ----------
        random_state : None, int or numpy.random.Generator, optional
            Reseed the module's generator first (this and every later redraw follow
            it, and it is saved in the ``state_dict``). Layers cloned by
            ``copy.deepcopy`` (``nn.TransformerEncoder`` clones its layer) copy the
            generator too and would redraw identical projections for ever: give each
            its own, e.g. ``layer.self_attn.redraw_features(random_state=i)``. None
            keeps the generator.
        """
        if random_state is not None:
            self._rng = check_random_state(random_state)
        params = draw_features(
            self.feature_map, self.n_features, self.head_dim, self._rng, self.sampler
        )
        # ordinary tensors even under torch.inference_mode() (a training-mode forward
        # there redraws): an inference tensor as a buffer would refuse every later
        # in-place update, load_state_dict's copy included
        with torch.inference_mode(False):
            for key, name in (("W", "projection"), ("T", "sign_projection")):
                old = getattr(self, name)
                val = params.get(key)
                # drawn in float64, rounded once to the buffer's dtype
                t = torch.empty(0) if val is None else torch.as_tensor(val)
                setattr(self, name, t.to(device=old.device, dtype=old.dtype))
        self.calls_since_redraw.zero_()

    @torch.compiler.disable
    def _maybe_redraw(self):
        if not self.training or not self.redraw_interval:
            return
        if int(self.calls_since_redraw) >= self.redraw_interval:
            self.redraw_features()
        self.calls_since_redraw += 1

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=False,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        """Attention output and ``None`` (no weights), shapes as ``nn.MultiheadAttention``.

        Parameters
        ----------
        query : tensor, shape (N, L, E)
            ``(L, N, E)`` with ``batch_first=False``; unbatched (L, E).
        key : tensor, shape (N, S, kdim)
            ``(S, N, kdim)`` with ``batch_first=False``; unbatched (S, kdim).
        value : tensor, shape (N, S, vdim)
            ``(S, N, vdim)`` with ``batch_first=False``; unbatched (S, vdim).
        key_padding_mask : tensor, shape (N, S) or (S,), optional
            Bool (True = padded) or float (``-inf`` = padded).
        need_weights : bool, default False
            Must be False: the weights are never formed (True raises a ``ValueError``).
        attn_mask : tensor, shape (L, S) or (N * num_heads, L, S), optional
            The causal mask (the same as ``is_causal=True``), a key padding (the same
            keys blocked in every row and head of a batch element, joined to
            ``key_padding_mask``) or both; other masks raise a ``ValueError``.
        average_attn_weights : bool, default True
            Accepted for ``nn.MultiheadAttention`` compatibility; ignored (no weights).
        is_causal : bool, default False
            Causal attention (query ``i`` attends to keys ``j <= i``).

        Returns
        -------
        out : tensor, shape (N, L, E)
            ``(L, N, E)`` with ``batch_first=False``, (L, E) unbatched; dtype of ``query``.
        weights : None
        """
        if need_weights:
            raise ValueError(
                "FavorAttention never forms attention weights; call it with need_weights=False."
            )
        if isinstance(query, torch.Tensor) and query.is_nested:
            return self._forward_nested(query, key, value, key_padding_mask, attn_mask, is_causal)
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}.")
            if t.is_nested:
                raise ValueError(
                    f"{name} is a nested tensor: FavorAttention takes nested tensors only as "
                    "nn.TransformerEncoder passes them (self-attention, query is key is value, "
                    "batch_first=True, no masks)."
                )
            if t.dim() not in (2, 3):
                raise ValueError(
                    f"{name} must be 2-D (unbatched) or 3-D (batched), got shape {tuple(t.shape)}."
                )
        if not (query.dim() == key.dim() == value.dim()):
            raise ValueError(
                "query, key and value must all be batched or all unbatched, got "
                f"{query.dim()}-D, {key.dim()}-D, {value.dim()}-D."
            )
        # the in-projection's weights, which the inputs meet first (out_proj may be
        # swapped, e.g. by quantize_dynamic, for a module whose weight is no tensor);
        # under autocast, which casts each input for its projection, dtypes may differ
        # (as nn.MultiheadAttention allows: a bfloat16 decoder on float32 memory)
        _check_input_dtypes((query, key, value), self._in_weight().dtype, query.device.type)
        # self-attention (one tensor, as nn.Transformer*Layer pass): padded keys are padded
        # queries too, and stay out of the fitted parameters on both sides
        self_attention = query is key
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query[None], key[None], value[None]
            if key_padding_mask is not None:
                key_padding_mask = _tensor_arg(key_padding_mask, "key_padding_mask")[None]
        elif not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        N, L, Eq = query.shape
        S = key.shape[1]
        if Eq != self.embed_dim:
            raise ValueError(
                f"query has embedding dim {Eq}, the module embed_dim={self.embed_dim}."
            )
        if key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise ValueError(
                f"key / value have dims {key.shape[-1]} / {value.shape[-1]}, the "
                f"module expects kdim={self.kdim}, vdim={self.vdim}."
            )
        if key.shape[0] != N or value.shape[0] != N or value.shape[1] != S:
            raise ValueError(
                f"batch / length mismatch: query {tuple(query.shape)}, key "
                f"{tuple(key.shape)}, value {tuple(value.shape)}."
            )
        # eager CPU inputs (linear_attention's check_finite=None policy): a clear error
        # before the in-projection turns NaN into NaN queries and a failing fit
        _finite_check(None, query=query, key=key, value=value)
        is_causal, blocked = self._check_attn_mask(attn_mask, is_causal, L, S, N, self.num_heads)
        mask = self._check_padding_mask(key_padding_mask, N, S, query.device)
        if blocked is not None:  # attn_mask's key padding, with key_padding_mask's
            blocked = blocked.to(query.device)
            mask = blocked if mask is None else mask | blocked

        # activation checkpointing recomputes this call during the backward pass: with the
        # features and statistics of the original call (no redraw, no update), found by
        # the values of its inputs among the module's recent training calls
        recompute = self.training and self._in_recomputation()
        if self.training and self.redraw_interval and not recompute:  # eval: nothing to trace
            if torch.compiler.is_compiling():
                # the redraw runs NumPy outside the graph: a graph break, which under
                # fullgraph=True should say what to do rather than name _maybe_redraw
                torch._dynamo.graph_break(msg=_REDRAW_BREAK)
            self._maybe_redraw()
        call = None
        if recompute:
            call = self._recorded_call(query, key)
            if call is not None:  # a reentrant checkpoint passes copies: not `key is query`
                self_attention = call.self_attention
        elif self.training and not torch.compiler.is_compiling():
            call = self._record_call(query, key, self_attention)
        H, Hkv, hd = self.num_heads, self.num_kv_heads, self.head_dim
        q, k, v = self._in_projection(query, key, value)
        q = q.view(N, L, H, hd).transpose(1, 2)  # (N, H, L, hd)
        k = k.view(N, S, Hkv, hd).transpose(1, 2)  # (N, Hkv, S, hd)
        v = v.view(N, S, Hkv, hd).transpose(1, 2)
        mask4 = None if mask is None else mask[:, None, :]  # (N, 1, S)
        proj = {"W": self.projection} if self.projection.numel() else {}
        if self.sign_projection.numel():
            proj["T"] = self.sign_projection
        if call is not None:
            if recompute:
                proj = call.projection  # the original call's draw
            else:
                call.projection = proj
        qmask = mask4 if self_attention and L else None  # (N, 1, L): padded queries
        out = _attention_output_checked(
            lambda: self._attention(q, k, v, mask4, proj, recompute, qmask, call, is_causal),
            query=query,
            key=key,
            value=value,
        )
        out = nn.functional.dropout(out, self.dropout, self.training)
        out = out.transpose(1, 2).reshape(N, L, self.embed_dim)  # (N, L, E)
        out = self.out_proj(out)
        if unbatched:
            out = out[0]
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, None

    def _attention(self, q, k, v, mask4, proj, recompute, qmask, call, is_causal):
        """Per-head attention (N, H, L, hd) of the projected inputs (forward's body)."""
        if is_causal:
            out = self._causal_attention(q, k, v, mask4, proj, recompute, qmask, call)
        else:
            mom = None
            if self.feature_map in FITTED_MAPS and qmask is not None:
                mom = self._per_query_head(self._moments(q, k, mask4, qmask))  # (N, H, ...)
            # GQA: the functional API groups the query heads over the key heads itself;
            # this batch's own moments: fitted, not kept for reuse (compiled graphs keep none)
            with nullcontext() if torch.compiler.is_compiling() else builds_not_kept():
                out = linear_attention(
                    q,
                    k,
                    v,
                    self.feature_map,
                    self.n_features,
                    key_padding_mask=mask4,
                    projection=proj,
                    moments=mom,
                    check_finite=None,
                    enable_gqa=self._gqa,
                )
        return out

    def _forward_nested(self, query, key, value, key_padding_mask, attn_mask, is_causal):
        """Self-attention on a nested batch (N sequences of shapes (L_i, E)), as
        ``nn.TransformerEncoder`` passes a padded batch in eval mode
        (``enable_nested_tensor``): padded to (N, max L_i, E), attended with the padding
        as ``key_padding_mask``, and nested again (the padded rows dropped)."""
        if not (
            key is query
            and value is query
            and self.batch_first
            and key_padding_mask is None
            and attn_mask is None
        ):
            raise ValueError(
                "query is a nested tensor: FavorAttention takes nested tensors only as "
                "nn.TransformerEncoder passes them (self-attention, query is key is value, "
                "batch_first=True, no masks); pass a padded batch and a key_padding_mask."
            )
        lengths = [t.shape[0] for t in query.unbind()]
        x = query.to_padded_tensor(0.0)  # (N, L, E)
        n = torch.tensor(lengths, device=x.device)
        pad = torch.arange(x.shape[1], device=x.device) >= n[:, None]  # (N, L)
        out, _ = self.forward(x, x, x, key_padding_mask=pad, is_causal=is_causal)
        return torch.nested.as_nested_tensor(
            [o[:m] for o, m in zip(out, lengths, strict=True)]
        ), None

    def _in_weight(self) -> torch.Tensor:
        """The query in-projection weight, whose dtype and device are the module's: the
        inputs meet it first, and it stays a float ``Parameter`` when
        ``torch.ao.quantization.quantize_dynamic(module, {nn.Linear})`` swaps ``out_proj``
        for a quantized Linear (whose ``weight`` is a method, not a tensor)."""
        return self.in_proj_weight if self._qkv_same_embed_dim else self.q_proj_weight

    def _in_projection(self, query, key, value):
        # -> q (..., E), k, v (..., Ekv) with Ekv = num_kv_heads head_dim (E without GQA)
        E, Ekv = self.embed_dim, self.num_kv_heads * self.head_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else b.split([E, Ekv, Ekv])
        if self._qkv_same_embed_dim:
            Wq, Wk, Wv = self.in_proj_weight.split(E)
        else:
            Wq, Wk, Wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        if query is key and key is value and self._qkv_same_embed_dim:
            return nn.functional.linear(query, self.in_proj_weight, b).chunk(3, dim=-1)
        return (
            nn.functional.linear(query, Wq, bq),
            nn.functional.linear(key, Wk, bk),
            nn.functional.linear(value, Wv, bv),
        )

    @staticmethod
    def _check_attn_mask(attn_mask, is_causal, L, S, N, H):
        """MultiheadAttention's (L, S) or (N * num_heads, L, S) ``attn_mask`` (True or
        ``-inf`` = blocked) as ``(is_causal, padding)``: the causal mask, a key padding (the
        same keys blocked in every row, and in every head of a batch element), or both.
        ``padding`` is None or bool (N, S), True = padded."""
        is_causal = _check_is_causal(is_causal)
        if attn_mask is None:
            return is_causal, None
        m = _tensor_arg(attn_mask, "attn_mask")
        if m.dtype != torch.bool and not m.is_floating_point():
            raise TypeError(f"attn_mask must be bool or float, got {m.dtype}.")
        if m.shape not in ((L, S), (N * H, L, S)):
            raise ValueError(
                f"attn_mask must be None or an (L, S) or (N * num_heads, L, S) mask, got "
                f"shape {tuple(m.shape)} for L={L}, S={S}, N * num_heads={N * H}."
            )
        if torch.compiler.is_compiling():
            # a compiled graph cannot branch on the mask's values: trust the hint
            # is_causal=True, as nn.MultiheadAttention does (nn.Transformer*Layer passes it
            # with its causal src_mask); eager calls check the values below
            if is_causal:
                return True, None
            raise ValueError(
                "inside torch.compile FavorAttention cannot read attn_mask's values to see "
                "whether it is the causal mask; pass is_causal=True with it (as "
                "nn.TransformerEncoderLayer(..., is_causal=True) does), or attn_mask=None "
                "with is_causal=True (and padding as key_padding_mask)."
            )
        if m.dtype == torch.bool:
            blocked = m
        else:
            blocked = _float_blocked(m)
            if not bool((m[~blocked] == 0).all()):
                raise ValueError(
                    "a float attn_mask may only hold 0 (attend) and -inf or the dtype's "
                    "minimum (blocked), as the causal mask of "
                    "nn.Transformer.generate_square_subsequent_mask: linear attention "
                    "cannot add a bias to scores it never forms."
                )
        if L == 0 or S == 0:
            return is_causal, None
        blocked = blocked.reshape(-1, H, L, S) if blocked.dim() == 3 else blocked[None, None]
        split = _split_blocked_mask(blocked)  # (causal, pad (N or 1, H or 1, S))
        if split is None:
            raise ValueError(
                "FavorAttention supports only the causal attn_mask, a key-padding one (the "
                "same keys blocked in every row) or both combined (linear attention cannot "
                "apply an arbitrary mask); pass attn_mask=None with is_causal=True and "
                "key_padding_mask."
            )
        causal, pad = split
        if causal and L < S:  # keys j >= L, blocked in every row by the causal mask alone
            pad = pad.clone()
            pad[..., L:] = False
        if not bool((pad == pad[:, :1]).all()):
            raise ValueError(
                "attn_mask blocks different keys in different heads of a batch element; "
                "FavorAttention takes one key padding per batch element (key_padding_mask "
                "(N, S))."
            )
        pad = pad[:, 0].expand(N, S)  # (N, S)
        # with a mask, its values decide (is_causal is only a hint, as in MultiheadAttention)
        return causal, (pad if bool(pad.any()) else None)

    @staticmethod
    def _check_padding_mask(mask, N, S, device):
        if mask is None:
            return None
        m = _tensor_arg(mask, "key_padding_mask", device)
        if m.shape != (N, S):
            raise ValueError(
                f"key_padding_mask must have shape (N, S) = ({N}, {S}), got {tuple(m.shape)}."
            )
        if m.dtype == torch.bool:
            return m
        if m.is_floating_point():
            pad = _float_blocked(m)
            msg = (
                "a float key_padding_mask may only hold 0 (keep) and -inf or the dtype's "
                "minimum (padded)."
            )
            valid = ((m == 0) | pad).all()
            if torch.compiler.is_compiling():  # (nn.TransformerEncoderLayer passes floats)
                torch._assert_async(valid, msg)  # no host read in a graph
            elif not bool(valid):
                raise ValueError(msg)
            return pad
        raise TypeError(f"key_padding_mask must be bool or float, got {m.dtype}.")

    def _record_call(self, query, key, self_attention) -> _Call:
        """Record a training call for a checkpoint recomputation of it (:meth:`forward`
        fills in its projection and, causal fitted maps, its statistics): the most recent
        :data:`_RECORDED_CALLS` calls are kept. Inputs are identified by a fingerprint of
        their values (a recomputation inside a checkpointed block sees new tensors with
        the same values), computed without a host read."""
        calls = self.__dict__.get("_calls")
        if calls is None:
            calls = self.__dict__["_calls"] = deque(maxlen=_RECORDED_CALLS)
        call = _Call(_fingerprint(query, key), self_attention)
        calls.append(call)
        return call

    def _recorded_call(self, query, key) -> _Call | None:
        """The recorded call of the inputs a checkpoint recomputes: among the recorded
        calls with their fingerprint, the most recent one this backward pass has not
        recomputed yet (calls on equal inputs in separate checkpoints are recomputed
        latest first), else the most recent one. Warns where no call matches (more than
        :data:`_RECORDED_CALLS` calls since: the current features are used) and where
        calls on equal inputs used different features (the pairing is then a guess)."""
        import warnings

        calls = self.__dict__.get("_calls") or ()
        fp = _fingerprint(query, key)
        matches = [c for c in reversed(calls) if c.matches(fp)]
        if not matches:
            warnings.warn(
                "FavorAttention: a checkpoint recomputation found no record of its call "
                f"among the module's last {_RECORDED_CALLS} training calls; it uses the "
                "current features and statistics, so its gradients are not exactly those "
                "of the original call (a redraw or a running-statistics update since then).",
                UserWarning,
                stacklevel=3,
            )
            return None
        task = torch._C._current_graph_task_id()
        fresh = [c for c in matches if task not in c.recomputed_in]
        call = fresh[0] if fresh else matches[0]
        if len(fresh) > 1 and not all(call.same_state(c) for c in fresh[1:]):
            warnings.warn(
                "FavorAttention: calls on equal inputs used different features (a redraw "
                "or a statistics update between them), and a checkpoint recomputation "
                "cannot tell them apart; the latest is used. Give such calls their own "
                "checkpoints in forward order, or avoid a redraw between them.",
                UserWarning,
                stacklevel=3,
            )
        call.recomputed_in.add(task)
        return call

    @staticmethod
    def _in_recomputation() -> bool:
        """Whether forward runs inside a backward pass, as when activation checkpointing
        (``torch.utils.checkpoint``) recomputes it: that call must see the features and
        running statistics of the original one."""
        if torch.compiler.is_compiling():
            return False
        return torch._C._current_graph_task_id() != -1

    def _causal_attention(self, q, k, v, mask4, proj, recompute=False, qmask=None, call=None):
        # eager: chunk loop + custom autograd Function; running statistics read before and
        # updated after the call (training only), so no call sees its own tokens. A
        # checkpoint recomputation reuses the statistics of its original call (``call``,
        # :meth:`_recorded_call`; the current ones where it is no longer recorded).
        fm, moments = self.feature_map, None
        if fm in FITTED_MAPS:
            if recompute and call is not None:
                moments = call.moments
            else:
                moments = self._running_moments()
                if call is not None:  # a copy: float64 buffers are updated in place
                    call.moments = _copied(moments)
            if moments is None:
                fm = "positive"  # no statistics yet: A = 0
        out = linear_attention(
            q,
            k,
            v,
            fm,
            self.n_features,
            is_causal=True,
            key_padding_mask=mask4,
            projection=proj,
            moments=moments,
            chunk_size=self.chunk_size,
            check_finite=None,
            enable_gqa=self._gqa,
        )
        if (
            self.training
            and self.feature_map in FITTED_MAPS
            and not recompute
            and q.numel()
            and k.numel()
        ):
            self._update_running(q, k, mask4, qmask)  # (no queries or keys: no statistics)
        return out

    # ------------------------------------------------------------ recurrent decoding
    def init_state(self, batch_size, device=None, dtype=None) -> LinearAttentionState:
        """Empty recurrent state for :meth:`step` (causal self-attention decoding).

        Uses the module's ``projection`` buffer and, for fitted maps, its running
        statistics as they are now (FAVOR+ features before the first update, as the causal
        forward); a state made before a redraw keeps the old features. Batch shape
        ``(batch_size, num_heads)``, ``d = e = head_dim``; ``device`` / ``dtype`` default
        to those of the module's parameters (float16 / bfloat16 compute in float32); a
        ``dtype`` that computes in another dtype than the parameters (float64 for a float32
        module) raises a ``TypeError``, since :meth:`step` would refuse the state.
        With ``num_kv_heads < num_heads`` it is a grouped state (``enable_gqa``,
        ``state.kv_heads == num_kv_heads``): kept once per key / value head (``state.kvz``
        ``(batch_size, num_kv_heads, M, head_dim + 1)``, ``g`` times smaller) where the key
        features do not depend on the query head (the unfitted maps, and the fitted maps
        before the first update of their statistics), else per query head (fitted maps
        with statistics: each query head's parameters come from its own query
        statistics). The state's fingerprint ``state.features`` is the module's, taken
        once while its projection and statistics do not change (a copy of them to the
        host after each change), which :meth:`step` and ``state.restore`` compare. See
        :func:`kernelkit.attention.init_decoding_state`.

        Parameters
        ----------
        batch_size : int
            ``N``.
        device : torch.device, optional
        dtype : torch.dtype, optional

        Returns
        -------
        LinearAttentionState
            ``state.kvz`` (batch_size, num_heads, M, head_dim + 1) and ``state.c``
            (batch_size, num_heads, M), both with ``num_kv_heads`` for ``num_heads`` in a
            grouped state; ``state.t == 0``.
        """
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, numbers.Integral)
            or batch_size < 0
        ):
            raise ValueError(f"batch_size must be a non-negative integer, got {batch_size!r}.")
        fm, moments = self._decoding_features()
        w = self._in_weight()  # (not out_proj.weight: a method after quantize_dynamic)
        if dtype is not None and _compute_dtype(dtype) != _compute_dtype(w.dtype):
            # a state that step would refuse (it computes in the parameters' dtype)
            raise TypeError(
                f"init_state(dtype={dtype}): this module's parameters are {w.dtype}, so its "
                f"step computes in {_compute_dtype(w.dtype)} and takes only a state of that "
                f"compute dtype. Convert the module first (module.to({dtype})), or leave "
                "dtype out."
            )
        return _init_decoding_state(
            (int(batch_size), self.num_heads),
            self.head_dim,
            fm,
            self.n_features,
            projection=self.projection if self.projection.numel() else None,
            moments=moments,
            dtype=w.dtype if dtype is None else dtype,
            device=w.device if device is None else device,
            enable_gqa=self._gqa,
            num_kv_heads=self.num_kv_heads if self._gqa else None,
            features=self._features_digest(),
            module=getattr(self, "_decoding_token", None),
        )

    def __getstate__(self):
        # the kept fingerprint holds references to the buffers it was taken from: not
        # pickled (torch.save of the module, copy.deepcopy), taken again when needed
        state = dict(super().__getstate__())
        state.pop("_digest_kept", None)
        state.pop("_tracked_key", None)  # the same for _tracked's (count, version)
        state.pop("_calls", None)  # records of training calls for checkpointing: transient
        return state

    def _decoding_features(self):
        """The map and moments of this module's decoding states now: its own map with
        its running statistics, FAVOR+ (``"positive"``, no moments) for a fitted map
        before their first update (as the causal forward)."""
        fm, moments = self.feature_map, None
        if fm in FITTED_MAPS:
            moments = self._running_moments()
            if moments is None:
                fm = "positive"  # no statistics yet: A = 0 (as _causal_attention)
        return fm, moments

    def _features_digest(self):
        """The fingerprint of this module's features now, as ``init_state`` gives its
        states (:attr:`LinearAttentionState.features`; None in compiled graphs). Taken
        again only when the feature buffers changed: it is kept with the buffers it was
        taken from and their version counters, which a redraw (new tensors),
        ``load_state_dict``, a statistics update and ``.to()`` all change (Python values:
        no host sync). Buffers made under ``torch.inference_mode()`` keep no version, so
        their fingerprint is taken at every call."""
        if torch.compiler.is_compiling():
            return None
        fitted = self.feature_map in FITTED_MAPS and self._tracked()
        bufs = (self.projection,)
        if fitted:
            bufs += (
                self.running_mean_q,
                self.running_second_q,
                self.running_mean_k,
                self.running_second_k,
            )
        try:
            versions = tuple(b._version for b in bufs)
        except RuntimeError:  # inference tensors track no version
            versions = None
        kept = getattr(self, "_digest_kept", None)
        if (
            versions is not None
            and kept is not None
            and kept[1] == versions
            and len(kept[0]) == len(bufs)
            and all(a is b for a, b in zip(kept[0], bufs, strict=True))
        ):
            return kept[2]
        fm, moments = self._decoding_features()
        W = self.projection if self.projection.numel() else None
        scale = 1.0 / math.sqrt(self.head_dim)
        # (the moments are read in float64: held names the buffers' dtype, maybe half)
        held = self.running_mean_q.dtype
        digest = _feature_digest(fm, self.head_dim, scale, W, moments, held)
        self._digest_kept = None if versions is None else (bufs, versions, digest)
        return digest

    def step(self, query_t, key_t, value_t, state, *, key_padding_mask=None, inplace=False):
        """Causal self-attention for new tokens from a recurrent state: ``(out_t, state)``.

        The state comes from this module's :meth:`init_state` (or a ``copy.deepcopy`` of
        the module's) or a previous step; a state of another feature map, feature count or
        scale raises a ``ValueError``, and so does one of other features (another module's
        projection or running statistics, compared by the state's fingerprint
        ``state.features``, a Python string: no host sync per step) unless they equal this
        module's features now (a module loaded from the same ``state_dict``); in compiled
        graphs the states of other module objects are not checked. After a ``.to(dtype)``
        of the module, convert the state with ``state.to(dtype=...)``. The state keeps the
        features it was made with: a later redraw, statistics update or ``load_state_dict``
        does not change them. In-projection, per-head
        :func:`kernelkit.attention.linear_attention_step`, out-projection: in eval mode,
        stepping a sequence equals ``forward(..., is_causal=True)``. Never redraws the
        features nor updates the running statistics. ``key_padding_mask`` (N,) for one token
        or (N, T) for a block (whatever ``batch_first``), bool (True = padded) or float
        (``-inf`` = padded): padded tokens' keys and values stay out of the state, as in
        ``forward(..., key_padding_mask=...)``. ``inplace=True`` updates the state's tensors
        in place (without autograd only, see ``linear_attention_step``). Returns out_t
        shaped as query_t and the new state. Under ``torch.compile(fullgraph=True)`` step
        one token at a time (a block reads the keys to choose its path). A served batch
        starts a new sequence in the row of a finished one with ``state.reset(mask)``
        (``mask`` (N,) bool), without a new state for the other rows. Works on a module
        whose ``out_proj`` ``torch.ao.quantization.quantize_dynamic`` quantized.

        Parameters
        ----------
        query_t : tensor, shape (N, E) or (N, T, E)
            One token, or a block of ``T`` tokens (``(T, N, E)`` with ``batch_first=False``).
        key_t : tensor, shape (N, kdim) or (N, T, kdim)
        value_t : tensor, shape (N, vdim) or (N, T, vdim)
        state : LinearAttentionState
        key_padding_mask : tensor, shape (N,) or (N, T), optional, keyword-only
        inplace : bool, default False, keyword-only

        Returns
        -------
        out_t : tensor, same shape as ``query_t``
        state : LinearAttentionState
            The state after the new tokens.
        """
        block = "(N, T, E)" if self.batch_first else "(T, N, E)"
        for name, t in (("query_t", query_t), ("key_t", key_t), ("value_t", value_t)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}.")
            if t.dim() not in (2, 3) or t.dim() != query_t.dim():
                like = "" if name == "query_t" else ", like query_t"
                raise ValueError(
                    f"{name} must be (N, E) for one token or {block} for a block (batch_first="
                    f"{self.batch_first}){like}; got shape {tuple(t.shape)}."
                )
        # as forward: the in-projection's weights, which the tokens meet first
        _check_input_dtypes(
            (query_t, key_t, value_t), self._in_weight().dtype, query_t.device.type, suffix="_t"
        )
        self._check_state(state)
        H, Hkv, hd = self.num_heads, self.num_kv_heads, self.head_dim
        single = query_t.dim() == 2
        if single:
            query_t, key_t, value_t = query_t[:, None], key_t[:, None], value_t[:, None]
        elif not self.batch_first:
            query_t, key_t, value_t = (t.transpose(0, 1) for t in (query_t, key_t, value_t))
        N, T, Eq = query_t.shape
        if Eq != self.embed_dim or key_t.shape[-1] != self.kdim or value_t.shape[-1] != self.vdim:
            raise ValueError(
                f"query_t / key_t / value_t have dims {Eq} / {key_t.shape[-1]} / "
                f"{value_t.shape[-1]}, the module expects {self.embed_dim} / {self.kdim} / "
                f"{self.vdim}."
            )
        if key_t.shape[:2] != (N, T) or value_t.shape[:2] != (N, T):
            raise ValueError(
                f"batch / length mismatch: query_t {tuple(query_t.shape)}, key_t "
                f"{tuple(key_t.shape)}, value_t {tuple(value_t.shape)}."
            )
        if N != state.batch_shape[0]:
            raise ValueError(
                f"query_t has batch size {N}, the state batch size {state.batch_shape[0]}: "
                f"step the sequences the state was made for (init_state(batch_size={N}) for "
                "new ones, state.index_select(0, index) to reorder or repeat them)."
            )
        # eager CPU inputs, as forward: a clear error instead of a NaN state
        _finite_check(None, query_t=query_t, key_t=key_t, value_t=value_t)
        q, k, v = self._in_projection(query_t, key_t, value_t)
        q = q.view(N, T, H, hd).transpose(1, 2)  # (N, H, T, hd)
        k, v = (t.view(N, T, Hkv, hd).transpose(1, 2) for t in (k, v))  # (N, Hkv, T, hd)
        mask = None
        if key_padding_mask is not None:  # (N,) or (N, T) -> (N, Hkv, T): it masks keys
            m = torch.as_tensor(key_padding_mask, device=query_t.device)
            if single:  # one token: (N,) (or (N, 1), a block of one)
                if m.shape not in ((N,), (N, 1)):
                    raise ValueError(
                        f"key_padding_mask of one token must have shape (N,) = ({N},), got "
                        f"{tuple(m.shape)}."
                    )
                m = m.reshape(N, 1)
            mask = self._check_padding_mask(m, N, T, m.device)[:, None, :].expand(N, Hkv, T)
        if single:  # the one-token step (N, H, hd): no block pivot to choose, so it traces
            q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]
            mask = None if mask is None else mask[..., 0]  # (N, Hkv)
        out, state = _attention_output_checked(
            lambda: linear_attention_step(
                q,
                k,
                v,
                state,
                key_padding_mask=mask,
                check_finite=None,
                inplace=inplace,
                enable_gqa=self._gqa,
            ),
            query_t=query_t,
            key_t=key_t,
            value_t=value_t,
        )
        out = out[:, :, None] if single else out  # (N, H, T, hd)
        out = nn.functional.dropout(out, self.dropout, self.training)
        out = self.out_proj(out.transpose(1, 2).reshape(N, T, self.embed_dim))  # (N, T, E)
        if single:
            return out[:, 0], state
        return (out if self.batch_first else out.transpose(0, 1)), state

    def _check_state(self, state):
        """A state of this module (its :meth:`init_state`): its heads, head dim, feature
        map and feature count, and its dtype that of the parameters (after ``.to()``)."""
        if not isinstance(state, LinearAttentionState):
            raise TypeError(
                f"state must be a LinearAttentionState (init_state), got {type(state).__name__}."
            )
        H, hd = self.num_heads, self.head_dim
        kv_heads = self.num_kv_heads if self._gqa else None
        if tuple(state.batch_shape[1:]) != (H,) or state.d != hd or state.kv_heads != kv_heads:
            raise ValueError(
                f"state has batch shape {tuple(state.batch_shape)}, d={state.d} and "
                f"kv_heads={state.kv_heads}; this module needs (N, {H}), d={hd} and "
                f"kv_heads={kv_heads} (init_state)."
            )
        # the softmax scale of forward (1 / sqrt(head_dim)): a state made for another
        # scale (init_decoding_state(..., scale=...)) would attend with it, silently
        if not math.isclose(state.scale, 1.0 / math.sqrt(hd), rel_tol=1e-9):
            raise ValueError(
                f"state has scale={state.scale!r}, this module attends with scale 1 / "
                f"sqrt(head_dim) = {1.0 / math.sqrt(hd)!r}: a state of another module. Make "
                "it with this module's init_state."
            )
        # the maps and feature count M of this module's states (fitted maps: FAVOR+
        # features before the first statistics update)
        fitted = self.feature_map in FITTED_MAPS
        maps = (self.feature_map, "positive") if fitted else (self.feature_map,)
        n = self.projection.shape[0] if self.projection.dim() == 2 else hd  # relu / elu: d
        M = 2 * n if self.feature_map == "hyperbolic" else n
        if state.feature_map not in maps or state.kv.shape[-2] != M:
            raise ValueError(
                f"state has feature_map={state.feature_map!r} with M={state.kv.shape[-2]} "
                f"features, this module feature_map={self.feature_map!r} with M={M} "
                f"(n_features={self.n_features}): a state of another module. Make it with "
                "this module's init_state."
            )
        w = self._in_weight().dtype
        ctype = _compute_dtype(w)
        if state.dtype != ctype:
            raise TypeError(
                f"state computes in {state.dtype}, this module's parameters are {w} (converted "
                f"after init_state?): continue with state.to(dtype={w}), or start again "
                "from init_state."
            )
        # the features: a state of this module (or of a copy) keeps the features it was
        # made with, whatever the module's are now; another state must have the module's
        # (compared as Python strings: no host sync; not in compiled graphs)
        token = getattr(self, "_decoding_token", None)
        if state.features is None or (token is not None and state._module == token):
            return
        mine = self._features_digest()
        if mine is not None and not _same_features(state.features, mine):
            raise ValueError(
                "state was made with other feature parameters than this module's (the "
                f"state's against the module's): {_features_diff(state.features, mine)}. It "
                "is a state of another module (another random_state or other running "
                "statistics) or of other init_decoding_state arguments, whose sums were "
                "formed with its features. Make a new state with this module's init_state."
            )

    # ------------------------------------------------------------ running statistics
    def _tracked(self) -> bool:
        """Whether any statistics were tracked (``num_batches_tracked > 0``), mirrored on
        the host so that compiled graphs read no buffer (a host sync and a graph break):
        refreshed by every update and by ``load_state_dict``, and in eager mode read again
        whenever the count's tensor or its version changed otherwise (``functional_call``,
        an in-place copy from another module). Only this flag, never the count, is a
        Python value, so a compiled training step is traced again once (when
        it turns True), not at every update. (An update whose batch is fully padded
        tracks nothing but sets the flag: its statistics are still the initial zeros,
        whose fitted parameters are FAVOR+'s, ``A = 0``.)"""
        if torch.compiler.is_compiling():
            if getattr(self, "_any_tracked", None) is None:
                self._any_tracked = bool(int(self.num_batches_tracked))
            return self._any_tracked
        # eager: read the count again when its tensor or version changed, whoever
        # changed it (functional_call's buffers, an in-place copy from an EMA or
        # swa_utils model, a loader that sets buffers directly)
        key = self._count_key()
        kept = self.__dict__.get("_tracked_key")
        if kept is None or kept[0] is not key[0] or kept[1] != key[1]:
            self._any_tracked = bool(int(key[0]))
            self._tracked_key = key
        return self._any_tracked

    def _count_key(self):
        """``(num_batches_tracked, its version)``, by which :meth:`_tracked` sees changes;
        an inference tensor tracks no version (None): by identity only."""
        count = self.num_batches_tracked
        try:
            return count, count._version
        except RuntimeError:
            return count, None

    def get_extra_state(self):
        """The state of the redraw generator, so that a loaded module's next redraws are
        those of the module it was saved from: resumed training equals the uninterrupted
        run.

        Returns
        -------
        tensor, shape (k,), int64
            The generator's state words.
        """
        return _rng_state_tensor(self._rng)

    def set_extra_state(self, state):
        """Restore the redraw generator saved by :meth:`get_extra_state` (an empty
        state, of a generator that is not PCG64, leaves the module's own).

        Parameters
        ----------
        state : tensor, shape (k,), int64
            What :meth:`get_extra_state` returned.
        """
        t = torch.as_tensor(state)
        if t.numel() == 0:
            return
        st = _rng_state_dict(t)
        if not isinstance(self._rng.bit_generator, np.random.PCG64):
            self._rng = np.random.Generator(np.random.PCG64())
        # in place: a Generator shared by several modules stays shared
        self._rng.bit_generator.state = st

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        have = self._checkpoint_kv_heads(state_dict, prefix)
        if have is not None and have != self.num_kv_heads:
            # before torch's size mismatches, which do not say why
            error_msgs.append(
                f"{prefix or 'FavorAttention'}: the checkpoint has num_kv_heads={have} key / "
                f"value heads of head_dim {self.head_dim}, this module num_kv_heads="
                f"{self.num_kv_heads}: the key / value projections differ in size. Build "
                f"FavorAttention(..., num_kv_heads={have}) to load it."
            )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        # a checkpoint without the generator's state (saved before it was kept, or a
        # MultiheadAttention's) still loads with strict=True: the module keeps its own
        extra = prefix + "_extra_state"
        if extra in missing_keys:
            missing_keys.remove(extra)
        self._any_tracked = bool(int(self.num_batches_tracked))  # the loaded count

    def _checkpoint_kv_heads(self, state_dict, prefix):
        """Key / value heads of a checkpoint of this module (or of MultiheadAttention),
        from its key projection (``k_proj_weight`` (Ekv, kdim) with Ekv = Hkv head_dim,
        or the packed ``in_proj_weight`` (3 E, E), Ekv = E) or ``running_mean_k`` (Hkv,
        head_dim); None where it has none of them."""
        hd = self.head_dim
        for key, rows in (("in_proj_weight", 3), ("k_proj_weight", 1), ("running_mean_k", None)):
            shape = getattr(state_dict.get(prefix + key), "shape", None)
            if shape is None or len(shape) != 2:
                continue
            if rows is None:
                return int(shape[0])
            if shape[0] % (rows * hd) == 0:
                return int(shape[0]) // (rows * hd)
        return None

    def _running_moments(self):
        # (H, ...) moments of every query head, the keys' those of its key head
        if not self._tracked():
            return None  # no statistics yet: FAVOR+ features (A = 0), see module doc
        bufs = (
            self.running_mean_q,
            self.running_second_q,
            self.running_mean_k,
            self.running_second_k,
        )
        if _eager_checked(bufs[0]) and not all(_all_finite(b) for b in bufs):
            raise ValueError(
                "FavorAttention's running statistics (running_mean_q, running_second_q, "
                "running_mean_k, running_second_k) contain NaN or inf, so the fitted "
                "features are undefined: load statistics saved before (load_state_dict), "
                "or restart them (zero the buffers and num_batches_tracked)."
            )
        return self._per_query_head(
            Moments(
                self.running_mean_q.double(),
                self.running_second_q.double(),
                self.running_mean_k.double(),
                self.running_second_k.double(),
            )
        )

    def _per_query_head(self, mom):
        """GQA: key moments (..., Hkv, d[, d]) repeated over the ``g`` query heads of each
        group, (..., H, d[, d]) (query head ``h`` reads key head ``h // g``), so that the
        fitted parameters of head ``h`` come from its queries and the keys it attends."""
        if not self._gqa:
            return mom
        g = self.num_heads // self.num_kv_heads
        return Moments(
            mom.mean_x,
            mom.second_x,
            mom.mean_y.repeat_interleave(g, dim=-2),  # (..., H, d)
            mom.second_y.repeat_interleave(g, dim=-3),  # (..., H, d, d)
        )

    @staticmethod
    def _moments(q, k, mask4, qmask):
        """Per batch element moments of the scaled queries (N, H, ...) and keys
        (N, Hkv, ...) (:func:`~kernelkit.attention.attention_moments`); q (N, H, L, hd),
        k (N, Hkv, S, hd), mask4 / qmask (N, 1, S) / (N, 1, L) or None, True = padded."""
        Hkv = k.shape[1]
        g = q.shape[1] // Hkv
        if g == 1:
            return attention_moments(q, k, key_padding_mask=mask4, query_padding_mask=qmask)
        # GQA: (N, Hkv, g, L, hd) queries against (N, Hkv, 1, S, hd) keys, so that the key
        # moments are formed once per key head
        mom = attention_moments(
            q.unflatten(1, (Hkv, g)),
            k[:, :, None],
            key_padding_mask=None if mask4 is None else mask4[:, :, None],
            query_padding_mask=None if qmask is None else qmask[:, :, None],
        )
        return Moments(
            mom.mean_x.flatten(1, 2),  # (N, H, hd)
            mom.second_x.flatten(1, 2),  # (N, H, hd, hd)
            mom.mean_y[:, :, 0],  # (N, Hkv, hd)
            mom.second_y[:, :, 0],  # (N, Hkv, hd, hd)
        )

    @torch.no_grad()
    def _update_running(self, q, k, mask4, qmask=None):
        # q (N, H, L, hd), k (N, Hkv, S, hd); mask4 / qmask (N, 1, S) / (N, 1, L), True = padded
        mom = self._moments(q.detach(), k.detach(), mask4, qmask)
        fields = (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)  # (N, H or Hkv, ...)
        buffers = (
            self.running_mean_q,
            self.running_second_q,
            self.running_mean_k,
            self.running_second_k,
        )
        dt = self.running_mean_q.dtype
        if mask4 is None and qmask is None:  # average over the batch: (N, H, ...) -> (H, ...)
            new = [t.mean(0).to(dt) for t in fields]
            tracked = torch.ones((), dtype=torch.bool, device=q.device)
        else:
            # a fully padded sequence has no statistics (its moments are zeros): only the
            # sequences with a kept key (and, in self-attention, a kept query) are
            # averaged, and a batch without any leaves the statistics as they are
            has = torch.ones(q.shape[0], dtype=torch.bool, device=q.device)  # (N,)
            for m in (mask4, qmask):
                if m is not None:
                    has = has & (~m).any(-1).reshape(-1)
            w = has.to(fields[0].dtype)
            w = w / w.sum().clamp(min=1.0)  # (N,)
            new = [torch.tensordot(w, t, dims=1).to(dt) for t in fields]
            tracked = has.any()  # () bool
        if _eager_checked(q) and not all(_all_finite(t) for t in new):
            raise ValueError(
                "FavorAttention: the query / key statistics of this training batch "
                f"overflow {dt} (queries or keys too large); the running statistics are "
                "left as they were. Scale the inputs down."
            )
        # the weight f of this batch, on the device (no host read: no sync, no graph
        # break, no retrace): 0 without a tracked sequence; else 1 / n (cumulative
        # average) or the momentum, 1 for the first tracked batch
        seen = self.num_batches_tracked > 0  # () bool, before this batch
        self.num_batches_tracked += tracked.to(self.num_batches_tracked.dtype)
        t = tracked.to(dt)
        if self.momentum is None:
            f = t / self.num_batches_tracked.clamp(min=1).to(dt)
        else:
            f = torch.where(seen, torch.full_like(t, float(self.momentum)), torch.ones_like(t)) * t
        for buf, val in zip(buffers, new, strict=True):
            buf.mul_(1.0 - f).add_(val * f)
        self._any_tracked = True
        if not torch.compiler.is_compiling():  # this flag is the count's now: no re-read
            self._tracked_key = self._count_key()


def _attention_output_checked(attend, **inputs):
    """``attend()`` (a module's attention call, with ``check_finite=None``: overflowing
    keys and outputs raise there) on inputs already checked finite by name; on eager CPU
    a fit whose eigendecomposition failed on moments that overflowed (bidirectional
    fitted maps, from this call's queries and keys) is the same ValueError, naming
    ``inputs``."""
    if not _eager_checked(next(iter(inputs.values()))):
        return attend()
    try:
        return attend()
    except torch.linalg.LinAlgError as exc:
        try:
            _raise_not_finite("the fit of the feature parameters", **inputs)
        except ValueError as err:
            raise err from exc


def _check_input_dtypes(inputs, weight_dtype, device_type: str, suffix: str = "") -> None:
    """:func:`_check_input_dtype` of the query, key and value tensors ``inputs``, which
    must also share one dtype outside autocast (a ``TypeError`` naming them)."""
    q, k, v = inputs
    autocast = torch.is_autocast_enabled(device_type)
    if (k.dtype != q.dtype or v.dtype != q.dtype) and not autocast:
        raise TypeError(
            f"query{suffix}, key{suffix}, value{suffix} must share one dtype (outside "
            f"torch.autocast), got {q.dtype}, {k.dtype}, {v.dtype}."
        )
    if autocast:  # autocast casts float32 (and its own dtype) for the projections only
        cast = {weight_dtype, torch.float32, torch.get_autocast_dtype(device_type)}
        for name, t in zip(("query", "key", "value"), inputs, strict=True):
            if t.is_floating_point() and t.dtype not in cast:
                raise TypeError(
                    f"{name}{suffix} has dtype {t.dtype}, which torch.autocast does not cast "
                    f"(the module's parameters are {weight_dtype}): convert it "
                    f"({name}{suffix}.to({weight_dtype}))."
                )
    for dtype in dict.fromkeys(t.dtype for t in inputs):
        _check_input_dtype(dtype, weight_dtype, device_type, suffix)


def _check_input_dtype(dtype, weight_dtype, device_type: str, suffix: str = "") -> None:
    """``TypeError`` for inputs that the projections cannot multiply (F.linear's own error,
    'mat1 and mat2 must have the same dtype', names no argument): a non-floating dtype, or
    another floating dtype than the weights' outside autocast. ``suffix`` follows the
    inputs' names (``"_t"``: ``step``'s ``query_t``, ``key_t``, ``value_t``)."""
    q, k, v = (f"{name}{suffix}" for name in ("query", "key", "value"))
    if not dtype.is_floating_point:
        raise TypeError(f"{q}, {k}, {v} must be floating point, got dtype {dtype}.")
    if dtype != weight_dtype and not torch.is_autocast_enabled(device_type):
        raise TypeError(
            f"{q} has dtype {dtype}, but the module's parameters are {weight_dtype}: "
            f"convert the inputs ({q}.to({weight_dtype})) or the module "
            f"(module.to({dtype})), or run under torch.autocast."
        )
