"""Constant-memory recurrent decoding for causal linear attention.

Causal linear attention is a recurrence (FAVOR# eq. 4 with causal prefix sums): with
query features ``phi(q_t)`` and key features ``phi(k_j)`` (M of each),

    out_t = phi(q_t)^T KV_t / phi(q_t)^T z_t,
    KV_t = KV_{t-1} + phi(k_t) v_t^T  (M, e),    z_t = z_{t-1} + phi(k_t)  (M,),

so a decoder needs only ``(KV_t, z_t)``, whatever ``t``: O(M d + M e) time per token and
O(M e) memory, instead of a KV cache that grows with ``t``. The state is passed in and
returned by every step (as the recurrent attention modules of fast-transformers, or a
KV cache created empty and updated per step).

Stabiliser (log space, as the causal kernel of :mod:`kernelkit.attention._linear`): every
causal map (the positive maps, relu, elu) has log features ``lq``, ``lk``; the state
keeps ``c_m = max_{j <= t} lk_jm`` and ``KV``, ``z`` *relative* to ``exp(c)`` (every key
factor ``<= 1``), rescaled by ``exp(c_old - c_new)`` when the running maximum grows
(online softmax); the query factor is ``exp(lq_m + c_m - R)`` with ``R = max_m (lq_m +
c_m)`` (largest term 1, so the denominator is at least 1). Both factors cancel exactly in
the ratio, so stepping equals ``linear_attention(..., is_causal=True)`` to rounding at
any input norm. A block of ``T`` tokens (prefill) goes in chunks of ``C = 64`` tokens,
as the causal kernel: O(T C M) work, never a ``T x T`` matrix. Each chunk uses one causal
pivot ``max(c, lk_first)`` and a masked ``C x C`` score matrix when the key maxima grow
by at most ``G`` (60 in float32, 500 in float64) inside it; otherwise it steps its
tokens one by one. Without autograd (and without grouped query rows) the block runs the
forward of the causal kernel itself, whose running state is the decoding state
(:func:`_prefill_batched`): blocks of up to 512 rows on the CPU (64 MiB of features on
accelerators) with all their chunks batched.

Grouped-query attention (``enable_gqa``, as SDPA's): ``k_t``, ``v_t`` with ``Hkv`` heads
serve ``q_t`` with ``Hq = g Hkv`` heads (query head ``h`` reads key head ``h // g``).
Where the key features do not depend on the query head (the unfitted maps, and fitted
maps whose moments are shared by the heads), the ``g`` query heads of a group see the
same key features and values, hence the same ``KV``, ``z`` and ``c``: the state is kept
once per key head, ``g`` times smaller. Fitted maps with per-head moments fit each query
head's parameters from its query *and* key moments, so the key features differ per
query head and the state stays per query head (the keys are repeated as in SDPA).
"""

from __future__ import annotations

import copy
import hashlib
import math
import numbers
from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch

from .._backend import torch_shareable
from .._backend.exponential import exp_
from ._linear import (
    _chunk_maxima,
    _fwd_block,
    _fwd_chunks,
    _growth_bound,
    _safe_div,
    _Workspace,
    autocast_off,
    block_rows_for,
)
from ._maps import EXP_MAPS, FEATURE_MAPS, FITTED_MAPS, LogFeatureMap, build_log_map
from .functional import (
    _all_finite,
    _bool_padding_mask,
    _check_causal_keys,
    _check_flag,
    _check_gqa_flag,
    _check_moments,
    _check_sampler,
    _eager_checked,
    _finite_check,
    _in_func_transform,
    _moments_per_head,
    _raise_not_finite,
    _scale_arg,
    draw_features,
)

__all__ = ["LinearAttentionState", "init_decoding_state", "linear_attention_step"]

_NEG = -1e30  # finite "minus infinity": running maximum of an empty prefix
_HALF = (torch.float16, torch.bfloat16)
_PREFILL_CHUNK = 64  # tokens per chunk of a block (prefill), as the causal kernel's


def _check_device(device, default=None):
    """``device`` (a ``torch.device``, a str such as ``"cuda:0"`` or an index) as a
    ``torch.device``; ``default`` for None. A ``TypeError`` / ``ValueError`` naming the
    argument otherwise (torch's own parser error names none)."""
    if device is None:
        return default
    if isinstance(device, bool) or not isinstance(device, str | torch.device | numbers.Integral):
        raise TypeError(
            f"device must be a torch.device, a str or an int, got {type(device).__name__}."
        )
    if isinstance(device, numbers.Integral):  # an index, also NumPy's (np.int64(0))
        device = int(device)
    try:
        return torch.device(device)
    except RuntimeError:
        raise ValueError(
            f"device must name a torch device (e.g. 'cpu', 'cuda', 'cuda:0'), got {device!r}."
        ) from None


