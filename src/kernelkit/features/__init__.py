"""Random feature maps: twenty maps, one contract (user guide, "The feature-map contract").

Every class is a scikit-learn transformer with ``fit(X, y=None, *, Y=None)``,
``transform`` / ``transform_y``, ``approx_kernel``, ``exact_kernel``, ``expected_kernel``,
``variance`` (of the real part), ``complex_variance``, ``log_relative_variance``,
``kernel`` and ``output_dim``. Families: :mod:`.softmax` (trig, FAVOR+, hyperbolic,
FAVOR++, FAVOR#; the closed-form fits in :mod:`.favor`), :mod:`.hybrid` (hybrid random
features), :mod:`.fourier` (random Fourier and spherical random features),
:mod:`.dot_product` and :mod:`.maclaurin` (dot-product kernels); projections are drawn by
:mod:`.sampling`.
"""

from ._base import KERNELS, FeatureMap
from .dot_product import (
    DotProductFeatureMap,
    GaussianSketch,
    RademacherSketch,
    TensorSketch,
    TensorSRHT,
)
from .fourier import RandomFourierFeatures, SphericalRandomFeatures
from .hybrid import (
    AngularHybridRF,
    ClusteredHybridRF,
    ComplexExponentialRF,
    GaussianHybridRF,
    NormalizedGaussianHybridRF,
    matched_n_features,
    optimal_diagonal_A,
)
from .maclaurin import OptimizedMaclaurin, RandomMaclaurin
from .sampling import (
    block_orthogonal_projection,
    draw_projection,
    gaussian_projection,
    halton_projection,
    structured_hadamard_projection,
)
from .softmax import ADERF, GERF, SADERF, SDERF, HyperbolicRF, PositiveRF, TrigRF, a_star

__all__ = [
    "ADERF",
    "GERF",
    "KERNELS",
    "SADERF",
    "SDERF",
    "AngularHybridRF",
    "ClusteredHybridRF",
    "ComplexExponentialRF",
    "DotProductFeatureMap",
    "FeatureMap",
    "GaussianHybridRF",
    "GaussianSketch",
    "HyperbolicRF",
    "NormalizedGaussianHybridRF",
    "OptimizedMaclaurin",
    "PositiveRF",
    "RademacherSketch",
    "RandomFourierFeatures",
    "RandomMaclaurin",
    "SphericalRandomFeatures",
    "TensorSRHT",
    "TensorSketch",
    "TrigRF",
    "a_star",
    "block_orthogonal_projection",
    "draw_projection",
    "gaussian_projection",
    "halton_projection",
    "matched_n_features",
    "optimal_diagonal_A",
    "structured_hadamard_projection",
]
