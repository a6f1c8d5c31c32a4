"""JointDistribution on sampled pivots, Dask arrays, block iterables and a LocalCluster.

References: the exact (all-rows Algorithm 1) fit, explicit dense features of the sampled
basis, the NumPy fit of the same sample (for Dask / blocks / cluster, to round-off), and
the true conditional mean of a linear-Gaussian pair.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.distributions import JointDistribution
from kernelkit.distributions.joint import solve_low_rank

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

KW = {"lengthscale_x": 0.6, "lengthscale_y": 0.6, "reg": 1e-5, "rel_tol": 1e-3}
XQ = np.array([[-1.2, 0.3], [0.0, 0.0], [0.9, -0.5], [1.5, 1.0]])


def _data(n=6000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    Y = 0.8 * X[:, :1] + 0.6 * rng.standard_normal((n, 1))
    return X, Y


def _outputs(model, X, Y):
    """Model outputs that do not depend on the basis' internal rotation."""

    def val(a):
        return a.compute() if hasattr(a, "compute") else a

    Yt = model.Y_fit_
    return {
        "mean": val(model.conditional_expectation(Yt, XQ)),
        "second": val(model.conditional_expectation(lambda y: y**2, XQ)),
        "ratio": val(model.density_ratio(X[:200], Y[:200], grid=True)),
        "marginal": val(model.marginal_ratio(XQ)),
        "x_given_y": val(model.conditional_expectation(model.X_fit_, Y[:5], given="y")),
        "loss": model.validation_loss(X[:300], Y[:300]),
    }


def _assert_same(a, b, rtol=1e-8):
    for key in a:
        scale = max(np.abs(a[key]).max(), 1.0)
        np.testing.assert_allclose(b[key], a[key], rtol=0, atol=rtol * scale, err_msg=key)


@pytest.fixture(scope="module")
def data():
    return _data()


def test_dask_with_all_rows_as_pivot_sample_equals_exact_fit(data):
    X, Y = data
    exact = JointDistribution(**KW).fit(X, Y)
    Xd, Yd = da.from_array(X, chunks=(700, 2)), da.from_array(Y, chunks=(700, 1))
    with dask.config.set(scheduler="threads"):
        model = JointDistribution(pivot_sample=len(X), **KW).fit(Xd, Yd)
        np.testing.assert_array_equal(model.basis_x_.pivots_, exact.basis_x_.pivots_)
        assert model.pivot_rows_ is None
        # K B = L (18): the factor rebuilt per chunk from the pivots is Algorithm 1's
        np.testing.assert_allclose(
            model.basis_x_.eigenvalues_, exact.basis_x_.eigenvalues_, rtol=1e-8
        )
        np.testing.assert_allclose(model.coef_, exact.coef_, atol=1e-7 * np.abs(exact.coef_).max())
        _assert_same(_outputs(exact, X, Y), _outputs(model, X, Y), rtol=1e-7)


def test_sampled_statistics_match_explicit_features(data):
    """Eigenvalues, sums, trace residual and the solve, recomputed from dense A."""
    X, Y = data
    n = len(X)
    model = JointDistribution(pivot_sample=800, random_state=3, **KW).fit(X, Y)
    assert model.basis_x_.factor_t_ is None and len(model.pivot_rows_) == 800
    Ax = model.basis_x_.transform(X)  # (n, m_X): Psi at the training points
    Ay = model.basis_y_.transform(Y)
    lam_x = model.basis_x_.eigenvalues_
    np.testing.assert_allclose(Ax.T @ Ax, np.diag(lam_x), atol=1e-8 * lam_x.max())
    np.testing.assert_allclose(Ax.sum(axis=0), model.s_x_, atol=1e-8 * n)
    # Gaussian kernel: trace K = n, and trace(K - L L^T) = n - ||A||_F^2 (V orthogonal)
    assert model.basis_x_.trace_ == pytest.approx(n)
    assert model.basis_x_.trace_residual_ == pytest.approx(n - np.sum(Ax**2), rel=1e-6)
    H, _ = solve_low_rank(
        Ay.T @ Ax, Ax.sum(axis=0), Ay.sum(axis=0), lam_x, model.basis_y_.eigenvalues_, n, KW["reg"]
    )
    np.testing.assert_allclose(model.coef_, H, atol=1e-7 * np.abs(H).max())
    # the weights are the explicit (1 + A_Y H psi) / (n + s_Y^T H psi)
    psi = model.basis_x_.transform(XQ)
    w = (1 + Ay @ H @ psi.T) / (n + Ay.sum(axis=0) @ H @ psi.T)
    np.testing.assert_allclose(model.conditional_weights(XQ), w.T, atol=1e-12)


