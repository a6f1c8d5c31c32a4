"""PositiveRF (FAVOR+) variance in closed form from |x + y|^2: at y = -x the estimate is
exact for either kernel (every feature product is the same constant), so the variance is
0, log_relative_variance -inf and its gradient 0, as for HyperbolicRF; elsewhere the
values equal the second-moment form."""

import math

import numpy as np
import pytest

from kernelkit.features import PositiveRF
from kernelkit.features._projection import SecondMomentVariance


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_exact_point_has_zero_variance(kernel):
    torch = pytest.importorskip("torch")
    X = 0.6 * np.random.default_rng(15).standard_normal((3, 3))
    fm = PositiveRF(4, kernel=kernel, random_state=0).fit(X)
    np.testing.assert_array_equal(np.diagonal(fm.variance(X, -X)), 0.0)
    assert np.all(np.isneginf(np.diagonal(fm.log_relative_variance(X, -X))))
    Xt = torch.tensor(X, requires_grad=True)
    d = torch.diagonal(fm.log_relative_variance(Xt, -torch.tensor(X)))
    (g,) = torch.autograd.grad(torch.where(torch.isfinite(d), d, 0.0).sum(), Xt)
    assert float(g.abs().max()) == 0.0


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_closed_form_equals_the_second_moment_form(kernel):
    rng = np.random.default_rng(3)
    X, Y = 0.5 * rng.standard_normal((6, 4)), 0.5 * rng.standard_normal((5, 4))
    fm = PositiveRF(16, kernel=kernel, lengthscale=1.3, random_state=0).fit(X)
    ref_var = SecondMomentVariance._variance(fm, X / 1.3, Y / 1.3, np)
    np.testing.assert_allclose(fm.variance(X, Y), ref_var, rtol=1e-10)
    z2 = (((X[:, None] + Y[None]) / 1.3) ** 2).sum(-1)
    np.testing.assert_allclose(
        fm.log_relative_variance(X, Y), np.log(np.expm1(z2)) - math.log(16), rtol=1e-10
    )
