"""Bad input through the public API, as a careless user passes it.

A fuzz pass over ``kernelkit``'s public classes and functions (NaN, inf, empty, wrong
rank, complex, strings, small integer and half dtypes, views, lists, DataFrames, torch /
NumPy swaps; 0, negative, float, ``np.int64``, bool, huge and NaN parameters) found the
cases below, which ended in an exception from inside Python, NumPy, torch or Dask, or in a
silent NaN. Each must now end in a ``ValueError`` / ``TypeError`` that names the argument,
or in a finite result.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from kernelkit.distributions import ConditionalMeanEmbedding, JointDistribution
from kernelkit.estimators import NadarayaWatsonClassifier, RandomFeatures
from kernelkit.features import (
    SDERF,
    NormalizedGaussianHybridRF,
    SphericalRandomFeatures,
    a_star,
    optimal_diagonal_A,
)
from kernelkit.optim import BoundLogisticRegression, conjugate_gradient


def _data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = 0.5 * rng.standard_normal((n, d))
    return X, (X[:, 0] + 0.3 * rng.standard_normal(n) > 0).astype(int)


def _finite(a) -> bool:
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    return bool(np.all(np.isfinite(a)))


# ------------------------------------------------------------ integer-like parameters
@pytest.mark.parametrize("chunked", [False, True], ids=["numpy", "dask"])
def test_numpy_int_max_epochs_words_the_convergence_warning(chunked):
    """``max_epochs=np.int64(2)`` passes the constraints; the ConvergenceWarning of a run
    cut short formatted ``'s' * (epochs != 1)`` with a NumPy bool: TypeError."""
    X, y = _data()
    solver = "spfb"
    if chunked:  # Dask input: the full-batch bound, summed over the row chunks
        da = pytest.importorskip("dask.array")
        X, solver = da.from_array(X, chunks=(20, -1)), "bound"
    clf = BoundLogisticRegression(solver=solver, max_epochs=np.int64(2), tol=1e-12, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf.fit(X, y)
    messages = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert any("did not converge in 2 epochs" in m for m in messages), messages


def test_huge_cg_maxiter_is_rejected_by_name_not_reported_as_divergence():
    """cg_maxiter=1e12 passed the constraints, and the solver's own bound then surfaced as
    'spfb diverged ...: maxiter must be <= ...' (a FloatingPointError)."""
    X, y = _data()
    with pytest.raises(ValueError, match="'cg_maxiter' parameter"):
        BoundLogisticRegression(cg_maxiter=10**12, random_state=0).fit(X, y)


@pytest.mark.parametrize(
    ("cls", "param"),
    [
        (JointDistribution, "lengthscale_x"),
        (JointDistribution, "lengthscale_y"),
        (ConditionalMeanEmbedding, "lengthscale_x"),
        (ConditionalMeanEmbedding, "lengthscale_y"),
        (SDERF, "n_features"),
        (SDERF, "lengthscale"),
    ],
)
def test_booleans_are_rejected_by_the_shared_constraints(cls, param):
    """``True`` is an ``Integral`` to Python: the shared intervals took it as 1, and the
    later check of JointDistribution / ConditionalMeanEmbedding said 'lengthscale must be a
    positive float' without the parameter's name."""
    X, _ = _data()
    est = cls(**{param: True})  # np.True_ is no number to Python: rejected already
    with pytest.raises((TypeError, ValueError), match=f"'{param}' parameter"):
        est.fit(X, X[:, :1]) if cls is not SDERF else est.fit(X)


# ------------------------------------------------------- floats beyond float64's range
@pytest.mark.parametrize("lengthscale", [1e-200, 1e300])
def test_sketch_gamma_out_of_range_names_lengthscale(lengthscale):
    """``gamma = 1 / lengthscale^2`` in Python floats: ZeroDivisionError (1e300) or
    OverflowError (1e-200) before any map was built, whatever the method."""
    X, _ = _data()
    est = RandomFeatures(
        kernel="polynomial", method="tensor_sketch", lengthscale=lengthscale, n_components=8
    )
    with pytest.raises(ValueError, match=r"lengthscale=.*out of range.*tensor_sketch"):
        est.fit(X)


@pytest.mark.parametrize("sigma", [1e-300, 1e300])
def test_nadaraya_watson_extreme_sigma_gives_no_arithmetic_error(sigma):
    """NadarayaWatsonClassifier's Gaussian maps need no gamma, but it was computed for
    every method: sigma=1e300 gave ZeroDivisionError, sigma=1e-300 OverflowError."""
    X, y = _data()
    clf = NadarayaWatsonClassifier(sigma=sigma, n_components=8, random_state=0)
    try:
        proba = clf.fit(X, y).predict_proba(X)
    except ValueError as exc:  # the maps' own overflow check (sigma X overflows)
        assert "overflow" in str(exc)
    else:
        assert _finite(proba)


def test_normalized_gaussian_hybrid_rejects_a_sigma_whose_square_overflows():
    """``sigma**2`` of a Python float raises OverflowError from about 1.3e154."""
    X, _ = _data()
    with pytest.raises(ValueError, match="sigma must be <="):
        NormalizedGaussianHybridRF(n_features=8, n_lambda=2, sigma=1e300).fit(X)
    fm = NormalizedGaussianHybridRF(n_features=8, n_lambda=2, sigma=1e150, random_state=0)
    fm.fit(X)  # the largest accepted: every product stays finite
    assert _finite(fm.transform(X)) and _finite(fm.variance(X[:5]))


def test_spherical_features_with_huge_a_fit_the_constant_limit():
    """``a**2`` raised OverflowError for a=1e300; the kernel ``(1 - tau^2 / a^2)^p`` is
    then 1 (to float64), which the fit reproduces."""
    X, _ = _data()
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    fm = SphericalRandomFeatures(n_features=8, a=1e300, random_state=0).fit(X)
    assert _finite(fm.transform(X))
    # exact_kernel squared a as a Python float too (OverflowError); tau^2 / a^2 <= 4e-600
    # rounds to 0, so the kernel is exactly 1
    np.testing.assert_array_equal(fm.exact_kernel(X[:5]), np.ones((5, 5)))


def test_tiny_alpha_names_alpha_instead_of_dividing_by_zero():
    """alpha=1e-100: the Kronecker preconditioner's inverse (~1 / alpha) made CG's
    ``r . Minv(r)`` round to 0, and the next step divided by it (ZeroDivisionError)."""
    X, y = _data()
    with pytest.raises(ValueError, match="increase alpha"):
        BoundLogisticRegression(alpha=1e-100, random_state=0).fit(X, y)


@pytest.mark.parametrize(
    "Minv",
    [lambda v: 0.0 * v, lambda v: np.array([1.0, -1.0, 0.0]) * v],
    ids=["zero", "indefinite"],
)
def test_conjugate_gradient_with_a_degenerate_preconditioner_names_minv(Minv):
    with pytest.raises(ValueError, match="Minv is not positive definite"):
        conjugate_gradient(lambda v: 2.0 * v, np.ones(3), Minv=Minv)


# ----------------------------------------------------------------- public functions
@pytest.mark.parametrize(
    ("phi", "error", "match"),
    [
        (np.nan, ValueError, "phi contains NaN"),
        (np.inf, ValueError, "phi contains NaN"),
        ([0.5, np.nan], ValueError, "phi contains NaN"),
        ("x", TypeError, "phi must be"),
        (True, TypeError, "phi must be"),
        (np.array([1 + 1j]), TypeError, "phi must be"),
        ([1.0, "a"], TypeError, "phi must be"),
    ],
)
def test_a_star_rejects_what_has_no_minimiser(phi, error, match):
    """NaN / inf gave a silent NaN, strings an error from array_api_compat."""
    with pytest.raises(error, match=match):
        a_star(phi)


def test_a_star_torch_nan_is_named():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="phi contains NaN"):
        a_star(torch.tensor([0.5, float("nan")]))


def test_a_star_valid_input_unchanged():
    # Lemma A.1's closed form; the cancellation-free form used agrees to a few ulp of
    # |A| <= phi / 4 (phi <= 2 here): 1e-14 relative
    phi = np.array([0.0, 0.1, 0.5, 2.0])
    ref = (1 - 2 * phi - np.sqrt((2 * phi + 1) ** 2 + 8 * phi)) / 16
    np.testing.assert_allclose(a_star(phi), ref, rtol=1e-14, atol=1e-17)
    assert isinstance(a_star(0.5), float)


@pytest.mark.parametrize(
    "bad",
    ["abc", ["a", "b", "c"], np.ones(3) + 1j, [[1], [1, 2]]],
    ids=["str", "list-of-str", "complex", "ragged"],
)
@pytest.mark.parametrize("name", ["x_center", "y_center"])
def test_optimal_diagonal_a_names_a_non_numeric_centre(bad, name):
    """Strings gave NumPy's bare 'could not convert string to float'; complex centres lost
    their imaginary part with a ComplexWarning."""
    kw = {"x_center": np.ones(3), "y_center": np.full(3, 0.5)}
    kw[name] = bad
    with pytest.raises(TypeError, match=f"{name} must hold real numbers"):
        optimal_diagonal_A(**kw)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("x", 4), TypeError, "n_features must be an integer"),
        ((10**12, 4), ValueError, "n_features must be <="),
        ((-5, 4), ValueError, "n_features must be >= 1"),
        ((16, 0), ValueError, "d must be >= 1"),
        ((64, 4, 0), ValueError, "n_lambda must be >= 1"),
    ],
)
def test_hybrid_base_size_validates_its_sizes(args, error, match):
    """A string gave Python's '//' TypeError; 0, negative and huge sizes returned 1."""
    pytest.importorskip("torch")
    from kernelkit.attention import hybrid_base_size

    with pytest.raises(error, match=match):
        hybrid_base_size(*args)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"batch_shape": (-1,)}, "batch_shape must hold non-negative ints"),
        # more bytes than any address space: fails before touching memory
        ({"batch_shape": (2**40, 2**40)}, "cannot be allocated"),
    ],
)
def test_init_decoding_state_names_a_bad_batch_shape(kw, match):
    """torch.zeros' own RuntimeErrors ('Dimension size must be non-negative', the
    allocator's) named no argument."""
    pytest.importorskip("torch")
    from kernelkit.attention import init_decoding_state

    with pytest.raises(ValueError, match=match):
        init_decoding_state(d=4, n_features=16, random_state=0, **kw)


