"""Optional dependencies: import one at the point of use, or say which extra installs it.

``pip install kernelkit`` holds the NumPy library; PyTorch (``kernelkit.attention``, torch
tensors), Dask (out-of-core fits) and cvxpy (the SDP of ``PolynomialJointDistribution``)
are the extras ``torch``, ``dask`` and ``sdp`` of ``pyproject.toml``. Code that needs one
calls :func:`require` where it is used (never at ``import kernelkit``), so that a missing
package is an ``ImportError`` naming the extra to install, not a bare
``No module named 'torch'`` from deep inside.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "MissingOptionalDependency", "require"]

#: top-level import name -> (the distribution to install, the kernelkit extra holding it)
EXTRAS = {
    "torch": ("torch", "torch"),
    "dask": ("dask[array]", "dask"),
    "distributed": ("distributed", "dask"),
    "cvxpy": ("cvxpy", "sdp"),
}


class MissingOptionalDependency(ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra."""


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` (a dotted name whose top-level package is in :data:`EXTRAS`).

    Raises
    ------
    MissingOptionalDependency
        (a ``ModuleNotFoundError``) if its top-level package is not installed; the
        message names ``what`` needs it and the extra to install, e.g.
        ``pip install "kernelkit[torch]"``. An import error of another module (inside an
        installed package) propagates unchanged.
    """
    top = module.split(".")[0]
    dist, extra = EXTRAS[top]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # sys.modules[top] = None (a blocked import) gives exc.name == top as well
        if exc.name not in (top, module):
            raise
        raise MissingOptionalDependency(
            f"{what} needs {dist}, which is not installed: "
            f'pip install "kernelkit[{extra}]" (or pip install "{dist}").',
            name=top,
        ) from exc
