"""The feature-map contract shared by every random feature map (DESIGN.md).

A feature map estimates a kernel ``K(x, y)`` by ``phi(x)^T conj(psi(y))`` with random
features ``phi`` (x / query side) and ``psi`` (y / key side). Subclasses implement
``_fit_parameters`` and ``_scaled_features``; the base class supplies validation, the
stabilised kernel estimate and the public API::

    fm.fit(X, Y=None)        # draw random parameters, fit data-dependent ones
    fm.transform(X)          # (n, fm.output_dim) x-side features
    fm.transform_y(Y)        # (m, fm.output_dim) y-side features
    fm.approx_kernel(X, Y)   # (n, m) unbiased estimate of the kernel
    fm.variance(X, Y)        # (n, m) analytic variance of approx_kernel (i.i.d. features)

Stabilised representation. Internally every map returns ``(base, log_scale)`` with
``features = base * exp(log_scale)[:, None]``; ``base`` is O(1) and ``log_scale`` carries
the magnitude. :meth:`FeatureMap.approx_kernel` multiplies the scales in log space, so
the estimate is finite whenever the kernel value itself is representable, even where
the raw features of :meth:`transform` overflow.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._backend import (
    check_random_state,
    device,
    is_numpy_namespace,
    to_backend,
    to_numpy,
    validate_data,
    validate_positive_float,
    validate_positive_int,
)
from .._backend.parallel import SingleThreadedBlas
from .sampling import draw_projection

__all__ = ["KERNELS", "FeatureMap"]

#: kernel name -> alpha of the scaled softmax kernel K^(alpha) (FAVOR# Sec. 2.1)
KERNELS = {"softmax": 0.0, "gaussian": -0.5}


class FeatureMap(BaseEstimator):
    """Base class of random feature maps for the (scaled) softmax kernel family.

    Parameters
    ----------
    n_features : int
        Number of random projections ``M``.
    kernel : {"softmax", "gaussian"}
        ``"softmax"``: ``exp(x^T y / l^2)``; ``"gaussian"``: ``exp(-|x-y|^2 / (2 l^2))``.
    lengthscale : float
        ``l`` above; inputs are divided by it.
    orthogonal : bool
        Draw block-orthogonal projections (:func:`~kernelkit.features.sampling.
        block_orthogonal_projection`) instead of i.i.d. Gaussian ones.
    random_state : None, int or numpy.random.Generator
    """

    #: whether ``transform_y`` equals ``transform``
    symmetric = True
    #: whether every feature is positive (usable for attention normalisation)
    positive = False

    def __init__(
        self,
        n_features: int = 256,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        orthogonal: bool = False,
        random_state=None,
    ):
        self.n_features = n_features
        self.kernel = kernel
        self.lengthscale = lengthscale
        self.orthogonal = orthogonal
        self.random_state = random_state

    # ------------------------------------------------------------------ parameters
    def _validate_params(self):
        validate_positive_int(self.n_features, "n_features", maximum=2**26)
        if not isinstance(self.kernel, str) or self.kernel not in KERNELS:
            raise ValueError(f"Unknown kernel {self.kernel!r}; expected one of {sorted(KERNELS)}.")
        validate_positive_float(self.lengthscale, "lengthscale")

    @property
    def alpha(self) -> float:
        """``alpha`` of the scaled softmax kernel ``K^(alpha)`` this map estimates."""
        return KERNELS[self.kernel]

    @property
    def output_dim(self) -> int:
        """Number of output features per point."""
        return int(self.n_features)

    # ------------------------------------------------------------------ fitting
    def fit(self, X, Y=None):
        """Draw the random parameters and fit the data-dependent ones.

        Parameters
        ----------
        X : array, shape (n, d)
            x-side (query) points.
        Y : array, shape (m, d), optional
            y-side (key) points; defaults to ``X``.

        Returns
        -------
        self
        """
        self._validate_params()
        X, _ = validate_data(X, "X")
        Y = X if Y is None else validate_data(Y, "Y", n_features=X.shape[1])[0]
        rng = check_random_state(self.random_state)
        d = X.shape[1]
        self.n_features_in_ = d
        self.projection_ = draw_projection(self.n_features, d, rng, self.orthogonal)  # (M, d)
        Xs = _fit_array(X, self.lengthscale)  # (n, d)
        Ys = Xs if Y is X else _fit_array(Y, self.lengthscale)  # (m, d); Y is X: same object
        # O(n d^2 + d^3 + M d^2) work: kernelkit threads the O(n d^2) sums itself and runs
        # small-d linear algebra on one BLAS thread (see SingleThreadedBlas)
        with SingleThreadedBlas() if d <= _SMALL_D else contextlib.nullcontext():
            self._fit_parameters(Xs, Ys, rng)
            self._build()
        return self

    def _fit_parameters(self, X, Y, rng):
        """Fit data-dependent parameters from float64 NumPy ``X`` (n, d), ``Y`` (m, d).

        ``X`` and ``Y`` may be read-only views of the caller's data (do not modify them in
        place); ``Y is X`` when ``fit`` got no ``Y``.
        """

    def _build(self):
        """Precompute NumPy constants used by ``_scaled_features`` (after any refit)."""
        self._cache = {}

    def _param(self, name: str, xp, like):
        """Cached copy of the NumPy constant ``self._consts[name]`` on ``like``'s backend."""
        key = (name, xp.__name__, str(device(like)), str(like.dtype))
        cache = self.__dict__.setdefault("_cache", {})
        if key not in cache:
            cache[key] = to_backend(self._consts[name], xp, like)
        return cache[key]

    # ------------------------------------------------------------------ features
    def _check_X(self, X, name):
        check_is_fitted(self, "projection_")
        X, xp = validate_data(X, name, n_features=self.n_features_in_, allow_empty=True)
        return X / self.lengthscale if self.lengthscale != 1.0 else X, xp

    def _scaled_features(self, X, xp, side: str):
        """Return ``(base (n, D), log_scale (n,))`` for lengthscale-scaled ``X``."""
        raise NotImplementedError

    def transform_scaled(self, X, side: str = "x"):
        """Features in stabilised form.

        Parameters
        ----------
        X : array, shape (n, d)
        side : {"x", "y"}

        Returns
        -------
        base : array, shape (n, output_dim)
            Row-normalised features (for positive maps the row maximum is 1).
        log_scale : array, shape (n,)
            ``transform(X) == base * exp(log_scale)[:, None]``.
        """
        if side not in ("x", "y"):
            raise ValueError(f"side must be 'x' or 'y', got {side!r}.")
        X, xp = self._check_X(X, "X" if side == "x" else "Y")
        return self._scaled_features(X, xp, side)

    def _features(self, X, side):
        base, log_scale = self.transform_scaled(X, side)
        xp = _namespace_of(base)
        if is_numpy_namespace(xp):
            with np.errstate(over="ignore"):
                scale = np.exp(log_scale)
            base *= scale[:, None]
            return base
        return base * xp.exp(log_scale)[:, None]

    def transform(self, X):
        """x-side (query) features.

        Parameters
        ----------
        X : array, shape (n, d)

        Returns
        -------
        array, shape (n, output_dim)
            Same backend, device and dtype as ``X``. May overflow for huge norms; use
            :meth:`approx_kernel` or :meth:`transform_scaled` there.
        """
        return self._features(X, "x")

    def transform_y(self, Y):
        """y-side (key) features, shape (m, output_dim)."""
        return self._features(Y, "y")

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
        array, shape (n, m)
        """
        Y = X if Y is None else Y
        bx, sx, by, sy = self._scaled_pair(X, Y)
        xp = _namespace_of(bx)
        if xp.isdtype(by.dtype, "complex floating"):
            # Re(P conj(S)^T) = Re P Re S^T + Im P Im S^T
            dot = xp.real(bx) @ xp.matrix_transpose(xp.real(by)) + xp.imag(
                bx
            ) @ xp.matrix_transpose(xp.imag(by))  # (n, m)
        else:
            dot = bx @ xp.matrix_transpose(by)  # (n, m)
        scale = sx[:, None] + sy[None, :]  # (n, m) log of the row scales
        # exp(scale) must not overflow in the working dtype (float32: ~88.7, float64: ~709.8)
        limit = math.log(float(xp.finfo(dot.dtype).max)) - 10.0
        if dot.shape[0] == 0 or dot.shape[1] == 0 or float(_detach(xp.max(scale))) < limit:
            return dot * xp.exp(scale)
        # log path: sign(dot) * exp(log|dot| + scale)
        absdot = xp.abs(dot)
        tiny = xp.asarray(float(xp.finfo(dot.dtype).tiny), dtype=dot.dtype)
        logabs = xp.log(xp.maximum(absdot, tiny)) + scale
        logabs = xp.where(absdot > 0, logabs, xp.full_like(logabs, -math.inf))  # exp -> 0
        return xp.sign(dot) * xp.exp(logabs)

    def _scaled_pair(self, X, Y):
        """``transform_scaled`` of both sides, ``(bx, sx, by, sy)``, for :meth:`approx_kernel`."""
        bx, sx = self.transform_scaled(X, "x")
        by, sy = self.transform_scaled(Y, "y")
        return bx, sx, by, sy

    # ------------------------------------------------------------------ variance
    def _log_second_moment(self, X, Y, xp):
        """``log E[(f1(w,x) f2(w,y))^2]`` per pair for one random projection, (n, m)."""
        raise NotImplementedError

    def _log_kernel(self, X, Y, xp):
        # log K^(alpha)(x, y) on lengthscale-scaled inputs, (n, m)
        a = self.alpha
        out = X @ xp.matrix_transpose(Y)
        if a != 0.0:
            out = out + a * xp.sum(X * X, axis=1)[:, None] + a * xp.sum(Y * Y, axis=1)[None, :]
        return out

    def variance(self, X, Y=None):
        """Analytic variance of :meth:`approx_kernel` for i.i.d. projections.

        ``Var K_hat(x, y) = (E[(f1 f2)^2] - K(x, y)^2) / M`` (FAVOR# eq. 12-13, 15 and
        their specialisations). For ``orthogonal=True`` this is the i.i.d. value, not the
        (typically smaller) variance of the orthogonal estimator.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional

        Returns
        -------
        array, shape (n, m), non-negative.
        """
        Y = X if Y is None else Y
        X, xp = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
        log_m2 = self._log_second_moment(X, Y, xp)  # (n, m)
        log_k2 = 2.0 * self._log_kernel(X, Y, xp)  # (n, m)
        # m2 - K^2 = m2 * (1 - exp(log K^2 - log m2)), accurate when Var << m2
        ratio = xp.minimum(log_k2 - log_m2, xp.zeros_like(log_m2))
        return xp.exp(log_m2) * (-xp.expm1(ratio)) / self.n_features

    def log_relative_variance(self, X, Y=None):
        """``log(Var K_hat / K^2)`` for i.i.d. projections, never overflowing.

        The scale-free relative variance of FAVOR# Sec. 5.1:
        ``log(m2 / K^2 - 1) - log M`` with ``m2 = E[(f1 f2)^2]``, evaluated as
        ``t + log(-expm1(-t)) - log M``, ``t = log m2 - 2 log K``. ``-inf`` marks an exact
        (zero-variance) estimate.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional

        Returns
        -------
        array, shape (n, m)
        """
        Y = X if Y is None else Y
        X, xp = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
        t = self._log_second_moment(X, Y, xp) - 2.0 * self._log_kernel(X, Y, xp)  # (n, m)
        t = xp.clip(t, min=0.0)
        return t + xp.log(-xp.expm1(-t)) - math.log(self.n_features)

    def log_objective(self, X, Y=None):
        """The fitting objective of FAVOR# eq. (14) for this map's kernel.

        ``mean_ij log(Var f1(w,x_i) f2(w,y_j) + K(x_i, y_j)^2)`` = mean log second moment.
        The data-dependent maps minimise it in closed form.

        Returns
        -------
        float
        """
        Y = X if Y is None else Y
        X, xp = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
        return float(xp.mean(self._log_second_moment(X, Y, xp)))


def _detach(a):
    # a plain value for control flow (no autograd warning when converting to float)
    return a.detach() if hasattr(a, "detach") else a


def _namespace_of(a):
    from array_api_compat import array_namespace

    return array_namespace(a)


def _fit_array(X, lengthscale):
    """Float64 NumPy copy of ``X / lengthscale``; a read-only view when no copy is needed."""
    X = to_numpy(X, np.float64)
    if lengthscale != 1.0:
        return X / lengthscale
    X = X.view()
    X.flags.writeable = False
    return X


#: input dimensions up to which fitting runs its d x d linear algebra on one BLAS thread
_SMALL_D = 256


def _matmul_augmented(Xb, extra, W_aug, out) -> None:
    """``out = [Xb, *extra] @ W_aug`` for a row block ``Xb`` (k, d).

    ``extra`` are scalars or (k,) arrays appended as columns, matched by the last rows of
    ``W_aug`` (d + len(extra), D): a per-column constant (row of ``W_aug``, column of ones)
    or a per-row term (column of ``Xb``, row of ones) costs no pass over ``out``.
    """
    k, d = Xb.shape
    Xa = np.empty((k, d + len(extra)), dtype=out.dtype)
    Xa[:, :d] = Xb
    for j, e in enumerate(extra):
        Xa[:, d + j] = e
    np.matmul(Xa, W_aug, out=out)