@pytest.mark.parametrize(
    ("X", "error", "match"),
    [
        (np.zeros((10, 0)), ValueError, "X has 0 columns"),
        (np.full((10, 3), "a", dtype=object), TypeError, "X must hold real numbers"),
        ([[1.0, 2.0, 3.0], [1.0]], TypeError, "X could not be converted"),
    ],
    ids=["no-columns", "object", "ragged"],
)
def test_chunked_bound_step_checks_numpy_x_before_dask_sees_it(X, error, match):
    """Dask's 'auto' chunks divided by the row's 0 bytes (ZeroDivisionError) and refused
    to size object rows (NotImplementedError)."""
    pytest.importorskip("dask.array")
    from kernelkit.optim import chunked_bound_step

    y = np.arange(10) % 3
    with pytest.raises(error, match=match):
        chunked_bound_step(np.zeros((3, 3)), X, y, 0.1)


# ---------------------------------------------------------------- FavorAttention
@pytest.mark.parametrize("dtype_name", ["int64", "bool", "complex64", "float16", "float64"])
def test_favor_attention_names_an_input_dtype_its_projections_cannot_take(dtype_name):
    """F.linear's 'mat1 and mat2 must have the same dtype' named no argument."""
    torch = pytest.importorskip("torch")
    from kernelkit.attention import FavorAttention

    m = FavorAttention(8, 2, n_features=16, random_state=0)  # float32 parameters
    x = torch.randn(2, 5, 8)
    x = x > 0 if dtype_name == "bool" else x.to(getattr(torch, dtype_name))
    with pytest.raises(TypeError, match=r"query.*(floating point|module's parameters)"):
        m(x, x, x)


