"""The feature-map contract, held by every random feature map (user guide: "The
feature-map contract").

A feature map estimates a kernel ``K(x, y)`` by ``Re phi(x)^T conj(psi(y))`` with random
features ``phi`` (x side, queries) and ``psi`` (y side, keys)::

    fm = SDERF(n_features=256, kernel="gaussian", random_state=0)
    fm.fit(X, y=None, *, Y=None)   # scikit-learn transformer: y (a Pipeline's target) is
                                   # ignored; the kernel's second data set is keyword-only
    fm.transform(X)                # (n, fm.output_dim) x-side features; fit_transform,
                                   # get_feature_names_out and set_output come with it
    fm.transform_y(Y)              # (m, fm.output_dim) y-side features
    fm.approx_kernel(X, Y)         # (n, m) real part of transform(X) @ conj(transform_y(Y)).T
    fm.exact_kernel(X, Y)          # (n, m) the kernel the map approximates
    fm.expected_kernel(X, Y)       # (n, m) E approx_kernel (the exact kernel, where unbiased)
    fm.variance(X, Y)              # (n, m) analytic variance of approx_kernel
    fm.complex_variance(X, Y)      # (n, m) E|k_hat - E k_hat|^2 of the complex estimate
    fm.log_relative_variance(X, Y) # (n, m) log(variance / expected_kernel^2)
    fm.kernel                      # the kernel's name: "softmax", "gaussian", "polynomial"
    fm.output_dim                  # columns of transform (may differ from n_features)

Inputs are NumPy arrays (anything :func:`numpy.asarray` takes, pandas included), SciPy
sparse matrices for the maps whose first step is a linear projection
(``accepts_sparse``), or torch tensors (CPU or GPU, with autograd) and other array-API
arrays, which keep their backend, device and dtype. float32 stays float32, float64 stays
float64; integers, booleans and NumPy float16 become float64 (as scikit-learn's
``check_array``; integer and boolean torch tensors become ``torch.get_default_dtype()``).
A second argument of another backend is moved to the first argument's backend and dtype.

Stabilised representation. Internally every map returns ``(base, log_scale)`` with
``features = base * exp(log_scale)[:, None]``; ``base`` is O(1) and ``log_scale`` carries
the magnitude. :meth:`FeatureMap.approx_kernel` multiplies the scales in log space, so
the estimate is finite whenever it is itself representable, even where the raw features
of :meth:`transform` overflow. For large norms one draw's estimate can still overflow
(trigonometric and bipolar hybrid maps) or underflow (positive maps) where the kernel is
moderate: its relative variance is then huge (:meth:`FeatureMap.log_relative_variance`).
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_array

from .._backend import (
    caller_stacklevel,
    check_random_state,
    device,
    gaussian_exponent,
    get_namespace,
    is_foreign_array,
    is_numpy_namespace,
    is_torch_array,
    to_backend,
    to_numpy,
)
from .._backend import validate_data as validate_array
from .._backend.chunks import checked_chunks, is_dask_array
from .._backend.fit_state import ParamsSinceFit, keep_model_on_error
from .._backend.parallel import block_map
from .._backend.sklearn_validation import (
    check_feature_names_of,
    check_frame_columns,
    check_lazy_output,
    check_positional_keys,
    for_container,
)
from ._dask import fit_dask, lazy_features
from .sampling import _BIASED_QUIET, BIASED_SAMPLERS

__all__ = ["KERNELS", "FeatureMap", "warn_feature_overflow"]

#: kernel name -> alpha of the scaled softmax kernel K^(alpha) (FAVOR# Sec. 2.1)
KERNELS = {"softmax": 0.0, "gaussian": -0.5}

#: entries of one row block of the (n, m) methods (approx_kernel, variance, ...) for NumPy
#: input: their temporaries (a dozen or more (n, m) arrays for some variances) are formed
#: one block at a time, so the peak memory is the output's plus a few MB
PAIR_BLOCK_ELEMENTS = 1 << 17
#: fewest rows of such a block (each block maps its Y side again)
PAIR_MIN_ROWS = 64
#: results up to this many entries (4 MB in float64) take one call: their temporaries
#: are small, and two threaded blocks cost more than they save (8-20 % slower for a
#: 1000 x 512 hybrid transform)
PAIR_ONE_CALL_ELEMENTS = 1 << 19


def _sparse_classes() -> str:
    """Names of the public feature maps that accept sparse input."""
    import importlib

    pkg = importlib.import_module("kernelkit.features")
    ok = [
        n
        for n in pkg.__all__
        if getattr(getattr(pkg, n), "accepts_sparse", False) is True
        and not n.endswith("FeatureMap")  # the base classes FeatureMap, DotProductFeatureMap
    ]
    return ", ".join(sorted(ok))


def gaussian_log_kernel(xp, X, Y, lengthscale: float = 1.0):
    """``-|x - y|^2 / (2 l^2)`` of dense ``X`` (n, d), ``Y`` (m, d), accurate for
    near-duplicate rows far from the origin (where ``|x|^2 + |y|^2 - 2 x.y`` loses every
    digit), exactly 0 for equal rows (the zero-variance points of the variance formulas)
    and finite, ``<= 0``, for inputs of any size (the exponent of
    :func:`kernelkit.kernels.gaussian_kernel`); an (n, 0) or (0, m) array for empty
    inputs."""
    if X.shape[0] == 0 or Y.shape[0] == 0:
        return xp.zeros((X.shape[0], Y.shape[0]), dtype=X.dtype, device=device(X))
    return gaussian_exponent.gaussian_log_kernel(xp, X, Y, lengthscale, exact_zero=True)


class FeatureMap(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ParamsSinceFit, BaseEstimator):
    """Base class of every random feature map: the contract of the module docstring.

    Subclasses declare ``_parameter_constraints`` (extending their parent's dict), which
    :meth:`fit` checks first, and implement ``_check_params()`` (the checks the
    constraints cannot express), ``_fit(X, Y, xp, rng)`` (``X`` validated, ``Y``
    validated or None), ``_output_dim_for(n_features)``,
    ``_scaled_features(X, xp, side)``, ``_exact_kernel(X, Y, xp)`` and
    ``_variance(X, Y, xp)``; complex maps also ``_complex_variance``.
    """

    #: whether ``transform_y`` equals ``transform`` (one map for both kernel arguments)
    symmetric = True
    #: whether every feature is positive (usable as attention weights)
    positive = False
    #: whether ``scipy.sparse`` input is accepted (the first step is a linear projection)
    accepts_sparse = False
    #: whether ``fit`` reads more of the data than its dimension
    data_dependent = False
    #: what ``fit`` reads of its data: ``"shape"`` (the dimension only; a Dask array is
    #: fitted on its first chunk), ``"moments"`` (the FAVOR# first and second moments; a
    #: Dask array in one pass of chunk sums) or ``"all"`` (the rows; a Dask array is
    #: computed first). User guide: "Scale-out with Dask".
    fit_reads: ClassVar[str] = "all"
    #: whether :meth:`variance`, :meth:`complex_variance` and :meth:`log_relative_variance`
    #: evaluate their formulas on float64 copies of float32 input (the result is cast
    #: back): formulas that read ``|x - y|^2``, ``|x + y|^2`` or an angle from the Gram
    #: matrix lose every digit there in float32 where the variance is small (near
    #: ``y = x`` or ``y = -x``)
    _variance_in_float64: ClassVar[bool] = False
    #: whether :meth:`transform`, :meth:`transform_y` and the pairwise methods
    #: (:meth:`approx_kernel`, :meth:`exact_kernel`, :meth:`expected_kernel`, the
    #: variances) warn once where a value overflows to +-inf (:meth:`_checked_values`):
    #: the dot-product maps, whose degree-``p`` products of the inputs leave the range
    #: (the projection maps warn in their own words, :func:`warn_feature_overflow`)
    _warns_value_overflow: ClassVar[bool] = False
    #: constructor parameter -> scikit-learn constraints, checked by ``fit`` through
    #: ``_validate_params()`` (every map declares all of its ``__init__`` parameters)
    _parameter_constraints: ClassVar[dict] = {}

    @classmethod
    def _get_param_names(cls):
        # scikit-learn reads the names from the signature of __init__ on every get_params
        # (so on every fit, through _validate_params): read it once per class
        names = cls.__dict__.get("_param_names")
        if names is None:
            names = tuple(super()._get_param_names())
            cls._param_names = names
        return list(names)

    def _checks_finite_in_fit(self) -> bool:
        """Whether ``_fit`` checks the data for NaN / inf itself (through sums it computes
        anyway), so that ``fit`` need not make a pass over the data for it."""
        return False

    # ------------------------------------------------------------------ fitting
    @keep_model_on_error
    def fit(self, X, y=None, *, Y=None):
        """Draw the random parameters and fit the data-dependent ones.

        Parameters
        ----------
        X : array-like, sparse matrix, tensor or Dask array, shape (n, d)
            x-side (query) points. A Dask array is read chunk by chunk, as little as the
            map needs (user guide: "Scale-out with Dask").
        y : ignored
            A scikit-learn ``Pipeline`` passes its target here; it is not used.
        Y : array-like, shape (m, d), optional, keyword-only
            y-side (key) points, the kernel's second argument; defaults to ``X``. Only
            data-dependent maps read it (the others check its dimension).

        Returns
        -------
        self

        Notes
        -----
        A ``fit`` that raises leaves the map as it was before the call (fitted or not):
        the width and column names of the new ``X`` are recorded before its values are
        checked, and a Dask fit reads the chunks one after another.
        """
        self._validate_params()  # the declared constraints (errors name the parameter)
        self._check_params()  # what they cannot express (cross-parameter rules)
        if is_dask_array(X) or is_dask_array(Y):
            if Y is None and X.ndim == 2:
                self._check_positional_keys(X, y)
            return fit_dask(self, X, Y)
        finite = not self._checks_finite_in_fit()
        X, xp = self._validate(X, "X", reset=True, check_finite=finite)
        if Y is None:
            self._check_positional_keys(X, y)
        else:
            Y, _ = self._validate(
                Y, "Y", like=X, allow_empty=False, check_finite=finite, check_names=True
            )
        self._fit(X, Y, xp, check_random_state(self.random_state))
        self._record_fitted_params()
        self._is_fitted = True
        return self

    def _fit_reads_data(self) -> bool:
        """Whether this map's ``fit`` reads the data beyond its dimension: the class's
        ``data_dependent``, False where the parameters that would be fitted are given
        (``GERF(A=...)``, ``NormalizedGaussianHybridRF(radius=...)``)."""
        return self.data_dependent

    def _check_positional_keys(self, X, y):
        """A second data set passed positionally would be silently ignored: say so."""
        check_positional_keys(type(self).__name__, X, y, self._fit_reads_data(), stacklevel=5)

    def _check_params(self):
        """Validate the constructor parameters (raise ``TypeError`` / ``ValueError``)."""

    def _fit(self, X, Y, xp, rng):
        raise NotImplementedError

    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "_is_fitted", False)

    def _check_fitted(self, redrawn=()):
        """``NotFittedError`` before ``fit`` or after a ``set_params`` that changed a
        parameter of the fitted map (but those named in ``redrawn``: a ``redraw`` method
        draws the random part again from the current values of those)."""
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this feature map."
            )
        self._check_unchanged_since_fit(ignore=redrawn, using="this feature map")

    def _record_fitted_params(self):
        """The parameters the fitted map belongs to (after ``fit`` or a ``redraw``), and
        its columns for get_feature_names_out: a set_params after fit (as on any
        scikit-learn estimator) changes nothing until the next fit."""
        self._n_features_out = self.output_dim
        self._record_fit_params()

    # ------------------------------------------------------------------ inputs
    def _validate(
        self,
        X,
        name: str,
        *,
        reset: bool = False,
        like=None,
        allow_empty=None,
        check_finite=True,
        check_names=False,
    ):
        """Validated ``(X, xp)`` under the dtype / backend / sparse policy of the module doc.

        ``reset`` (``fit``'s ``X``) records ``n_features_in_`` and, for named columns,
        ``feature_names_in_``; otherwise the number of columns must match. ``like``: an
        already validated array whose backend, device and dtype ``X`` takes; the column
        names of such a second argument (``Y``) are checked against ``feature_names_in_``
        with ``check_names``.
        """
        if allow_empty is None:
            allow_empty = not reset
        n_in = None if (reset or like is not None) else self.n_features_in_
        if like is not None:
            n_in = like.shape[1]
        if is_dask_array(X):  # the methods that are not lazy compute a Dask argument; its
            # chunks may be SciPy sparse (numpy.asarray: an object array); each chunk's
            # width is checked (named) before Dask joins them
            X = checked_chunks(X, name).compute()
        if sp.issparse(X):
            if not self.accepts_sparse:
                raise TypeError(
                    f"{type(self).__name__} does not support sparse input ({name} is a "
                    f"{type(X).__name__}): its features are not a linear projection of the "
                    f"input. Convert with {name}.toarray(), or use a map that accepts sparse "
                    f"input: {_sparse_classes()}."
                )
            X = check_array(
                X,
                accept_sparse="csr",
                dtype=[np.float64, np.float32],
                ensure_min_samples=0 if allow_empty else 1,
                input_name=name,
                estimator=self,
            )
            xp = get_namespace(np.empty(0))
        else:
            foreign = is_foreign_array(X)
            named = hasattr(X, "columns") or "feature_names_in_" in self.__dict__
            if not foreign and named and (reset or like is None or check_names):
                check_feature_names_of(self, X, name, reset)  # pandas column names
            if not foreign and hasattr(X, "columns") and hasattr(X, "dtypes"):
                check_frame_columns(X, name)  # a text column, named
            X, xp = validate_array(X, name, allow_empty=allow_empty, check_finite=check_finite)
            if not foreign and X.dtype == np.float16:  # as scikit-learn's check_array
                X = X.astype(np.float64)
            if reset and foreign:
                self.__dict__.pop("feature_names_in_", None)
        if reset:
            self.n_features_in_ = int(X.shape[1])
        if n_in is not None and X.shape[1] != n_in:
            raise ValueError(
                f"{name} has {X.shape[1]} features, but {type(self).__name__} is "
                f"expecting {n_in} features as input."
            )
        if like is not None:
            X, xp = self._like(X, xp, like)
        return X, xp

    @staticmethod
    def _like(X, xp, like):
        """``X`` moved to the backend, device and dtype of ``like`` (mixed-input rule)."""
        xp_like = get_namespace(like) if not sp.issparse(like) else get_namespace(np.empty(0))
        if sp.issparse(X) or sp.issparse(like):
            return X, xp
        if xp_like.__name__ != xp.__name__:
            return to_backend(to_numpy(X), xp_like, like), xp_like
        if X.dtype != like.dtype:
            X = xp.astype(X, like.dtype)
        return X, xp

    def _prepare(self, X, xp, name: str = "X"):
        """Map-specific input transform (lengthscale, normalisation) of validated ``X``,
        the argument ``name`` (for its errors)."""
        return X

    def _check_X(self, X, name: str = "X", like=None):
        """Fitted check, validation and :meth:`_prepare`: ``(X, xp)``."""
        self._check_fitted()
        X, xp = self._validate(X, name, like=like, check_names=True)
        return self._prepare(X, xp, name), xp

    def _check_X_half_widened(self, X, name: str = "X"):
        """Prepared ``(X, xp, dtype)`` for the methods of one argument (:meth:`transform`,
        :meth:`transform_y`, :meth:`transform_scaled`, ...): a dense input of a
        half-precision dtype (torch's float16, bfloat16) in float32 before
        :meth:`_prepare`, as :meth:`_check_pair_half_widened` does for two; ``dtype`` the
        input's, to return (:meth:`_narrow_features`).

        Formed in the half dtype, the projections ``w^T x`` (|w^T x| ~ 10 has an absolute
        rounding of 5e-3 in float16, 4e-2 in bfloat16), the squared norms (float16
        overflows from norm 256) and the row scales ``exp(...)`` lost digits a float32
        computation keeps: features off by 10-50 eps of the half dtype, or inf where the
        feature is representable. Formed in float32 and rounded once, each feature is the
        float32 one to the half dtype's rounding."""
        self._check_fitted()
        Xv, xp = self._validate(X, name, check_names=True)
        return self._prepare_half_widened(Xv, xp, name, Xv.dtype), xp, Xv.dtype

    def _prepare_half_widened(self, V, xp, name: str, dtype):
        """:meth:`_prepare` of the validated input ``V``, in float32 when ``dtype`` (the
        first argument's) is a half-precision one and ``V`` is dense."""
        if sp.issparse(V) or xp.finfo(dtype).bits >= 32:
            return self._prepare(V, xp, name)
        return self._prepare_widened(xp.astype(V, xp.float32), xp, name, dtype)

    def _narrow_features(self, xp, out, dtype, side: str):
        """Features ``out`` formed from a widened input (:meth:`_check_X_half_widened`)
        rounded to the input's real ``dtype`` (complex features stay complex64: there is
        no complex bfloat16, and torch's complex32 is experimental). A feature finite in
        float32 that the rounding takes to inf gets the overflow warning (once), as an
        overflow of the map itself does."""
        if out.dtype == dtype or xp.isdtype(out.dtype, "complex floating"):
            return out
        narrowed = narrow_to(xp, out, dtype)
        if not _on_host(out):  # (on accelerators the test would wait for the device)
            return narrowed
        if bool(xp.all(xp.isfinite(_detach(out)))) and not bool(
            xp.all(xp.isfinite(_detach(narrowed)))
        ):
            warn_feature_overflow(
                side,
                dtype,
                math.log(float(xp.finfo(dtype).max)),
                "use approx_kernel, which combines the row scales in log space, or "
                "transform_scaled, or scale the inputs down.",
            )
        return narrowed

    def _check_pair(self, X, Y):
        """Prepared ``(X, Y, xp)``; ``Y`` defaults to ``X`` and follows ``X``'s backend."""
        Xp, xp = self._check_X(X, "X")
        if Y is None:
            return Xp, Xp, xp
        Yp, _ = self._check_X(Y, "Y", like=Xp)
        return Xp, Yp, xp

    def _check_pair_half_widened(self, X, Y):
        """Prepared ``(X, Y, xp, dtype)`` for :meth:`approx_kernel`, :meth:`exact_kernel`
        and (densified) the variances (:meth:`_check_pair_widened`):
        inputs of a half-precision dtype (torch's float16, bfloat16) in float32 before
        :meth:`_prepare`, others as :meth:`_check_pair`; ``dtype`` the one to return (the
        input's). In float16 the squared norm of a row of norm above 256 overflows (and
        the row terms ``-|x|^2 / 2`` of the softmax maps with it), which made the
        stabilisers ``inf - inf = NaN``, the Gaussian kernel included; formed in float32
        and rounded once, the results are those of the inputs to the half dtype's range."""
        self._check_fitted()
        Xv, xp = self._validate(X, "X", check_names=True)
        dtype = Xv.dtype
        # Y takes X's backend and dtype first (the mixed-input rule), then both widen
        Yv = None if Y is None else self._validate(Y, "Y", like=Xv, check_names=True)[0]
        Xp = self._prepare_half_widened(Xv, xp, "X", dtype)
        Yp = Xp if Yv is None else self._prepare_half_widened(Yv, xp, "Y", dtype)
        return Xp, Yp, xp, dtype

    def _check_pair_widened(self, X, Y):
        """Dense prepared ``(X, Y, xp, dtype)`` for the analytic methods (variances):
        inputs of a half-precision dtype (torch's float16, bfloat16) in float32 before
        :meth:`_prepare`, prepared inputs in float64 where :attr:`_variance_in_float64`
        asks for it, and ``dtype`` the one to return (the input's).

        The variance formulas cancel (``E k_hat^2 - k^2``, ``1 - cos``, ...) and the
        preparation (a lengthscale, unit rows) rounds: formed in the half dtype, variances
        below its eps relative to those terms lost every digit; formed in float32 and
        rounded once, they are the values of the inputs to the half dtype's precision."""
        Xp, Yp, xp, dtype = self._check_pair_half_widened(X, Y)
        Xd = self._densify(Xp)
        Yd = Xd if Yp is Xp else self._densify(Yp)
        if self._variance_in_float64 and Xd.dtype != xp.float64:
            Xw = xp.astype(Xd, xp.float64)
            Yd = Xw if Yd is Xd else xp.astype(Yd, xp.float64)
            Xd = Xw
        return Xd, Yd, xp, dtype

    def _prepare_widened(self, X, xp, name: str, dtype):
        """:meth:`_prepare` of ``X`` that may have been widened from ``dtype`` (a
        half-precision input of the variances): checks of its values allow the rounding
        of ``dtype``, as they do for the input itself."""
        return self._prepare(X, xp, name)

    @staticmethod
    def _densify(X):
        """Dense version of a prepared input (sparse inputs of the O(n m) methods)."""
        return X.toarray() if sp.issparse(X) else X

    # ------------------------------------------------------------------ sizes
    def _output_dim_for(self, n_features: int) -> int:
        """Output columns for ``n_features`` random features, from the parameters alone."""
        return int(n_features)

    @property
    def output_dim(self) -> int:
        """Number of output columns of :meth:`transform`."""
        return self._output_dim_for(int(self.n_features))

    def n_features_for_output(self, n_components: int) -> int:
        """The largest ``n_features`` whose output has at most ``n_components`` columns.

        Estimators that build maps by name (``RandomFeatures``, ``NadarayaWatsonClassifier``)
        take scikit-learn's ``n_components``, the number of output columns; this converts it
        to the map's own ``n_features`` (e.g. ``n_components // 2`` for
        :class:`~kernelkit.features.HyperbolicRF`). At least 1: below the smallest output
        of the map (2 for HyperbolicRF, ``4 (n_lambda + 1)`` for AngularHybridRF) the
        output has more than ``n_components`` columns.

        Parameters
        ----------
        n_components : int
            The number of output columns wanted.

        Returns
        -------
        int
            ``n_features``, at least 1.
        """
        n_components = int(n_components)
        if self._output_dim_for(1) >= n_components:
            return 1
        lo, hi = 1, max(1, n_components)
        while lo < hi:  # output_dim is non-decreasing in n_features
            mid = (lo + hi + 1) // 2
            if self._output_dim_for(mid) <= n_components:
                lo = mid
            else:
                hi = mid - 1
        return lo

    @property
    def is_complex(self) -> bool:
        """Whether :meth:`transform` returns complex features."""
        return False

    # ------------------------------------------------------------------ features
    def _scaled_features(self, X, xp, side: str):
        """Return ``(base (n, D), log_scale (n,))`` for prepared ``X``."""
        raise NotImplementedError

    #: whether :meth:`transform_scaled` rescales the rows of ``_scaled_features`` to a
    #: largest ``|base|`` of 1 (:func:`_unit_rows`): maps whose stabiliser is a detached
    #: maximum or a bound, exact for the product but not for the two pieces apart
    _unit_scaled_rows: ClassVar[bool] = False

    #: whether :meth:`_features` maps NumPy rows in blocks of about 2^17 features (maps
    #: whose features of all rows would take several (n, D) temporaries at once)
    _row_blocked_features: ClassVar[bool] = False

    def _features(self, X, xp, side: str):
        """Features of prepared ``X`` (n, output_dim); may overflow for huge norms."""
        if self._row_blocked_features and X.shape[0] > PAIR_MIN_ROWS:
            return pairwise_rows(
                lambda Xb: self._features_of_rows(Xb, xp, side),
                X,
                self.output_dim,
                xp,
                self._pair_jobs(),
            )
        return self._features_of_rows(X, xp, side)

    def _features_of_rows(self, X, xp, side: str):
        base, log_scale = self._scaled_features(X, xp, side)
        return scale_rows(xp, base, log_scale)

    def transform(self, X):
        """x-side (query) features.

        Parameters
        ----------
        X : array-like, sparse matrix (``accepts_sparse`` maps), tensor or Dask array
            Shape (n, d).

        Returns
        -------
        array, shape (n, output_dim)
            Same backend, device and dtype as ``X`` (complex64 / complex128 for complex
            maps); for a Dask ``X`` a lazy Dask array with its row chunks. May overflow
            for huge norms; use :meth:`approx_kernel` or :meth:`transform_scaled` there.
        """
        if is_dask_array(X):
            check_lazy_output(self)
            return lazy_features(self, X, "x")
        return for_container(self, self._features_of(X, "x"))

    def transform_y(self, Y):
        """y-side (key) features; :meth:`transform` for symmetric maps.

        Parameters
        ----------
        Y : array-like, sparse matrix (``accepts_sparse`` maps), tensor or Dask array
            Shape (m, d).

        Returns
        -------
        array, shape (m, output_dim)
            As :meth:`transform` returns for ``X``.
        """
        if is_dask_array(Y):
            return lazy_features(self, Y, "y")
        return self._features_of(Y, "y")

    def _features_of(self, X, side: str):
        """Features of the unprepared in-memory input ``X`` (``side`` "x" or "y"): a
        half-precision input formed in float32 and rounded once."""
        X, xp, dtype = self._check_X_half_widened(X, "X" if side == "x" else "Y")
        # maps that promise an overflow warning (_warns_value_overflow) give it in their
        # _features, where a bound on the features says whether one is possible (a pass
        # over all (n, D) features to look for inf would cost 6-15% of a transform); an
        # inf already there is said once: _narrow_features warns only of new ones
        out = self._features(X, xp, side)
        return self._narrow_features(xp, out, dtype, side)

    def _checked_features(self, xp, out, side: str):
        """:meth:`_checked_values` of the features ``out`` of :meth:`transform` (``side``
        "x") or :meth:`transform_y` ("y"), for a map whose feature bound allows an
        overflow."""
        method, args = ("transform", "X") if side == "x" else ("transform_y", "Y")
        return self._checked_values(xp, out, method, args)

    def _checked_values(self, xp, out, method: str, args: str, exact: bool = False, log_bound=None):
        """``out`` of ``method(args)``, with one ``RuntimeWarning`` where some of its
        values are +-inf (:func:`warn_value_overflow`) on maps that promise it
        (:attr:`_warns_value_overflow`). Inputs are finite (checked), so an inf is an
        overflow. ``exact``: a ``ValueError`` instead, as the exact kernels of
        :mod:`kernelkit.kernels` say that they overflow. Host arrays only (on
        accelerators the test would wait for the device). ``log_bound``: an upper bound
        of ``log |out|`` from the inputs (None: unknown); below ``log`` of the largest
        value of ``out``'s dtype no value can be inf, and the pass over ``out`` (5-50 %
        of a pairwise method's time) is left out."""
        if (
            self._warns_value_overflow
            and _on_host(out)
            and not _below_range(xp, log_bound, out.dtype)
            and not bool(xp.all(xp.isfinite(_detach(out))))
        ):
            if exact:
                raise ValueError(
                    f"{type(self).__name__}.{method}({args}) overflows {out.dtype} for these "
                    f"inputs (kernel={getattr(self, 'kernel', None)!r}); scale {args} down "
                    "(divide by a constant), or raise the lengthscale / lower gamma."
                )
            warn_value_overflow(type(self).__name__, method, args, out.dtype)
        return out

    def transform_scaled(self, X, side: str = "x"):
        """Features in stabilised form.

        Parameters
        ----------
        X : array, shape (n, d)
        side : {"x", "y"}

        Returns
        -------
        base : array, shape (n, output_dim)
            Row-normalised features. Maps of exponential features (the positive and
            hyperbolic maps, the hybrids, ``ComplexExponentialRF``): the largest
            ``|base|`` of every row is 1 (a row of zero features stays zero). The
            dot-product maps: the features of the row scaled to unit norm.
        log_scale : array, shape (n,)
            ``transform(X) == base * exp(log_scale)[:, None]``: the log of the row's
            largest absolute feature, or for the dot-product maps ``degree`` times the
            log of its norm. Both pieces are differentiable in ``X`` (torch autograd),
            each on its own.
        """
        if side not in ("x", "y"):
            raise ValueError(f"side must be 'x' or 'y', got {side!r}.")
        X, xp, dtype = self._check_X_half_widened(X, "X" if side == "x" else "Y")
        base, log_scale = self._scaled_features(X, xp, side)
        if self._unit_scaled_rows:
            base, log_scale = _unit_rows(xp, base, log_scale)
        if xp.isdtype(base.dtype, "complex floating"):
            return base, as_real_dtype(xp, log_scale, dtype)
        if base.dtype != dtype:
            base, log_scale = _rows_within(xp, base, log_scale, dtype)
        return as_real_dtype(xp, base, dtype), as_real_dtype(xp, log_scale, dtype)

    def _scaled_pair(self, X, Y, xp):
        """``(bx, sx, by, sy)`` of prepared ``X``, ``Y`` for :meth:`approx_kernel`."""
        bx, sx = self._scaled_features(X, xp, "x")
        if Y is X and self.symmetric:
            return bx, sx, bx, sx
        by, sy = self._scaled_features(Y, xp, "y")
        return bx, sx, by, sy

    def approx_kernel(self, X, Y=None):
        """Unbiased random-feature estimate of the kernel matrix.

        ``K_hat = Re(transform(X) @ conj(transform_y(Y)).T)``, with the row scales
        combined in log space (finite wherever the estimate is representable).

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m), real
        """
        args = "X" if Y is None else "X, Y"
        X, Y, xp, dtype = self._check_pair_half_widened(X, Y)
        bx, sx, by, sy = self._scaled_pair(X, Y, xp)
        out = combine_row_scales(xp, real_gram(xp, bx, by), sx, sy, self._pair_jobs())
        out = as_real_dtype(xp, out, dtype)
        bound = None  # (on accelerators no check: its reductions would wait for the device)
        if self._warns_value_overflow and _on_host(out):
            bound = log_gram_bound(xp, bx, sx, by, sy)
        return self._checked_values(xp, out, "approx_kernel", args, log_bound=bound)

    # ------------------------------------------------------------------ kernels
    def exact_kernel(self, X, Y=None):
        """The kernel this map approximates, ``K(X, Y)``.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m), real
            The floating dtype of ``X`` (float64 for an integer ``X``).
        """
        args = "X" if Y is None else "X, Y"
        X, Y, xp, dtype = self._check_pair_half_widened(X, Y)
        X, Y = self._densify(X), self._densify(Y)
        fn, bound = self._exact_kernel_plan(X, Y, xp)
        out = as_real_dtype(xp, self._pairwise(fn, X, Y, xp), dtype)
        return self._checked_values(xp, out, "exact_kernel", args, exact=True, log_bound=bound)

    def _exact_kernel_plan(self, X, Y, xp):
        """``(fn, log_bound)`` for :meth:`exact_kernel` of prepared dense ``X`` (n, d),
        ``Y`` (m, d): the function of row blocks (``fn(Xb, Y, xp)``, default
        :meth:`_exact_kernel`) and an upper bound of ``log |K|`` known from the inputs
        alone, or None (then :meth:`_checked_values` looks for an overflow in ``K``)."""
        return self._exact_kernel, None

    def expected_kernel(self, X, Y=None):
        """``E approx_kernel(X, Y)`` over the random draw of ``fit``, shape (n, m).

        The exact kernel for unbiased maps; maps that estimate a surrogate (a truncated
        series, a fitted mixture) override it. For i.i.d. projections: with
        ``sampler="sorf"`` or ``"hadamard"`` (biased, discrete directions) it is the i.i.d.
        value, not the mean of their estimate, and a ``UserWarning`` says so.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m), real
            The floating dtype of ``X`` (float64 for an integer ``X``).
        """
        self._warn_biased_sampler("expected_kernel")
        return self.exact_kernel(X, Y)

    def _exact_kernel(self, X, Y, xp):
        raise NotImplementedError

    def _warn_biased_sampler(self, method: str):
        """Warn that ``method`` returns the i.i.d. value, which does not bound the error of
        a biased structured sampler (user guide: "The feature-map contract", Variances)."""
        sampler = getattr(self, "sampler", None)
        if _BIASED_QUIET:
            return
        if isinstance(sampler, str) and sampler in BIASED_SAMPLERS:
            if method == "expected_kernel":
                tail = (
                    "so its mean differs from this value. With sampler='orthogonal' or "
                    "'halton' the estimate is unbiased."
                )
            else:
                tail = (
                    "and its mean squared error can exceed this value many times. With "
                    "sampler='orthogonal' or 'halton' the estimate is unbiased and this value "
                    "an upper bound in practice."
                )
            warnings.warn(
                f"{type(self).__name__}(sampler={sampler!r}).{method} is the value for "
                f"i.i.d. projections. {sampler!r} projections have discrete directions: the "
                f"estimate is biased (O(1/sqrt(d)), large for small d), {tail}",
                UserWarning,
                stacklevel=caller_stacklevel(),
            )

    def variance(self, X, Y=None):
        """Analytic variance of :meth:`approx_kernel` (the real part), shape (n, m).

        For i.i.d. projections. For ``sampler="orthogonal"`` and ``"halton"`` (unbiased) it
        is the i.i.d. value, in practice an upper bound of the variance. For ``"sorf"`` and
        ``"hadamard"`` (biased, discrete directions) it is the i.i.d. value too, which the
        mean squared error can exceed many times for small ``d``: a ``UserWarning`` says
        so. Sparse inputs are densified.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m), real
            The floating dtype of ``X`` (float64 for an integer ``X``).
        """
        args = "X" if Y is None else "X, Y"
        X, Y, xp, dtype = self._check_pair_widened(X, Y)
        self._warn_biased_sampler("variance")
        out = as_real_dtype(xp, self._pairwise(self._variance, X, Y, xp), dtype)
        return self._checked_values(xp, out, "variance", args)

    def complex_variance(self, X, Y=None):
        """``E|k_hat - E k_hat|^2`` of the complex estimate ``phi(x)^T conj(psi(y))``.

        The variance the dot-product paper reports for complex maps (Theorem 2); never
        smaller than :meth:`variance`, and equal to it for real maps. The i.i.d. value
        for every ``sampler`` (see :meth:`variance`).

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m), real
            The floating dtype of ``X`` (float64 for an integer ``X``).
        """
        args = "X" if Y is None else "X, Y"
        X, Y, xp, dtype = self._check_pair_widened(X, Y)
        self._warn_biased_sampler("complex_variance")
        fn = self._complex_variance if self.is_complex else self._variance
        out = as_real_dtype(xp, self._pairwise(fn, X, Y, xp), dtype)
        return self._checked_values(xp, out, "complex_variance", args)

    def _pair_jobs(self):
        n_jobs = getattr(self, "n_jobs", None)
        return n_jobs if isinstance(n_jobs, numbers.Integral) else None

    def _pairwise(self, fn, X, Y, xp):
        """``fn(X, Y, xp)`` (n, m) of prepared dense inputs, over row blocks of ``X``."""
        return pairwise_rows(lambda Xb: fn(Xb, Y, xp), X, Y.shape[0], xp, self._pair_jobs())

    def _variance(self, X, Y, xp):
        raise NotImplementedError

    def _complex_variance(self, X, Y, xp):
        raise NotImplementedError

    def log_relative_variance(self, X, Y=None):
        """``log(variance / expected_kernel^2)``; ``-inf`` where exact.

        The scale-free relative variance of FAVOR# Sec. 5.1, the criterion of
        ``RandomFeatures(method="auto")`` (which adds the squared relative bias of the
        maps whose :meth:`expected_kernel` is a surrogate). The i.i.d. value for every
        ``sampler`` (see :meth:`variance`).

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m), real
            The floating dtype of ``X`` (float64 for an integer ``X``).
        """
        X, Y, xp, dtype = self._check_pair_widened(X, Y)
        self._warn_biased_sampler("log_relative_variance")
        return as_real_dtype(xp, self._pairwise(self._log_relative_variance, X, Y, xp), dtype)

    def _log_relative_variance(self, X, Y, xp):
        var = self._variance(X, Y, xp)
        k = self._expected_kernel_prepared(X, Y, xp)
        with np.errstate(invalid="ignore"):  # 0 / 0: nan (no estimate, no kernel)
            return safe_log(xp, var) - 2.0 * safe_log(xp, xp.abs(k))

    def _expected_kernel_prepared(self, X, Y, xp):
        return self._exact_kernel(X, Y, xp)

    # ------------------------------------------------------------------ scikit-learn
    def __getstate__(self):
        """The pickled state: without the constants cached on other backends than NumPy
        (torch tensors, on the device they were used on), which the loaded map rebuilds
        from its NumPy parameters on first use, so that a map used on a GPU loads where
        there is none, or no torch."""
        state = super().__getstate__()
        cache = state.get("_cache")
        if cache and any(is_foreign_array(v) for v in cache.values()):
            state = dict(state)  # scikit-learn returns the instance's own __dict__
            state["_cache"] = {k: v for k, v in cache.items() if not is_foreign_array(v)}
        return state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # complex maps return complex64 / complex128: no real dtype is preserved
        tags.transformer_tags.preserves_dtype = [] if self.is_complex else ["float64", "float32"]
        tags.input_tags.sparse = bool(self.accepts_sparse)
        tags.non_deterministic = False
        return tags


# ---------------------------------------------------------------------- helpers
def _pair_rows(m: int) -> int:
    return max(PAIR_MIN_ROWS, PAIR_BLOCK_ELEMENTS // max(1, m))


def _row_blocks_of(xp, n: int, m: int):
    """Rows per block of an (n, m) NumPy result formed over row blocks, or None where
    it takes one call (other backends, one block, up to :data:`PAIR_ONE_CALL_ELEMENTS`)."""
    rows = _pair_rows(m)
    if not is_numpy_namespace(xp) or n <= rows or n * m <= PAIR_ONE_CALL_ELEMENTS:
        return None
    return rows


def pairwise_rows(fn, X, m: int, xp, n_jobs=None):
    """``fn(X)`` (n, m) for NumPy ``X`` (n, d) formed over row blocks of ``X``.

    ``fn`` maps rows to their (rows, m) block, each row independently of the others. A
    NumPy result larger than :data:`PAIR_ONE_CALL_ELEMENTS` is written block by block
    into the output, so the temporaries of ``fn`` are those of a block (a few MB) instead
    of a dozen (n, m) arrays; the blocks have fixed sizes and run on kernelkit's threads
    (the result does not depend on ``n_jobs``). Other backends, and small results, take
    one call.
    """
    n = X.shape[0]
    rows = _row_blocks_of(xp, n, m)
    if rows is None:
        return fn(X)
    first = fn(X[:rows])
    out = np.empty((n, m), dtype=first.dtype)
    out[:rows] = first

    def block(lo, hi):
        lo += rows
        hi += rows
        out[lo:hi] = fn(X[lo:hi])

    block_map(block, n - rows, rows, n_jobs)
    return out


def real_gram(xp, P, S):
    """``Re(P conj(S)^T)`` (n, m); ``S is P`` reads the parts once."""
    if not xp.isdtype(P.dtype, "complex floating"):
        return P @ xp.matrix_transpose(S)
    Pr, Pi = xp.real(P), xp.imag(P)
    Sr, Si = (Pr, Pi) if S is P else (xp.real(S), xp.imag(S))
    if not is_numpy_namespace(xp):
        return Pr @ xp.matrix_transpose(Sr) + Pi @ xp.matrix_transpose(Si)
    # strided views would miss BLAS; the imaginary products are added block by block
    # into the real one (no second (n, m) temporary)
    Pr, Pi = np.ascontiguousarray(Pr), np.ascontiguousarray(Pi)
    Sr, Si = (Pr, Pi) if S is P else (np.ascontiguousarray(Sr), np.ascontiguousarray(Si))
    out = Pr @ Sr.T
    rows = _pair_rows(out.shape[1])
    for lo in range(0, out.shape[0], rows):
        out[lo : lo + rows] += Pi[lo : lo + rows] @ Si.T
    return out


def combine_row_scales(xp, dot, sx, sy, n_jobs=None):
    """``dot * exp(sx[:, None] + sy[None, :])`` (n, m) as :func:`combine_scaled`; for
    NumPy in place in ``dot`` (a fresh product), one row block of scales at a time."""
    rows = _row_blocks_of(xp, *dot.shape)
    if rows is None:
        return combine_scaled(xp, dot, sx[:, None] + sy[None, :])

    def block(lo, hi):
        dot[lo:hi] = combine_scaled(xp, dot[lo:hi], sx[lo:hi, None] + sy[None, :])

    block_map(block, dot.shape[0], rows, n_jobs)
    return dot


def complex_dtype(xp, dtype):
    """The complex dtype of features of real ``dtype`` on an array-API backend: complex128
    for float64, complex64 otherwise (half-precision tensors too: torch's complex32 is
    experimental, and there is no complex bfloat16)."""
    return xp.complex128 if dtype == xp.float64 else xp.complex64


def as_real_dtype(xp, out, dtype):
    """``out`` in the real ``dtype`` of the input (a real product of complex64 features of
    a half-precision input is float32; a variance formed in float64 for float32 input);
    values beyond its range become inf / 0 (:func:`narrow_to`)."""
    return out if out.dtype == dtype else narrow_to(xp, out, dtype)


def combine_scaled(xp, dot, scale):
    """``dot * exp(scale)`` without overflow where the product is representable.

    ``dot`` (n, m) and ``scale`` (n, m) log factors; beyond ``exp``'s range of the dtype the
    product is formed as ``sign(dot) exp(log|dot| + scale)``.
    """
    if dot.shape[0] == 0 or dot.shape[1] == 0:
        return dot
    limit = math.log(float(xp.finfo(dot.dtype).max)) - 10.0
    if float(_detach(xp.max(scale))) < limit:
        return dot * xp.exp(scale)
    absdot = xp.abs(dot)
    # log of the subnormal values too (a product of two row-normalised bases can fall
    # below tiny while the scale brings it back into range); 1 stands in for the zeros
    nonzero = absdot > 0
    logabs = xp.log(xp.where(nonzero, absdot, xp.ones_like(absdot))) + scale
    logabs = xp.where(nonzero, logabs, xp.full_like(logabs, -math.inf))  # exp -> 0
    if is_numpy_namespace(xp):
        with np.errstate(over="ignore"):
            return xp.sign(dot) * xp.exp(logabs)
    return xp.sign(dot) * xp.exp(logabs)


def _on_host(a) -> bool:
    """Whether ``a`` lives in host memory (NumPy, or a CPU tensor)."""
    return not is_torch_array(a) or a.device.type == "cpu"


def _detach(a):
    # a plain value for control flow (no autograd warning when converting to float)
    return a.detach() if hasattr(a, "detach") else a


def _namespace_of(a):
    from .._backend.namespace import array_namespace

    return array_namespace(a)


def widen_to_float64(xp, X, Y):
    """``(X, Y, dtype)``: the inputs ``X`` (n, d), ``Y`` (m, d) in float64 and the dtype
    to return (None: float64).

    For analytic moments whose terms (powers of ``x^T y``, squared kernels) leave the
    float32 range long before the result does."""
    if X.dtype == xp.float64:
        return X, Y, None
    return xp.astype(X, xp.float64), xp.astype(Y, xp.float64), X.dtype


def _rows_within(xp, base, log_scale, dtype):
    """``(base, log_scale)`` (n, D), (n,) with the rows of ``base`` whose largest
    magnitude reaches the largest value of the narrower real ``dtype`` brought to a
    largest magnitude of 1 (their size moved into ``log_scale``), so that the base of a
    half-precision input does not round to inf (a float32 base from raw features, of
    rows of norm ~20 at degree 3, is above float16's 65504 where the features times
    their scale are not). Other rows are left as they are."""
    if base.shape[0] == 0 or base.shape[1] == 0:
        return base, log_scale
    top = xp.max(xp.abs(base), axis=1)  # (n,)
    # no data-dependent branch (it would wait for an accelerator): rows in range / 1
    top = xp.where(top >= float(xp.finfo(dtype).max), top, xp.ones_like(top))
    return base / top[:, None], log_scale + xp.log(top)


def narrow_to(xp, out, dtype):
    """``out`` (any shape, e.g. (n, m)) cast back to ``dtype`` (values beyond its range
    become inf / 0); ``dtype`` None returns it as it is."""
    if dtype is None:
        return out
    if is_numpy_namespace(xp):
        with np.errstate(over="ignore"):
            return out.astype(dtype)
    return xp.astype(out, dtype)


def scale_rows(xp, base, log_scale):
    """``base * exp(log_scale)[:, None]`` (n, D) for ``base`` (n, D), ``log_scale`` (n,):
    in place for NumPy (``base`` is the map's own temporary), overflow to inf without a
    NumPy warning (the maps warn themselves where they promise to).

    Where a row's scale overflows, a zero feature stays 0 (not ``0 * inf = NaN``), and
    the real and imaginary parts of complex features are scaled apart (a complex product
    with ``inf`` would make ``0 * inf`` of the other part): features are +-inf only where
    they leave the range themselves."""
    if is_numpy_namespace(xp):
        with np.errstate(over="ignore", invalid="ignore"):
            scale = np.exp(log_scale).astype(base.real.dtype, copy=False)
            if np.all(np.isfinite(scale)):
                base *= scale[:, None]
                return base
            for part in (base.real, base.imag) if np.iscomplexobj(base) else (base,):
                part[...] = np.where(part == 0, 0.0, part * scale[:, None])
        return base
    scale = xp.exp(log_scale)[:, None]
    if bool(xp.all(xp.isfinite(_detach(scale)))):
        return base * scale

    def part(b):
        return xp.where(b == 0, xp.zeros_like(b), b * scale)

    if not xp.isdtype(base.dtype, "complex floating"):
        return part(base)
    import torch  # the array-API backends with complex features: torch

    return torch.complex(part(xp.real(base)), part(xp.imag(base)))


def _below_range(xp, log_bound, dtype) -> bool:
    """Whether values of ``log |v| <= log_bound`` are below the range of ``dtype``
    (with a margin of a factor e for the rounding of the bound's inputs)."""
    if log_bound is None:
        return False
    return log_bound < math.log(float(xp.finfo(dtype).max)) - 1.0


def log_max_abs(xp, A) -> float:
    """``log max |A_ij|`` of a real or complex array (``-inf`` if empty or all zero,
    ``inf`` if it holds a NaN: no bound), from reductions over the whole array (no
    (n, d) temporary for a real ``A``; the complex modulus bounded by ``sqrt(2)`` times
    the largest part)."""
    if A.shape[0] == 0 or (A.ndim > 1 and A.shape[1] == 0):
        return -math.inf
    parts = (xp.real(A), xp.imag(A)) if xp.isdtype(A.dtype, "complex floating") else (A,)
    ends = [v for a in parts for v in (float(_detach(xp.max(a))), -float(_detach(xp.min(a))))]
    if any(math.isnan(v) for v in ends):
        return math.inf
    top = max(ends)
    if not top > 0:
        return -math.inf
    return math.log(top) + (0.5 * math.log(2.0) if len(parts) == 2 else 0.0)


def log_inner_bound(xp, X, Y) -> float:
    """An upper bound of ``log |x_i . y_j|`` over the rows of ``X`` (n, d), ``Y`` (m, d):
    ``log(d max |X| max |Y|)`` (``-inf`` for empty or zero inputs)."""
    return math.log(max(1, X.shape[1])) + log_max_abs(xp, X) + log_max_abs(xp, Y)


def log_polynomial_bound(log_g: float, gamma: float, coef0: float, degree: int) -> float:
    """An upper bound of ``log |(gamma g + coef0)^degree|`` for ``log |g| <= log_g``."""
    if int(degree) == 0:
        return 0.0
    log_a = math.log(abs(gamma)) + log_g if gamma else -math.inf
    log_c = math.log(abs(coef0)) if coef0 else -math.inf
    return int(degree) * float(np.logaddexp(log_a, log_c))


def log_gram_bound(xp, P, sp_, S, ss) -> float:
    """An upper bound of ``log |Re(P_i conj(S_j)) exp(sp_i + ss_j)|`` over all ``i, j``
    for features ``P`` (n, D), ``S`` (m, D) and log row scales ``sp_`` (n,), ``ss`` (m,):
    ``|P_i . S_j| <= D max |P| max |S|``. Reductions over the features, ``O((n + m) D)``
    next to the ``O(n m D)`` product."""
    if P.shape[0] == 0 or S.shape[0] == 0:
        return -math.inf
    scales = [float(_detach(xp.max(s))) for s in (sp_, ss)]
    lp = log_max_abs(xp, P)
    ls = lp if S is P else log_max_abs(xp, S)
    return math.log(max(1, P.shape[1])) + lp + ls + scales[0] + scales[1]


def safe_gram(xp, X, Y, log_bound=None):
    """``X Y^T`` (n, m) of dense ``X`` (n, d), ``Y`` (m, d): +-inf where a product leaves
    the floating-point range, never ``inf - inf = NaN`` from partial sums that overflow
    (rows of norm ~1e160 in float64), and no NumPy overflow warning. The rows are divided
    by their largest ``|entry|`` first where the plain product could overflow.

    ``log_bound``: the caller's :func:`log_inner_bound` of these rows (or of rows that
    include them), which spares the rows' maxima where it keeps ``d max |X| max |Y|``
    below a quarter of the largest float; elsewhere these rows' own maxima decide (a
    block of rows may stay in range where all rows do not)."""
    if X.shape[0] == 0 or Y.shape[0] == 0 or X.shape[1] == 0:
        return X @ xp.matrix_transpose(Y)
    quarter = float(xp.finfo(X.dtype).max) / 4
    # the bound (three logs summed, of these rows or of more) is at least the log of the
    # product below less 1e-12 of rounding: 1e-9 under log(quarter), that product is below
    # quarter too, so the plain product is what the rows' maxima would choose
    if log_bound is not None and log_bound < math.log(quarter) - 1e-9:
        return X @ xp.matrix_transpose(Y)
    ax = xp.max(xp.abs(X), axis=1)  # (n,)
    ay = xp.max(xp.abs(Y), axis=1)  # (m,)
    big = float(_detach(xp.max(ax))) * float(_detach(xp.max(ay))) * X.shape[1]
    if big < quarter:
        return X @ xp.matrix_transpose(Y)
    ax = xp.where(ax > 0, ax, xp.ones_like(ax))
    ay = xp.where(ay > 0, ay, xp.ones_like(ay))
    Gu = (X / ax[:, None]) @ xp.matrix_transpose(Y / ay[:, None])  # |Gu| <= d
    # ax ay Gu in log space: sign(Gu) exp(log ax + log ay + log|Gu|), 0 where Gu = 0
    return times_exp(xp, Gu, xp.log(ax)[:, None] + xp.log(ay)[None, :])


def warn_value_overflow(owner: str, method: str, args: str, dtype) -> None:
    """The ``RuntimeWarning`` of ``owner.method(args)`` (``args`` "X" or "X, Y") whose
    values overflow ``dtype`` to +-inf: the inputs are too large for it. Points at the
    user's call."""
    warnings.warn(
        f"{owner}.{method}({args}): some values overflow {dtype} to +-inf (the kernel's "
        f"powers or exponentials of inputs this large leave its range): scale {args} down "
        "(divide by a constant), or raise the lengthscale / lower gamma.",
        RuntimeWarning,
        stacklevel=caller_stacklevel(),
    )


def warn_feature_overflow(side: str, dtype, limit: float, remedy: str) -> None:
    """The ``RuntimeWarning`` of a ``transform`` (``side`` ``"x"``) or ``transform_y``
    (``"y"``) whose features overflow ``dtype`` to inf (log-scale above ``limit``) where
    the kernel may be finite; ``remedy`` says what to use instead. Points at the user's
    call."""
    name = "X" if side == "x" else "Y"
    warnings.warn(
        f"Some features of {name} overflow {dtype} to inf (log-features above "
        f"{limit:.0f}) although the kernel may be finite: {remedy}",
        RuntimeWarning,
        stacklevel=caller_stacklevel(),
    )


def times_exp(xp, out, log_w):
    """``out * exp(log_w)`` (n, m) as ``sign(out) exp(log|out| + log_w)``, so that a weight
    below the floating-point range does not zero a representable product (0 where
    ``out = 0``, even if the weight overflows); ``out`` itself for ``log_w = None``."""
    if log_w is None:
        return out
    nz = out != 0
    logabs = xp.log(xp.where(nz, xp.abs(out), xp.ones_like(out))) + log_w
    if is_numpy_namespace(xp):
        # inf is the answer where the product overflows; sign(0) * inf = NaN where out = 0
        # is discarded by the where
        with np.errstate(over="ignore", invalid="ignore"):
            return np.where(nz, np.sign(out) * np.exp(logabs), 0.0).astype(out.dtype, copy=False)
    return xp.where(nz, xp.sign(out) * xp.exp(logabs), xp.zeros_like(out))


def check_bool(value, name: str) -> bool:
    """``value`` as a bool, or a ``TypeError`` naming the parameter."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {value!r}.")
    return bool(value)


def check_real(value, name: str, *, minimum=None, strict: bool = False, maximum=None) -> float:
    """A finite real ``value`` in range, or a ``TypeError`` / ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}.")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}.")
    return value


def log1mexp(xp, t):
    """``log(1 - exp(-t))`` for ``t >= 0`` (``-inf`` at 0), elementwise.

    The log of a guarded value: autograd's gradient at ``t = 0`` is 0 (the squared form
    ``(1 - exp(-t))^2`` of the variances is smooth there), not ``log'(0) * 0 = nan``.
    """
    t = xp.clip(t, min=0.0)
    if is_numpy_namespace(xp):
        with np.errstate(divide="ignore"):
            return np.log(-np.expm1(-t))
    pos = t > 0
    safe = xp.where(pos, t, xp.ones_like(t))
    return xp.where(pos, xp.log(-xp.expm1(-safe)), xp.full_like(t, -math.inf))


def safe_log(xp, v):
    """``log(v)`` for ``v >= 0`` (``-inf`` at 0), elementwise, with autograd's gradient 0
    where ``v = 0`` (an exact estimate: zero variance, or a zero kernel) instead of
    ``log'(0) * 0 = nan`` flowing into the whole gradient."""
    if is_numpy_namespace(xp):
        with np.errstate(divide="ignore"):
            return np.log(v)
    pos = v > 0
    safe = xp.where(pos, v, xp.ones_like(v))
    return xp.where(pos, xp.log(safe), xp.full_like(v, -math.inf))


def sq_norms(xp, X):
    """Squared row norms (n,) of dense or sparse ``X``."""
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=X.dtype).ravel()
    return xp.sum(X * X, axis=1)


def _matmul_augmented(Xb, extra, W_aug, out) -> None:
    """``out = [Xb, *extra] @ W_aug`` for a row block ``Xb`` (k, d), dense or sparse.

    ``extra`` are scalars or (k,) arrays appended as columns, matched by the last rows of
    ``W_aug`` (d + len(extra), D): a per-column constant (row of ``W_aug``, column of ones)
    or a per-row term (column of ``Xb``, row of ones) costs no pass over ``out``.
    """
    k, d = Xb.shape
    if sp.issparse(Xb):
        out[...] = Xb @ W_aug[:d]
        for j, e in enumerate(extra):
            out += np.multiply.outer(np.broadcast_to(np.asarray(e, out.dtype), (k,)), W_aug[d + j])
        return
    Xa = np.empty((k, d + len(extra)), dtype=out.dtype)
    Xa[:, :d] = Xb
    for j, e in enumerate(extra):
        Xa[:, d + j] = e
    np.matmul(Xa, W_aug, out=out)


def param_cache(owner, name: str, xp, like, arrays: dict):
    """Cached copy of the NumPy constant ``arrays[name]`` on ``like``'s backend, device and
    dtype (float constants are cast to the dtype; integer ones stay integer)."""
    key = (name, xp.__name__, str(device(like)), str(like.dtype))
    cache = owner.__dict__.setdefault("_cache", {})
    if key not in cache:
        arr = arrays[name]
        kind = np.asarray(arr).dtype.kind
        if is_numpy_namespace(xp):
            real = like.real.dtype if np.iscomplexobj(like) else like.dtype
            cache[key] = np.ascontiguousarray(arr, dtype=real) if kind == "f" else arr
        else:
            with _outside_inference_mode(like):
                dtype = None if kind == "f" else xp.int64
                cache[key] = to_backend(arr, xp, like, dtype=dtype)
    return cache[key]


def _outside_inference_mode(like):
    """A context in which torch makes ordinary tensors, also within
    ``torch.inference_mode()``: a constant cached there would be an inference tensor,
    which every later call with autograd could not save for backward."""
    import contextlib

    if is_torch_array(like):
        import torch  # only reached with torch inputs

        if torch.is_inference_mode_enabled():
            return torch.inference_mode(False)
    return contextlib.nullcontext()


def _unit_rows(xp, base, log_scale):
    """``(base / c, log_scale + log c)`` with ``c`` the largest ``|base|`` of each row (1
    for a row of zeros): the same features, each row of ``base`` at most 1 in magnitude.

    The maps' own stabilisers are detached or bounds, which is exact for their product
    but not for the two pieces apart. With ``c`` attached, ``log_scale + log c`` is
    ``log max_j |f_j(x)|`` and ``base / c`` is ``f(x) / max_j |f_j(x)|``, whose gradients
    follow from the product's alone. NumPy rows already at 1 (the positive maps) are
    returned as they are.
    """
    if base.shape[0] == 0 or base.shape[1] == 0:
        return base, log_scale
    c = xp.max(xp.abs(base), axis=1)  # (n,)
    c = xp.where(c > 0, c, xp.ones_like(c))
    if is_numpy_namespace(xp) and bool(np.all(c == 1.0)):
        return base, log_scale
    return base / xp.astype(c, base.dtype)[:, None], log_scale + xp.log(c)
