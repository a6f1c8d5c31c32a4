"""Shared base of the softmax / Gaussian kernel maps built on Gaussian projections.

:class:`ProjectionFeatureMap` holds what the FAVOR# maps (:mod:`.softmax`) and the hybrid
maps (:mod:`.hybrid`) have in common: ``n_features`` projections ``W`` (M, d) with rows
marginally ``N(0, I)`` drawn by ``sampler``, the kernel name (``"softmax"``:
``exp(x.y / l^2)``, ``"gaussian"``: ``exp(-|x - y|^2 / (2 l^2))``, the scaled softmax
kernels ``K^(0)`` and ``K^(-1/2)`` of FAVOR# Sec. 2.1) and the lengthscale ``l``.
:class:`SecondMomentVariance` turns a per-projection log second moment into the
variance, the relative variance and the FAVOR# fitting objective (eq. 12-14).
"""

from __future__ import annotations

import contextlib
import math
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import StrOptions

from .._backend import is_numpy_namespace, to_numpy, validate_positive_float, validate_positive_int
from .._backend.parallel import SingleThreadedBlas, run_beside
from .._backend.params import POSITIVE, RANDOM_STATE, int_range
from ._base import KERNELS, FeatureMap, gaussian_log_kernel, log1mexp, param_cache, sq_norms
from .sampling import SAMPLERS, draw_projection

__all__ = ["ProjectionFeatureMap", "SecondMomentVariance"]

#: input dimensions up to which fitting runs its d x d linear algebra on one BLAS thread
_SMALL_D = 256


class ProjectionFeatureMap(FeatureMap):
    """Random features of the softmax or Gaussian kernel from Gaussian projections.

    Parameters
    ----------
    n_features : int
        Number of random projections ``M``.
    kernel : {"softmax", "gaussian"}
        ``"softmax"``: ``exp(x^T y / l^2)``; ``"gaussian"``: ``exp(-|x-y|^2 / (2 l^2))``.
    lengthscale : float
        ``l`` above; inputs are divided by it.
    sampler : {"iid", "orthogonal", "sorf", "hadamard", "halton"}
        How the projections are drawn (:data:`kernelkit.features.sampling.SAMPLERS`):
        i.i.d. Gaussian, block-orthogonal with chi norms (ORF), structured Hadamard (SORF),
        SORF directions with chi norms (ORF-Had), randomised Halton (QMC).
    random_state : None, int or numpy.random.Generator
    """

    #: the softmax-family and hybrid variances read |x +- y|^2 and angles from the Gram
    #: matrix: float64 for float32 input (they vanish at y = +-x, the hybrids' exact angles)
    _variance_in_float64 = True

    _parameter_constraints: ClassVar[dict] = {
        "n_features": int_range(1, 2**26),
        "kernel": [StrOptions(set(KERNELS))],
        "lengthscale": POSITIVE,
        "sampler": [StrOptions(set(SAMPLERS))],
        "random_state": RANDOM_STATE,
    }

    def __init__(
        self,
        n_features: int = 256,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        sampler: str = "iid",
        random_state=None,
    ):
        self.n_features = n_features
        self.kernel = kernel
        self.lengthscale = lengthscale
        self.sampler = sampler
        self.random_state = random_state

    # ------------------------------------------------------------------ parameters
    def _check_params(self):
        validate_positive_int(self.n_features, "n_features", maximum=2**26)
        if not isinstance(self.kernel, str) or self.kernel not in KERNELS:
            raise ValueError(f"Unknown kernel {self.kernel!r}; expected one of {sorted(KERNELS)}.")
        validate_positive_float(self.lengthscale, "lengthscale")
        if not isinstance(self.sampler, str) or self.sampler not in SAMPLERS:
            raise ValueError(
                f"Unknown sampler {self.sampler!r}; expected one of {sorted(SAMPLERS)}."
            )

    @property
    def alpha(self) -> float:
        """``alpha`` of the scaled softmax kernel ``K^(alpha)`` this map estimates."""
        return KERNELS[self.kernel]

    # ------------------------------------------------------------------ fitting
    def _fit(self, X, Y, xp, rng):
        d = int(X.shape[1])

        def draw():
            return draw_projection(self.n_features, d, rng, sampler=self.sampler)  # (M, d)

        Xs = _fit_array(X, self.lengthscale)  # (n, d) float64 NumPy
        Ys = Xs if Y is None else _fit_array(Y, self.lengthscale)  # Y is X: the same object
        # O(n d^2 + d^3 + M d^2) work: kernelkit threads the O(n d^2) sums itself and runs
        # small-d linear algebra on one BLAS thread (see SingleThreadedBlas)
        with SingleThreadedBlas() if d <= _SMALL_D else contextlib.nullcontext():
            if self._draw_beside_fit(Xs, Ys):
                # the O((n + m) d^2) statistics take every thread of the pool; the O(M d)
                # draw then runs on a pool thread beside the serial O(d^3) solve
                stats = self._fit_statistics(Xs, Ys)
                self.projection_, _ = run_beside(
                    draw, lambda: self._fit_parameters(Xs, Ys, None, stats=stats)
                )
            else:
                self.projection_ = draw()
                self._fit_parameters(Xs, Ys, rng)
            self._build()

    def _draw_beside_fit(self, X, Y) -> bool:
        """Whether to compute :meth:`_fit_statistics` first and then draw the projections
        on a pool thread while ``_fit_parameters`` runs (same draws either way). Only for
        fits that neither draw from ``rng`` nor read ``projection_``, and are long enough to
        pay for the hand-over."""
        return False

    def _fit_statistics(self, X, Y):
        """The threaded data pass of a fit that draws beside (see :meth:`_draw_beside_fit`),
        handed to ``_fit_parameters(X, Y, None, stats=...)``."""
        return None

    def _fit_parameters(self, X, Y, rng):
        """Fit data-dependent parameters from float64 NumPy ``X`` (n, d), ``Y`` (m, d).

        ``X`` and ``Y`` may be read-only views of the caller's data (do not modify them in
        place); ``Y is X`` when ``fit`` got no ``Y``. ``rng`` is None when
        ``_draw_beside_fit`` is True (``projection_`` is then not set yet).
        """

    def _build(self):
        """Precompute the NumPy constants ``self._consts`` used by the features."""
        self._cache = {}
        self._consts = {}

    def _param(self, name: str, xp, like):
        """Cached copy of ``self._consts[name]`` on ``like``'s backend, device and dtype."""
        return param_cache(self, name, xp, like, self._consts)

    def _prepare(self, X, xp, name="X"):
        if self.lengthscale == 1.0:
            return X
        if sp.issparse(X):
            # SciPy divides by a Python float in float64: divide the stored values in
            # their own dtype, as NumPy does for dense float32 X (float32 stays float32)
            X = X.copy()
            X.data /= X.dtype.type(self.lengthscale)
            return X
        return X / self.lengthscale

    # ------------------------------------------------------------------ kernel
    def _log_kernel(self, X, Y, xp):
        # log K^(alpha)(x, y) on lengthscale-scaled inputs, (n, m)
        a = self.alpha
        if a == -0.5 and not (sp.issparse(X) or sp.issparse(Y)):
            # the Gaussian kernel: -|x - y|^2 / 2 without the cancellation of
            # x.y - |x|^2 / 2 - |y|^2 / 2 (error ~ d eps |x|^2: k(x, x) = 0.14 at |x| = 1e8)
            return gaussian_log_kernel(xp, X, Y, 1.0)
        out = X @ xp.matrix_transpose(Y)
        if a != 0.0:
            out = out + a * sq_norms(xp, X)[:, None] + a * sq_norms(xp, Y)[None, :]
        return out

    def _exact_kernel(self, X, Y, xp):
        return xp.exp(self._log_kernel(X, Y, xp))


