"""Every map of :mod:`kernelkit.features` with CPU torch tensors, as a deep-learning user
meets them: half-precision tensors (``fit``, mixed calls, DataFrames, complex features,
variances), tensors without rows, sparse tensors, inference mode, persistence, the
spherical map's unit rows; and what held: seeding through both backends, gradients
(gradcheck, fitted parameters) and views."""

from __future__ import annotations

import numpy as np
import pytest
from favor_helpers import PUBLIC_MAPS, SMALL_CONFIGS

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

MAPS = PUBLIC_MAPS
IDS = [cls.__name__ for cls in MAPS]


def _small(cls, **kw):
    return cls(**{"n_features": 8, **SMALL_CONFIGS.get(cls.__name__, {}), **kw})


def _data(seed=0, n=6, m=5, d=3):
    rng = np.random.default_rng(seed)
    return 0.35 * rng.standard_normal((n, d)), 0.35 * rng.standard_normal((m, d)) + 0.05


def _np(a):
    """NumPy values of ``a``; half tensors widened exactly to float64."""
    if not isinstance(a, torch.Tensor):
        return np.asarray(a)
    a = a.detach()
    if a.dtype in (torch.float16, torch.bfloat16):
        a = a.to(torch.complex128 if a.is_complex() else torch.float64)
    return a.numpy()


# ---------------------------------------------------------------------- bfloat16
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_fit_on_bfloat16_tensors_is_the_fit_on_their_float32_values(cls):
    # transform takes bfloat16 tensors (and returns bfloat16), so fit must too: every
    # bfloat16 value is a float32 value, so the fit on the bfloat16 tensor is the fit on
    # its exact float32 copy, parameter for parameter (the features then agree exactly).
    # NumPy has no bfloat16: the fit's host copy raised torch's "Got unsupported
    # ScalarType BFloat16".
    X, Y = _data()
    Xb, Yb = torch.from_numpy(X).bfloat16(), torch.from_numpy(Y).bfloat16()
    fb = _small(cls, random_state=0).fit(Xb, Y=Yb)
    f32 = _small(cls, random_state=0).fit(Xb.float(), Y=Yb.float())
    X32 = Xb.float()
    torch.testing.assert_close(fb.transform(X32), f32.transform(X32), rtol=0, atol=0)
    out = fb.transform(Xb)
    assert out.dtype == (torch.complex64 if fb.is_complex else torch.bfloat16)


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_a_bfloat16_second_argument_follows_a_numpy_first_one(cls):
    # The mixed-input rule: the second argument takes the first one's backend and dtype.
    # bfloat16 -> float64 is exact, so the result is the float64 result of those values.
    X, Y = _data()
    fm = _small(cls, random_state=0).fit(X, Y=Y)
    Yb = torch.from_numpy(Y).bfloat16()
    out = fm.approx_kernel(X, Yb)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    np.testing.assert_array_equal(out, fm.approx_kernel(X, Yb.double().numpy()))


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_pandas_output_of_a_bfloat16_tensor(cls):
    # A DataFrame holds NumPy columns and NumPy has no bfloat16: the bfloat16 features'
    # values as float32, which holds each of them exactly (as for a tensor that requires
    # grad: the values). scikit-learn's wrapper raised "Got unsupported ScalarType".
    pytest.importorskip("pandas")
    X, _ = _data()
    Xb = torch.from_numpy(X).bfloat16()
    fm = _small(cls, random_state=0).fit(Xb)
    if fm.is_complex:
        pytest.skip("complex features")
    ref = fm.transform(Xb)
    for Xin in (Xb, Xb.clone().requires_grad_(True)):
        out = fm.set_output(transform="pandas").transform(Xin)
        assert list(out.columns) == list(fm.get_feature_names_out())
        assert all(out.dtypes == np.float32)
        np.testing.assert_array_equal(out.to_numpy(), ref.float().numpy())
        out = fm.fit_transform(Xin)
        np.testing.assert_array_equal(out.to_numpy(), ref.float().numpy())
        fm.set_output(transform="default")


