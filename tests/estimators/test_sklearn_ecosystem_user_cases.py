"""A data scientist's scikit-learn pipelines around kernelkit's estimators and maps.

Each test is a case a scikit-learn user meets every day (array API dispatch with torch
inputs, a transformer fitted as ``fit(X, keys)``, a ``method="auto"`` search over small
lengthscales, a label column with gaps), checked against what the same code does with
NumPy inputs or scikit-learn's own estimators. Sample weights:
``test_sample_weight_cases.py``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn import config_context
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
    RandomFeatures,
)
from kernelkit.features import SDERF


def _data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, np.sin(X[:, 0]) + X[:, 1] ** 2


# ------------------------------------------------------------------ array API dispatch
def test_estimators_take_torch_tensors_under_array_api_dispatch(monkeypatch):
    """estimators.md: ``fit`` and ``predict`` take CPU torch tensors, converted to NumPy.
    Under ``set_config(array_api_dispatch=True)`` (the setting a user turns on for the
    maps' torch pipelines) all four estimators raised torch's "asarray(): argument
    'dtype' must be torch.dtype, not type" in ``fit``: the tensor was handed to
    scikit-learn's validation with NumPy dtypes."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("array_api_compat")
    # scikit-learn checks the variable when dispatch is turned on; the estimators compute
    # in NumPy, so SciPy's own array API mode (read at its import) is not needed here
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    X, y = _data()
    labels = np.where(y > 1, "big", "small")
    Xt, yt = torch.tensor(X), torch.tensor(y)
    for cls in (RandomFeatureRidge, RandomFeatureGPRegressor):
        ref = cls(random_state=0).fit(X, y).predict(X)
        with config_context(array_api_dispatch=True):
            est = cls(random_state=0).fit(Xt, yt)
            out = est.predict(Xt)
            assert np.isfinite(est.score(Xt, yt))
        # the same float64 values, converted: the same arithmetic, so equal to within the
        # order of BLAS sums (a few ulps of predictions of order 1)
        assert isinstance(out, np.ndarray) and out.dtype == np.float64, type(out)
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12)
    for cls in (RandomFeatureGPClassifier, NadarayaWatsonClassifier):
        ref = cls(random_state=0).fit(X, y > 1).predict_proba(X)
        ref_labels = cls(random_state=0).fit(X, labels).predict(X)
        with config_context(array_api_dispatch=True):
            est = cls(random_state=0).fit(Xt, yt > 1)
            P = est.predict_proba(Xt)
            assert est.classes_.tolist() == [False, True]
            assert cls(random_state=0).fit(Xt, (yt > 1).long()).classes_.tolist() == [0, 1]
            # string labels with a torch X
            assert (cls(random_state=0).fit(Xt, labels).predict(Xt) == ref_labels).all()
        np.testing.assert_allclose(P, ref, rtol=0, atol=1e-12)


