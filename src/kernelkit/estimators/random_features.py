"""scikit-learn transformer over every random feature map, with ``method="auto"``."""

from __future__ import annotations

import math
import numbers
from numbers import Integral, Real
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._backend import (
    check_random_state,
    get_namespace,
    is_foreign_array,
    to_numpy,
    validate_positive_int,
)
from .._backend import validate_data as kk_validate_data
from .._backend.chunks import check_dask_matrix, checked_chunks, is_dask_array
from .._backend.fit_state import ParamsSinceFit, keep_model_on_error
from .._backend.parallel import check_n_jobs
from .._backend.params import (
    N_JOBS,
    NON_NEGATIVE,
    POSITIVE,
    RANDOM_STATE,
    NameWithAliases,
    int_range,
)
from .._backend.sklearn_validation import (
    check_feature_names_of,
    check_frame_columns,
    check_lazy_output,
    check_positional_keys,
    for_container,
    validate_data,
)
from ..features import FeatureMap
from ..features.hybrid.clustered import TooFewDistinctRows
from ..features.sampling import SAMPLERS, biased_sampler_warnings_off
from ._methods import ALIASES, METHODS, auto_candidates, make_feature_map, resolve_method

__all__ = ["RandomFeatures"]

#: kernels the estimators know
KERNEL_NAMES = ("gaussian", "softmax", "polynomial")


