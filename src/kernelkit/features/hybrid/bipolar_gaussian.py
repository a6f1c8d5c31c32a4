"""Bipolar hybrids with a Gaussian-kernel coefficient ``lambda_hat``.

Implements Sec. 2.4 (eq. 20, Gaussian lambda with ``M = I``) and App. F (eq. 67-70,
Thm F.1, the normalised bipolar Gaussian hybrid) of K. Choromanski et al., "Hybrid Random
Features" (ICLR 2022), on the base class of :mod:`.bipolar`.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from sklearn.utils._param_validation import StrOptions

from ..._backend import device, validate_positive_float
from ..._backend.params import POSITIVE
from .._base import _detach, log1mexp
from ..sampling import gaussian_projection
from ._common import MAX_BANDWIDTH, _sq_norms, validate_bandwidth
from .bipolar import _BipolarHybrid, _snapped_sq


def _mean_half_angle_sin2(xp, px, py):
    """``mean_i sin^2((px_i - py_i) / 2)`` over the columns of ``px`` (n, L) and
    ``py`` (m, L), shape (n, m): ``(1 - mean_i cos(px_i - py_i)) / 2`` without its
    cancellation (exactly 0 where the projections agree). (n, m) memory, one projection
    at a time."""
    acc = xp.zeros((px.shape[0], py.shape[0]), dtype=px.dtype, device=device(px))
    for i in range(px.shape[1]):
        h = xp.sin(0.5 * (px[:, i : i + 1] - xp.matrix_transpose(py[:, i : i + 1])))
        acc = acc + h * h
    return acc / px.shape[1]


class GaussianHybridRF(_BipolarHybrid):
    """Gaussian-lambda bipolar hybrid (Sec. 2.4, eq. 20 with ``M = I``).

    ``SM_hat = lambda_hat SM^{++}_m + (1 - lambda_hat) SM^{trig}_m`` with coefficient
    ``lambda(x, y) = exp(-|x + y|^2 / (2 c^2)) = K_gauss(x / c, -y / c)`` (``c`` =
    ``lambda_bandwidth``), which is 1 at ``x = -y`` (where ``SM^{++}`` is exact) and decays
    towards ``x = y``. ``lambda_hat = rho_1(x)^T rho_2(y)`` is a Gaussian-kernel random
    feature estimate with ``n`` projections (``a = 0``, ``c = 1`` in the real form):

    * ``lambda_features="positive"``: ``rho(u) = (2n)^{-1/2} e^{-|u|^2} [exp(Tu); exp(-Tu)]``
      (antithetic FAVOR+; ``lambda_hat > 0``), ``u = x/c`` resp. ``-y/c``;
    * ``lambda_features="trig"``: ``rho(u) = n^{-1/2} [sin(Tu); cos(Tu)]`` (bounded).

    Output dimension ``2m (4n + 1)``: ``[phitrig; rho (x) phi++; rho (x) phitrig]``.
    Unlike the angular hybrid it cannot be exact at both ``theta = 0`` and ``theta = pi``.
    With ``lambda_features="trig"`` it is exact at ``x = -y``; there
    :meth:`approx_kernel` forms ``lambda_hat = 1 - (2/n) sum_i sin^2(tau_i.(x + y)/(2c))``,
    exactly 1, while ``transform(X) @ transform_y(Y).T`` has ``1 - lambda_hat`` only to
    rounding, times a trig estimate ``~e^{|x|^2}`` against a kernel ``~e^{-|x|^2}``: for
    large norms near ``x = -y`` use :meth:`approx_kernel`.

    Parameters
    ----------
    n_features : int
        ``m``, projections of each base estimator.
    n_lambda : int
        ``n``, projections of the coefficient estimator.
    kernel, lengthscale, sampler, shared_projection, random_state
        As in :class:`AngularHybridRF`.
    lambda_bandwidth : float
        ``c`` above (in lengthscale-scaled units), in ``[1e-150, 1e150]`` (``c^2`` stays a
        normal float64 number).
    lambda_features : {"positive", "trig"}

    Attributes
    ----------
    projection_ : ndarray (m, d)
        ``W`` of ``SM^{++}``.
    projection_trig_ : ndarray (m, d)
        ``W`` of ``SM^{trig}`` (the same array when ``shared_projection``).
    lambda_projection_ : ndarray (n, d)
        ``T``, the rows ``tau_i`` of the coefficient estimator.
    """

    _has_a_block = False
    _parameter_constraints: ClassVar[dict] = {
        **_BipolarHybrid._parameter_constraints,
        "lambda_bandwidth": POSITIVE,
        "lambda_features": [StrOptions({"positive", "trig"})],
    }

    def __init__(
        self,
        n_features: int = 64,
        n_lambda: int = 8,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        sampler: str = "iid",
        shared_projection: bool = True,
        random_state=None,
        lambda_bandwidth: float = 1.0,
        lambda_features: str = "positive",
    ):
        super().__init__(
            n_features, n_lambda, kernel, lengthscale, sampler, shared_projection, random_state
        )
        self.lambda_bandwidth = lambda_bandwidth
        self.lambda_features = lambda_features

    def _check_params(self):
        super()._check_params()
        validate_bandwidth(self.lambda_bandwidth, "lambda_bandwidth")
        if self.lambda_features not in ("positive", "trig"):
            raise ValueError(
                f"lambda_features must be 'positive' or 'trig', got {self.lambda_features!r}."
            )

    @property
    def _lambda_a(self) -> float:
        return 0.0

    @property
    def _lambda_c(self) -> float:
        return 1.0

    @property
    def _lambda_dim(self) -> int:
        return 2 * int(self.n_lambda)

    def _fit_lambda(self, X, Y, rng):
        self.lambda_projection_ = gaussian_projection(self.n_lambda, X.shape[1], rng)  # (n, d)

    def _lambda_features(self, X, xp, side):
        U = X / float(self.lambda_bandwidth) if side == "x" else X / (-float(self.lambda_bandwidth))
        p = U @ self._param("T_T", xp, U)  # (n_pts, n)
        if self.lambda_features == "trig":
            base = xp.concat([xp.sin(p), xp.cos(p)], axis=1) / math.sqrt(self.n_lambda)
            return base, xp.zeros(X.shape[0], dtype=X.dtype, device=device(X))
        both = xp.concat([p, -p], axis=1)  # (n_pts, 2n)
        if both.shape[0] == 0:
            return both, xp.zeros(0, dtype=X.dtype, device=device(X))
        row_max = _detach(xp.max(both, axis=1))
        log_scale = row_max - _sq_norms(xp, U) - 0.5 * math.log(2.0 * self.n_lambda)
        return xp.exp(both - row_max[:, None]), log_scale

    def _lambda_exact(self, X, Y, xp):
        z2 = self._z2(X, Y, xp)
        return xp.exp(-z2 / (2.0 * float(self.lambda_bandwidth) ** 2))

    @staticmethod
    def _z2(X, Y, xp):
        nx, ny = _sq_norms(xp, X)[:, None], _sq_norms(xp, Y)[None, :]
        return xp.clip(nx + ny + 2.0 * (X @ xp.matrix_transpose(Y)), min=0.0)

    def _lambda_log_var(self, X, Y, xp):
        c2 = float(self.lambda_bandwidth) ** 2
        z2 = self._z2(X, Y, xp) / c2  # |u - v|^2 with u = x/c, v = -y/c
        if self.lambda_features == "trig":
            # Var cos(tau^T (u - v)) = (1 - e^{-|u-v|^2})^2 / 2
            log_v1 = 2.0 * log1mexp(xp, z2)
        else:
            # antithetic positive: K_g^2 (cosh |u+v|^2 - 1) = e^{d2 - z2} (1 - e^{-d2})^2 / 2
            # with d2 = |u+v|^2, u + v = (x - y)/c; in log space, as it exceeds the
            # floating-point range for far-apart inputs
            nx, ny = _sq_norms(xp, X)[:, None], _sq_norms(xp, Y)[None, :]
            d2 = xp.clip(nx + ny - 2.0 * (X @ xp.matrix_transpose(Y)), min=0.0) / c2
            log_v1 = (d2 - z2) + 2.0 * log1mexp(xp, d2)
        return -0.5 * z2, log_v1 - math.log(2.0 * self.n_lambda)  # lambda = e^{-z2/2}

    def _lambda_hat(self, Xs, Ys, xp):
        if self.lambda_features != "trig":
            return super()._lambda_hat(Xs, Ys, xp)
        # mean_i cos(tau_i.(u - v)), u = x/c, v = -y/c, as 1 - 2 mean_i sin^2(tau_i.(u - v)/2):
        # exactly 1 at x = -y, where the feature form u(x).v(y) = mean_i (sin^2 + cos^2) is
        # 1 only to rounding, and 1 - lambda_hat multiplies the trig estimate (~e^{|x|^2},
        # against a kernel ~e^{-|x|^2}): that rounding was the whole estimate at |x| ~ 5
        T_T = self._param("T_T", xp, Xs)
        px = (Xs / float(self.lambda_bandwidth)) @ T_T  # (n, n_lambda): tau.u
        py = (Ys / (-float(self.lambda_bandwidth))) @ T_T  # (m, n_lambda): tau.v
        return 1.0 - 2.0 * _mean_half_angle_sin2(xp, px, py)


class NormalizedGaussianHybridRF(_BipolarHybrid):
    """Normalised bipolar Gaussian hybrid (App. F, eq. 67-70).

    For inputs of common norm ``r`` (``radius``), the coefficient
    ``lambda(x, y) = (1 - exp(-sigma^2 |x - y|^2 / 2)) / rho``, ``rho = 1 - exp(-2 sigma^2 r^2)``,
    is 0 at ``theta = 0`` and 1 at ``theta = pi``. It is estimated by
    ``lambda_hat = 1/rho - (1/(n rho)) sum_i cos(tau_i^T (x - y))`` with
    ``tau_i ~ N(0, sigma^2 I)`` (Erratum 6: eq. 70 prints ``N(0, I)``, which keeps the
    hybrid unbiased but breaks ``lambda(pi) = 1`` and Thm F.1/F.2), i.e. ``a = 1/rho``,
    ``c = -1/rho``, ``u = v = n^{-1/2} [sin(Tx); cos(Tx)]``. Output dimension
    ``4m(2n + 1)``.

    The estimator is unbiased for any inputs and any ``radius``; ``radius`` only fixes the
    constant ``rho`` (App. F assumes ``|x| = |y| = r``). Zero variance holds only at
    ``theta = 0`` (trig-estimated ``lambda``; ``lambda_hat = 0`` there).

    For a small ``rho`` (``sigma * radius`` below about ``1e-4`` in float64, ``1e-2`` in
    float32) the product ``transform(X) @ transform_y(Y).T`` loses about
    ``log10(1 / rho)`` digits to cancellation in ``lambda_hat``; :meth:`approx_kernel`
    computes ``lambda_hat`` without it there. The coefficients ``+-1 / rho`` must stay in
    the range of the dtype the features are computed in: ``rho`` below float64's normal
    range (``sigma * radius`` below about ``1e-154``) raises a ``ValueError`` at ``fit``,
    below float32's (about ``8e-20``) at ``transform`` and ``approx_kernel`` of float32 or
    half-precision input (pass float64 input, or raise ``sigma``).

    Parameters
    ----------
    n_features, n_lambda, kernel, lengthscale, sampler, shared_projection, random_state
        As in :class:`AngularHybridRF`.
    sigma : float
        Scale of ``tau_i``.
    radius : float, optional
        ``r``, in the units of ``X``: divided by ``lengthscale`` like the inputs (the
        attribute ``radius_`` holds ``radius / lengthscale``, the ``r`` of App. F). By
        default ``radius_`` is the root-mean-square norm of the lengthscale-scaled rows
        of ``X`` and ``Y`` at fit.

    Attributes
    ----------
    projection_ : ndarray (m, d)
        ``W`` of ``SM^{++}``.
    projection_trig_ : ndarray (m, d)
        ``W`` of ``SM^{trig}`` (the same array when ``shared_projection``).
    lambda_projection_ : ndarray (n, d)
        ``T``, the rows ``tau_i ~ N(0, sigma^2 I)`` of the coefficient estimator.
    radius_ : float
        ``r`` in lengthscale-scaled units.
    rho_ : float
        ``rho = 1 - exp(-2 sigma^2 r^2)``.
    """

    #: the default ``radius`` is the root-mean-square norm of the rows of ``X`` and ``Y``
    data_dependent = True

    _parameter_constraints: ClassVar[dict] = {
        **_BipolarHybrid._parameter_constraints,
        "sigma": POSITIVE,
        "radius": [None, *POSITIVE],
    }

    def __init__(
        self,
        n_features: int = 64,
        n_lambda: int = 8,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        sampler: str = "iid",
        shared_projection: bool = True,
        random_state=None,
        sigma: float = 1.0,
        radius: float | None = None,
    ):
        super().__init__(
            n_features, n_lambda, kernel, lengthscale, sampler, shared_projection, random_state
        )
        self.sigma = sigma
        self.radius = radius

    def _check_params(self):
        super()._check_params()
        sigma = validate_positive_float(self.sigma, "sigma")
        if sigma > MAX_BANDWIDTH:  # sigma^2 (times a few) past the float64 range
            raise ValueError(
                f"sigma must be <= {MAX_BANDWIDTH:g} (sigma^2 overflows), got {sigma:g}."
            )
        if self.radius is not None:
            validate_positive_float(self.radius, "radius")

    def _fit_reads_data(self) -> bool:
        return self.radius is None  # a given radius: nothing is fitted to the data

    @property
    def _lambda_a(self) -> float:
        return 1.0 / self.rho_

    @property
    def _lambda_c(self) -> float:
        return -1.0 / self.rho_

    @property
    def _lambda_dim(self) -> int:
        return 2 * int(self.n_lambda)

    def _fit_lambda(self, X, Y, rng):
        if self.radius is None:
            big = max(float(np.max(np.abs(X), initial=0.0)), float(np.max(np.abs(Y), initial=0.0)))
            if big > 0:  # root-mean-square norm, scaled so that tiny inputs do not underflow
                Xb, Yb = X / big, Y / big
                sq = np.concatenate([np.sum(Xb * Xb, axis=1), np.sum(Yb * Yb, axis=1)])
                r = big * float(np.sqrt(sq.mean()))
            else:
                r = 0.0
            if not r > 0:
                raise ValueError("radius could not be fitted: X and Y are all zero; pass radius=.")
        else:
            r = float(self.radius) / self.lengthscale
        self.radius_ = r
        self.rho_ = float(-np.expm1(-2.0 * self.sigma**2 * r * r))
        self._check_rho(X.dtype)
        self.lambda_projection_ = self.sigma * gaussian_projection(
            self.n_lambda, X.shape[1], rng
        )  # (n, d), rows ~ N(0, sigma^2 I)

    def _check_rho(self, dtype):
        """``ValueError`` unless ``rho_`` is a normal number of the dtype the features of
        ``dtype`` input are computed in (float64, else float32: half-precision tensors are
        computed in float32): below it the coefficients ``+-1 / rho`` (and ``2 / rho`` of
        :meth:`_lambda_hat`) overflow to inf and the estimate is NaN."""
        name = "float64" if "float64" in str(dtype) else "float32"
        if not self.rho_ >= float(np.finfo(name).tiny):
            raise ValueError(
                f"radius * sigma = {self.radius_ * self.sigma:.3g} is too small (rho = 1 - "
                f"exp(-2 sigma^2 radius^2) = {self.rho_:.3g} is below the {name} range, "
                f"where 1 / rho overflows); raise sigma"
                + ("" if name == "float64" else " or pass float64 input")
                + "."
            )

    def _blocks(self, X, xp, side):
        self._check_rho(X.dtype)  # a map fitted on float64 input, given float32 input
        return super()._blocks(X, xp, side)

    def _lambda_features(self, X, xp, side):
        p = X @ self._param("T_T", xp, X)  # (n_pts, n)
        base = xp.concat([xp.sin(p), xp.cos(p)], axis=1) / math.sqrt(self.n_lambda)
        return base, xp.zeros(X.shape[0], dtype=X.dtype, device=device(X))

    def _lambda_hat(self, Xs, Ys, xp):
        # a + c u^T v = (1 - mean_i cos(tau_i^T (x - y))) / rho cancels: its rounding error
        # is ~eps / rho, large where rho is small (inputs of tiny norm). There, the same
        # estimate as (2 / (n rho)) sum_i sin^2(tau_i^T (x - y) / 2), without cancellation
        self._check_rho(Xs.dtype)
        eps = float(xp.finfo(Xs.dtype).eps)
        if self.rho_ >= math.sqrt(eps):  # the feature form keeps half of the digits
            return super()._lambda_hat(Xs, Ys, xp)
        T_T = self._param("T_T", xp, Xs)
        px, py = Xs @ T_T, Ys @ T_T  # (n, n_lambda), (m, n_lambda)
        return _mean_half_angle_sin2(xp, px, py) * (2.0 / self.rho_)

    def _d2(self, X, Y, xp):
        nx, ny = _sq_norms(xp, X)[:, None], _sq_norms(xp, Y)[None, :]
        return _snapped_sq(xp, nx + ny - 2.0 * (X @ xp.matrix_transpose(Y)), nx + ny)

    def _lambda_exact(self, X, Y, xp):
        s2 = self.sigma**2
        return -xp.expm1(-0.5 * s2 * self._d2(X, Y, xp)) / self.rho_

    def _lambda_log_var(self, X, Y, xp):
        # Thm F.1: Var lambda_hat = (2 rho^2 n)^{-1} (1 - e^{-sigma^2 |D|^2})^2
        s2 = self.sigma**2
        d2 = self._d2(X, Y, xp)
        log_lam = log1mexp(xp, 0.5 * s2 * d2) - math.log(self.rho_)
        log_v = 2.0 * (log1mexp(xp, s2 * d2) - math.log(self.rho_))
        log_v = log_v - math.log(2.0 * self.n_lambda)
        return log_lam, log_v
