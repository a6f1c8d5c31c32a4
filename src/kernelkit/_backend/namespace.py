"""Array namespaces of NumPy arrays and torch tensors without a cached type lookup.

:mod:`array_api_compat` finds the namespace of an array through ``functools.lru_cache``
functions keyed by its class. ``torch.compile`` does not use such caches: it traces the
wrapped function and warns at every call site ("Dynamo detected a call to a
``functools.lru_cache``-wrapped function"), fifteen warnings for one compiled FAVOR#
attention call. NumPy arrays and torch tensors, the two backends kernelkit runs on,
are recognised here with one ``isinstance`` each (torch only once it is imported, so
NumPy users never import it); every other input goes to :mod:`array_api_compat` as
before, with the same results.
"""

from __future__ import annotations

import sys

import array_api_compat
import array_api_compat.numpy as _numpy_xp
import numpy as np

__all__ = [
    "array_namespace",
    "device",
    "is_numpy_namespace",
    "is_torch_array",
    "is_torch_namespace",
]

#: array_api_compat's torch namespace, set on the first torch tensor seen
_torch_xp = None


def _torch_namespace():
    global _torch_xp
    if _torch_xp is None:
        import array_api_compat.torch as xp

        _torch_xp = xp
    return _torch_xp


def is_torch_array(x) -> bool:
    """Whether ``x`` is a torch tensor (a subclass such as ``nn.Parameter`` included)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def array_namespace(*arrays):
    """:func:`array_api_compat.array_namespace` of ``arrays``: the compat namespace of
    torch (all torch tensors) or NumPy (all NumPy arrays) directly, anything else through
    :mod:`array_api_compat` (which also raises for mixed namespaces)."""
    if arrays:
        if all(is_torch_array(a) for a in arrays):
            return _torch_namespace()
        if all(isinstance(a, np.ndarray) for a in arrays):
            return _numpy_xp
    return array_api_compat.array_namespace(*arrays)


#: module names of the namespaces recognised here (as array_api_compat compares them:
#: by name, which compiled graphs read as a constant)
_NUMPY_NAMES = ("numpy", "array_api_compat.numpy")
_TORCH_NAMES = ("torch", "array_api_compat.torch")


def is_numpy_namespace(xp) -> bool:
    """Whether ``xp`` is NumPy or its compat namespace."""
    name = getattr(xp, "__name__", None)
    if name in _NUMPY_NAMES or name in _TORCH_NAMES:
        return name in _NUMPY_NAMES
    return array_api_compat.is_numpy_namespace(xp)


def is_torch_namespace(xp) -> bool:
    """Whether ``xp`` is torch or its compat namespace."""
    name = getattr(xp, "__name__", None)
    if name in _NUMPY_NAMES or name in _TORCH_NAMES:
        return name in _TORCH_NAMES
    return array_api_compat.is_torch_namespace(xp)


def device(x):
    """:func:`array_api_compat.device` of ``x``: ``"cpu"`` for NumPy, ``x.device`` for a
    torch tensor."""
    if isinstance(x, np.ndarray):
        return "cpu"
    if is_torch_array(x):
        return x.device
    return array_api_compat.device(x)
