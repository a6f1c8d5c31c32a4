"""Random feature maps, one module per family (see DESIGN.md, "Feature maps")."""

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
