"""RandomFeatures(method="auto"): the reported estimates and the choice against Monte Carlo."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kernelkit.estimators import RandomFeatures


def _two_far_clusters(sep):
    rng = np.random.default_rng(0)
    return np.r_[
        0.3 * rng.normal(size=(20, 2)) + sep,
        0.3 * rng.normal(size=(20, 2)) - sep,
    ]


def test_auto_maclaurin_pairs_where_the_kernel_underflows_are_not_dropped():
    """Two clusters at +-(30, 30): across them the Gaussian kernel, exp(-3600), and the
    Maclaurin maps' expected kernel (their truncated series times exp(-|x|^2/2 - |y|^2/2))
    both underflow to 0, so the ratio E K_hat / K of their squared relative bias is
    0/0. The true ratio is about poly(x.y) exp(1800), an astronomical bias, not a pair to
    leave out for them alone (every other candidate is ranked on it). Leaving it out
    reported 1.0 for "random_maclaurin" (its within-cluster error: a map of zeros) and
    chose it."""
    X = _two_far_clusters(30.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rf = RandomFeatures(method="auto", kernel="gaussian", n_components=64, random_state=0).fit(
            X
        )
    est = rf.variance_estimates_
    assert rf.method_ not in ("random_maclaurin", "optimized_maclaurin")
    assert est["random_maclaurin"] > est[rf.method_]
    # the chosen map estimates the kernel: its features are not all zero
    assert np.abs(rf.transform(X)).max() > 0


# ------------------------------------------------- the estimates and the choice against MC
SEEDS = 100


def _data(kind, d, n=20):
    """The data set's shape, scaled to rows of norm at most 0.5: there the relative error
    of one draw has a moderate variance for every candidate (the positive maps' second
    moment grows like exp(|x + y|^2); at |x + y| ~ 2 a hundred draws miss the tail that
    makes the mean, and Monte Carlo reads a fraction of the true value)."""
    rng = np.random.default_rng(d)
    if kind == "isotropic":
        X = rng.normal(size=(n, d))
    elif kind == "anisotropic":  # column scales 1 ... 100
        X = rng.normal(size=(n, d)) * np.geomspace(1.0, 100.0, d)
    elif kind == "clustered":
        centres = rng.normal(size=(3, d))
        X = centres[rng.integers(0, 3, n)] + 0.1 * rng.normal(size=(n, d))
    elif kind == "heavy_tailed":  # Student t with 2 degrees of freedom
        X = rng.standard_t(2, size=(n, d))
    else:  # on the sphere
        X = rng.normal(size=(n, d))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    return 0.5 * X / np.linalg.norm(X, axis=1).max()


def _monte_carlo(rf, X):
    """method -> (mean, standard error) over SEEDS draws of the mean relative squared
    error of approx_kernel on the distinct pairs of X, the quantity "auto" estimates."""
    off = ~np.eye(len(X), dtype=bool)
    out = {}
    for name in rf.variance_estimates_:
        errs = []
        for seed in range(1, SEEDS + 1):
            fm = rf._make_map(name, seed).fit(X)
            K = fm.exact_kernel(X)
            errs.append((((fm.approx_kernel(X) - K) / K) ** 2)[off].mean())
        errs = np.asarray(errs)
        out[name] = (errs.mean(), errs.std(ddof=1) / np.sqrt(SEEDS))
    return out


CASES = [
    (kernel, kind, d, D)
    for kernel in ("gaussian", "softmax", "polynomial")
    for kind in ("isotropic", "anisotropic", "clustered", "heavy_tailed", "unit_norm")
    for d, D in ((2, 16), (64, 256))
] + [("gaussian", "isotropic", 8, 1024), ("polynomial", "clustered", 8, 1024)]


@pytest.mark.parametrize(("kernel", "kind", "d", "D"), CASES)
def test_auto_estimates_and_choice_agree_with_monte_carlo(kernel, kind, d, D):
    """Each reported estimate is the Monte Carlo mean relative squared error of its map
    within 5 standard errors of that mean (the mean of SEEDS independent draws is normal
    to a good approximation where, as on these data, one draw's error has a moderate
    variance; 5 of its standard errors leave a two-sided chance below 1e-6 per
    candidate), and the chosen map is the Monte Carlo best up to 5 standard errors of the
    difference of two means: a choice whose error exceeds another's by more is a wrong
    one (the old bound, the sum of the two standard errors, is about 1.4 standard errors
    of the difference, which two maps of near-equal error cross on some draws)."""
    X = _data(kind, d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # hybrid / Maclaurin widths
        rf = RandomFeatures(method="auto", kernel=kernel, n_components=D, random_state=0)
        rf.fit(X)
        mc = _monte_carlo(rf, X)
    for name, est in rf.variance_estimates_.items():
        mean, se = mc[name]
        assert abs(est - mean) <= 5 * se, (name, est, mean, se)
    # the chosen map's Monte Carlo error exceeds no other candidate's by more than 5
    # standard errors of the difference of the two means, sqrt(se_c^2 + se_o^2) (one-sided,
    # p < 3e-7 for each of the <= 9 candidates; maps drawn from the same seeds are if
    # anything positively correlated, which only makes the bound conservative)
    chosen = rf.method_
    for name, (mean, se) in mc.items():
        gap = mc[chosen][0] - mean
        assert gap <= 5 * np.hypot(mc[chosen][1], se), (chosen, name, mc)


@pytest.mark.parametrize("kernel", ["gaussian", "softmax"])
def test_auto_maclaurin_estimates_include_the_truncation_bias(kernel):
    """Rows of norm 2 (|x.y| up to 4, where a truncated exp series is far off): the
    Maclaurin maps' estimates include the bias of their truncated series, which "auto"
    adds to their variance, and "auto" does not choose them there.

    One draw's relative squared error is heavy-tailed here (over 12 000 seeds its mean is
    264 +- 41 against the estimate 309 for one map), so the sample spread of SEEDS draws
    does not bound the Monte Carlo mean of the squared errors. The checks are instead:
    the estimate is the mean over the pairs of Var / K^2 + (E / K - 1)^2 from the map's
    own ``variance`` and ``expected_kernel`` (the bias included); the Monte Carlo mean of
    the estimates is ``expected_kernel``, pair by pair, with the standard error
    sqrt(Var / SEEDS) from the analytic variance (not the sample's)."""
    X = 4.0 * _data("isotropic", 4)
    off = ~np.eye(len(X), dtype=bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rf = RandomFeatures(method="auto", kernel=kernel, n_components=64, random_state=0)
        rf.fit(X)
        for name in ("random_maclaurin", "optimized_maclaurin"):
            est = []
            for seed in range(1, SEEDS + 1):
                fm = rf._make_map(name, seed).fit(X)
                est.append(fm.approx_kernel(X)[off])
            K, E, V = fm.exact_kernel(X)[off], fm.expected_kernel(X)[off], fm.variance(X)[off]
            # the moments of a fit on these rows do not depend on its seed
            other = rf._make_map(name, SEEDS + 1).fit(X)
            np.testing.assert_allclose(other.variance(X)[off], V, rtol=1e-9)
            np.testing.assert_allclose(other.expected_kernel(X)[off], E, rtol=1e-9)
            bias2, rel_var = (E / K - 1.0) ** 2, V / K**2
            np.testing.assert_allclose(
                rf.variance_estimates_[name], np.mean(rel_var + bias2), rtol=1e-9
            )
            # the mean of SEEDS estimates per pair, 380 pairs: two-sided 5 SE (p < 6e-7
            # each for a normal mean); the SE is the analytic one
            z = (np.mean(est, 0) - E) / np.sqrt(V / SEEDS)
            assert np.abs(z).max() < 5.0, (name, np.abs(z).max())
    assert rf.method_ not in ("random_maclaurin", "optimized_maclaurin")


def test_auto_is_deterministic_and_reads_every_row_of_a_small_sample():
    """The same random_state gives the same sample, choice, estimates and features (those
    of the chosen method fitted by name with that seed); an auto_sample_size above n reads
    all n rows, as auto_sample_size = n does."""
    X = _data("anisotropic", 6, n=30)

    def fit(**kw):
        return RandomFeatures(method="auto", n_components=32, random_state=4, **kw).fit(X)

    a, b = fit(auto_sample_size=12), fit(auto_sample_size=12)  # 12 of the 30 rows
    assert a.method_ == b.method_ and a.variance_estimates_ == b.variance_estimates_
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    named = RandomFeatures(method=a.method_, n_components=32, random_state=4).fit(X)
    np.testing.assert_array_equal(a.transform(X), named.transform(X))
    assert (
        fit(auto_sample_size=1000).variance_estimates_
        == fit(auto_sample_size=30).variance_estimates_
    )


def test_auto_sparse_and_keys_rank_the_same_pairs_as_dense_data():
    """Sparse X: only the projection maps are candidates, with the estimates they have on
    the same rows dense (the same seed and sample). With Y: every map is a candidate and
    the estimates are over all pairs (x, y) of the two samples, so for a symmetric map
    Y = X adds the diagonal pairs to the distinct pairs of the fit without Y."""
    import scipy.sparse as sp

    X = _data("clustered", 5, n=24)
    X[np.abs(X) < 0.05] = 0.0
    dense = RandomFeatures(method="auto", n_components=32, random_state=1).fit(X)
    sparse = RandomFeatures(method="auto", n_components=32, random_state=1).fit(sp.csr_matrix(X))
    assert set(sparse.variance_estimates_) == {"trig", "positive", "hyperbolic", "rff"} | {
        "random_maclaurin",
        "optimized_maclaurin",
    }
    for name, est in sparse.variance_estimates_.items():
        # the same float operations on the same rows, up to the sparse product's order
        np.testing.assert_allclose(est, dense.variance_estimates_[name], rtol=1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # hybrid widths above 32
        keys = RandomFeatures(method="auto", n_components=32, random_state=1).fit(X, Y=X)
    assert {"saderf", "aderf", "hybrid_angular"} <= set(keys.variance_estimates_)
    n = len(X)
    fm = RandomFeatures(method="positive", n_components=32).fit(X).feature_map_
    diagonal = np.exp(np.diag(fm.log_relative_variance(X))).sum()
    # mean over n^2 pairs = (mean over n(n-1) distinct pairs * n(n-1) + diagonal) / n^2
    expected = (dense.variance_estimates_["positive"] * n * (n - 1) + diagonal) / n**2
    np.testing.assert_allclose(keys.variance_estimates_["positive"], expected, rtol=1e-10)
