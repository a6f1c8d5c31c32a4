"""Review of the day's changes, second session: cases the new code missed.

- PolynomialBasis.transform's overflow check: one pass over finite output (no (n, m)
  isfinite temporaries of the monomials and of psi, no second standardisation of the raw
  X); finite values whose sum overflows are still returned.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from kernelkit.distributions import polynomial
from kernelkit.distributions.polynomial import PolynomialBasis


class _CountingNumpy:
    """``numpy`` with ``isfinite`` recording the sizes of its arguments."""

    def __init__(self):
        self.sizes = []

    def __getattr__(self, name):
        return getattr(np, name)

    def isfinite(self, x, *args, **kwargs):
        self.sizes.append(np.size(x))
        return np.isfinite(x, *args, **kwargs)


def test_polynomial_transform_checks_finite_output_without_full_size_passes(monkeypatch):
    """The overflow check added to transform ran isfinite over the (n, m) monomials and
    again over psi, and standardised the raw X a second time (+35% per call on 20000 rows,
    degree 4): finite output needs one reduction, not an elementwise pass."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    pb = PolynomialBasis(degree=4).fit(X)
    counting = _CountingNumpy()
    monkeypatch.setattr(polynomial, "np", counting)
    out = pb.transform(X[:50])
    assert out.shape == (50, pb.n_components_)
    assert max(counting.sizes, default=0) <= 1, counting.sizes  # scalars only


def test_polynomial_transform_finite_values_whose_sum_overflows_are_returned():
    """The fast check sums the output; a sum that overflows while every value is finite
    must fall back to the row-wise test, not raise (standardize=False, |x| ~ 1e102 at
    degree 3: x^3 ~ 1e306, their sum over 200 rows beyond 1.8e308)."""
    rng = np.random.default_rng(1)
    X = 1e102 * (1.0 + 0.1 * rng.random((200, 1)))
    pb = PolynomialBasis(degree=3, standardize=False)
    pb.mean_, pb.scale_ = np.zeros(1), np.ones(1)  # the fit's Gram matrix would overflow
    pb.exponents_ = polynomial.monomial_exponents(1, 3)
    pb.coef_ = np.eye(4)
    pb.n_features_in_ = 1
    V = pb.transform(X)
    assert np.all(np.isfinite(V))
    with np.errstate(over="ignore"):
        assert not np.isfinite(V.sum())  # the case the fallback is for
    x = X[:, 0]
    np.testing.assert_array_equal(V[:, 3], x * x * x)  # (x x) x, as the monomials form it


def test_polynomial_transform_overflow_still_names_the_rows():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((50, 2))
    pb = PolynomialBasis(degree=4).fit(X)
    Q = X[:3].copy()
    Q[1] = 1e100
    with pytest.raises(ValueError, match="overflow float64 at 1 of 3 rows"):
        pb.transform(Q)
    with pytest.raises(ValueError, match="overflow float64 at 1 of 3 rows"):
        pb.monomials(Q)


# ---------------------------------------------------------------- SphericalRandomFeatures
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_spherical_normalisation_in_range_takes_one_pass(monkeypatch, backend):
    """normalize=True divided every row by its largest |entry| before the norm (an abs,
    a max and a division over X on each transform: +20% per call at the defaults, d = 16),
    which only rows whose squared norm leaves the dtype's range need. Rows in range are
    x / sqrt(|x|^2) as before; zero rows and tiny / huge ones still take the scale-free
    path (its detached row maximum)."""
    from kernelkit.features import SphericalRandomFeatures, fourier

    rng = np.random.default_rng(3)
    X = rng.standard_normal((6, 5))
    fm = SphericalRandomFeatures(16, random_state=0).fit(X)
    calls = []
    detach = fourier._detach
    monkeypatch.setattr(fourier, "_detach", lambda a: calls.append(1) or detach(a))
    as_in = (lambda a: a) if backend == "numpy" else torch_tensor
    fm.transform(as_in(X))
    assert calls == []
    for odd in (np.zeros((1, 5)), 1e-170 * X[:1], 1e170 * X[:1]):
        fm.transform(as_in(np.vstack([X, odd])))
        assert calls, odd
        calls.clear()


def torch_tensor(a):
    torch = pytest.importorskip("torch")
    return torch.as_tensor(a)


@pytest.mark.parametrize("scale", [1.0, 2.0**-600, 2.0**600])
def test_spherical_normalisation_sparse_equals_dense(scale):
    """The sparse rows take the same two paths (in range: one pass; else scale-free)."""
    import scipy.sparse as sp

    from kernelkit.features import SphericalRandomFeatures

    rng = np.random.default_rng(4)
    X = rng.standard_normal((6, 5)) * (rng.random((6, 5)) < 0.6)
    X[:, 0] = 1.0 + rng.random(6)  # no zero row: at scale 1 every row is in range
    fm = SphericalRandomFeatures(16, random_state=0).fit(rng.standard_normal((3, 5)))
    dense = fm.transform(scale * X)
    # x / |x| is rounded in each path (the scale is a power of two, exact): |du| <= 2 eps
    # sqrt(d) per row; the features move by at most |w| |du|, |w| < 10 sqrt(d) for these
    # draws, so 100 d eps bounds the difference
    atol = 100 * X.shape[1] * np.finfo(np.float64).eps
    np.testing.assert_allclose(fm.transform(sp.csr_matrix(scale * X)), dense, atol=atol)
    np.testing.assert_allclose(dense, fm.transform(X), atol=atol)


