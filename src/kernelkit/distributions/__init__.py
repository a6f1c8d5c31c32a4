"""Joint and conditional distributions from samples (adaptive joint distribution learning).

Filipović, Multerer, Schneider, "Adaptive joint distribution learning" (equation numbers
are the paper's); the errata, derived formulas and library choices are in
``docs/derivations/joint_distribution.md``.

* :func:`pivoted_cholesky` - matrix-free Algorithm 1 with the biorthogonal basis.
* :class:`LowRankBasis` - orthonormal low-rank RKHS basis evaluated from the pivots;
  :class:`BasisCache` shares fitted bases between the fits of a grid search.
* :class:`JointDistribution` - JDL, unconstrained / normalised / positive.
* :class:`ConditionalMeanEmbedding` (App. C), :class:`KernelLogisticRegression` (App. D).
* :class:`PolynomialJointDistribution` (JPDL, App. B; SOS positivity via cvxpy).
* :func:`holdout_select`, :func:`second_moment_loss` (31), :func:`clipped_log_loss` (32).
"""

from ._basis import BasisCache, LowRankBasis
from ._cholesky import PivotedCholesky, pivoted_cholesky
from ._kernels import KERNEL_NAMES
from .cme import ConditionalMeanEmbedding
from .joint import JointDistribution
from .klr import KernelLogisticRegression
from .model_selection import HoldoutResult, clipped_log_loss, holdout_select, second_moment_loss
from .polynomial import PolynomialBasis, PolynomialJointDistribution

__all__ = [
    "KERNEL_NAMES",
    "BasisCache",
    "ConditionalMeanEmbedding",
    "HoldoutResult",
    "JointDistribution",
    "KernelLogisticRegression",
    "LowRankBasis",
    "PivotedCholesky",
    "PolynomialBasis",
    "PolynomialJointDistribution",
    "clipped_log_loss",
    "holdout_select",
    "pivoted_cholesky",
    "second_moment_loss",
]
