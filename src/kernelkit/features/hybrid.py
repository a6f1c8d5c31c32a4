"""Hybrid random features (HRF) and complex exponential estimators for the softmax and
Gaussian kernels.

Reference: K. Choromanski et al., "Hybrid Random Features" (ICLR 2022); equation, lemma
and theorem numbers below are the paper's, with the corrections of
``shared/notes/hybrid_random_features.md`` (the note wins over the paper).

A hybrid estimator mixes two unbiased base estimators of ``SM(x, y) = exp(x^T y)`` with a
random, data-dependent coefficient ``lambda_hat`` drawn independently of them (eq. 8-11):

    SM_hyb = lambda_hat * SM_1 + (1 - lambda_hat) * SM_2,    lambda_hat = a + c u(x)^T v(y).

Because ``lambda_hat`` is independent of ``SM_1`` and ``SM_2`` the mix is unbiased whatever
the law of ``lambda_hat``. Here ``SM_1 = SM^{++}_m`` (FAVOR+ with antithetic ``+-w``, exact
when ``x + y = 0``) and ``SM_2 = SM^{trig}_m`` (sin/cos pairs, exact when ``x = y``). The
estimator is written as a *real asymmetric* feature map (note Sec. 2, "real form")::

    Phi_1(x) = [ sqrt|a| phi1(x);        sqrt|1-a| phi2(x);
                 sqrt|c| u(x) (x) phi1(x);  sqrt|c| u(x) (x) phi2(x) ]
    Phi_2(y) = [ sg(a) sqrt|a| phi1(y);  sg(1-a) sqrt|1-a| phi2(y);
                 sg(c) sqrt|c| v(y) (x) phi1(y); -sg(c) sqrt|c| v(y) (x) phi2(y) ]

with ``(x)`` the outer product ``(a[:, None] * b[None, :]).ravel()``, so that
``Phi_1(x)^T Phi_2(y) = lambda_hat SM_1 + (1 - lambda_hat) SM_2`` exactly. Queries go
through :meth:`transform` (``Phi_1``), keys through :meth:`transform_y` (``Phi_2``).

Sizes (Erratum 1: base estimators use ``m``, the coefficient uses ``n``):

* ``m = n_features``: random projections ``w_i`` of each base estimator; ``phi1`` and
  ``phi2`` both have ``2m`` entries (``[exp(Wx); exp(-Wx)]`` and ``[sin(Wx); cos(Wx)]``);
* ``n = n_lambda``: random projections ``tau_i`` of the coefficient estimator.

Gaussian kernel: every map is multiplied by ``exp(-|u|^2/2)`` on both sides (note Sec. 1);
``lambda_hat`` is unchanged.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import (
    device,
    is_numpy_namespace,
    validate_positive_int,
)
from ._base import FeatureMap, _detach
from .sampling import draw_projection, gaussian_projection

__all__ = [
    "AngularHybridRF",
    "GaussianHybridRF",
    "NormalizedGaussianHybridRF",
    "hybrid_feature_flops",
    "matched_n_features",
    "regular_feature_flops",
]


# ====================================================================== cost matching
def regular_feature_flops(n_features: int, d: int) -> int:
    """FLOPs to compute a regular random feature map of one input (App. L, eq. 106).

    A trig / positive / hyperbolic map with ``M = n_features`` projections costs
    ``2 M d`` (the projection ``W x``: a multiply and an add per entry) ``+ 2 M`` (two
    nonlinearities per projection: sin and cos, or ``exp(+w.x)`` and ``exp(-w.x)``).
    The same constants as ``kernelkit.experiments._hrf_common.FLOP_RULE``.
    """
    M = validate_positive_int(n_features, "n_features")
    d = validate_positive_int(d, "d")
    return 2 * M * d + 2 * M


def hybrid_feature_flops(n_features: int, n_lambda: int, d: int, *,
                         shared_projection: bool = True) -> int:
    """FLOPs to compute the angular hybrid map of one input (App. L, eq. 106).

    ``2 (m + n) d`` (projections ``W x`` and ``T x``; ``2 (2m + n) d`` with independent
    base projections) ``+ 4 m`` (sin, cos, ``exp(+)``, ``exp(-)``) ``+ n`` (signs)
    ``+ 4 m n`` (the outer products ``s (x) phi_trig`` and ``s (x) phi_++``, ``2 m n``
    entries each), with ``m = n_features`` and ``n = n_lambda``.
    """
    m = validate_positive_int(n_features, "n_features")
    n = validate_positive_int(n_lambda, "n_lambda")
    d = validate_positive_int(d, "d")
    return 2 * ((m if shared_projection else 2 * m) + n) * d + 4 * m + n + 4 * m * n


def matched_n_features(n_features: int, d: int, n_lambda: int = 8, *,
                       shared_projection: bool = True, rule: str = "flops") -> int:
    """Base size ``m`` of an angular hybrid matched in cost to a regular map.

    The matching rule used by the paper's comparisons ("FLOP-matched", Fig. 2, Table 1):

    * ``rule="flops"`` (default): the largest ``m`` with
      ``hybrid_feature_flops(m, n, d) <= regular_feature_flops(M, d)``, i.e.
      ``2(m + n)d + 4m + n + 4mn <= 2Md + 2M`` (shared projections;
      ``2(2m + n)d + ...`` for independent ones): the cost of *computing the features of
      one input* is matched (App. L: ``O(nd + md + mn)`` against ``O(Md)``).
      The hybrid's output dimension ``4m(n+1)`` is then larger than the regular ``2M``, so a
      downstream ``O(L D)`` product (attention, Gram matrices) costs more.
    * ``rule="dimension"``: the largest ``m`` with ``4m(n+1) <= 2M``, i.e. the same output
      dimension as a sin/cos trig map or antithetic FAVOR+ map with ``M`` projections.

    Parameters
    ----------
    n_features : int
        ``M``, projections of the regular map (TrigRF / PositiveRF / HyperbolicRF).
    d : int
        Input dimension.
    n_lambda : int
        ``n``, projections of the hybrid's coefficient estimator.
    shared_projection : bool
        Whether the hybrid shares ``W`` between its two base estimators.
    rule : {"flops", "dimension"}

    Returns
    -------
    int
        ``m >= 1``.

    Raises
    ------
    ValueError
        When even ``m = 1`` exceeds the budget.

    Examples
    --------
    >>> matched_n_features(128, 64, 8)
    95
    >>> matched_n_features(128, 64, 8, rule="dimension")
    7
    """
    M = validate_positive_int(n_features, "n_features")
    d = validate_positive_int(d, "d")
    n = validate_positive_int(n_lambda, "n_lambda")
    if rule == "flops":
        budget = regular_feature_flops(M, d)
        fixed = 2 * n * d + n  # cost of the lambda part, independent of m
        per_m = 2 * d * (1 if shared_projection else 2) + 4 + 4 * n
        m = (budget - fixed) // per_m
    elif rule == "dimension":
        m = (2 * M) // (4 * (n + 1))
    else:
        raise ValueError(f"rule must be 'flops' or 'dimension', got {rule!r}.")
    if m < 1:
        raise ValueError(
            f"No angular hybrid with n_lambda={n} fits the budget of a regular map with "
            f"n_features={M} (d={d}, rule={rule!r}); lower n_lambda or raise n_features."
        )
    return int(m)


# ====================================================================== helpers
def _combine(xp, dot, scale):
    """``dot * exp(scale)`` without overflow where the product is representable.

    dot, scale : (n, m). Same algorithm as :meth:`FeatureMap.approx_kernel`.
    """
    limit = math.log(float(xp.finfo(dot.dtype).max)) - 10.0
    if dot.shape[0] == 0 or dot.shape[1] == 0 or float(_detach(xp.max(scale))) < limit:
        return dot * xp.exp(scale)
    absdot = xp.abs(dot)
    tiny = xp.asarray(float(xp.finfo(dot.dtype).tiny), dtype=dot.dtype)
    logabs = xp.log(xp.maximum(absdot, tiny)) + scale
    logabs = xp.where(absdot > 0, logabs, xp.full_like(logabs, -math.inf))
    return xp.sign(dot) * xp.exp(logabs)


def _outer(xp, u, phi):
    """Row-wise outer product ``u (x) phi``: (n, p), (n, q) -> (n, p q), index ``i q + j``."""
    n = u.shape[0]
    return xp.reshape(u[:, :, None] * phi[:, None, :], (n, u.shape[1] * phi.shape[1]))


def _assemble(xp, blocks):
    """Concatenate stabilised blocks ``coef * base * exp(log_scale)``.

    blocks : list of ``(base (n, k), log_scale (n,), coef float)``.
    Returns ``(base (n, sum k), log_scale (n,))`` with one common row scale (the largest).
    """
    common = blocks[0][1]
    for _, ls, _ in blocks[1:]:
        common = xp.maximum(common, ls)
    common = _detach(common)
    parts = []
    for base, ls, coef in blocks:
        parts.append(base * (coef * xp.exp(ls - common))[:, None])
    return xp.concat(parts, axis=1), common


def _log1mexp(xp, t):
    """``log(1 - exp(-t))`` for ``t >= 0`` (``-inf`` at 0), elementwise."""
    t = xp.clip(t, min=0.0)
    if is_numpy_namespace(xp):
        with np.errstate(divide="ignore"):
            return np.log(-np.expm1(-t))
    return xp.log(-xp.expm1(-t))


def _sq_norms(xp, X):
    return xp.sum(X * X, axis=1)


def _check_bool(value, name):
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {value!r}.")


# ====================================================================== bipolar hybrids
class _BipolarHybrid(FeatureMap):
    """``lambda_hat SM^{++}_m + (1 - lambda_hat) SM^{trig}_m`` as a real asymmetric map.

    Subclasses set the coefficient ``lambda_hat = a + c u(x)^T v(y)`` through
    ``_lambda_a``, ``_lambda_c``, ``_fit_lambda``, ``_lambda_features``, ``_lambda_dim``,
    ``exact_lambda`` and ``_lambda_moments``.

    Fitted attributes: ``projection_`` (m, d) the ``W`` of ``SM^{++}``;
    ``projection_trig_`` (m, d) the ``W`` of ``SM^{trig}`` (the same array when
    ``shared_projection``); ``lambda_projection_`` (n, d) the ``T`` of the coefficient.
    """

    symmetric = False
    positive = False
    #: whether the block ``sqrt|a| phi1`` is present (``a != 0``)
    _has_a_block = True

    def __init__(self, n_features: int = 64, n_lambda: int = 8, kernel: str = "softmax",
                 lengthscale: float = 1.0, orthogonal=False, shared_projection: bool = True,
                 random_state=None):
        super().__init__(n_features, kernel, lengthscale, orthogonal, random_state)
        self.n_lambda = n_lambda
        self.shared_projection = shared_projection

    # -------------------------------------------------------------- parameters
    def _validate_params(self):
        super()._validate_params()
        validate_positive_int(self.n_lambda, "n_lambda", maximum=2**24)
        _check_bool(self.shared_projection, "shared_projection")

    def _fit_parameters(self, X, Y, rng):
        if self.shared_projection:
            self.projection_trig_ = self.projection_
        else:
            self.projection_trig_ = draw_projection(self.n_features, X.shape[1], rng,
                                                    self.orthogonal)  # (m, d)
        self._fit_lambda(X, Y, rng)

    def _fit_lambda(self, X, Y, rng):
        raise NotImplementedError

    def _build(self):
        super()._build()
        self._consts = {
            "W_T": np.ascontiguousarray(self.projection_.T),  # (d, m)
            "W_T_trig": np.ascontiguousarray(self.projection_trig_.T),  # (d, m)
            "T_T": np.ascontiguousarray(self.lambda_projection_.T),  # (d, n)
        }

    @property
    def _lambda_a(self) -> float:
        raise NotImplementedError

    @property
    def _lambda_c(self) -> float:
        raise NotImplementedError

    @property
    def _lambda_dim(self) -> int:
        """Length of ``u(x)`` (and ``v(y)``)."""
        raise NotImplementedError

    @property
    def output_dim(self) -> int:
        m2 = 2 * int(self.n_features)
        return m2 * (int(self._has_a_block) + 1) + 2 * self._lambda_dim * m2

    # -------------------------------------------------------------- base maps
    def _positive_parts(self, X, xp):
        """``phi^{++}(x) = (2m)^{-1/2} e^{-|x|^2/2} [exp(Wx); exp(-Wx)]``.

        Returns ``(base (n, 2m), log_scale (n,))``.
        """
        p = X @ self._param("W_T", xp, X)  # (n, m)
        both = xp.concat([p, -p], axis=1)  # (n, 2m)
        if both.shape[0] == 0:
            return both, xp.zeros(0, dtype=X.dtype, device=device(X))
        row_max = _detach(xp.max(both, axis=1))  # (n,)
        base = xp.exp(both - row_max[:, None])
        log_scale = row_max - 0.5 * _sq_norms(xp, X) - 0.5 * math.log(2.0 * self.n_features)
        return base, log_scale

    def _trig_parts(self, X, xp):
        """``phi^{trig}(x) = m^{-1/2} e^{|x|^2/2} [sin(Wx); cos(Wx)]``.

        Returns ``(base (n, 2m), log_scale (n,))``.
        """
        p = X @ self._param("W_T_trig", xp, X)  # (n, m)
        base = xp.concat([xp.sin(p), xp.cos(p)], axis=1) / math.sqrt(self.n_features)
        return base, 0.5 * _sq_norms(xp, X)

    def _lambda_features(self, X, xp, side):
        """``(u(x) or v(y) base (n, L), log_scale (n,))`` on lengthscale-scaled inputs."""
        raise NotImplementedError

    def _scaled_features(self, X, xp, side):
        a, c = self._lambda_a, self._lambda_c
        pb, pl = self._positive_parts(X, xp)  # (n, 2m), (n,)
        tb, tl = self._trig_parts(X, xp)  # (n, 2m), (n,)
        ub, ul = self._lambda_features(X, xp, side)  # (n, L), (n,)
        ra, r1a, rc = math.sqrt(abs(a)), math.sqrt(abs(1.0 - a)), math.sqrt(abs(c))
        if side == "x":
            ca, c1a, cp, ct = ra, r1a, rc, rc
        else:
            sg = math.copysign
            ca, c1a = sg(ra, a), sg(r1a, 1.0 - a)
            cp, ct = sg(rc, c), -sg(rc, c)
        blocks = []
        if self._has_a_block:
            blocks.append((pb, pl, ca))
        blocks += [(tb, tl, c1a), (_outer(xp, ub, pb), ul + pl, cp),
                   (_outer(xp, ub, tb), ul + tl, ct)]
        base, log_scale = _assemble(xp, blocks)  # (n, D), (n,)
        if self.alpha != 0.0:
            log_scale = log_scale + self.alpha * _sq_norms(xp, X)
        return base, log_scale

    # -------------------------------------------------------------- estimates
    def _checked_pair(self, X, Y):
        Y = X if Y is None else Y
        Xs, xp = self._check_X(X, "X")
        Ys, _ = self._check_X(Y, "Y")
        return Xs, Ys, xp

    def approx_components(self, X, Y=None):
        """The three random parts of the hybrid estimate.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        lambda_hat : array, shape (n, m)
            Coefficient estimate ``a + c u(x)^T v(y)``.
        k_positive : array, shape (n, m)
            ``SM^{++}_m`` estimate (times ``exp(-(|x|^2+|y|^2)/2)`` for the Gaussian kernel).
        k_trig : array, shape (n, m)
            ``SM^{trig}_m`` estimate (same kernel scaling).

        ``approx_kernel = lambda_hat * k_positive + (1 - lambda_hat) * k_trig``.
        """
        Xs, Ys, xp = self._checked_pair(X, Y)
        extra = 0.0
        if self.alpha != 0.0:
            extra = self.alpha * (_sq_norms(xp, Xs)[:, None] + _sq_norms(xp, Ys)[None, :])
        out = []
        for parts in (self._positive_parts, self._trig_parts):
            bx, lx = parts(Xs, xp)
            by, ly = parts(Ys, xp)
            out.append(_combine(xp, bx @ xp.matrix_transpose(by),
                                lx[:, None] + ly[None, :] + extra))  # (n, m)
        ux, ulx = self._lambda_features(Xs, xp, "x")
        uy, uly = self._lambda_features(Ys, xp, "y")
        uv = _combine(xp, ux @ xp.matrix_transpose(uy), ulx[:, None] + uly[None, :])
        lam = self._lambda_a + self._lambda_c * uv  # (n, m)
        return lam, out[0], out[1]

    def approx_kernel(self, X, Y=None):
        """Unbiased hybrid estimate of the kernel matrix, shape (n, m).

        Equal to ``transform(X) @ transform_y(Y).T`` (to rounding), computed in
        ``O(n m (m_f + n_l))`` from :meth:`approx_components` instead of
        ``O(n m m_f n_l)``, with the row scales combined in log space.
        """
        lam, kp, kt = self.approx_components(X, Y)
        return lam * kp + (1.0 - lam) * kt

    def exact_lambda(self, X, Y=None):
        """The coefficient ``lambda(x, y) = E lambda_hat``, shape (n, m)."""
        Xs, Ys, xp = self._checked_pair(X, Y)
        return self._lambda_exact(Xs, Ys, xp)

    def _lambda_exact(self, X, Y, xp):
        raise NotImplementedError

    def _lambda_moments(self, X, Y, xp):
        """``(E lambda_hat^2, E (1-lambda_hat)^2, E lambda_hat (1-lambda_hat))``, each (n, m)."""
        raise NotImplementedError

    # -------------------------------------------------------------- variance
    def variance(self, X, Y=None):
        """Analytic MSE of :meth:`approx_kernel` (Thm 3.1 with Lemma 2.2).

        ``MSE = E[lambda_hat^2] MSE(++) + E[(1-lambda_hat)^2] MSE(trig)
        - shared * (2/m) SM^2 (1 - cos(|x|^2 - |y|^2)) E[lambda_hat (1-lambda_hat)]``,
        with ``MSE(trig) = e^{|x|^2+|y|^2} (1 - e^{-|x-y|^2})^2 / (2m)`` and
        ``MSE(++) = SM^2 e^{|x+y|^2} (1 - e^{-|x+y|^2})^2 / (2m)`` (Lemma 2.2), and the
        moments of ``lambda_hat`` of the subclass (Lemma 3.2, App. F). The last term is
        present only for ``shared_projection=True`` (eq. 38). For the Gaussian kernel the
        MSE is multiplied by ``exp(-|x|^2 - |y|^2)``. Exact for i.i.d. projections; for
        ``orthogonal`` samplers it is the i.i.d. value.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional

        Returns
        -------
        array, shape (n, m), non-negative.
        """
        Xs, Ys, xp = self._checked_pair(X, Y)
        m = self.n_features
        nx = _sq_norms(xp, Xs)[:, None]  # (n, 1)
        ny = _sq_norms(xp, Ys)[None, :]  # (1, m)
        xy = Xs @ xp.matrix_transpose(Ys)  # (n, m)
        z2 = xp.clip(nx + ny + 2.0 * xy, min=0.0)  # |x+y|^2
        d2 = xp.clip(nx + ny - 2.0 * xy, min=0.0)  # |x-y|^2
        ka = 2.0 * self.alpha * (nx + ny)  # log of the Gaussian-kernel factor on the MSE
        log2m = math.log(2.0 * m)
        log_pp = 2.0 * xy + z2 + 2.0 * _log1mexp(xp, z2) - log2m + ka
        log_tr = (nx + ny) + 2.0 * _log1mexp(xp, d2) - log2m + ka
        e2, f2, g = self._lambda_moments(Xs, Ys, xp)
        out = e2 * xp.exp(log_pp) + f2 * xp.exp(log_tr)
        if self.shared_projection:
            cov = (2.0 / m) * xp.exp(2.0 * xy + ka) * (1.0 - xp.cos(nx - ny))
            out = out - g * cov
        return xp.clip(out, min=0.0)

    def log_relative_variance(self, X, Y=None):
        """``log(MSE / K^2)`` from :meth:`variance` (``-inf`` where the estimate is exact)."""
        Xs, Ys, xp = self._checked_pair(X, Y)
        v = self.variance(X, Y)
        logk = Xs @ xp.matrix_transpose(Ys)
        if self.alpha != 0.0:
            logk = logk + self.alpha * (_sq_norms(xp, Xs)[:, None] + _sq_norms(xp, Ys)[None, :])
        if is_numpy_namespace(xp):
            with np.errstate(divide="ignore"):
                return np.log(v) - 2.0 * logk
        return xp.log(v) - 2.0 * logk

    def _log_second_moment(self, X, Y, xp):
        raise NotImplementedError(
            f"{type(self).__name__} is a mixture; its MSE is given by variance(), not by a "
            "single-projection second moment."
        )

    def log_objective(self, X, Y=None):
        """Not defined for hybrids (no fitted projection parameters)."""
        raise NotImplementedError(f"{type(self).__name__} has no FAVOR# fitting objective.")


class AngularHybridRF(_BipolarHybrid):
    """Angular hybrid random features, ``SM^{anghyb}_{m,n}`` (eq. 12, 19; App. D).

    ``SM_hat = lambda_hat SM^{++}_m + (1 - lambda_hat) SM^{trig}_m`` with
    ``lambda_hat = (1/2)(1 - (1/n) sum_i sgn(tau_i^T x) sgn(tau_i^T y))``, an unbiased
    estimate of ``lambda = theta / pi`` (``theta`` the angle between ``x`` and ``y``,
    Goemans-Williamson). For ``|x| = |y|`` the estimate is exact at ``theta = 0``
    (``lambda_hat = 0``, trig is exact) and ``theta = pi`` (``lambda_hat = 1``, ``SM^{++}``
    is exact).

    Real asymmetric map of dimension ``output_dim = 4 m (n + 1)`` (e.g. 288 for
    ``m = n = 8``), with ``s(u) = sgn(T u)``::

        Phi_1(x) = [ phi++(x)/sqrt2; phitrig(x)/sqrt2;
                     s(x)(x)phi++(x)/sqrt(2n);   s(x)(x)phitrig(x)/sqrt(2n) ]
        Phi_2(y) = [ phi++(y)/sqrt2; phitrig(y)/sqrt2;
                    -s(y)(x)phi++(y)/sqrt(2n);   s(y)(x)phitrig(y)/sqrt(2n) ]

    (the real form with ``a = 1/2``, ``c = -1/2``, ``u = v = s / sqrt(n)``).
    ``phi++(u) = (2m)^{-1/2} e^{-|u|^2/2} [exp(Wu); exp(-Wu)]`` and
    ``phitrig(u) = m^{-1/2} e^{|u|^2/2} [sin(Wu); cos(Wu)]``.

    Parameters
    ----------
    n_features : int
        ``m``, random projections of each base estimator (``W`` is ``m x d``). Not the
        output dimension: that is ``4 m (n + 1)``. To match the cost of a regular map
        with ``M`` projections use :func:`matched_n_features`.
    n_lambda : int
        ``n``, random projections ``tau_i`` (rows of ``T``, i.i.d. ``N(0, I)``) of the
        coefficient estimator.
    kernel : {"softmax", "gaussian"}
    lengthscale : float
        Inputs are divided by it.
    orthogonal : bool or str
        Sampler of ``W`` (see :func:`~kernelkit.features.sampling.draw_projection`):
        ``False`` i.i.d. ("HRF-iid"), ``True`` block-orthogonal ("HRF-ort"), or a sampler
        name. ``T`` is always i.i.d.
    shared_projection : bool
        ``True``: both base estimators use the same ``W`` (variant II, lower MSE unless
        ``|x| = |y|``, projection cost ``(m + n) d``); ``False``: independent ``W``'s
        (variant I, cost ``(2m + n) d``).
    random_state : None, int or numpy.random.Generator

    Notes
    -----
    MSE (:meth:`variance`): Thm 3.1 with Lemma 3.2, ``E lambda_hat^2 = t(t - t/n + 1/n)``,
    ``E(1 - lambda_hat)^2 = (1-t)(1-t+t/n)``, ``E lambda_hat(1-lambda_hat) = t(1-t)(1-1/n)``,
    ``t = theta/pi``; for equal norms it is the corrected eq. 47. A zero input has
    ``sgn(T 0) = 0``, hence ``lambda_hat = 1/2`` deterministically.
    """

    @property
    def _lambda_a(self) -> float:
        return 0.5

    @property
    def _lambda_c(self) -> float:
        return -0.5

    @property
    def _lambda_dim(self) -> int:
        return int(self.n_lambda)

    def _fit_lambda(self, X, Y, rng):
        self.lambda_projection_ = gaussian_projection(self.n_lambda, X.shape[1], rng)  # (n, d)

    def _lambda_features(self, X, xp, side):
        s = xp.sign(X @ self._param("T_T", xp, X))  # (n_pts, n)
        return s / math.sqrt(self.n_lambda), xp.zeros(X.shape[0], dtype=X.dtype,
                                                      device=device(X))

    def _angle_t(self, X, Y, xp):
        """``(t = theta / pi (n, m), degenerate mask (n, m))``; degenerate: a zero input."""
        nx = xp.sqrt(_sq_norms(xp, X))[:, None]
        ny = xp.sqrt(_sq_norms(xp, Y))[None, :]
        denom = nx * ny
        zero = denom == 0
        safe = xp.where(zero, xp.ones_like(denom), denom)
        cos = xp.clip((X @ xp.matrix_transpose(Y)) / safe, min=-1.0, max=1.0)
        return xp.acos(cos) / math.pi, zero

    def _lambda_exact(self, X, Y, xp):
        t, zero = self._angle_t(X, Y, xp)
        return xp.where(zero, xp.full_like(t, 0.5), t)

    def _lambda_moments(self, X, Y, xp):
        t, zero = self._angle_t(X, Y, xp)
        n = float(self.n_lambda)
        e2 = t * (t - t / n + 1.0 / n)
        f2 = (1.0 - t) * (1.0 - t + t / n)
        g = t * (1.0 - t) * (1.0 - 1.0 / n)
        q = xp.full_like(t, 0.25)  # lambda_hat = 1/2 exactly when an input is zero
        return xp.where(zero, q, e2), xp.where(zero, q, f2), xp.where(zero, q, g)


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

    Parameters
    ----------
    n_features : int
        ``m``, projections of each base estimator.
    n_lambda : int
        ``n``, projections of the coefficient estimator.
    kernel, lengthscale, orthogonal, shared_projection, random_state
        As in :class:`AngularHybridRF`.
    lambda_bandwidth : float
        ``c`` above (in lengthscale-scaled units).
    lambda_features : {"positive", "trig"}
    """

    _has_a_block = False

    def __init__(self, n_features: int = 64, n_lambda: int = 8, kernel: str = "softmax",
                 lengthscale: float = 1.0, orthogonal=False, shared_projection: bool = True,
                 random_state=None, lambda_bandwidth: float = 1.0,
                 lambda_features: str = "positive"):
        super().__init__(n_features, n_lambda, kernel, lengthscale, orthogonal,
                         shared_projection, random_state)
        self.lambda_bandwidth = lambda_bandwidth
        self.lambda_features = lambda_features

    def _validate_params(self):
        super()._validate_params()
        from .._backend import validate_positive_float

        validate_positive_float(self.lambda_bandwidth, "lambda_bandwidth")
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
        U = X / self.lambda_bandwidth if side == "x" else X / (-self.lambda_bandwidth)
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
        return xp.exp(-z2 / (2.0 * self.lambda_bandwidth**2))

    @staticmethod
    def _z2(X, Y, xp):
        nx, ny = _sq_norms(xp, X)[:, None], _sq_norms(xp, Y)[None, :]
        return xp.clip(nx + ny + 2.0 * (X @ xp.matrix_transpose(Y)), min=0.0)

    def _lambda_moments(self, X, Y, xp):
        c2 = self.lambda_bandwidth**2
        z2 = self._z2(X, Y, xp) / c2  # |u - v|^2 with u = x/c, v = -y/c
        lam = xp.exp(-0.5 * z2)
        if self.lambda_features == "trig":
            # Var cos(tau^T (u - v)) = (1 - e^{-|u-v|^2})^2 / 2
            v1 = 0.5 * xp.expm1(-z2) ** 2
        else:
            # antithetic positive: K_g^2 (cosh |u+v|^2 - 1), u + v = (x - y)/c
            nx, ny = _sq_norms(xp, X)[:, None], _sq_norms(xp, Y)[None, :]
            d2 = xp.clip(nx + ny - 2.0 * (X @ xp.matrix_transpose(Y)), min=0.0) / c2
            # lam^2 (cosh(d2) - 1) = (e^{d2 - z2} + e^{-d2 - z2})/2 - e^{-z2}, computed stably
            v1 = 0.5 * xp.exp(d2 - z2) * xp.expm1(-d2) ** 2
        var = v1 / self.n_lambda
        return lam * lam + var, (1.0 - lam) ** 2 + var, lam - lam * lam - var


