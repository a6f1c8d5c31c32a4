"""Every feature map stays finite as its inputs grow, up to the scale where the exact
kernel itself overflows float64 (softmax: ``exp(x.y)`` past ``|x||y| ~ 709``; Gaussian
and polynomial kernels: far beyond). Past that point, or where a map's own fit needs
squared kernel values, the outcome must be a ``ValueError`` that says the inputs
overflow, never a NaN or inf. ``approx_kernel`` (log space) stays finite throughout;
``transform`` may instead warn that the features themselves leave float64 (asymmetric maps
scale one side up and the other down) and point to ``log_transform``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from favor_helpers import PUBLIC_MAPS, SMALL_CONFIGS

MAPS = PUBLIC_MAPS
SMALL = SMALL_CONFIGS
#: input norms tried: 1.3^k up to ~3e4, then absurd ones
SCALES = [1.3**k for k in range(40)] + [1e10, 1e50, 1e150]


def _unit_rows(n, d, seed):
    Z = np.random.default_rng(seed).standard_normal((n, d))
    return Z / np.linalg.norm(Z, axis=1, keepdims=True)


def _kernel_options(cls):
    kernel = cls().get_params().get("kernel")
    return ["softmax", "gaussian"] if kernel == "softmax" else [None]


CASES = [(cls, kern) for cls in MAPS for kern in _kernel_options(cls)]


@pytest.mark.parametrize(
    ("cls", "kernel"), CASES, ids=[f"{c.__name__}-{k or 'default'}" for c, k in CASES]
)
def test_finite_up_to_the_exact_kernels_overflow(cls, kernel):
    X0, Y0 = _unit_rows(12, 4, 0), _unit_rows(9, 4, 1)
    kw = {"n_features": 16, **SMALL.get(cls.__name__, {}), "random_state": 0}
    if kernel is not None:
        kw["kernel"] = kernel
    checked = 0
    for s in SCALES:
        X, Y = s * X0, s * Y0
        fm = cls(**kw)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no silent overflow either
            try:
                fm.fit(X, Y=Y) if fm.data_dependent else fm.fit(X)
            except ValueError as exc:
                assert "overflow" in str(exc), exc
                break
            try:
                with np.errstate(over="ignore"):
                    K = fm.exact_kernel(X, Y)
            except ValueError as exc:  # the exact kernels say when they overflow
                assert "overflow" in str(exc), exc
                break
            if not np.all(np.isfinite(K)):
                break  # the exact kernel overflows from here on
            A = fm.approx_kernel(X, Y)
            try:  # the features alone may leave float64 while their products do not
                T = fm.transform(X)
            except RuntimeWarning as warning:
                assert "overflow" in str(warning) and "log_transform" in str(warning), warning
                T = np.zeros(1)
        assert np.all(np.isfinite(A)), (cls.__name__, kernel, s)
        assert np.all(np.isfinite(T)), (cls.__name__, kernel, s)
        checked += 1
    assert checked >= 12  # at least up to |x| = 1.3^11 ~ 18
