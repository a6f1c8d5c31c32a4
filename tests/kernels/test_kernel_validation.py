"""Input validation of :mod:`kernelkit.kernels`: every bad input gives a ``ValueError`` or
``TypeError`` that names the argument, and valid inputs never give NaN."""

from __future__ import annotations

import importlib.util
import math
import re

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kernelkit.kernels import (
    gaussian_kernel,
    log_scaled_softmax_kernel,
    polynomial_kernel,
    scaled_softmax_kernel,
    softmax_attention,
    softmax_kernel,
)

PAIR_KERNELS = {
    "gaussian_kernel": gaussian_kernel,
    "softmax_kernel": softmax_kernel,
    "scaled_softmax_kernel": scaled_softmax_kernel,
    "log_scaled_softmax_kernel": log_scaled_softmax_kernel,
    "polynomial_kernel": polynomial_kernel,
}

# hyperparameters of each kernel: name -> bad values
BAD_POSITIVE = [0.0, -1.0, math.nan, math.inf, -math.inf, True, "1.0", None]
BAD_REAL = [math.nan, math.inf, -math.inf, True, "0.5", None]
PARAMS = {
    "gaussian_kernel": {"lengthscale": BAD_POSITIVE},
    "softmax_kernel": {"lengthscale": BAD_POSITIVE},
    "scaled_softmax_kernel": {"alpha": BAD_REAL},
    "log_scaled_softmax_kernel": {"alpha": BAD_REAL},
    "polynomial_kernel": {
        "degree": [0, -1, 2.5, True, math.nan, "2", None],
        "gamma": BAD_POSITIVE,
        "coef0": BAD_REAL,
    },
}


def _names(name):
    """Regex that matches the argument ``name`` as a word."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


def _xy(seed=0, n=4, m=5, d=3):
    """Random inputs with entries of magnitude at most 1."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, d)), rng.uniform(-1, 1, (m, d))


def _bad_arrays(a):
    """(label, bad version of the 2-D float array ``a``, exception type)."""
    nan, inf = a.copy(), a.copy()
    nan[0, 0] = np.nan
    inf[-1, -1] = -np.inf
    return [
        ("nan", nan, ValueError),
        ("inf", inf, ValueError),
        ("empty_rows", a[:0], ValueError),
        ("empty_features", a[:, :0], ValueError),
        ("1d", a[0], ValueError),
        ("0d", np.float64(1.0), ValueError),
        ("complex", a + 1j, ValueError),
        ("object", a.astype(object), TypeError),
        ("bool", a > 0, TypeError),
        ("str", np.full(a.shape, "a"), TypeError),
        ("none", None, TypeError),
    ]


_ARRAY_CASES = [label for label, _, _ in _bad_arrays(np.zeros((2, 2)))]


# ----------------------------------------------------------------------------- pair kernels
@pytest.mark.parametrize("func", PAIR_KERNELS)
@pytest.mark.parametrize("arg", ["X", "Y"])
@pytest.mark.parametrize("case", _ARRAY_CASES)
def test_pair_kernels_reject_bad_arrays(func, arg, case):
    X, Y = _xy()
    _label, bad, exc = next(c for c in _bad_arrays(X if arg == "X" else Y) if c[0] == case)
    args = (bad, Y) if arg == "X" else (X, bad)
    with pytest.raises(exc, match=_names(arg)), np.errstate(all="ignore"):
        PAIR_KERNELS[func](*args)


@pytest.mark.parametrize("func", PAIR_KERNELS)
@pytest.mark.parametrize("case", ["nan", "inf", "complex", "bool", "1d", "empty_rows"])
def test_pair_kernels_reject_bad_arrays_on_each_backend(func, case, backend):
    X, Y = _xy(1)
    _label, bad, exc = next(c for c in _bad_arrays(X) if c[0] == case)
    with pytest.raises(exc, match=_names("X")):
        PAIR_KERNELS[func](backend.asarray(bad), backend.asarray(Y))


@pytest.mark.parametrize("func", PAIR_KERNELS)
def test_pair_kernels_reject_mismatched_shapes(func, backend):
    X, Y = _xy(2)
    with pytest.raises(ValueError, match=r"X and Y.*\(4, 3\).*\(5, 2\)"):
        PAIR_KERNELS[func](backend.asarray(X), backend.asarray(Y[:, :2]))
    Xb = np.zeros((2, 4, 3))
    Yb = np.zeros((3, 5, 3))
    with pytest.raises(ValueError, match=r"X and Y"):
        PAIR_KERNELS[func](backend.asarray(Xb), backend.asarray(Yb))


