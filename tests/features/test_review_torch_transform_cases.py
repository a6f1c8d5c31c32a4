"""Torch transforms of the softmax-family maps (the exponential of the fresh product, in
place, with log2(e) folded into the weights where exp2 is the faster CPU kernel) and the
CPU torch Gram matrix of the FAVOR# moments (two products): agreement with NumPy and with
float64 references, autograd, overflow, and the moments' weights, batches, strides and
half-precision inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from favor_helpers import make_xy

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit._backend import exponential  # noqa: E402
from kernelkit.attention import attention_moments  # noqa: E402
from kernelkit.features import (  # noqa: E402
    ADERF,
    GERF,
    SADERF,
    SDERF,
    HyperbolicRF,
    PositiveRF,
    favor,
)

SOFTMAX_MAPS = [PositiveRF, HyperbolicRF, GERF, SADERF, ADERF, SDERF]


def _name(cls):
    return cls.__name__


def _term_scale(fm, X, side):
    """``sum |terms|`` of each log feature ``x W_m + const_m + row(x)`` (n, M): the
    rounding of the product that makes it (and of its exponential's argument) is at most
    a few eps of this, so the features' relative error is too."""
    Xp = X / fm.lengthscale
    W_T, const = fm._consts["W_T_" + side], fm._consts["const"]
    row = fm._row_term(Xp, np, side)
    return np.abs(Xp) @ np.abs(W_T) + np.abs(const) + np.abs(row)[:, None]


def _check_against_log_features(fm, A, got, side, dtype):
    # reference: exp of the float64 log features of the (rounded) inputs; tolerance 4 eps
    # (sum|terms| + 1) relative (measured up to ~2 eps (...) for NumPy and torch alike:
    # the product's rounding, the exponential's argument and its own ulp)
    Ad = A.astype(dtype).astype(np.float64)
    lt = fm.log_transform(Ad) if side == "x" else fm.log_transform_y(Ad)
    ref = np.exp(lt)
    eps = np.finfo(dtype).eps
    ok = ref > np.finfo(dtype).tiny * 1e3  # entries not in the subnormal range
    err = np.abs(np.asarray(got, dtype=np.float64) - ref)
    assert np.all(err[ok] <= 4 * eps * (_term_scale(fm, Ad, side)[ok] + 1) * ref[ok])


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("cls", SOFTMAX_MAPS, ids=_name)
def test_torch_transform_matches_the_log_features_and_numpy(cls, kernel, dtype):
    for scale, ls in ((0.6, 1.0), (3.0, 1.7), (10.0, 2.5)):  # log features up to ~300
        X, Y = make_xy(1, n=30, m=25, d=7, scale=scale)
        fm = cls(n_features=32, kernel=kernel, lengthscale=ls, random_state=0).fit(X, Y=Y)
        for side, A in (("x", X), ("y", Y)):
            f = fm.transform if side == "x" else fm.transform_y
            got = f(torch.from_numpy(A.astype(dtype)))
            assert got.dtype == torch.from_numpy(A.astype(dtype)).dtype
            _check_against_log_features(fm, A, got.numpy(), side, dtype)
            _check_against_log_features(fm, A, f(A.astype(dtype)), side, dtype)


@pytest.mark.parametrize("cls", SOFTMAX_MAPS, ids=_name)
def test_torch_transform_without_a_simd_exp2_is_the_plain_exponential(cls, monkeypatch):
    X, Y = make_xy(2, n=9, m=8, d=5)
    fm = cls(n_features=16, lengthscale=1.3, random_state=0).fit(X, Y=Y)
    Xt = torch.from_numpy(X).float()
    monkeypatch.setattr(exponential, "_CPU_EXP2", False)
    plain = fm.transform(Xt)
    assert plain.grad_fn is None
    # exp of the same product: bit for bit torch.exp of the unfolded log features
    ones = torch.ones(9, 1)
    row = fm._row_term(Xt / 1.3, torch, "x")[:, None]
    W_aug = torch.from_numpy(fm._consts["W_aug_x"]).float()
    assert torch.equal(plain, torch.exp(torch.cat([Xt / 1.3, ones, row], 1) @ W_aug))
    monkeypatch.setattr(exponential, "_CPU_EXP2", True)
    _check_against_log_features(fm, X, fm.transform(Xt).numpy(), "x", np.float32)


@pytest.mark.parametrize("cls", SOFTMAX_MAPS, ids=_name)
def test_autograd_through_torch_transforms(cls):
    """``fit(X_np).transform(X_torch_requires_grad)`` then backward: the float32 gradient
    equals the float64 one (and the float64 one the analytic form ``f (W_eff - d row/dx)``
    through gradcheck, in test_softmax_backends)."""
    X, Y = make_xy(3, n=12, m=10, d=6)
    fm = cls(n_features=24, lengthscale=0.8, random_state=0).fit(X, Y=Y)
    w = torch.linspace(-1, 1, fm.output_dim)
    grads = {}
    for dt in (torch.float32, torch.float64):
        for side, A in (("x", X), ("y", Y)):
            At = torch.tensor(A, dtype=dt, requires_grad=True)
            f = fm.transform(At) if side == "x" else fm.transform_y(At)
            assert f.requires_grad
            (f * w.to(dt)).sum().backward()
            grads[dt, side] = At.grad.double()
    for side in ("x", "y"):
        g32, g64 = grads[torch.float32, side], grads[torch.float64, side]
        # float32 features (4 eps (sum|terms| + 1) relative, sum|terms| < 10 here) and their
        # sums over M = 24 weighted features: 1e-4 of the gradient's scale
        assert float((g32 - g64).abs().max()) <= 1e-4 * float(g64.abs().max())


@pytest.mark.parametrize("cls", [GERF, SDERF])
def test_overflowing_torch_features_are_inf_where_numpy_is_and_never_nan(cls):
    rng = np.random.default_rng(0)
    X0 = rng.standard_normal((12, 4))
    X0 /= np.linalg.norm(X0, axis=1, keepdims=True)
    fm = cls(n_features=16, random_state=0).fit(X0 * 60, Y=X0)  # x side scaled up
    for dtype in (np.float32, np.float64):
        X = (X0 * 60).astype(dtype)
        lt = fm.log_transform(X.astype(np.float64))
        limit = np.log(np.finfo(dtype).max)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # NumPy says they overflow
            ref = fm.transform(X)
        with pytest.warns(RuntimeWarning, match="overflow"):  # as NumPy warns
            got = fm.transform(torch.from_numpy(X)).numpy()
        assert not np.any(np.isnan(got))
        clear = np.abs(lt - limit) > 1e-3 * limit  # not within rounding of the limit
        assert np.any(np.isinf(got) & clear)  # the case overflows
        np.testing.assert_array_equal(np.isinf(got)[clear], (lt > limit)[clear])
        np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))


