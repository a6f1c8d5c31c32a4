"""``load_classification``: the FAVOR# Sec. 5.2 classification sets, offline."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit import datasets as K
from kernelkit.datasets import _images
from kernelkit_experiments import datasets as D


@pytest.mark.parametrize("name", D.CLASSIFICATION_DATASETS)
def test_load_classification(name):
    if name == "fashion_mnist" and not K.fashion_mnist_available():
        pytest.skip("dataset-fashion-mnist missing")
    expected = {
        "iris": (150, 4, 3),
        "wine": (178, 13, 3),
        "breast_cancer": (569, 30, 2),
        "diabetes": (442, 10, 2),
        "digits": (1797, 64, 10),
        "mnist": (5000, 784, 10),
        "fashion_mnist": (D.FASHION_MNIST_SUBSET_SIZE, 784, 10),
    }[name]
    X, y = D.load_classification(name)
    assert X.shape == expected[:2] and X.dtype == np.float64 and np.isfinite(X).all()
    assert y.shape == (expected[0],) and y.dtype == np.int64
    assert set(np.unique(y)) == set(range(expected[2]))
    if name in ("iris", "wine", "breast_cancer", "diabetes"):
        np.testing.assert_allclose(X.mean(0), 0.0, atol=1e-12)
        np.testing.assert_allclose(X.std(0), 1.0, atol=1e-12)
        Xr, _ = D.load_classification(name, standardize_features=False)
        assert not np.allclose(Xr.std(0), 1.0)
    else:
        assert X.min() == 0.0 and X.max() == 1.0


def test_diabetes_binarised_at_median():
    from sklearn.datasets import load_diabetes

    _, y = D.load_classification("diabetes")
    t = load_diabetes().target
    np.testing.assert_array_equal(y, (t > np.median(t)).astype(int))
    assert abs(int(y.sum()) - len(y) // 2) <= 5


def test_unknown_dataset():
    with pytest.raises(ValueError, match="iris"):
        D.load_classification("cifar10")


def test_missing_fashion_mnist_names_package(monkeypatch, tmp_path):
    monkeypatch.setattr(_images, "FASHION_MNIST_DIR", tmp_path / "nowhere")
    monkeypatch.setattr(_images, "_dpkg_fashion_dir", lambda: None)
    monkeypatch.delenv("KERNELKIT_FASHION_MNIST_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        D.load_classification("fashion_mnist")