@pytest.mark.parametrize(
    ("func", "param", "value"),
    [
        (func, param, value)
        for func, params in PARAMS.items()
        for param, values in params.items()
        for value in values
    ],
    ids=lambda v: repr(v) if not callable(v) else None,
)
def test_pair_kernels_reject_bad_hyperparameters(func, param, value):
    X, Y = _xy(3)
    with pytest.raises((ValueError, TypeError), match=_names(param)):
        PAIR_KERNELS[func](X, Y, **{param: value})


def test_pair_kernels_reject_mixed_backends(torch):
    X, Y = _xy(4)
    with pytest.raises(TypeError, match="X, Y"):
        gaussian_kernel(X, torch.from_numpy(Y))


def test_pair_kernels_promote_mixed_precision_and_integers(backend):
    X, Y = _xy(5)
    out = gaussian_kernel(backend.asarray(X, "float32"), backend.asarray(Y, "float64"))
    assert backend.dtype_name(out) == "float64"
    Xi = np.arange(6).reshape(3, 2)
    np.testing.assert_allclose(
        backend.to_numpy(softmax_kernel(backend.asarray(Xi), backend.asarray(Xi), 4.0)),
        np.exp(Xi @ Xi.T / 16.0),
        rtol=1e-6,  # torch: integers become the default float (float32)
    )
    np.testing.assert_allclose(  # lists are array-likes
        polynomial_kernel([[1.0, 2.0]], [[3.0, 4.0]], degree=2), [[144.0]]
    )


# ----------------------------------------------------------------------------- attention
def _qkv(seed=6, L=5, S=5, d=4, dv=3):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (L, d)), rng.uniform(-1, 1, (S, d)), rng.standard_normal((S, dv))


@pytest.mark.parametrize("arg", ["q", "k", "v"])
@pytest.mark.parametrize("case", _ARRAY_CASES)
def test_attention_rejects_bad_arrays(arg, case):
    qkv = dict(zip("qkv", _qkv(), strict=True))
    _label, bad, exc = next(c for c in _bad_arrays(qkv[arg]) if c[0] == case)
    qkv[arg] = bad
    with pytest.raises(exc, match=_names(arg)):
        softmax_attention(qkv["q"], qkv["k"], qkv["v"])


def test_attention_rejects_mismatched_shapes(backend):
    q, k, v = (backend.asarray(a) for a in _qkv(7, L=4, S=5, d=3, dv=2))
    with pytest.raises(ValueError, match=r"k and v.*\(5, 3\).*\(4, 2\)"):
        softmax_attention(q, k, v[:4])
    with pytest.raises(ValueError, match=r"q and k.*\(4, 3\).*\(5, 2\)"):
        softmax_attention(q, k[:, :2], v)
    qb, kb, vb = (backend.asarray(np.zeros(s)) for s in [(2, 4, 3), (3, 5, 3), (5, 2)])
    with pytest.raises(ValueError, match=r"q and k and v"):
        softmax_attention(qb, kb, vb)


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, True, "0.5"])
def test_attention_rejects_bad_scale(value):
    with pytest.raises((ValueError, TypeError), match=_names("scale")):
        softmax_attention(*_qkv(), scale=value)


@pytest.mark.parametrize("value", [1, "yes", None, np.array([True])])
def test_attention_rejects_non_bool_is_causal(value):
    with pytest.raises(TypeError, match="is_causal"):
        softmax_attention(*_qkv(), is_causal=value)


@pytest.mark.parametrize(
    ("mask", "exc"),
    [
        (np.zeros(4, dtype=bool), ValueError),  # S = 5
        (np.zeros((2, 5), dtype=bool), ValueError),  # batch 2 against the batch 3 of q, k, v
        (np.zeros(5), TypeError),  # float mask: ambiguous (additive or boolean?)
        (np.zeros(5, dtype=complex), TypeError),
        (np.array(["a"] * 5), TypeError),
        (np.bool_(True), ValueError),
    ],
)
def test_attention_rejects_bad_key_padding_mask(mask, exc):
    q, k, v = _qkv(8)
    q, k, v = (np.stack([a] * 3) for a in (q, k, v))  # batch (3,)
    with pytest.raises(exc, match="key_padding_mask"):
        softmax_attention(q, k, v, key_padding_mask=np.broadcast_to(mask, mask.shape))


