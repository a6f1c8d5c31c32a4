"""Dot-product feature maps: construction, identities, exactness, backends, validation.

Reference formulas are written here from the dot-product paper (eq. 18-21, 29, 33, with
the corrections of docs/derivations/dot_product.md), independently of
``kernelkit.features.dot_product``. Monte Carlo checks (unbiasedness, variances) are in
``test_dot_product_mc.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.linalg import hadamard
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.kernel_approximation import PolynomialCountSketch

from kernelkit.features import (
    GaussianSketch,
    RademacherSketch,
    TensorSketch,
    TensorSRHT,
)
from kernelkit.features.dot_product import pair_statistics, srht_c

SKETCHES = [RademacherSketch, GaussianSketch, TensorSRHT]
ALL = [*SKETCHES, TensorSketch]


def _name(cls):
    return cls.__name__


def unit_rows(n, d, seed, nonneg=False):
    X = np.random.default_rng(seed).standard_normal((n, d))
    if nonneg:
        X = np.abs(X)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def stats(x, y, coef0=0.0):
    x = np.append(x, np.sqrt(coef0)) if coef0 else np.asarray(x, float)
    y = np.append(y, np.sqrt(coef0)) if coef0 else np.asarray(y, float)
    return x @ y, (x @ x) * (y @ y), np.sum(x * x * y * y)


# ---------------------------------------------------------------- reference formulas
def ref_iid(G, N, S, p, sketch, complex_):
    """Eq. 18-21 (D = 1)."""
    if sketch == "rademacher":
        base = N + G * G - S if complex_ else N + 2 * (G * G - S)
    else:
        base = N + G * G if complex_ else N + 2 * G * G
    return base**p - G ** (2 * p)


def ref_srht(G, N, S, p, D, d, complex_):
    """Eq. 28 / 33 with c(D, d) of eq. 29 (loops, not the library's closed form)."""
    V1 = N - S if complex_ else N + G * G - 2 * S
    Vp = ref_iid(G, N, S, p, "rademacher", complex_)
    c = sum(1 for a in range(D) for b in range(D) if a != b and a // d == b // d)
    return Vp / D - c / D**2 * (G ** (2 * p) - (G * G - V1 / (d - 1)) ** p)


# ---------------------------------------------------------------- construction
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("D", [3, 8, 21])
def test_tensor_srht_matches_algorithm_1(D, cplx):
    """Features equal Algorithm 1 written with the dense Hadamard matrix, padded input."""
    X = unit_rows(4, 5, 0)  # d~ = 5 + 1 (coef0) -> padded d = 8
    fm = TensorSRHT(n_features=D, degree=3, coef0=0.7, complex=cplx, random_state=1).fit(X)
    d, B = fm.padded_dim_, fm.n_blocks_
    assert (d, B) == (8, -(-D // 8))
    Xp = np.zeros((4, d))
    Xp[:, :5], Xp[:, 5] = X, np.sqrt(0.7)
    H = hadamard(d)
    blocks = []
    for b in range(B):
        F = np.ones((4, d), dtype=complex)
        for i in range(3):
            U = (Xp * fm.signs_[i, b]) @ H
            F = F * U[:, fm.permutations_[i, b]]
        blocks.append(F)
    expected = np.concatenate(blocks, axis=1)[:, :D] / np.sqrt(D)
    out = fm.transform(X)
    assert out.dtype == (np.complex128 if cplx else np.float64)
    np.testing.assert_allclose(out, expected if cplx else expected.real, atol=1e-12)
    # per-(block, degree) draws: signs in the right set, rows are permutations
    vals = np.unique(fm.signs_)
    assert set(vals.tolist()) <= ({1, -1, 1j, -1j} if cplx else {1.0, -1.0})
    np.testing.assert_array_equal(
        np.sort(fm.permutations_, axis=-1), np.broadcast_to(np.arange(d), fm.permutations_.shape)
    )


@pytest.mark.parametrize("cplx", [False, True])
def test_tensor_srht_dense_and_fwht_paths_agree(cplx, backend):
    X = unit_rows(6, 13, 2)  # padded to 16
    kw = dict(n_features=40, degree=2, coef0=0.5, complex=cplx, random_state=3)
    a = TensorSRHT(method="dense", **kw).fit(X)
    b = TensorSRHT(method="fwht", **kw).fit(X)
    Xb = backend.asarray(X)
    np.testing.assert_allclose(
        backend.to_numpy(a.transform(Xb)), backend.to_numpy(b.transform(Xb)), atol=1e-13
    )


@pytest.mark.parametrize("cls", [RademacherSketch, GaussianSketch], ids=_name)
@pytest.mark.parametrize("cplx", [False, True])
def test_iid_sketch_matches_definition(cls, cplx):
    """F = prod_i (X~ W_i) / sqrt(D) (eq. 5, 10-11), with the weight distributions."""
    X = unit_rows(3, 4, 4)
    fm = cls(n_features=5000, degree=3, coef0=0.25, complex=cplx, random_state=5).fit(X)
    W = fm.weights_
    assert W.shape == (3, 5, 5000)
    Xa = np.hstack([X, np.full((3, 1), 0.5)])
    expected = np.prod([Xa @ W[i] for i in range(3)], axis=0) / np.sqrt(5000)
    np.testing.assert_allclose(fm.transform(X), expected, rtol=1e-10, atol=1e-13)
    if cls is RademacherSketch:
        allowed = {1, -1, 1j, -1j} if cplx else {1.0, -1.0}
        assert set(np.unique(W).tolist()) == allowed
    else:
        # E[z conj z] = 1, E z^2 = 2q - 1 (q = 1 real, 1/2 complex), E|z|^4 = 3 or 2.
        # Sample means of N = 75 000 i.i.d. entries within 5 standard errors sqrt(Var / N)
        # (two-sided p ~ 6e-7 each): real N(0, 1), Var w^2 = 2 and Var w^4 = 105 - 9 = 96;
        # complex (|z|^2 ~ Exp(1)), Var |z|^2 = 1, Var Re z^2 = 1, Var |z|^4 = 24 - 4 = 20.
        # (The old bounds 0.01 and 0.05 were 1.4-2.7 standard errors.)
        se = np.sqrt(np.array([1.0, 1.0, 20.0] if cplx else [2.0, 2.0, 96.0]) / W.size)
        np.testing.assert_allclose(np.mean(np.abs(W) ** 2), 1.0, atol=5 * se[0])
        np.testing.assert_allclose(np.mean(W**2).real, 0.0 if cplx else 1.0, atol=5 * se[1])
        np.testing.assert_allclose(np.mean(np.abs(W) ** 4), 2.0 if cplx else 3.0, atol=5 * se[2])


def test_tensor_sketch_equals_sklearn_polynomial_count_sketch():
    X = np.abs(np.random.default_rng(6).standard_normal((30, 7)))
    for coef0 in (0.0, 1.5):
        sk = PolynomialCountSketch(degree=3, coef0=coef0, n_components=50, random_state=0).fit(X)
        fm = TensorSketch(n_features=50, degree=3, coef0=coef0, random_state=0).fit(X)
        fm.hashes_, fm.signs_ = sk.indexHash_.copy(), sk.bitHash_.astype(float)
        fm._build()
        np.testing.assert_allclose(fm.transform(X), sk.transform(X), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- exactness and identities
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("d0,coef0", [(8, 0.0), (6, 0.0), (8, 1.0)])
@pytest.mark.parametrize("mult", [1, 2])
def test_tensor_srht_degree_one_full_blocks_is_exact(d0, coef0, mult, cplx):
    """p = 1, D in {d, 2d}: Re K_hat = X X^T + coef0 to machine precision, zero variance."""
    X = np.random.default_rng(7).standard_normal((9, d0))
    d = 1 << (d0 + (coef0 > 0) - 1).bit_length()
    for method in ("dense", "fwht"):
        fm = TensorSRHT(
            n_features=mult * d, degree=1, coef0=coef0, complex=cplx, method=method, random_state=8
        ).fit(X)
        np.testing.assert_allclose(fm.approx_kernel(X), X @ X.T + coef0, atol=1e-12)
        np.testing.assert_allclose(fm.complex_variance(X), 0.0, atol=1e-12)
        np.testing.assert_allclose(fm.variance(X), 0.0, atol=1e-12)


def test_complex_rademacher_ex2_equals_ex4():
    """Ex. 2 weights (v + i w)/sqrt 2 = e^{i pi/4} x Ex. 4 weights: identical estimates."""
    X, Y = unit_rows(5, 6, 9), unit_rows(4, 6, 10)
    fm = RademacherSketch(n_features=64, degree=3, complex=True, random_state=11).fit(X)
    K4 = fm.approx_kernel(X, Y)
    W2 = fm.weights_ * np.exp(1j * np.pi / 4)
    re, im = np.round(W2.real * np.sqrt(2)), np.round(W2.imag * np.sqrt(2))
    assert set(np.unique(re).tolist()) == {-1.0, 1.0} == set(np.unique(im).tolist())
    fm.weights_ = W2
    fm._build()
    np.testing.assert_allclose(fm.approx_kernel(X, Y), K4, rtol=1e-12, atol=1e-12)
    # the same for TensorSRHT's sign vectors
    ts = TensorSRHT(n_features=20, degree=2, complex=True, random_state=12).fit(X)
    K = ts.approx_kernel(X, Y)
    ts.signs_ = ts.signs_ * np.exp(1j * np.pi / 4)
    ts._build()
    np.testing.assert_allclose(ts.approx_kernel(X, Y), K, atol=1e-12)


@pytest.mark.parametrize("cls", SKETCHES, ids=_name)
def test_real_output_stacking_reproduces_real_part(cls):
    X, Y = unit_rows(5, 7, 13), unit_rows(3, 7, 14)
    kw = dict(n_features=33, degree=2, coef0=0.3, complex=True, random_state=15)
    c = cls(**kw).fit(X)
    r = cls(real_output=True, **kw).fit(X)
    P, S = c.transform(X), c.transform_y(Y)
    Pr, Sr = r.transform(X), r.transform_y(Y)
    assert r.output_dim == Pr.shape[1] == 66 and c.output_dim == 33
    assert Pr.dtype == np.float64
    np.testing.assert_allclose(Pr, np.hstack([P.real, P.imag]), atol=1e-15)
    np.testing.assert_allclose(Pr @ Sr.T, (P @ S.conj().T).real, atol=1e-13)
    np.testing.assert_allclose(r.approx_kernel(X, Y), c.approx_kernel(X, Y), atol=1e-13)
    np.testing.assert_allclose(c.approx_kernel(X), (P @ P.conj().T).real, atol=1e-13)


@pytest.mark.parametrize("cls", ALL, ids=_name)
def test_kernel_and_approx_kernel_default_y(cls):
    X = unit_rows(6, 5, 16)
    fm = cls(n_features=16, degree=2, coef0=1.0, random_state=0).fit(X)
    np.testing.assert_allclose(fm.exact_kernel(X), (X @ X.T + 1.0) ** 2)
    np.testing.assert_allclose(fm.approx_kernel(X), fm.approx_kernel(X, X), atol=1e-14)
    F = fm.transform(X)
    np.testing.assert_allclose(fm.approx_kernel(X), F @ F.T, atol=1e-13)


# ---------------------------------------------------------------- variance formulas
@pytest.mark.parametrize("p", [1, 2, 3, 5])
@pytest.mark.parametrize("cplx", [False, True])
def test_iid_variance_equals_eq_18_21(p, cplx):
    X, Y = unit_rows(4, 6, 17), unit_rows(3, 6, 18)
    for cls, sketch in ((RademacherSketch, "rademacher"), (GaussianSketch, "gaussian")):
        fm = cls(n_features=7, degree=p, coef0=0.4, complex=cplx, random_state=0).fit(X)
        V = fm.complex_variance(X, Y)
        for i in range(4):
            for j in range(3):
                G, N, S = stats(X[i], Y[j], 0.4)
                np.testing.assert_allclose(
                    V[i, j], ref_iid(G, N, S, p, sketch, cplx) / 7, rtol=1e-10
                )
        # the real part never has a larger variance; equal for real maps
        Vr = fm.variance(X, Y)
        assert np.all(Vr <= V * (1 + 1e-12))
        if not cplx:
            np.testing.assert_allclose(Vr, V, rtol=1e-12)


@pytest.mark.parametrize("D", [1, 3, 8, 13, 16, 27])
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_tensor_srht_variance_equals_eq_33(D, cplx, p):
    X = unit_rows(3, 6, 19)  # padded d = 8 (erratum 9)
    fm = TensorSRHT(n_features=D, degree=p, complex=cplx, random_state=0).fit(X)
    assert fm.padded_dim_ == 8
    V = fm.complex_variance(X)
    for i in range(3):
        for j in range(3):
            G, N, S = stats(X[i], X[j])
            np.testing.assert_allclose(
                V[i, j], max(ref_srht(G, N, S, p, D, 8, cplx), 0.0), rtol=1e-9, atol=1e-14
            )


def test_tensor_sketch_variance_special_cases():
    """p = 1: the count-sketch variance (N + G^2 - 2S)/D; the real part equals it."""
    X = unit_rows(5, 6, 32)
    fm = TensorSketch(n_features=9, degree=1, coef0=0.2).fit(X)
    V = fm.complex_variance(X)
    for i in range(5):
        for j in range(5):
            G, N, S = stats(X[i], X[j], 0.2)
            np.testing.assert_allclose(V[i, j], (N + G * G - 2 * S) / 9, rtol=1e-12)
    np.testing.assert_allclose(fm.variance(X), V)
    # e_1-type inputs: x = y = a basis vector gives an exact estimate (one bucket, sign^2 = 1)
    E = np.eye(4)[:1]
    assert TensorSketch(n_features=4, degree=3).fit(E).complex_variance(E)[0, 0] == 0.0


def test_srht_c_counts_same_block_pairs():
    for D in range(1, 40):
        for d in (1, 2, 4, 8):
            c = sum(1 for a in range(D) for b in range(D) if a != b and a // d == b // d)
            assert srht_c(D, d) == c


def test_odd_degree_srht_variance_below_iid():
    """Corollaries 7 / 11: for odd p, eq. 33 <= V_q^(p) / D."""
    X = unit_rows(10, 6, 20)
    for cplx in (False, True):
        for p in (1, 3, 5):
            for D in (4, 8, 20):
                s = TensorSRHT(n_features=D, degree=p, complex=cplx).fit(X)
                r = RademacherSketch(n_features=D, degree=p, complex=cplx).fit(X)
                assert np.all(s.complex_variance(X) <= r.complex_variance(X) + 1e-12)


def test_complex_beats_real_on_nonnegative_inputs_eq_22():
    """G^2 - S >= 0 (non-negative inputs): complex Rademacher variance <= real (eq. 22);
    complex Gaussian is never worse than real Gaussian."""
    X = unit_rows(30, 10, 21, nonneg=True)
    for p in (1, 2, 3, 6):
        vr = RademacherSketch(n_features=1, degree=p).fit(X).complex_variance(X)
        vc = RademacherSketch(n_features=1, degree=p, complex=True).fit(X).complex_variance(X)
        assert np.all(vc <= vr + 1e-14)
        Z = unit_rows(30, 10, 22)  # mixed signs
        gr = GaussianSketch(n_features=1, degree=p).fit(Z).complex_variance(Z)
        gc = GaussianSketch(n_features=1, degree=p, complex=True).fit(Z).complex_variance(Z)
        assert np.all(gc <= gr + 1e-14)


def test_note_worked_examples():
    """Derived ratios 0.539, 0.452, 0.370, 0.234 and 1.175 vs 1.285 (derivations page)."""
    x, y = np.array([[0.6, 0.8]]), np.array([[0.8, 0.6]])
    ratios = []
    for p in (1, 2, 3, 5):
        vr = RademacherSketch(n_features=1, degree=p).fit(x).complex_variance(x, y)[0, 0]
        vc = (
            RademacherSketch(n_features=1, degree=p, complex=True)
            .fit(x)
            .complex_variance(x, y)[0, 0]
        )
        ratios.append(vc / vr)
    np.testing.assert_allclose(ratios, [0.539, 0.452, 0.370, 0.234], atol=5e-4)
    fm = RademacherSketch(n_features=1, degree=2, complex=True).fit(x)
    np.testing.assert_allclose(fm.complex_variance(x, y)[0, 0], 1.285, atol=5e-4)
    np.testing.assert_allclose(fm.variance(x, y)[0, 0], 1.175, atol=2e-3)
    # counterexample: real variance 0, complex 0.25
    u, v = np.array([[1.0, 1.0]]) / np.sqrt(2), np.array([[1.0, -1.0]]) / np.sqrt(2)
    assert abs(RademacherSketch(n_features=1, degree=2).fit(u).complex_variance(u, v)[0, 0]) < 1e-15
    np.testing.assert_allclose(
        RademacherSketch(n_features=1, degree=2, complex=True).fit(u).complex_variance(u, v)[0, 0],
        0.25,
        rtol=1e-12,
    )


def test_pair_statistics():
    X, Y = unit_rows(3, 4, 23), unit_rows(2, 4, 24)
    G, N, S = pair_statistics(X, Y, coef0=0.3)
    for i in range(3):
        for j in range(2):
            np.testing.assert_allclose([G[i, j], N[i, j], S[i, j]], stats(X[i], Y[j], 0.3))


# ---------------------------------------------------------------- backends and dtypes
@pytest.mark.parametrize("cls", ALL, ids=_name)
@pytest.mark.parametrize("cplx", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_backends_same_features_and_dtypes(cls, cplx, dtype, backend):
    if cplx and cls is TensorSketch:
        pytest.skip("TensorSketch is real")
    X = unit_rows(7, 9, 25)
    kw = dict(n_features=24, degree=3, coef0=0.5, random_state=26)
    if cplx:
        kw["complex"] = True
    fm = cls(**kw).fit(X)
    Xb = backend.asarray(X, dtype)
    F = fm.transform(Xb)
    expected_dtype = {("float32", True): "complex64", ("float64", True): "complex128"}.get(
        (dtype, cplx), dtype
    )
    assert backend.dtype_name(F) == expected_dtype
    tol = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(backend.to_numpy(F), fm.transform(X), rtol=tol, atol=tol)
    K = fm.approx_kernel(Xb)
    assert backend.dtype_name(K) == dtype
    np.testing.assert_allclose(backend.to_numpy(K), fm.approx_kernel(X), rtol=tol, atol=tol)
    V = fm.complex_variance(Xb)
    assert backend.dtype_name(V) == dtype
    np.testing.assert_allclose(backend.to_numpy(V), fm.complex_variance(X), rtol=tol, atol=tol)
    if cplx:
        R = clone(fm).set_params(real_output=True).fit(X).transform(Xb)
        assert backend.dtype_name(R) == dtype and tuple(R.shape) == (7, 48)


@pytest.mark.parametrize("cls", ALL, ids=_name)
def test_torch_autograd(cls, torch):
    X = torch.tensor(unit_rows(4, 6, 27), requires_grad=True)
    kw = dict(n_features=12, degree=2, random_state=0)
    if cls is not TensorSketch:
        kw["complex"] = True
    fm = cls(**kw).fit(X.detach().numpy())
    K = fm.approx_kernel(X)
    K.sum().backward()
    assert X.grad is not None and torch.isfinite(X.grad).all()
    Xd = X.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: fm.approx_kernel(t), (Xd,))


def test_large_row_counts_use_threaded_blocks_consistently():
    X = np.abs(np.random.default_rng(28).standard_normal((3000, 64)))
    for cls in ALL:
        for cplx in (False, True):
            if cplx and cls is TensorSketch:
                continue
            kw = dict(n_features=96, degree=3, coef0=0.5, random_state=1)
            if cplx:
                kw.update(complex=True, real_output=True)
            fm = cls(**kw).fit(X)
            F = fm.transform(X)
            np.testing.assert_allclose(F[-5:], fm.transform(X[-5:]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls", ALL, ids=_name)
def test_huge_and_tiny_norms_give_finite_scale_invariant_estimates(cls, backend):
    """coef0 = 0: k_hat(s x, y / s) = k_hat(x, y) for any s, although the features of
    s x overflow and those of y / s underflow (stabilised log-scale path)."""
    X = np.abs(unit_rows(4, 6, 33))
    X[1] = 0.0  # zero row
    kw = dict(n_features=16, degree=10, random_state=0)
    if cls is not TensorSketch:
        kw["complex"] = cls is not GaussianSketch
    fm = cls(**kw).fit(X)
    K = fm.approx_kernel(X)
    scale = np.abs(K).max()
    for s, dtype, tol in (
        (1e30, "float64", 1e-12),
        (1e200, "float64", 1e-12),
        (1e10, "float32", 1e-4),
    ):
        K2 = backend.to_numpy(
            fm.approx_kernel(backend.asarray(X * s, dtype), backend.asarray(X / s, dtype))
        )
        assert np.all(np.isfinite(K2)), (s, dtype)
        np.testing.assert_allclose(K2 / scale, K / scale, atol=tol)
    base, log_scale = fm.transform_scaled(backend.asarray(X * 1e200))
    assert np.all(np.isfinite(backend.to_numpy(base)))
    np.testing.assert_allclose(
        backend.to_numpy(log_scale)[0], 10 * np.log(1e200 * np.linalg.norm(X[0])), rtol=1e-12
    )
    # moderate inputs: transform_scaled is the features with zero log-scale
    base, log_scale = fm.transform_scaled(backend.asarray(X))
    np.testing.assert_allclose(backend.to_numpy(base), fm.transform(X), atol=1e-15)
    assert np.all(backend.to_numpy(log_scale) == 0)


@given(
    X=hnp.arrays(
        np.float64,
        st.tuples(st.integers(1, 5), st.integers(1, 9)),
        elements=st.floats(-1e6, 1e6, allow_subnormal=False),
    ),
    log_scale=st.floats(-150, 150),
    coef0=st.sampled_from([0.0, 0.5]),
    cplx=st.booleans(),
)
def test_property_degree_one_full_block_srht_is_exact(X, log_scale, coef0, cplx):
    """Any finite input and scale: TensorSRHT with p = 1, D = d reproduces X X^T + coef0,
    and the estimate is finite for p = 3 (stabilised path for extreme norms)."""
    X = X * np.exp(log_scale)
    d = 1 << (X.shape[1] + (coef0 > 0) - 1).bit_length()
    fm = TensorSRHT(n_features=d, degree=1, coef0=coef0, complex=cplx, random_state=0).fit(X)
    K = X @ X.T + coef0
    np.testing.assert_allclose(
        fm.approx_kernel(X), K, rtol=1e-9, atol=1e-9 * (np.abs(K).max() + 1e-300)
    )
    with np.errstate(all="ignore"):  # where K^3 itself overflows
        K3 = (
            TensorSRHT(n_features=8, degree=3, coef0=coef0, complex=cplx, random_state=0)
            .fit(X)
            .approx_kernel(X)
        )
        ok = np.all(np.isfinite(K**3))
    if ok:
        assert np.all(np.isfinite(K3))


def test_empty_input_gives_empty_features():
    X = unit_rows(4, 3, 29)
    for cls in ALL:
        fm = cls(n_features=8, degree=2, random_state=0).fit(X)
        assert fm.transform(X[:0]).shape == (0, 8)


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("cls", ALL, ids=_name)
def test_bad_parameters(cls):
    X = unit_rows(4, 3, 30)
    cases = [
        (dict(degree=0), ValueError, "degree"),
        (dict(degree=-2), ValueError, "degree"),
        (dict(degree=2.5), ValueError, "degree"),
        (dict(degree="3"), TypeError, "degree"),
        (dict(degree=True), TypeError, "degree"),
        (dict(coef0=-0.1), ValueError, "coef0"),
        (dict(coef0=float("nan")), ValueError, "coef0"),
        (dict(coef0="1"), TypeError, "coef0"),
        (dict(n_features=0), ValueError, "n_features"),
        (dict(n_features=2.0), TypeError, "n_features"),
    ]
    if cls is not TensorSketch:
        cases.append((dict(complex=1), TypeError, "complex"))
        cases.append((dict(real_output="yes"), TypeError, "real_output"))
    for kw, exc, match in cases:
        with pytest.raises(exc, match=match):
            cls(**kw).fit(X)
    assert cls(degree=3.0, n_features=4).fit(X).transform(X).shape == (4, 4)


def test_bad_inputs():
    X = unit_rows(4, 3, 31)
    fm = TensorSRHT(n_features=8, degree=2, random_state=0)
    with pytest.raises(NotFittedError):
        fm.transform(X)
    with pytest.raises(ValueError, match="Complex"):
        fm.fit(X + 1j)
    fm.fit(X)
    with pytest.raises(ValueError, match="Complex"):
        fm.transform(X + 0j)
    with pytest.raises(ValueError, match="features"):
        fm.transform(X[:, :2])
    with pytest.raises(ValueError, match="NaN"):
        fm.transform(np.full((2, 3), np.nan))
    with pytest.raises(ValueError, match="method"):
        TensorSRHT(method="fast").fit(X)
    assert "complex" not in TensorSketch().get_params()


@pytest.mark.torch
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_tensor_sketch_half_precision_torch_input(dtype_name):
    """torch has no half-precision FFT on CPU: TensorSketch computes in float32 and
    returns the input's dtype, equal to the float32 features up to the half rounding."""
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype_name)
    X = 0.3 * torch.randn(30, 5, generator=torch.Generator().manual_seed(0))
    fm = TensorSketch(n_features=64, degree=2, random_state=0).fit(X)
    ref = fm.transform(X)
    out = fm.transform(X.to(dtype))
    assert out.dtype == dtype
    eps = torch.finfo(dtype).eps
    assert float((out.float() - ref).abs().max()) <= 20 * eps * float(ref.abs().max())
