"""The ``feature_map`` parameter of the random-feature ridge / GP estimators: step 2 of
every fit (clone and fit the map), and the features ``sqrt(amplitude) phi(X)`` of the
prior ``f ~ GP(0, amplitude * k_hat)`` (App. D.2)."""

from __future__ import annotations

import numpy as np
from sklearn.base import clone

from ._posterior import as_feature_matrix

__all__ = ["DEFAULT_N_FEATURES", "fitted_feature_map", "map_features"]

#: features of the default :class:`~kernelkit.features.RandomFourierFeatures`
DEFAULT_N_FEATURES = 256


def fitted_feature_map(
    feature_map, random_state, X, owner: str, n_jobs=None, all_rows=None, blocks=None
):
    """Clone (or create) the feature map, check it is symmetric, fit it on ``X`` (n, d).

    ``all_rows``: the whole Dask array of a chunked fit, whose first chunk is ``X``. A
    kernelkit map that reads only the dimension or the moments of its data (``fit_reads``
    ``"shape"`` or ``"moments"``) is fitted on it, as in memory; others on ``X``.
    ``blocks``: for a sequence of blocks that can be read again, whose first non-empty
    block is ``X``, a function returning a new iterator over its X blocks: a map that
    reads the moments is fitted on the moments of all of them
    (:func:`kernelkit.features._dask.fit_on_blocks`); others on ``X``.

    ``None`` gives ``RandomFourierFeatures(n_features=256, random_state=random_state,
    n_jobs=n_jobs)`` (Gaussian kernel, lengthscale 1). A given map is cloned, and the
    estimator's ``random_state`` and ``n_jobs`` fill the clone's parameters of that name
    that are ``None`` (so ``check_estimator``-style reproducibility holds, and one
    ``n_jobs`` sets the estimator's threads, feature map included). A map from outside
    kernelkit gets a ``Generator`` as an int seed drawn from it.
    """
    if feature_map is None:
        from ..features.fourier import RandomFourierFeatures

        fm = RandomFourierFeatures(
            n_features=DEFAULT_N_FEATURES, random_state=random_state, n_jobs=n_jobs
        )
        return fm.fit(X if all_rows is None else all_rows)
    if isinstance(feature_map, type):  # the class passes the fit / transform check
        raise TypeError(
            f"{owner}: feature_map must be a feature map instance, got the class "
            f"{feature_map.__name__}; pass {feature_map.__name__}(...)."
        )
    if not (hasattr(feature_map, "fit") and hasattr(feature_map, "transform")):
        raise TypeError(
            f"{owner}: feature_map must be a kernelkit feature map (an object with fit(X) "
            f"and transform(X)), got {type(feature_map).__name__}."
        )
    _check_symmetric(feature_map, type(feature_map).__name__, owner)
    fm = clone(feature_map, safe=False)
    if hasattr(fm, "get_params"):
        params = fm.get_params(deep=False)
        inherit = {
            key: value
            for key, value in (("random_state", random_state), ("n_jobs", n_jobs))
            if value is not None and key in params and params[key] is None
        }
        rs = inherit.get("random_state")
        if isinstance(rs, np.random.Generator) and not type(fm).__module__.startswith(
            "kernelkit."
        ):  # scikit-learn's maps (RBFSampler, Nystroem) take an int, not a Generator
            inherit["random_state"] = int(rs.integers(2**32 - 1))
        if inherit:
            fm.set_params(**inherit)
    reads = getattr(fm, "fit_reads", "all")
    if all_rows is not None and reads in ("shape", "moments"):
        fm.fit(all_rows)
    elif blocks is not None and reads == "moments":
        from ..features._dask import fit_on_blocks

        fit_on_blocks(fm, X, blocks)  # one pass over the blocks for the moments
    else:
        fm.fit(X)
    inner = getattr(fm, "feature_map_", None)  # RandomFeatures: the map of its method
    if inner is not None:  # asymmetric methods are only known once fitted
        _check_symmetric(inner, f"{type(fm).__name__}'s {type(inner).__name__}", owner)
    return fm


def _check_symmetric(fm, name: str, owner: str) -> None:
    """Raise if ``fm`` is asymmetric (``symmetric = False``); ``name`` names it."""
    if getattr(fm, "symmetric", True) is False:
        raise ValueError(
            f"{owner} needs a symmetric feature map (the same features for both kernel "
            f"arguments), but {name} is asymmetric "
            "(symmetric=False: transform and transform_y differ), so k_hat(x, x') = "
            "phi(x)^T conj(phi(x')) is not defined by one map. Use a symmetric map (e.g. "
            "RandomFourierFeatures, GaussianSketch, TensorSRHT, SDERF)."
        )


def map_features(fm, X, amplitude: float = 1.0) -> np.ndarray:
    """``sqrt(amplitude) * fm.transform(X)`` as float64 / complex128 NumPy."""
    P = as_feature_matrix(fm.transform(X))
    if amplitude != 1.0:
        P = P * np.sqrt(amplitude)
    return P