# ---------------------------------------------------------------------- no rows, one row
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_tensors_with_no_rows_after_fit(cls, dtype):
    # The contract: after fit an input with no rows is valid; transform returns
    # (0, output_dim) and approx_kernel a matrix with no rows (or columns), in the input's
    # backend and dtype. TensorSketch's torch FFT of an empty batch raised MKL's
    # "Inconsistent configuration parameters".
    X, Y = _data()
    fm = _small(cls, random_state=0).fit(X, Y=Y)
    Xt, Yt = torch.from_numpy(X).to(dtype), torch.from_numpy(Y).to(dtype)
    empty = Xt[:0]
    cdtype = {torch.float32: torch.complex64, torch.float64: torch.complex128}[dtype]
    for f in (fm.transform, fm.transform_y, lambda a: fm.transform_scaled(a)[0]):
        out = f(empty)
        assert out.shape == (0, fm.output_dim)
        assert out.dtype == (cdtype if fm.is_complex else dtype)
    assert fm.transform_scaled(empty)[1].shape == (0,)
    assert fm.transform(empty.clone().requires_grad_(True)).requires_grad  # part of a graph
    assert fm.transform(X[:0].astype(_np(empty).dtype)).shape == (0, fm.output_dim)  # NumPy
    for method in ("approx_kernel", "exact_kernel", "variance", "log_relative_variance"):
        a, b = getattr(fm, method)(empty, Yt), getattr(fm, method)(Xt, Yt[:0])
        assert a.shape == (0, len(Y)) and b.shape == (len(X), 0), method
        assert a.dtype == b.dtype == dtype, method
    # one row: the batch's first row, to rounding (a one-row product takes another BLAS
    # kernel, which sums the projection's d + 2 = 5 terms in another order: a few eps of
    # the features' scale, amplified by an exponential of arguments below 2 here)
    one, batch = fm.transform(Xt[:1]), fm.transform(Xt)[:1]
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(one, batch, rtol=16 * eps, atol=16 * eps * float(batch.abs().max()))


# ---------------------------------------------------------------------- half precision
def _complex_variants():
    out = []
    for cls in MAPS:
        if "complex" in cls().get_params():
            out += [(cls, {"complex": True}), (cls, {"complex": True, "real_output": True})]
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("cls", "kw"),
    _complex_variants(),
    ids=lambda v: v.__name__ if isinstance(v, type) else "_".join(v),
)
def test_complex_maps_keep_a_half_tensors_dtype(cls, kw, dtype):
    # Outputs keep the input's dtype: approx_kernel, the variances and the real (n, 2D)
    # features of real_output=True are half tensors like the input, and complex features
    # are complex64 (torch's complex32 is experimental, and there is no complex bfloat16).
    # RandomFourierFeatures(complex=True) returned complex128 features and a float64
    # approx_kernel; the complex sketches and Maclaurin maps a float32 approx_kernel (and
    # float32 real_output features) for bfloat16. Values: those of the float64 map on the
    # same (rounded) inputs, to the half type's precision (a few of its eps, times the
    # largest entry: sums of a few products of rounded factors).
    X, Y = _data()
    fm = _small(cls, random_state=0, **kw).fit(X, Y=Y)
    Xh, Yh = torch.from_numpy(X).to(dtype), torch.from_numpy(Y).to(dtype)
    Xr, Yr = Xh.double().numpy(), Yh.double().numpy()
    tol = 8 * torch.finfo(dtype).eps
    feats = fm.transform(Xh)
    assert feats.dtype == (torch.complex64 if fm.is_complex else dtype)
    ref = fm.transform(Xr)
    np.testing.assert_allclose(_np(feats), ref, rtol=tol, atol=tol * np.abs(ref).max())
    for method in ("approx_kernel", "variance", "complex_variance", "exact_kernel"):
        out = getattr(fm, method)(Xh, Yh)
        assert out.dtype == dtype, method
        ref = getattr(fm, method)(Xr, Yr)
        np.testing.assert_allclose(
            _np(out), ref, rtol=tol, atol=tol * np.abs(ref).max(), err_msg=method
        )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_variances_of_half_tensors_are_those_of_their_values(cls, dtype):
    # The analytic variances of half-precision tensors are the float64 values of the
    # (rounded) inputs, rounded once to the half dtype: 1 eps relative for the variances
    # (and float16's subnormal spacing, tiny * eps = 6e-8, for those below its tiny),
    # 1 eps of max(|log|, 1) for the log relative variance. Computed in the half dtype
    # itself, the cancellations of the variance formulas (E k_hat^2 - k^2, ...) left
    # AngularHybridRF's bfloat16 variance wrong by a factor of 100 on pairs whose relative
    # variance is ~1e-4 (below bfloat16's eps), and the sketches' float16 variances
    # wrong by 100-250 eps.
    for seed in (1, 2):
        X, Y = _data(seed)
        fm = _small(cls, random_state=0).fit(X, Y=Y)
        Xh, Yh = torch.from_numpy(X).to(dtype), torch.from_numpy(Y).to(dtype)
        Xr, Yr = Xh.double().numpy(), Yh.double().numpy()
        eps = torch.finfo(dtype).eps
        for method in ("variance", "complex_variance"):
            out, ref = getattr(fm, method)(Xh, Yh), getattr(fm, method)(Xr, Yr)
            assert out.dtype == dtype
            atol = torch.finfo(dtype).tiny * eps
            np.testing.assert_allclose(_np(out), ref, rtol=eps, atol=atol, err_msg=method)
        out, ref = fm.log_relative_variance(Xh, Yh), fm.log_relative_variance(Xr, Yr)
        assert out.dtype == dtype
        assert np.all(np.abs(_np(out) - ref) <= eps * np.maximum(np.abs(ref), 1.0))