# eq=False: compared (and hashed) by identity, as a module or a KV-cache object; the
# generated field-wise ``==`` compared the tensors and raised in ``state in states``
@dataclass(frozen=True, eq=False)
class LinearAttentionState:
    """Recurrent state of causal linear attention (see :func:`init_decoding_state`): the
    prefix sums of FAVOR# eq. 4 in causal mode, kept relative to a running key maximum.
    A state whose tensors a later ``inplace=True`` step has updated no longer holds the
    prefix of its ``t`` tokens; :func:`linear_attention_step` refuses it (in eager mode,
    also under ``torch.inference_mode()`` and for copies made by ``copy.deepcopy``,
    ``pickle`` or ``torch.save``, which keep the count of in-place steps of the tensors
    they copy).
    :meth:`index_select` reorders its batch (beam search), :meth:`reset` empties chosen
    batch rows (a new sequence in the row of a finished one), :meth:`to` moves it,
    :meth:`clone` copies it (autograd history kept), :meth:`detach` drops its history,
    and :meth:`state_dict` / :meth:`restore` save and load its tensors (``weights_only``).

    Attributes
    ----------
    kvz : tensor (*batch_shape, M, e + 1)
        ``[kv, z]`` in one buffer (one product per query): ``kv = sum_j exp(lk_j - c)
        v_j^T`` (*batch_shape, M, e), key features times values, and ``z = sum_j
        exp(lk_j - c)`` (*batch_shape, M), the normaliser, both relative to ``exp(c)``
        (properties :attr:`kv`, :attr:`z` are views).
    c : tensor (*batch_shape, M)
        Running per-feature maximum of the key log features (``-1e30`` before any key).
    t : int
        Number of tokens seen.
    feature_map : str
        Map name.
    scale : float
        The softmax scale.
    d : int
        The head dimension.
    params : object
        The prepared feature parameters (not rebuilt per step).
    kv_heads : int or None
        ``enable_gqa``: the heads ``Hkv`` of ``k_t``, ``v_t`` (None: those of ``q_t``).
    group : int
        Query heads per state head: ``g = Hq / Hkv`` where the state is kept per key
        head (``kvz`` (*batch_shape[:-1], Hkv, M, e + 1)), else 1.
    features : str or None
        The fingerprint of the feature parameters the state was made with (a Python
        string, taken once by :func:`init_decoding_state`: the map, ``d``, the scale and
        digests of the projection and, for fitted maps, the moments, rounded to float32
        and to the half dtypes; features held in half are compared at half precision),
        kept by every step, copy and move. :meth:`restore` and ``FavorAttention.step``
        compare it (the scales to ``1e-9``, relative); None (made in a compiled graph, or
        an :meth:`index_select` of feature parameters per batch entry): not checked.
    """

    kvz: torch.Tensor
    c: torch.Tensor
    t: int
    feature_map: str
    scale: float
    d: int
    params: object
    kv_heads: int | None = None
    group: int = 1
    features: str | None = None
    # the record of in-place steps of ``kvz``, ``c``, shared by the states that hold
    # them (None: not checked, e.g. made in a compiled graph), and its count when this
    # state was made
    _owner: _Owner | None = field(default=None, repr=False, compare=False)
    _steps: int = field(default=0, repr=False, compare=False)
    # the token of the FavorAttention whose init_state made the state (None: made by
    # init_decoding_state), so that the module accepts its own states without comparing
    # features after its projections or statistics have changed
    _module: str | None = field(default=None, repr=False, compare=False)

    @property
    def kv(self) -> torch.Tensor:
        return self.kvz[..., :-1]

    @property
    def z(self) -> torch.Tensor:
        return self.kvz[..., -1]

    @property
    def batch_shape(self) -> torch.Size:
        """Leading dims of ``q_t`` (``(N, Hq)`` for inputs ``(N, Hq, d)``)."""
        s = self.c.shape[:-1]
        return s if self.group == 1 else torch.Size((*s[:-1], s[-1] * self.group))

    @property
    def kv_batch_shape(self) -> torch.Size:
        """Leading dims of ``k_t``, ``v_t``: ``batch_shape`` with ``Hkv`` heads (GQA)."""
        s = self.batch_shape
        return s if self.kv_heads is None else torch.Size((*s[:-1], self.kv_heads))

    @property
    def dtype(self) -> torch.dtype:
        """Compute dtype (float32 for float16 / bfloat16 inputs)."""
        return self.c.dtype

    @property
    def device(self) -> torch.device:
        return self.c.device

    def nbytes(self) -> int:
        """Bytes of the running tensors ``kvz``, ``c`` (independent of ``t``):
        ``(M (e + 2)) x itemsize`` per state head, ``g`` times less with a state per key
        head (GQA).

        Returns
        -------
        int
        """
        return sum(x.numel() * x.element_size() for x in (self.kvz, self.c))

    def index_select(self, dim: int, index) -> LinearAttentionState:
        """A state whose batch entries are ``index`` along batch dim ``dim``, as
        ``torch.index_select`` on every state tensor: reorders or repeats sequences, e.g.
        the beams of beam search (``state.index_select(0, beam_idx)``, as a KV cache's
        ``index_select(0, beam_idx)``). Feature parameters that differ along ``dim``
        (``moments`` per batch entry) are selected too, and the state's :attr:`features`
        is then None (not checked by :meth:`restore`). A new state with new tensors.
        A GQA state (``kv_heads``) cannot select along its head dim (the last batch dim):
        its query heads are tied to the key heads. A stale state (see the class) raises
        a ``ValueError``, as stepping it does.

        Parameters
        ----------
        dim : int
            A batch dim of the state (of ``batch_shape``).
        index : tensor of int, shape (k,)
            The batch entries to keep, in order (repeats allowed).

        Returns
        -------
        LinearAttentionState
            Batch dim ``dim`` of size ``k``.
        """
        nb = len(self.batch_shape)
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or not -nb <= dim < nb:
            raise ValueError(f"dim must be a batch dim in [{-nb}, {nb}), got {dim!r}.")
        dim = int(dim) % nb
        if self.kv_heads is not None and dim == nb - 1:
            raise ValueError(
                f"dim={dim} is the head dim of a GQA state (enable_gqa, kv_heads="
                f"{self.kv_heads}): its query heads are grouped over the key heads; select "
                "along a leading batch dim."
            )
        self._check_fresh()
        index = torch.as_tensor(index, device=self.device)
        if index.dim() != 1 or index.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"index must be a 1-D integer tensor, got {index.dtype} {index.shape}.")

        selected = []  # feature parameters per batch entry (then selected too)

        def select(t, trailing):  # t (..., *trailing dims), leading dims aligned with the batch
            j = dim - (nb - (t.dim() - trailing))
            if j < 0 or t.shape[j] == 1:
                return t
            selected.append(j)
            return t.index_select(j, index)

        params = _map_params(self.params, select)
        return replace(
            self,
            kvz=self.kvz.index_select(dim, index),
            c=self.c.index_select(dim, index),
            params=params,
            # selected parameters are no longer those fingerprinted (reading the index to
            # fingerprint them anew would wait for the device at every beam step)
            features=None if selected else self.features,
            _owner=_Owner.new(),
            _steps=0,
        )

    def to(self, device=None, dtype=None) -> LinearAttentionState:
        """The state on ``device`` and / or for inputs of ``dtype`` (float16 / bfloat16
        compute in float32), feature parameters included: ``state.to(device)``,
        ``state.to(dtype)``, ``state.to(device, dtype)`` or by keyword, as ``Tensor.to``
        and ``Module.to``. A new state (sharing the tensors when neither changes, as
        ``Tensor.to``); a stale state raises.

        Parameters
        ----------
        device : torch.device, str, int or torch.dtype, optional
            Keep the current device when None. A dtype here is read as ``dtype``
            (``state.to(torch.float64)``).
        dtype : torch.dtype, optional
            The dtype of the inputs the state will step; keep the current one when None.

        Returns
        -------
        LinearAttentionState
        """
        if isinstance(device, torch.dtype):  # state.to(torch.float64), as Tensor.to(dtype)
            if dtype is not None:
                raise TypeError(f"to() got two dtypes, {device!r} and dtype={dtype!r}.")
            device, dtype = None, device
        device = _check_device(device)
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}.")
        self._check_fresh()
        ctype = self.dtype if dtype is None else (torch.float32 if dtype in _HALF else dtype)
        device = self.device if device is None else device
        kvz = self.kvz.to(device=device, dtype=ctype)
        same = kvz is self.kvz  # (no conversion: the same tensors, the same record)
        return replace(
            self,
            kvz=kvz,
            c=self.c.to(device=device, dtype=ctype),
            params=_map_params(self.params, lambda t, _: t.to(device=device, dtype=ctype)),
            _owner=self._owner if same else _Owner.new(),
            _steps=self._steps if same else 0,
        )

    def clone(self) -> LinearAttentionState:
        """A copy with new ``kvz`` and ``c`` tensors, as ``Tensor.clone``: autograd
        history is kept (a state prefilled with autograd can be cloned, where
        ``copy.deepcopy`` refuses its tensors), and in-place steps of the copy and of the
        original do not affect each other, so each sequence that shares a prefilled
        state steps its own clone. The feature parameters, which no step modifies, are
        shared, except those made under ``torch.inference_mode()`` when cloned outside
        it: they are copied, so that autograd can record the copy's steps (as the clone
        of an inference tensor is an ordinary tensor). A stale state (see the class)
        raises a ``ValueError``.

        Returns
        -------
        LinearAttentionState
            Of the same batch shape, ``t``, device and dtype.
        """
        self._check_fresh()
        params = self.params
        if _inference_params(params) and not torch.is_inference_mode_enabled():
            params = _map_params(params, lambda t, _: t.clone())
        return replace(
            self,
            kvz=self.kvz.clone(),
            c=self.c.clone(),
            params=params,
            _owner=_Owner.new(),
            _steps=0,
        )

    def detach(self) -> LinearAttentionState:
        """The state without autograd history, as ``Tensor.detach``: the same tensors
        (an in-place step of either state makes the other stale), the feature parameters
        detached too. For truncated backpropagation through time, or to keep a prompt
        prefilled with autograd (e.g. by a module whose parameters require grad, outside
        ``torch.no_grad()``) as a fixed prefix.

        Returns
        -------
        LinearAttentionState
            Of the same batch shape, ``t``, device and dtype.
        """
        return replace(
            self,
            kvz=self.kvz.detach(),
            c=self.c.detach(),
            params=_map_params(self.params, lambda t, _: t.detach()),
        )

    def reset(self, mask, *, inplace=False) -> LinearAttentionState:
        """The state with the batch entries of ``mask`` emptied, the others unchanged: a
        new sequence starts there (as a state from :func:`init_decoding_state`), e.g. in
        the batch row of a served sequence that finished, without rebuilding the state of
        the whole batch. ``kvz`` becomes 0 and ``c`` ``-1e30`` where ``mask`` is True
        (masked fills on the device: no host sync, so it traces under
        ``torch.compile(fullgraph=True)``, as a one-token step; autograd flows to the
        entries kept, not through the ones reset). The feature parameters are kept
        (``moments`` per sequence included), so a row reset and then stepped equals that
        sequence stepped from a new state with the same feature arguments. ``t`` is the
        batch's step count, not a per-row length: it is left as it was. A stale state
        (see the class) raises a ``ValueError``, as stepping it does.

        Parameters
        ----------
        mask : bool tensor, shape batch_shape[:k], or int tensor, shape (n,)
            ``True`` = reset that entry (every entry of the batch dims after ``k`` with
            it), e.g. ``(N,)`` for the sequences of a state ``(N, H)``; ``k = 0`` resets
            all. An integer tensor lists the entries of batch dim 0 to reset (repeats
            allowed). A GQA state (``kv_heads``) takes no mask over its head dim.
        inplace : bool, default False
            Write ``kvz`` and ``c`` in place (a static cache's reset; no allocation) and
            return a state sharing them: the input state is then stale, as after an
            in-place step. Only without autograd, and for a state made under
            ``torch.inference_mode()`` only inside it, as ``linear_attention_step``.

        Returns
        -------
        LinearAttentionState
            Of the same batch shape, ``t``, device and dtype.
        """
        inplace = _check_flag(inplace, "inplace")
        self._check_fresh()
        nb = self.c.dim() - 1  # batch dims of the state tensors (Hkv heads if grouped)
        m = torch.as_tensor(mask, device=self.device)
        if m.dtype in (torch.int32, torch.int64):
            if m.dim() != 1 or nb == 0:
                raise ValueError(
                    f"an integer mask lists entries of batch dim 0: it must be 1-D and the "
                    f"state have a batch dim, got mask shape {tuple(m.shape)} and batch_shape "
                    f"{tuple(self.batch_shape)}."
                )
            rows = torch.zeros(self.c.shape[0], dtype=torch.bool, device=self.device)
            m = rows.index_fill_(0, m, True)
        elif m.dtype != torch.bool:
            raise TypeError(
                f"mask must be a bool tensor (True = reset) or an integer tensor of batch "
                f"entries, got dtype {m.dtype}."
            )
        k = m.dim()
        top = nb - 1 if self.kv_heads is not None else nb  # GQA: not the head dim
        if k > top or tuple(m.shape) != tuple(self.batch_shape[:k]):
            raise ValueError(
                f"mask must have the leading batch dims of the state, batch_shape[:k] of "
                f"{tuple(self.batch_shape)} with k <= {top}"
                + (" (a GQA state: not its head dim)" if self.kv_heads is not None else "")
                + f", got shape {tuple(m.shape)}."
            )
        m = m.reshape(*m.shape, *(1,) * (nb - k), 1)  # against c (..., M)
        if inplace:
            _check_inplace(self.kvz, "reset")
            kvz, c = self.kvz.masked_fill_(m[..., None], 0.0), self.c.masked_fill_(m, _NEG)
            return _stepped(self, None, kvz, c, 0, True)[1]
        kvz, c = self.kvz.masked_fill(m[..., None], 0.0), self.c.masked_fill(m, _NEG)
        return replace(self, kvz=kvz, c=c, _owner=_Owner.new(), _steps=0)

    def state_dict(self) -> dict:
        """The running tensors, token count and feature fingerprint, ``{"kvz": kvz, "c":
        c, "t": t, "features": features}`` (the tensors themselves, as
        ``Module.state_dict``; ``features`` the string :attr:`features`, or None), which
        ``torch.save`` writes and ``torch.load(..., weights_only=True)`` reads back (the
        state object itself needs ``weights_only=False``). The feature parameters are left
        out: they are those of the module (its ``projection`` buffer and running
        statistics, in its own ``state_dict``) or of the arguments of
        :func:`init_decoding_state`; restore into a state made with the same ones
        (:meth:`restore`, which compares the fingerprints). A stale state raises.

        Returns
        -------
        dict
            ``"kvz"`` (*batch_shape, M, e + 1), ``"c"`` (*batch_shape, M) (with ``Hkv``
            heads in a grouped state), ``"t"`` (int) and ``"features"`` (str or None).
        """
        self._check_fresh()
        return {"kvz": self.kvz, "c": self.c, "t": self.t, "features": self.features}

    def restore(self, state_dict) -> LinearAttentionState:
        """A state with this state's features and the running tensors of ``state_dict``
        (from :meth:`state_dict`, e.g. read by ``torch.load(..., weights_only=True)``),
        copied to this state's device and dtype; this state is not modified. Make the
        receiving state as the saved one was made (``module.init_state(N)`` of the same
        module, with the projections and running statistics it had then, or
        ``init_decoding_state`` with the same feature arguments): the saved sums were
        formed with the saved state's features and mean nothing with others. The shapes
        are checked, and so are the feature fingerprints (:attr:`features`): another
        module's state, or one saved before this module's projections were redrawn or
        its running statistics changed, raises a ``ValueError``. A ``state_dict`` saved
        without ``"features"`` (by an older kernelkit), or with None, is restored with
        the shape checks only: whether its features are this state's cannot be checked.

        Parameters
        ----------
        state_dict : dict
            ``{"kvz": tensor, "c": tensor, "t": int}`` with the shapes of this state's
            ``kvz`` and ``c``, and optionally ``"features"`` (str or None).

        Returns
        -------
        LinearAttentionState
            This state's batch shape, features, device and dtype; ``t`` from the dict.
        """
        keys = {"kvz", "c", "t"}
        if not isinstance(state_dict, dict) or not keys <= set(state_dict) <= keys | {"features"}:
            keys = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict)
            raise ValueError(
                f"state_dict must have the keys 'c', 'kvz', 't' (and 'features'), got {keys}."
            )
        t = state_dict["t"]
        if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 0:
            raise ValueError(f"state_dict['t'] must be a non-negative int, got {t!r}.")
        saved = state_dict.get("features")
        if saved is not None and not isinstance(saved, str):
            raise TypeError(f"state_dict['features'] must be a str or None, got {saved!r}.")
        new = {}
        for name in ("kvz", "c"):
            x, own = state_dict[name], getattr(self, name)
            if not isinstance(x, torch.Tensor) or not x.is_floating_point():
                raise TypeError(f"state_dict[{name!r}] must be a floating tensor, got {x!r}.")
            if x.shape != own.shape:
                raise ValueError(
                    f"state_dict[{name!r}] has shape {tuple(x.shape)}, this state "
                    f"{tuple(own.shape)}: restore into a state made as the saved one was "
                    "(the same batch size, heads, feature map and n_features)."
                )
        if (
            saved is not None
            and self.features is not None
            and not _same_features(saved, self.features)
        ):
            raise ValueError(
                "state_dict was saved from a state with other feature parameters than this "
                f"state's: {_features_diff(saved, self.features)}. Its sums were formed with "
                "the saved state's features and mean nothing with these (a state of another "
                "module or of other init_decoding_state arguments, or of this module before "
                "its projections were redrawn or its running statistics changed). Restore "
                "into a state made with the saved features: init_state of the module that "
                "saved it, as it was then (load its state_dict first), or init_decoding_state "
                "with the same feature arguments."
            )
        for name in ("kvz", "c"):
            x = state_dict[name]
            new[name] = x.detach().to(device=self.device, dtype=self.dtype, copy=True)
        return replace(self, **new, t=int(t), _owner=_Owner.new(), _steps=0)

    def __deepcopy__(self, memo):
        # copy.deepcopy copies every field (the record of in-place steps with them, so a
        # copy of a stale state is stale); torch refuses to deep-copy tensors with
        # autograd history, so name the state's own copies instead of its error
        tensors = (self.kvz, self.c, *_param_tensors(self.params))
        if any(t.requires_grad and not t.is_leaf for t in tensors):
            raise RuntimeError(
                "copy.deepcopy cannot copy a state with autograd history (it was stepped "
                "with inputs, or a module's parameters, that require grad): use "
                "state.clone() (keeps the history) or state.detach().clone(), or step "
                "under torch.no_grad()."
            )
        new = object.__new__(type(self))
        memo[id(self)] = new
        for f in fields(self):
            object.__setattr__(new, f.name, copy.deepcopy(getattr(self, f.name), memo))
        return new

    def _check_fresh(self):
        if self._stale():  # (a copy, copy.deepcopy(state), is checked with its tensors)
            raise ValueError(
                "state is stale: its tensors were modified in place (by an inplace=True "
                f"step) since it was made, so they no longer hold the prefix of its t={self.t} "
                "tokens. Continue from the state that step returned, and step a copy "
                "(state.clone() or copy.deepcopy) of a state that several sequences share, "
                "e.g. an empty or prefilled one."
            )

    def _stale(self) -> bool:
        # kvz, c were modified in place since this state was made (unchecked in graphs)
        if torch.compiler.is_compiling() or self._owner is None:
            return False
        return self._owner.steps != self._steps


