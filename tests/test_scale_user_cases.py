"""Memory at scale, as a user with big data on a small machine sees it.

Peak memory is measured with ``tracemalloc`` (NumPy reports its buffers to it); each
bound is derived from the output's size and the library's block sizes, never from a
timing. The pairwise methods and predictions are checked against the same computation
in one piece on small inputs.
"""

from __future__ import annotations

import tracemalloc
import warnings
from unittest import mock

import numpy as np
import pytest

from kernelkit._backend.chunks import SLAB_ELEMENTS
from kernelkit.distributions import KernelLogisticRegression
from kernelkit.estimators import (
    NadarayaWatsonClassifier,
    RandomFeatureGPClassifier,
    RandomFeatureGPRegressor,
    RandomFeatureRidge,
    _chunked,
    gp,
)
from kernelkit.features import (
    SDERF,
    AngularHybridRF,
    ClusteredHybridRF,
    ComplexExponentialRF,
    GaussianHybridRF,
    RandomFourierFeatures,
    RandomMaclaurin,
    SphericalRandomFeatures,
    TensorSketch,
)
from kernelkit.features._base import PAIR_BLOCK_ELEMENTS, PAIR_MIN_ROWS, PAIR_ONE_CALL_ELEMENTS

MB = 1 << 20


def _peak(fn):
    """``(fn(), peak bytes traced while it ran)``."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out, peak


def _rows(n, d, seed, scale=0.3):
    return scale * np.random.default_rng(seed).standard_normal((n, d)) / np.sqrt(d)


MAPS = {
    "SDERF": lambda: SDERF(n_features=32, kernel="gaussian", random_state=0),
    "RandomFourierFeatures": lambda: RandomFourierFeatures(n_features=32, random_state=0),
    "RandomFourierFeatures-complex": lambda: RandomFourierFeatures(
        n_features=32, complex=True, random_state=0
    ),
    "RandomMaclaurin": lambda: RandomMaclaurin(n_features=32, random_state=0),
    "TensorSketch": lambda: TensorSketch(n_features=32, random_state=0),
    "SphericalRandomFeatures": lambda: SphericalRandomFeatures(n_features=32, random_state=0),
    "AngularHybridRF": lambda: AngularHybridRF(n_features=8, n_lambda=4, random_state=0),
    "GaussianHybridRF": lambda: GaussianHybridRF(n_features=8, n_lambda=4, random_state=0),
    "ClusteredHybridRF": lambda: ClusteredHybridRF(
        n_features=8, n_lambda=4, n_init=1, random_state=0
    ),  # fitted on 300 rows (k-means), below
}


def _pair_bound(n, m, temporaries):
    """The output (n, m) float64 plus ``temporaries`` arrays of one row block (the maps'
    variances hold up to about 30 of them at once; before blocking, as many (n, m)
    arrays) and 2 MB for the inputs, the features and the interpreter."""
    rows = max(PAIR_MIN_ROWS, PAIR_BLOCK_ELEMENTS // m)
    return 8 * n * m + temporaries * 8 * rows * m + 2 * MB


@pytest.fixture
def one_thread(monkeypatch):
    # one block (slab) in flight at a time, so the bound counts one block's temporaries
    monkeypatch.setenv("KERNELKIT_NUM_THREADS", "1")


@pytest.mark.parametrize("name", list(MAPS))
def test_variance_of_large_x_holds_its_temporaries_per_row_block(name, one_thread):
    X, Y = _rows(2000, 6, 1), _rows(800, 6, 2)
    fm = MAPS[name]().fit(X[:300])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a hybrid's variance formula warnings, if any
        V, peak = _peak(lambda: fm.variance(X, Y))
        L, peak_log = _peak(lambda: fm.log_relative_variance(X, Y))
    assert V.shape == L.shape == (2000, 800)
    # 54 MB (the blocked variances take 18 to 41 MB); the (n, m) temporaries took 61 MB
    # (complex random Fourier features) to 343 MB (the hybrids) for the 12 MB output
    bound = _pair_bound(2000, 800, 40)
    assert peak < bound, (peak / MB, bound / MB)
    assert peak_log < bound, (peak_log / MB, bound / MB)


@pytest.mark.parametrize("name", list(MAPS))
def test_blocked_pairwise_methods_equal_one_block(name):
    # more rows than one block, each block against every Y row: the values of the
    # unblocked computation up to the rounding of the block products (BLAS may sum the
    # d terms of a block in another order: a few eps relative, amplified by the log-space
    # terms of size < 50 to well below 1e-10 relative)
    X, Y = _rows(2000, 5, 3, scale=0.5), _rows(300, 5, 4, scale=0.5)
    fm = MAPS[name]().fit(X[:300])
    Xp, Yp, xp = fm._check_pair(X, Y)
    assert X.shape[0] > max(PAIR_MIN_ROWS, PAIR_BLOCK_ELEMENTS // 300)
    assert X.shape[0] * Y.shape[0] > PAIR_ONE_CALL_ELEMENTS  # several blocks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pairs = [
            (fm.variance(X, Y), fm._variance(Xp, Yp, xp)),
            (fm.log_relative_variance(X, Y), fm._log_relative_variance(Xp, Yp, xp)),
            (fm.exact_kernel(X, Y), fm._exact_kernel(Xp, Yp, xp)),
        ]
        if fm.is_complex:
            pairs.append((fm.complex_variance(X, Y), fm._complex_variance(Xp, Yp, xp)))
    for blocked, whole in pairs:
        assert blocked.dtype == whole.dtype
        finite = np.isfinite(whole)
        np.testing.assert_array_equal(np.isfinite(blocked), finite)
        scale = np.max(np.abs(whole[finite]))
        np.testing.assert_allclose(blocked[finite], whole[finite], rtol=1e-10, atol=1e-13 * scale)


@pytest.mark.parametrize(
    ("name", "temporaries"),
    [("SDERF", 4), ("RandomFourierFeatures-complex", 4), ("AngularHybridRF", 24)],
)
def test_approx_kernel_of_large_x_is_about_its_output(name, temporaries, one_thread):
    X, Y = _rows(2000, 6, 5), _rows(800, 6, 6)
    fm = MAPS[name]().fit(X)
    K, peak = _peak(lambda: fm.approx_kernel(X, Y))
    assert K.shape == (2000, 800) and K.dtype == np.float64
    # the output and a few block temporaries (the scales and their exp; the hybrid's
    # ~16 components): 18 MB (hybrid: 38 MB), where the (n, m) scale, its exp and the
    # product (complex: the two part products; the hybrid: ~15 (n, m) arrays) took 2.1x
    # to 15x the 12 MB output
    bound = _pair_bound(2000, 800, temporaries)
    assert peak < bound, (peak / MB, bound / MB)


def test_approx_kernel_float32_stays_float32_and_blocked_equals_one_block():
    X, Y = _rows(2000, 5, 7).astype(np.float32), _rows(300, 5, 8).astype(np.float32)
    for name in ("SDERF", "RandomFourierFeatures-complex", "AngularHybridRF"):
        fm = MAPS[name]().fit(X)
        K = fm.approx_kernel(X, Y)
        assert K.dtype == np.float32
        # the features' Gram matrix in one piece (float64, so the reference's own
        # rounding is negligible): float32 rounding of the D-term sums, ~1e-6 relative
        ref = np.real(
            fm.transform(X.astype(np.float64)) @ np.conj(fm.transform_y(Y.astype(np.float64))).T
        )
        np.testing.assert_allclose(K, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize(
    "name", ["AngularHybridRF", "GaussianHybridRF", "ClusteredHybridRF", "ComplexExponentialRF"]
)
def test_hybrid_transform_of_many_rows_is_about_its_output(name, one_thread):
    X = _rows(60_000, 6, 9)
    make = MAPS.get(name, lambda: ComplexExponentialRF(n_features=32, random_state=0))
    fm = make().fit(X[:300])
    Z, peak = _peak(lambda: fm.transform(X))
    # the output and about ten temporaries of one row block of 2^17 features (the
    # blocks, their scaled copies, the concatenation): 1 MB each; the whole (n, D)
    # blocks, copies and concatenation took 2.3x (clustered) to 3.2x the output
    assert Z.shape[0] == 60_000 and Z.dtype == np.float64
    bound = Z.nbytes + 10 * 8 * PAIR_BLOCK_ELEMENTS + 2 * MB
    assert peak < bound, (peak / MB, bound / MB)
    # row blocks: the same features as the rows in one piece, to BLAS's rounding
    np.testing.assert_allclose(Z[:500], fm.transform(X[:500]), rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------------- estimators
SLAB = _chunked._SLAB_BYTES


def _regression(n, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)


def _fm():
    return RandomFourierFeatures(n_features=256, random_state=0)


def test_ridge_and_gp_predict_on_a_large_batch_hold_one_slab_of_features(one_thread):
    X, y = _regression(2000)
    Xbig = _regression(40_000, seed=1)[0]  # all features: 40 000 x 256 x 8 = 82 MB
    ridge = RandomFeatureRidge(_fm(), alpha=1.0).fit(X, y)
    gpr = RandomFeatureGPRegressor(_fm(), noise=0.1).fit(X, y)
    # one slab of features, the transform's temporaries of it (about as large) and the
    # outputs (40 000 x 8 bytes each): ~17 MB, where the whole feature matrix took 82 MB
    bound = 2 * SLAB + 4 * 8 * len(Xbig) + MB
    pred, peak = _peak(lambda: ridge.predict(Xbig))
    assert peak < bound, (peak / MB, bound / MB)
    (mean, std), peak_gp = _peak(lambda: gpr.predict(Xbig, return_std=True))
    assert peak_gp < bound, (peak_gp / MB, bound / MB)
    # the same values as the features in one piece (slabs of rows: the products of
    # each row unchanged up to BLAS's summation order, ~1e-15 relative)
    Phi = ridge.feature_map_.transform(Xbig[:3000])
    np.testing.assert_allclose(pred[:3000], Phi @ ridge.coef_ + ridge.intercept_, rtol=1e-10)
    m1, s1 = gpr.predict(Xbig[:3000], return_std=True)
    np.testing.assert_allclose(mean[:3000], m1, rtol=1e-12)
    np.testing.assert_allclose(std[:3000], s1, rtol=1e-12)
    assert pred.shape == mean.shape == std.shape == (len(Xbig),)


def test_gp_classifier_fits_and_predicts_a_slab_of_features_at_a_time(one_thread):
    X, _ = _regression(17_000)
    y = np.where(X[:, 0] > 0, "up", "down")

    def make():
        return RandomFeatureGPClassifier(_fm(), random_state=0, n_jobs=1)

    clf, peak = _peak(lambda: make().fit(X, y))
    # n x D = 4.4M entries > STREAM_ENTRIES: the per-class sums over slabs, as the ridge's
    # blocked fit (a slab, its transform temporaries and the (D, D) Gram matrices:
    # ~25 MB), where the whole feature matrix and its per-class copies took 70 MB
    assert len(X) * 256 > _chunked.STREAM_ENTRIES
    bound = 2 * SLAB + 8 * 256 * 256 * 16 + MB
    assert peak < bound, (peak / MB, bound / MB)
    Xq = X[:10_000]  # five slabs; all their features: 20 MB
    _, peak_latent = _peak(lambda: clf.predict_latent(Xq))
    assert peak_latent < 1.5 * SLAB + 8 * 8 * len(Xq) + MB, peak_latent / MB
    # the same model as the features in one piece (sums in another order: round-off of
    # sums of 17 000 terms, ~1e-12 relative)
    with mock.patch.object(gp, "use_blocked_statistics", lambda *args: False):
        whole = make().fit(X, y)
    Xq = X[:500]
    for a, b in zip(clf.predict_latent(Xq), whole.predict_latent(Xq), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_nadaraya_watson_and_klr_predict_on_a_large_batch_hold_one_slab(one_thread):
    X, _ = _regression(3000)
    y = (X[:, 0] > 0).astype(int)
    Xbig = _regression(40_000, seed=2)[0]
    nw = NadarayaWatsonClassifier(n_components=256, random_state=0).fit(X, y)
    klr = KernelLogisticRegression(max_rank=200, random_state=0).fit(X, y)
    # the centred copy of X (1.3 MB), one slab of features (log features, their shifted
    # exp: 3 slabs) and (n, C) scores, where all features took 3 x 82 MB (NW) and the
    # (n, m) basis values 64 MB (KLR)
    bound = 3 * SLAB + 8 * 8 * len(Xbig) + 2 * MB
    p, peak = _peak(lambda: nw.predict_proba(Xbig))
    assert peak < bound, (peak / MB, bound / MB)
    # KLR: a slab of basis values and the kernel's temporaries of it (~4 such arrays)
    bound_klr = 5 * 8 * SLAB_ELEMENTS + 8 * len(Xbig) + 2 * MB
    d, peak_klr = _peak(lambda: klr.decision_function(Xbig))
    assert peak_klr < bound_klr, (peak_klr / MB, bound_klr / MB)
    # rows are independent: a prefix gives the same values (to BLAS's summation order)
    np.testing.assert_allclose(p[:1000], nw.predict_proba(Xbig[:1000]), rtol=1e-12)
    ref = klr.basis_.transform(Xbig[:1000]) @ klr.coef_
    np.testing.assert_allclose(d[:1000], ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


def test_predict_with_a_scikit_learn_feature_map_holds_one_slab(one_thread):
    # any transformer as the feature map (no output_dim): its width is read from one row
    from sklearn.kernel_approximation import RBFSampler

    X, y = _regression(2000)
    Xbig = _regression(40_000, seed=3)[0]
    ridge = RandomFeatureRidge(RBFSampler(n_components=256, random_state=0)).fit(X, y)
    pred, peak = _peak(lambda: ridge.predict(Xbig))
    # as for kernelkit's maps: a slab of features and its temporaries, plus the output
    bound = 2 * SLAB + 4 * 8 * len(Xbig) + MB
    assert peak < bound, (peak / MB, bound / MB)
    Phi = ridge.feature_map_.transform(Xbig[:3000])
    np.testing.assert_allclose(pred[:3000], Phi @ ridge.coef_ + ridge.intercept_, rtol=1e-10)


def test_gp_classifier_monte_carlo_blocks_do_not_change_the_probabilities():
    # row blocks on kernelkit's threads: each row's average over the same draws, so the
    # same bits whatever the block size and the threads
    rng = np.random.default_rng(4)
    mean, var = rng.standard_normal((900, 3)), rng.random((900, 3))
    eps = rng.standard_normal((200, 3))
    one_block = gp.mc_softmax(mean, var, eps, max_elements=10**9)
    for n_jobs in (1, 2):
        blocked = gp.mc_softmax(mean, var, eps, max_elements=200 * 3 * 64, n_jobs=n_jobs)
        np.testing.assert_array_equal(blocked, one_block)
