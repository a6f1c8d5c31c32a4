"""Claims of the user guide (contract, scale, estimators, attention) checked against the
code, one test per claim that a review found false or that nothing else pinned down.

The executed examples of ``test_docs.py`` show that the code blocks run; these tests
check what the prose says around them.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from kernelkit.estimators import NadarayaWatsonClassifier, RandomFeatures


@pytest.mark.parametrize(
    ("estimator", "method"),
    [
        (RandomFeatures, "nope"),
        (NadarayaWatsonClassifier, "foo"),
        # a name of another estimator's list: not one the Nadaraya-Watson classifier takes
        (NadarayaWatsonClassifier, "hybrid_angular"),
    ],
)
def test_unknown_method_is_an_invalid_parameter_error(estimator, method):
    """contract.md, "Parameter validation": an unknown option string raises
    scikit-learn's InvalidParameterError (both a ValueError and a TypeError) whose
    message names the parameter and the values it accepts. ``method`` is checked by
    name (case-insensitive, with aliases), not by a StrOptions constraint."""
    X, y = np.eye(4), [0, 1, 1, 0]
    with pytest.raises(InvalidParameterError, match="'method' parameter") as info:
        estimator(method=method).fit(X, y)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert "sderf" in str(info.value)  # the values it accepts


def test_n_jobs_none_is_every_available_cpu_not_one(monkeypatch):
    """contract.md, "One name for each thing", and scale.md, "Threads": ``n_jobs=-1`` and
    ``k`` are scikit-learn's, but ``None`` is all the CPUs available (capped by
    ``KERNELKIT_NUM_THREADS``), not scikit-learn's one job."""
    from threadpoolctl import threadpool_limits

    from kernelkit._backend.parallel import _cpus, effective_n_jobs

    assert effective_n_jobs(3) == 3
    assert effective_n_jobs(-1) == _cpus()
    monkeypatch.setenv("KERNELKIT_NUM_THREADS", "3")
    assert effective_n_jobs(None) == 3  # scikit-learn's None would be 1
    monkeypatch.delenv("KERNELKIT_NUM_THREADS")
    with threadpool_limits(limits=1, user_api="blas"):  # a surrounding limit caps it
        assert effective_n_jobs(None) == 1
        assert effective_n_jobs(2) == 2  # an explicit count is not capped


def test_relu_and_elu_ignore_n_features():
    """attention.md, "Choosing the feature map": ``relu`` and ``elu`` have no random
    features, so ``n_features`` is unused and their feature dimension is ``d``."""
    torch = pytest.importorskip("torch")
    from kernelkit.attention import init_decoding_state, linear_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4, dtype=torch.float64) for _ in range(3))
    for name in ("relu", "elu"):
        for causal in (False, True):
            a = linear_attention(q, k, v, name, 16, is_causal=causal)
            b = linear_attention(q, k, v, name, 256, is_causal=causal)
            assert torch.equal(a, b)  # the same computation: bit for bit
        state = init_decoding_state((1, 2), 4, name, 256)
        assert state.kvz.shape == (1, 2, 4, 4 + 1)  # M = d = 4, e = d


def test_chunked_cme_and_klr_losses_reduce_over_the_chunks():
    """scale.md, "Conditional mean embeddings and kernel logistic regression": on Dask
    input the embedding's ``validation_loss`` and both models' ``score`` are numbers
    reduced over the chunks, equal to the in-memory ones. The embedding is the same
    model to round-off (rtol 1e-8: a few chunk sums of 300 rows); kernel logistic
    regression agrees to its L-BFGS tolerance (the page says about 1e-7 in
    probability, so 1e-5 on the mean log loss)."""
    da = pytest.importorskip("dask.array")
    from kernelkit.distributions import ConditionalMeanEmbedding, KernelLogisticRegression

    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 2))
    Y = 0.8 * X[:, :1] + 0.6 * rng.standard_normal((300, 1))
    Xd, Yd = da.from_array(X, chunks=(100, 2)), da.from_array(Y, chunks=(100, 1))
    kw = dict(pivot_sample=60, random_state=0)
    cme, cme_np = ConditionalMeanEmbedding(**kw).fit(Xd, Yd), ConditionalMeanEmbedding(**kw)
    cme_np.fit(X, Y)
    for method in ("validation_loss", "score"):
        value = getattr(cme, method)(Xd, Yd)
        assert isinstance(value, float)
        np.testing.assert_allclose(value, getattr(cme_np, method)(X, Y), rtol=1e-8)
    y = (X[:, 0] > 0).astype(int)
    klr = KernelLogisticRegression(**kw).fit(Xd, y)
    assert not hasattr(klr, "validation_loss")
    score = klr.score(Xd, y)
    assert isinstance(score, float)
    expected = KernelLogisticRegression(**kw).fit(X, y).score(X, y)
    np.testing.assert_allclose(score, expected, atol=1e-5)


@pytest.mark.parametrize(
    ("method", "kernels"),
    [("rff", {"gaussian"}), ("srf", {"polynomial"}), ("trig", {"gaussian", "softmax"})],
)
def test_random_features_method_kernels(method, kernels):
    """estimators.md, the list of ``RandomFeatures`` methods: ``"rff"`` estimates the
    Gaussian kernel only and ``"srf"`` is asked for with ``kernel="polynomial"``; a
    method asked for another kernel raises a ValueError naming the method."""
    X = np.random.default_rng(0).standard_normal((12, 3))
    for kernel in ("softmax", "gaussian", "polynomial"):
        rf = RandomFeatures(method=method, kernel=kernel, n_components=16, random_state=0)
        if kernel in kernels:
            assert rf.fit(X).transform(X).shape == (12, 16)
        else:
            with pytest.raises(ValueError, match=f"method='{method}'"):
                rf.fit(X)