class _Owner:
    """The in-place steps applied to one pair of state tensors ``kvz``, ``c``, shared by
    the states that hold them: a state made when the count was ``n`` is stale once it
    is larger. A plain Python object (not a tensor's version counter), so the check also
    holds for inference tensors, and ``copy.deepcopy`` / ``pickle`` copy it with the
    tensors (copies of a fresh state are fresh, of a stale one stale)."""

    def __init__(self):
        self.steps = 0

    @staticmethod
    def new():
        # the record of new tensors; none in a compiled graph (not checked there)
        return None if torch.compiler.is_compiling() else _Owner()


class _ExpFeatures:
    # positive maps: log f = [x, -|B x|^2 / 2, 1] @ [W; 1; c] (one matmul per side; one
    # for both sides when they share the map: positive, hyperbolic, gerf, sderf)
    def __init__(self, fmap: LogFeatureMap, shared: bool):
        self.fmap, self.shared = fmap, shared
        self.n_out = fmap.n_out
        self.Wa = {s: fmap.augmented_weights(s) for s in ("q", "k")}  # (..., d + 2, M)

    def __call__(self, x, y):  # x, y (..., T, d) -> lq, lk (..., T, M)
        # the queries leave out their row term -|B x|^2 / 2, as the causal kernel does:
        # it is the same for all M features of a query and cancels in its ratio, and a
        # query whose squared norm overflows the dtype still gives a finite output
        if self.shared and x.shape == y.shape:  # (GQA: fewer key heads, two matmuls)
            xy = torch.stack([x, y])  # (2, ..., T, d)
            r = self.fmap._row(xy, "k")  # (2, ..., T, 1), fresh: shared maps, one row term
            r[0] = 0.0  # the queries'
            lf = self.fmap.log_features_fused(xy, "q", Wa=self.Wa["q"], row=r)
            return lf[0], lf[1]
        lq = x @ self.fmap.W_q  # (..., T, M)
        if self.fmap.c is not None:
            lq = lq + self.fmap.c[..., None, :]
        return lq, self.fmap.log_features_fused(y, "k", Wa=self.Wa["k"])


class _PlainFeatures:
    # relu / elu (Katharopoulos et al.), as logs so that one scan serves every map
    def __init__(self, name, d):
        self.name, self.n_out = name, d

    def __call__(self, x, y):
        if self.name == "elu":  # log(elu(x) + 1) = x (x < 0), log1p(x) (x >= 0)
            return tuple(torch.where(t < 0, t, torch.log1p(t.clamp(min=0))) for t in (x, y))
        return tuple(torch.log(torch.relu(t) + 1e-3) for t in (x, y))


