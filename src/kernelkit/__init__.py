"""kernelkit: kernel methods at scale.

Random-feature approximations of softmax, Gaussian and dot-product kernels
(:mod:`kernelkit.features`), exact reference kernels (:mod:`kernelkit.kernels`), linear
attention built from them (:mod:`kernelkit.attention`, needs PyTorch), scikit-learn
estimators (:mod:`kernelkit.estimators`), joint and conditional distributions
(:mod:`kernelkit.distributions`), partition-function bound optimizers
(:mod:`kernelkit.optim`), metrics and offline data sets.

Every subpackage is imported on first access (``kernelkit.features``,
``from kernelkit import kernels``), so ``import kernelkit`` stays light and does not need
PyTorch; the ``kernelkit`` command line then handles Ctrl-C from its start.
"""

import importlib

__version__ = "0.1.0"

_LAZY = (
    "attention",
    "datasets",
    "distributions",
    "estimators",
    "experiments",
    "features",
    "kernels",
    "metrics",
    "optim",
)

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