def test_other_kernelkit_classifiers_take_torch_tensors_under_array_api_dispatch(monkeypatch):
    """The same validation serves ``optim.BoundLogisticRegression`` and
    ``distributions.KernelLogisticRegression``: under dispatch their ``fit`` on a torch
    tensor raised the same torch ``TypeError``; now it fits what the NumPy array fits."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("array_api_compat")
    from kernelkit.distributions import KernelLogisticRegression
    from kernelkit.optim import BoundLogisticRegression

    monkeypatch.setenv("SCIPY_ARRAY_API", "1")  # as above
    X, y = _data()
    labels = (y > 1).astype(int)
    for est in (
        BoundLogisticRegression(solver="bound", max_epochs=5, tol=None),
        KernelLogisticRegression(),
    ):
        ref = clone(est).fit(X, labels).predict_proba(X)
        with config_context(array_api_dispatch=True):
            P = clone(est).fit(torch.tensor(X), torch.tensor(labels)).predict_proba(torch.tensor(X))
        # deterministic fits of the same float64 values: equal to within BLAS round-off
        np.testing.assert_allclose(P, ref, rtol=0, atol=1e-10)


# ------------------------------------------------------------------ fit(X, keys)
@pytest.mark.parametrize("method", ["saderf", "sderf", "auto", "rff"])
def test_random_features_refuses_keys_passed_positionally(method):
    """contract.md, "Fitting": a second data set passed positionally with another number
    of rows than ``X`` raises a ``TypeError`` naming ``fit(X, Y=keys)``. The maps did, but
    ``RandomFeatures(method="saderf").fit(queries, keys)`` ignored the keys without a word
    and fitted SADERF on ``(queries, queries)``: another map than ``fit(queries,
    Y=keys)``."""
    X, _ = _data(30)
    keys, _ = _data(20, seed=1)
    rf = RandomFeatures(method=method, n_components=16, random_state=0)
    with pytest.raises(TypeError, match=r"fit\(X, Y=keys\)"):
        rf.fit(X, keys)
    with pytest.raises(TypeError, match=r"fit\(X, Y=keys\)"):
        rf.fit_transform(X, keys)
    # the keyword form, and a Pipeline's 1-D target, are what they were
    rf.fit(X, Y=keys)
    assert rf.transform_y(keys).shape[0] == 20
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Z = make_pipeline(StandardScaler(), clone(rf), Ridge()).fit(X, X[:, 0])
    assert Z.predict(X).shape == (30,)


def test_random_features_warns_like_the_maps_for_a_same_length_2d_target():
    """With as many rows as ``X`` the second argument may be a multi-output target: the
    maps warn (data-dependent ones) that they fitted without it; ``RandomFeatures`` with
    a data-dependent method now says the same, at the line that called ``fit``, and a
    data-independent method stays silent."""
    X, _ = _data(30)
    target = np.random.default_rng(2).standard_normal((30, 3))
    with pytest.warns(UserWarning, match="ignores its positional argument y") as rec:
        RandomFeatures(method="sderf", n_components=16, random_state=0).fit(X, target)
    assert rec[0].filename == __file__
    with pytest.warns(UserWarning, match="ignores its positional argument y") as rec:
        SDERF(8, random_state=0).fit(X, target)
    assert rec[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RandomFeatures(method="rff", n_components=16, random_state=0).fit(X, target)


# ------------------------------------------------------------------ method="auto"
def test_auto_search_over_small_lengthscales_ranks_without_overflow_warning():
    """``RandomizedSearchCV`` of ``StandardScaler()`` then ``RandomFeatures(method="auto")``
    over ``lengthscale=loguniform(0.1, 10)``: on this fold it drew 0.19085..., where the
    trigonometric maps' relative variances on far pairs (a Gaussian kernel of ~1e-100)
    are each finite, up to ~1e307, but their sum is not. ``fit`` printed NumPy's
    "overflow encountered in reduce" RuntimeWarning from inside the mean, and ranked those
    maps as infinite. The mean is now formed without overflowing: finite where it is
    representable, and the choice (the lowest mean) is unchanged."""
    # the fold, the lengthscale and the choice are of this one draw: PCG64 directly, which
    # the harness's KERNELKIT_TEST_RNG_OFFSET does not reach (same values as default_rng)
    X = np.random.Generator(np.random.PCG64(0)).standard_normal((60, 3))[np.r_[0:20, 40:60]]
    X = StandardScaler().fit_transform(X)  # the search's second training fold
    rf = RandomFeatures(
        method="auto", n_components=22, lengthscale=0.19085412933888732, random_state=0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        rf.fit(X)
    est = rf.variance_estimates_
    assert rf.method_ == min(est, key=est.get) == "gerf"
    # trig's and rff's mean relative variance is ~1e305: within float64, ranked
    assert 1e300 < est["trig"] < np.inf and 1e300 < est["rff"] < np.inf


# ------------------------------------------------------------------ labels with gaps
@pytest.mark.parametrize(
    "est",
    [RandomFeatureGPClassifier(random_state=0), NadarayaWatsonClassifier(random_state=0)],
    ids=lambda e: type(e).__name__,
)
def test_missing_label_in_a_nullable_string_column_is_named(est):
    """estimators.md: a missing class label raises an error that names ``y``. A label
    column read with pandas' ``"string"`` dtype (``read_csv(dtype_backend=...)``,
    ``astype("string")``) holds ``pandas.NA`` in its gaps, whose comparisons are NA: the
    check itself raised "boolean value of NA is ambiguous" (as scikit-learn's classifiers
    do), naming nothing."""
    pd = pytest.importorskip("pandas")
    X, _ = _data(20)
    y = pd.Series(["cat", "dog", pd.NA, "cat"] * 5, dtype="string")
    with pytest.raises(ValueError, match=r"y contains a missing label \(<NA> at index 2\)"):
        est.fit(X, y)
    with pytest.raises(ValueError, match="missing label"):  # an object column, a list
        clone(est).fit(X, list(y.astype(object)))
    # the same column without gaps fits, its classes the sorted strings
    assert clone(est).fit(X, y.fillna("cow")).classes_.tolist() == ["cat", "cow", "dog"]
