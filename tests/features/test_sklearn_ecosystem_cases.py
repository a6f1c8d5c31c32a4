"""The feature maps and ``RandomFeatures`` composed as a scikit-learn user composes them:
``check_estimator`` with non-default parameters (every sampler, kernel and complex
option), scikit-learn's global ``transform_output="pandas"``, half-precision NumPy input,
and the cases of the ecosystem sweep that needed a fix.

Every expected value is an exact reference: the same seed gives the same random draw, so
the features of one configuration are compared with those of the feature-map class (or
of float64 input) to the last bit, or to round-off where the computation differs.
"""

from __future__ import annotations

import numpy as np
import pytest
import sklearn
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import (
    check_transformer_preserve_dtypes,
    parametrize_with_checks,
)

import kernelkit.features as features
from kernelkit.estimators import RandomFeatures
from kernelkit.features import (
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

HYBRID = {"n_features": 4, "n_lambda": 2}

#: every public feature-map class
MAPS = [
    getattr(features, name)
    for name in features.__all__
    if isinstance(getattr(features, name), type)
    and issubclass(getattr(features, name), features.FeatureMap)
    and name not in ("FeatureMap", "DotProductFeatureMap")
]
SMALL = {
    "AngularHybridRF": HYBRID,
    "GaussianHybridRF": HYBRID,
    "NormalizedGaussianHybridRF": HYBRID,
    "ClusteredHybridRF": {"n_features": 8, "n_init": 1},
}


def _small(cls, **kw):
    return cls(**{"n_features": 16, **SMALL.get(cls.__name__, {}), "random_state": 0, **kw})


def _data(seed=0, n=30, d=4):
    rng = np.random.default_rng(seed)
    return 0.35 * rng.standard_normal((n, d))


#: non-default configurations: each sampler, the other kernel, the complex variants and
#: the maps' own options (the defaults are checked in test_contract.py)
NON_DEFAULT = [
    ADERF(8, sampler="orthogonal", kernel="gaussian"),
    GERF(8, sampler="sorf", lengthscale=2.0),
    SADERF(8, sampler="hadamard", kernel="gaussian"),
    SDERF(8, sampler="halton", kernel="gaussian"),
    TrigRF(8, sampler="halton", kernel="gaussian"),
    PositiveRF(8, sampler="sorf", kernel="gaussian"),
    HyperbolicRF(8, sampler="orthogonal", kernel="gaussian"),
    ComplexExponentialRF(8, sampler="hadamard", kernel="gaussian"),
    AngularHybridRF(**HYBRID, sampler="orthogonal", kernel="gaussian"),
    GaussianHybridRF(**HYBRID, sampler="halton", lambda_features="trig"),
    NormalizedGaussianHybridRF(**HYBRID, sampler="sorf", kernel="gaussian"),
    ClusteredHybridRF(8, mixture="gaussian", default_estimator="trig", n_init=1),
    RandomFourierFeatures(8, sampler="hadamard", gamma=0.3),
    RandomFourierFeatures(8, complex=True),
    RandomFourierFeatures(8, complex=True, real_output=True),
    GaussianSketch(8, complex=True, degree=3, coef0=0.5),
    RademacherSketch(8, complex=True),
    RademacherSketch(8, complex=True, real_output=True, degree=3),
    TensorSRHT(8, complex=True, method="fwht"),
    TensorSRHT(8, method="dense", coef0=1.0),
    TensorSketch(8, degree=3, coef0=1.0, gamma=0.5),
    RandomMaclaurin(8, complex=True),
    RandomMaclaurin(8, kernel="gaussian", sketch="gaussian"),
    OptimizedMaclaurin(8, complex=True, real_output=True),
    OptimizedMaclaurin(8, sketch="gaussian", degree=3),
    SphericalRandomFeatures(8, degree=3, sampler="orthogonal"),
    RandomFeatures(method="auto", n_components=40),
    RandomFeatures(method="auto", kernel="polynomial", n_components=16),
    RandomFeatures(method="trig", sampler="halton", n_components=16),
    RandomFeatures(method="hybrid_angular", n_components=40, lengthscale=2.0),
    RandomFeatures(method="hybrid_clustered", n_components=40),
    RandomFeatures(method="random_maclaurin", kernel="softmax", lengthscale=3.0),
    RandomFeatures(method="tensor_srht", kernel="polynomial", degree=3, n_components=16),
]


@parametrize_with_checks(NON_DEFAULT)
def test_check_estimator_with_non_default_parameters(estimator, check):
    check(estimator)


COMPLEX = [
    RandomFourierFeatures(8, complex=True),
    GaussianSketch(8, complex=True),
    RademacherSketch(8, complex=True),
    TensorSRHT(8, complex=True),
    RandomMaclaurin(8, complex=True),
    OptimizedMaclaurin(8, complex=True),
]


@pytest.mark.parametrize("fm", COMPLEX, ids=lambda fm: type(fm).__name__)
def test_complex_maps_do_not_claim_to_preserve_real_dtypes(fm):
    """Complex features (complex64 / complex128) preserve no real dtype: the tags say
    so, and scikit-learn's dtype check, which failed on them, passes; with
    ``real_output=True`` the map is real again and preserves float32 and float64."""
    assert fm.__sklearn_tags__().transformer_tags.preserves_dtype == []
    check_transformer_preserve_dtypes(type(fm).__name__, fm)
    real = fm.set_params(real_output=True)
    assert real.__sklearn_tags__().transformer_tags.preserves_dtype == ["float64", "float32"]
    check_transformer_preserve_dtypes(type(fm).__name__, real)


# ---------------------------------------------------------------------- output containers
@pytest.mark.parametrize(
    ("method", "kernel"), [("sderf", "gaussian"), ("trig", "softmax"), ("auto", "gaussian")]
)
def test_random_features_under_global_pandas_output(method, kernel):
    """``sklearn.set_config(transform_output="pandas")`` applies to every transformer,
    the map inside ``RandomFeatures`` included: its DataFrame reached the finiteness check
    of ``RandomFeatures.transform``, which raised a TypeError. The inner map now always
    returns arrays and ``RandomFeatures`` alone follows the configuration: the same
    numbers as without it, with the frame's index and the feature names."""
    pd = pytest.importorskip("pandas")
    X = _data()
    y = X[:, 0] - X[:, 1] ** 2
    frame = pd.DataFrame(X, columns=list("abcd"), index=np.arange(100, 100 + len(X)))

    def make():
        return RandomFeatures(method=method, kernel=kernel, n_components=32, random_state=0)

    ref = make().fit(X).transform(X)
    pred = make_pipeline(make(), Ridge()).fit(X, y).predict(X)
    with sklearn.config_context(transform_output="pandas"):
        rf = make().fit(frame)
        out = rf.transform(frame)
        pred_pd = make_pipeline(make(), Ridge()).fit(frame, y).predict(frame)
    assert isinstance(out, pd.DataFrame)
    assert list(out.index) == list(frame.index)
    assert list(out.columns) == list(rf.get_feature_names_out())
    # a frame converts to a Fortran-ordered array: other BLAS kernels, round-off apart
    np.testing.assert_allclose(out.to_numpy(), ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(pred_pd, pred, rtol=1e-10, atol=1e-12)
    if method == "sderf":  # the same seed gives the map class's features
        fm = SDERF(32, kernel=kernel, random_state=0).fit(X)
        np.testing.assert_array_equal(ref, fm.transform(X))


# ---------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("cls", MAPS, ids=lambda c: c.__name__)
def test_numpy_float16_input_is_computed_in_float64(cls):
    """Half-precision NumPy input became half-precision features (three decimal digits,
    overflow above 65504), where scikit-learn's ``check_array``, ``RandomFeatures`` and
    the maps' own dtype policy (float32 or float64 kept, the rest float64) give float64:
    the half-precision values are now converted to float64 first, so the map fitted and
    evaluated on them is exactly the one on their float64 copy."""
    X16 = _data().astype(np.float16)
    X64 = X16.astype(np.float64)  # the same numbers
    fm = _small(cls).fit(X16)
    ref = _small(cls).fit(X64)
    out = fm.transform(X16)
    assert out.dtype == ref.transform(X64).dtype
    assert out.real.dtype == np.float64
    np.testing.assert_array_equal(out, ref.transform(X64))
    np.testing.assert_array_equal(fm.transform_y(X16), ref.transform_y(X64))
    np.testing.assert_array_equal(fm.approx_kernel(X16), ref.approx_kernel(X64))


# ---------------------------------------------------------------------- fitted state
@pytest.mark.parametrize("cls", MAPS, ids=lambda c: c.__name__)
def test_set_params_after_fit_takes_effect_at_the_next_fit(cls):
    """The fitted draw belongs to the parameters of ``fit``. ``set_params(n_features=...)``
    on a fitted map used to leave a map whose ``transform`` either failed deep inside
    (broadcast / reshape errors of the old draw against the new size) or silently
    rescaled the old features, and whose ``get_feature_names_out`` (computed from the
    current parameters, even unfitted) disagreed with its columns, so a pandas
    ``transform`` raised "Length mismatch". Now the names are those of the fitted map
    (none before a fit, as in scikit-learn), the methods that use the fitted map raise
    ``NotFittedError`` naming the changed parameter until the map is refitted, and
    ``n_jobs`` (threads only) can change freely."""
    pytest.importorskip("pandas")
    from sklearn.exceptions import NotFittedError

    X = _data()
    with pytest.raises(NotFittedError):
        _small(cls).get_feature_names_out()
    ref = _small(cls).fit(X)
    names, Z = ref.get_feature_names_out(), ref.transform(X)
    assert len(names) == Z.shape[1]
    fm = _small(cls).fit(X)
    n = fm.n_features
    fm.set_params(n_features=2 * n)
    np.testing.assert_array_equal(fm.get_feature_names_out(), names)
    for method in (fm.transform, fm.transform_y, fm.approx_kernel, fm.variance):
        with pytest.raises(NotFittedError, match=f"n_features: {n} -> {2 * n}"):
            method(X)
    fm.set_params(n_features=n)  # back to the fitted value: the fitted map again
    np.testing.assert_array_equal(fm.transform(X), Z)
    out = fm.set_output(transform="pandas").transform(X)
    assert list(out.columns) == list(names)
    np.testing.assert_array_equal(out.to_numpy(), Z)
    if "n_jobs" in fm.get_params():
        fm.set_params(n_jobs=1)
        np.testing.assert_array_equal(fm.set_output(transform="default").transform(X), Z)
    fm.set_params(n_features=2 * n).set_output(transform="default").fit(X)
    wide = fm.transform(X)
    assert len(fm.get_feature_names_out()) == wide.shape[1] > Z.shape[1]


def test_clustered_hybrid_on_one_sample_says_so():
    """``RandomFeatures(method="hybrid_clustered")`` cannot lower the map's ``n_clusters``
    (scikit-learn's one-sample check lowers ``n_components`` only): its error on one row
    now gives the number of samples, in the words scikit-learn's check looks for."""
    from sklearn.utils.estimator_checks import check_fit2d_1sample

    rf = RandomFeatures(method="hybrid_clustered", n_components=40)
    check_fit2d_1sample("RandomFeatures", rf)
    X = np.array([[0.1, 0.2], [0.1, 0.2], [0.3, -0.1], [0.3, -0.1]])  # 2 distinct points
    with pytest.raises(ValueError, match=r"distinct X points \(2\) among its n_samples=4"):
        ClusteredHybridRF(8, n_clusters=3).fit(X)


def test_random_features_whole_float_degree_is_the_int():
    """``RandomFeatures`` accepts ``degree=2.0`` (a search grid of floats, a continuous
    distribution rounded by the user) but passed it on as a float: the Maclaurin maps and
    ``"srf"``, which take integers, raised about their own constraint, and
    ``method="auto"`` silently dropped them (variance ``inf``). Now ``2.0`` is ``2`` for
    every method; a fractional degree of the polynomial kernel is an error naming
    ``degree`` instead of "no candidate has a finite variance"."""
    X = _data(n=40, d=3)
    for method in ("random_maclaurin", "optimized_maclaurin", "srf", "tensor_sketch"):
        kw = {"method": method, "kernel": "polynomial", "n_components": 16, "random_state": 0}
        ref = RandomFeatures(degree=3, **kw).fit(X).transform(X)
        np.testing.assert_array_equal(RandomFeatures(degree=3.0, **kw).fit(X).transform(X), ref)
    kw = {"method": "auto", "kernel": "polynomial", "n_components": 16, "random_state": 0}
    ref = RandomFeatures(degree=2, **kw).fit(X)
    rf = RandomFeatures(degree=2.0, **kw).fit(X)
    assert rf.variance_estimates_ == ref.variance_estimates_
    assert all(np.isfinite(v) for v in rf.variance_estimates_.values())
    assert rf.method_ == ref.method_
    np.testing.assert_array_equal(rf.transform(X), ref.transform(X))
    with pytest.raises(ValueError, match=r"degree must be a whole number .* got 2\.5"):
        RandomFeatures(degree=2.5, **kw).fit(X)
    # the other kernels do not read degree
    RandomFeatures(kernel="gaussian", degree=2.5, n_components=16).fit(X)


@pytest.mark.parametrize("cls", MAPS, ids=lambda c: c.__name__)
def test_second_argument_column_names_are_checked(cls):
    """``transform_y(frame)`` checks the frame's column names against those of ``fit``,
    but the second argument of ``approx_kernel``, ``variance`` and ``exact_kernel``, and
    ``fit``'s own ``Y``, were not checked: a frame with its columns in another order gave
    another kernel (or fitted the data-dependent parameters on misaligned keys) without a
    word. They now get scikit-learn's error, as ``transform_y`` does, and frames in the
    fitted order give the numbers of the plain arrays."""
    pd = pytest.importorskip("pandas")
    X = _data()
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    fm = _small(cls).fit(frame)
    ref = _small(cls).fit(X)
    shuffled = frame[["c", "a", "d", "b"]]
    with pytest.raises(ValueError, match="feature names should match"):
        _small(cls).fit(frame, Y=shuffled)
    keyed = _small(cls).fit(frame, Y=frame[5:])
    np.testing.assert_allclose(
        keyed.transform(frame), _small(cls).fit(X, Y=X[5:]).transform(X), rtol=1e-12, atol=1e-14
    )
    for method in ("approx_kernel", "variance", "exact_kernel"):
        with pytest.raises(ValueError, match="feature names should match"):
            getattr(fm, method)(frame, shuffled)
        np.testing.assert_allclose(
            getattr(fm, method)(frame, frame[:7]),
            getattr(ref, method)(X, X[:7]),
            rtol=1e-12,
            atol=1e-14,
        )


@pytest.mark.parametrize("method", ["saderf", "sderf", "auto"])
def test_random_features_keys_as_a_frame(method):
    """``RandomFeatures.fit(frame, Y=keys_frame)`` gives the map fitted on the arrays,
    without a warning (the keys' names are checked once, against ``X``'s, and the map
    gets arrays), and keys with reordered columns are an error, not misaligned keys."""
    pd = pytest.importorskip("pandas")
    import warnings

    X = _data()
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    kw = {"method": method, "n_components": 16, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rf = RandomFeatures(**kw).fit(frame, Y=frame[10:])
        Zx, Zy = rf.transform(frame), rf.transform_y(frame)
    ref = RandomFeatures(**kw).fit(X, Y=X[10:])
    assert rf.method_ == ref.method_
    np.testing.assert_allclose(Zx, ref.transform(X), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(Zy, ref.transform_y(X), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="feature names should match"):
        RandomFeatures(**kw).fit(frame, Y=frame[["b", "a", "c", "d"]])
