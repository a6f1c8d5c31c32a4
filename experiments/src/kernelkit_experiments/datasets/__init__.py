"""Offline data sets that only the paper experiments use.

Like :mod:`kernelkit.datasets` (whose image loaders they build on), everything comes from
installed packages, with no network at run time; a loader whose source is missing raises
:class:`kernelkit.datasets.DatasetNotAvailable` naming the package to install.

* :func:`load_classification` – (X, y) for the names in :data:`CLASSIFICATION_DATASETS`
  (FAVOR# Sec. 5.2).
* Hybrid RF (Table 1 / App. H): :func:`load_hrf_uci` (wine, Boston),
  :func:`hrf_preprocess`, :func:`make_clustered`.
* Text: :func:`load_text_corpus` (``pydoc_data.topics`` and the standard library's
  docstrings, character level).
"""

from kernelkit.datasets import DatasetNotAvailable

from ._classification import (
    CLASSIFICATION_DATASETS,
    FASHION_MNIST_SUBSET_SIZE,
    load_classification,
    standardize,
)
from ._hrf import HRF_UCI_DATASETS, hrf_preprocess, load_hrf_uci, make_clustered
from ._text import TEXT_SOURCES, TextCorpus, load_text_corpus

__all__ = [
    "CLASSIFICATION_DATASETS",
    "FASHION_MNIST_SUBSET_SIZE",
    "HRF_UCI_DATASETS",
    "TEXT_SOURCES",
    "DatasetNotAvailable",
    "TextCorpus",
    "hrf_preprocess",
    "load_classification",
    "load_hrf_uci",
    "load_text_corpus",
    "make_clustered",
    "standardize",
]