# ------------------------------------------------------------------ Gram / moments
def _gram_reference(X):
    return X.double().mT @ X.double()


def _gram_tolerance(X):
    # |fl(X^T X) - X^T X| <= n eps |X|^T |X| entrywise (a dot product of n terms), plus
    # n eps tiny for products in the subnormal range (float16's tiny is 6e-5)
    n, fi = X.shape[-2], torch.finfo(X.dtype)
    return n * fi.eps * (X.double().abs().mT @ X.double().abs() + fi.tiny)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "shape", [(50, 31), (50, 32), (50, 33), (3, 2, 40, 64), (1, 40), (0, 40), (5, 1, 65)]
)
def test_gram_equals_xtx(shape, dtype):
    X = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    G = favor._gram(favor.array_namespace(X), X)
    assert G.shape == (*shape[:-2], shape[-1], shape[-1]) and G.dtype == dtype
    assert torch.all((G.double() - _gram_reference(X)).abs() <= _gram_tolerance(X))
    d = shape[-1]
    if d >= 32:  # the lower-left block is the transpose of the upper-right one
        h = d // 2
        assert torch.equal(G[..., h:, :h], G[..., :h, h:].mT)


def test_gram_of_non_contiguous_and_expanded_inputs():
    g = torch.Generator().manual_seed(1)
    X = torch.randn(64, 200, generator=g).mT  # (200, 64), a transposed view
    Xs = torch.randn(300, 70, generator=g)[::3, 1:65]  # strided rows and columns
    Xe = torch.randn(1, 30, 48, generator=g).expand(4, 30, 48)  # stride-0 batch
    for A in (X, Xs, Xe):
        G = favor._gram(favor.array_namespace(A), A)
        assert torch.all((G.double() - _gram_reference(A)).abs() <= _gram_tolerance(A))


