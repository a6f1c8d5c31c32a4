"""Partition-function bound optimizers for log-linear models (SPFB / LSPFB).

Reference: J. Wang, A. Choromanska, "SGB: Stochastic Gradient Bound Method for Optimizing
Partition Functions" (equation, theorem, lemma and appendix numbers in this package are
that paper's; its Alg. B is the bound of Jebara & Choromanska 2012); the errata and
derivations are in ``docs/derivations/sgb.md``.

Public API
----------
* :func:`partition_bound`, :class:`PartitionBound`, :func:`beta` – Alg. B (eq. 2.3) for a
  batch of samples of any log-linear model, in log space.
* :func:`multinomial_partition_bound`, :class:`MultinomialBound` – its Kronecker form for
  multinomial logistic regression (``Sigma_j = C_j (x) x_j x_j^T``).
* :class:`KroneckerCurvature`, :class:`KroneckerPreconditioner`,
  :func:`conjugate_gradient` – the batch curvature as a
  matrix-free operator (``matvec``, ``todense``, ``solve`` by CG or Cholesky).
* :func:`spfb_step`, :func:`bound_step`, :func:`sgd_step`, :func:`step_size`,
  :func:`multinomial_objective`, :func:`multinomial_gradient` – solver steps.
* :func:`low_rank_partition_bound`, :func:`multinomial_low_rank_bound`,
  :class:`LowRankBound`, :func:`woodbury_solve`, :func:`lspfb_step` – Alg. LB (variants
  ``"paper"``, ``"eig"``, ``"exact"``) and LSPFB.
* :class:`BoundLogisticRegression`, :func:`logistic_objective` – scikit-learn classifier;
  its objective is scikit-learn's ``LogisticRegression`` with ``C = 1 / (alpha T)``.
* :func:`chunked_bound`, :class:`ChunkedBound`, :class:`ChunkedCurvature`,
  :func:`chunked_bound_step` – the full-batch bound, objective and gradient as sums over
  the row chunks of a Dask array (``BoundLogisticRegression(solver="bound")`` uses them
  for Dask input).

The multinomial bound, the curvature operator, CG, the preconditioner and the SPFB / SGD
steps follow the array API (NumPy or torch tensors on any device); the generic
``partition_bound``, the low-rank bound and the estimator use NumPy.

Input checks (shared by every public function, at most one pass over each array): arrays
must be real (complex raises ``ValueError``; bool, object and strings ``TypeError``), of
the documented number of dimensions, non-empty and finite, with matching shapes (the
message names both arguments and their shapes); labels ``y`` must be integers in
``0..n-1`` (``n`` the columns of ``W``); ``lam`` must be ``>= 0`` and step sizes, ``scale``
and ``t0`` positive, all finite real numbers (bools rejected). NaN or infinity in ``W`` or
``X`` is found through the logits ``X W``, which every step forms anyway. Every error
message names the offending argument.
"""

from .bound import (
    MultinomialBound,
    PartitionBound,
    beta,
    multinomial_partition_bound,
    partition_bound,
)
from .chunked import ChunkedBound, ChunkedCurvature, chunked_bound, chunked_bound_step
from .kronecker import KroneckerCurvature, KroneckerPreconditioner, conjugate_gradient
from .logistic import BoundLogisticRegression, logistic_objective
from .low_rank import (
    LowRankBound,
    low_rank_partition_bound,
    lspfb_step,
    multinomial_low_rank_bound,
    woodbury_solve,
)
from .solvers import (
    bound_step,
    multinomial_gradient,
    multinomial_objective,
    sgd_step,
    spfb_step,
    step_size,
)

__all__ = [
    "BoundLogisticRegression",
    "ChunkedBound",
    "ChunkedCurvature",
    "KroneckerCurvature",
    "KroneckerPreconditioner",
    "LowRankBound",
    "MultinomialBound",
    "PartitionBound",
    "beta",
    "bound_step",
    "chunked_bound",
    "chunked_bound_step",
    "conjugate_gradient",
    "logistic_objective",
    "low_rank_partition_bound",
    "lspfb_step",
    "multinomial_gradient",
    "multinomial_low_rank_bound",
    "multinomial_objective",
    "multinomial_partition_bound",
    "partition_bound",
    "sgd_step",
    "spfb_step",
    "step_size",
    "woodbury_solve",
]
