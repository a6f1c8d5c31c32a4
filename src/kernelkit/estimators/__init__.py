"""scikit-learn compatible estimators built on kernelkit's random features.

* :class:`RandomFeatures` – transformer over any of the twenty feature maps by name, for
  the Gaussian, softmax or polynomial kernel, or ``method="auto"``: the map of lowest
  analytic relative mean squared error on a sample of the data.
* :class:`NadarayaWatsonClassifier` – kernel classification of FAVOR# Sec. 5.2 with any
  feature map, asymmetric ones (SADERF, ADERF) included, or the exact kernel.
* :class:`RandomFeatureRidge` – kernel ridge regression with any symmetric feature map.
* :class:`RandomFeatureGPRegressor`, :class:`RandomFeatureGPClassifier` – GP regression
  (predictive mean and variance) and Milios et al. GP classification with any symmetric,
  real or complex, feature map (dot-product features paper, App. D).
"""

from .gp import RandomFeatureGPClassifier, RandomFeatureGPRegressor
from .nadaraya_watson import NadarayaWatsonClassifier
from .random_features import RandomFeatures
from .ridge import RandomFeatureRidge

__all__ = [
    "NadarayaWatsonClassifier",
    "RandomFeatureGPClassifier",
    "RandomFeatureGPRegressor",
    "RandomFeatureRidge",
    "RandomFeatures",
]
