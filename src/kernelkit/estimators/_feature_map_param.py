"""The ``feature_map`` parameter shared by the random-feature ridge / GP estimators."""

from __future__ import annotations

import numpy as np
from sklearn.base import clone

from ._posterior import as_feature_matrix

__all__ = ["DEFAULT_N_FEATURES", "fitted_feature_map", "map_features"]

#: features of the default :class:`~kernelkit.features.RandomFourierFeatures`
DEFAULT_N_FEATURES = 256


def fitted_feature_map(feature_map, random_state, X, owner: str):
    """Clone (or create) the feature map, check it is symmetric, fit it on ``X``.

    ``None`` gives ``RandomFourierFeatures(n_features=256, random_state=random_state)``
    (Gaussian kernel, lengthscale 1). A given map is cloned; when its ``random_state`` is
    ``None`` and the estimator's is not, the estimator's seed is used (so
    ``check_estimator``-style reproducibility holds).
    """
    if feature_map is None:
        from ..features.fourier import RandomFourierFeatures

        return RandomFourierFeatures(n_features=DEFAULT_N_FEATURES, random_state=random_state).fit(
            X
        )
    if not (hasattr(feature_map, "fit") and hasattr(feature_map, "transform")):
        raise TypeError(
            f"{owner}: feature_map must be a kernelkit feature map (an object with fit(X) "
            f"and transform(X)), got {type(feature_map).__name__}."
        )
    if getattr(feature_map, "symmetric", True) is False:
        raise ValueError(
            f"{owner} needs a symmetric feature map (the same features for both kernel "
            f"arguments), but {type(feature_map).__name__} is asymmetric "
            "(symmetric=False: transform and transform_y differ), so k_hat(x, x') = "
            "phi(x)^T conj(phi(x')) is not defined by one map. Use a symmetric map (e.g. "
            "RandomFourierFeatures, GaussianSketch, TensorSRHT, SDERF)."
        )
    fm = clone(feature_map, safe=False)
    if random_state is not None and hasattr(fm, "get_params"):
        params = fm.get_params(deep=False)
        if "random_state" in params and params["random_state"] is None:
            fm.set_params(random_state=random_state)
    fm.fit(X)
    return fm


def map_features(fm, X, amplitude: float = 1.0) -> np.ndarray:
    """``sqrt(amplitude) * fm.transform(X)`` as float64 / complex128 NumPy."""
    P = as_feature_matrix(fm.transform(X))
    if amplitude != 1.0:
        P = P * np.sqrt(amplitude)
    return P