# ------------------------------------------------------- float32 data, the dense solve
def _pixels():
    """Unscaled 8 x 8 digit images with pixel values 0..256 (as raw 8-bit images)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:300] * 16, y[:300]


def test_dense_spfb_step_on_float32_torch_tensors_is_the_float64_step():
    """spfb_step formed its dense system in float64 for NumPy float32 only: torch float32
    tensors still gave the float32 C_j whose rounding made the matrix indefinite
    ('curvature not positive definite') on these pixels with lam = 1e-4."""
    torch = pytest.importorskip("torch")
    from kernelkit.optim.solvers import spfb_step

    X, y = _pixels()
    W = np.zeros((X.shape[1], 10))
    _, info64 = spfb_step(W, X, y, 1e-4, linear_solver="dense")
    t32 = (torch.as_tensor(a, dtype=torch.float32) for a in (W, X))
    W32, info32 = spfb_step(*t32, torch.as_tensor(y), 1e-4, linear_solver="dense")
    assert W32.dtype == torch.float32 and info32["direction"].dtype == torch.float32
    # integer pixels and W = 0: the same float64 system, so the directions differ by the
    # float32 rounding of the result (6e-8 relative; measured 2.5e-8)
    d64, d32 = info64["direction"], info32["direction"].numpy()
    assert np.linalg.norm(d32 - d64) <= 1e-6 * np.linalg.norm(d64)


def test_dask_bound_fit_on_float32_pixels_with_the_dense_solve():
    """The Dask fit (solver='bound') summed float32 chunk curvatures into its dense
    system: 'bound diverged at step 1 ... not positive definite' where the in-memory
    float32 fit (and the float64 Dask fit) succeed."""
    da = pytest.importorskip("dask.array", reason="dask not installed (the dask extra)")

    from kernelkit.optim import BoundLogisticRegression

    X, y = _pixels()
    kw = dict(solver="bound", alpha=1e-4, max_epochs=3, tol=None, linear_solver="dense")
    X32 = X.astype(np.float32)
    mem = BoundLogisticRegression(**kw).fit(X32, y)
    lazy = BoundLogisticRegression(**kw).fit(da.from_array(X32, chunks=100), da.from_array(y))
    assert lazy.coef_.dtype == np.float32
    # three steps of float64 systems from the same start; the Dask gradient is formed in
    # float64 per chunk, the in-memory one in float32 (rounding ~1e-7 relative of the
    # logits and objectives, as the in-memory float32 / float64 comparison allows)
    np.testing.assert_allclose(lazy.loss_history_, mem.loss_history_, rtol=1e-6)


@pytest.mark.parametrize("solver", ["spfb", "lspfb"])
def test_finishing_phase_dense_solve_on_float32_pixels(solver):
    """The full-batch finishing steps (finish='bound') built their dense system from the
    float32 C_j too: the fit failed with 'curvature not positive definite'."""
    from kernelkit.optim import BoundLogisticRegression

    X, y = _pixels()
    kw = dict(solver=solver, alpha=1e-4, max_epochs=4, finish="bound", n_iter_no_change=1)
    kw.update(linear_solver="dense", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        f32 = BoundLogisticRegression(**kw).fit(X.astype(np.float32), y)
    assert np.all(np.isfinite(f32.coef_))
    assert f32.loss_history_[-1] < f32.loss_history_[0]


# ------------------------------------------------------------ FavorAttention extra state
def test_shared_generator_resumes_when_loaded_into_shared_layers():
    """Layers built with one shared Generator each save its state (the guide: load them
    into layers that share one too). Then the resumed run redraws as the uninterrupted
    one; into layers with generators of their own, the layers redraw alike."""
    torch = pytest.importorskip("torch")
    import copy

    from kernelkit.attention import FavorAttention

    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))

    def model(states):
        kw = dict(batch_first=True, redraw_interval=1)
        layers = [FavorAttention(16, 2, random_state=r, **kw) for r in states]
        return torch.nn.ModuleList(layers).train()

    def step(m):
        for layer in m:
            layer(x, x, x)
        return [layer.projection.clone() for layer in m]

    g = np.random.default_rng(0)
    run = model([g, g])
    step(run)
    saved = copy.deepcopy(run.state_dict())
    ref = step(run)
    h = np.random.default_rng(7)
    shared = model([h, h])
    shared.load_state_dict(saved)
    for a, b in zip(step(shared), ref, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    own = model([1, 2])
    own.load_state_dict(saved)
    first, second = step(own)
    torch.testing.assert_close(first, second, rtol=0, atol=0)  # the caveat the guide states


def test_polynomial_standardisation_overflow_is_the_value_error_only():
    """A query whose standardisation overflows (training scale 1e-300) is the ValueError
    naming the rows, without a RuntimeWarning from the division first."""
    rng = np.random.default_rng(5)
    pb = PolynomialBasis(degree=2).fit(1e-300 * rng.standard_normal((20, 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match="overflow float64 at 1 of 1 rows"):
            pb.transform(np.array([[1e10]]))