def test_favor_attention_under_autocast_still_takes_another_float_dtype():
    torch = pytest.importorskip("torch")
    from kernelkit.attention import FavorAttention

    m = FavorAttention(8, 2, n_features=16, random_state=0).eval()
    x = torch.randn(2, 5, 8, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = m(x, x, x)
    assert out.shape == (2, 5, 8) and out.dtype == torch.bfloat16
    # the float32 forward of the same (bf16-exact) inputs: autocast rounds the weights,
    # the projections' inputs and outputs to bf16 (unit roundoff u = 2^-8), about six
    # roundings of relative size <= u between input and output: 6 u in the norm
    ref, _ = m(x.float(), x.float(), x.float())
    assert float((out.float() - ref).norm() / ref.norm()) < 6 * 2.0**-8


def test_favor_attention_huge_embed_dim_is_a_named_error():
    """embed_dim=1e12: torch's 'Storage size calculation overflowed' (its weights would
    take 3e24 elements, beyond any address space: nothing is allocated)."""
    pytest.importorskip("torch")
    from kernelkit.attention import FavorAttention

    with pytest.raises(ValueError, match="embed_dim=1000000000000"):
        FavorAttention(10**12, 2, n_features=16, random_state=0)


def test_favor_attention_with_a_dynamically_quantized_out_proj_still_runs():
    """The input dtype check read ``out_proj.weight.dtype``; ``quantize_dynamic`` swaps
    ``out_proj`` (an ``nn.Linear``) for a quantized Linear whose ``weight`` is a method,
    so every forward raised ``AttributeError``. The check is of the in-projection, which
    the input meets first; the quantized output keeps the float module's outputs to the
    int8 rounding of ``out_proj``."""
    torch = pytest.importorskip("torch")
    from kernelkit.attention import FavorAttention

    m = FavorAttention(8, 2, n_features=16, batch_first=True, random_state=0).eval()
    try:
        q = torch.ao.quantization.quantize_dynamic(m, {torch.nn.Linear}, dtype=torch.qint8)
    except (RuntimeError, AttributeError) as exc:  # a build without a quantized engine
        pytest.skip(f"no dynamic quantization here: {exc}")
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    seen = []
    hook = m.out_proj.register_forward_hook(lambda mod, args, out: seen.append(args[0]))
    with torch.no_grad():
        ref, _ = m(x, x, x)
        hook.remove()
        out, _ = q(x, x, x)
    # only out_proj is quantized: per-tensor int8 weights round by <= max|W| / 254 and
    # uint8 activations a (range [min(a, 0), max(a, 0)]) by <= max|a| / 255, so each of
    # the E = 8 products errs by <= max|W| max|a| (1/254 + 1/255 + their product)
    W, a = m.out_proj.weight, seen[0]
    bound = 8 * W.abs().max() * a.abs().max() * 2.01 / 254
    assert out.shape == ref.shape
    assert (out - ref).abs().max() <= bound


def _oom_above(torch, real, limit=10**6):
    """``real`` (``torch.zeros`` / ``torch.empty``), raising the allocator's
    ``OutOfMemoryError`` for more than ``limit`` elements, as CUDA does when full."""

    def alloc(*size, **kw):
        dims = size[0] if len(size) == 1 and not isinstance(size[0], int) else size
        n = 1
        for s in dims:
            n *= int(s)
        if n > limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.00 TiB")
        return real(*size, **kw)

    return alloc


def test_out_of_memory_stays_out_of_memory_for_callers_that_retry_smaller(monkeypatch):
    """The named errors for unallocatable sizes caught every ``RuntimeError``, so CUDA's
    ``OutOfMemoryError`` (a ``RuntimeError``) became a ``ValueError``: a serving loop
    or batch-size finder that catches ``torch.OutOfMemoryError`` to retry with a smaller
    batch no longer saw it. It passes through as itself; sizes beyond any address space
    are still named (the tests above)."""
    torch = pytest.importorskip("torch")
    from kernelkit.attention import FavorAttention, init_decoding_state

    monkeypatch.setattr(torch, "zeros", _oom_above(torch, torch.zeros))
    with pytest.raises(torch.OutOfMemoryError):
        init_decoding_state((2**12, 2**12), d=4, n_features=16, random_state=0)
    monkeypatch.setattr(torch, "empty", _oom_above(torch, torch.empty))
    with pytest.raises(torch.OutOfMemoryError):
        FavorAttention(2**12, 2, n_features=16, random_state=0)