def _map_params(params, fn):
    """``params`` with ``fn(t, trailing)`` applied to each tensor (``trailing``: how many
    of its last dims are not batch dims; the leading ones broadcast against the batch)."""
    if not isinstance(params, _ExpFeatures):
        return params  # relu / elu: no tensors
    f = params.fmap

    def cv(t, trailing):
        return None if t is None else fn(t, trailing)

    def cb(B):  # a (..., d) diagonal or a (..., d, d) matrix
        return cv(B, 1 if B is not None and B.dim() == f.W_q.dim() - 1 else 2)

    new = copy.copy(params)
    new.fmap = LogFeatureMap(cv(f.W_q, 2), cv(f.W_k, 2), cv(f.c, 1), cb(f.B_q), cb(f.B_k))
    new.Wa = {s: fn(w, 2) for s, w in params.Wa.items()}  # (..., d + 2, M)
    return new


def _param_tensors(params):
    """The tensors of feature parameters ``params`` (none for relu / elu)."""
    found = []
    _map_params(params, lambda t, _: found.append(t) or t)
    return found


def _inference_params(params) -> bool:
    """Whether feature parameters ``params`` were made under ``torch.inference_mode()``
    (autograd cannot save them; unchecked in compiled graphs)."""
    if torch.compiler.is_compiling():
        return False
    return any(t.is_inference() for t in _param_tensors(params))


def _itemsize(dtype) -> int:
    """Bytes per element of ``dtype``."""
    return torch.empty((), dtype=dtype).element_size()


_HALF_TAGS = {torch.float16: "f16", torch.bfloat16: "bf16"}


def _digest(tensors, held=None) -> str:
    """Digests (16 hex digits each) of the values (and shapes) of ``tensors`` rounded to
    float32, float16 and bfloat16, joined by ``.``, with ``~f16`` / ``~bf16`` appended
    where a tensor is held in that half dtype (or ``held`` is: the dtype the tensors
    were converted from, e.g. a module's half buffers read in float64). The float32
    digest is equal on any device and in float32 and float64 alike (a projection drawn
    in float64 and its float32 copy in a module's buffer, or a module's buffers after
    ``.double()``); the half ones let :func:`_same_digest` compare features held in
    float32 with the same features rounded to half (a module after ``.half()`` /
    ``.to(torch.bfloat16)``) at the half precision."""
    tensors = list(tensors)
    held = [_HALF_TAGS[dt] for dt in (held, *(t.dtype for t in tensors)) if dt in _HALF_TAGS]
    tensors = [t.detach().to(device="cpu", dtype=torch.float32).resolve_neg() for t in tensors]
    hs = []
    for dt in (torch.float32, *_HALF_TAGS):
        h = hashlib.blake2b(digest_size=8)
        for t in tensors:
            a = t.to(dt).contiguous()
            h.update(repr(tuple(a.shape)).encode())
            h.update((a if dt == torch.float32 else a.view(torch.int16)).numpy().tobytes())
        hs.append(h.hexdigest())
    tag = "" if not held else "~bf16" if "bf16" in held else "~f16"
    return ".".join(hs) + tag


def _same_digest(x: str, y: str) -> bool:
    """Whether digests ``x`` and ``y`` (:func:`_digest`) are of the same values: at
    float32 when both are held in the same precision, else at the coarser (half)
    precision of the two (a digest of a single float32 hash is compared at float32)."""
    if x == y:
        return True
    (hx, _, px), (hy, _, py) = (v.partition("~") for v in (x, y))
    hx, hy = hx.split("."), hy.split(".")
    i = 0 if px == py else 2 if "bf16" in (px, py) else 1
    return i < min(len(hx), len(hy)) and hx[i] == hy[i]


def _feature_digest(name, d, scale, W, moments, held=None) -> str | None:
    """The fingerprint of a state's feature parameters, :attr:`LinearAttentionState.features`:
    the map, ``d``, the scale and digests of the projection ``W`` (None for relu / elu)
    and, for fitted maps, of the moments they are fitted from (their values rounded to
    float32, and to the half dtypes, so that states of other dtypes compare equal:
    :func:`_same_features`; ``held``: the dtype the moments were converted from). Taken
    once per state (a copy to the host and a hash, never per step); None in compiled
    graphs, ``torch.func`` transforms and for meta tensors, whose values cannot be read."""
    ms = ()
    if moments is not None and name in FITTED_MAPS:
        fs = (moments.mean_x, moments.second_x, moments.mean_y, moments.second_y)
        ms = tuple(torch.as_tensor(t) for t in fs)
    ts = ms if W is None else (torch.as_tensor(W), *ms)
    if (
        torch.compiler.is_compiling()
        or _in_func_transform()
        or any(t.device.type == "meta" for t in ts)
    ):
        return None
    w = "none" if W is None else _digest(ts[:1])
    m = _digest(ms, held) if ms else "none"
    return f"map={name}, d={d}, scale={float(scale)!r}, W={w}, moments={m}"


def _fields(x: str) -> dict | None:
    """The fields of fingerprint ``x`` (:func:`_feature_digest`), None if not of that form."""
    try:
        return dict(part.split("=", 1) for part in x.split(", "))
    except ValueError:
        return None


def _same_field(key: str, x, y) -> bool:
    """Whether field ``key`` of two fingerprints is of the same features: scales within
    ``1e-9`` (relative) of each other, as ``FavorAttention.step`` compares a state's
    scale with its own (``head_dim ** -0.5`` and ``1 / sqrt(head_dim)`` differ in the
    last bit); digests by :func:`_same_digest`; the rest equal."""
    if x is None or y is None or x == y:
        return x == y
    if key == "scale":
        try:
            return math.isclose(float(x), float(y), rel_tol=1e-9)
        except ValueError:
            return False
    return key in ("W", "moments") and _same_digest(x, y)


def _same_features(a: str, b: str) -> bool:
    """Whether fingerprints ``a`` and ``b`` (:func:`_feature_digest`) are of the same
    features: equal strings, or fields of the same features (:func:`_same_field`)."""
    if a == b:
        return True
    pa, pb = _fields(a), _fields(b)
    if pa is None or pb is None or pa.keys() != pb.keys():
        return False
    return all(_same_field(key, pa[key], pb[key]) for key in pa)


def _features_diff(a: str, b: str) -> str:
    """What differs between fingerprints ``a`` and ``b`` (:func:`_feature_digest`), in
    words: the map, ``d``, the scale, the projections or the moments."""
    words = {
        "map": "the feature maps",
        "d": "the head dimensions",
        "scale": "the softmax scales",
        "W": "the random projections",
        "moments": "the fitted map's moments (running statistics)",
    }
    pa, pb = _fields(a), _fields(b)
    if pa is None or pb is None:  # not a fingerprint of this form
        return f"features {a!r} against {b!r}"
    keys = [*words, *sorted((pa.keys() | pb.keys()) - words.keys())]
    diff = [
        f"{words.get(key, key)} differ ({pa.get(key)} against {pb.get(key)})"
        for key in keys
        if not _same_field(key, pa.get(key), pb.get(key))
    ]
    return "; ".join(diff) if diff else f"features {a!r} against {b!r}"


def _positive_int(name, val):
    if isinstance(val, bool) or not isinstance(val, numbers.Integral) or val < 1:
        raise ValueError(f"{name} must be a positive integer, got {val!r}.")
    return int(val)