class RandomFeatures(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, ParamsSinceFit, BaseEstimator
):
    """Random features of the Gaussian, softmax or polynomial kernel as a transformer.

    ``transform(X) @ transform_y(Y).T`` is an unbiased estimate of the kernel matrix
    ``K(X, Y)`` (its real part, for complex maps; ``transform_y = transform`` for symmetric
    maps), except for the Maclaurin methods, which are unbiased for the kernel's
    Maclaurin series truncated at their maximum degree (``expected_kernel`` of the fitted
    map). A drop-in for :class:`sklearn.kernel_approximation.RBFSampler` and
    ``PolynomialCountSketch`` with every map of :mod:`kernelkit.features` behind one
    ``method`` name, and ``method="auto"``, which picks the map of lowest analytic
    relative mean squared error ``E (K_hat - K)^2 / K^2`` for the data.

    | ``method`` | feature map (:mod:`kernelkit.features`) | kernels |
    |---|---|---|
    | ``"trig"`` | :class:`TrigRF` | Gaussian, softmax |
    | ``"positive"`` | :class:`PositiveRF` | Gaussian, softmax |
    | ``"hyperbolic"`` | :class:`HyperbolicRF` | Gaussian, softmax |
    | ``"gerf"`` | :class:`GERF` | Gaussian, softmax |
    | ``"saderf"`` | :class:`SADERF` | Gaussian, softmax |
    | ``"aderf"`` | :class:`ADERF` | Gaussian, softmax |
    | ``"sderf"`` | :class:`SDERF` | Gaussian, softmax |
    | ``"rff"`` | :class:`RandomFourierFeatures` | Gaussian |
    | ``"hybrid_angular"`` | :class:`AngularHybridRF` | Gaussian, softmax |
    | ``"hybrid_gaussian"`` | :class:`GaussianHybridRF` | Gaussian, softmax |
    | ``"hybrid_normalized"`` | :class:`NormalizedGaussianHybridRF` | Gaussian, softmax |
    | ``"complex_exponential"`` | :class:`ComplexExponentialRF` | Gaussian, softmax |
    | ``"hybrid_clustered"`` | :class:`ClusteredHybridRF` | Gaussian, softmax |
    | ``"rademacher"`` | :class:`RademacherSketch` | polynomial |
    | ``"gaussian_sketch"`` | :class:`GaussianSketch` | polynomial |
    | ``"tensor_srht"`` | :class:`TensorSRHT` | polynomial |
    | ``"tensor_sketch"`` | :class:`TensorSketch` | polynomial |
    | ``"random_maclaurin"`` | :class:`RandomMaclaurin` | all three |
    | ``"optimized_maclaurin"`` | :class:`OptimizedMaclaurin` | all three |
    | ``"srf"`` | :class:`SphericalRandomFeatures` | eq. 57 |

    Aliases: ``"favor+"``, ``"favor++"``, ``"favor#"``, ``"rbf"``; names are
    case-insensitive. ``"srf"`` estimates the unit-sphere kernel of the dot-product paper's
    eq. 57 (inputs are normalised), not ``(x.y / l^2 + coef0)^degree``.

    **Asymmetric maps** (SADERF, ADERF, the hybrids) map the kernel's two arguments
    differently: :meth:`transform` gives the x-side (query) features and
    :meth:`transform_y` the y-side (key) features. Their data-dependent parameters are
    fitted on ``(X, Y)`` with ``fit(X, Y=keys)``, or on ``(X, X)``, where SADERF and ADERF
    reduce to (nearly) symmetric maps.

    **method="auto"** fits every candidate for ``kernel`` (those of the table with the
    kernel, except ``"complex_exponential"``, which with its default ``A = I`` is
    ``"positive"``, and ``"srf"``; without ``Y`` only the symmetric maps: not the four
    hybrids, whose ``transform(X) @ transform(X').T``, what a linear model after the
    transformer uses, is not their estimate, nor SADERF and ADERF, which fitted on one
    data set reduce to GERF, so that an estimator's ``feature_map`` may be "auto") at the
    requested output dimension on a sample of
    ``auto_sample_size`` rows of the training data, evaluates its analytic relative
    mean squared error ``E (K_hat - K)^2 / K^2`` on all pairs of the sample (of ``X``
    with ``Y`` when given; distinct pairs otherwise; pairs where it is infinite or undefined
    for every candidate, such as zeros of the polynomial kernel on integer or one-hot data,
    rank none and are left out; one undefined for some candidates only, such as a Maclaurin
    map's relative bias where the kernel and the map's expected kernel both underflow to
    0, counts as infinite for those), keeps the lowest mean, and refits it on all the data.
    For the unbiased maps that is the relative variance ``Var K_hat / K^2``
    (:meth:`~kernelkit.features.FeatureMap.log_relative_variance`); the Maclaurin
    maps estimate a truncated series (:meth:`~kernelkit.features.FeatureMap.
    expected_kernel`), whose squared bias is added, so that data where the truncation
    fails (large ``|x^T y| / l^2``) does not choose them. The choice is ``method_`` and
    the estimates ``variance_estimates_``. The analytic variances are those of i.i.d.
    projections, whatever ``sampler``.

    Parameters
    ----------
    method : str, default="sderf"
        A name of the table, or ``"auto"``.
    kernel : {"gaussian", "softmax", "polynomial"}, default="gaussian"
        ``"gaussian"``: ``exp(-|x - y|^2 / (2 l^2))`` (``K^(-1/2)`` of FAVOR# Sec. 2.1);
        ``"softmax"``: ``exp(x^T y / l^2)`` (``K^(0)``); ``"polynomial"``:
        ``(x^T y / l^2 + coef0)^degree``. Softmax-kernel features of the trig and fitted
        maps grow like ``exp(|x|^2 / (2 l^2))`` and overflow for large-norm inputs:
        :meth:`transform` then raises a :class:`ValueError`.
    n_components : int, default=256
        Number of output columns, as in scikit-learn: each map gets the largest
        ``n_features`` whose ``output_dim`` is at most ``n_components`` (e.g.
        ``n_components // 2`` projections for ``"hyperbolic"``; the Maclaurin maps' exact
        constant feature is one of the columns). Below the output of one random feature
        (2 columns for ``"hyperbolic"`` and the Maclaurin maps, 36, 66 and 68 for
        ``"hybrid_angular"``, ``"hybrid_gaussian"`` and ``"hybrid_normalized"`` with their
        default parameters) the map gets one feature, with a ``UserWarning`` naming its
        width.
    lengthscale : float, default=1.0
        ``l`` above (``gamma = 1 / (2 l^2)`` in :class:`~sklearn.kernel_approximation.
        RBFSampler` terms); every kernel divides its inputs by it.
    degree : int, default=2
        Degree of the polynomial kernel (``"srf"``: ``p`` of eq. 57); a whole float such
        as ``2.0`` (from a search grid) is the int ``2`` for every method.
    coef0 : float, default=1.0
        Constant of the polynomial kernel.
    sampler : {"iid", "orthogonal", "sorf", "hadamard", "halton"}, default="iid"
        How Gaussian projections are drawn (:func:`~kernelkit.features.draw_projection`);
        the sketches and Maclaurin maps have their own distributions and ignore it.
    random_state : None, int, numpy.random.Generator or RandomState, default=None
        Seed of the random features. The same seed gives the same features as the
        feature-map class with that seed; a ``Generator`` or ``RandomState`` gives another
        draw on every fit (user guide, "The feature-map contract").
    n_jobs : int, optional
        Threads of the NumPy feature evaluation (None: all available CPUs, not
        scikit-learn's one job).
    auto_sample_size : int, default=256
        Rows of the training data used by ``method="auto"``.

    Attributes
    ----------
    feature_map_ : kernelkit.features.FeatureMap
        The fitted feature map (e.g. :class:`~kernelkit.features.SDERF`).
    method_ : str
        The method used (the choice of ``method="auto"``).
    variance_estimates_ : dict
        ``method="auto"`` only: method -> mean relative mean squared error on the sample,
        the relative variance plus, for the Maclaurin maps, the squared relative bias of
        their truncated series (``inf`` where a candidate could not be fitted, its error
        not computed (a Maclaurin map's bias where the exact kernel of a sampled pair
        overflows), or has more than ``n_components`` columns with one random feature).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of the input features, when ``X`` had string column names.

    Notes
    -----
    Dtypes: float32 in, float32 out; float64 in, float64 out; integer input is promoted
    to float64. Sparse input is accepted by the maps whose first step is a linear
    projection (trig, positive, hyperbolic, rff, the sketches, the Maclaurin maps, srf);
    ``"auto"`` then compares those only. Torch tensors (and other array-API arrays) keep
    their backend, device and dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from kernelkit.estimators import RandomFeatures
    >>> X = np.random.default_rng(0).normal(size=(100, 5))
    >>> Z = RandomFeatures(n_components=512, random_state=0).fit_transform(X)
    >>> Z.shape
    (100, 512)
    >>> rf = RandomFeatures(method="auto", n_components=128, random_state=0).fit(X)
    >>> rf.method_ in rf.variance_estimates_
    True
    """

    _parameter_constraints: ClassVar[dict] = {
        # "auto", a name of METHODS or an alias, case-insensitive: resolve_method checks
        # the name (its message lists the names and aliases); the constraint takes any str
        # and says which spellings are one method (a set_params between them keeps the fit)
        "method": [NameWithAliases({"auto", *METHODS}, ALIASES)],
        "kernel": [StrOptions(set(KERNEL_NAMES))],
        "n_components": int_range(1, 2**26),
        "lengthscale": POSITIVE,
        # an int, or an integer-valued float (the sketches accept 2.0)
        "degree": [
            Interval(Integral, 1, None, closed="left"),
            Interval(Real, 1, None, closed="left"),
        ],
        "coef0": NON_NEGATIVE,
        "sampler": [StrOptions(set(SAMPLERS))],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
        "auto_sample_size": int_range(2),
    }

    def __init__(
        self,
        method: str = "sderf",
        kernel: str = "gaussian",
        n_components: int = 256,
        lengthscale: float = 1.0,
        degree: int = 2,
        coef0: float = 1.0,
        sampler: str = "iid",
        random_state=None,
        n_jobs=None,
        auto_sample_size: int = 256,
    ):
        self.method = method
        self.kernel = kernel
        self.n_components = n_components
        self.lengthscale = lengthscale
        self.degree = degree
        self.coef0 = coef0
        self.sampler = sampler
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.auto_sample_size = auto_sample_size

    @property
    def fit_reads(self) -> str:
        """What a fit reads of its data, as the feature maps' ``fit_reads``: that of the
        map ``method`` names (``"shape"``: the dimension only, ``"moments"``: the FAVOR#
        moments, ``"all"``: the rows); ``"all"`` for ``"auto"`` (its pick depends on the
        rows) and for a name ``fit`` will refuse. A fit on the first chunk of chunked
        input is the fit on all rows where it is ``"shape"``."""
        try:
            name = self._method_name()
        except (TypeError, ValueError):
            return "all"
        return "all" if name == "auto" else METHODS[name].cls.fit_reads

    def _method_name(self) -> str:
        """``"auto"`` or the canonical name of ``method`` (an ``InvalidParameterError``
        naming it otherwise)."""
        if isinstance(self.method, str) and self.method.strip().lower() == "auto":
            return "auto"
        return resolve_method(self.method, owner="RandomFeatures")

    # ------------------------------------------------------------------ helpers
    def _check_params(self) -> str:
        if not isinstance(self.kernel, str) or self.kernel not in KERNEL_NAMES:
            raise ValueError(f"Unknown kernel {self.kernel!r}; expected one of {KERNEL_NAMES}.")
        if self.kernel == "polynomial" and not float(self.degree).is_integer():
            raise ValueError(
                f"degree must be a whole number for kernel='polynomial' (2 or 2.0), got "
                f"{self.degree!r}."
            )
        name = self._method_name()
        validate_positive_int(self.n_components, "n_components", maximum=2**26)
        ls = self.lengthscale
        if (
            isinstance(ls, bool)
            or not isinstance(ls, numbers.Real)
            or not (math.isfinite(ls) and ls > 0)
        ):
            raise ValueError(f"lengthscale must be a positive finite float, got {ls!r}.")
        if not isinstance(self.sampler, str) or self.sampler not in SAMPLERS:
            raise ValueError(
                f"Unknown sampler {self.sampler!r}; expected one of {sorted(SAMPLERS)}."
            )
        check_n_jobs(self.n_jobs)
        validate_positive_int(self.auto_sample_size, "auto_sample_size", minimum=2)
        return name

    def _make_map(self, name, random_state, too_small: str = "warn"):
        fm = make_feature_map(
            name,
            kernel=self.kernel,
            n_components=self.n_components,
            lengthscale=float(self.lengthscale),
            # 2.0 as 2: the Maclaurin maps and "srf" take integers only
            degree=int(self.degree) if float(self.degree).is_integer() else self.degree,
            coef0=self.coef0,
            sampler=self.sampler,
            random_state=random_state,
            n_jobs=self.n_jobs,
            too_small=too_small,
        )
        # arrays from the inner map whatever scikit-learn's global ``transform_output``:
        # :meth:`transform` checks them, and its own output follows the configuration
        return fm.set_output(transform="default")

    def _validate(self, X, reset: bool, accept_sparse: bool, name: str = "X"):
        # ``name``: the argument the messages name (X, or Y for transform_y)
        if name != "X" and not sp.issparse(X):  # the keys: as the maps check them
            return self._validate_keys(X, self.n_features_in_)
        if is_foreign_array(X):
            X, _ = kk_validate_data(X, name, n_features=None if reset else self.n_features_in_)
            if reset:
                self.n_features_in_ = int(X.shape[1])
                self.__dict__.pop("feature_names_in_", None)
            return X
        try:
            return validate_data(
                self,
                X,
                dtype=[np.float64, np.float32],
                accept_sparse="csr" if accept_sparse else False,
                reset=reset,
            )
        except ValueError as exc:  # scikit-learn's messages always say "Input X"
            if name == "X" or "Input X" not in str(exc):
                raise
            raise ValueError(str(exc).replace("Input X", f"Input {name}", 1)) from None
        except TypeError as exc:  # so does validate_data's check of non-numeric data
            if name == "X" or not str(exc).startswith("X must be numeric"):
                raise
            raise TypeError(f"{name}{str(exc)[1:]}") from None

    def _validate_keys(self, Y, n_features: int):
        """Dense keys ``Y`` (m, n_features), checked as the maps check them: messages and
        feature-name warnings name ``Y`` (scikit-learn's always say ``X``)."""
        if not is_foreign_array(Y) and (
            hasattr(Y, "columns") or "feature_names_in_" in self.__dict__
        ):
            check_feature_names_of(self, Y, "Y", reset=False)  # the keys' columns are X's
        if not is_foreign_array(Y) and hasattr(Y, "columns") and hasattr(Y, "dtypes"):
            check_frame_columns(Y, "Y")  # a text column, named
        Y, _ = kk_validate_data(Y, "Y", n_features=n_features)
        if isinstance(Y, np.ndarray) and Y.dtype == np.float16:  # as scikit-learn's
            Y = Y.astype(np.float64)
        return Y

    def _choose(self, X, Y):
        """``method="auto"``: the candidate of lowest mean relative mean squared error on a
        sample (the relative variance for the unbiased maps)."""
        candidates = auto_candidates(self.kernel, keys=Y is not None)
        rng = check_random_state(self.random_state)
        seed = int(rng.integers(0, 2**31 - 1))
        sx = _sample_rows(X, self.auto_sample_size, rng, "X")
        sy = None if Y is None else _sample_rows(Y, self.auto_sample_size, rng, "Y")
        if sp.issparse(sx) or sp.issparse(sy):  # sparse X or Y (or Dask of sparse chunks)
            candidates = [c for c in candidates if METHODS[c].cls.accepts_sparse]
        estimates, rels, refusals = {}, {}, {}
        for name in candidates:
            try:  # a candidate wider than n_components with one feature is not one
                fm = self._make_map(name, seed, too_small="raise").fit(sx, Y=sy)
                with biased_sampler_warnings_off():  # i.i.d. values by design (docstring)
                    lrv = to_numpy(fm.log_relative_variance(sx, sy), np.float64)
                # a biased map's error reads the exact kernel, which may overflow
                rel = _relative_mse(fm, sx, sy, lrv)
            except (ValueError, ArithmeticError) as exc:  # e.g. too few distinct points
                estimates[name] = math.inf
                refusals[name] = exc
                continue
            if sy is None and rel.shape[0] > 1:  # distinct pairs only
                rel = rel[~np.eye(rel.shape[0], dtype=bool)]
            rels[name] = rel.ravel()
        # A pair where no candidate's relative error is finite, such as a zero of the
        # polynomial kernel (x.y / l^2 + coef0 = 0, common for integer or one-hot data),
        # where E (K_hat - K)^2 / K^2 is undefined for every map, ranks none of them.
        undefined = np.logical_and.reduce([~np.isfinite(r) for r in rels.values()])
        # A pair undefined for some candidates only is no pair to leave out for them
        # alone: where the kernel and a Maclaurin map's expected kernel both underflow to
        # 0, its relative bias is 0/0 but in truth astronomical (far points of the
        # Gaussian kernel), while the other candidates are ranked on that pair. Such a
        # candidate's error there is unknown, so it is infinite.
        for name, rel in rels.items():
            rel = np.where(np.isnan(rel), math.inf, rel)[~undefined]
            estimates[name] = _finite_mean(rel)
        estimates = {name: estimates[name] for name in candidates}  # ties: table order
        finite = {k: v for k, v in estimates.items() if math.isfinite(v)}
        if not finite and len(refusals) == len(candidates):
            # every candidate refused the data or a parameter (an empty X, a lengthscale
            # or degree out of their range): that reason, naming the argument
            name, exc = next(iter(refusals.items()))
            raise ValueError(
                f"RandomFeatures(method='auto'): every candidate for kernel={self.kernel!r} "
                f"refused the data or parameters; {name!r}: {exc}"
            ) from exc
        if not finite:
            raise ValueError(
                f"RandomFeatures(method='auto'): no candidate for kernel={self.kernel!r} has a "
                f"finite variance on this data ({estimates}); choose a method explicitly."
            )
        return min(finite, key=finite.get), estimates

    # ------------------------------------------------------------------ API
    @keep_model_on_error
    def fit(self, X, y=None, *, Y=None):
        """Choose (``method="auto"``), draw and fit the feature map.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
            Real data (NumPy, pandas, lists, SciPy sparse for projection maps, a torch
            tensor, or a Dask array, which the map reads chunk by chunk).
        y : None
            Ignored (a Pipeline's target). A 2-D float array of ``X``'s width with another
            number of rows is the kernel's keys passed positionally: a ``TypeError`` (pass
            ``Y=keys``); with as many rows, a ``UserWarning`` where the fit reads the data
            (data-dependent methods and ``"auto"``), as for the maps.
        Y : array-like of shape (m_samples, n_features), optional, keyword-only
            The kernel's y-side points (keys) for data-dependent asymmetric maps.

        Returns
        -------
        self : RandomFeatures
        """
        self._validate_params()
        name = self._check_params()
        accept_sparse = name == "auto" or METHODS[name].cls.accepts_sparse
        if sp.issparse(X) and not accept_sparse:
            raise TypeError(
                f"RandomFeatures(method={self.method!r}) does not support sparse input: "
                f"{METHODS[name].cls.__name__} is not a linear projection of its input. "
                "Convert with X.toarray() or use a projection method (trig, positive, "
                "hyperbolic, rff, rademacher, gaussian_sketch, tensor_srht, tensor_sketch, "
                "random_maclaurin, optimized_maclaurin, srf)."
            )
        # keys passed positionally (fit(X, keys)) are refused, as by the maps: the
        # Pipeline convention would otherwise ignore them without a word
        reads_data = name == "auto" or bool(METHODS[name].cls.data_dependent)
        if is_dask_array(X) or is_dask_array(Y):
            if Y is None and getattr(X, "ndim", 0) == 2:
                check_positional_keys("RandomFeatures", X, y, reads_data)
            return self._fit_dask(X, Y, name)
        X = self._validate(X, reset=True, accept_sparse=accept_sparse)
        if Y is None:
            check_positional_keys("RandomFeatures", X, y, reads_data)
        if Y is not None and not sp.issparse(Y):  # sparse keys: the map checks them
            Y = self._validate_keys(Y, X.shape[1])
        return self._fit_map(X, Y, name)

    def _fit_map(self, X, Y, name, fit=None):
        """Choose (``name == "auto"``), then draw and fit the map on validated X, Y
        (``fit(fm)``, if given, fits the drawn map ``fm`` instead of ``fm.fit(X, Y=Y)``)."""
        if name == "auto":
            name, self.variance_estimates_ = self._choose(X, Y)
        else:
            self.__dict__.pop("variance_estimates_", None)
        self.method_ = name
        fm = self._make_map(name, self.random_state)
        try:
            self.feature_map_ = fm.fit(X, Y=Y) if fit is None else fit(fm)
        except ValueError as exc:
            translated = _in_random_features_terms(exc, name)
            if translated is exc:
                raise
            raise translated from exc
        self._n_features_out = int(self.feature_map_.output_dim)
        self._record_fit_params()
        return self

    def _check_fitted(self):
        check_is_fitted(self)
        self._check_unchanged_since_fit(using="this transformer")

    def _fit_dask(self, X, Y, name, fit=None):
        # Dask X / Y: the map reads them chunk by chunk (user guide: "Scale-out with
        # Dask"); method="auto" compares the candidates on the same rows as in memory
        import dask.array as da

        X = check_dask_matrix(X if is_dask_array(X) else da.asarray(X), "X")
        if Y is not None:
            Y = check_dask_matrix(Y if is_dask_array(Y) else da.asarray(Y), "Y", X.shape[1])
        self.n_features_in_ = int(X.shape[1])
        self.__dict__.pop("feature_names_in_", None)
        return self._fit_map(X, Y, name, fit)

    @keep_model_on_error
    def _fit_chunked(self, head, all_rows=None, blocks=None, weights=None, owner=None):
        """``fit`` as the random-feature ridge / GP estimators fit a map out of core, or
        in memory with sample weights.

        ``head`` (n_0, d): the first non-empty chunk or block, checked; ``all_rows``: the
        Dask array (or None); ``blocks``: a function returning a new pass over the X
        blocks of a sequence that can be read again (or None). ``method="auto"`` chooses
        on the rows the in-memory fit samples (of ``all_rows``; of ``head`` for blocks).
        The method's map is then fitted as the estimators fit that map itself: on
        ``all_rows`` when it reads the dimension or the FAVOR# moments, on the moments
        of all blocks when it reads them, else on ``head``.

        ``weights``: sample weights of the rows (n,): NumPy for in-memory rows ``head``
        (then all the rows), Dask in the row chunks of ``all_rows``, or None. A method's
        map that reads the FAVOR# moments is fitted on the weighted moments
        (:mod:`kernelkit.estimators._weighted_fit`); ``method="auto"`` chooses on the rows
        unweighted. ``owner``: the estimator named in the weights' errors.
        """
        from ..features._dask import fit_on_blocks
        from ._weighted_fit import fit_map_weighted

        self._validate_params()
        name = self._check_params()
        owner = owner or type(self).__name__
        if all_rows is not None:
            fit = _fit_chunked_map(all_rows, head, weights, owner)
            return self._fit_dask(all_rows, None, name, fit=fit)
        X = self._validate(head, reset=True, accept_sparse=False)

        def fit(fm):
            if blocks is not None and fm.fit_reads == "moments":
                return fit_on_blocks(fm, X, blocks)
            return fit_map_weighted(fm, X, weights)

        return self._fit_map(X, None, name, fit)

    def _checked(self, Z, X):
        if is_dask_array(Z):  # each block when it is computed
            return Z.map_blocks(self._checked, X, dtype=Z.dtype)
        xp = get_namespace(Z)
        if bool(xp.all(xp.isfinite(Z))):
            return Z
        Xd = X.toarray() if sp.issparse(X) else to_numpy(X, np.float64)
        xs = Xd / float(self.lengthscale)
        big = float(np.sqrt((xs * xs).sum(axis=1)).max()) if xs.size else 0.0
        raise ValueError(
            f"RandomFeatures(method={self.method_!r}, kernel={self.kernel!r}) produced "
            f"non-finite features: the largest |x| / lengthscale is {big:.3g} and the "
            f"features exceed the range of {Z.dtype}. Standardise X, increase "
            "lengthscale, use kernel='gaussian' (bounded features) or float64, or use "
            "feature_map_.transform_scaled(X) / feature_map_.approx_kernel(X, Y), which "
            "keep the magnitudes in log space."
        )

    def transform(self, X):
        """Map ``X`` to the x-side (query) random features.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features_in_)

        Returns
        -------
        Z : array of shape (n_samples, n_components_out)
            At most ``n_components`` columns (``feature_map_.output_dim``). NumPy for
            NumPy-like input (float32 kept), a lazy Dask array for a Dask ``X`` (its row
            chunks), otherwise the input's backend and device.

        Raises
        ------
        ValueError
            Wrong number of features, NaN / inf, or features that overflow the dtype's
            range (softmax kernel with large ``|x| / lengthscale``).
        """
        self._check_fitted()
        if is_dask_array(X):  # lazy, row chunk by row chunk
            check_lazy_output(self)
            X = check_dask_matrix(X, "X", self.n_features_in_)
            return self._checked(self.feature_map_.transform(X), X)
        X = self._validate(X, reset=False, accept_sparse=self.feature_map_.accepts_sparse)
        return for_container(self, self._checked(self.feature_map_.transform(X), X))

    def transform_y(self, Y):
        """The y-side (key) features of ``Y``; :meth:`transform` for symmetric maps.

        Parameters
        ----------
        Y : array-like of shape (n_samples, n_features_in_)
            The containers and backends :meth:`transform` takes.

        Returns
        -------
        array of shape (n_samples, n_components_out)
            The container and backend of ``Y``, as :meth:`transform` returns.
        """
        self._check_fitted()
        shape = getattr(Y, "shape", ())
        if len(shape) == 2 and shape[1] != self.n_features_in_:  # else the message says X
            raise ValueError(
                f"Y has {shape[1]} features, but RandomFeatures is expecting "
                f"{self.n_features_in_} features as input."
            )
        if is_dask_array(Y):
            Y = check_dask_matrix(Y, "Y", self.n_features_in_)
            return self._checked(self.feature_map_.transform_y(Y), Y)
        Y = self._validate(Y, reset=False, accept_sparse=self.feature_map_.accepts_sparse, name="Y")
        return self._checked(self.feature_map_.transform_y(Y), Y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        try:
            name = self._check_params()
        except (TypeError, ValueError):  # invalid parameters: fit will say why
            name = None
        tags.input_tags.sparse = name == "auto" or (
            name in METHODS and bool(METHODS[name].cls.accepts_sparse)
        )
        return tags


def _fit_chunked_map(all_rows, head, weights=None, owner="RandomFeatures"):
    """``fit(fm)`` of :meth:`RandomFeatures._fit_chunked` for a Dask ``all_rows``: the
    whole array for a map that reads its dimension or moments, else ``head``; with Dask
    ``weights``, a map that reads the moments on the weighted moments of all rows."""
    from ._weighted_fit import weighted_dask_moments

    def fit(fm):
        if weights is not None and fm.fit_reads == "moments":
            with weighted_dask_moments(fm, all_rows, weights, owner):
                return fm.fit(head)
        return fm.fit(all_rows if fm.fit_reads in ("shape", "moments") else head)

    return fit


def _relative_mse(fm, X, Y, lrv):
    """``E (K_hat - K)^2 / K^2`` per pair (n, m) of a fitted map, from its log relative
    variance ``lrv = log(Var K_hat / (E K_hat)^2)``.

    Unbiased maps: ``exp(lrv)``. Maps that estimate a surrogate (the truncated Maclaurin
    series) add the squared relative bias: with ``r = E K_hat / K``,
    ``Var / K^2 + (r - 1)^2 = exp(lrv) r^2 + (r - 1)^2``.
    """
    with np.errstate(over="ignore"):
        rel = np.exp(lrv)
    if type(fm).expected_kernel is FeatureMap.expected_kernel:  # the exact kernel
        return rel
    mean = to_numpy(fm.expected_kernel(X, Y), np.float64)
    exact = to_numpy(fm.exact_kernel(X, Y), np.float64)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        r = mean / exact  # (n, m)
        return rel * r * r + (r - 1.0) ** 2


def _finite_mean(rel) -> float:
    """The mean of non-negative errors ``rel``, ``inf`` for none or an infinite one.

    Summed as ``max * mean(rel / max)``: errors that are each finite but whose sum
    exceeds float64 (relative variances of the trigonometric maps where the Gaussian
    kernel is tiny, such as a small ``lengthscale`` on standardised data) keep a finite
    mean that still ranks the candidate, without NumPy's overflow warning in the sum."""
    if rel.size == 0:
        return math.inf
    top = float(rel.max())
    if not math.isfinite(top):
        return math.inf
    if top == 0.0:
        return 0.0
    return top * float(np.mean(rel / top))


def _in_random_features_terms(exc: ValueError, name: str) -> ValueError:
    """The map's fit error ``exc`` in ``RandomFeatures``' terms: ``"hybrid_clustered"``
    on fewer distinct rows than its k-means centres (:class:`TooFewDistinctRows`) says to
    lower ``n_clusters``, a parameter of ``ClusteredHybridRF`` that ``RandomFeatures``
    does not pass on (it keeps the map's default); other errors are returned as they are
    (the same object)."""
    if name != "hybrid_clustered" or not isinstance(exc, TooFewDistinctRows):
        return exc
    k, side, distinct, n = exc.n_clusters, exc.side, exc.n_distinct, exc.n_samples
    rows = "row" if distinct == 1 else "rows"
    return ValueError(
        f"RandomFeatures(method='hybrid_clustered') fits ClusteredHybridRF with its default "
        f"n_clusters={k} k-means centres on each side, but {side} has {distinct} distinct "
        f"{side} {rows} among its n_samples={n}: give {side} at least {k} distinct rows, "
        f"or use kernelkit.features.ClusteredHybridRF(n_clusters=...) with fewer centres "
        f"(or another method)."
    )


def _sample_rows(X, size: int, rng, name: str = "X"):
    """At most ``size`` rows of ``X`` drawn without replacement (all rows when fewer).

    A Dask ``X`` (checked by ``fit``: real, 2-D) is computed, each chunk it reads checked
    for its width and for NaN or infinity (a ``ValueError`` naming ``name`` and the
    chunk), as the in-memory fit validates its rows before the candidates see them."""
    if is_dask_array(X):  # the same rows as in memory, computed
        X = X.compute_chunk_sizes() if math.isnan(X.shape[0]) else X
        X = checked_chunks(X, name, finite=True)
        n = X.shape[0]
        if n <= size:
            return X.compute()
        return X[np.sort(rng.choice(n, size=size, replace=False))].compute()
    n = X.shape[0]
    if n <= size:
        return X
    idx = np.sort(rng.choice(n, size=size, replace=False))
    if is_foreign_array(X):
        from .._backend.namespace import array_namespace, device

        xp = array_namespace(X)
        return xp.take(X, xp.asarray(idx, device=device(X)), axis=0)
    return X[idx]
