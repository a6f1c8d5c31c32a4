"""Input validation of :mod:`kernelkit.optim`: every bad input gives a ``ValueError`` or
``TypeError`` that names the argument, and valid inputs never give NaN."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.special import logsumexp

from kernelkit.optim import (
    KroneckerCurvature,
    KroneckerPreconditioner,
    beta,
    bound_step,
    conjugate_gradient,
    logistic_objective,
    low_rank_partition_bound,
    lspfb_step,
    multinomial_gradient,
    multinomial_low_rank_bound,
    multinomial_objective,
    multinomial_partition_bound,
    partition_bound,
    sgd_step,
    spfb_step,
    step_size,
    woodbury_solve,
)


def _names(name):
    """Regex that matches the argument ``name`` as a word."""
    return rf"(?<![\w]){re.escape(name)}(?![\w])"


def _problem(seed=0, m=6, p=4, n=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(p, n)) * 0.3, rng.normal(size=(m, p)), rng.integers(0, n, size=m)


# functions of a multinomial batch (W, X, y, lam, **kw)
BATCH_FUNCS = {
    "multinomial_objective": lambda W, X, y, lam=0.1, **kw: multinomial_objective(
        W, X, y, lam, **kw
    ),
    "multinomial_gradient": lambda W, X, y, lam=0.1, **kw: multinomial_gradient(W, X, y, lam, **kw),
    "spfb_step": lambda W, X, y, lam=0.1, **kw: spfb_step(W, X, y, lam, 0.5, **kw),
    "bound_step": lambda W, X, y, lam=0.1, **kw: bound_step(W, X, y, lam, **kw),
    "sgd_step": lambda W, X, y, lam=0.1, **kw: sgd_step(W, X, y, lam, 0.5, **kw),
    "lspfb_step": lambda W, X, y, lam=0.1, **kw: lspfb_step(W, X, y, lam, 0.5, rank=2, **kw),
    "spfb_step_dense": lambda W, X, y, lam=0.1, **kw: spfb_step(
        W, X, y, lam, 0.5, linear_solver="dense", **kw
    ),
}
ETA_FUNCS = {
    "spfb_step": lambda W, X, y, eta: spfb_step(W, X, y, 0.1, eta),
    "sgd_step": lambda W, X, y, eta: sgd_step(W, X, y, 0.1, eta),
    "lspfb_step": lambda W, X, y, eta: lspfb_step(W, X, y, 0.1, eta, rank=2),
}


def _bad(a, case):
    """A bad version of the float array ``a`` and the exception it must raise."""
    a = np.array(a, dtype=np.float64)
    if case == "nan":
        a.flat[0] = np.nan
        return a, ValueError
    if case == "inf":
        a.flat[-1] = np.inf
        return a, ValueError
    if case == "empty":
        return a[:0], ValueError
    if case == "ndim":
        return a[None], ValueError
    if case == "complex":
        return a + 1j, ValueError
    if case == "object":
        return a.astype(object), TypeError
    if case == "bool":
        return a > 0, TypeError
    if case == "str":
        return np.full(a.shape, "x"), TypeError
    if case == "none":
        return None, TypeError
    raise AssertionError(case)


ARRAY_CASES = ["nan", "inf", "empty", "ndim", "complex", "object", "bool", "str", "none"]


# ----------------------------------------------------------------------------- batch functions
@pytest.mark.parametrize("func", BATCH_FUNCS)
@pytest.mark.parametrize("arg", ["W", "X"])
@pytest.mark.parametrize("case", ARRAY_CASES)
def test_batch_functions_reject_bad_arrays(func, arg, case):
    W, X, y = _problem()
    bad, exc = _bad(W if arg == "W" else X, case)
    args = (bad, X, y) if arg == "W" else (W, bad, y)
    if case == "empty" and arg == "X":
        args = (W, bad, y[:0])  # a 0-row batch: no ZeroDivisionError
    with pytest.raises(exc, match=_names(arg)), np.errstate(all="ignore"):
        BATCH_FUNCS[func](*args)


@pytest.mark.parametrize("func", BATCH_FUNCS)
@pytest.mark.parametrize(
    ("y", "exc", "match"),
    [
        (np.array([0, 1, 2, 7, 1, 0]), ValueError, r"y contains labels \[7\] outside 0\.\.2"),
        (np.array([0, 1, -1, 2, 1, 0]), ValueError, r"y contains labels \[-1\]"),
        (np.array([0.0, 1, 2, 0, 1, 2]), TypeError, r"y must hold integer"),
        (np.array([0.5, 1, 2, 0, 1, 2]), TypeError, r"y must hold integer"),
        (np.array([True, False] * 3), TypeError, r"y must hold integer"),
        (np.array([0, 1, 2, 0, 1]), ValueError, r"y has 5 labels but X has 6 rows"),
        (np.zeros((6, 1), dtype=int), ValueError, r"y must be 1-D"),
        (np.array(["a"] * 6), TypeError, _names("y")),
        (None, TypeError, _names("y")),
    ],
)
def test_batch_functions_reject_bad_labels(func, y, exc, match):
    W, X, _ = _problem(1)
    with pytest.raises(exc, match=match):
        BATCH_FUNCS[func](W, X, y)


@pytest.mark.parametrize("func", BATCH_FUNCS)
def test_batch_functions_reject_mismatched_shapes(func, backend):
    W, X, y = _problem(2)
    with pytest.raises(ValueError, match=r"X and W.*\(6, 3\).*\(4, 3\)"):
        BATCH_FUNCS[func](backend.asarray(W), backend.asarray(X[:, :3]), backend.asarray(y))


@pytest.mark.parametrize("func", BATCH_FUNCS)
@pytest.mark.parametrize("lam", [-1.0, math.nan, math.inf, True, "0.1", None])
def test_batch_functions_reject_bad_lam(func, lam):
    W, X, y = _problem(3)
    with pytest.raises((ValueError, TypeError), match=_names("lam")):
        BATCH_FUNCS[func](W, X, y, lam)


@pytest.mark.parametrize("func", BATCH_FUNCS)
@pytest.mark.parametrize("case", ["shape", "nan", "complex"])
def test_batch_functions_reject_bad_mask(func, case):
    W, X, y = _problem(4)
    mask = {"shape": np.ones(3), "nan": np.array([1, 1, np.nan, 0]), "complex": np.ones(4) + 0j}
    with pytest.raises(ValueError, match=_names("mask")):
        BATCH_FUNCS[func](W, X, y, mask=mask[case])


@pytest.mark.parametrize("func", ETA_FUNCS)
@pytest.mark.parametrize("eta", [0.0, -1.0, math.nan, math.inf, True, None])
def test_steps_reject_bad_eta(func, eta):
    W, X, y = _problem(5)
    with pytest.raises((ValueError, TypeError), match=_names("eta")):
        ETA_FUNCS[func](W, X, y, eta)


@pytest.mark.parametrize("func", ["multinomial_objective", "sgd_step", "spfb_step"])
def test_batch_functions_name_the_culprit_on_each_backend(func, backend):
    W, X, y = _problem(6)
    f = BATCH_FUNCS[func]
    Xn = X.copy()
    Xn[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"not finite: X contains NaN"):
        f(backend.asarray(W), backend.asarray(Xn), backend.asarray(y))
    Wn = W.copy()
    Wn[0, 0] = -np.inf
    with pytest.raises(ValueError, match=r"not finite: W contains NaN"):
        f(backend.asarray(Wn), backend.asarray(X), backend.asarray(y))
    with pytest.raises(ValueError, match=r"y contains labels \[3, 9\]"):
        f(backend.asarray(W), backend.asarray(X), backend.asarray(np.array([0, 3, 9, 1, 2, 3])))
    with pytest.raises(ValueError, match="empty batch"):
        f(backend.asarray(W), backend.asarray(X[:0]), backend.asarray(y[:0]))


def test_spfb_step_rejects_bad_warm_start():
    W, X, y = _problem(7)
    with pytest.raises(ValueError, match=r"x0 must have the shape of W"):
        spfb_step(W, X, y, 0.1, x0=np.zeros((3, 3)))
    with pytest.raises(ValueError, match=_names("x0")):
        spfb_step(W, X, y, 0.1, x0=np.full(W.shape, np.nan))


def test_labels_follow_the_library_of_the_data(torch):
    W, X, y = _problem(8)
    out = multinomial_gradient(torch.from_numpy(W), torch.from_numpy(X), y, 0.1)
    np.testing.assert_allclose(out.numpy(), multinomial_gradient(W, X, y, 0.1), rtol=1e-12)
    out = multinomial_gradient(W, X, torch.from_numpy(y), 0.1)  # and the other way round
    np.testing.assert_allclose(out, multinomial_gradient(W, X, y, 0.1), rtol=1e-12)


# ----------------------------------------------------------------------------- step_size
@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"eta0": 0.0}, "eta0"),
        ({"eta0": -1.0}, "eta0"),
        ({"eta0": math.nan}, "eta0"),
        ({"eta0": math.inf}, "eta0"),
        ({"eta0": True}, "eta0"),
        ({"t": 0}, "t"),
        ({"t": -3}, "t"),
        ({"t": 1.5}, "t"),
        ({"t": True}, "t"),
        ({"t0": 0.0}, "t0"),
        ({"t0": math.nan}, "t0"),
        ({"t0": "1"}, "t0"),
    ],
)
@pytest.mark.parametrize("schedule", ["inverse", "inverse_t0", "constant"])
def test_step_size_rejects_bad_arguments(kw, name, schedule):
    args = {"eta0": 1.0, "t": 1, "t0": 1.0, **kw}
    with pytest.raises((ValueError, TypeError), match=_names(name)):
        step_size(schedule, args["eta0"], args["t"], args["t0"])


# ----------------------------------------------------------------------------- CG
def _spd(seed=0, d=6):
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(d, d))
    return M @ M.T + np.eye(d), rng.normal(size=d)


@pytest.mark.parametrize("case", ["nan", "inf", "empty", "complex", "object", "bool", "none"])
def test_cg_rejects_bad_b(case):
    A, b = _spd()
    bad, exc = _bad(b, case)
    with pytest.raises(exc, match=_names("b")):
        conjugate_gradient(lambda v: A @ v, bad)


@pytest.mark.parametrize(
    ("kw", "exc", "name"),
    [
        ({"x0": np.zeros(5)}, ValueError, "x0"),
        ({"x0": np.full(6, np.nan)}, ValueError, "x0"),
        ({"rtol": -1.0}, ValueError, "rtol"),
        ({"rtol": math.nan}, ValueError, "rtol"),
        ({"rtol": True}, TypeError, "rtol"),
        ({"maxiter": -1}, ValueError, "maxiter"),
        ({"maxiter": 2.5}, TypeError, "maxiter"),
        ({"maxiter": None}, TypeError, "maxiter"),
        ({"Minv": np.ones(5)}, ValueError, "Minv"),
        ({"Minv": -np.ones(6)}, ValueError, "Minv"),
        ({"Minv": np.full(6, np.inf)}, ValueError, "Minv"),
        ({"Minv": "jacobi"}, TypeError, "Minv"),
        ({"Minv": lambda v: v * np.nan}, ValueError, "Minv"),
    ],
)
def test_cg_rejects_bad_options(kw, exc, name):
    A, b = _spd(1)
    with pytest.raises(exc, match=_names(name)), np.errstate(all="ignore"):
        conjugate_gradient(lambda v: A @ v, b, **kw)


def test_cg_rejects_bad_operators():
    A, b = _spd(2)
    with pytest.raises(TypeError, match="matvec must be callable"):
        conjugate_gradient(A, b)
    with pytest.raises(ValueError, match="matvec must return an array of the shape of b"):
        conjugate_gradient(lambda v: (A @ v)[:3], b)
    with pytest.raises(ValueError, match="matvec returned NaN"):
        conjugate_gradient(lambda v: A @ v * np.nan, b)


def test_cg_with_a_huge_b_rescales(backend):
    A, b = _spd(3)
    b = b * 1e300  # finite, but ||b||^2 overflows
    x, info = conjugate_gradient(lambda v: backend.asarray(A) @ v, backend.asarray(b), rtol=1e-12)
    np.testing.assert_allclose(backend.to_numpy(x), np.linalg.solve(A, b), rtol=1e-8)
    assert info["residual"] <= 1e-12


def test_cg_nan_b_on_each_backend(backend):
    _, b = _spd(4)
    b[2] = np.nan
    with pytest.raises(ValueError, match="b contains NaN"):
        conjugate_gradient(lambda v: v, backend.asarray(b))


# ----------------------------------------------------------------------------- Woodbury
def _woodbury(seed=0, k=2, d=5, c=2):
    rng = np.random.default_rng(seed)
    V = np.linalg.qr(rng.normal(size=(d, k)))[0].T
    return V, np.diag(rng.uniform(1, 2, k)), rng.uniform(0.5, 1, d), rng.normal(size=(d, c))


@pytest.mark.parametrize("arg", ["V", "S", "Dvec", "G"])
@pytest.mark.parametrize("case", ["nan", "inf", "ndim", "complex", "object", "bool", "none"])
def test_woodbury_rejects_bad_arrays(arg, case):
    args = dict(zip(["V", "S", "Dvec", "G"], _woodbury(), strict=True))
    args[arg], exc = _bad(args[arg], case)
    with pytest.raises(exc, match=_names(arg)):
        woodbury_solve(**args)


@pytest.mark.parametrize(
    ("arg", "value", "match"),
    [
        ("S", np.eye(3), r"S must have shape \(k, k\) = \(2, 2\)"),
        ("Dvec", np.ones(4), r"Dvec must have shape \(d,\) = \(5,\)"),
        ("G", np.ones((4, 2)), r"G must have shape .* d = 5"),
        ("Dvec", np.zeros(5), r"Dvec .* must be positive"),
        ("Dvec", -np.ones(5), r"Dvec .* must be positive"),
        ("S", -np.eye(2), "singular.*S must be positive semidefinite"),
    ],
)
def test_woodbury_rejects_mismatched_or_absurd(arg, value, match):
    args = dict(zip(["V", "S", "Dvec", "G"], _woodbury(1), strict=True))
    if arg == "S":  # V D^-1 V^T = I exactly, so I + S V D^-1 V^T = 0 for S = -I
        args["V"], args["Dvec"] = np.eye(5)[:2], np.ones(5)
    args[arg] = value
    with pytest.raises(ValueError, match=match):
        woodbury_solve(**args)


# ----------------------------------------------------------------------------- bounds
@pytest.mark.parametrize("func", ["partition_bound", "low_rank_partition_bound"])
@pytest.mark.parametrize("arg", ["theta", "F"])
@pytest.mark.parametrize("case", ["nan", "inf", "complex", "object", "bool", "none"])
def test_generic_bounds_reject_bad_arrays(func, arg, case):
    rng = np.random.default_rng(0)
    args = {"theta": rng.normal(size=3), "F": rng.normal(size=(2, 4, 3))}
    args[arg], exc = _bad(args[arg], case)
    f = partition_bound if func == "partition_bound" else low_rank_partition_bound
    extra = {} if func == "partition_bound" else {"rank": 2}
    with pytest.raises(exc, match=_names(arg)):
        f(args["theta"], args["F"], **extra)


def test_generic_bounds_reject_empty_and_mismatched():
    rng = np.random.default_rng(1)
    for f, extra in ((partition_bound, {}), (low_rank_partition_bound, {"rank": 1})):
        with pytest.raises(ValueError, match=r"F is empty"):
            f(np.zeros(3), np.zeros((0, 4, 3)), **extra)
        with pytest.raises(ValueError, match=r"theta must have shape \(d,\) = \(3,\)"):
            f(np.zeros(2), rng.normal(size=(2, 4, 3)), **extra)
        with pytest.raises(ValueError, match=r"F must have shape"):
            f(np.zeros(3), np.zeros(3), **extra)


@pytest.mark.parametrize("func", ["multinomial_partition_bound", "multinomial_low_rank_bound"])
@pytest.mark.parametrize("arg", ["W", "X"])
@pytest.mark.parametrize("case", ARRAY_CASES)
def test_multinomial_bounds_reject_bad_arrays(func, arg, case):
    W, X, _ = _problem(9)
    bad, exc = _bad(W if arg == "W" else X, case)
    args = (bad, X) if arg == "W" else (W, bad)
    f = multinomial_partition_bound if func == "multinomial_partition_bound" else None
    with pytest.raises(exc, match=_names(arg)), np.errstate(all="ignore"):
        if f is None:
            multinomial_low_rank_bound(*args, rank=2)
        else:
            f(*args)


@pytest.mark.parametrize(
    ("u", "exc"),
    [
        (np.array([0.0, np.nan]), ValueError),
        (np.array([1.0 + 1j]), ValueError),
        (np.array([True]), TypeError),
        (np.array(["a"]), TypeError),
        (None, TypeError),
        ("a", TypeError),
        (math.nan, ValueError),
    ],
)
def test_beta_rejects_bad_input(u, exc):
    with pytest.raises(exc, match=_names("u")):
        beta(u)


def test_beta_keeps_infinities_and_backends(backend):
    out = backend.to_numpy(beta(backend.asarray(np.array([-np.inf, 0.0, np.inf]))))
    np.testing.assert_array_equal(out, [0.0, 0.25, 0.0])
    assert float(beta(2)) == pytest.approx(math.tanh(1.0) / 4)


# ----------------------------------------------------------------------------- Kronecker
def _curvature_args(seed=0, m=5, p=3, n=4):
    W, X, _ = _problem(seed, m=m, p=p, n=n)
    return X, multinomial_partition_bound(W, X).C


@pytest.mark.parametrize("arg", ["X", "C"])
@pytest.mark.parametrize("case", ARRAY_CASES)
def test_kronecker_curvature_rejects_bad_arrays(arg, case):
    args = dict(zip(["X", "C"], _curvature_args(), strict=True))
    args[arg], exc = _bad(args[arg], case)
    with pytest.raises(exc, match=_names(arg)):
        KroneckerCurvature(args["X"], args["C"], lam=0.1)


@pytest.mark.parametrize(
    ("kw", "exc", "name"),
    [
        ({"lam": -1.0}, ValueError, "lam"),
        ({"lam": math.nan}, ValueError, "lam"),
        ({"lam": True}, TypeError, "lam"),
        ({"lam": np.ones((2, 2))}, ValueError, "lam"),
        ({"lam": -np.ones((3, 4))}, ValueError, "lam"),
        ({"scale": 0.0}, ValueError, "scale"),
        ({"scale": math.inf}, ValueError, "scale"),
        ({"scale": None}, TypeError, "scale"),
    ],
)
def test_kronecker_curvature_rejects_bad_parameters(kw, exc, name):
    X, C = _curvature_args(1)
    with pytest.raises(exc, match=_names(name)):
        KroneckerCurvature(X, C, **kw)


def test_kronecker_curvature_solve_rejects_bad_right_hand_sides():
    X, C = _curvature_args(2)
    A = KroneckerCurvature(X, C, lam=0.1)
    with pytest.raises(ValueError, match=r"G must have shape \(p, n\) = \(3, 4\)"):
        A.solve(np.ones((4, 3)))
    for method in ("cg", "dense"):
        with pytest.raises(ValueError, match=_names("G")):
            A.solve(np.full((3, 4), np.nan), method=method)
    with pytest.raises(ValueError, match="x0"):
        A.solve(np.ones((3, 4)), x0=np.ones((4, 3)))
    with pytest.raises(ValueError, match="positive definite"):
        KroneckerCurvature(X, C, lam=0.0).solve(np.ones((3, 4)), method="dense")


@pytest.mark.parametrize("case", ARRAY_CASES)
def test_kronecker_preconditioner_rejects_bad_reference(case):
    X, _ = _curvature_args(3)
    bad, exc = _bad(X, case)
    with pytest.raises(exc, match=_names("X_ref")):
        KroneckerPreconditioner(bad)


@pytest.mark.parametrize(("rank", "exc"), [(0, ValueError), (1.5, TypeError), (True, TypeError)])
def test_kronecker_preconditioner_rejects_bad_rank(rank, exc):
    X, _ = _curvature_args(4)
    with pytest.raises(exc, match=_names("rank")):
        KroneckerPreconditioner(X, rank=rank)


# ----------------------------------------------------------------------------- logistic_objective
@pytest.mark.parametrize(
    ("kw", "exc", "match"),
    [
        ({"coef": np.zeros((2, 4))}, ValueError, r"coef must have shape \(3, 4\)"),
        ({"coef": np.full((3, 4), np.nan)}, ValueError, _names("coef")),
        ({"intercept": np.zeros(2)}, ValueError, _names("intercept")),
        ({"intercept": np.nan}, ValueError, _names("intercept")),
        ({"X": np.full((6, 4), np.inf)}, ValueError, _names("X")),
        ({"X": np.zeros((6, 4)) + 0j}, ValueError, _names("X")),
        ({"X": np.zeros(6)}, ValueError, _names("X")),
        (
            {"y": np.array([0, 1, 2, 3, 1, 0]), "classes": np.arange(3)},
            ValueError,
            r"y contains labels \[3\]",
        ),
        ({"y": np.array([0, 1, 2])}, ValueError, _names("y")),
        ({"alpha": -1.0}, ValueError, _names("alpha")),
        ({"alpha": math.nan}, ValueError, _names("alpha")),
        ({"alpha": True}, TypeError, _names("alpha")),
        ({"classes": np.array([2, 1, 0])}, ValueError, _names("classes")),
    ],
)
def test_logistic_objective_rejects_bad_input(kw, exc, match):
    rng = np.random.default_rng(5)
    args = {
        "coef": rng.normal(size=(3, 4)),
        "intercept": np.zeros(3),
        "X": rng.normal(size=(6, 4)),
        "y": np.array([0, 1, 2, 0, 1, 2]),
        "alpha": 0.1,
        "classes": None,
    } | kw
    with pytest.raises(exc, match=match):
        logistic_objective(**args)


# ----------------------------------------------------------------------------- properties
_floats = st.one_of(
    *[st.floats(-3, 3)] * 12,
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([1e200, -1e300, np.nan, np.inf]),
)


@settings(max_examples=150)
@given(
    W=hnp.arrays(np.float64, st.sampled_from([(3, 2), (3, 3), (2, 3), (3, 0)]), elements=_floats),
    X=hnp.arrays(np.float64, st.sampled_from([(4, 3), (1, 3), (0, 3), (4, 2)]), elements=_floats),
    y=hnp.arrays(np.int64, st.sampled_from([(4,), (1,), (0,), (3,)]), elements=st.integers(-1, 3)),
    lam=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(0.1)),
    name=st.sampled_from(
        ["multinomial_objective", "multinomial_gradient", "sgd_step", "spfb_step"]
    ),
)
def test_batch_functions_finite_or_clear_error(W, X, y, lam, name):
    """A finite (and for the objective, correct) result or a ValueError/TypeError naming an
    argument -- never NaN, never an exception from inside NumPy/LAPACK."""
    try:
        with np.errstate(all="ignore"):  # overflowing logits are reported as such
            out = BATCH_FUNCS[name](W, X, y, lam)
    except (ValueError, TypeError) as exc:
        assert re.search(r"\b(W|X|y|lam|mask)\b", str(exc)), exc
        event(type(exc).__name__)
        return
    event("result")
    if name == "multinomial_objective":
        S = X @ W
        with np.errstate(over="ignore"):
            ridge = 0.5 * lam * np.sum(W * W) if lam else 0.0
        ref = np.mean(logsumexp(S, axis=1) - S[np.arange(len(y)), y]) + ridge
        assert not math.isnan(out)
        if math.isfinite(ref):
            assert out == pytest.approx(ref, rel=1e-10, abs=1e-12)
        return
    W_new = out[0] if isinstance(out, tuple) else out
    assert np.all(np.isfinite(W_new))


@settings(max_examples=100)
@given(
    b=hnp.arrays(np.float64, st.sampled_from([(5,), (0,), (5, 1)]), elements=_floats),
    rtol=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(1e-10)),
    maxiter=st.one_of(st.integers(-2, 50), st.just(100)),
)
def test_cg_finite_or_clear_error(b, rtol, maxiter):
    rng = np.random.default_rng(0)
    M = rng.normal(size=(5, 5))
    A = M @ M.T + np.eye(5)

    def matvec(v):
        return (A @ v.reshape(5, -1)).reshape(v.shape)

    try:
        x, info = conjugate_gradient(matvec, b, rtol=rtol, maxiter=maxiter)
    except (ValueError, TypeError) as exc:
        assert re.search(r"\b(b|rtol|maxiter|matvec)\b", str(exc)), exc
        event(type(exc).__name__)
        return
    event("result")
    assert np.all(np.isfinite(x)) and math.isfinite(info["residual"])
    if maxiter >= 50 and rtol <= 1e-10:
        np.testing.assert_allclose(
            x.reshape(-1), np.linalg.solve(A, b.reshape(-1)), rtol=1e-6, atol=1e-300
        )


# ----------------------------------------------------------------------------- bound methods
def test_bound_methods_check_their_arguments():
    W, X, _ = _problem(10, m=4, p=3, n=3)
    gb = partition_bound(np.zeros(9), np.ones((4, 3, 9)))
    with pytest.raises(ValueError, match=r"theta must have shape \(d,\) = \(9,\)"):
        gb.log_bound(np.zeros(9), np.zeros(8))
    with pytest.raises(ValueError, match=_names("theta_tilde")):
        gb.log_bound(np.full(9, np.nan), np.zeros(9))
    mb = multinomial_partition_bound(W, X)
    with pytest.raises(ValueError, match=r"X must have the m = 4 rows"):
        mb.mu(X[:2])
    with pytest.raises(ValueError, match=_names("X")):
        mb.sigma(X * np.nan)
    lb = multinomial_low_rank_bound(W, X, rank=2)
    with pytest.raises(ValueError, match=_names("lam")):
        lb.solve(np.ones(9), lam=-1.0)
    with pytest.raises(TypeError, match=_names("scale")):
        lb.solve(np.ones(9), lam=0.1, scale=None)
    with pytest.raises(ValueError, match=_names("G")):
        lb.solve(np.ones(8), lam=0.1)
    A = KroneckerCurvature(X, mb.C, lam=0.1)
    with pytest.raises(ValueError, match=r"V must have shape \(p, n\) = \(3, 3\) or \(9,\)"):
        A.matvec(np.ones((9, 1)))
    with pytest.raises(TypeError, match=_names("V")):
        A.matvec(np.ones((3, 3)) + 0j)
    with pytest.raises(TypeError, match="KroneckerCurvature"):
        KroneckerPreconditioner(X).for_operator(np.eye(9))


def test_ridge_term_never_overflows_into_nan():
    """Squares of huge finite weights overflow although the objective does not; lam = 0
    with such weights gives the data term, not NaN."""
    W = np.full((3, 2), 5.47e153)
    X = np.zeros((4, 3))
    y = np.zeros(4, dtype=int)
    got = multinomial_objective(W, X, y, 0.1)
    assert got == pytest.approx(np.log(2) + 0.05 * 6 * 5.47e153**2, rel=1e-12)
    assert multinomial_objective(W, X, y, 0.0) == pytest.approx(np.log(2))
    assert sgd_step(W, X, y, 0.0, 1.0)[1]["batch_loss"] == pytest.approx(np.log(2))
