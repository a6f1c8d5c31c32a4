"""Bad input to the feature maps gets a clear error that names the argument."""

from __future__ import annotations

import numpy as np
import pytest
from favor_helpers import ALL_MAPS, make_xy
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.exceptions import NotFittedError

from kernelkit.features import ADERF, GERF, SADERF, SDERF


def _name(cls):
    return cls.__name__


@pytest.fixture(scope="module")
def data():
    return make_xy(70, n=8, m=9)


@pytest.fixture(params=ALL_MAPS, ids=_name)
def cls(request):
    return request.param


def _invalid(name, cls):
    """The start of scikit-learn's message for an invalid constructor parameter."""
    return rf"^The '{name}' parameter of {cls.__name__} must be "


def _fitted(cls, X, Y=None):
    return cls(n_features=16, random_state=0).fit(X, Y=Y)


# ------------------------------------------------------------------ non-finite values
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected(cls, bad, data, backend):
    X, Y = data
    Xb, Yb = X.copy(), Y.copy()
    Xb[3, 2] = bad
    Yb[0, 5] = bad
    with pytest.raises(ValueError, match=r"^X contains NaN or infinity"):
        cls(n_features=16).fit(backend.asarray(Xb))
    with pytest.raises(ValueError, match=r"^Y contains NaN or infinity"):
        cls(n_features=16).fit(backend.asarray(X), Y=backend.asarray(Yb))
    fm = _fitted(cls, X, Y)
    with pytest.raises(ValueError, match=r"^X contains NaN"):
        fm.transform(backend.asarray(Xb))
    with pytest.raises(ValueError, match=r"^Y contains NaN"):
        fm.transform_y(backend.asarray(Yb))
    with pytest.raises(ValueError, match=r"^Y contains NaN"):
        fm.approx_kernel(backend.asarray(X), backend.asarray(Yb))
    with pytest.raises(ValueError, match=r"^X contains NaN"):
        fm.variance(backend.asarray(Xb), backend.asarray(Y))
    with pytest.raises(ValueError, match=r"^Y contains NaN"):
        fm.log_objective(backend.asarray(X), backend.asarray(Yb))


@given(
    arr=hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=6),
        elements=st.floats(-10, 10),
    ),
    bad=st.sampled_from([np.nan, np.inf, -np.inf]),
    where=st.tuples(st.integers(0, 100), st.integers(0, 100)),
)
def test_non_finite_anywhere_is_rejected_property(arr, bad, where):
    arr = arr.copy()
    arr[where[0] % arr.shape[0], where[1] % arr.shape[1]] = bad
    with pytest.raises(ValueError, match="contains NaN or infinity"):
        GERF(n_features=4).fit(arr)
    fm = SADERF(n_features=4, random_state=0).fit(np.ones((2, arr.shape[1])))
    with pytest.raises(ValueError, match="contains NaN or infinity"):
        fm.transform_y(arr)


# ------------------------------------------------------------------ shapes
def test_wrong_number_of_columns(cls, data, backend):
    X, Y = data
    fm = _fitted(cls, X, Y)
    msg = rf"has 5 features, but {cls.__name__} is expecting 6 features as input"
    with pytest.raises(ValueError, match=r"^X " + msg):
        fm.transform(backend.asarray(X[:, :5]))
    with pytest.raises(ValueError, match=r"^Y " + msg):
        fm.transform_y(backend.asarray(Y[:, :5]))
    with pytest.raises(ValueError, match=r"^Y " + msg):
        fm.approx_kernel(backend.asarray(X), backend.asarray(Y[:, :5]))
    with pytest.raises(ValueError, match=r"^Y has 5 features"):
        cls(n_features=4).fit(backend.asarray(X), Y=backend.asarray(Y[:, :5]))


@given(ndim=st.sampled_from([0, 1, 3, 4]))
def test_wrong_ndim_is_rejected_property(ndim):
    arr = np.ones((2,) * ndim)
    with pytest.raises(ValueError, match=rf"^X must be a 2-D array .* got {ndim}-D"):
        GERF(n_features=4).fit(arr)
    fm = GERF(n_features=4, random_state=0).fit(np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"^X must be a 2-D array"):
        fm.transform(arr)
    with pytest.raises(ValueError, match=r"^Y must be a 2-D array"):
        fm.approx_kernel(np.ones((3, 2)), arr)


def test_one_dimensional_and_empty_inputs(cls, data):
    X, Y = data
    with pytest.raises(ValueError, match=r"reshape\(-1, 1\)|reshape\(1, -1\)"):
        cls(n_features=4).fit(X[0])
    with pytest.raises(ValueError, match=r"^X is empty"):
        cls(n_features=4).fit(np.empty((0, 6)))
    with pytest.raises(ValueError, match=r"^Y is empty"):
        cls(n_features=4).fit(X, Y=np.empty((0, 6)))
    with pytest.raises(ValueError, match=r"^X has 0 feature\(s\)"):
        cls(n_features=4).fit(np.empty((5, 0)))
    fm = _fitted(cls, X, Y)
    with pytest.raises(ValueError, match=r"^X must be a 2-D array"):
        fm.transform(X[0])
    # zero rows at transform time are fine: an empty result of the right width
    assert fm.transform(np.empty((0, 6))).shape == (0, fm.output_dim)
    # every pairwise method, not only approx_kernel (the dot-product sketches' exact and
    # expected kernels raised "X is empty")
    for method in (
        "approx_kernel",
        "exact_kernel",
        "expected_kernel",
        "variance",
        "complex_variance",
        "log_relative_variance",
    ):
        assert getattr(fm, method)(np.empty((0, 6)), Y).shape == (0, len(Y)), method
        assert getattr(fm, method)(X, np.empty((0, 6))).shape == (len(X), 0), method


