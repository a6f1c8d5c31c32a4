"""A data-dependent map whose fitted parameters are given reads no data at fit, so a
Pipeline's target passed positionally is ignored without the contract's warning; with
the parameters left to the fit, the warning stays."""

import warnings

import numpy as np
import pytest

from kernelkit.features import GERF, NormalizedGaussianHybridRF


def _Xy():
    rng = np.random.default_rng(0)
    X = 0.3 * rng.standard_normal((40, 3))
    return X, 0.3 * rng.standard_normal((40, 3))  # y of X's shape (multi-output target)


@pytest.mark.parametrize(
    "fm",
    [GERF(16, A=-0.05, random_state=0), NormalizedGaussianHybridRF(16, radius=1.0, random_state=0)],
    ids=["GERF(A)", "NormalizedGaussianHybridRF(radius)"],
)
def test_given_parameters_fit_without_the_positional_y_warning(fm):
    X, y = _Xy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        fm.fit(X, y)
    # the same map as without y (nothing fitted to the data)
    ref = type(fm)(**fm.get_params()).fit(X)
    np.testing.assert_array_equal(fm.transform(X), ref.transform(X))


@pytest.mark.parametrize(
    "fm",
    [GERF(16, random_state=0), NormalizedGaussianHybridRF(16, random_state=0)],
    ids=["GERF", "NormalizedGaussianHybridRF"],
)
def test_fitted_parameters_still_warn_about_the_positional_y(fm):
    X, y = _Xy()
    with pytest.warns(UserWarning, match="ignores its positional argument y"):
        fm.fit(X, y)