def test_sampled_pivots_estimate_the_conditional_mean_as_well_as_exact():
    X, Y = _data(n=20000, seed=1)
    X = X[:, :1]
    kw = dict(KW, lengthscale_x=0.5, lengthscale_y=0.5)
    xq = np.linspace(-1.5, 1.5, 31)[:, None]
    exact = JointDistribution(**kw).fit(X, Y)
    sampled = JointDistribution(pivot_sample=1000, random_state=0, **kw).fit(X, Y)
    err_exact = exact.conditional_expectation(Y, xq)[:, 0] - 0.8 * xq[:, 0]
    err_sampled = sampled.conditional_expectation(Y, xq)[:, 0] - 0.8 * xq[:, 0]
    rmse_exact, rmse_sampled = np.sqrt(np.mean(err_exact**2)), np.sqrt(np.mean(err_sampled**2))
    # sd of E[Y|x] from n = 2e4 points with noise 0.6 is ~0.01; both are at that level
    assert rmse_sampled < 1.5 * rmse_exact + 0.01
    assert rmse_sampled < 0.03


@pytest.mark.parametrize("constraint", [None, "normalized", "positive"])
def test_dask_and_blocks_equal_numpy_fit_of_the_same_sample(data, constraint):
    X, Y = data
    ref = JointDistribution(pivot_sample=900, random_state=7, constraint=constraint, **KW).fit(X, Y)
    want = _outputs(ref, X, Y)
    Xd, Yd = da.from_array(X, chunks=(1000, 1)), da.from_array(Y[:, 0], chunks=1300)
    with dask.config.set(scheduler="threads"):
        model = JointDistribution(
            pivot_sample=900, random_state=7, constraint=constraint, **KW
        ).fit(Xd, Yd)
        np.testing.assert_array_equal(model.pivot_rows_, ref.pivot_rows_)
        np.testing.assert_allclose(model.coef_, ref.coef_, atol=1e-9 * np.abs(ref.coef_).max())
        _assert_same(want, _outputs(model, X, Y))
    blocks = ((X[a : a + 512], Y[a : a + 512]) for a in range(0, len(X), 512))
    model_b = JointDistribution(pivot_sample=900, random_state=7, constraint=constraint, **KW).fit(
        blocks
    )
    _assert_same(want, _outputs(model_b, X, Y))
    if constraint == "positive":  # Lemma 4.3: 1 + h >= 0 on the training grid
        assert ref.density_ratio(X[:300], Y[:300], grid=True).min() >= -1e-9


def test_predictions_on_dask_arrays_stay_lazy(data):
    X, Y = data
    model = JointDistribution(pivot_sample=500, random_state=0, **KW).fit(X, Y)
    calls = []

    def rows(block):
        calls.append(len(block))
        return block

    Xn = da.from_array(np.repeat(XQ, 50, axis=0), chunks=(40, 2))
    Xn = Xn.map_blocks(rows, meta=np.empty((0, 0)))  # counts real block computations
    Yn = da.from_array(Y[:200], chunks=(40, 1))
    with dask.config.set(scheduler="threads"):
        lazy = {
            "mean": model.conditional_expectation(Y, Xn),
            "ratio": model.density_ratio(Xn, Yn),
            "marginal": model.marginal_ratio(Xn),
            "weights": model.conditional_weights(Xn),
            "prob": model.conditional_probability(lambda y: y[:, 0] <= 0, Xn),
        }
        assert calls == [] and all(isinstance(v, da.Array) for v in lazy.values())
        Xs = np.repeat(XQ, 50, axis=0)
        np.testing.assert_allclose(
            lazy["mean"].compute(), model.conditional_expectation(Y, Xs), atol=1e-12
        )
        np.testing.assert_allclose(
            lazy["ratio"].compute(), model.density_ratio(Xs, Y[:200]), atol=1e-12
        )
        np.testing.assert_allclose(lazy["marginal"].compute(), model.marginal_ratio(Xs), atol=1e-12)
        np.testing.assert_allclose(
            lazy["weights"].compute(), model.conditional_weights(Xs), atol=1e-14
        )
        np.testing.assert_allclose(
            lazy["prob"].compute(), model.conditional_probability(Y[:, 0] <= 0, Xs), atol=1e-12
        )
    assert sum(calls) >= len(Xs)


