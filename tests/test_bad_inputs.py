"""Every public estimator and feature map, walked through bad data (hypothesis).

NaN, inf, empty, 1-D, 3-D, complex, non-numeric and wrong-width inputs, at ``fit`` and
after it (``transform`` / ``predict`` on a fitted estimator), in random shapes. Each case
must end in a correct result or a ``ValueError`` / ``TypeError`` whose message names the
argument (or the input array): never a NaN output, and never an exception from inside
NumPy, SciPy, torch or LAPACK. Mixed NumPy / torch input must give finite results.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.base import is_classifier, is_regressor

from test_parameter_constraints import FITTED, PAIRED

KINDS = ["nan", "inf", "empty", "1d", "3d", "complex", "strings", "width"]
#: words by which an error message names the offending input
NAMES = ("X", "Y", "y", "input", "array", "sample", "feature")


def _small(cls):
    params = cls().get_params()
    kw = {}
    if "n_features" in params:
        kw["n_features"] = 8
    if "n_components" in params:
        kw["n_components"] = 8
    if "n_lambda" in params:
        kw["n_lambda"] = 2
    if "feature_map" in params:
        from kernelkit.features import RandomFourierFeatures

        kw["feature_map"] = RandomFourierFeatures(8, random_state=0)
    if "random_state" in params:
        kw["random_state"] = 0
    return cls(**kw)


def _targets(est, n, rng):
    X_like = rng.standard_normal((n, 1))
    if type(est).__name__ in PAIRED:
        return X_like
    if is_classifier(est):
        return np.arange(n) % 2
    if is_regressor(est):
        return X_like[:, 0]
    return None


def _bad(kind, X):
    if kind == "nan":
        B = X.copy()
        B[0, -1] = np.nan
        return B
    if kind == "inf":
        B = X.copy()
        B[-1, 0] = -np.inf
        return B
    if kind == "empty":
        return X[:0]
    if kind == "1d":
        return X[:, 0]
    if kind == "3d":
        return X[None]
    if kind == "complex":
        return X + 1j
    if kind == "strings":
        return np.full(X.shape, "a", dtype=object)
    return np.hstack([X, X])  # "width": more columns than at fit


def _fit(est, X, rng):
    t = _targets(est, X.shape[0] if np.ndim(X) >= 1 else 1, rng)
    return est.fit(X) if t is None else est.fit(X, t)


def _use(est, X):
    if type(est).__name__ in PAIRED:  # scored on pairs (X, Y)
        Y = np.zeros((np.shape(X)[0] if np.ndim(X) else 1, 1))
        return est.score(X, Y)
    for method in ("transform", "predict"):
        if hasattr(est, method):
            return getattr(est, method)(X)
    return est.score(X) if hasattr(est, "score") else None


def _check_error(exc, cls, kind):
    msg = str(exc)
    assert any(word in msg for word in NAMES), f"{cls.__name__} {kind}: {msg!r}"


@pytest.mark.parametrize("cls", FITTED, ids=lambda c: c.__name__)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    n=st.integers(8, 30),
    d=st.integers(2, 4),
    at_fit=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_bad_data_gives_a_named_error(cls, kind, n, d, at_fit, seed):
    rng = np.random.default_rng(seed)
    X = 0.5 * rng.standard_normal((n, d))
    est = _small(cls)
    if not at_fit:
        _fit(est, X, rng)
        if kind == "empty":
            return  # predicting on no rows may legitimately give an empty result
    bad = _bad(kind, X)
    try:
        out = _fit(est, bad, rng) if at_fit else _use(est, bad)
    except (ValueError, TypeError) as exc:
        _check_error(exc, cls, kind)
        return
    # accepted (numeric strings converted, or "width" at fit, which is just wider data):
    # then the result must be finite
    if at_fit:
        out = _use(out, bad)
    if out is not None:
        arr = np.asarray(out)
        if arr.dtype.kind in "fc":
            assert np.all(np.isfinite(arr)), f"{cls.__name__} {kind}: non-finite result"


@pytest.mark.torch
@pytest.mark.parametrize("cls", FITTED, ids=lambda c: c.__name__)
def test_numpy_fit_torch_input_gives_a_finite_result_or_a_named_error(cls):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    X = 0.5 * rng.standard_normal((20, 3))
    est = _fit(_small(cls), X, rng)
    try:
        out = _use(est, torch.as_tensor(X))
    except (ValueError, TypeError) as exc:
        _check_error(exc, cls, "torch")
        return
    if out is not None:
        arr = out.detach().numpy() if hasattr(out, "detach") else np.asarray(out)
        if arr.dtype.kind in "fc":
            assert np.all(np.isfinite(arr))
