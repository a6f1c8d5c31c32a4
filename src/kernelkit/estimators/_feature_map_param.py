"""The ``feature_map`` parameter of the random-feature ridge / GP estimators: step 2 of
every fit (clone and fit the map), and the features ``sqrt(amplitude) phi(X)`` of the
prior ``f ~ GP(0, amplitude * k_hat)`` (App. D.2)."""

from __future__ import annotations

import numpy as np
from sklearn.base import clone

from .._backend import check_random_state
from ._posterior import as_feature_matrix
from ._weighted_fit import fit_map_weighted, weighted_dask_moments

__all__ = ["DEFAULT_N_FEATURES", "fitted_feature_map", "map_features"]

#: features of the default :class:`~kernelkit.features.RandomFourierFeatures`
DEFAULT_N_FEATURES = 256


def fitted_feature_map(
    feature_map,
    random_state,
    X,
    owner: str,
    n_jobs=None,
    all_rows=None,
    blocks=None,
    weights=None,
    chunked=False,
):
    """Clone (or create) the feature map, check it is symmetric, fit it on ``X`` (n, d).

    ``all_rows``: the whole Dask array of a chunked fit, whose first chunk is ``X``. A
    kernelkit map that reads only the dimension or the moments of its data (``fit_reads``
    ``"shape"`` or ``"moments"``) is fitted on it, as in memory; others on ``X``.
    ``blocks``: for a sequence of blocks that can be read again, whose first non-empty
    block is ``X``, a function returning a new iterator over its X blocks: a map that
    reads the moments is fitted on the moments of all of them
    (:func:`kernelkit.features._dask.fit_on_blocks`); others on ``X``.
    ``weights``: sample weights (n,) of ``X`` (NumPy) or of ``all_rows`` (Dask, in its row
    chunks), or None: a map that reads the FAVOR# moments is fitted on the weighted
    moments (:mod:`kernelkit.estimators._weighted_fit`), so an integer weight is the row
    repeated; the other maps ignore them. ``chunked``: ``X`` is the first non-empty chunk
    of chunked input (Dask, a sequence or a stream of blocks), so a map fitted on ``X``
    alone whose fit reads its rows (a ``Pipeline`` with a ``StandardScaler``) warns.

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
    for part in _output_maps(feature_map):
        _check_symmetric(part, type(part).__name__, owner)
    fm = clone(feature_map, safe=False)
    if hasattr(fm, "get_params"):
        _inherit(fm, random_state, n_jobs)
    reads = getattr(fm, "fit_reads", "all")
    if hasattr(fm, "_fit_chunked") and (
        all_rows is not None or blocks is not None or weights is not None
    ):  # RandomFeatures: its method's map, as below
        fm._fit_chunked(X, all_rows, blocks, weights=weights, owner=owner)
    elif all_rows is not None and reads == "moments" and weights is not None:
        with weighted_dask_moments(fm, all_rows, weights, owner):
            fm.fit(X)  # X: the first non-empty chunk, as the Dask fit takes it
    elif all_rows is not None and reads in ("shape", "moments"):
        fm.fit(all_rows)
    elif weights is not None and all_rows is None:
        fit_map_weighted(fm, X, weights)
    elif blocks is not None and reads == "moments":
        from ..features._dask import fit_on_blocks

        fit_on_blocks(fm, X, blocks)  # one pass over the blocks for the moments
    else:
        if chunked and _composite_reads_rows(fm):
            _warn_first_chunk(fm, X, owner)
        fm.fit(X)
    for part in _output_maps(fm):
        inner = getattr(part, "feature_map_", None)  # RandomFeatures: its method's map
        if inner is not None:  # asymmetric methods are only known once fitted
            _check_symmetric(inner, f"{type(part).__name__}'s {type(inner).__name__}", owner)
    return fm


def _composite_reads_rows(fm) -> bool:
    """Whether ``fm`` is a transformer without kernelkit's ``fit_reads`` (a ``Pipeline``,
    a ``FeatureUnion``, a transformer from elsewhere) whose fit may read its rows: not
    one whose every step is a kernelkit map reading the dimension only (its fit on the
    first chunk is its fit on all rows)."""
    if hasattr(fm, "fit_reads"):
        return False
    leaves = list(_leaves(fm))
    return not leaves or any(getattr(leaf, "fit_reads", "all") != "shape" for leaf in leaves)


def _leaves(fm):
    """The estimators inside a Pipeline / FeatureUnion (nested), ``fm`` itself else;
    ``"passthrough"`` and ``None`` steps read nothing."""
    parts = getattr(fm, "steps", None) or getattr(fm, "transformer_list", None)
    if parts is None:
        yield fm
        return
    for _, part in parts:
        if part is None or isinstance(part, str):  # "passthrough", "drop"
            continue
        yield from _leaves(part)


def _warn_first_chunk(fm, X, owner: str) -> None:
    """Say that a feature map kernelkit cannot fit chunk by chunk (a ``Pipeline``, a
    ``FeatureUnion``, a transformer from outside kernelkit) is fitted on the first
    non-empty chunk of a chunked ``X`` only: its statistics (a ``StandardScaler``'s means)
    are then those of that chunk, and the model is not the in-memory one."""
    import warnings

    from .._backend import caller_stacklevel

    warnings.warn(
        f"{owner}: feature_map {type(fm).__name__} is fitted on the first non-empty chunk "
        f"of the chunked X ({X.shape[0]} rows), not on all rows: a Pipeline, a "
        "FeatureUnion or a transformer from elsewhere has no chunk-by-chunk fit here "
        "(kernelkit's maps that read only the dimension or the FAVOR# moments do). Fit "
        "such steps beforehand (e.g. standardise X outside the estimator) and pass a "
        "kernelkit map, or fit in memory.",
        UserWarning,
        stacklevel=caller_stacklevel(),
    )


def _inherit(fm, random_state, n_jobs) -> None:
    """Fill the parameters of the clone ``fm`` that are ``None``: its own ``n_jobs`` and
    ``random_state``, and the ``random_state`` of the estimators inside it (the steps of
    a ``Pipeline``, the parts of a ``FeatureUnion``).

    ``fm``'s own seed is ``random_state`` itself (an int gives the map's features with
    that seed); each nested one is an int drawn from ``random_state`` in the order of
    ``get_params``, so two maps of a union get different draws, and the same seed the
    same draws on every fit. A map from outside kernelkit gets a ``Generator`` as an int
    drawn from it (scikit-learn's maps, ``RBFSampler`` and ``Nystroem``, take no
    ``Generator``).
    """
    params = fm.get_params(deep=True)  # own parameters and "step__param" ones
    inherit = {}
    if n_jobs is not None and "n_jobs" in params and params["n_jobs"] is None:
        inherit["n_jobs"] = n_jobs
    if random_state is not None:
        nested = [k for k, v in params.items() if k.endswith("__random_state") and v is None]
        seeds = check_random_state(random_state) if nested else None
        if "random_state" in params and params["random_state"] is None:
            rs = random_state
            if isinstance(rs, np.random.Generator) and not _is_kernelkit(fm):
                rs = int(rs.integers(2**32 - 1))
            inherit["random_state"] = rs
        for key in nested:
            inherit[key] = int(seeds.integers(2**32 - 1))
    if inherit:
        fm.set_params(**inherit)


def _is_kernelkit(obj) -> bool:
    return type(obj).__module__.startswith("kernelkit.")


def _output_maps(fm) -> list:
    """The maps whose features ``fm`` returns: ``fm`` itself, the last step of a
    ``Pipeline`` or the parts of a ``FeatureUnion`` (recursively)."""
    steps = getattr(fm, "steps", None)
    if isinstance(steps, list) and steps:
        return _output_maps(steps[-1][1])
    parts = getattr(fm, "transformer_list", None)
    if isinstance(parts, list):
        return [m for _, part in parts for m in _output_maps(part)]
    return [fm]


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