# ---------------------------------------------------------------------- persistence
def _pickled_modules(obj):
    """The modules named by the globals of ``obj``'s pickle (what loading it imports)."""
    import pickle
    import pickletools

    out, strings = set(), []
    for op, arg, _ in pickletools.genops(pickle.dumps(obj)):
        if op.name == "GLOBAL":
            out.add(arg.split(" ")[0])
        elif op.name == "STACK_GLOBAL":
            out.add(strings[-2])
        if isinstance(arg, str):
            strings.append(arg)
    return out


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_a_map_used_on_tensors_pickles_without_them(cls):
    # A map fitted and used on tensors caches its constants on their backend and device;
    # pickled with them, it could not be loaded where torch is missing, or (used on a
    # GPU) where there is no GPU. The pickle holds NumPy parameters only, the loaded map
    # rebuilds the constants on first use: the same NumPy and torch features, exactly.
    import io
    import pickle

    X, Y = _data()
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    fm = _small(cls, random_state=0).fit(Xt, Y=Yt)
    ref_t, ref_k = fm.transform(Xt), fm.approx_kernel(Xt.float(), Yt.float())
    fm.variance(Xt, Yt)
    assert not {m for m in _pickled_modules(fm) if m.split(".")[0] == "torch"}
    buf = io.BytesIO()
    torch.save(fm, buf)
    for back in (
        pickle.loads(pickle.dumps(fm)),
        torch.load(io.BytesIO(buf.getvalue()), weights_only=False),
    ):
        np.testing.assert_array_equal(back.transform(X), fm.transform(X))
        torch.testing.assert_close(back.transform(Xt), ref_t, rtol=0, atol=0)
        torch.testing.assert_close(
            back.approx_kernel(Xt.float(), Yt.float()), ref_k, rtol=0, atol=0
        )


# ---------------------------------------------------------------------- inference mode
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_autograd_after_a_call_in_inference_mode(cls):
    # Evaluate under torch.inference_mode(), then train: the constants the map caches on
    # the tensors' backend were inference tensors, which autograd cannot save ("Inference
    # tensors cannot be saved for backward") - every later backward through the map
    # raised. The gradients are those of a map never used in inference mode, exactly.
    X, Y = _data()
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    used, fresh = (_small(cls, random_state=0).fit(X, Y=Y) for _ in range(2))
    with torch.inference_mode():
        out = used.transform(Xt)
        used.transform_y(Yt), used.approx_kernel(Xt, Yt), used.variance(Xt, Yt)
        used.transform(Xt.float())
    assert out.is_inference()
    for g, r in zip(_input_grads(used, Xt, Yt), _input_grads(fresh, Xt, Yt), strict=True):
        torch.testing.assert_close(g, r, rtol=0, atol=0)


def _input_grads(fm, Xt, Yt):
    """Gradients in ``Xt`` of the sums of the features (both sides), the estimate and the
    variance."""
    grads = []
    for method in ("transform", "transform_y", "approx_kernel", "variance"):
        a = Xt.clone().requires_grad_(True)
        out = getattr(fm, method)(*((a,) if method.startswith("transform") else (a, Yt)))
        out.real.sum().backward()
        grads.append(a.grad)
    return grads


# ---------------------------------------------------------------------- spherical inputs
def _unit(A):
    return A / np.linalg.norm(A, axis=1, keepdims=True)


