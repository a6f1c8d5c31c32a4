"""One parameter-validation mechanism for every public estimator and feature map.

Every public ``BaseEstimator`` of :mod:`kernelkit.features`, :mod:`kernelkit.estimators`,
:mod:`kernelkit.distributions` and :mod:`kernelkit.optim` declares scikit-learn's
``_parameter_constraints`` for exactly its constructor parameters, and ``fit`` rejects
absurd values with a ``ValueError`` / ``TypeError`` that names the parameter. The classes
are enumerated from the packages, so a new class without constraints fails here.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re

import numpy as np
import pytest
from sklearn.base import BaseEstimator, is_classifier, is_regressor

from kernelkit.features import DotProductFeatureMap, FeatureMap

PACKAGES = (
    "kernelkit.features",
    "kernelkit.estimators",
    "kernelkit.distributions",
    "kernelkit.optim",
)
#: base classes exported for subclassing: no estimator of their own to fit
BASES = (FeatureMap, DotProductFeatureMap)
#: classes fitted on paired samples ``fit(X, Y)``
PAIRED = ("JointDistribution", "ConditionalMeanEmbedding", "PolynomialJointDistribution")


def _public_classes():
    found = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseEstimator):
                found[obj.__name__] = obj
    return [found[name] for name in sorted(found)]


CLASSES = _public_classes()
FITTED = [cls for cls in CLASSES if cls not in BASES]


def _init_params(cls):
    sig = inspect.signature(cls.__init__)
    return [p for p in sig.parameters if p != "self"]


NAN, INF = math.nan, math.inf
_POS_FLOAT = ["1.0", 0, 0.0, -1.0, NAN, INF, -INF]
_POS_INT = ["8", 0, -1, 1.5, NAN]
_NONNEG_FLOAT = ["1.0", -1.0, NAN, INF]
_BOOL = ["no", None, 1.5]
_STR = ["bogus", 1]
_OPT_POS_FLOAT = ["1.0", 0, -1.0, NAN, INF]  # None allowed

#: parameter name -> values that every class taking it must reject at ``fit``
BAD = {
    # sizes and counts
    "n_features": _POS_INT,
    "n_components": _POS_INT,
    "n_lambda": _POS_INT,
    "n_init": _POS_INT,
    "max_monomials": _POS_INT,
    "n_samples": _POS_INT,
    "n_components_mixture": _POS_INT,
    "max_iter": _POS_INT,
    "batch_size": _POS_INT,
    "max_epochs": _POS_INT,
    "n_iter_no_change": _POS_INT,
    "rank": _POS_INT,
    "max_degree": _POS_INT,
    "p_min": _POS_INT,
    "p_max": _POS_INT,
    "degree": ["2", -1, NAN, INF],
    "n_clusters": ["2", 0, -1, 1.5],
    "max_rank": ["8", 0, -1, 1.5],
    "cg_maxiter": ["8", 0, -1, 1.5],
    "pivot_sample": ["8", 1, 0, -1, 1.5],
    "n_subsample": ["8", 1, 0, 1.5],
    "auto_sample_size": ["8", 1, 0, 1.5],
    "n_jobs": ["2", 0, 1.5],
    "random_state": ["bogus", -1, 1.5],
    # positive finite reals
    "lengthscale": _POS_FLOAT,
    "lengthscale_x": _POS_FLOAT,
    "lengthscale_y": _POS_FLOAT,
    "gamma": _OPT_POS_FLOAT,  # None is RandomFourierFeatures' default
    "sigma": _POS_FLOAT,
    "tau": _POS_FLOAT,
    "lambda_bandwidth": _POS_FLOAT,
    "max_condition": _POS_FLOAT,
    "amplitude": _POS_FLOAT,
    "alpha": _POS_FLOAT,
    "noise": _POS_FLOAT,
    "reg": _POS_FLOAT,
    "eta0": _POS_FLOAT,
    "cg_rtol": _POS_FLOAT,
    "radius": _OPT_POS_FLOAT,
    "t0": _OPT_POS_FLOAT,
    "tol": ["1e-3", -1.0, NAN, INF],  # 0 is valid for BoundLogisticRegression
    "rel_tol": ["1e-3", 0, -1.0, 1.0, 2.0, NAN, INF],
    "coef0": _NONNEG_FLOAT,
    "eps": _NONNEG_FLOAT,
    "a": ["2", 1.0, NAN, INF],
    "A": ["bogus", NAN, INF],
    # booleans
    "complex": _BOOL,
    "real_output": _BOOL,
    "shared_projection": _BOOL,
    "constant_in_budget": _BOOL,
    "normalize": _BOOL,
    "exact": _BOOL,
    "fit_intercept": _BOOL,
    "normalize_y": _BOOL,
    "rotate": _BOOL,
    "standardize": _BOOL,
    "shuffle": _BOOL,
    "warm_start": _BOOL,
    "compute_loss": _BOOL,
    # string options
    "kernel": _STR,
    "kernel_x": _STR,
    "kernel_y": _STR,
    "sampler": _STR,
    "method": _STR,
    "mixture": _STR,
    "default_estimator": _STR,
    "lambda_features": _STR,
    "sketch": _STR,
    "fit_on": _STR,
    "solver": _STR,
    "constraint": _STR,
    "schedule": _STR,
    "finish": _STR,
    "reduction": _STR,
    "linear_solver": _STR,
    "preconditioner": _STR,
    "low_rank": _STR,
    # objects
    "feature_map": ["bogus", 1],
    "basis_cache": ["bogus", 1],
    "callback": ["bogus", 1],
}


def _data():
    rng = np.random.default_rng(0)
    X = 0.5 * rng.standard_normal((40, 2))
    y_cls = (X[:, 0] + 0.3 * rng.standard_normal(40) > 0).astype(int)
    y_reg = X[:, 0] - X[:, 1] + 0.1 * rng.standard_normal(40)
    Y = X[:, :1] + 0.3 * rng.standard_normal((40, 1))
    return X, y_cls, y_reg, Y


def _names(message: str, name: str) -> bool:
    """Whether ``message`` names the parameter ``name`` (as a word; quoted or followed by
    "must" for the one-letter names, which occur in any sentence)."""
    if len(name) <= 2:
        return f"'{name}'" in message or f"{name} must" in message
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", message) is not None


def _fit(est):
    X, y_cls, y_reg, Y = _data()
    if type(est).__name__ in PAIRED:
        return est.fit(X, Y)
    if is_classifier(est):
        return est.fit(X, y_cls)
    if is_regressor(est):
        return est.fit(X, y_reg)
    return est.fit(X)


def test_every_public_class_is_enumerated():
    names = {cls.__name__ for cls in CLASSES}
    assert len(FITTED) >= 32
    for expected in ("RandomMaclaurin", "RandomFeatureRidge", "JointDistribution"):
        assert expected in names
    assert "BoundLogisticRegression" in names


@pytest.mark.parametrize(
    "cls", [c for c in CLASSES if c is not FeatureMap], ids=lambda c: c.__name__
)
def test_constraints_cover_exactly_the_init_parameters(cls):
    constraints = cls._parameter_constraints
    assert constraints, f"{cls.__name__} declares no _parameter_constraints"
    assert set(constraints) == set(_init_params(cls)), cls.__name__
    for name in _init_params(cls):
        assert name in BAD, f"add absurd values of {cls.__name__}'s {name!r} to BAD"


@pytest.mark.parametrize("cls", FITTED, ids=lambda c: c.__name__)
def test_defaults_fit(cls):
    est = _fit(cls())
    assert est is not None


@pytest.mark.parametrize("cls", FITTED, ids=lambda c: c.__name__)
def test_absurd_values_are_rejected_by_name(cls):
    failures = []
    for name in _init_params(cls):
        for value in BAD[name]:
            est = cls().set_params(**{name: value})
            try:
                _fit(est)
            except (ValueError, TypeError) as exc:
                if not _names(str(exc), name):
                    failures.append(f"{name}={value!r}: message without the name: {exc}")
            else:
                failures.append(f"{name}={value!r} was accepted")
    assert not failures, f"{cls.__name__}:\n" + "\n".join(failures)


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        ("RandomFeatureRidge", {"fit_intercept": "no"}),
        ("JointDistribution", {"rel_tol": 2.0}),
        ("PolynomialJointDistribution", {"solver": "bogus"}),
        ("BoundLogisticRegression", {"rank": 0}),
        ("RandomMaclaurin", {"lengthscale": NAN}),
        ("OptimizedMaclaurin", {"lengthscale": NAN}),
    ],
)
def test_audit_cases(cls, params):
    est = {c.__name__: c for c in CLASSES}[cls](**params)
    (name,) = params
    with pytest.raises((ValueError, TypeError), match=name):
        _fit(est)


def test_partial_fit_validates_too():
    from kernelkit.optim import BoundLogisticRegression

    X, y, _, _ = _data()
    with pytest.raises(ValueError, match="shuffle"):
        BoundLogisticRegression(shuffle="no").partial_fit(X, y, classes=[0, 1])


@pytest.mark.parametrize(
    "random_state",
    [None, 0, np.int64(3), np.random.default_rng(0), np.random.RandomState(0)],
    ids=["None", "int", "np.int64", "Generator", "RandomState"],
)
def test_random_state_kinds_accepted(random_state):
    from kernelkit.features import SDERF

    SDERF(n_features=8, random_state=random_state).fit(_data()[0])
