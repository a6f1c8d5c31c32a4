"""Names of the random-feature mechanisms accepted by the estimators.

Maps the ``method`` strings of :class:`~kernelkit.estimators.RandomFeatures` and
:class:`~kernelkit.estimators.NadarayaWatsonClassifier` to the feature-map classes of
:mod:`kernelkit.features.softmax` (FAVOR# paper, Sec. 2-4).
"""

from __future__ import annotations

from ..features import ADERF, GERF, SADERF, SDERF, HyperbolicRF, PositiveRF, TrigRF

__all__ = ["ALIASES", "DATA_DEPENDENT", "FEATURE_MAPS", "SYMMETRIC", "resolve_method"]

#: method name -> feature-map class
FEATURE_MAPS = {
    "trig": TrigRF,
    "positive": PositiveRF,
    "hyperbolic": HyperbolicRF,
    "gerf": GERF,
    "saderf": SADERF,
    "aderf": ADERF,
    "sderf": SDERF,
}

#: paper names accepted as synonyms
ALIASES = {"favor+": "positive", "favor++": "gerf", "favor#": "sderf"}

#: methods whose x side and y side use the same map (f1 = f2)
SYMMETRIC = tuple(name for name, cls in FEATURE_MAPS.items() if cls.symmetric)

#: methods with parameters fitted from the data (FAVOR# Sec. 3.1, Thm 4.2, 4.3, eq. 20)
DATA_DEPENDENT = ("gerf", "saderf", "aderf", "sderf")


def resolve_method(method, *, symmetric_only: bool = False, owner: str = "") -> str:
    """Canonical lower-case method name for ``method`` (case-insensitive, aliases).

    Raises
    ------
    ValueError
        Unknown name, or an asymmetric map where ``symmetric_only`` is set.
    """
    if not isinstance(method, str):
        raise ValueError(f"method must be a string, one of {sorted(FEATURE_MAPS)}; got {method!r}.")
    name = method.strip().lower()
    name = ALIASES.get(name, name)
    if name not in FEATURE_MAPS:
        allowed = SYMMETRIC if symmetric_only else tuple(FEATURE_MAPS)
        raise ValueError(
            f"Unknown method {method!r}; expected one of {', '.join(allowed)} "
            f"(case-insensitive; aliases {', '.join(ALIASES)})."
        )
    if symmetric_only and not FEATURE_MAPS[name].symmetric:
        cls = FEATURE_MAPS[name].__name__
        raise ValueError(
            f"{owner or 'This estimator'} needs a symmetric feature map, but method={method!r} "
            f"({cls}) is asymmetric: it maps query points x and key points y differently "
            "(f1 != f2) and fits its parameters on a pair of sets (X, Y), so a single "
            "transform(X) is not defined. Use one of "
            f"{', '.join(SYMMETRIC)}, or use kernelkit.features.{cls} directly "
            f"(fit(X, Y), transform(X), transform_y(Y)), or "
            "kernelkit.estimators.NadarayaWatsonClassifier, which accepts asymmetric maps."
        )
    return name
