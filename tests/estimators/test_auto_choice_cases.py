"""RandomFeatures(method="auto"): the reported estimates and the choice against Monte Carlo."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kernelkit.estimators import RandomFeatures


def _two_far_clusters(sep):
    rng = np.random.default_rng(0)
    return np.r_[
        0.3 * rng.normal(size=(20, 2)) + sep,
        0.3 * rng.normal(size=(20, 2)) - sep,
    ]


def test_auto_maclaurin_pairs_where_the_kernel_underflows_are_not_dropped():
    """Two clusters at +-(30, 30): across them the Gaussian kernel, exp(-3600), and the
    Maclaurin maps' expected kernel (their truncated series times exp(-|x|^2/2 - |y|^2/2))
    both underflow to 0, so the ratio E K_hat / K of their squared relative bias is
    0/0. The true ratio is about poly(x.y) exp(1800), an astronomical bias, not a pair to
    leave out for them alone (every other candidate is ranked on it). Leaving it out
    reported 1.0 for "random_maclaurin" (its within-cluster error: a map of zeros) and
    chose it."""
    X = _two_far_clusters(30.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rf = RandomFeatures(
            method="auto", kernel="gaussian", n_components=64, random_state=0
        ).fit(X)
    est = rf.variance_estimates_
    assert rf.method_ not in ("random_maclaurin", "optimized_maclaurin")
    assert est["random_maclaurin"] > est[rf.method_]
    # the chosen map estimates the kernel: its features are not all zero
    assert np.abs(rf.transform(X)).max() > 0
