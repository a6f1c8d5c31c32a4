"""Defects a new-user hunt found in the optimisers and metrics:

* ``warm_start`` took the old coefficients where ``fit_intercept`` and the number of
  features changed together (the same row count): the intercept was penalised, or a
  feature's coefficient was not;
* ``partial_fit`` after ``set_params(fit_intercept=...)`` reported a shape mismatch as a
  divergence;
* ``normalized_mse`` scaled every output by one power of two: a small-scale output
  underflowed (a false "constant" error, or a wrong mean);
* ``partition_bound`` returned inf / NaN for finite input whose logits or curvature
  overflow;
* the ``ConvergenceWarning`` of ``fit`` pointed into kernelkit, not at the caller.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from kernelkit.metrics import normalized_mse
from kernelkit.optim import BoundLogisticRegression, logistic_objective, partition_bound

rng = np.random.default_rng(0)
X = rng.normal(size=(60, 4))
y = rng.integers(0, 3, 60)


@pytest.mark.parametrize("first", [False, True])
def test_warm_start_restarts_when_fit_intercept_changes(first):
    # (p=4, no intercept) <-> (p=3, intercept): the same number of coefficient rows
    alpha = 0.05
    X1, X2 = (X, X[:, :3] + 2.0) if not first else (X[:, :3] + 2.0, X)
    est = BoundLogisticRegression(alpha=alpha, fit_intercept=first, warm_start=True, random_state=0)
    est.fit(X1, y)
    est.set_params(fit_intercept=not first).fit(X2, y)
    ref = LogisticRegression(C=1 / (alpha * 60), fit_intercept=not first, tol=1e-12, max_iter=5000)
    ref.fit(X2, y)
    obj = logistic_objective(est.coef_, est.intercept_, X2, y, alpha)
    best = logistic_objective(ref.coef_, ref.intercept_, X2, y, alpha)
    assert obj - best < 1e-6
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-4)


def test_partial_fit_names_a_changed_fit_intercept():
    est = BoundLogisticRegression(batch_size=20).partial_fit(X, y, classes=[0, 1, 2])
    est.set_params(fit_intercept=False)
    with pytest.raises(ValueError, match="fit_intercept"):
        est.partial_fit(X, y)
    est.set_params(fit_intercept=True).partial_fit(X, y)  # set back: goes on


def test_normalized_mse_scales_each_output_by_itself():
    r = np.random.default_rng(0)
    t = r.normal(size=(50, 2))
    p = t + 0.1 * r.normal(size=(50, 2))
    each = [normalized_mse(t[:, j], p[:, j]) for j in range(2)]
    for scale in ([1e150, 1e-150], [1e100, 1e-60], [1.0, 1.0]):
        s = np.asarray(scale)
        assert normalized_mse(t * s, p * s) == pytest.approx(np.mean(each), rel=1e-12)
    with pytest.raises(ValueError, match="constant"):
        normalized_mse(np.c_[t[:, 0], np.ones(50)], p)


def test_partition_bound_of_overflowing_logits_is_a_clear_error():
    with pytest.raises(ValueError, match="logits"):
        partition_bound(np.array([1e200]), np.ones((1, 2, 1)) * 1e200)


def test_partition_bound_whose_curvature_overflows_is_a_clear_error():
    r = np.random.default_rng(0)
    F = r.normal(size=(2, 3, 2)) * 1e200
    theta = r.normal(size=2) * 1e-200  # logits of order 1
    with pytest.raises(ValueError, match="overflow"):
        partition_bound(theta, F)


def test_partition_bound_of_ordinary_input_is_unchanged():
    r = np.random.default_rng(1)
    F, theta = r.normal(size=(5, 4, 3)), r.normal(size=3)
    b = partition_bound(theta, F)
    np.testing.assert_allclose(b.log_z, np.log(np.exp(F @ theta).sum(1)), rtol=1e-13)


def test_convergence_warning_points_at_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        BoundLogisticRegression(solver="sgd", max_epochs=2).fit(X, y)
    conv = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert conv and all(w.filename == __file__ for w in conv)


def test_too_small_n_components_warning_points_at_the_caller():
    from kernelkit.estimators import RandomFeatures

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        RandomFeatures(method="hyperbolic", kernel="softmax", n_components=1).fit(X)
    ours = [w for w in caught if "smallest output" in str(w.message)]
    assert ours and all(w.filename == __file__ for w in ours)