def test_attention_accepts_integer_and_list_masks():
    q, k, v = _qkv(9)
    ref = softmax_attention(q, k, v, key_padding_mask=np.array([0, 1, 0, 0, 1], dtype=bool))
    np.testing.assert_array_equal(softmax_attention(q, k, v, key_padding_mask=[0, 1, 0, 0, 1]), ref)


# ----------------------------------------------------------------------------- properties
_moderate = st.floats(-3, 3)
# mostly moderate entries; some arbitrary (huge, tiny, NaN, inf) and some large specials
_floats = st.one_of(
    *[_moderate] * 12,
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([1e154, -1e200, 1e300, np.nan, np.inf]),
)
_x_shapes = st.sampled_from([(3, 2), (1, 2), (2, 3, 2), (0, 2), (3,), (3, 0), (2, 3)])
_y_shapes = st.sampled_from([(2, 2), (4, 2), (1, 2), (2, 1, 2), (2, 3), (2, 0)])
_scalars = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), *[st.sampled_from([0.5, 1.0, 2.0, 7.0])] * 3
)


_HAS_TORCH = importlib.util.find_spec("torch") is not None
_libs = st.sampled_from(["numpy", "torch"] if _HAS_TORCH else ["numpy"])


def _to_lib(lib, a):
    if lib == "torch":
        import torch

        return torch.from_numpy(a)
    return a


def _numpy(a):
    return a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else np.asarray(a)


def _reference_gaussian(X, Y, ls):
    D2 = np.sum((X[..., :, None, :] - Y[..., None, :, :]) ** 2, axis=-1)
    return np.exp(-D2 / (2 * ls**2))


@st.composite
def _pair_cases(draw):
    """Half consistent cases (matching shapes, finite entries -- some huge -- and a valid
    hyperparameter), half arbitrary ones (shapes, NaN, inf, any hyperparameter)."""
    if draw(st.booleans()):
        batch = draw(st.sampled_from([(), (2,)]))
        n, m, d = (draw(st.integers(1, 3)) for _ in range(3))
        finite = st.one_of(*[_moderate] * 6, st.floats(allow_nan=False, allow_infinity=False))
        X = draw(hnp.arrays(np.float64, (*batch, n, d), elements=finite))
        Y = draw(hnp.arrays(np.float64, (*batch, m, d), elements=finite))
        ls = draw(st.one_of(st.sampled_from([0.5, 1.0, 2.0, 7.0]), st.floats(1e-3, 1e3)))
        return X, Y, ls
    X = draw(hnp.arrays(np.float64, _x_shapes, elements=_floats))
    Y = draw(hnp.arrays(np.float64, _y_shapes, elements=_floats))
    return X, Y, draw(_scalars)


@settings(max_examples=200)
@given(case=_pair_cases(), name=st.sampled_from(sorted(PAIR_KERNELS)), lib=_libs)
def test_pair_kernels_finite_or_clear_error(case, name, lib):
    """A finite (and for moderate inputs correct) result, or ValueError/TypeError naming an
    argument -- never NaN and never an error from inside NumPy or torch."""
    X, Y, ls = case
    X, Y = _to_lib(lib, X), _to_lib(lib, Y)
    kw = {
        "gaussian_kernel": {"lengthscale": ls},
        "softmax_kernel": {"lengthscale": ls},
        "scaled_softmax_kernel": {"alpha": ls - 1.0},
        "log_scaled_softmax_kernel": {"alpha": -ls},
        "polynomial_kernel": {"gamma": ls},
    }[name]
    try:
        out = PAIR_KERNELS[name](X, Y, **kw)
    except (ValueError, TypeError) as exc:
        assert re.search(r"\b(X|Y|lengthscale|alpha|gamma|degree|coef0)\b", str(exc)), exc
        event(f"{type(exc).__name__}")
        return
    event("result")
    out, X, Y = _numpy(out), _numpy(X), _numpy(Y)
    assert out.shape == (*np.broadcast_shapes(X.shape[:-2], Y.shape[:-2]), X.shape[-2], Y.shape[-2])
    assert not np.any(np.isnan(out))
    if name != "log_scaled_softmax_kernel":
        assert np.all(np.isfinite(out))
    if name == "gaussian_kernel":
        assert np.all((out >= 0) & (out <= 1))
        if ls > 1e-100 and max(np.abs(X).max(), np.abs(Y).max()) < 1e3 * ls:
            np.testing.assert_allclose(out, _reference_gaussian(X, Y, ls), atol=1e-9)


