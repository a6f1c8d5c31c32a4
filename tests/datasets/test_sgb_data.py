"""Loaders of the SGB logistic-regression experiment (``kernelkit.datasets._sgb``)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.datasets._images import DatasetNotAvailable, fashion_mnist_available
from kernelkit.datasets._sgb import (
    INCOME_HIGH_LEVELS,
    SGB_DATASETS,
    add_bias,
    load_income,
    load_sgb_dataset,
)


def _load_or_skip(name, **kw):
    try:
        return load_sgb_dataset(name, **kw)
    except DatasetNotAvailable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("name", ["digits", "breast_cancer"])
def test_sklearn_sets_shapes_and_scaling(name):
    d = _load_or_skip(name)
    T, p = {"digits": (1797, 64), "breast_cancer": (569, 30)}[name]
    assert d.X.shape == (T, p) and d.y.shape == (T,)
    assert d.X.dtype == np.float64 and d.y.dtype == np.int64
    assert np.array_equal(np.unique(d.y), np.arange(d.n_classes))
    if name == "digits":  # pixels / 16 in [0, 1], and the maximum is attained
        assert d.X.min() == 0.0 and d.X.max() == 1.0
        from sklearn.datasets import load_digits

        np.testing.assert_array_equal(d.X * 16, load_digits().data)
    else:  # standardised: zero mean, unit variance per column
        np.testing.assert_allclose(d.X.mean(0), 0, atol=1e-12)
        np.testing.assert_allclose(d.X.std(0), 1, rtol=1e-12)


def test_income_one_hot():
    try:
        X, y, names = load_income()
        assert int(y.sum()) == 1812  # complete rows: 1812 high vs 5064
    except DatasetNotAvailable as exc:
        pytest.skip(str(exc))
    # 6876 complete rows, 75 one-hot columns, 13 predictors
    assert X.shape == (6876, 75) and len(names) == 75
    assert len({n.split("=")[0] for n in names}) == 13
    assert set(np.unique(X)) == {0.0, 1.0}
    np.testing.assert_array_equal(X.sum(axis=1), 13.0)  # exactly one level per predictor
    Xa, ya, _ = load_income(complete_only=False)
    assert Xa.shape == (8993, 75)
    assert int(ya.sum()) == 2192 and int((1 - ya).sum()) == 6801  # the data set's class counts
    assert Xa.sum(axis=1).min() < 13  # a missing answer leaves its block empty
    assert len(INCOME_HIGH_LEVELS) == 2


def test_subset_is_seeded_and_keeps_classes():
    a = _load_or_skip("digits", n=300, random_state=1)
    b = _load_or_skip("digits", n=300, random_state=1)
    c = _load_or_skip("digits", n=300, random_state=2)
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, c.X)
    assert a.X.shape == (300, 64)
    full = load_sgb_dataset("digits")
    # every subset row is a row of the full set
    rows = {r.tobytes() for r in full.X}
    assert all(r.tobytes() in rows for r in a.X)


def test_fashion_first_n():
    if not fashion_mnist_available():
        pytest.skip("dataset-fashion-mnist not installed")
    d = load_sgb_dataset("fashion_mnist", n=500)
    from kernelkit.datasets import load_fashion_mnist

    X, y = load_fashion_mnist("train", n=500)
    np.testing.assert_array_equal(d.X, X)
    np.testing.assert_array_equal(d.y, y)


def test_add_bias():
    X = np.arange(6.0).reshape(3, 2)
    Xb = add_bias(X)
    np.testing.assert_array_equal(Xb, [[0, 1, 1], [2, 3, 1], [4, 5, 1]])
    with pytest.raises(ValueError, match="2-D"):
        add_bias(np.ones(3))


@pytest.mark.parametrize("n", [0, 1, 2.5, True, "10"])
def test_bad_n(n):
    with pytest.raises(ValueError, match="n must be"):
        load_sgb_dataset("digits", n=n)


def test_bad_name_and_lost_class():
    with pytest.raises(ValueError, match="Unknown data set"):
        load_sgb_dataset("adult")
    with pytest.raises(ValueError, match="classes"):
        load_sgb_dataset("digits", n=3)
    assert "fashion_mnist" in SGB_DATASETS
