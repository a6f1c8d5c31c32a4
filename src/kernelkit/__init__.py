"""kernelkit: kernel methods at scale.

Random-feature approximations of softmax, Gaussian and dot-product kernels, linear
attention built from them, and kernel estimators on top.
"""

__version__ = "0.1.0"

from . import features, kernels

__all__ = ["__version__", "features", "kernels"]
