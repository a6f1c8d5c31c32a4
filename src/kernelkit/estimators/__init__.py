"""scikit-learn compatible estimators built on kernelkit's random features.

* :class:`RandomFeatures` – transformer over every symmetric feature map
  (trig / positive / hyperbolic / GERF / SDERF) for the Gaussian or softmax kernel.
* :class:`NadarayaWatsonClassifier` – kernel classification of FAVOR# Sec. 5.2 with any
  feature map, asymmetric ones (SADERF, ADERF) included, or the exact kernel.
"""

from .nadaraya_watson import NadarayaWatsonClassifier
from .random_features import RandomFeatures

__all__ = ["NadarayaWatsonClassifier", "RandomFeatures"]
