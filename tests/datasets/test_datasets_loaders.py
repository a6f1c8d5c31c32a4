"""Offline loaders and the 28x28 -> 8x8 area resizer (FAVOR# Sec. 5 images)."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from kernelkit import datasets as D
from kernelkit.datasets import _images


# ----------------------------------------------------------------------- resizer
def test_resize_matrix_rows_and_columns():
    R = D.area_resize_matrix(28, 8)
    assert R.shape == (8, 28)
    np.testing.assert_allclose(R.sum(axis=1), 1.0, atol=1e-15)
    # every input pixel is fully covered: columns sum to 1 / 3.5
    np.testing.assert_allclose(R.sum(axis=0), 1.0 / 3.5, atol=1e-15)
    # hand-computed rows 0 and 1: pixels 0-2 fully in cell 0, pixel 3 split in half
    np.testing.assert_allclose(R[0, :4] * 3.5, [1, 1, 1, 0.5])
    np.testing.assert_allclose(R[1, 3:8] * 3.5, [0.5, 1, 1, 1, 0])
    assert np.all(R[0, 4:] == 0)


def test_constant_image_stays_constant():
    imgs = np.full((3, 28, 28), 0.37)
    out = D.resize_to_8x8(imgs)
    assert out.shape == (3, 64)
    np.testing.assert_allclose(out, 0.37, atol=1e-15)


def test_resize_equals_supersampled_block_mean():
    # Independent implementation of area averaging: split every pixel into 2x2
    # half-pixels (56x56); a 3.5-pixel cell is then exactly 7x7 half-pixels.
    rng = np.random.default_rng(0)
    imgs = rng.random((5, 28, 28))
    ref = imgs.repeat(2, axis=1).repeat(2, axis=2).reshape(5, 8, 7, 8, 7).mean(axis=(2, 4))
    np.testing.assert_allclose(D.resize_to_8x8(imgs), ref.reshape(5, 64), atol=1e-14)
    # flattened input gives the same result
    np.testing.assert_allclose(
        D.resize_to_8x8(imgs.reshape(5, 784)), ref.reshape(5, 64), atol=1e-14
    )


def test_resize_of_blocky_image_and_impulse():
    # An image constant on 7x7 pixel blocks (4x4 grid) is constant on 2x2 output cells.
    rng = np.random.default_rng(1)
    small = rng.random((4, 4))
    img = np.kron(small, np.ones((7, 7)))[None]  # (1, 28, 28)
    out = D.resize_to_8x8(img).reshape(8, 8)
    np.testing.assert_allclose(out, np.kron(small, np.ones((2, 2))), atol=1e-15)
    # A single bright pixel at (3, 3) straddles four cells, 1/2 x 1/2 of its area in
    # each; each cell has area 3.5^2, so each gets 0.25 / 12.25 = 1/49.
    imp = np.zeros((1, 28, 28))
    imp[0, 3, 3] = 1.0
    out = D.resize_to_8x8(imp).reshape(8, 8)
    expected = np.zeros((8, 8))
    expected[:2, :2] = 1.0 / 49.0
    np.testing.assert_allclose(out, expected, atol=1e-16)
    # mass conservation: sum over cells times cell area equals the image sum
    imgs = rng.random((4, 28, 28))
    np.testing.assert_allclose(D.resize_to_8x8(imgs).sum(1) * 3.5**2, imgs.sum(axis=(1, 2)))


def test_resize_dtype_and_bad_shapes():
    assert D.resize_to_8x8(np.zeros((2, 784), np.float32)).dtype == np.float32
    assert D.resize_to_8x8(np.zeros((2, 784), np.uint8)).dtype == np.float64
    assert D.resize_to_8x8(np.zeros((0, 784))).shape == (0, 64)
    for shape in [(784,), (2, 783), (2, 28, 27), (28, 28)]:
        with pytest.raises(ValueError, match="784"):
            D.resize_to_8x8(np.zeros(shape))


# ----------------------------------------------------------------------- loaders
def test_digits_images():
    X, y = D.load_digits_images()
    assert X.shape == (1797, 64) and X.dtype == np.float64
    assert y.shape == (1797,) and y.dtype == np.int64
    assert X.min() == 0.0 and X.max() == 1.0
    np.testing.assert_allclose(X * 16, np.round(X * 16))  # integer grey levels 0..16
    assert set(np.unique(y)) == set(range(10))


def test_mnist_sample():
    X, y = D.load_mnist_sample()
    assert X.shape == (5000, 784) and X.dtype == np.float64
    assert y.shape == (5000,) and y.dtype == np.int64
    assert X.min() == 0.0 and X.max() == 1.0
    assert np.bincount(y).tolist() == [500] * 10
    X[:] = -1  # a copy: the cache is not affected
    assert D.load_mnist_sample()[0].min() == 0.0


@pytest.mark.skipif(not D.fashion_mnist_available(), reason="dataset-fashion-mnist missing")
def test_fashion_mnist():
    X, y = D.load_fashion_mnist("test")
    assert X.shape == (10000, 784) and X.dtype == np.float64
    assert y.shape == (10000,) and y.dtype == np.int64
    assert X.min() == 0.0 and X.max() == 1.0
    assert np.bincount(y).tolist() == [1000] * 10
    Xtr, ytr = D.load_fashion_mnist("train")
    assert Xtr.shape == (60000, 784) and np.bincount(ytr).tolist() == [6000] * 10
    with pytest.raises(ValueError, match="subset"):
        D.load_fashion_mnist("validation")
    X5, y5 = D.load_fashion_mnist("train", n=5)
    np.testing.assert_array_equal(X5, Xtr[:5])
    np.testing.assert_array_equal(y5, ytr[:5])
    with pytest.raises(ValueError, match="n must"):
        D.load_fashion_mnist("train", n=-1)


def _hide_fashion(monkeypatch, tmp_path):
    monkeypatch.setattr(_images, "FASHION_MNIST_DIR", tmp_path / "nowhere")
    monkeypatch.setattr(_images, "_dpkg_fashion_dir", lambda: None)
    monkeypatch.delenv("KERNELKIT_FASHION_MNIST_DIR", raising=False)


def test_fashion_mnist_missing_names_package(monkeypatch, tmp_path):
    _hide_fashion(monkeypatch, tmp_path)
    assert not D.fashion_mnist_available()
    with pytest.raises(D.DatasetNotAvailable) as info:
        D.load_fashion_mnist()
    msg = str(info.value)
    assert "dataset-fashion-mnist" in msg and "apt-get install" in msg
    assert isinstance(info.value, FileNotFoundError)


def _write_idx(path, arr):
    header = struct.pack(">HBB", 0, 8, arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def test_fashion_mnist_reads_idx_from_env_dir(monkeypatch, tmp_path):
    _hide_fashion(monkeypatch, tmp_path)
    rng = np.random.default_rng(0)
    for subset, n in (("train", 7), ("t10k", 3)):
        _write_idx(tmp_path / f"{subset}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(tmp_path / f"{subset}-labels-idx1-ubyte.gz", np.arange(n) % 10)
    monkeypatch.setenv("KERNELKIT_FASHION_MNIST_DIR", str(tmp_path))
    X, y = D.load_fashion_mnist("test")
    assert X.shape == (3, 784) and y.tolist() == [0, 1, 2]
    assert 0.0 <= X.min() and X.max() <= 1.0
    # a corrupt file gives a clear error
    with gzip.open(tmp_path / "train-labels-idx1-ubyte.gz", "wb") as f:
        f.write(b"\x00\x00\x09\x01" + struct.pack(">I", 7) + bytes(7))
    with pytest.raises(ValueError, match="IDX"):
        D.load_fashion_mnist("train")