def test_spherical_features_name_the_argument_whose_rows_are_not_unit():
    # SphericalRandomFeatures(normalize=False) checks the rows of both kernel arguments;
    # a Y that is not on the sphere was reported as X.
    from kernelkit.features import SphericalRandomFeatures

    X, Y = _data()
    X = _unit(X)
    fm = SphericalRandomFeatures(16, normalize=False, random_state=0).fit(X)
    for Xin, Yin in ((X, Y), (torch.from_numpy(X), torch.from_numpy(Y))):
        for method, args in (
            ("approx_kernel", (Xin, Yin)),
            ("variance", (Xin, Yin)),
            ("transform_y", (Yin,)),
            ("transform_scaled", (Yin, "y")),
        ):
            with pytest.raises(ValueError, match="unit-norm rows of Y"):
                getattr(fm, method)(*args)
    with pytest.raises(ValueError, match="unit-norm rows of X"):
        fm.approx_kernel(Y, X)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_spherical_features_take_unit_rows_rounded_to_a_half_dtype(dtype):
    # Unit rows rounded to a half dtype are unit to its precision (| |x| - 1 | up to
    # eps / 2 from rounding each coordinate), far beyond the 1e-6 tolerance of
    # normalize=False: every such input was rejected. The features are those of the
    # float64 rows holding the same values, to the half dtype's precision (each is
    # sigma-scaled cos / sin of a projection of 3 terms of size < 1: 4 eps absolute).
    from kernelkit.features import SphericalRandomFeatures

    X, _ = _data()
    Xh = torch.from_numpy(_unit(X)).to(dtype)
    fm = SphericalRandomFeatures(16, normalize=False, random_state=0).fit(_unit(X))
    out = fm.transform(Xh)
    assert out.dtype == dtype
    ref = fm.transform(Xh.double().numpy() / np.linalg.norm(Xh.double().numpy(), axis=1)[:, None])
    eps = torch.finfo(dtype).eps
    np.testing.assert_allclose(_np(out), ref, rtol=0, atol=4 * eps * np.abs(ref).max())
    with pytest.raises(ValueError, match="unit-norm rows of X"):
        fm.transform(Xh * (1 + 4 * eps))  # off the sphere by more than the rounding


# ---------------------------------------------------------------------- errors
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_sparse_tensors_raise_a_type_error_that_names_the_argument(cls):
    # torch's sparse layouts are not array-API arrays the maps can compute with; they
    # raised torch's own errors from inside kernelkit ("Could not run 'aten::ne.Scalar'
    # with arguments from the 'SparseCPU' backend", "unsupported tensor layout").
    X, Y = _data()
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    fm = _small(cls, random_state=0).fit(X, Y=Y)
    for to_sparse in (torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr):
        with pytest.raises(TypeError, match=r"X is a sparse torch tensor .*to_dense\(\)"):
            _small(cls).fit(to_sparse(Xt))
        with pytest.raises(TypeError, match=r"Y is a sparse torch tensor"):
            _small(cls).fit(Xt, Y=to_sparse(Yt))
        with pytest.raises(TypeError, match=r"X is a sparse torch tensor"):
            fm.transform(to_sparse(Xt))
        with pytest.raises(TypeError, match=r"Y is a sparse torch tensor"):
            fm.approx_kernel(Xt, to_sparse(Yt))


# ---------------------------------------------------------------------- what held
def _variants(cls):
    """The map's options that change how it draws or what it returns: every sampler,
    the Gaussian kernel, the complex variant."""
    params = cls().get_params()
    out = [{}]
    if "sampler" in params:
        out += [{"sampler": s} for s in ("orthogonal", "sorf", "hadamard", "halton")]
    if "kernel" in params and cls.__name__ not in ("OptimizedMaclaurin",):
        out.append({"kernel": "gaussian"})
    if "complex" in params:
        out.append({"complex": True})
    return out


@pytest.mark.filterwarnings("ignore::UserWarning")  # sorf / hadamard variances warn
@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_same_seed_same_features_through_numpy_and_torch_for_every_variant(cls):
    # The contract: random parameters are drawn with NumPy, so the same random_state
    # gives the same features through both backends; float64 to rounding (the two
    # backends' products may sum in another order: 1e-12 of entries of order 1).
    X, Y = _data(3)
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)
    for kw in _variants(cls):
        a = _small(cls, random_state=7, **kw).fit(X, Y=Y)
        b = _small(cls, random_state=7, **kw).fit(Xt, Y=Yt)
        for method, args in (
            ("transform", (X,)),
            ("transform_y", (Y,)),
            ("approx_kernel", (X, Y)),
            ("variance", (X, Y)),
        ):
            ref = getattr(a, method)(*args)
            out = getattr(b, method)(*(torch.from_numpy(v) for v in args))
            np.testing.assert_allclose(_np(out), ref, rtol=1e-12, atol=1e-12, err_msg=f"{kw}")