def test_moments_with_weights_batches_and_strides():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(2, 3, 100, 40, generator=g)
    Y = torch.randn(2, 3, 80, 40, generator=g).transpose(-1, -2).contiguous().transpose(-1, -2)
    wy = torch.rand(2, 3, 80, generator=g)
    wy[..., 60:] = 0  # padded keys
    wy /= wy.sum(-1, keepdim=True)
    m = favor.moments(X, Y, key_weights=wy)
    Xd, Yd = X.double(), Y.double()
    ref_sx = Xd.mT @ Xd / 100
    ref_sy = (Yd * wy.double()[..., None]).mT @ Yd
    # float32 sums of 100 / 80 terms: n eps of the sums of |terms|
    tol_x = 100 * 2.0**-23 * (Xd.abs().mT @ Xd.abs()) / 100
    tol_y = 80 * 2.0**-23 * ((Yd.abs() * wy.double()[..., None]).mT @ Yd.abs())
    assert torch.all((m.second_x.double() - ref_sx).abs() <= tol_x)
    assert torch.all((m.second_y.double() - ref_sy).abs() <= tol_y)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_attention_moments_of_half_inputs_with_padding(dtype):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 50, 64, generator=g).to(dtype)
    k = torch.randn(2, 4, 50, 64, generator=g).to(dtype)
    pad = torch.zeros(2, 4, 50, dtype=torch.bool)
    pad[1, :, 35:] = True
    s = 64**-0.25
    padded = attention_moments(q, k, key_padding_mask=pad, query_padding_mask=pad)
    full = attention_moments(q, k)  # unweighted: the two-product Gram
    for mom, rows in ((padded, (50, 35)), (full, (50, 50))):
        assert mom.second_x.dtype == torch.float64 and mom.second_x.shape == (2, 4, 64, 64)
        for second, x in ((mom.second_x, q), (mom.second_y, k)):
            for b, n in enumerate(rows):
                xb = x[b, :, :n].double() * s  # the half inputs are exact in float64
                ref = xb.mT @ xb / n
                # float32 sums of n terms of the exactly converted inputs: n eps32
                # |x|^T |x| / n
                tol = n * 2.0**-23 * (xb.abs().mT @ xb.abs()) / n
                assert torch.all((second[b] - ref).abs() <= tol)


@pytest.mark.parametrize("to_torch", [False, True])
def test_overflow_warning_points_at_the_users_call(to_torch):
    # NumPy and torch transforms warn alike, at the line that called transform (not at
    # scikit-learn's set_output wrapper or inside kernelkit)
    rng = np.random.default_rng(0)
    X0 = rng.standard_normal((12, 4))
    X0 /= np.linalg.norm(X0, axis=1, keepdims=True)
    fm = GERF(n_features=16, random_state=0).fit(X0 * 60, Y=X0)
    X = torch.from_numpy(X0 * 60) if to_torch else X0 * 60
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fm.transform(X)
    assert [w.category for w in caught] == [RuntimeWarning]
    assert caught[0].filename == __file__
