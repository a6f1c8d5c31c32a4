"""The Gaussian bandwidths of the hybrids (``tau`` of the clustered Gaussian mixture,
``lambda_bandwidth`` of the Gaussian bipolar hybrid) divide by their squares: outside
[1e-150, 1e150] a square leaves the normal float64 range (``0 / 0`` gave NaN estimates,
a Python float's ``**2`` a bare ``OverflowError``). ``fit`` now names the parameter, and
at the ends of the range every method is finite."""

import warnings

import numpy as np
import pytest

from kernelkit.features import ClusteredHybridRF, GaussianHybridRF

rng = np.random.default_rng(0)
X = 0.5 * rng.standard_normal((30, 3))
Y = 0.5 * rng.standard_normal((25, 3))


def _clustered(v):
    return ClusteredHybridRF(4, n_clusters=2, mixture="gaussian", tau=v, random_state=0)


def _gaussian(v, lam="positive"):
    return GaussianHybridRF(8, 4, lambda_bandwidth=v, lambda_features=lam, random_state=0)


@pytest.mark.parametrize("value", [1e-160, 1e-151, 2e150, 1e155])
@pytest.mark.parametrize(("make", "name"), [(_clustered, "tau"), (_gaussian, "lambda_bandwidth")])
def test_bandwidth_outside_the_range_is_named_at_fit(make, name, value):
    with pytest.raises(ValueError, match=rf"{name} must be in \[1e-150, 1e\+150\]"):
        make(value).fit(X, Y=Y)


@pytest.mark.parametrize("value", [1e-150, 1e150])
@pytest.mark.parametrize("make", [_clustered, _gaussian, lambda v: _gaussian(v, "trig")])
def test_estimates_at_the_ends_of_the_range_are_finite(make, value):
    fm = make(value).fit(X, Y=Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no divide / invalid warnings either
        K = fm.approx_kernel(X[:3], Y[:3])
        F = fm.transform(X[:3])
    assert np.all(np.isfinite(K)) and np.all(np.isfinite(F))
    # the variance is finite or +inf (too large for float64), never NaN
    assert not np.any(np.isnan(fm.variance(X[:3], Y[:3])))


@pytest.mark.parametrize("value", [1e-150, 1.0, 1e150])
def test_exact_lambda_is_one_where_x_plus_y_is_zero(value):
    # lambda = exp(-|x + y|^2 / (2 c^2)) = 1 at y = -x for every bandwidth c
    x = np.array([[0.3, -0.4]])
    gh = _gaussian(value).fit(x, Y=-x)
    assert gh.exact_lambda(x, -x)[0, 0] == 1.0
