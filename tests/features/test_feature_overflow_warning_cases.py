"""Features that overflow to inf say so in the library's words, at the user's line.

Unscaled data (pixel values 0..255) under the default softmax kernel: the trigonometric
map's row scale ``exp(|x|^2 / 2)`` and the hybrids' trigonometric blocks overflow float64
(``|x|^2 / 2`` is about 1.7e5 here, far above ``log(float64 max) ~ 709.8``). As the
FAVOR# maps already did, ``transform`` then warns once with a remedy, instead of NumPy's
bare "overflow encountered in exp" / "invalid value encountered in multiply", and
``approx_kernel`` (log space, +-inf only where the estimate itself overflows) is silent.
"""

import warnings

import numpy as np
import pytest

from kernelkit.features import AngularHybridRF, GaussianHybridRF, NormalizedGaussianHybridRF, TrigRF

MAPS = [TrigRF, AngularHybridRF, GaussianHybridRF, NormalizedGaussianHybridRF]


def _pixels():
    return np.random.default_rng(0).integers(0, 256, (20, 16)).astype(float)


def _record(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, caught


@pytest.mark.parametrize("cls", MAPS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("side", ["transform", "transform_y"])
def test_overflowing_features_warn_once_in_the_library_words(cls, side):
    X = _pixels()
    fm = cls(random_state=0).fit(X)
    out, caught = _record(getattr(fm, side), X)
    assert not np.isnan(out).any()
    assert np.isinf(out).any()  # the features really overflow here
    messages = [str(w.message) for w in caught]
    assert len(caught) == 1, messages  # no NumPy RuntimeWarning next to it
    assert caught[0].category is RuntimeWarning
    assert f"Some features of {'X' if side == 'transform' else 'Y'} overflow" in messages[0]
    assert caught[0].filename == __file__  # points at the user's call


@pytest.mark.parametrize("cls", MAPS, ids=lambda c: c.__name__)
def test_approx_kernel_of_overflowing_features_is_silent_and_never_nan(cls):
    X = _pixels()
    fm = cls(random_state=0).fit(X)
    K, caught = _record(fm.approx_kernel, X)
    assert not caught, [str(w.message) for w in caught]
    assert not np.isnan(K).any()


@pytest.mark.parametrize("cls", MAPS, ids=lambda c: c.__name__)
def test_no_warning_on_scaled_data(cls):
    # |x|^2 / 2 ~ 0.5 * 16 * 0.09: every feature is of order one
    X = 0.3 * np.random.default_rng(1).standard_normal((20, 16))
    fm = cls(random_state=0).fit(X)
    (T, caught) = _record(fm.transform, X)
    assert not caught and np.isfinite(T).all()


def test_trig_torch_cpu_warns_as_numpy():
    torch = pytest.importorskip("torch")
    X = torch.from_numpy(_pixels())
    fm = TrigRF(random_state=0).fit(X)
    out, caught = _record(fm.transform, X)
    assert len(caught) == 1 and "Some features of X overflow" in str(caught[0].message)
    assert not torch.isnan(out).any()
