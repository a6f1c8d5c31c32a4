"""Session 30 new-user hunts: samplers, exact kernels, the SGB bound's beta."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kernelkit.kernels as K
from kernelkit.features.sampling import draw_projection
from kernelkit.optim import beta, multinomial_partition_bound


@pytest.mark.parametrize("d", [3, 5, 6])
def test_hadamard_rows_have_chi_norms_when_d_is_not_a_power_of_two(d):
    # a SORF row truncated to d < d' columns can vanish; ORF-Had rescaled it by 1 and
    # kept the zero row (6% of rows at d = 3): E|w|^2 was 2.83, not d
    W = np.concatenate([draw_projection(64, d, r, "hadamard") for r in range(400)])
    sq = np.sum(W**2, axis=1)  # chi^2_d: mean d, variance 2 d
    assert np.all(sq > 0)
    z = (sq.mean() - d) / np.sqrt(2 * d / sq.size)
    assert abs(z) < 4
    C = W.T @ W / W.shape[0]  # E[w w^T] = I up to Monte Carlo error
    assert np.max(np.abs(C - np.eye(d))) < 6 * np.sqrt(2.0 / W.shape[0]) * np.sqrt(3)


def test_hadamard_draw_is_unchanged_for_powers_of_two():
    # no zero rows there: the same random stream and values as before the fix (values of
    # the earlier code, stored)
    W = draw_projection(40, 8, 0, "hadamard")
    np.testing.assert_allclose(W.sum(), -4.225505394532737, rtol=1e-13)
    np.testing.assert_allclose(W[0, :3], [1.27562649] * 3, rtol=1e-8)
    S = draw_projection(40, 8, 0, "sorf")  # the same directions, chi_8 norms
    cos = np.sum(W * S, axis=1) / (np.linalg.norm(W, axis=1) * np.linalg.norm(S, axis=1))
    np.testing.assert_allclose(cos, 1.0, rtol=1e-12)


def test_gaussian_kernel_of_long_double_input():
    # was "ValueError: math domain error": float(finfo(longdouble).smallest_normal) is 0
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    got = K.gaussian_kernel(X.astype(np.longdouble), Y.astype(np.longdouble))
    assert got.dtype == np.longdouble
    want = np.exp(-0.5 * np.sum((X[:, None] - Y[None]) ** 2, axis=-1))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-14)
    assert K.power_of_two_bound(np, X.astype(np.longdouble)) >= 2 - np.finfo(np.longdouble).maxexp


def test_beta_and_bound_of_huge_logits_do_not_warn():
    # the series 1/4 - u^2/48 was evaluated on every entry: overflow warnings at |u| > 1e154
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = beta(np.array([1e200, -1e300, 0.1]))
        bound = multinomial_partition_bound(np.array([[0.0, 1e200]]), np.array([[1.0]]))
    np.testing.assert_allclose(b[:2], [0.5e-200, 0.5e-300], rtol=1e-15)
    np.testing.assert_allclose(b[2], np.tanh(0.05) / 0.2, rtol=1e-15)
    np.testing.assert_allclose(bound.log_z, [1e200], rtol=1e-15)


def _classifiers():
    from kernelkit.distributions import KernelLogisticRegression
    from kernelkit.estimators import NadarayaWatsonClassifier, RandomFeatureGPClassifier
    from kernelkit.optim import BoundLogisticRegression

    return [
        NadarayaWatsonClassifier(),
        RandomFeatureGPClassifier(random_state=0),
        BoundLogisticRegression(),
        KernelLogisticRegression(),
    ]


@pytest.mark.parametrize("est", _classifiers(), ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("y", [["a", "a", 1, 1, "a", 1], ("x", True, "x", True, True, "x")])
def test_a_list_of_labels_of_mixed_types_is_refused_naming_y(est, y):
    # the list became an array of strings: classes_ ['1' 'a'], predict returned strings
    X = np.random.default_rng(0).standard_normal((6, 2))
    with pytest.raises(TypeError, match=r"\by\b.*(str|types)"):
        est.fit(X, y)
    assert not hasattr(est, "classes_")


def test_partial_fit_refuses_a_classes_list_of_mixed_types():
    from kernelkit.optim import BoundLogisticRegression

    X = np.random.default_rng(0).standard_normal((4, 2))
    with pytest.raises(TypeError, match=r"classes.*int, str"):
        BoundLogisticRegression().partial_fit(X, [1, 1, 2, 2], classes=[1, 2, "a"])
    # lists of one type still work, numbers staying numbers
    clf = BoundLogisticRegression().fit(X, [1, 1, 2, 2])
    assert clf.classes_.dtype.kind == "i"


def test_random_features_auto_with_dense_queries_and_sparse_keys():
    # the candidates were filtered on a sparse X only: GERF's fit raised a TypeError
    import scipy.sparse as sp

    from kernelkit.estimators import RandomFeatures

    X = np.random.default_rng(0).normal(size=(30, 4)) * 0.3
    Y = sp.random(20, 4, density=0.5, format="csr", random_state=0)
    rf = RandomFeatures(method="auto", n_components=32, random_state=0).fit(X, Y=Y)
    assert rf.feature_map_.accepts_sparse
    assert set(rf.variance_estimates_) and all(
        RandomFeatures(method=m).fit(X).feature_map_.accepts_sparse for m in rf.variance_estimates_
    )
    assert np.all(np.isfinite(rf.transform_y(Y)))


def test_random_features_names_y_in_its_key_messages():
    import pandas as pd

    from kernelkit.estimators import RandomFeatures

    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(30, 4)), columns=list("abcd"))
    Y = rng.normal(size=(20, 4))
    with pytest.warns(UserWarning, match="^Y does not have valid feature names") as rec:
        rf = RandomFeatures(n_components=32, random_state=0).fit(df, Y=Y)
    assert rec[0].filename == __file__  # at the caller's line
    with pytest.warns(UserWarning, match="^Y does not have valid feature names"):
        rf.transform_y(Y)
    with pytest.raises(ValueError, match=r"^Y must be a 2-D array"), pytest.warns(UserWarning):
        rf.transform_y(Y[0])
    # named keys are compared with X's columns, the error naming Y
    with pytest.raises(ValueError, match=r"^Y: .*feature names"):
        rf.transform_y(pd.DataFrame(Y, columns=list("abce")))
    np.testing.assert_allclose(
        rf.transform_y(pd.DataFrame(Y, columns=list("abcd"))),
        rf.feature_map_.transform_y(Y),
        rtol=1e-13,
    )


def _scaled_maps():
    import kernelkit.features as F

    out = []
    for name in F.__all__:
        cls = getattr(F, name)
        if (
            isinstance(cls, type)
            and hasattr(cls, "transform_scaled")
            and name
            not in (
                "FeatureMap",
                "DotProductFeatureMap",
            )
        ):
            out.append(cls)
    return out


@pytest.mark.parametrize("cls", _scaled_maps(), ids=lambda c: c.__name__)
def test_transform_scaled_pieces_have_their_own_gradients(cls):
    # the maps' stabilisers were detached (or bounds): only base * exp(log_scale) had the
    # right gradient; base and log_scale apart failed gradcheck for nine maps
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(1)
    X = 0.5 * torch.randn(3, 3, dtype=torch.float64, generator=g)
    fm = cls(n_features=4, random_state=0).fit(X.numpy())
    base, log_scale = fm.transform_scaled(X)
    if cls._unit_scaled_rows:  # the exponential maps: rows of largest |base| 1
        torch.testing.assert_close(base.abs().amax(dim=1), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(
        base * torch.exp(log_scale)[:, None], torch.as_tensor(fm.transform(X)), rtol=1e-12, atol=0
    )
    x = X.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: fm.transform_scaled(t)[1], (x,))
    if not base.is_complex():
        assert torch.autograd.gradcheck(lambda t: fm.transform_scaled(t)[0], (x,))
    # NumPy: the same values
    b_np, s_np = fm.transform_scaled(X.numpy())
    np.testing.assert_allclose(b_np, base.numpy(), rtol=1e-12, atol=1e-15)  # |base| <= 1
    np.testing.assert_allclose(s_np, log_scale.numpy(), rtol=1e-12)


def _nw_reference(X, y, Q, sigma, n_classes):
    # brute force from explicit differences, in log space
    L = -(sigma**2) * np.sum((Q[:, None, :] - X[None, :, :]) ** 2, axis=-1) / 2
    L -= L.max(axis=1, keepdims=True)
    P = np.exp(L) @ np.eye(n_classes)[y]
    return P / P.sum(axis=1, keepdims=True)


def test_exact_nadaraya_watson_resolves_a_fine_cluster_beside_distant_points():
    # |q|^2 + |t|^2 - 2 q.t lost the 1 cm spacing of points 1e7 m from a distant one:
    # wrong nearest neighbours, probabilities off by 0.99
    from kernelkit.estimators import NadarayaWatsonClassifier

    X = np.r_[-5e6, 5e6 + 0.01 * np.arange(10)][:, None]
    y = np.r_[0, np.arange(10) % 2 + 1]
    Q = X[1:] + 0.002
    clf = NadarayaWatsonClassifier(exact=True, sigma=300.0).fit(X, y)
    want = _nw_reference(X, y, Q, 300.0, 3)
    np.testing.assert_allclose(clf.predict_proba(Q), want, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(Q), want.argmax(axis=1))


def test_exact_nadaraya_watson_is_scale_invariant_past_the_square_range():
    # squared distances overflowed past 1e154: inf - inf gave uniform probabilities
    from kernelkit.estimators import NadarayaWatsonClassifier

    rng = np.random.default_rng(0)
    X, Q = rng.standard_normal((20, 2)), rng.standard_normal((3, 2))
    y = rng.integers(0, 3, 20)
    ref = NadarayaWatsonClassifier(exact=True, sigma=1.0).fit(X, y).predict_proba(Q)
    np.testing.assert_allclose(ref, _nw_reference(X, y, Q, 1.0, 3), rtol=1e-12)
    for s in (1e160, 1e-160):
        got = NadarayaWatsonClassifier(exact=True, sigma=1 / s).fit(X * s, y).predict_proba(Q * s)
        np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_exact_nadaraya_watson_of_far_queries_is_the_limit():
    # a query far beyond the training spread weighs the training points by
    # exp(sigma^2 q.t_i): one-hot on the point furthest along q. The rounding of |q|^2
    # hid that from 1e16 on (class frequencies), and 1e160 overflowed (uniform); one
    # huge query must not change the other rows of the batch
    from kernelkit.estimators import NadarayaWatsonClassifier

    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20, 2)), rng.integers(0, 3, 20)
    clf = NadarayaWatsonClassifier(exact=True).fit(X, y)
    near = np.array([[0.1, 0.2]])
    Q = np.array([[1e160, 1e160], [1e20, 1e20], [1e6, 1e6], [-1e300, 3e299]])
    P = clf.predict_proba(np.r_[Q, near])
    for q, p in zip(Q, P, strict=False):
        want = np.zeros(3)
        want[y[np.argmax((X - X.mean(axis=0)) @ q)]] = 1.0
        np.testing.assert_array_equal(p, want)
    np.testing.assert_allclose(P[-1], clf.predict_proba(near)[0], rtol=1e-14)
    np.testing.assert_allclose(P[-1], _nw_reference(X, y, near, 1.0, 3)[0], rtol=1e-12)


@pytest.mark.parametrize("s", [9e-6, 1.1e-5, 0.0])
def test_saderf_keeps_a_nearly_orthogonal_b_in_its_row_terms(s):
    # B B^T within 1e-5 of I was taken for a rotation (np.allclose's rtol): the row term
    # used |x|^2 for |B x|^2, a bias of (psi^2 - 1) |x|^2 / 2 that jumped at 1e-5
    from kernelkit.features import SADERF

    X = np.random.default_rng(0).standard_normal((100, 3))
    x = np.full((1, 3), 10.0)
    fm = SADERF(8, random_state=0).fit(X, Y=X * (1 + s))
    A, W = fm.A_[0], fm.projection_

    def gerf_log(u):  # GERF eq. of the transformed input (psi x, or y / psi)
        return (
            0.75 * np.log(1 - 4 * A)
            + A * np.sum(W**2, axis=1)
            + np.sqrt(1 - 4 * A) * u @ W.T
            - 0.5 * np.sum(u**2)
            - 0.5 * np.log(8)
        )

    np.testing.assert_allclose(fm.log_transform(x), gerf_log(x * fm.psi_), atol=1e-12)
    np.testing.assert_allclose(fm.log_transform_y(x), gerf_log(x / fm.psi_), atol=1e-12)


def test_moments_refuse_weights_that_do_not_sum_to_one():
    from kernelkit.features.favor import moments

    X = np.random.default_rng(0).standard_normal((6, 3))
    ok = moments(X, query_weights=np.full(6, 1 / 6), key_weights=np.full(6, 1 / 6))
    np.testing.assert_allclose(ok.mean_x, X.mean(axis=0), rtol=1e-12)
    with pytest.raises(ValueError, match=r"query_weights must sum to one.*got a sum of 6"):
        moments(X, query_weights=np.ones(6), key_weights=np.full(6, 1 / 6))
    with pytest.raises(ValueError, match="key_weights must sum to one"):
        moments(X, query_weights=np.full(6, 1 / 6), key_weights=np.full(6, 0.1))
    # all zero: a fully padded sequence (of a batch), which adds nothing
    moments(X[None].repeat(2, 0), key_weights=np.stack([np.full(6, 1 / 6), np.zeros(6)]))
    # float32 weights normalised in float32 pass
    w = np.random.default_rng(1).random(6).astype(np.float32)
    moments(X, key_weights=w / w.sum())


def test_gerf_with_a_float32_a_fits_without_warnings():
    from kernelkit.features import GERF
    from kernelkit.features.favor import fit_derf

    X = np.full((3, 2), 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "overflow encountered in cast" of the bound
        a32 = GERF(A=np.float32(-0.5), random_state=0).fit(X).transform(X)
    np.testing.assert_array_equal(a32, GERF(A=-0.5, random_state=0).fit(X).transform(X))
    with pytest.raises(ValueError, match=r"A.*range \[-1e\+300"):
        GERF(A=-1e301).fit(X)
    with pytest.raises(ValueError, match="needs dim"):
        fit_derf("positive", None)


def _filtered_dask(*arrays, seed=0):
    # Dask arrays filtered by one boolean mask: unknown row-chunk sizes
    da = pytest.importorskip("dask.array")
    n = len(arrays[0])
    keep = np.random.default_rng(seed).random(n) > 0.3
    kd = da.from_array(keep, chunks=50)
    out = [da.from_array(a, chunks=(50, *a.shape[1:]))[kd] for a in arrays]
    assert all(np.isnan(o.chunks[0][0]) for o in out)
    return keep, out


def test_joint_distribution_scores_a_filtered_dask_1d_y():
    # _shape_for's reshape(-1, 1) needed known chunk sizes: "cannot convert float NaN"
    from kernelkit.distributions import JointDistribution

    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 2))
    y = X[:, 0] + 0.1 * rng.standard_normal(200)
    keep, (Xd, yd) = _filtered_dask(X, y)
    jd = JointDistribution(lengthscale_x=0.6, lengthscale_y=0.6, reg=1e-4, random_state=0)
    jd.fit(X, y)
    want = jd.validation_loss(X[keep], y[keep])
    np.testing.assert_allclose(jd.validation_loss(Xd, yd), want, rtol=1e-10)
    np.testing.assert_allclose(
        np.asarray(jd.conditional_weights(yd, given="y")),
        jd.conditional_weights(y[keep], given="y"),
        rtol=1e-10,
        atol=1e-14,
    )


def test_conditional_expectation_of_a_filtered_dask_f():
    # f with unknown chunk sizes was refused ("expected first dimension 135, got (nan, 1)")
    from kernelkit.distributions import JointDistribution

    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 2))
    Y = X[:, :1] + 0.1 * rng.standard_normal((200, 1))
    _, (Xd, Yd) = _filtered_dask(X, Y)
    jd = JointDistribution(lengthscale_x=0.6, lengthscale_y=0.6, reg=1e-4, random_state=0)
    jd.fit(Xd, Yd)
    got = jd.conditional_expectation(Yd, X[:2])
    want = jd.conditional_expectation(lambda t: t, X[:2])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10)


def test_gp_classifier_keeps_the_label_dtype_on_chunked_input():
    # classes_ were rebuilt from Python scalars: object labels became '<U1' or int64 (and
    # object numbers, which scikit-learn refuses in memory, were accepted)
    da = pytest.importorskip("dask.array")
    from kernelkit.estimators import RandomFeatureGPClassifier
    from kernelkit.features import RandomFourierFeatures

    X = np.random.default_rng(0).standard_normal((60, 3))
    lab = (X[:, 0] > 0).astype(int)

    def make():
        return RandomFeatureGPClassifier(
            RandomFourierFeatures(n_features=8, random_state=0), random_state=0
        )

    Xd = da.from_array(X, chunks=(20, 3))
    for y in (np.array(["a", "bb"], dtype=object)[lab], np.array([3, 7])[lab]):
        ref = make().fit(X, y).classes_
        for fitted in (make().fit(Xd, y), make().fit([(X[:30], y[:30]), (X[30:], y[30:])], None)):
            assert fitted.classes_.dtype == ref.dtype
            np.testing.assert_array_equal(fitted.classes_, ref)
    numbers_as_objects = np.array([1, 2], dtype=object)[lab]
    with pytest.raises(ValueError, match="Unknown label type"):
        make().fit(X, numbers_as_objects)
    with pytest.raises(ValueError, match="Unknown label type"):
        make().fit(Xd, numbers_as_objects)


def test_score_of_filtered_dask_inputs():
    # scikit-learn's mixin score called len() on unknown chunk sizes
    from kernelkit.estimators import (
        NadarayaWatsonClassifier,
        RandomFeatureGPClassifier,
        RandomFeatureGPRegressor,
        RandomFeatureRidge,
    )
    from kernelkit.features import RandomFourierFeatures

    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    y = X[:, 0] + 0.1 * rng.standard_normal(200)
    lab = (y > 0).astype(int)
    w = rng.random(200)
    for est, t in (
        (RandomFeatureRidge(RandomFourierFeatures(n_features=8, random_state=0)), y),
        (RandomFeatureGPRegressor(RandomFourierFeatures(n_features=8, random_state=0)), y),
        (RandomFeatureGPClassifier(random_state=0), lab),
        (NadarayaWatsonClassifier(), lab),
    ):
        est.fit(X, t)
        keep, (Xd, td, wd) = _filtered_dask(X, t, w)
        assert est.score(Xd, td) == pytest.approx(est.score(X[keep], t[keep]), rel=1e-12)
        got = est.score(Xd, td, sample_weight=wd)
        assert got == pytest.approx(est.score(X[keep], t[keep], sample_weight=w[keep]), rel=1e-12)


@pytest.mark.parametrize(
    "name", ["TensorSketch", "RademacherSketch", "TensorSRHT", "GaussianSketch"]
)
def test_log_relative_variance_at_an_exact_kernel_zero_is_inf_on_every_backend(name):
    # x.y == 0 exactly: the unit rows' product rounded to 2.4e-17 in NumPy (0 in torch), a
    # log ratio of 150 there and inf in torch
    import kernelkit.features as F

    x, y = np.array([[1.0, 2.0, 1.0]]), np.array([[1.0, 0.0, -1.0], [1.0, 1.0, 0.0]])
    fm = getattr(F, name)(n_features=8, random_state=0).fit(x)
    assert fm.exact_kernel(x, y)[0, 0] == 0
    got = fm.log_relative_variance(x, y)
    assert got[0, 0] == np.inf and np.isfinite(got[0, 1])
    torch = pytest.importorskip("torch")
    got_t = fm.log_relative_variance(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    np.testing.assert_allclose(got_t, got, rtol=1e-12)


@pytest.mark.parametrize("a", [1e-170, 1e-300, 1e250])
def test_normalize_y_scales_the_predictive_std_with_tiny_and_huge_targets(a):
    # the squares of the deviations underflowed: sd 0, the target taken for constant and
    # scaled by 1, the std 1e170 times too large (in memory and chunked)
    from kernelkit.estimators import RandomFeatureGPRegressor
    from kernelkit.features import TensorSRHT

    rng = np.random.default_rng(0)
    X, y, Xs = rng.standard_normal((12, 3)), rng.standard_normal(12), rng.standard_normal((2, 3))
    w = rng.random(12)
    fm = TensorSRHT(n_features=16, degree=2, coef0=1, random_state=0)

    def fits(t):
        return [
            RandomFeatureGPRegressor(fm, normalize_y=True).fit(X, t),
            RandomFeatureGPRegressor(fm, normalize_y=True).fit(
                [(X[:5], t[:5]), (X[5:], t[5:])], None
            ),
            RandomFeatureGPRegressor(fm, normalize_y=True).fit(X, t, sample_weight=w),
        ]

    for ref, got in zip(fits(y), fits(a * y), strict=True):
        m0, s0 = ref.predict(Xs, return_std=True)
        m1, s1 = got.predict(Xs, return_std=True)
        np.testing.assert_allclose(m1 / a, m0, rtol=1e-10)
        np.testing.assert_allclose(s1 / a, s0, rtol=1e-10)
    # a constant target is still scaled by 1
    const = RandomFeatureGPRegressor(fm, normalize_y=True).fit(X, np.full(12, a))
    assert const._y_std[0] == 1.0


def test_block_labels_given_as_mixed_lists_are_refused():
    # a block's list of ints and strings became an array of strings before the check
    from kernelkit.estimators import RandomFeatureGPClassifier

    X = np.random.default_rng(0).standard_normal((8, 2))
    blocks = [(X[:4], [1, "a", 1, "a"]), (X[4:], [1, "a", 1, "a"])]
    with pytest.raises(TypeError, match=r"block 0: y: class labels must be of one type"):
        RandomFeatureGPClassifier(random_state=0).fit(iter(blocks), None)
    ok = [(X[:4], [1, 2, 1, 2]), (X[4:], [1, 2, 1, 2])]
    clf = RandomFeatureGPClassifier(random_state=0).fit(iter(ok), None)
    assert clf.classes_.dtype.kind == "i"


def test_moments_refuse_torch_weights_that_do_not_sum_to_one():
    torch = pytest.importorskip("torch")
    from kernelkit.features.favor import moments

    X = torch.tensor(np.random.default_rng(0).standard_normal((6, 3)))
    with pytest.raises(ValueError, match="key_weights must sum to one"):
        moments(X, key_weights=torch.ones(6, dtype=torch.float64))
    # bfloat16 weights normalised in bfloat16 carry its rounding (sum 1.002)
    moments(X.bfloat16(), key_weights=torch.full((6,), 1 / 6, dtype=torch.bfloat16))


@pytest.mark.parametrize("s", [1.0, 1e-170, 1e-5, 1e150])
def test_log_relative_variance_stays_scale_free_with_its_kernel_zeros(s):
    # the zero test on x.y itself underflowed for rows of 1e-170 (every pair inf); the
    # unit rows' product within its rounding is the zero, at every scale and backend
    from kernelkit.features import TensorSketch

    x = np.array([[1.0, 2.0, 1.0]])
    y = np.array([[1.0, 1.0, 0.0], [2.0, -1.0, 0.5], [1.0, 0.0, -1.0]])
    fm = TensorSketch(n_features=8, random_state=0).fit(x)
    ref = fm.log_relative_variance(x, y)
    got = fm.log_relative_variance(s * x, s * y)
    np.testing.assert_allclose(got[0, :2], ref[0, :2], rtol=1e-12)
    assert got[0, 2] == np.inf and np.all(np.isfinite(ref[0, :2]))


def test_normalize_y_scale_ignores_zero_weight_rows_and_constant_blocks():
    # the scale of the deviations came from every row, a zero-weight outlier included
    # (the others' squares underflowed: std 1), and a constant or one-row block's scale
    # of 1 set the merged scale (std 1 on Dask and blocks)
    da = pytest.importorskip("dask.array")
    from kernelkit.estimators import RandomFeatureGPRegressor
    from kernelkit.features import TensorSRHT

    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 3))
    fm = TensorSRHT(n_features=16, degree=2, coef0=1, random_state=0)

    def std(*args, **kw):
        return RandomFeatureGPRegressor(fm, normalize_y=True).fit(*args, **kw)._y_std[0]

    y = 1e-100 * rng.standard_normal(12)
    w = rng.random(12)
    w[0] = 0.0
    y_out = y.copy()
    y_out[0] = 1e70  # dropped by its zero weight
    want = std(X[1:], y[1:], sample_weight=w[1:])
    assert std(X, y_out, sample_weight=w) == pytest.approx(want, rel=1e-12)
    Xd, yd, wd = (da.from_array(a, chunks=4) for a in (X, y_out, w))
    assert std(Xd, yd, sample_weight=wd) == pytest.approx(want, rel=1e-12)
    y = 1e-200 * rng.standard_normal(12)
    want = std(X, y)
    assert std([(X[:1], y[:1]), (X[1:], y[1:])], None) == pytest.approx(want, rel=1e-12)
    assert std(da.from_array(X, chunks=11), da.from_array(y, chunks=11)) == pytest.approx(
        want, rel=1e-12
    )
    y[6:] = y[6]  # a constant block
    assert std(da.from_array(X, chunks=6), da.from_array(y, chunks=6)) == pytest.approx(
        std(X, y), rel=1e-12
    )


def test_text_columns_of_keys_are_named_by_the_maps_and_random_features():
    # RandomFeatures' keys lost the column name when checked as the maps check them; the
    # maps never named it
    import pandas as pd

    from kernelkit.estimators import RandomFeatures
    from kernelkit.features import GERF

    df = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [0.5, 1.0, 2.0, 3.0]})
    bad = df.assign(b=["u", "v", "w", "z"])
    for est in (GERF(8, random_state=0), RandomFeatures(method="gerf", n_components=8)):
        est.fit(df)
        with pytest.raises(TypeError, match=r"^Y must be numeric; column 'b'"):
            est.transform_y(bad)
        with pytest.raises(TypeError, match=r"^X must be numeric; column 'b'"):
            est.transform(bad)