# ------------------------------------------------------------------ dtypes
def test_complex_input_is_rejected(cls, data, backend):
    X, Y = data
    with pytest.raises(ValueError, match=r"^Complex data not supported: X must be real-valued"):
        cls(n_features=4).fit(backend.asarray(X.astype(np.complex128)))
    fm = _fitted(cls, X, Y)
    with pytest.raises(ValueError, match=r"^Complex data not supported: Y must be real-valued"):
        fm.transform_y(backend.asarray((Y + 1j * Y).astype(np.complex64)))


def test_non_numeric_input_is_rejected(cls):
    with pytest.raises(TypeError, match=r"^X must be numeric"):
        cls(n_features=4).fit(np.array([["a", "b"], ["c", "d"]]))
    with pytest.raises(TypeError, match="X"):
        cls(n_features=4).fit([[1.0, object()]])


def test_iterators_and_scalar_objects_are_type_errors(cls, data):
    """A generator of rows (or any object NumPy wraps in a 0-d object array) gets a
    TypeError naming the argument; it was an AttributeError from the pandas.NA check."""
    X, Y = data
    with pytest.raises(TypeError, match=r"^X is an iterator \(generator\).*asarray"):
        cls(n_features=4).fit(row for row in X)
    with pytest.raises(TypeError, match=r"^X must be numeric, got dtype object"):
        cls(n_features=4).fit({"a": 1.0})
    fm = _fitted(cls, X, Y)
    with pytest.raises(TypeError, match=r"^X is an iterator \(list_iterator\)"):
        fm.transform(iter(list(X)))


def test_pandas_missing_values_are_nan(cls, data):
    """A nullable pandas column with pandas.NA is missing data, reported as NaN (it was a
    TypeError about converting 'NAType' to float)."""
    pd = pytest.importorskip("pandas")
    X, Y = data
    frame = pd.DataFrame(X).astype("Float64")
    frame.iloc[1, 2] = pd.NA
    with pytest.raises(ValueError, match=r"^X contains NaN"):
        cls(n_features=4).fit(frame)
    fm = _fitted(cls, X, Y)
    with pytest.raises(ValueError, match=r"^X contains NaN"):
        fm.transform(frame)
    # without missing values, the nullable frame is its float64 values
    out = fm.transform(pd.DataFrame(X).astype("Float64"))
    np.testing.assert_allclose(out, fm.transform(X), rtol=1e-12, atol=1e-15)  # layout: 1 ulp


def test_numpy_matrix_is_rejected(cls, data):
    """np.matrix keeps its products 2-D (row sums of shape (n, 1)), which broke the maps
    with shape errors from deep inside; rejected by name, as scikit-learn does."""
    X, Y = data
    with pytest.raises(TypeError, match=r"^X is a numpy.matrix.*numpy.asarray\(X\)"):
        cls(n_features=4).fit(np.asmatrix(X))
    fm = _fitted(cls, X, Y)
    with pytest.raises(TypeError, match=r"^Y is a numpy.matrix"):
        fm.approx_kernel(X, np.asmatrix(Y))


def test_integer_bool_and_list_input_are_promoted_to_float64(cls):
    Xi = np.arange(12).reshape(4, 3) % 3
    fm = cls(n_features=8, random_state=0).fit(Xi)
    for X in (Xi, Xi.astype(bool), Xi.tolist()):
        out = fm.transform(X)
        assert out.dtype == np.float64
        np.testing.assert_allclose(out, fm.transform(np.asarray(X, dtype=np.float64)))


# ------------------------------------------------------------------ hyper-parameters
@pytest.mark.parametrize("n", [0, -3])
def test_n_features_below_one(cls, n, data):
    with pytest.raises(ValueError, match=_invalid("n_features", cls) + r"an int in the range \[1,"):
        cls(n_features=n).fit(data[0])


@pytest.mark.parametrize("n", [2.5, "16", None, 16.0])
def test_n_features_not_an_integer(cls, n, data):
    with pytest.raises(TypeError, match=_invalid("n_features", cls) + "an int"):
        cls(n_features=n).fit(data[0])


def test_n_features_bool_is_not_an_integer(cls, data):
    # the shared constraints reject bools (Python's True is an Integral)
    with pytest.raises(TypeError, match=_invalid("n_features", cls) + r"an int in the range"):
        cls(n_features=True).fit(data[0])


