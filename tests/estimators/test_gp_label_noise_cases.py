"""The Dirichlet label transformation at large ``alpha`` (Milios et al. 2018, App. D.4)."""

import numpy as np
import pytest

from kernelkit.estimators.gp import milios_transform


@pytest.mark.parametrize("alpha", [1e16, 1e17, 1e100])
def test_label_noise_stays_positive_for_large_alpha(alpha):
    # sigma^2 = log(1 + 1 / (y + alpha)) = 1 / (y + alpha) - 1 / (2 (y + alpha)^2) + ...
    # so for alpha >= 1e16 it equals 1 / (y + alpha) to a relative 1e-16; the form
    # log(1 / (y + alpha) + 1) rounds the argument to 1 and gives exactly 0 (no noise)
    y = np.array([0.0, 1.0])
    _, s2 = milios_transform(y, alpha)
    np.testing.assert_allclose(s2, 1.0 / (y + alpha), rtol=1e-12)
    assert np.all(s2 > 0)
