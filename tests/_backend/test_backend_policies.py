"""Backend layer: dtype policy, input validation, random-state policy, conversions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kernelkit._backend import (
    check_random_state,
    float_dtype,
    get_namespace,
    is_numpy_namespace,
    is_torch_namespace,
    to_backend,
    to_numpy,
    validate_data,
    validate_positive_int,
)


# ------------------------------------------------------------------ dtype policy
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.bool_])
def test_validate_data_promotes_integers_and_bool_to_float64(dtype):
    X = (np.arange(6).reshape(3, 2) % 2).astype(dtype)
    out, xp = validate_data(X)
    assert is_numpy_namespace(xp)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, X.astype(np.float64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_validate_data_keeps_float_dtype(dtype):
    X = np.linspace(0, 1, 6, dtype=dtype).reshape(3, 2)
    out, _ = validate_data(X)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, X)


def test_validate_data_torch_dtype_policy(torch):
    for dt in (torch.float32, torch.float64):
        out, xp = validate_data(torch.ones((2, 3), dtype=dt))
        assert is_torch_namespace(xp) and out.dtype == dt
    out, _ = validate_data(torch.ones((2, 3), dtype=torch.int64))
    assert out.dtype == torch.get_default_dtype()
    prev = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert validate_data(torch.ones((2, 3), dtype=torch.int32))[0].dtype == torch.float64
    finally:
        torch.set_default_dtype(prev)
    assert (
        float_dtype(get_namespace(torch.ones(1)), torch.ones(1, dtype=torch.int16))
        == torch.get_default_dtype()
    )


def test_validate_data_accepts_lists_and_numeric_objects():
    out, _ = validate_data([[1, 2], [3, 4]])
    assert out.dtype == np.float64 and out.shape == (2, 2)
    out, _ = validate_data([[1, 2.5], [True, np.int8(3)]])
    assert out.dtype == np.float64
    # an object ndarray is either converted or rejected with an error naming the argument
    try:
        out, _ = validate_data(np.array([[1, 2.5]], dtype=object), "Q")
        assert out.dtype == np.float64
    except TypeError as exc:
        assert str(exc).startswith("Q must be numeric")


# ------------------------------------------------------------------ validation errors
def test_validate_data_errors_name_the_argument(backend):
    ok = np.ones((3, 2))
    with pytest.raises(ValueError, match=r"^Q is None"):
        validate_data(None, "Q")
    with pytest.raises(ValueError, match=r"^Q must be a 2-D array .* got 1-D"):
        validate_data(backend.asarray(np.ones(3)), "Q")
    with pytest.raises(ValueError, match=r"^Q must be a 2-D array .* got 3-D"):
        validate_data(backend.asarray(np.ones((1, 2, 3))), "Q")
    with pytest.raises(ValueError, match=r"^Q is empty"):
        validate_data(backend.asarray(np.ones((0, 2))), "Q")
    assert validate_data(backend.asarray(np.ones((0, 2))), "Q", allow_empty=True)[0].shape[0] == 0
    with pytest.raises(ValueError, match=r"^Q has 0 feature\(s\)"):
        validate_data(backend.asarray(np.ones((2, 0))), "Q", allow_empty=True)
    with pytest.raises(ValueError, match=r"^Q has 2 features, but this object was fitted with 3"):
        validate_data(backend.asarray(ok), "Q", n_features=3)
    with pytest.raises(ValueError, match=r"^Complex data not supported: Q must be real-valued"):
        validate_data(backend.asarray(ok.astype(np.complex128)), "Q")
    for bad in (np.nan, np.inf, -np.inf):
        X = ok.copy()
        X[1, 1] = bad
        with pytest.raises(ValueError, match=r"^Q contains NaN or infinity"):
            validate_data(backend.asarray(X), "Q")
    with pytest.raises(TypeError, match=r"^Q must be numeric"):
        validate_data(np.array([["a"]]), "Q")


def test_validate_data_rejects_nan_in_float32_and_int_overflow_is_not_an_issue():
    X = np.ones((2, 2), dtype=np.float32)
    X[0, 0] = np.float32("nan")
    with pytest.raises(ValueError, match="contains NaN"):
        validate_data(X)
    big = np.full((2, 2), np.iinfo(np.int64).max)
    out, _ = validate_data(big)
    assert np.all(np.isfinite(out))


@given(
    hnp.arrays(
        st.sampled_from([np.float32, np.float64]),
        hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=5),
        elements=st.floats(-1e6, 1e6, width=32),
    )
)
def test_validate_data_is_identity_on_finite_float_arrays(X):
    out, _ = validate_data(X)
    assert out.dtype == X.dtype and out.shape == X.shape
    np.testing.assert_array_equal(out, X)


# ------------------------------------------------------------------ random state
def test_check_random_state_policy():
    assert isinstance(check_random_state(None), np.random.Generator)
    a, b = check_random_state(7), check_random_state(np.int64(7))
    np.testing.assert_array_equal(a.standard_normal(5), b.standard_normal(5))
    assert not np.array_equal(check_random_state(7).random(3), check_random_state(8).random(3))
    g = np.random.default_rng(3)
    assert check_random_state(g) is g
    r1 = check_random_state(np.random.RandomState(5)).random(3)
    r2 = check_random_state(np.random.RandomState(5)).random(3)
    np.testing.assert_array_equal(r1, r2)
    # None: fresh OS entropy each time
    fresh = [check_random_state(None).random(4) for _ in range(2)]
    assert not np.array_equal(*fresh)


def test_unseeded_draws_repeat_under_the_test_harness(monkeypatch):
    # the suite seeds the generators of random_state=None from NumPy's global legacy
    # generator (conftest), so an unseeded map draws the same in every run, and anew on
    # every call within one
    from kernelkit import _backend
    from kernelkit.features import SDERF

    X = np.random.default_rng(11).standard_normal((30, 4)) * 0.3
    draws = []
    for _ in range(2):
        np.random.seed(5)  # noqa: NPY002 (the global state the harness seeds)
        draws.append([SDERF(8).fit(X).transform(X) for _ in range(2)])
    np.testing.assert_array_equal(draws[0][0], draws[1][0])  # the same in each "run"
    np.testing.assert_array_equal(draws[0][1], draws[1][1])
    assert not np.allclose(draws[0][0], draws[0][1])  # anew on each call
    # the library itself (the harness's patch undone): OS entropy, not the global state
    monkeypatch.undo()
    own = []
    for _ in range(2):
        np.random.seed(5)  # noqa: NPY002
        own.append(_backend.check_random_state(None).random(4))
    assert not np.array_equal(*own)


@pytest.mark.parametrize("seed", [-1, -100])
def test_check_random_state_negative(seed):
    with pytest.raises(ValueError, match="random_state must be a non-negative integer"):
        check_random_state(seed)


@pytest.mark.parametrize("seed", [1.5, "3", [1], object()])
def test_check_random_state_bad_type(seed):
    with pytest.raises(TypeError, match="random_state must be None, an int or"):
        check_random_state(seed)


# ------------------------------------------------------------------ small helpers
def test_validate_positive_int():
    assert validate_positive_int(np.int32(4), "k") == 4
    assert type(validate_positive_int(np.int64(4), "k")) is int
    with pytest.raises(TypeError, match=r"^k must be an integer, got bool"):
        validate_positive_int(True, "k")
    with pytest.raises(TypeError, match=r"^k must be an integer, got float"):
        validate_positive_int(3.0, "k")
    with pytest.raises(ValueError, match=r"^k must be >= 2, got 1"):
        validate_positive_int(1, "k", minimum=2)
    with pytest.raises(ValueError, match=r"^k must be <= 10, got 11"):
        validate_positive_int(11, "k", maximum=10)


def test_get_namespace_and_to_numpy(torch):
    assert is_numpy_namespace(get_namespace([[1.0]], None))
    assert is_numpy_namespace(get_namespace())
    t = torch.ones((2, 2), dtype=torch.float64, requires_grad=True)
    assert is_torch_namespace(get_namespace(t))
    arr = to_numpy(t * 2)
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float64
    np.testing.assert_array_equal(arr, 2.0)
    assert to_numpy([[1, 2]], np.float32).dtype == np.float32


def test_to_backend_moves_numpy_to_the_like_array(torch):
    src = np.arange(6.0).reshape(2, 3)
    like = torch.zeros(1, dtype=torch.float32)
    out = to_backend(src, get_namespace(like), like)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert out.device == like.device
    np.testing.assert_array_equal(out.numpy(), src.astype(np.float32))
    out64 = to_backend(src.T, get_namespace(like), like, dtype=torch.float64)  # non-contiguous
    np.testing.assert_array_equal(out64.numpy(), src.T)
    np.testing.assert_array_equal(
        to_backend(src, np, np.zeros(1, np.float32)), src.astype(np.float32)
    )
    assert to_backend(src, np).dtype == np.float64