def init_decoding_state(
    batch_shape,
    d: int,
    feature_map: str = "positive",
    n_features: int = 256,
    *,
    e: int | None = None,
    random_state=None,
    scale=None,
    sampler: str = "orthogonal",
    projection=None,
    moments=None,
    dtype=torch.float32,
    device=None,
    enable_gqa: bool = False,
    num_kv_heads: int | None = None,
) -> LinearAttentionState:
    """Empty decoding state for :func:`linear_attention_step` (no token seen yet).

    The feature-map arguments are those of :func:`kernelkit.attention.linear_attention`;
    the same ``random_state`` / ``projection`` / ``moments`` give the same features, so
    stepping through a sequence equals ``linear_attention(q, k, v, ..., is_causal=True)``.

    Parameters
    ----------
    batch_shape : tuple of int
        Leading dims of the queries, e.g. ``(N, H)`` for inputs ``(N, H, d)``.
    d : int
        Query / key head dimension.
    feature_map : str
        ``"relu"``, ``"elu"`` or a positive map (``"positive"``, ``"hyperbolic"``,
        ``"gerf"``, ``"saderf"``, ``"aderf"``, ``"sderf"``). ``"trig"`` and
        ``"hybrid_angular"`` are bidirectional only and raise a ``ValueError``.
    n_features : int
        Feature dimension ``M``.
    e : int, optional
        Value dimension (default ``d``).
    random_state, sampler, projection
        As in ``linear_attention`` (``projection``: ``W`` (n_proj, d) or ``{"W": W}``).
        Unlike there, a projection that requires grad is accepted: the steps' features
        are differentiable in it (a learned projection), while the parameters fitted
        from ``moments`` stay constants for autograd.
    scale : float, optional
        Softmax scale (default ``1 / sqrt(d)``); a tensor of one value, as in
        ``linear_attention``.
    moments : Moments
        Required by the fitted maps (``gerf``, ``saderf``, ``aderf``, ``sderf``): from
        *other* data, ``attention_moments(q_calib, k_calib)`` (batch shape broadcastable
        to ``batch_shape``), as in causal ``linear_attention``.
    dtype : torch.dtype
        Input dtype; float16 / bfloat16 are computed in float32 (the state is float32).
    device : torch.device, optional
        Of the state tensors (the inputs' device).
    enable_gqa : bool
        Grouped-query attention as in SDPA and ``linear_attention``: ``k_t``, ``v_t``
        with ``num_kv_heads`` heads serve ``q_t`` with ``Hq = batch_shape[-1] = g
        num_kv_heads`` heads (query head ``h`` reads key head ``h // g``); the steps then
        take ``enable_gqa=True``.
    num_kv_heads : int, optional
        ``Hkv``, required with ``enable_gqa`` (a divisor of ``batch_shape[-1]``).

    Returns
    -------
    LinearAttentionState
        ``kvz`` (*batch_shape, M, e + 1) zero, ``c`` (*batch_shape, M) ``-1e30``. With
        ``enable_gqa`` and key features shared by the query heads of a group (every map
        but a fitted one whose ``moments`` differ per head, i.e. have a last batch dim
        > 1), one state per key head: ``kvz`` (*batch_shape[:-1], Hkv, M, e + 1), ``c``
        (*batch_shape[:-1], Hkv, M), ``g`` times smaller (``state.group = g``); otherwise
        per query head. ``state.features`` fingerprints the feature arguments (the map,
        ``d``, the scale, the projection's and the fitted map's moments' values rounded
        to float32, and to float16 and bfloat16 for features held in half precision, so
        that states of the same features in any dtype compare equal), taken here once
        (a copy of the projection and moments to the host; not in compiled graphs), so
        that :meth:`~LinearAttentionState.restore` can refuse a saved state of other
        features.
    """
    return _init_decoding_state(
        batch_shape,
        d,
        feature_map,
        n_features,
        e=e,
        random_state=random_state,
        scale=scale,
        sampler=sampler,
        projection=projection,
        moments=moments,
        dtype=dtype,
        device=device,
        enable_gqa=enable_gqa,
        num_kv_heads=num_kv_heads,
    )


def _init_decoding_state(
    batch_shape,
    d: int,
    feature_map: str = "positive",
    n_features: int = 256,
    *,
    e: int | None = None,
    random_state=None,
    scale=None,
    sampler: str = "orthogonal",
    projection=None,
    moments=None,
    dtype=torch.float32,
    device=None,
    enable_gqa: bool = False,
    num_kv_heads: int | None = None,
    features=None,
    module: str | None = None,
) -> LinearAttentionState:
    """:func:`init_decoding_state` (same arguments), the state's fingerprint
    :attr:`~LinearAttentionState.features` given (``FavorAttention.init_state``: its own,
    kept while its features do not change) or None (taken here), and ``module`` the token
    of the module that makes the state."""
    if not isinstance(feature_map, str) or feature_map.lower() not in FEATURE_MAPS:
        raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}.")
    name = feature_map.lower()
    d = _positive_int("d", d)
    e = d if e is None else _positive_int("e", e)
    n_features = _positive_int("n_features", n_features)
    try:
        batch = torch.Size(batch_shape)
    except TypeError:
        raise TypeError(f"batch_shape must be a tuple of ints, got {batch_shape!r}.") from None
    if any(n < 0 for n in batch):  # torch.zeros' own error names no argument
        raise ValueError(f"batch_shape must hold non-negative ints, got {tuple(batch)}.")
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}.")
    scale = _scale_arg(scale, d)
    if name not in EXP_MAPS and name not in ("relu", "elu"):
        raise ValueError(
            f"feature_map={name!r} is bidirectional only: its features are not positive, so "
            "a causal prefix normaliser can be zero or negative. Causal mode supports "
            f"'relu', 'elu' and the positive maps {EXP_MAPS}."
        )
    if name in FITTED_MAPS and moments is None:
        raise ValueError(
            f"feature_map={name!r} fits its parameters from the queries and keys; in causal "
            "mode a fit on the sequence itself would leak later tokens. Pass "
            "moments=kernelkit.attention.attention_moments(q_calib, k_calib), computed from "
            "the queries and keys of earlier batches or a calibration set (last dim d, "
            "batch shape broadcastable to batch_shape); or a map without fitted "
            "parameters ('positive', 'hyperbolic')."
        )
    sampler = _check_sampler(sampler)
    kv_heads = _gqa_heads(enable_gqa, num_kv_heads, batch)
    ctype = torch.float32 if dtype in _HALF else dtype
    device = _check_device(device, torch.device("cpu"))
    per_head = False  # feature parameters that differ per query head
    W_in = mom = None  # the projection as given and the checked moments (fingerprinted)
    if name in ("relu", "elu"):
        feats = _PlainFeatures(name, d)
    else:
        if projection is None:
            W = draw_features(name, n_features, d, random_state, sampler)["W"]
        else:
            W = projection.get("W") if isinstance(projection, dict) else projection
            if W is None:
                raise ValueError(f"projection for {name!r} needs a 'W' entry.")
        if isinstance(W, np.ndarray):  # big-endian or read-only: torch takes neither
            W = torch_shareable(W)
        W_in = torch.as_tensor(W)
        W = W_in.to(device=device, dtype=ctype)  # (n_proj, d)
        if W.dim() != 2 or W.shape[1] != d or W.shape[0] < 1:
            raise ValueError(
                f"projection must have shape (n_proj, d={d}) with n_proj >= 1, got "
                f"{tuple(W.shape)}."
            )
        mom = None if moments is None else _check_moments(moments, batch, d, name, device)
        if mom is not None and name in FITTED_MAPS:
            per_head = _moments_per_head(mom)  # a head dim > 1 in any moment
        # the fit from the moments is a constant for autograd, as in linear_attention: no
        # gradient reaches moments that require grad (a projection's does reach it)
        fmap = build_log_map(name, W, mom, d)  # float64, W_q is W_k for symmetric maps
        shared = fmap.W_q is fmap.W_k and fmap.B_q is fmap.B_k
        feats = _ExpFeatures(fmap.to(ctype), shared)
    M = feats.n_out
    kw = {"dtype": ctype, "device": device}
    group = 1
    if kv_heads is not None and not per_head:  # one state per key head
        group = batch[-1] // kv_heads
        batch = torch.Size((*batch[:-1], kv_heads))
    try:
        kvz = torch.zeros(*batch, M, e + 1, **kw)
    except torch.OutOfMemoryError:  # a full device: callers catch it to retry smaller
        raise
    except RuntimeError as exc:  # the allocator's own error names no argument
        shape = (*batch, M, e + 1)
        raise ValueError(
            f"The decoding state kvz of shape (*batch_shape, M, e + 1) = {shape} cannot be "
            f"allocated ({math.prod(shape) * _itemsize(ctype):.3g} bytes); reduce "
            "batch_shape, n_features or e."
        ) from exc
    return LinearAttentionState(
        kvz=kvz,
        c=torch.full((*batch, M), _NEG, **kw),
        t=0,
        feature_map=name,
        scale=float(scale),
        d=d,
        params=feats,
        kv_heads=kv_heads,
        group=group,
        features=_feature_digest(name, d, scale, W_in, mom) if features is None else features,
        _owner=_Owner.new(),
        _module=module,
    )


def _gqa_heads(enable_gqa, num_kv_heads, batch):
    # Hkv of a GQA state (None without enable_gqa), checked against batch = (..., Hq)
    enable_gqa = _check_gqa_flag(enable_gqa)
    if not enable_gqa:
        if num_kv_heads is not None:
            raise ValueError(
                f"num_kv_heads={num_kv_heads!r} needs enable_gqa=True (grouped-query attention)."
            )
        return None
    if len(batch) == 0:
        raise ValueError(
            "enable_gqa needs a head dim: batch_shape must be (..., Hq), got an empty batch_shape."
        )
    if num_kv_heads is None:
        raise ValueError(
            "enable_gqa=True needs num_kv_heads, the number of key / value heads Hkv (a "
            f"divisor of the query heads batch_shape[-1]={batch[-1]})."
        )
    Hkv = _positive_int("num_kv_heads", num_kv_heads)
    if batch[-1] % Hkv:
        raise ValueError(
            f"num_kv_heads={Hkv} must divide the query heads batch_shape[-1]={batch[-1]} "
            "(enable_gqa: each key / value head serves a group of query heads)."
        )
    return Hkv


