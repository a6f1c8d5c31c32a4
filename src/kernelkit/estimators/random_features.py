"""scikit-learn transformer over the symmetric random feature maps."""

from __future__ import annotations

import math
import numbers

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from .._backend import get_namespace, is_torch_array, to_numpy, validate_positive_int
from .._backend import validate_data as kk_validate_data
from ..features import KERNELS
from ._methods import FEATURE_MAPS, resolve_method

__all__ = ["RandomFeatures"]


def _is_foreign_array(X) -> bool:
    """True for array-API arrays that are not NumPy (torch tensors, ...)."""
    if isinstance(X, np.ndarray):
        return False
    return is_torch_array(X) or hasattr(X, "__array_namespace__")


class RandomFeatures(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Random features for the Gaussian or softmax kernel as a scikit-learn transformer.

    Wraps every *symmetric* feature map of :mod:`kernelkit.features.softmax` so that
    ``transform(X) @ transform(Y).T`` is an unbiased estimate of the kernel matrix
    ``K(X, Y)``. A drop-in for :class:`sklearn.kernel_approximation.RBFSampler` with
    positive, data-adapted alternatives (FAVOR# paper: Likhosherstov et al., ICML 2023).

    ============== ======================================= ==================== =========
    method         feature map                             paper                output
    ============== ======================================= ==================== =========
    ``"trig"``     :class:`~kernelkit.features.TrigRF`     eq. (5-7), RFF       ``M``
    ``"positive"`` :class:`~kernelkit.features.PositiveRF` FAVOR+, eq. (8-9)    ``M``
    ``"hyperbolic"`` :class:`~kernelkit.features.HyperbolicRF` antithetic PosRF ``2M``
    ``"gerf"``     :class:`~kernelkit.features.GERF`       FAVOR++, eq. (10-11) ``M``
    ``"sderf"``    :class:`~kernelkit.features.SDERF`      FAVOR#, Thm 4.3      ``M``
    ============== ======================================= ==================== =========

    ``"favor+"``, ``"favor++"`` and ``"favor#"`` are accepted as aliases; names are
    case-insensitive. The *asymmetric* maps ``"saderf"`` and ``"aderf"`` (Sec. 4.2-4.3) are
    rejected with a :class:`ValueError`: they map the two arguments of the kernel
    differently and fit their parameters on a *pair* of sets, so a transformer, which must
    map every input the same way, cannot express them. Use the feature-map classes
    (``fit(X, Y)``, ``transform``, ``transform_y``) or
    :class:`~kernelkit.estimators.NadarayaWatsonClassifier` for those.

    Data-dependent maps (``"gerf"``, ``"sderf"``) fit their parameters at :meth:`fit` on
    the pair ``(X, X)`` (FAVOR# eq. 14 with ``Y = X``) and keep them fixed afterwards, so
    :meth:`transform` is a fixed, row-wise map.

    Parameters
    ----------
    method : str, default="sderf"
        One of ``"trig"``, ``"positive"``, ``"hyperbolic"``, ``"gerf"``, ``"sderf"``.
    kernel : {"gaussian", "softmax"}, default="gaussian"
        ``"gaussian"``: ``exp(-|x - y|^2 / (2 l^2))`` (``K^(-1/2)`` of FAVOR# Sec. 2.1);
        ``"softmax"``: ``exp(x^T y / l^2)`` (``K^(0)``). Gaussian-kernel features are
        bounded (positive maps by ``exp(|w|^2 / 4)``) and underflow towards 0 for large
        ``|x| / l``. Softmax-kernel features of ``"trig"`` carry ``exp(|x|^2 / (2 l^2))``,
        and the fitted ``"gerf"`` / ``"sderf"`` reach similar values, so they overflow for
        large-norm inputs: :meth:`transform` then raises a :class:`ValueError`
        (``"positive"`` and ``"hyperbolic"`` are bounded by ``exp(|w|^2 / 2)``).
    n_components : int, default=256
        Number of random projections ``M``. The output has ``M`` columns (``2M`` for
        ``"hyperbolic"``).
    lengthscale : float, default=1.0
        ``l`` above (``gamma = 1 / (2 l^2)`` in :class:`~sklearn.kernel_approximation.
        RBFSampler` terms); inputs are divided by it.
    orthogonal : bool, default=False
        Block-orthogonal projections (ORF / Performer construction; FAVOR# App. B.2)
        instead of i.i.d. Gaussian ones. Still unbiased, usually lower variance.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the projections (and phases for ``"trig"``). The same seed gives the same
        features as the feature-map class with that seed.

    Attributes
    ----------
    feature_map_ : kernelkit.features.FeatureMap
        The fitted feature map (e.g. :class:`~kernelkit.features.SDERF`).
    n_features_in_ : int
        Number of input features ``d`` seen at :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of the input features, when ``X`` had string column names.

    Notes
    -----
    Dtypes: float32 in, float32 out; float64 in, float64 out; integer input is
    promoted to float64. Sparse input is rejected (the maps are dense; convert with
    ``X.toarray()``). Torch tensors (and other array-API arrays) are accepted by
    :meth:`transform` and return the same backend, device and dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.estimators import RandomFeatures
    >>> X = np.random.default_rng(0).normal(size=(100, 5))
    >>> Z = RandomFeatures(n_components=512, random_state=0).fit_transform(X)
    >>> Z.shape
    (100, 512)
    """

    def __init__(
        self,
        method: str = "sderf",
        kernel: str = "gaussian",
        n_components: int = 256,
        lengthscale: float = 1.0,
        orthogonal: bool = False,
        random_state=None,
    ):
        self.method = method
        self.kernel = kernel
        self.n_components = n_components
        self.lengthscale = lengthscale
        self.orthogonal = orthogonal
        self.random_state = random_state

    # ------------------------------------------------------------------ helpers
    def _make_map(self):
        name = resolve_method(self.method, symmetric_only=True, owner="RandomFeatures")
        validate_positive_int(self.n_components, "n_components", maximum=2**26)
        if not isinstance(self.kernel, str) or self.kernel not in KERNELS:
            raise ValueError(f"Unknown kernel {self.kernel!r}; expected one of {sorted(KERNELS)}.")
        ls = self.lengthscale
        if (
            isinstance(ls, bool)
            or not isinstance(ls, numbers.Real)
            or not (math.isfinite(ls) and ls > 0)
        ):
            raise ValueError(f"lengthscale must be a positive finite float, got {ls!r}.")
        if not isinstance(self.orthogonal, bool | np.bool_):
            raise ValueError(f"orthogonal must be a bool, got {self.orthogonal!r}.")
        return FEATURE_MAPS[name](
            n_features=self.n_components,
            kernel=self.kernel,
            lengthscale=float(ls),
            orthogonal=bool(self.orthogonal),
            random_state=self.random_state,
        )

    # ------------------------------------------------------------------ API
    def fit(self, X, y=None):
        """Draw the random projections and fit the data-dependent parameters on ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Dense real data (NumPy, pandas, lists, or a torch tensor).
        y : None
            Ignored.

        Returns
        -------
        self : RandomFeatures
        """
        fm = self._make_map()
        if _is_foreign_array(X):
            X, _ = kk_validate_data(X, "X")
            self.n_features_in_ = int(X.shape[1])
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        else:
            X = validate_data(self, X, dtype=[np.float64, np.float32], accept_sparse=False)
        self.feature_map_ = fm.fit(X)  # Y = X
        self._n_features_out = int(fm.output_dim)
        return self

    def transform(self, X):
        """Map ``X`` to random features.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in_)

        Returns
        -------
        Z : array of shape (n_samples, n_output)
            ``n_output = n_components`` (``2 n_components`` for ``"hyperbolic"``).
            ``Z @ Z.T`` estimates the kernel matrix without bias. NumPy for NumPy-like
            input (float32 kept), otherwise the input's backend and device.

        Raises
        ------
        ValueError
            Wrong number of features, NaN / inf, or features that overflow the dtype's
            range (softmax kernel with large ``|x| / lengthscale``).
        """
        check_is_fitted(self)
        if _is_foreign_array(X):
            Z = self.feature_map_.transform(X)
            xp = get_namespace(Z)
            finite = bool(xp.all(xp.isfinite(Z)))
        else:
            X = validate_data(
                self, X, dtype=[np.float64, np.float32], accept_sparse=False, reset=False
            )
            Z = self.feature_map_.transform(X)
            finite = bool(np.isfinite(Z).all())
        if not finite:
            xs = to_numpy(X, np.float64) / self.feature_map_.lengthscale
            big = float(np.sqrt((xs * xs).sum(axis=1)).max()) if xs.size else 0.0
            raise ValueError(
                f"RandomFeatures(method={self.method!r}, kernel={self.kernel!r}) produced "
                f"non-finite features: the largest |x| / lengthscale is {big:.3g} and the "
                f"features exceed the range of {Z.dtype}. Standardise X, increase "
                "lengthscale, use kernel='gaussian' (bounded features) or float64, or use "
                "feature_map_.transform_scaled(X) / feature_map_.approx_kernel(X, Y), which "
                "keep the magnitudes in log space."
            )
        return Z

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        tags.input_tags.sparse = False
        return tags