def _real_parts(f):
    """``f`` with complex outputs as their (real, imaginary) pairs (for gradcheck)."""

    def g(*args):
        out = f(*args)
        return torch.view_as_real(out) if out.is_complex() else out

    return g


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_gradcheck_of_every_variant(cls):
    # transform (both sides), approx_kernel and variance are differentiable in float64:
    # central differences (eps 1e-6) against autograd, with gradcheck's own tolerances
    # tightened to 1e-7 absolute / 1e-5 relative (the difference quotient's error is
    # O(eps^2) times third derivatives of order 1 here, plus 1e-16 / eps rounding), in
    # fast mode (the Jacobian contracted with random vectors on both sides).
    X, Y = _data(4, n=3, m=2)
    for kw in _variants(cls):
        if kw.get("sampler") in ("sorf", "hadamard", "halton"):
            continue  # same formulas as "orthogonal" once drawn
        fm = _small(cls, random_state=0, **kw).fit(X, Y=Y)
        Xg = torch.from_numpy(X).requires_grad_(True)
        Yg = torch.from_numpy(Y).requires_grad_(True)

        checks = [
            (_real_parts(fm.transform), (Xg,)),
            (_real_parts(fm.transform_y), (Yg,)),
            (fm.approx_kernel, (Xg, Yg)),
            (fm.variance, (Xg, Yg)),
        ]
        for f, args in checks:
            assert torch.autograd.gradcheck(
                f, args, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True
            ), kw


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_views_of_a_tensor_are_its_values(cls):
    # Transposed, strided, expanded (stride 0) and overlapping views give the features
    # and estimates of their contiguous copies, to float64 rounding (another BLAS kernel
    # may sum the d = 3 terms of a projection in another order).
    X, Y = _data()
    fm = _small(cls, random_state=0).fit(X, Y=Y)
    Xt = torch.from_numpy(X)
    base = torch.from_numpy(np.ascontiguousarray(np.repeat(X, 2, axis=0).T))  # (d, 2n)
    views = {
        "transposed": base.T[::2],  # strided rows of a transposed tensor
        "expanded": Xt[1:2].expand(4, -1),
        "column-offset": torch.cat([Xt, Xt], 1)[:, 3:],
    }
    for name, view in views.items():
        ref = fm.transform(view.contiguous())
        np.testing.assert_allclose(_np(fm.transform(view)), _np(ref), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(
            _np(fm.approx_kernel(view, Xt[1:4])),
            _np(fm.approx_kernel(view.contiguous(), Xt[1:4].contiguous())),
            rtol=1e-12,
            atol=1e-14,
            err_msg=name,
        )


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_fitted_parameters_are_constants_for_autograd(cls):
    # Parameters are drawn and fitted with NumPy in float64 (the contract): fitted on
    # tensors that require grad, the map's features have no path back to the fit's data,
    # and fit leaves the tensors' graphs alone (no grad accumulated).
    X, Y = _data()
    Xf = torch.from_numpy(X).requires_grad_(True)
    Yf = torch.from_numpy(Y).requires_grad_(True)
    fm = _small(cls, random_state=0).fit(Xf, Y=Yf)
    a = torch.from_numpy(X).requires_grad_(True)
    out = fm.approx_kernel(a, torch.from_numpy(Y)).sum()
    grads = torch.autograd.grad(out, (a, Xf, Yf), allow_unused=True)
    assert grads[0] is not None and grads[1] is None and grads[2] is None
    assert Xf.grad is None and Yf.grad is None


@pytest.mark.parametrize("cls", MAPS, ids=IDS)
def test_the_variance_of_a_half_tensor_and_a_float64_array(cls):
    # The mixed-input rule holds for the variances formed in float32: the NumPy Y takes
    # the half tensor's dtype (its values rounded to float16) before both are widened,
    # so the result is exactly that of the two float16 tensors.
    X, Y = _data()
    Xh = torch.from_numpy(X).half()
    fm = _small(cls, random_state=0).fit(X, Y=Y)
    for method in ("variance", "log_relative_variance"):
        out = getattr(fm, method)(Xh, Y)
        assert out.dtype == torch.float16
        ref = getattr(fm, method)(Xh, torch.from_numpy(Y).half())
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