def test_srf_ignores_lengthscale_and_coef0_but_not_degree():
    """estimators.md: ``"srf"`` is eq. 57 of the dot-product paper on normalised inputs
    with ``p = degree``; ``lengthscale`` and ``coef0`` do not enter it. The same seed
    draws the same features, so equal parameters give equal features bit for bit."""
    X = np.random.default_rng(0).standard_normal((12, 3))

    def features(**kw):
        rf = RandomFeatures(method="srf", kernel="polynomial", n_components=16, random_state=0)
        return rf.set_params(**kw).fit(X).transform(X)

    base = features()
    np.testing.assert_array_equal(features(lengthscale=3.0, coef0=5.0), base)
    assert not np.allclose(features(degree=3), base)


@pytest.mark.parametrize(
    "params",
    [{"n_components": 32}, {"method": "trig"}, {"kernel": "softmax"}, {"lengthscale": 2.0}],
)
def test_random_features_set_params_after_fit_needs_a_refit(params):
    """contract.md, "Parameters after fit": for the maps and ``RandomFeatures`` alike, a
    changed parameter makes the methods that use the fitted draw raise NotFittedError
    naming it until the next fit (``transform`` would otherwise return the old map's
    columns: 16 after ``n_components=32``); ``n_jobs`` and ``random_state`` do not."""
    from sklearn.exceptions import NotFittedError

    X = np.random.default_rng(0).standard_normal((20, 3))
    rf = RandomFeatures(n_components=16, random_state=0).fit(X)
    Z = rf.transform(X)
    name = next(iter(params))
    rf.set_params(**params)
    for method in (rf.transform, rf.transform_y):
        with pytest.raises(NotFittedError, match=f"{name}: "):
            method(X)
    assert rf.get_feature_names_out().shape == (16,)  # names the fitted columns
    rf.set_params(**{name: RandomFeatures(n_components=16).get_params()[name]})
    np.testing.assert_array_equal(rf.transform(X), Z)  # the old values back: no refit
    rf.set_params(n_jobs=2, random_state=5)
    np.testing.assert_array_equal(rf.transform(X), Z)
    assert rf.set_params(**params).fit(X).transform(X).shape[0] == 20


def test_positional_keys_warning_for_every_map_fitted_on_the_pair():
    """contract.md, "Fitting": a second data set passed positionally with as many rows as
    ``X`` is ignored, and a map that fits its parameters on the pair ``(X, Y)`` warns that
    it fitted without it. The clustered hybrid fits k-means centres on ``Y`` (``fit(X,
    Y=keys)`` is another map than ``fit(X)``), and the normalised Gaussian hybrid its
    default radius on ``X`` and ``Y``, so they warn as the FAVOR# maps do; Optimized
    Maclaurin fits its degree allocation on ``X`` alone, so ``Y`` changes nothing there
    and it does not warn."""
    import warnings

    from kernelkit.features import (
        SDERF,
        ClusteredHybridRF,
        NormalizedGaussianHybridRF,
        OptimizedMaclaurin,
    )

    rng = np.random.default_rng(0)
    X = 0.3 * rng.standard_normal((40, 3))
    Y = 0.3 * rng.standard_normal((40, 3)) + 1.0
    for cls in (SDERF, ClusteredHybridRF, NormalizedGaussianHybridRF):
        with pytest.warns(UserWarning, match=r"ignores its positional argument y"):
            fm = cls(random_state=0).fit(X, Y)
        np.testing.assert_array_equal(fm.transform(X), cls(random_state=0).fit(X).transform(X))
        keyed = cls(random_state=0).fit(X, Y=Y)  # the pair: another map
        assert not np.allclose(keyed.transform_y(X), fm.transform_y(X))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning
        fm = OptimizedMaclaurin(16, random_state=0).fit(X, Y)
    keyed = OptimizedMaclaurin(16, random_state=0).fit(X, Y=Y)
    np.testing.assert_array_equal(keyed.transform(X), fm.transform(X))  # fitted on X only


@pytest.mark.parametrize("sampler", ["sorf", "hadamard"])
def test_expected_kernel_of_a_biased_sampler_warns(sampler):
    """contract.md, "Variances": ``"sorf"`` and ``"hadamard"`` draw discrete directions
    and their estimate is biased, so ``expected_kernel`` (``E approx_kernel``, given as
    the i.i.d. value, the exact kernel) warns as ``variance`` does. The bias is real:
    over 2000 seeds the mean estimate at d = 2 misses the kernel by far more than its
    Monte Carlo standard error, sqrt(variance / 2000) (the i.i.d. variance, which the
    page says is the right order for these samplers, is at most 1/M = 1/8 here)."""
    import warnings

    from kernelkit.features import RandomFourierFeatures

    X = 0.5 * np.random.default_rng(0).standard_normal((6, 2))
    fm = RandomFourierFeatures(8, sampler=sampler, random_state=0).fit(X)
    with pytest.warns(UserWarning, match=r"expected_kernel is the value for i\.i\.d"):
        expected = fm.expected_kernel(X)
    np.testing.assert_allclose(expected, fm.exact_kernel(X))
    mean = np.mean(
        [
            RandomFourierFeatures(8, sampler=sampler, random_state=s).fit(X).approx_kernel(X)
            for s in range(2000)
        ],
        axis=0,
    )
    assert np.abs(mean - expected).max() > 10 * np.sqrt(1 / 8 / 2000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unbiased samplers: no warning
        RandomFourierFeatures(8, sampler="orthogonal", random_state=0).fit(X).expected_kernel(X)