def _check_step_inputs(q, k, v, state, key_padding_mask, check_finite, enable_gqa, autocast):
    if not isinstance(state, LinearAttentionState):
        raise TypeError(
            f"state must be a LinearAttentionState (init_decoding_state), got "
            f"{type(state).__name__}."
        )
    for name, t in (("q_t", q), ("k_t", k), ("v_t", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}.")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, got dtype {t.dtype}.")
        if t.device != state.device:
            raise ValueError(f"{name} is on {t.device}, the state on {state.device}.")
    enable_gqa = _check_gqa_flag(enable_gqa)
    if enable_gqa != (state.kv_heads is not None):
        raise ValueError(
            f"enable_gqa={enable_gqa} but the state was made with "
            f"enable_gqa={state.kv_heads is not None} (init_decoding_state(..., "
            "enable_gqa=True, num_kv_heads=Hkv) for grouped-query attention)."
        )
    state._check_fresh()
    if (k.dtype != q.dtype or v.dtype != q.dtype) and not autocast:
        raise TypeError(
            f"q_t, k_t, v_t must share one dtype (outside torch.autocast), got {q.dtype}, "
            f"{k.dtype}, {v.dtype}."
        )
    ctype = torch.float32 if q.dtype in _HALF else q.dtype
    if ctype != state.dtype:
        raise TypeError(
            f"q_t has dtype {q.dtype} but the state computes in {state.dtype} "
            f"(init_decoding_state(dtype=...); state.to(dtype={q.dtype}) converts a state)."
        )
    for name, t, dim in (("q_t", q, state.d), ("k_t", k, state.d), ("v_t", v, state.kv.shape[-1])):
        if t.dim() == 0 or t.shape[-1] != dim:
            raise ValueError(f"{name} must have last dim {dim}, got shape {tuple(t.shape)}.")
    batch = state.batch_shape
    if q.shape[:-1] == batch:
        single = True
    elif q.dim() >= 2 and q.shape[:-2] == batch:
        single = False
    else:
        raise ValueError(
            f"q_t must have shape (*batch_shape, d) or (*batch_shape, T, d) with the state's "
            f"batch_shape={tuple(batch)}, got {tuple(q.shape)}."
        )
    # leading dims of k_t, v_t: those of q_t with Hkv heads (GQA)
    kv_lead = (*state.kv_batch_shape, *q.shape[len(batch) : -1])
    for name, t in (("k_t", k), ("v_t", v)):
        if t.shape[:-1] != kv_lead:
            what = "of q_t" if state.kv_heads is None else f"of q_t with {state.kv_heads} heads"
            raise ValueError(
                f"{name} must have the leading dims {what} {kv_lead}, got {tuple(t.shape)}."
            )
    keep = None
    if key_padding_mask is not None:
        m = _bool_padding_mask(key_padding_mask, "key", q.device)
        try:  # size-1 dims broadcast, e.g. (N, 1, T) over the heads; no dims are added
            if m.dim() != k.dim() - 1:
                raise RuntimeError
            m = torch.broadcast_to(m, k.shape[:-1])
        except RuntimeError:
            raise ValueError(
                f"key_padding_mask must have shape {tuple(k.shape[:-1])} (size-1 dims "
                f"broadcast), got {tuple(m.shape)}."
            ) from None
        keep = ~m
    check_keys = _checks_key_norms(check_finite, state.params, k)
    if check_keys:
        # the keys are checked with their features (linear_attention_step): a NaN or inf
        # in k_t makes them non-finite too, and the error still names k_t
        _finite_check(check_finite, q_t=q, v_t=v)
    else:
        _finite_check(check_finite, q_t=q, k_t=k, v_t=v)
    return single, keep, check_keys


def _checks_key_norms(check_finite, params, y) -> bool:
    """Whether the step checks its keys' squared norms (the row term of their log
    features) for overflow: positive maps on eager CPU with ``check_finite`` None or True,
    as its input check (not inside compiled graphs or ``torch.func`` transforms)."""
    return isinstance(params, _ExpFeatures) and check_finite is not False and _eager_checked(y)


def _ratio(nd):
    # [num, den] (..., e + 1) -> num / den; rows with no visible key have num = 0 and
    # den = 0 and give zeros (den >= exp(-G) otherwise, see the module docstring). Their
    # den is replaced by 1 (_safe_div, as in the causal kernel), not clamped to the
    # dtype's tiny: a clamped den gives their numerator the gradient 1 / tiny, whose sums
    # over a few such rows (a left-padded prompt) overflow to inf and turn the zero key
    # factors' products into NaN
    return _safe_div(nd[..., :-1], nd[..., -1])


def _token(lq, lk, va, keep, kvz, c, inplace, grouped=False):
    # one token: lq, lk (..., M), va = [v, 1] (..., e + 1), keep (...) or None; state
    # kvz (..., M, e + 1), c (..., M). Returns (out (..., e), kvz, c). ``grouped`` (a
    # state per key head): lq (..., g, M) for the g query heads of each state head,
    # out (..., g, e).
    with torch.no_grad():
        c_new = torch.maximum(c, lk.detach())  # (..., M)
        a = torch.exp(c - c_new)[..., None]  # (..., M, 1) <= 1: rescale to the new maximum
    kf = torch.exp(lk - c_new)  # (..., M) <= 1
    if keep is not None:
        kf = kf * keep[..., None].to(kf.dtype)
    if inplace:
        kvz.mul_(a).addcmul_(kf[..., :, None], va[..., None, :])  # (..., M, e + 1)
        c_new = c.copy_(c_new)
    else:  # fresh tensor (in place on the product only: autograd-safe)
        kvz = (kvz * a).addcmul_(kf[..., :, None], va[..., None, :])
    lqc = lq + (c_new[..., None, :] if grouped else c_new)  # (..., [g,] M)
    with torch.no_grad():
        R = lqc.detach().amax(-1, keepdim=True)  # (..., [g,] 1): largest term 1
    qf = torch.exp(lqc - R)  # (..., [g,] M) <= 1
    kq = kvz[..., None, :, :] if grouped else kvz  # (..., [1,] M, e + 1)
    return _ratio((qf[..., None, :] @ kq)[..., 0, :]), kvz, c_new


def _block(lq, lk, va, keep, kvz, c, inplace, grouped=False):
    # T tokens causally, in chunks of C = _PREFILL_CHUNK tokens (the state carried from
    # one to the next): O(T C M) work and (..., C, C) scores instead of O(T^2 M) and
    # (..., T, T) for one chunk of the whole block. Shapes as _chunk.
    C, T = _PREFILL_CHUNK, lk.shape[-2]
    if T <= C:
        return _chunk(lq, lk, va, keep, kvz, c, inplace, grouped)
    pivots = _one_pivot_chunks(lk, c, C)  # one host read for all chunks
    outs = []
    for j, lo in enumerate(range(0, T, C)):
        sl = slice(lo, lo + C)
        o, kvz, c = _chunk(
            lq[..., sl, :],
            lk[..., sl, :],
            va[..., sl, :],
            None if keep is None else keep[..., sl],
            kvz,
            c,
            inplace,
            grouped,
            pivots[j],
        )
        outs.append(o)
    return torch.cat(outs, dim=-2), kvz, c


def _prefill_batched(params, x, y, va, keep, kvz, c, inplace):
    """A block of T tokens through the forward of the causal kernel
    (:func:`kernelkit.attention._linear._fwd_block`): blocks of rows (up to 512 on the CPU), the log
    features of each computed when it is reached, all its chunks of C tokens in batched
    products, the state chained from chunk to chunk. The kernel's running state (the
    sums of ``exp(lk - c) [v, 1]`` relative to the key maxima ``c``) is the decoding
    state, so it starts from ``kvz``, ``c`` and ends as the new ones. Without autograd
    (the kernel works in place) and for a state per query head.

    params: the state's features; x, y (..., T, d) scaled inputs; va (..., T, e + 1);
    keep (..., T) or None; kvz (..., M, e + 1), c (..., M), with ``...`` the state's
    batch shape. Returns (out (..., T, e), kvz, c).
    """
    batch, T = x.shape[:-2], x.shape[-2]
    M, E = kvz.shape[-2], va.shape[-1]
    B, C, dt = math.prod(batch), _PREFILL_CHUNK, kvz.dtype
    block = block_rows_for(T + (-T) % C, C, B, M, kvz.element_size(), kvz.device, E)
    G = _growth_bound(dt)
    ws = _Workspace(dt, kvz.device)
    S, cb = kvz.reshape(B, M, E).clone(), c.reshape(B, M).clone()  # (B, M, e + 1), (B, M)
    out = torch.empty(*batch, T, E - 1, dtype=dt, device=kvz.device)
    out3 = out.view(B, T, E - 1)
    tiny = torch.finfo(dt).tiny
    for lo in range(0, T, block):
        hi = min(lo + block, T)
        rows, pad = hi - lo, (lo - hi) % C  # the last block padded to whole chunks
        lq, lk = params(x[..., lo:hi, :], y[..., lo:hi, :])  # (..., rows, M) fresh
        vb = va[..., lo:hi, :]
        if keep is not None:  # masked keys: out of the maxima; their [v, 1] rows zero
            kb = keep[..., lo:hi, None]
            lk = lk.masked_fill_(~kb, _NEG)
            vb = vb * kb.to(dt)
        lq, lk, vb = lq.reshape(B, rows, M), lk.reshape(B, rows, M), vb.reshape(B, rows, E)
        if pad:
            lq = torch.nn.functional.pad(lq, (0, 0, 0, pad))
            lk = torch.nn.functional.pad(lk, (0, 0, 0, pad), value=_NEG)
        vb = torch.nn.functional.pad(vb, (0, 0, 0, pad))  # contiguous (B, rows', e + 1)
        n = (rows + pad) // C
        lq, lk = lq.contiguous(), lk.contiguous()
        res = _fwd_block(
            lq.view(B, n, C, M),
            lk.view(B, n, C, M),
            vb.view(B, n, C, E),
            cb,
            S,
            G,
            ws,
            masked=keep is not None,  # (padding only at the end: every first key visible)
        )
        if res is None:  # a key jump: this block chunk by chunk (exact where needed)
            res = _fwd_chunks(lq, lk, vb, cb, S, G, C)
        nd, _, S, cb = res  # nd (B, rows', e + 1) = [numerator, denominator]
        # rows with no visible key have nd = 0 and give zeros (as _ratio)
        torch.div(nd[:, :rows, :-1], nd[:, :rows, -1:].clamp(min=tiny), out=out3[:, lo:hi])
    # the workspace is this call's: its final state and maxima are fresh tensors (the
    # maxima a contiguous copy, as on the other paths, not a view of the block's pivots)
    S, cb = S.reshape(kvz.shape), cb.reshape(c.shape).contiguous()
    if inplace:
        return out, kvz.copy_(S), c.copy_(cb)
    return out, S, cb


