"""Names of the random-feature mechanisms accepted by the estimators.

One registry, :data:`METHODS`, maps every ``method`` string of
:class:`~kernelkit.estimators.RandomFeatures` and
:class:`~kernelkit.estimators.NadarayaWatsonClassifier` to a feature-map class of
:mod:`kernelkit.features` and the kernels it estimates; :func:`make_feature_map` builds the
map from the estimators' common parameters (``kernel``, ``n_components`` output columns,
``lengthscale``, ``degree``, ``coef0``, ``sampler``, ``random_state``, ``n_jobs``).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from sklearn.utils._param_validation import InvalidParameterError

from .._backend import caller_stacklevel
from ..features import (
    ADERF,
    GERF,
    SADERF,
    SDERF,
    AngularHybridRF,
    ClusteredHybridRF,
    ComplexExponentialRF,
    GaussianHybridRF,
    GaussianSketch,
    HyperbolicRF,
    NormalizedGaussianHybridRF,
    OptimizedMaclaurin,
    PositiveRF,
    RademacherSketch,
    RandomFourierFeatures,
    RandomMaclaurin,
    SphericalRandomFeatures,
    TensorSketch,
    TensorSRHT,
    TrigRF,
)

__all__ = [
    "ALIASES",
    "DATA_DEPENDENT",
    "FEATURE_MAPS",
    "METHODS",
    "Method",
    "auto_candidates",
    "make_feature_map",
    "resolve_method",
]

_SOFTMAX = ("softmax", "gaussian")
_DOT = ("softmax", "gaussian", "polynomial")


@dataclass(frozen=True)
class Method:
    """A feature-map class and how the estimators configure it.

    ``kernels``: kernel names it estimates; ``style``: how the common parameters map to its
    constructor (``"projection"``: ``kernel``, ``lengthscale``, ``sampler``; ``"rff"``:
    ``lengthscale``, ``sampler``; ``"sketch"``: ``degree``, ``coef0``, ``gamma = 1/l^2``;
    ``"maclaurin"``: ``kernel`` and its parameters; ``"srf"``: ``degree``, ``sampler``);
    ``auto``: whether ``method="auto"`` considers it.
    """

    cls: type
    kernels: tuple
    style: str
    auto: bool = True


#: method name -> :class:`Method`
METHODS = {
    "trig": Method(TrigRF, _SOFTMAX, "projection"),
    "positive": Method(PositiveRF, _SOFTMAX, "projection"),
    "hyperbolic": Method(HyperbolicRF, _SOFTMAX, "projection"),
    "gerf": Method(GERF, _SOFTMAX, "projection"),
    "saderf": Method(SADERF, _SOFTMAX, "projection"),
    "aderf": Method(ADERF, _SOFTMAX, "projection"),
    "sderf": Method(SDERF, _SOFTMAX, "projection"),
    "rff": Method(RandomFourierFeatures, ("gaussian",), "rff"),
    "hybrid_angular": Method(AngularHybridRF, _SOFTMAX, "projection"),
    "hybrid_gaussian": Method(GaussianHybridRF, _SOFTMAX, "projection"),
    "hybrid_normalized": Method(NormalizedGaussianHybridRF, _SOFTMAX, "projection"),
    # with its default A = I it is FAVOR+ (positive): no second candidate for "auto"
    "complex_exponential": Method(ComplexExponentialRF, _SOFTMAX, "projection", auto=False),
    "hybrid_clustered": Method(ClusteredHybridRF, _SOFTMAX, "projection"),
    "rademacher": Method(RademacherSketch, ("polynomial",), "sketch"),
    "gaussian_sketch": Method(GaussianSketch, ("polynomial",), "sketch"),
    "tensor_srht": Method(TensorSRHT, ("polynomial",), "sketch"),
    "tensor_sketch": Method(TensorSketch, ("polynomial",), "sketch"),
    "random_maclaurin": Method(RandomMaclaurin, _DOT, "maclaurin"),
    "optimized_maclaurin": Method(OptimizedMaclaurin, _DOT, "maclaurin"),
    # the dot-product paper's eq. 57 on the unit sphere, not the polynomial kernel of the
    # other maps
    "srf": Method(SphericalRandomFeatures, ("polynomial",), "srf", auto=False),
}

#: paper names accepted as synonyms
ALIASES = {"favor+": "positive", "favor++": "gerf", "favor#": "sderf", "rbf": "rff"}

#: the FAVOR# family (trig, positive, hyperbolic, GERF, SADERF, ADERF, SDERF; Sec. 2-4):
#: method name -> class
FEATURE_MAPS = {
    name: METHODS[name].cls
    for name in ("trig", "positive", "hyperbolic", "gerf", "saderf", "aderf", "sderf")
}

#: methods with parameters fitted from the data (FAVOR# Sec. 3.1, Thm 4.2, 4.3, eq. 20)
DATA_DEPENDENT = tuple(name for name, m in METHODS.items() if m.cls.data_dependent)


def resolve_method(method, *, allowed=None, owner: str = "") -> str:
    """Canonical lower-case method name for ``method`` (case-insensitive, aliases).

    ``allowed``: the names an estimator accepts (default: all of :data:`METHODS`).

    Raises
    ------
    InvalidParameterError
        Unknown or not allowed name (scikit-learn's error for an invalid constructor
        parameter, both a ``ValueError`` and a ``TypeError``), naming the parameter.
    """
    allowed = tuple(METHODS) if allowed is None else tuple(allowed)
    if not isinstance(method, str):
        raise InvalidParameterError(
            f"method must be a string, one of {sorted(allowed)}; got {method!r}."
        )
    name = ALIASES.get(method.strip().lower(), method.strip().lower())
    if name not in allowed:
        aliases = [alias for alias, target in ALIASES.items() if target in allowed]
        raise InvalidParameterError(
            f"Unknown method {method!r}{' for ' + owner if owner else ''}: the 'method' "
            f"parameter must be one of {', '.join(allowed)} (case-insensitive; aliases "
            f"{', '.join(aliases)})."
        )
    return name


def auto_candidates(kernel: str, *, keys: bool = False) -> list[str]:
    """The methods ``method="auto"`` compares for ``kernel``.

    Without ``keys`` (a transformer fitted on ``X`` alone, whose next step uses the Gram
    matrix of ``transform``: a Pipeline, or an estimator's ``feature_map``, which needs a
    symmetric map), only the symmetric maps. That leaves out the hybrids, whose Gram
    matrix is not their estimate, and SADERF / ADERF, which fitted on one data set reduce
    to GERF (``psi = 1``; ``B~1 = B~2`` a rotation of GERF's isotropic projections), so
    nothing is lost. With ``keys`` (fitted with ``Y``, both sides mapped), every map.
    """
    return [
        name
        for name, m in METHODS.items()
        if m.auto and kernel in m.kernels and (keys or m.cls.symmetric)
    ]


def _gamma(lengthscale: float, method: str) -> float:
    """``1 / lengthscale^2``, or a ``ValueError`` naming ``lengthscale`` where it over- or
    underflows (Python's float power raises ``OverflowError`` / ``ZeroDivisionError``)."""
    try:
        gamma = float(lengthscale) ** -2.0
    except (OverflowError, ZeroDivisionError):
        gamma = math.inf
    if not (math.isfinite(gamma) and gamma > 0.0):
        raise ValueError(
            f"lengthscale={float(lengthscale):g} is out of range for method={method!r}: "
            f"its gamma = 1 / lengthscale^2 is not a positive finite float64."
        )
    return gamma


def make_feature_map(
    name: str,
    *,
    kernel: str,
    n_components: int,
    lengthscale: float = 1.0,
    degree: int = 2,
    coef0: float = 1.0,
    sampler: str = "iid",
    random_state=None,
    n_jobs=None,
    too_small: str = "warn",
):
    """The feature map of method ``name`` whose output has at most ``n_components`` columns.

    Every kernel divides its inputs by ``lengthscale``: ``exp(x.y / l^2)`` (softmax),
    ``exp(-|x - y|^2 / (2 l^2))`` (Gaussian), ``(x.y / l^2 + coef0)^degree`` (polynomial;
    sketches and Maclaurin maps get ``gamma = 1 / l^2``). ``n_features`` is the largest
    whose ``output_dim`` fits in ``n_components``
    (:meth:`~kernelkit.features.FeatureMap.n_features_for_output`).

    Raises
    ------
    ValueError
        When the method does not estimate ``kernel``.

        With ``too_small="raise"``: when the smallest output of the method has more than
        ``n_components`` columns.

    Warns
    -----
    UserWarning
        With ``too_small="warn"``: when the smallest output of the method (one random
        feature: 2 columns for ``"hyperbolic"``, 66 for ``"hybrid_gaussian"``) has more
        than ``n_components`` columns; the map then has that smallest output.
    """
    m = METHODS[name]
    if kernel not in m.kernels:
        raise ValueError(
            f"method={name!r} ({m.cls.__name__}) estimates the kernels {list(m.kernels)}, "
            f"not {kernel!r}."
        )
    common = {"random_state": random_state}
    if m.style == "projection":
        params = {"kernel": kernel, "lengthscale": lengthscale, "sampler": sampler}
    elif m.style == "rff":
        params = {"lengthscale": lengthscale, "sampler": sampler}
    elif m.style == "sketch":
        params = {"degree": degree, "coef0": coef0, "gamma": _gamma(lengthscale, name)}
    elif m.style == "srf":
        params = {"degree": degree, "sampler": sampler}
    else:  # maclaurin
        params = {"kernel": kernel}
        if kernel == "polynomial":
            gamma = _gamma(lengthscale, name)
            params |= {"degree": degree, "coef0": coef0, "gamma": gamma}
        else:
            params |= {"lengthscale": lengthscale}
    if "n_jobs" in m.cls().get_params():  # the maps with a threaded NumPy path
        params["n_jobs"] = n_jobs
    fm = m.cls(**common, **params)
    smallest = fm._output_dim_for(1)  # columns of one random feature
    if smallest > n_components:  # scikit-learn's checks fit with n_components=1
        msg = (
            f"n_components={n_components} is below the smallest output of method={name!r}: "
            f"{m.cls.__name__} gives {smallest} columns with one random feature"
        )
        if too_small == "raise":
            raise ValueError(f"{msg}.")
        warnings.warn(
            f"{msg}, so the output has {smallest} columns. Use n_components >= {smallest}.",
            UserWarning,
            stacklevel=caller_stacklevel(),
        )
    return fm.set_params(n_features=fm.n_features_for_output(n_components))