class SecondMomentVariance:
    """Variance from a per-projection log second moment (mixin).

    Subclasses define ``_log_second_moment(X, Y, xp)``, ``log E[(f1(w,x) f2(w,y))^2]`` per
    pair for one random projection, (n, m), on prepared inputs.
    """

    def _variance(self, X, Y, xp):
        # Var K_hat(x, y) = (E[(f1 f2)^2] - K(x, y)^2) / M (FAVOR# eq. 12-13, 15)
        log_m2 = self._log_second_moment(X, Y, xp)  # (n, m)
        log_k2 = 2.0 * self._log_kernel(X, Y, xp)  # (n, m)
        # m2 - K^2 = m2 * (1 - exp(log K^2 - log m2)), accurate when Var << m2, and formed
        # as exp(log m2 - log M + log(1 - K^2 / m2)): finite wherever the variance is,
        # although m2 itself may overflow the dtype (float32: m2 > 3e38)
        ratio = xp.minimum(log_k2 - log_m2, xp.zeros_like(log_m2))
        rel = -xp.expm1(ratio)  # 1 - K^2 / m2, in [0, 1]
        exact = rel == 0.0  # zero variance: log would give -inf (and NaN gradients)
        log_rel = xp.log(xp.where(exact, xp.ones_like(rel), rel))
        log_var = log_m2 - math.log(self.n_features) + log_rel
        if is_numpy_namespace(xp):
            with np.errstate(over="ignore"):  # inf is the answer beyond the dtype's range
                var = np.exp(log_var)
        else:
            var = xp.exp(log_var)
        return xp.where(exact, xp.zeros_like(var), var)

    def _log_relative_variance(self, X, Y, xp):
        # log(m2 / K^2 - 1) - log M, as t + log(-expm1(-t)) - log M, t = log m2 - 2 log K:
        # never overflows; -inf marks an exact (zero-variance) estimate
        t = self._log_second_moment(X, Y, xp) - 2.0 * self._log_kernel(X, Y, xp)  # (n, m)
        t = xp.clip(t, min=0.0)
        return t + log1mexp(xp, t) - math.log(self.n_features)

    def log_objective(self, X, Y=None):
        """The fitting objective of FAVOR# eq. (14) for this map's kernel.

        ``mean_ij log(Var f1(w,x_i) f2(w,y_j) + K(x_i, y_j)^2)`` = mean log second moment.
        The data-dependent maps minimise it in closed form.

        Parameters
        ----------
        X : array-like, shape (n, d)
        Y : array-like, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        float
        """
        X, Y, xp, _ = self._check_pair_half_widened(X, Y)
        X, Y = self._densify(X), self._densify(Y)
        return float(xp.mean(self._log_second_moment(X, Y, xp)))


def _fit_array(X, lengthscale):
    """Float64 NumPy ``X / lengthscale``; a read-only view when no copy is needed.

    Sparse input stays sparse (only the data-independent maps accept it).
    """
    if sp.issparse(X):
        return X.astype(np.float64) / lengthscale
    X = to_numpy(X, np.float64)
    if lengthscale != 1.0:
        return X / lengthscale
    X = X.view()
    X.flags.writeable = False
    return X