def _one_pivot_chunks(lk, c, C):
    """Whether each chunk of ``C`` tokens of ``lk`` (..., T, M) (after the state's maxima
    ``c`` (..., M)) grows its key maxima by at most G (the test of :func:`_chunk`, with
    the maxima it carries from the chunks before: ``max(c, lk of earlier chunks)``), as
    a list of bools from one host read."""
    with torch.no_grad():
        lkd = lk.detach()
        T, n = lkd.shape[-2], -(-lk.shape[-2] // C)
        pad = lkd.new_full((*lkd.shape[:-2], n * C - T, lkd.shape[-1]), _NEG)
        ch = torch.cat([lkd, pad], dim=-2).unflatten(-2, (n, C))  # (..., n, C, M)
        _, _, growth = _chunk_maxima(ch, c)  # (..., n, M)
        if growth.numel() == 0:  # an empty batch: nothing grows
            return [True] * n
        per_chunk = growth.movedim(-2, 0).reshape(n, -1).amax(1)  # (n,)
        return (per_chunk <= _growth_bound(lk.dtype)).tolist()


def _chunk(lq, lk, va, keep, kvz, c, inplace, grouped=False, one_pivot=None):
    # T tokens causally: lq, lk (..., T, M), va = [v, 1] (..., T, e + 1), keep (..., T) or
    # None. One causal pivot c_ref = max(c, lk_0) when the key maxima grow by at most G
    # over the block (as the chunks of _linear.causal_exp), else token by token
    # (``one_pivot``: that test's result, computed here when None).
    # ``grouped``: lq (..., g, T, M) (g query heads per state head), out (..., g, T, e).
    with torch.no_grad():
        lkd = lk.detach()
        c_ref = torch.maximum(c, lkd[..., 0, :])  # (..., M)
        c_end = torch.maximum(c, lkd.amax(-2))  # (..., M)
        if one_pivot is None:
            growth = c_end - c_ref  # (..., M); empty for an empty batch: nothing grows
            bound = _growth_bound(lk.dtype)
            one_pivot = growth.numel() == 0 or float(growth.amax()) <= bound
    if not one_pivot:
        outs = []
        for i in range(lq.shape[-2]):
            ki = None if keep is None else keep[..., i]
            o, kvz, c = _token(
                lq[..., i, :], lk[..., i, :], va[..., i, :], ki, kvz, c, inplace, grouped
            )
            outs.append(o)
        return torch.stack(outs, dim=-2), kvz, c

    def qs(t):  # a state-side tensor (..., X, Y) against the query rows (..., [g,] X, Y)
        return t[..., None, :, :] if grouped else t

    with torch.no_grad():
        R = (lq.detach() + qs(c_end[..., None, :])).amax(-1, keepdim=True)  # (..., [g,] T, 1)
        a = torch.exp(c - c_ref)[..., None]  # (..., M, 1) <= 1
        b = torch.exp(c_ref - c_end)  # (..., M) <= 1
    qf = exp_(lq - R + qs(c_ref[..., None, :]))  # (..., [g,] T, M) <= 1
    kf = exp_(lk - c_ref[..., None, :])  # (..., T, M) <= e^G
    if keep is not None:
        kf = kf * keep[..., None].to(kf.dtype)
    A = (qf @ qs(kf.transpose(-1, -2))).tril()  # (..., [g,] T, T) causal scores
    # (..., [g,] T, e + 1): earlier tokens, then this block
    nd = qf @ qs(kvz * a) + A @ qs(va)
    upd = (kf * b[..., None, :]).transpose(-1, -2) @ va  # (..., M, e + 1) rel. to c_end
    if inplace:
        kvz.mul_(a * b[..., None]).add_(upd)
        c_end = c.copy_(c_end)
    else:
        kvz = (kvz * (a * b[..., None])).add_(upd)
    return _ratio(nd), kvz, c_end


def linear_attention_step(
    q_t,
    k_t,
    v_t,
    state: LinearAttentionState,
    *,
    key_padding_mask=None,
    check_finite=None,
    inplace=False,
    enable_gqa=False,
):
    """Causal linear attention for new tokens, from and to a recurrent state.

    ``out_t = phi(q_t)^T KV_t / phi(q_t)^T z_t`` with the prefix sums ``KV_t``, ``z_t``
    of FAVOR# eq. 4 (causal mode) updated by the new keys and values first; the
    stabiliser is the module docstring's. Stepping a sequence token by token (or in
    blocks, e.g. a prompt "prefill" then single tokens) equals ``linear_attention(q, k,
    v, ..., is_causal=True)`` with the same feature arguments, to rounding. Cost per
    token O(M d + M e); the state does not grow with ``t``.

    Parameters
    ----------
    q_t, k_t : tensor (*batch_shape, d) or (*batch_shape, T, d)
        One new token, or a block of ``T`` tokens processed causally (``T = 0``: an
        empty output, the state as it was). With ``enable_gqa``, ``k_t`` and ``v_t``
        have ``Hkv`` heads (``state.kv_batch_shape``), ``q_t`` ``Hq = g Hkv``.
    v_t : tensor (*batch_shape, e) or (*batch_shape, T, e)
    state : LinearAttentionState
        From :func:`init_decoding_state` or a previous step; not modified unless
        ``inplace``.
    key_padding_mask : bool tensor (*batch_shape) or (*batch_shape, T), optional
        ``True`` = padded token: its key and value are not added to the state. A token
        that sees no key yet (left padding) gets zeros, with zero gradients.
        Its size-1 dims broadcast (e.g. ``(N, 1, T)`` over the heads). It masks keys, so
        with ``enable_gqa`` it has the key heads (``(N, Hkv, T)`` or ``(N, 1, T)``).
    check_finite : bool or None
        NaN / inf inputs: as :func:`~kernelkit.attention.linear_attention` (None: a
        ``ValueError`` for eager CPU inputs, no check, so no host sync, on accelerators
        and in compiled graphs; True: also there, as an asynchronous assert). On eager
        CPU, None and True also raise a ``ValueError`` for finite keys whose squared
        norm overflows the dtype (their features would), as ``linear_attention`` does; a
        query's squared norm never enters (its row term cancels, as in the causal
        kernel), so a huge finite query still gives a finite output.
    inplace : bool
        Update ``state.kvz`` and ``state.c`` in place (as a static KV cache is): no
        allocation of ``M (e + 1)`` floats per step; the returned state shares them (use
        it: the input's ``t`` is not advanced; stepping the input state again raises a
        ``ValueError``, in eager mode). Only without autograd (under ``torch.no_grad()``
        or for inputs that do not require grad); otherwise a ``ValueError``. A state made
        under ``torch.inference_mode()`` is updated in place only inside it (a
        ``ValueError`` outside).
    enable_gqa : bool
        Grouped-query attention as in SDPA: ``k_t``, ``v_t`` with ``Hkv`` heads serve
        ``q_t`` with ``Hq = g Hkv`` heads; must match the state's
        (``init_decoding_state(..., enable_gqa=True, num_kv_heads=Hkv)``). Equals
        ``linear_attention(q, k, v, ..., is_causal=True, enable_gqa=True)``.

    Returns
    -------
    out_t : tensor (*batch_shape, e) or (*batch_shape, T, e)
        In the dtype of ``q_t`` (float16 / bfloat16 computed in float32; computed in
        the state's dtype under ``torch.autocast`` too, as ``linear_attention``).
    state : LinearAttentionState
        The new state (fresh tensors unless ``inplace``; autograd flows through it when
        inputs require grad).
    """
    inplace = _check_flag(inplace, "inplace")
    args = (q_t, k_t, v_t, state, key_padding_mask, check_finite, inplace, enable_gqa)
    if not isinstance(state, LinearAttentionState):  # the input check names it
        return _step(*args, autocast=False)
    # in the state's dtype, as linear_attention under autocast: autocast's bfloat16 /
    # float16 products would round the outputs and the state's sums (q_t, k_t, v_t may
    # then differ in dtype: each is cast to the state's)
    device_type = state.kvz.device.type
    autocast = torch.is_autocast_enabled(device_type)
    with autocast_off(device_type):
        return _step(*args, autocast=autocast)


def _step(q_t, k_t, v_t, state, key_padding_mask, check_finite, inplace, enable_gqa, autocast):
    """:func:`linear_attention_step` (same arguments) with autocast off; ``autocast``:
    whether the caller had it on (q_t, k_t, v_t may then differ in dtype)."""
    single, keep, check_keys = _check_step_inputs(
        q_t, k_t, v_t, state, key_padding_mask, check_finite, enable_gqa, autocast
    )
    if inplace:
        _check_inplace(state.kvz, "step", (q_t, k_t, v_t))
    if (
        torch.is_grad_enabled()
        and any(t.requires_grad for t in (q_t, k_t, v_t))
        and _inference_params(state.params)
    ):  # torch's own error ("make a clone") names no state method that helps
        raise ValueError(
            "The state's feature parameters were made under torch.inference_mode() "
            "(init_decoding_state / init_state there), and autograd cannot record a step "
            "that uses them (the inputs require grad). Step under torch.no_grad() or "
            "torch.inference_mode(), or step state.clone() made outside inference_mode "
            "(it copies the parameters)."
        )
    hd = len(state.batch_shape) - 1  # the head dim of q_t, k_t, v_t (GQA)
    g = 1 if state.kv_heads is None else state.batch_shape[-1] // state.kv_heads
    if g > 1 and state.group == 1:  # a state per query head: repeat the keys (as SDPA)
        k_t, v_t = (t.repeat_interleave(g, dim=hd) for t in (k_t, v_t))
        keep = None if keep is None else keep.repeat_interleave(g, dim=hd)
    if not single and q_t.shape[-2] == 0:  # an empty block (T = 0): nothing to add
        if k_t.shape[hd] != q_t.shape[hd]:
            k_t, v_t = (t.repeat_interleave(g, dim=hd) for t in (k_t, v_t))
        return (q_t @ k_t.transpose(-1, -2)) @ v_t, state  # (..., 0, e)
    if not single and q_t.shape[-2] > 1 and torch.compiler.is_compiling():
        raise ValueError(
            "linear_attention_step traces one token at a time: a block of T > 1 tokens (a "
            "prefill) chooses its path by reading the keys, which a compiled graph cannot "
            "do. Prefill outside the compiled function (or without fullgraph=True), then "
            "step single tokens (q_t (*batch_shape, d)) in it."
        )
    ct = state.dtype
    r = math.sqrt(state.scale)
    x, y = q_t.to(ct) * r, k_t.to(ct) * r  # scaled inputs (FAVOR# eq. 4)
    ones = torch.ones_like(v_t[..., :1], dtype=ct)
    va = torch.cat([v_t.to(ct), ones], dim=-1)  # (..., [T,] e + 1): values, normaliser
    # keys whose features are not finite (a NaN / inf in k_t, or a squared norm that
    # overflows) are an error, as in linear_attention, not keys silently left out:
    # checked through their row terms here (a prefill block) or their log features below
    if _runs_the_kernel(single, x, y, va, keep, state):
        if check_keys:
            rows = state.params.fmap._row(y, "k")[..., 0]  # (..., T)
            if not _all_finite(rows):
                _raise_not_finite("the squared norm of a key", k_t=k_t)
            # a first key below the -1e30 of the state's empty prefix
            _check_causal_keys(rows, keep, _empty_prefix(state), k_t=k_t)
        out, kvz, c = _prefill_batched(state.params, x, y, va, keep, state.kvz, state.c, inplace)
        out = _checked_output(out.to(q_t.dtype), check_finite, q_t, k_t, v_t)
        return _stepped(state, out, kvz, c, q_t.shape[-2], inplace)
    if single:  # (..., d) -> (..., 1, d) for the batched feature matmul
        x, y = x[..., None, :], y[..., None, :]
    lq, lk = state.params(x, y)  # (..., H, T, M), (..., Hkv, T, M) with a GQA state
    if single:
        lq, lk = lq[..., 0, :], lk[..., 0, :]  # (..., M)
    # a key's row term overflowed: one reduction per token, and the full check only where
    # the sum over the features overflows (finite row terms of -1e37 sum past float32's
    # max); or, as the state's first key, fell below the -1e30 of its empty prefix
    if check_keys:
        if not _all_finite(lk):
            _raise_not_finite("the squared norm of a key", k_t=k_t)
        top = lk.amax(dim=-1)  # (..., [T])
        kt = keep
        if single:
            top, kt = top[..., None], (None if keep is None else keep[..., None])
        _check_causal_keys(top, kt, _empty_prefix(state), k_t=k_t)
    if keep is not None:  # padded keys: out of the running maximum and the sums
        lk = torch.where(keep[..., None], lk, _NEG)
    grouped = state.group > 1  # (..., Hq, [T,] M) -> (..., Hkv, g, [T,] M)
    if grouped:
        lq = lq.unflatten(hd, (state.kv_heads, state.group))
    step = _token if single else _block
    out, kvz, c = step(lq, lk, va, keep, state.kvz, state.c, inplace, grouped)
    if grouped:
        out = out.flatten(hd, hd + 1)  # (..., Hq, [T,] e)
    out = _checked_output(out.to(q_t.dtype), check_finite, q_t, k_t, v_t)
    return _stepped(state, out, kvz, c, 1 if single else q_t.shape[-2], inplace)


def _checked_output(out, check_finite, q_t, k_t, v_t):
    """``out``, or the overflow error of ``linear_attention`` where it is not finite
    although the inputs are (features or their sums past the dtype's range), under the
    same policy: eager CPU with ``check_finite`` None or True (not in compiled graphs or
    ``torch.func`` transforms). Raised before the state is returned (an in-place step has
    already written it: reset or restore the state)."""
    if check_finite is not False and _eager_checked(out) and not _all_finite(out):
        _raise_not_finite("the attention output", q_t=q_t, k_t=k_t, v_t=v_t)
    return out


def _check_inplace(kvz, what, inputs=()):
    """An in-place ``what`` (step, reset) of a state with tensor ``kvz`` and new tensors
    ``inputs`` (a step's ``q_t, k_t, v_t``; none for a reset): refused where autograd
    records and the state or an input requires grad (a step names both ways out, a
    reset the state's), and for a state made under ``torch.inference_mode()`` outside it
    (torch's own error names no way out)."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in (*inputs, kvz)):
        how = (
            "use it under torch.no_grad() or with inputs that do not require grad"
            if inputs
            else f"{what} under torch.no_grad(), or a state without autograd history "
            "(state.detach())"
        )
        raise ValueError(f"inplace=True would overwrite tensors autograd needs; {how}.")
    if (
        not torch.compiler.is_compiling()
        and kvz.is_inference()
        and not torch.is_inference_mode_enabled()
    ):
        raise ValueError(
            "inplace=True: the state was made under torch.inference_mode(), whose tensors "
            f"can only be updated in place inside it. {what.capitalize()} it there, or "
            f"{what} its copy state.clone() (ordinary tensors) in place, or {what} once with "
            "inplace=False (which returns ordinary tensors) and in place from then on."
        )


def _empty_prefix(state):
    """Whether each sequence (and key head) of ``state`` has seen no visible key yet: its
    running maxima ``c`` (..., M) still stand at the -1e30 of the empty prefix."""
    return state.c.amax(dim=-1) <= _NEG / 2


def _runs_the_kernel(single, x, y, va, keep, state) -> bool:
    """Whether a block goes through :func:`_prefill_batched`: more than one chunk, no
    autograd (neither the inputs, nor the state, which may carry a graph from earlier
    steps, nor its features, from a ``projection`` that requires grad), a state per query
    head, inputs (and mask) of the state's batch shape, and a non-empty batch (the kernel
    reads the keys' growth from a reduction)."""
    if single or x.shape[-2] <= _PREFILL_CHUNK or state.group > 1 or state.kvz.numel() == 0:
        return False
    if torch.is_grad_enabled():
        feats = getattr(state.params, "Wa", {}).values()  # (..., d + 2, M) per side
        if any(t.requires_grad for t in (x, y, va, state.kvz, *feats)):
            return False
    shape = state.kvz.shape[:-2]
    return (
        x.shape[:-2] == shape
        and y.shape[:-2] == shape
        and (keep is None or keep.shape == x.shape[:-1])
    )


def _stepped(state, out, kvz, c, tokens, inplace):
    # (out, the new state after ``tokens`` tokens): an in-place step makes the input stale
    owner, n = _Owner.new(), 0  # new tensors (or a step in a compiled graph: unchecked)
    if inplace and owner is not None and state._owner is not None:
        owner = state._owner  # the same tensors: the input state is now stale
        owner.steps += 1
        n = owner.steps
    return out, replace(state, kvz=kvz, c=c, t=state.t + tokens, _owner=owner, _steps=n)