def test_n_features_absurdly_large(cls, data):
    with pytest.raises(ValueError, match=_invalid("n_features", cls) + r"an int in the range"):
        cls(n_features=2**40).fit(data[0])
    assert cls(n_features=np.int64(8), random_state=0).fit(data[0]).transform(data[0]).shape[
        0
    ] == len(data[0])


@pytest.mark.parametrize("kernel", ["rbf", "Softmax", "", None, 3, "polynomial"])
def test_unknown_kernel(cls, kernel, data):
    with pytest.raises(ValueError, match=_invalid("kernel", cls) + "a str among"):
        cls(n_features=4, kernel=kernel).fit(data[0])


@pytest.mark.parametrize("ls", [0.0, -1.0, np.nan, np.inf])
def test_bad_lengthscale_value(cls, ls, data):
    with pytest.raises(ValueError, match=_invalid("lengthscale", cls) + r"a float in the range"):
        cls(n_features=4, lengthscale=ls).fit(data[0])


@pytest.mark.parametrize("ls", ["1", None, [1.0]])
def test_bad_lengthscale_type(cls, ls, data):
    with pytest.raises(TypeError, match=_invalid("lengthscale", cls) + r"a float in the range"):
        cls(n_features=4, lengthscale=ls).fit(data[0])


def test_bool_lengthscale_is_not_a_float(cls, data):
    with pytest.raises(TypeError, match=_invalid("lengthscale", cls) + r"a float in the range"):
        cls(n_features=4, lengthscale=True).fit(data[0])


@pytest.mark.parametrize("A", [0.125, 0.2, np.inf, np.nan])
def test_gerf_fixed_A_out_of_range(A, data):
    with pytest.raises(
        ValueError, match=_invalid("A", GERF) + r"None or a float in the range \[-1e\+300, 0.125\)"
    ):
        GERF(n_features=4, A=A).fit(data[0])
    with pytest.raises(TypeError, match=_invalid("A", GERF)):
        GERF(n_features=4, A="0.1").fit(data[0])


@pytest.mark.parametrize("eps", [-1e-3, np.nan, "1e-6", None])
@pytest.mark.parametrize("est", [SADERF, ADERF], ids=_name)
def test_bad_eps(est, eps, data):
    with pytest.raises(
        ValueError, match=_invalid("eps", est) + r"a float in the range \[0.0, inf\)"
    ):
        est(n_features=4, eps=eps).fit(data[0])


def test_edited_A_above_one_eighth_is_rejected_at_build(data):
    fm = GERF(n_features=4, random_state=0).fit(data[0])
    fm.A_ = np.full(6, 0.125)
    with pytest.raises(ValueError, match=r"A_l < 1/8"):
        fm._build()


@pytest.mark.parametrize("rs", [-1, 1.5, "seed", object()])
def test_bad_random_state(cls, rs, data):
    with pytest.raises((TypeError, ValueError), match="random_state"):
        cls(n_features=4, random_state=rs).fit(data[0])


def test_bad_side(cls, data):
    fm = _fitted(cls, data[0])
    with pytest.raises(ValueError, match=r"^side must be 'x' or 'y'"):
        fm.transform_scaled(data[0], side="z")


# ------------------------------------------------------------------ not fitted
def test_not_fitted(cls, data):
    X = data[0]
    fm = cls(n_features=4)
    for call in (
        lambda: fm.transform(X),
        lambda: fm.transform_y(X),
        lambda: fm.approx_kernel(X),
        lambda: fm.variance(X),
        lambda: fm.log_objective(X),
        lambda: fm.transform_scaled(X),
    ):
        with pytest.raises(NotFittedError):
            call()


def test_refit_replaces_parameters(cls, data):
    X, Y = data
    fm = cls(n_features=16, random_state=0).fit(X, Y=Y)
    first = fm.transform(X)
    fm.fit(X[:, :4])  # different dimension: a clean refit, no stale cache
    assert fm.n_features_in_ == 4 and fm.transform(X[:, :4]).shape == (len(X), fm.output_dim)
    fm.fit(X, Y=Y)
    np.testing.assert_allclose(fm.transform(X), first, rtol=1e-14)


@pytest.mark.parametrize("cls", [GERF, SADERF, ADERF, SDERF])
def test_fitted_maps_check_finiteness_through_their_moments(cls):
    """The data-dependent fits skip the separate finite pass over the data: NaN / inf
    are caught through the moments' sums (in the threaded path too), with the same
    message, and finite data whose moments overflow gets its own message."""
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(40000, 8)), rng.normal(size=(30000, 8))  # threaded moments
    for bad in (np.nan, np.inf, -np.inf):
        Xb, Yb = X.copy(), Y.copy()
        Xb[12345, 3], Yb[29999, 0] = bad, bad
        with pytest.raises(ValueError, match=r"^X contains NaN or infinity"):
            cls(n_features=4).fit(Xb, Y=Y)
        with pytest.raises(ValueError, match=r"^Y contains NaN or infinity"):
            cls(n_features=4).fit(X, Y=Yb)
    with pytest.raises(ValueError, match="overflow"):
        cls(n_features=4).fit(X[:50] * 1e200)
