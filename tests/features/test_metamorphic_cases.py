"""Metamorphic and property-based checks of every map of :mod:`kernelkit.features`.

Relations that must hold for *any* input (user guide, "The feature-map contract"), on
all twenty maps, with hypothesis-drawn data and hand-picked cases; what
``test_contract.py`` already checks on its fixed data (shapes, pickling, dtypes out,
NumPy against torch on one data set, Monte Carlo) is not repeated:

* ``approx_kernel`` is the real part of ``transform(X) conj(transform_y(Y))^T`` to
  rounding, and ``variance`` is finite and non-negative where the features are;
* the features are row-wise: row permutations, one row at a time, blocks, ``n_jobs``,
  memory layout (C, Fortran, strided, read-only) change nothing but rounding;
* data-dependent maps fit a function of the data *set* (row order does not matter), and
  ``fit(X)`` is ``fit(X, Y=X)``; the other maps ignore ``Y``;
* NumPy and torch float64 agree to rounding, float32 and float64 to float32 rounding;
* the lengthscale (and the polynomial kernel's gamma) is a scaling of the inputs (same
  seed);
* large norms give no NaN (NumPy float64 / float32, CPU tensors), and overflowing
  features of the positive maps a ``RuntimeWarning``; tiny norms the features of 0;
* ``random_state``: an int repeats its draw, a ``RandomState`` / ``Generator`` is a stream.

Tolerances. Every feature is a smooth function (exp, cos, or a product of ``p``
projections) of dot products of length ``d + 2`` (input, constant, row term), so a
rounding of relative size ``u`` in the input or in the accumulation moves a feature by at
most ``~ p (d + 2) u |w| |x|`` relative to the largest feature of its row. On the drawn
data (``d = 3``, entries in [-0.6, 0.6] so ``|x| <= 1.04``, Gaussian projections with
``|w| <= 6``, a chi_3 tail of ~1e-7, degree ``p = 2`` of the polynomial kernels) that is
``2 * 5 * 6 * 1.04 ~ 62`` units: ``ROW_ULPS = 64`` per row maximum (measured: at most 5).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from favor_helpers import PUBLIC_MAPS, SMALL_CONFIGS
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.base import clone

MAPS = PUBLIC_MAPS
IDS = [cls.__name__ for cls in MAPS]
DATA_DEPENDENT = [cls for cls in MAPS if cls.data_dependent]
EPS64 = float(np.finfo(np.float64).eps)
EPS32 = float(np.finfo(np.float32).eps)
#: units of rounding per row maximum (module docstring: p (d + 2) |w| |x| <= 2 * 5 * 6 * 1.04)
ROW_ULPS = 64.0
#: the few examples per map that keep each test under ~3 s on two shared cores
FEW = settings(max_examples=8, deadline=None)

D = 3  # input dimension of the drawn data


#: one k-means start: the fits of the clustered hybrid dominate the run time otherwise
FAST = {"ClusteredHybridRF": {"n_init": 1}}


def _small(cls, **kw):
    name = cls.__name__
    return cls(**{"n_features": 16, **SMALL_CONFIGS.get(name, {}), **FAST.get(name, {}), **kw})


def _fit(cls, X, Y=None, **kw):
    with warnings.catch_warnings():
        # k-means on few distinct drawn points may converge to fewer clusters
        warnings.filterwarnings("ignore", message="Number of distinct clusters")
        return _small(cls, **kw).fit(X, Y=Y)


def _to_np(A):
    return A.detach().numpy() if hasattr(A, "detach") else np.asarray(A)


def assert_rows_close(A, B, eps=EPS64, ulps=ROW_ULPS, err_msg=""):
    """``|A - B| <= ulps * eps * max_j |B_ij|`` row by row (module docstring)."""
    A, B = _to_np(A), _to_np(B)
    assert A.shape == B.shape, (A.shape, B.shape)
    scale = np.max(np.abs(B), axis=1, keepdims=True) if B.shape[1] else 0.0
    bound = ulps * eps * scale
    bad = np.abs(A - B) > bound
    assert not np.any(bad), f"{err_msg}: max excess {np.max(np.abs(A - B) - bound):.3g}"


def kernel_bound(P, S, eps=EPS64):
    """Bound on the difference of two estimates from features that each agree with
    ``P``, ``S`` to ``assert_rows_close``: a feature error ``ROW_ULPS eps max_k |P_ik|``
    reaches the estimate through ``sum_k |S_jk|`` (and symmetrically), plus the rounding
    of the sum itself, ``D eps sum_k |P_ik S_jk|``."""
    P, S = np.abs(_to_np(P)), np.abs(_to_np(S))
    rows = (
        ROW_ULPS
        * eps
        * (
            P.max(axis=1, initial=0)[:, None] * S.sum(axis=1)[None, :]
            + P.sum(axis=1)[:, None] * S.max(axis=1, initial=0)[None, :]
        )
    )
    return rows + P.shape[1] * eps * (P @ S.T)


# ---------------------------------------------------------------------- data
def _points(n_min=2, n_max=6, scale=0.6, smallest=0.0):
    """Rows with entries in [-scale, scale] and at least two distinct rows (k-means of
    the clustered hybrid needs two), so that |x| <= scale sqrt(D) ~ 1; nonzero entries
    at least ``smallest`` in magnitude (float32 comparisons: products of subnormal float32
    entries underflow, a range limit and no rounding)."""
    elements = st.floats(-scale, scale, allow_nan=False, width=64)
    if smallest:
        elements = elements.filter(lambda v: v == 0 or abs(v) >= smallest)
    return (
        st.integers(n_min, n_max)
        .flatmap(lambda n: arrays(np.float64, (n, D), elements=elements))
        .filter(lambda A: np.unique(A, axis=0).shape[0] >= 2)
    )


# ---------------------------------------------------------------------- estimate vs features
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
@FEW
@given(X=_points(), Y=_points())
def test_approx_kernel_is_the_real_feature_gram(cls, X, Y):
    fm = _fit(cls, X, Y, random_state=0)
    P, S = fm.transform(X), fm.transform_y(Y)
    K = fm.approx_kernel(X, Y)
    ref = np.real(P @ np.conj(S).T)
    # A sum of D products has rounding error <= D eps sum_k |p_k s_k| (Higham's gamma_D);
    # the features carry row scales exp(s) rounded once each (relative 2 eps |s| with
    # |s| <= ROW_ULPS / 2 on these data), approx_kernel combines the scales in log space
    bound = (P.shape[1] + ROW_ULPS) * EPS64 * (np.abs(P) @ np.abs(S).T)
    assert np.all(np.abs(K - ref) <= bound + 1e-300), np.max(np.abs(K - ref) - bound)
    V = fm.variance(X, Y)
    assert np.all(np.isfinite(V)) and np.all(V >= 0)
    assert np.all(fm.complex_variance(X, Y) >= V * (1 - 8 * EPS64))


# ---------------------------------------------------------------------- row-wise map
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
@FEW
@given(X=_points(3, 7), data=st.data())
def test_features_are_row_wise(cls, X, data):
    fm = _fit(cls, X, random_state=1)
    P = fm.transform(X)
    perm = np.asarray(data.draw(st.permutations(range(len(X)))))
    assert_rows_close(fm.transform(X[perm]), P[perm], err_msg="permuted rows")
    one = np.concatenate([fm.transform(X[i : i + 1]) for i in range(len(X))])
    assert_rows_close(one, P, err_msg="one row at a time")
    cut = data.draw(st.integers(1, len(X) - 1))
    blocks = np.concatenate([fm.transform(X[:cut]), fm.transform(X[cut:])])
    assert_rows_close(blocks, P, err_msg="two blocks")
    if not fm.symmetric:
        Q = fm.transform_y(X)
        assert_rows_close(fm.transform_y(X[perm]), Q[perm], err_msg="transform_y permuted")


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_memory_layout_does_not_change_the_features(cls):
    rng = np.random.default_rng(4)
    X = 0.4 * rng.standard_normal((9, D))
    fm = _fit(cls, X, random_state=2)
    P = fm.transform(X)
    wide = np.zeros((2 * len(X), 3 * D))
    wide[::2, ::3] = X
    strided = wide[::2, ::3]  # non-contiguous in both axes
    assert not strided.flags.c_contiguous and not strided.flags.f_contiguous
    frozen = X.copy()
    frozen.flags.writeable = False
    for name, Z in (
        ("fortran", np.asfortranarray(X)),
        ("strided", strided),
        ("read-only", frozen),
    ):
        assert_rows_close(fm.transform(Z), P, err_msg=name)
        assert_rows_close(fm.transform_y(Z), fm.transform_y(X), err_msg=name + " (y side)")
        # and fitted on it: the same draw, the same features
        assert_rows_close(_fit(cls, Z, random_state=2).transform(X), P, err_msg="fit " + name)
    # torch: a strided view and a transposed (column-major) one
    torch = pytest.importorskip("torch")
    for name, T in (
        ("torch strided", torch.from_numpy(wide)[::2, ::3]),
        ("torch column-major", torch.from_numpy(np.ascontiguousarray(X.T)).T),
    ):
        assert not T.is_contiguous()
        assert_rows_close(fm.transform(T), P, err_msg=name)


@pytest.mark.parametrize("cls", [c for c in MAPS if "n_jobs" in c().get_params()], ids=str)
def test_n_jobs_does_not_change_draw_or_features(cls):
    # enough rows for several row blocks of the threaded paths (64 rows and up)
    rng = np.random.default_rng(5)
    X = 0.4 * rng.standard_normal((700, D))
    ref = _fit(cls, X[:50], random_state=3, n_jobs=1)
    P = ref.transform(X)
    for n_jobs in (-1, 2, None):
        fm = _fit(cls, X[:50], random_state=3, n_jobs=n_jobs)
        assert_rows_close(fm.transform(X), P, err_msg=f"n_jobs={n_jobs}")
        assert_rows_close(fm.transform_y(X), ref.transform_y(X), err_msg=f"n_jobs={n_jobs}")
        # n_jobs changed after fit does not change a fitted map either (contract)
        ref.set_params(n_jobs=n_jobs)
        assert_rows_close(ref.transform(X), P, err_msg=f"set_params(n_jobs={n_jobs})")


# ---------------------------------------------------------------------- fitting
@pytest.mark.parametrize("cls", DATA_DEPENDENT, ids=lambda c: c.__name__)
@FEW
@given(X=_points(3, 8), Y=_points(3, 8), data=st.data())
def test_data_dependent_fit_ignores_row_order(cls, X, Y, data):
    p = np.asarray(data.draw(st.permutations(range(len(X)))))
    q = np.asarray(data.draw(st.permutations(range(len(Y)))))
    a = _fit(cls, X, Y, random_state=4)
    b = _fit(cls, X[p], Y[q], random_state=4)
    # the fitted parameters come from moment sums over the rows (softmax family, the
    # radius) or from k-means on the sorted rows: reordering a sum of n <= 8 terms moves
    # it by ~ n u relative, and the fitted eigen- and singular vectors (ADERF, SDERF) by
    # that over the relative gap of their values. With gaps down to 1e-3 of the largest
    # value: 8 * 64 / 1e-3 ~ 2^19 units; hypothesis' targeted search over these data
    # found at most 2.4e-12 relative (ADERF), ~ 2^14 units
    ulps = 2.0**20
    assert_rows_close(b.transform(X), a.transform(X), ulps=ulps, err_msg="x side")
    assert_rows_close(b.transform_y(Y), a.transform_y(Y), ulps=ulps, err_msg="y side")


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
@FEW
@given(X=_points(), Y=_points())
def test_fit_without_Y_is_fit_on_X_X(cls, X, Y):
    """Contract, "Fitting": data-dependent maps fit ``(X, Y)``, or ``(X, X)`` without
    ``Y``; the others read only its dimension, so any ``Y`` gives the map of ``fit(X)``."""
    a = _fit(cls, X, random_state=5)
    b = _fit(cls, X, X, random_state=5)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    np.testing.assert_array_equal(a.transform_y(X), b.transform_y(X))
    if not cls.data_dependent:
        c = _fit(cls, X, Y, random_state=5)
        np.testing.assert_array_equal(c.transform(Y), a.transform(Y))
        np.testing.assert_array_equal(c.transform_y(Y), a.transform_y(Y))


# ---------------------------------------------------------------------- backends, dtypes
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
@FEW
@given(X=_points(), Y=_points())
def test_numpy_and_torch_float64_agree(cls, X, Y):
    torch = pytest.importorskip("torch")
    fm = _fit(cls, X, Y, random_state=6)
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    assert_rows_close(fm.transform(Xt), fm.transform(X), err_msg="transform")
    assert_rows_close(fm.transform_y(Yt), fm.transform_y(Y), err_msg="transform_y")
    # two estimates from features that agree row by row (FFT sketches spread rounding
    # over the whole row, so the bound is per row, not per product)
    bound = kernel_bound(fm.transform(X), fm.transform_y(Y))
    K = fm.approx_kernel(X, Y)
    assert np.all(np.abs(_to_np(fm.approx_kernel(Xt, Yt)) - K) <= bound + 1e-300)


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
@FEW
@given(X=_points(smallest=2.0**-20), Y=_points(smallest=2.0**-20))
def test_float32_agrees_with_float64_to_float32_rounding(cls, X, Y):
    fm = _fit(cls, X, Y, random_state=7)
    X32, Y32 = X.astype(np.float32), Y.astype(np.float32)
    P32 = fm.transform(X32)
    assert P32.dtype in (np.float32, np.complex64)
    # the float32 path sees X rounded to float32 and accumulates in float32: the
    # module docstring's bound with u = float32 eps (the float64 map of the rounded X is
    # the reference, so only the float32 arithmetic is measured)
    X64r, Y64r = X32.astype(np.float64), Y32.astype(np.float64)
    assert_rows_close(P32, fm.transform(X64r), eps=EPS32, err_msg="transform")
    assert_rows_close(fm.transform_y(Y32), fm.transform_y(Y64r), eps=EPS32, err_msg="y side")
    bound = kernel_bound(fm.transform(X64r), fm.transform_y(Y64r), eps=EPS32)
    K32 = fm.approx_kernel(X32, Y32)
    assert K32.dtype == np.float32
    # + the float32 underflow threshold: an estimate of 0 may come out as a subnormal
    tiny = float(np.finfo(np.float32).tiny)
    assert np.all(np.abs(K32 - fm.approx_kernel(X64r, Y64r)) <= bound + tiny)


# ---------------------------------------------------------------------- lengthscale
def _lengthscale_configs():
    out = []
    for cls in MAPS:
        params = cls().get_params()
        if "lengthscale" not in params:
            continue
        # the polynomial kernel of the Maclaurin maps has no lengthscale (gamma instead)
        kernels = ("softmax", "gaussian") if "kernel" in params else (None,)
        out += [pytest.param(cls, k, id=f"{cls.__name__}-{k}") for k in kernels]
    return out


@pytest.mark.parametrize(("cls", "kernel"), _lengthscale_configs())
@FEW
@given(X=_points(), Y=_points(), log2_l=st.floats(-2.0, 2.0))
def test_lengthscale_is_a_scaling_of_the_inputs(cls, kernel, X, Y, log2_l):
    length = 2.0**log2_l
    kw = {} if kernel is None else {"kernel": kernel}
    a = _fit(cls, X, Y, random_state=8, lengthscale=length, **kw)
    Xs, Ys = X / length, Y / length
    b = _fit(cls, Xs, Ys, random_state=8, lengthscale=1.0, **kw)
    # X / l is rounded once more (relative eps per entry). The Maclaurin maps scale it
    # again by sqrt(1 / l^2) inside, and their exponential kernels reach p = 10 with
    # |x / l| <= 4.2: the module docstring's bound times 10 / 2 * 4, rounded up to 32
    ulps = 32 * ROW_ULPS
    assert_rows_close(a.transform(X), b.transform(Xs), ulps=ulps, err_msg="transform")
    assert_rows_close(a.transform_y(Y), b.transform_y(Ys), ulps=ulps, err_msg="transform_y")
    for method in ("exact_kernel", "approx_kernel", "variance"):
        assert_rows_close(
            getattr(a, method)(X, Y), getattr(b, method)(Xs, Ys), ulps=2 * ulps, err_msg=method
        )


POLYNOMIAL = [c for c in MAPS if "gamma" in c().get_params() and "coef0" in c().get_params()]


@pytest.mark.parametrize("cls", POLYNOMIAL, ids=lambda c: c.__name__)
@FEW
@given(
    X=_points(),
    Y=_points(),
    log2_gamma=st.floats(-2.0, 2.0),
    coef0=st.sampled_from([0.0, 1.0]),
)
def test_gamma_is_a_scaling_of_the_inputs(cls, X, Y, log2_gamma, coef0):
    """``(gamma x.y + coef0)^p`` is the kernel with ``gamma = 1`` on ``sqrt(gamma) x``:
    the sketches and Maclaurin maps draw the same parameters for both (same seed)."""
    gamma = 2.0**log2_gamma
    a = _fit(cls, X, random_state=9, gamma=gamma, coef0=coef0)
    r = np.sqrt(gamma)
    b = _fit(cls, r * X, random_state=9, gamma=1.0, coef0=coef0)
    # r X is rounded once (relative eps per entry); |r x| <= 2.1 doubles the row bound
    ulps = 2 * ROW_ULPS
    assert_rows_close(a.transform(X), b.transform(r * X), ulps=ulps, err_msg="transform")
    for method in ("approx_kernel", "exact_kernel", "variance"):
        assert_rows_close(getattr(a, method)(X, Y), getattr(b, method)(r * X, r * Y), ulps=2 * ulps)


# ---------------------------------------------------------------------- large norms
def _kernels(cls):
    return ("softmax", "gaussian") if "kernel" in cls().get_params() else (None,)


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
@pytest.mark.parametrize("radius", [30.0, 100.0, 1000.0])
def test_large_norms_no_nan_and_overflow_warns(cls, radius):
    """|x| = |y| = radius, y = +-x: the softmax kernel overflows (exp(radius^2)) or
    underflows (exp(-radius^2)); the Gaussian one is 1 or 0, but the features of most maps
    carry exp(+-|x|^2 / 2). Contract, "Large and small norms": no NaN anywhere; features
    of the positive maps that overflow to inf come with a RuntimeWarning; or fit raises a
    clear ValueError."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    U = rng.standard_normal((3, D))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    X, Y = radius * U, radius * np.concatenate([U, -U])
    for kernel in _kernels(cls):
        kw = {} if kernel is None else {"kernel": kernel}
        try:
            fm = _fit(cls, X, Y, random_state=0, **kw)
        except ValueError as err:
            assert "overflow" in str(err), err
            continue
        # NumPy float64 and float32, and CPU tensors (whose check the contract promises)
        for method, arg in (("transform", X), ("transform_y", Y)):
            for label, Z in (
                ("float64", arg),
                ("float32", arg.astype(np.float32)),
                ("torch", torch.from_numpy(arg)),
            ):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    F = _to_np(getattr(fm, method)(Z))
                assert not np.any(np.isnan(F)), (kernel, method, label)
                if fm.positive and not np.all(np.isfinite(F)):
                    warned = any(issubclass(w.category, RuntimeWarning) for w in caught)
                    assert warned, (kernel, method, label)
        for method in ("approx_kernel", "variance", "log_relative_variance"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                out = _to_np(getattr(fm, method)(X, Y))
            assert not np.any(np.isnan(out)), (kernel, method)


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_tiny_norms_are_the_limit_at_zero(cls):
    """|x| = 1e-200: every output is finite, without a RuntimeWarning, and the features
    are those of x = 0 to rounding (they are continuous in x and move by ~ |w| |x|, far
    below one unit of rounding), but for the maps with a scale-free part, discontinuous
    at 0: SphericalRandomFeatures normalises the rows (x / |x|,
    ``test_spherical_normalisation_is_scale_free``) and AngularHybridRF's coefficient
    features are ``sign(T x)`` (the angle between x and y)."""
    rng = np.random.default_rng(10)
    U = rng.standard_normal((3, D))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    X = 1e-200 * U
    for kernel in _kernels(cls):
        kw = {} if kernel is None else {"kernel": kernel}
        try:
            fm = _fit(cls, X, random_state=0, **kw)
        except ValueError as err:  # a parameter that cannot resolve such scales, said so
            assert "too small" in str(err), err
            fm = _fit(cls, U, random_state=0, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for out in (fm.transform(X), fm.approx_kernel(X), fm.variance(X)):
                assert np.all(np.isfinite(_to_np(out)))
        if cls.__name__ not in ("SphericalRandomFeatures", "AngularHybridRF"):
            zero = np.zeros_like(X)
            assert_rows_close(fm.transform(X), fm.transform(zero), err_msg=str(kernel))
            assert_rows_close(fm.transform_y(X), fm.transform_y(zero), err_msg=str(kernel))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_spherical_normalisation_is_scale_free(dtype):
    """``normalize=True`` divides each row by its norm, so ``transform(s X)`` is
    ``transform(X)`` for every ``s > 0`` whose ``s X`` is representable, also where
    ``|s x|^2`` under- or overflows the dtype (it did not: such rows became zero rows)."""
    from kernelkit.features import SphericalRandomFeatures

    rng = np.random.default_rng(14)
    U = rng.standard_normal((4, D))
    fm = SphericalRandomFeatures(16, random_state=0).fit(U)
    P = fm.transform(U.astype(dtype))
    info = np.finfo(dtype)
    # the squared norm leaves the range below sqrt(tiny) and above sqrt(max)
    for s in (info.tiny**0.5 / 1e3, info.tiny * 1e3, info.max**0.5 * 1e3, info.max / 1e3):
        Z = (s * U).astype(dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            out = fm.transform(Z)
        # s X is rounded once to the dtype (and s * U scaled back exactly by the norm)
        assert_rows_close(out, P, eps=float(info.eps), err_msg=f"scale {s:.3g}")


# ---------------------------------------------------------------------- random_state
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_random_state_int_repeats_and_streams_advance(cls):
    rng = np.random.default_rng(11)
    X = 0.4 * rng.standard_normal((8, D))
    fm = _fit(cls, X, random_state=12)
    P = fm.transform(X)
    np.testing.assert_array_equal(fm.fit(X).transform(X), P)  # refit: the same draw
    np.testing.assert_array_equal(_fit(cls, X, random_state=12).transform(X), P)
    for make in (np.random.RandomState, np.random.default_rng):
        stream = make(13)
        fm = _small(cls, random_state=stream)
        est = clone(fm)  # clone copies the state: it replays the same first draw
        a = fm.fit(X).transform(X)
        b = fm.fit(X).transform(X)  # the stream has advanced: another draw
        assert not np.allclose(a, b), make.__name__
        np.testing.assert_array_equal(est.fit(X).transform(X), a)
        # the object passed is the one consumed (as scikit-learn's estimators do)
        c = _small(cls, random_state=stream).fit(X).transform(X)
        assert not np.allclose(c, a) and not np.allclose(c, b), make.__name__
        fresh = make(13)
        np.testing.assert_array_equal(_small(cls, random_state=fresh).fit(X).transform(X), a)


def test_twenty_maps_covered():
    assert len(MAPS) == 20 and len(DATA_DEPENDENT) == 6
