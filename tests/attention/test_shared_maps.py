"""Attention features and the kernelkit.features classes are one map.

For every positive map of the softmax family, the log features of the attention path
(torch float64: moments as linear_attention fits them, build_log_map, log_features) equal
those of the kernelkit.features class fitted on the same NumPy queries and keys with the
same projections (log_transform / log_transform_y), and the class gives the same features
for NumPy and torch input. The data has a near-zero query coordinate and unequal key
scales, so the SADERF / ADERF ridge and the row-term transforms matter: a fit with another
ridge, another A or row signs other than the canonical ones would fail the 1e-10 check
(checked for the ridge below)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import Moments, attention_moments  # noqa: E402
from kernelkit.attention._maps import build_log_map, fit_moments  # noqa: E402
from kernelkit.features import (  # noqa: E402
    ADERF,
    GERF,
    SADERF,
    SDERF,
    HyperbolicRF,
    PositiveRF,
    favor,
)
from kernelkit.features.sampling import gaussian_projection  # noqa: E402

CLASSES = {
    "positive": PositiveRF,
    "hyperbolic": HyperbolicRF,
    "gerf": GERF,
    "saderf": SADERF,
    "aderf": ADERF,
    "sderf": SDERF,
}
D, M = 8, 32
TOL = {"rtol": 1e-10, "atol": 1e-10}


def _scaled_qk(seed=0, n=30, m=40):
    """Scaled queries and keys ``x = q d^{-1/4}``: coordinate scales from 0.2 to 2, a
    query coordinate ~1e-4 (its SADERF psi and ADERF B~1 rows are set by the ridge) and a
    key offset."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, D)) * np.linspace(0.2, 2.0, D)
    q[:, 3] *= 1e-4
    k = rng.standard_normal((m, D)) * np.linspace(1.5, 0.3, D) + 0.3
    return q * D**-0.25, k * D**-0.25


def _fitted_class(name, x, y, W):
    fm = CLASSES[name](n_features=M, random_state=1).fit(x, Y=y)
    fm.projection_ = W  # fitted parameters depend on the moments only, not on W
    fm._build()
    return fm


def _attention_map(name, x, y, W, mom=None):
    # the moments linear_attention fits itself from (bidirectional, no padding)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    if mom is None:
        mom = fit_moments(xt, yt, None, full=name in ("aderf", "sderf"))
    return build_log_map(name, torch.from_numpy(W), mom, D)


@pytest.mark.parametrize("name", list(CLASSES))
def test_attention_log_features_equal_the_feature_class(name):
    x, y = _scaled_qk()
    W = gaussian_projection(M, D, 7)
    fm = _fitted_class(name, x, y, W)
    fmap = _attention_map(name, x, y, W)
    lq = fmap.log_features(torch.from_numpy(x), "q").numpy()
    lk = fmap.log_features(torch.from_numpy(y), "k").numpy()
    assert lq.shape == (x.shape[0], fm.output_dim) and lk.shape == (y.shape[0], fm.output_dim)
    np.testing.assert_allclose(lq, fm.log_transform(x), **TOL)
    np.testing.assert_allclose(lk, fm.log_transform_y(y), **TOL)
    # exp'd features too (hyperbolic: the antithetic pairs [W; -W] of HyperbolicRF, and
    # the same normalisation 1/sqrt(2M))
    np.testing.assert_allclose(np.exp(lq), fm.transform(x), **TOL)
    np.testing.assert_allclose(np.exp(lk), fm.transform_y(y), **TOL)
    # the fused path of the kernels gives the same log features
    fused = fmap.log_features_fused(torch.from_numpy(y), "k").numpy()
    np.testing.assert_allclose(fused, fm.log_transform_y(y), **TOL)


@pytest.mark.parametrize("name", ["gerf", "saderf", "aderf", "sderf"])
def test_attention_moments_give_the_same_map(name):
    """attention_moments (full second moments, any map) fits the same parameters as the
    diagonal moments GERF / SADERF fit from (up to rounding)."""
    x, y = _scaled_qk(seed=1)
    W = gaussian_projection(M, D, 8)
    # attention_moments scales by 1/sqrt(d) itself: pass the unscaled q, k
    mom = attention_moments(torch.from_numpy(x * D**0.25), torch.from_numpy(y * D**0.25))
    assert Moments is favor.Moments and isinstance(mom, favor.Moments) and mom.full
    lq = _attention_map(name, x, y, W, mom).log_features(torch.from_numpy(x), "q").numpy()
    np.testing.assert_allclose(lq, _fitted_class(name, x, y, W).log_transform(x), **TOL)


@pytest.mark.parametrize("name", ["saderf", "aderf"])
def test_the_comparison_detects_another_ridge(name):
    """The 1e-10 comparison can fail: the same fit with a ridge 10x larger (eps = 1e-5)
    moves the log features by far more than the tolerance on this data."""
    x, y = _scaled_qk()
    W = gaussian_projection(M, D, 7)
    fm = _fitted_class(name, x, y, W)
    mom = favor.moments(x, y, full=name == "aderf")
    W_x, _, const = favor.derf_log_weights(favor.fit_derf(name, mom, eps=1e-5), W)
    params = favor.fit_derf(name, mom, eps=1e-5)
    lq = x @ W_x + const - 0.5 * favor.transformed_sq_norm(params, x)[:, None]
    assert np.abs(lq - fm.log_transform(x)).max() > 1e-6


@pytest.mark.parametrize("name", list(CLASSES))
def test_feature_class_gives_the_same_features_for_numpy_and_torch(name):
    x, y = _scaled_qk(seed=2)
    fm = CLASSES[name](n_features=M, random_state=3).fit(x, Y=y)
    for np_out, t_out in (
        (fm.transform(x), fm.transform(torch.from_numpy(x))),
        (fm.transform_y(y), fm.transform_y(torch.from_numpy(y))),
        (fm.log_transform(x), fm.log_transform(torch.from_numpy(x))),
    ):
        assert isinstance(t_out, torch.Tensor) and t_out.dtype == torch.float64
        np.testing.assert_allclose(t_out.numpy(), np_out, **TOL)