class NormalizedGaussianHybridRF(_BipolarHybrid):
    """Normalised bipolar Gaussian hybrid (App. F, eq. 67-70).

    For inputs of common norm ``r`` (``radius``), the coefficient
    ``lambda(x, y) = (1 - exp(-sigma^2 |x - y|^2 / 2)) / rho``, ``rho = 1 - exp(-2 sigma^2 r^2)``,
    is 0 at ``theta = 0`` and 1 at ``theta = pi``. It is estimated by
    ``lambda_hat = 1/rho - (1/(n rho)) sum_i cos(tau_i^T (x - y))`` with
    ``tau_i ~ N(0, sigma^2 I)`` (Erratum 6), i.e. ``a = 1/rho``, ``c = -1/rho``,
    ``u = v = n^{-1/2} [sin(Tx); cos(Tx)]``. Output dimension ``4m(2n + 1)``.

    The estimator is unbiased for any inputs and any ``radius``; ``radius`` only fixes the
    constant ``rho`` (App. F assumes ``|x| = |y| = r``). Zero variance holds only at
    ``theta = 0`` (trig-estimated ``lambda``; ``lambda_hat = 0`` there).

    Parameters
    ----------
    n_features, n_lambda, kernel, lengthscale, orthogonal, shared_projection, random_state
        As in :class:`AngularHybridRF`.
    sigma : float
        Scale of ``tau_i``.
    radius : float, optional
        ``r``; by default the root-mean-square norm of the (lengthscale-scaled) rows of
        ``X`` and ``Y`` at fit (attribute ``radius_``).
    """

    def __init__(self, n_features: int = 64, n_lambda: int = 8, kernel: str = "softmax",
                 lengthscale: float = 1.0, orthogonal=False, shared_projection: bool = True,
                 random_state=None, sigma: float = 1.0, radius: float | None = None):
        super().__init__(n_features, n_lambda, kernel, lengthscale, orthogonal,
                         shared_projection, random_state)
        self.sigma = sigma
        self.radius = radius

    def _validate_params(self):
        super()._validate_params()
        from .._backend import validate_positive_float

        validate_positive_float(self.sigma, "sigma")
        if self.radius is not None:
            validate_positive_float(self.radius, "radius")

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
            sq = np.concatenate([np.sum(X * X, axis=1), np.sum(Y * Y, axis=1)])
            r = float(np.sqrt(sq.mean()))
            if not r > 0:
                raise ValueError(
                    "radius could not be fitted: X and Y are all zero; pass radius=."
                )
        else:
            r = float(self.radius) / self.lengthscale
        self.radius_ = r
        self.rho_ = float(-np.expm1(-2.0 * self.sigma**2 * r * r))
        if not self.rho_ > 0:
            raise ValueError(f"radius * sigma is too small (rho = {self.rho_}); raise sigma.")
        self.lambda_projection_ = self.sigma * gaussian_projection(
            self.n_lambda, X.shape[1], rng)  # (n, d), rows ~ N(0, sigma^2 I)

    def _lambda_features(self, X, xp, side):
        p = X @ self._param("T_T", xp, X)  # (n_pts, n)
        base = xp.concat([xp.sin(p), xp.cos(p)], axis=1) / math.sqrt(self.n_lambda)
        return base, xp.zeros(X.shape[0], dtype=X.dtype, device=device(X))

    def _d2(self, X, Y, xp):
        nx, ny = _sq_norms(xp, X)[:, None], _sq_norms(xp, Y)[None, :]
        return xp.clip(nx + ny - 2.0 * (X @ xp.matrix_transpose(Y)), min=0.0)

    def _lambda_exact(self, X, Y, xp):
        s2 = self.sigma**2
        return -xp.expm1(-0.5 * s2 * self._d2(X, Y, xp)) / self.rho_

    def _lambda_moments(self, X, Y, xp):
        # Thm F.1: E lambda_hat^2 = lambda^2 + (2 rho^2 n)^{-1} (1 - e^{-sigma^2 |D|^2})^2
        s2 = self.sigma**2
        d2 = self._d2(X, Y, xp)
        lam = -xp.expm1(-0.5 * s2 * d2) / self.rho_
        var = xp.expm1(-s2 * d2) ** 2 / (2.0 * self.rho_**2 * self.n_lambda)
        return lam * lam + var, (1.0 - lam) ** 2 + var, lam - lam * lam - var