@settings(max_examples=200)
@given(
    q=hnp.arrays(np.float64, (3, 2), elements=_floats),
    k=hnp.arrays(np.float64, st.sampled_from([(3, 2), (4, 2), (3, 3)]), elements=_floats),
    v=hnp.arrays(np.float64, st.sampled_from([(3, 2), (4, 1), (0, 2)]), elements=_floats),
    causal=st.booleans(),
    lib=_libs,
)
def test_attention_finite_convex_or_clear_error(q, k, v, causal, lib):
    """Exact attention is a convex combination of the rows of v (any finite size of q, k)
    or a ValueError/TypeError naming an argument."""
    try:
        out = _numpy(
            softmax_attention(_to_lib(lib, q), _to_lib(lib, k), _to_lib(lib, v), is_causal=causal)
        )
    except (ValueError, TypeError) as exc:
        assert re.search(r"\b(q|k|v|is_causal|scale)\b", str(exc)), exc
        event(f"{type(exc).__name__}")
        return
    event("result")
    assert np.all(np.isfinite(out))
    lo, hi = v.min(axis=0), v.max(axis=0)
    span = np.maximum(hi - lo, np.abs(hi)) * 1e-12
    assert np.all(out >= lo - span) and np.all(out <= hi + span)


# ----------------------------------------------------------------------------- overflow
@pytest.mark.parametrize("power", [0, 50, 100, 150, 155, 160, 200, 300, 307])
def test_scaling_inputs_up_keeps_documented_kernels_finite(power, backend):
    """Gaussian kernel and exact attention promise finite output for all finite input:
    scale the inputs up until the exact squared norms and logits overflow. The unbounded
    softmax kernel raises a ValueError about the overflow instead."""
    s = 10.0**power
    X, Y = _xy(10, n=4, m=3, d=3)
    Xs, Ys = backend.asarray(X * s), backend.asarray(Y * s)
    K = backend.to_numpy(gaussian_kernel(Xs, Ys, 1.0))
    assert np.all(np.isfinite(K)) and np.all((K >= 0) & (K <= 1))
    # scale invariance: lengthscale s on inputs times s is the unit problem
    np.testing.assert_allclose(
        backend.to_numpy(gaussian_kernel(Xs, Ys, s)), gaussian_kernel(X, Y, 1.0), rtol=1e-10
    )
    logk = backend.to_numpy(log_scaled_softmax_kernel(Xs, Ys))
    assert not np.any(np.isnan(logk))
    ref = log_scaled_softmax_kernel(X, Y)
    with np.errstate(over="ignore"):
        expected = ref * s * s
    finite = np.isfinite(expected)
    np.testing.assert_allclose(logk[finite], expected[finite], rtol=1e-10)
    assert np.all(np.sign(logk[~finite]) == np.sign(ref[~finite]))
    if power == 0:
        assert np.all(np.isfinite(backend.to_numpy(softmax_kernel(Xs, Ys))))
    else:
        with pytest.raises(ValueError, match=r"softmax_kernel overflows.*lengthscale"):
            softmax_kernel(Xs, Ys)
    q, k, v = _qkv(11, L=4, S=4, d=3, dv=2)
    for causal in (False, True):
        out = backend.to_numpy(
            softmax_attention(
                backend.asarray(q * s), backend.asarray(k * s), backend.asarray(v), is_causal=causal
            )
        )
        assert np.all(np.isfinite(out))
        assert np.all(out >= v.min(0) - 1e-12) and np.all(out <= v.max(0) + 1e-12)
        if power >= 155:  # logits far beyond exp's range: each row picks its maximum key
            logits = (q @ k.T) if not causal else np.where(np.tri(4, dtype=bool), q @ k.T, -np.inf)
            np.testing.assert_allclose(out, v[np.argmax(logits, axis=1)], rtol=1e-12)


def test_polynomial_kernel_overflow_is_reported():
    X, Y = _xy(12)
    with pytest.raises(ValueError, match=r"polynomial_kernel overflows.*X, Y"):
        polynomial_kernel(X * 1e200, Y * 1e200)
