"""Hybrid random features (HRF) and complex exponential estimators for the softmax and
Gaussian kernels.

Reference: K. Choromanski et al., "Hybrid Random Features" (ICLR 2022); equation, lemma
and theorem numbers in this package are the paper's, with the corrections listed in
``docs/derivations/hybrid.md`` (the corrections win over the paper).

A hybrid estimator mixes two unbiased base estimators of ``SM(x, y) = exp(x^T y)`` with a
random, data-dependent coefficient ``lambda_hat`` drawn independently of them (eq. 8-11):

    SM_hyb = lambda_hat * SM_1 + (1 - lambda_hat) * SM_2,    lambda_hat = a + c u(x)^T v(y).

Because ``lambda_hat`` is independent of ``SM_1`` and ``SM_2`` the mix is unbiased whatever
the law of ``lambda_hat``. Here ``SM_1 = SM^{++}_m`` (FAVOR+ with antithetic ``+-w``, exact
when ``x + y = 0``) and ``SM_2 = SM^{trig}_m`` (sin/cos pairs, exact when ``x = y``). The
estimator is written as a *real asymmetric* feature map ("real form")::

    Phi_1(x) = [ sqrt|a| phi1(x);        sqrt|1-a| phi2(x);
                 sqrt|c| u(x) (x) phi1(x);  sqrt|c| u(x) (x) phi2(x) ]
    Phi_2(y) = [ sg(a) sqrt|a| phi1(y);  sg(1-a) sqrt|1-a| phi2(y);
                 sg(c) sqrt|c| v(y) (x) phi1(y); -sg(c) sqrt|c| v(y) (x) phi2(y) ]

with ``(x)`` the outer product ``(a[:, None] * b[None, :]).ravel()``, so that
``Phi_1(x)^T Phi_2(y) = lambda_hat SM_1 + (1 - lambda_hat) SM_2`` exactly. Queries go
through :meth:`transform` (``Phi_1``), keys through :meth:`transform_y` (``Phi_2``).

Sizes (Erratum 1: base estimators use ``m``, the coefficient uses ``n``):

* ``m = n_features``: random projections ``w_i`` of each base estimator; ``phi1`` and
  ``phi2`` both have ``2m`` entries (``[exp(Wx); exp(-Wx)]`` and ``[sin(Wx); cos(Wx)]``);
* ``n = n_lambda``: random projections ``tau_i`` of the coefficient estimator.

Gaussian kernel: every map is multiplied by ``exp(-|u|^2/2)`` on both sides;
``lambda_hat`` is unchanged.

Modules:

* :mod:`.bipolar`: :class:`AngularHybridRF` (eq. 12, 19) and the shared base class of the
  bipolar hybrids, with ``approx_components`` (``lambda_hat``, ``SM^{++}``,
  ``SM^{trig}``), ``exact_lambda`` and the Thm 3.1 MSE as ``variance``;
* :mod:`.bipolar_gaussian`: :class:`GaussianHybridRF` (eq. 20) and
  :class:`NormalizedGaussianHybridRF` (App. F);
* :mod:`.complex_exponential`: :class:`ComplexExponentialRF` (Lemma 2.4) for a given
  ``A``, :func:`optimal_diagonal_A` (eq. 85-88) and :func:`diagonal_A_loss` (eq. 21);
* :mod:`.clustered`: :class:`ClusteredHybridRF` (Sec. 2.4, App. H): k-means, per-pair
  ``A``, zero-one and Gaussian mixtures, ``redraw`` for cheap Monte Carlo repetitions;
* :mod:`.cost`: the cost-matching rule :func:`matched_n_features` with
  :func:`regular_feature_flops` and :func:`hybrid_feature_flops`;
* :mod:`._common`: private log-space helpers shared by the modules above.

Projections: every class takes ``sampler`` (a name of
:data:`kernelkit.features.sampling.SAMPLERS`: "iid", "orthogonal", "sorf", "hadamard",
"halton") for its base projections ``W``, as every feature map does.
"""

from .bipolar import AngularHybridRF
from .bipolar_gaussian import GaussianHybridRF, NormalizedGaussianHybridRF
from .clustered import ClusteredHybridRF
from .complex_exponential import ComplexExponentialRF, diagonal_A_loss, optimal_diagonal_A
from .cost import hybrid_feature_flops, matched_n_features, regular_feature_flops

__all__ = [
    "AngularHybridRF",
    "ClusteredHybridRF",
    "ComplexExponentialRF",
    "GaussianHybridRF",
    "NormalizedGaussianHybridRF",
    "diagonal_A_loss",
    "hybrid_feature_flops",
    "matched_n_features",
    "optimal_diagonal_A",
    "regular_feature_flops",
]