def test_exact_fit_predicts_lazily_on_dask(data):
    X, Y = data
    model = JointDistribution(**KW).fit(X[:2000], Y[:2000])
    Xn = da.from_array(XQ, chunks=(2, 2))
    with dask.config.set(scheduler="threads"):
        w = model.conditional_weights(Xn)
        assert isinstance(w, da.Array) and w.shape == (4, 2000)
        np.testing.assert_allclose(w.compute(), model.conditional_weights(XQ), atol=1e-14)
        np.testing.assert_allclose(
            model.conditional_expectation(Y[:2000], Xn).compute(),
            model.conditional_expectation(Y[:2000], XQ),
            atol=1e-12,
        )


@pytest.mark.slow
def test_local_cluster_fit_equals_in_memory_fit(cluster_client):
    X, Y = _data(n=8000, seed=2)
    ref = JointDistribution(pivot_sample=1500, random_state=0, **KW).fit(X, Y)
    with dask.config.set(scheduler=cluster_client):  # every pass on the two workers
        Xd, Yd = da.from_array(X, chunks=(1000, 2)), da.from_array(Y, chunks=(1000, 1))
        model = JointDistribution(pivot_sample=1500, random_state=0, **KW).fit(Xd, Yd)
        got = _outputs(model, X, Y)
        mean_lazy = model.conditional_expectation(Yd, da.from_array(XQ, chunks=(2, 2)))
        mean = mean_lazy.compute()
    np.testing.assert_allclose(model.coef_, ref.coef_, atol=1e-9 * np.abs(ref.coef_).max())
    _assert_same(_outputs(ref, X, Y), got)
    np.testing.assert_allclose(mean, ref.conditional_expectation(Y, XQ), atol=1e-10)


def test_bad_chunked_input_is_rejected(data):
    X, Y = data
    Xd = da.from_array(X, chunks=(1000, 2))
    with pytest.raises(ValueError, match="pivot_sample"):
        JointDistribution(pivot_sample=1).fit(X, Y)
    for bad in (2.5, True, "100"):
        with pytest.raises(TypeError, match="pivot_sample"):
            JointDistribution(pivot_sample=bad).fit(X, Y)
    with pytest.raises(ValueError, match="rows"):
        JointDistribution().fit(Xd, Y[:100])
    Xnan = X.copy()
    Xnan[4321, 1] = np.nan
    with (
        dask.config.set(scheduler="sync"),
        pytest.raises(ValueError, match="X: block 4 contains NaN"),
    ):
        JointDistribution(pivot_sample=100, random_state=0).fit(
            da.from_array(Xnan, chunks=(1000, 2)), Y
        )
    with pytest.raises(TypeError, match="real numbers"):
        JointDistribution().fit(da.from_array(X.astype(str), chunks=(1000, 2)), Y)
    with pytest.raises(ValueError, match="Y=None"):
        JointDistribution().fit(iter([(X, Y)]), Y)
    with pytest.raises(TypeError, match=r"\(X_block, Y_block\) pairs"):
        JointDistribution().fit(iter([X]))
    with pytest.raises(ValueError, match="empty"):
        JointDistribution().fit(iter([]))
    with pytest.raises(ValueError, match="columns"):
        JointDistribution().fit(iter([(X[:10], Y[:10]), (X[10:20, :1], Y[10:20])]))
    model = JointDistribution(pivot_sample=300, random_state=0, **KW).fit(X, Y)
    with pytest.raises(ValueError, match="3 features"):
        model.marginal_ratio(da.zeros((5, 3), chunks=(5, 3)))


def test_basis_cache_is_not_used_by_sampled_fits(data):
    from kernelkit.distributions import BasisCache

    X, Y = data
    cache = BasisCache()
    with pytest.warns(UserWarning, match="basis_cache is not used"):
        JointDistribution(pivot_sample=500, basis_cache=cache, **KW).fit(X, Y)
    assert cache.misses == 0 and len(cache) == 0
