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

Contents:

* :class:`AngularHybridRF` (eq. 12, 19), :class:`GaussianHybridRF` (eq. 20),
  :class:`NormalizedGaussianHybridRF` (App. F): bipolar hybrids with
  ``approx_components`` (``lambda_hat``, ``SM^{++}``, ``SM^{trig}``), ``exact_lambda`` and
  the Thm 3.1 MSE as ``variance``;
* :class:`ComplexExponentialRF` (Lemma 2.4) for a given ``A``, :func:`optimal_diagonal_A`
  (eq. 85-88) and :func:`diagonal_A_loss` (eq. 21);
* :class:`ClusteredHybridRF` (Sec. 2.4, App. H): k-means, per-pair ``A``, zero-one and
  Gaussian mixtures, ``redraw`` for cheap Monte Carlo repetitions;
* the cost-matching rule :func:`matched_n_features` with :func:`regular_feature_flops`
  and :func:`hybrid_feature_flops`.

Projections: every class takes ``orthogonal`` (``False``/``True`` or a sampler name of
:data:`kernelkit.features.sampling.SAMPLERS`: "iid", "orthogonal", "sorf", "hadamard",
"halton") for its base projections ``W``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import (
    check_random_state,
    device,
    is_numpy_namespace,
    validate_positive_float,
    validate_positive_int,
)
from ._base import FeatureMap, _detach
from ._base import _namespace_of as xp_of
from .sampling import draw_projection, gaussian_projection

__all__ = [
    "AngularHybridRF",
    "ClusteredHybridRF",
    "ComplexExponentialRF",
    "GaussianHybridRF",
    "NormalizedGaussianHybridRF",
    "diagonal_A_loss",
    "hybrid_feature_flops",
    "matched_n_features",
    "optimal_diagonal_A",
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


def hybrid_feature_flops(
    n_features: int, n_lambda: int, d: int, *, shared_projection: bool = True
) -> int:
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


def matched_n_features(
    n_features: int,
    d: int,
    n_lambda: int = 8,
    *,
    shared_projection: bool = True,
    rule: str = "flops",
) -> int:
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


def _weighted_exp(xp, w, log_v):
    """``w * exp(log_v)`` with ``0 * inf = 0`` (an exact zero weight wins over overflow)."""
    zero = w == 0
    w_safe = xp.where(zero, xp.ones_like(w), w)
    return xp.where(zero, xp.zeros_like(w), w_safe * xp.exp(log_v))


def _shifted_sum(xp, terms):
    """``sum_k w_k exp(l_k)`` as ``(inner, shift)`` with ``sum = inner * exp(shift)``.

    terms : list of ``(w_k, l_k)``, arrays broadcastable to one shape (``w_k`` may be a
    float). ``shift = max_k l_k`` (finite, elementwise), so every ``exp(l_k - shift) <= 1``
    and ``inner`` never overflows even where the individual terms do; a zero weight gives
    an exact zero term (no ``0 * inf``). Combine with :func:`_combine` (signed results) or
    :func:`_scaled_nonneg` (non-negative ones).
    """
    live = []  # a zero-weight term must not set the shift (its exp could swamp the rest)
    for w, lv in terms:
        if isinstance(w, numbers.Real):
            if w != 0:
                live.append((w, lv))
        else:
            live.append((w, xp.where(w == 0, xp.full_like(lv, -math.inf), lv)))
    if not live:
        zero = xp.zeros_like(terms[0][1])
        return zero, zero
    shift = live[0][1]
    for _, lv in live[1:]:
        shift = xp.maximum(shift, lv)
    shift = xp.where(xp.isfinite(shift), shift, xp.zeros_like(shift))
    inner = 0.0
    for w, lv in live:
        e = xp.exp(lv - shift)  # 0 where lv = -inf (zero weight)
        inner = inner + (
            w * e if isinstance(w, numbers.Real) else xp.where(w == 0, xp.zeros_like(e), w * e)
        )
    return inner, shift


def _scaled_nonneg(xp, inner, log_scale):
    """``max(inner, 0) * exp(log_scale)``: 0 where ``inner <= 0`` (even if the scale
    overflows), ``inf`` only where the product itself exceeds the floating-point range."""
    inner = xp.clip(inner, min=0.0)
    pos = inner > 0
    safe = xp.where(pos, inner, xp.ones_like(inner))
    if is_numpy_namespace(xp):
        with np.errstate(over="ignore"):  # inf is the answer where the MSE overflows
            return np.where(pos, np.exp(np.log(safe) + log_scale), 0.0).astype(inner.dtype)
    return xp.where(pos, xp.exp(xp.log(safe) + log_scale), xp.zeros_like(inner))


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

    def __init__(
        self,
        n_features: int = 64,
        n_lambda: int = 8,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        orthogonal=False,
        shared_projection: bool = True,
        random_state=None,
    ):
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
            self.projection_trig_ = draw_projection(
                self.n_features, X.shape[1], rng, self.orthogonal
            )  # (m, d)
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
        blocks += [
            (tb, tl, c1a),
            (_outer(xp, ub, pb), ul + pl, cp),
            (_outer(xp, ub, tb), ul + tl, ct),
        ]
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
        lam, (dp, sp), (dt, st) = self._scaled_components(X, Y)
        return lam, _combine(xp_of(lam), dp, sp), _combine(xp_of(lam), dt, st)

    def _scaled_components(self, X, Y):
        """``lambda_hat (n, m)`` and the two base estimates as ``(dot, log_scale)`` pairs,
        each ``(n, m)``, with ``estimate = dot * exp(log_scale)``."""
        Xs, Ys, xp = self._checked_pair(X, Y)
        extra = 0.0
        if self.alpha != 0.0:
            extra = self.alpha * (_sq_norms(xp, Xs)[:, None] + _sq_norms(xp, Ys)[None, :])
        out = []
        for parts in (self._positive_parts, self._trig_parts):
            bx, lx = parts(Xs, xp)  # (n, 2m), (n,)
            by, ly = parts(Ys, xp)
            out.append((bx @ xp.matrix_transpose(by), lx[:, None] + ly[None, :] + extra))
        ux, ulx = self._lambda_features(Xs, xp, "x")
        uy, uly = self._lambda_features(Ys, xp, "y")
        uv = _combine(xp, ux @ xp.matrix_transpose(uy), ulx[:, None] + uly[None, :])
        lam = self._lambda_a + self._lambda_c * uv  # (n, m)
        return lam, out[0], out[1]

    def approx_kernel(self, X, Y=None):
        """Unbiased hybrid estimate of the kernel matrix, shape (n, m).

        ``lambda_hat SM^{++} + (1 - lambda_hat) SM^{trig}`` (eq. 8-11), equal to
        ``transform(X) @ transform_y(Y).T`` (to rounding), computed in
        ``O(n m (m_f + n_l))`` from the components instead of ``O(n m m_f n_l)``. The two
        base estimates are mixed in log space (common shift of their row scales), so the
        result is finite wherever the estimate itself is representable, and an exact
        ``lambda_hat = 0`` or ``1`` drops the other estimator entirely (never ``0 * inf``).
        """
        lam, (dp, sp), (dt, st) = self._scaled_components(X, Y)
        xp = xp_of(lam)
        if dp.shape[0] == 0 or dp.shape[1] == 0:
            return lam * dp
        inner, shift = _shifted_sum(xp, [(lam * dp, sp), ((1.0 - lam) * dt, st)])
        return _combine(xp, inner, shift)

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
        terms = [(e2, log_pp), (f2, log_tr)]
        if self.shared_projection:
            # (2/m) SM^2 (1 - cos(|x|^2 - |y|^2)) = (4/m) SM^2 sin^2((|x|^2 - |y|^2)/2)
            s = xp.sin(0.5 * (nx - ny))
            terms.append((-(4.0 / m) * g * s * s, 2.0 * xy + ka))
        # log-space sum: finite wherever the MSE is representable (no inf - inf, 0 * inf)
        inner, shift = _shifted_sum(xp, terms)
        return _scaled_nonneg(xp, inner, shift)

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
        return s / math.sqrt(self.n_lambda), xp.zeros(X.shape[0], dtype=X.dtype, device=device(X))

    def _angle_t(self, X, Y, xp):
        """``(t = theta / pi (n, m), degenerate mask (n, m))``; degenerate: a zero input."""
        nx = xp.sqrt(_sq_norms(xp, X))[:, None]
        ny = xp.sqrt(_sq_norms(xp, Y))[None, :]
        denom = nx * ny
        zero = denom == 0
        safe = xp.where(zero, xp.ones_like(denom), denom)
        cos = xp.clip((X @ xp.matrix_transpose(Y)) / safe, min=-1.0, max=1.0)
        # Gram-based angles resolve theta only to ~sqrt(eps): snap cos within rounding of
        # +-1 (|1 -+ cos| <= 4 eps) to exactly parallel / antiparallel, where the MSE is 0
        # for equal norms (theta ~ 1e-8 would otherwise give a spurious MSE ~ 1e-8 SM^2)
        tol = 4.0 * float(xp.finfo(cos.dtype).eps)
        cos = xp.where(cos >= 1.0 - tol, xp.ones_like(cos), cos)
        cos = xp.where(cos <= -1.0 + tol, -xp.ones_like(cos), cos)
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

    def __init__(
        self,
        n_features: int = 64,
        n_lambda: int = 8,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        orthogonal=False,
        shared_projection: bool = True,
        random_state=None,
        lambda_bandwidth: float = 1.0,
        lambda_features: str = "positive",
    ):
        super().__init__(
            n_features, n_lambda, kernel, lengthscale, orthogonal, shared_projection, random_state
        )
        self.lambda_bandwidth = lambda_bandwidth
        self.lambda_features = lambda_features

    def _validate_params(self):
        super()._validate_params()
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

    def __init__(
        self,
        n_features: int = 64,
        n_lambda: int = 8,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        orthogonal=False,
        shared_projection: bool = True,
        random_state=None,
        sigma: float = 1.0,
        radius: float | None = None,
    ):
        super().__init__(
            n_features, n_lambda, kernel, lengthscale, orthogonal, shared_projection, random_state
        )
        self.sigma = sigma
        self.radius = radius

    def _validate_params(self):
        super()._validate_params()
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
                raise ValueError("radius could not be fitted: X and Y are all zero; pass radius=.")
        else:
            r = float(self.radius) / self.lengthscale
        self.radius_ = r
        self.rho_ = float(-np.expm1(-2.0 * self.sigma**2 * r * r))
        if not self.rho_ > 0:
            raise ValueError(f"radius * sigma is too small (rho = {self.rho_}); raise sigma.")
        self.lambda_projection_ = self.sigma * gaussian_projection(
            self.n_lambda, X.shape[1], rng
        )  # (n, d), rows ~ N(0, sigma^2 I)

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


# ====================================================================== complex exponential
def optimal_diagonal_A(x_center, y_center, *, complex: bool = False, eps: float = 1e-3):
    """Diagonal ``A`` minimising ``l(A) = |A r_x + A^{-T} r_y|^2`` for a pair of centres.

    The complex exponential estimator with this ``A`` is exact at ``(x, y) = (r_x, r_y)``
    when ``l(A) = 0`` (eq. 17, 21). Per coordinate ``k`` (``r_x`` a query centre, ``r_y`` a
    key centre):

    * ``complex=False`` (eq. 88, used in the paper's experiments): ``a_k = sqrt|r_y,k / r_x,k|``
      (exact where the signs differ; residual ``l = 4 sum_{k: r_x,k r_y,k > 0} r_x,k r_y,k``);
    * ``complex=True`` (eq. 85-87): ``a_k = i sqrt(r_y,k / r_x,k)`` where
      ``r_x,k r_y,k > 0`` and ``a_k = sqrt(-r_y,k / r_x,k)`` where ``< 0``, so ``l = 0``.

    Degenerate coordinates: both zero gives ``a_k = 1``; ``r_x,k = 0 != r_y,k`` a large and
    ``r_y,k = 0 != r_x,k`` a small real ``a_k``. Every ``|a_k|`` is clipped to
    ``[eps, 1/eps]`` so that ``A`` stays invertible and well conditioned (condition number
    at most ``1/eps^2``).

    Parameters
    ----------
    x_center, y_center : array_like, shape (d,) or (..., d)
        Broadcastable centres (e.g. (n_q, 1, d) and (1, n_k, d) for all pairs).
    complex : bool
    eps : float in (0, 1)

    Returns
    -------
    ndarray, shape (..., d)
        Diagonal of ``A``; float64, or complex128 for ``complex=True``.
    """
    rx = np.asarray(x_center, dtype=np.float64)
    ry = np.asarray(y_center, dtype=np.float64)
    if rx.ndim == 0 or ry.ndim == 0 or rx.shape[-1] != ry.shape[-1]:
        raise ValueError(
            "x_center and y_center must be vectors of the same length d, got shapes "
            f"{rx.shape} and {ry.shape}."
        )
    if not (np.all(np.isfinite(rx)) and np.all(np.isfinite(ry))):
        raise ValueError("x_center and y_center must be finite.")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps < 1:
        raise ValueError(f"eps must be a float in (0, 1), got {eps!r}.")
    rx, ry = np.broadcast_arrays(rx, ry)
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.sqrt(np.abs(ry) / np.abs(rx))  # inf where r_x = 0, nan where both 0
    mag = np.where((rx == 0) & (ry == 0), 1.0, mag)
    mag = np.clip(np.nan_to_num(mag, nan=1.0, posinf=1.0 / eps), eps, 1.0 / eps)
    if not complex:
        return mag
    return np.where(rx * ry > 0, 1j * mag, mag + 0j)


def diagonal_A_loss(A_diag, x_center, y_center):
    """``l(A) = sum_k |a_k r_x,k + r_y,k / a_k|^2`` (eq. 21) for a diagonal ``A``, shape (...)."""
    a = np.asarray(A_diag)
    rx = np.asarray(x_center, dtype=np.float64)
    ry = np.asarray(y_center, dtype=np.float64)
    return np.sum(np.abs(a * rx + ry / a) ** 2, axis=-1)


def _validate_matrix_A(A, d, max_condition):
    """``A`` as a (d, d) float64 / complex128 array, checked finite and well conditioned."""
    if A is None:
        return np.eye(d)
    try:
        A = np.asarray(A)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"A could not be converted to an array: {exc}") from exc
    if A.dtype.kind not in "biufc":
        raise TypeError(f"A must be numeric, got dtype {A.dtype}.")
    A = A.astype(np.complex128 if A.dtype.kind == "c" else np.float64)
    if A.dtype.kind == "c" and not np.any(A.imag):
        A = A.real.copy()
    if A.shape == (d,):
        A = np.diag(A)
    if A.shape != (d, d):
        raise ValueError(
            f"A must have shape ({d},) (a diagonal) or ({d}, {d}) for d = {d} input "
            f"features, got {A.shape}."
        )
    if not np.all(np.isfinite(A)):
        raise ValueError("A contains NaN or infinity.")
    cond = np.linalg.cond(A) if np.any(A) else np.inf
    if not np.isfinite(cond) or cond > max_condition:
        raise ValueError(
            f"A is singular or ill-conditioned (condition number {cond:.3g} > "
            f"max_condition = {max_condition:.3g}); the estimator needs (A^T)^-1."
        )
    return A


class ComplexExponentialRF(FeatureMap):
    """Complex exponential random features for a given invertible ``A`` (Lemma 2.4, eq. 14-18).

    With ``B = (A^T)^{-1}`` (plain transpose, ``A`` may be complex) and the bilinear square
    ``u^2 = sum_k u_k^2``,

        Psi_M(u) = m^{-1/2} exp(-(M u)^2 / 2) exp(W M u),    SM_hat = Psi_A(x)^T Psi_B(y),

    is unbiased for ``SM(x, y) = exp(x^T y)`` since ``E exp(w^T z) = exp(z^2 / 2)`` for
    complex ``z`` and ``(Ax)^T (By) = x^T y``. It has zero variance iff ``A x + B y = 0``,
    i.e. at ``x = -A^{-1} A^{-T} y`` (eq. 17-18). ``A = I`` gives the one-sided positive
    features ``SM^+``; ``A = i I`` gives trig features (sin/cos pairs).

    ``A`` acts on lengthscale-scaled inputs ``x / lengthscale``.

    Features (real, asymmetric; ``m = n_features``):

    * real ``A``: ``Psi_A(x)`` and ``Psi_B(y)``, positive, ``output_dim = m``;
    * complex ``A``: ``[Re Psi_A(x); Im Psi_A(x)]`` and ``[Re Psi_B(y); -Im Psi_B(y)]``,
      ``output_dim = 2m``, whose dot product is ``Re SM_hat`` (still unbiased).

    Parameters
    ----------
    n_features : int
        ``m``, number of projections ``w_i`` (rows of ``W``).
    kernel : {"softmax", "gaussian"}
    lengthscale : float
    orthogonal : bool or str
        Sampler of ``W`` (see :func:`~kernelkit.features.sampling.draw_projection`).
    random_state : None, int or numpy.random.Generator
    A : array_like, shape (d,) or (d, d), real or complex, optional
        The matrix (a vector is a diagonal); default identity. Must be invertible with
        condition number at most ``max_condition``. See :func:`optimal_diagonal_A`.
    max_condition : float
        Largest accepted condition number of ``A``.

    Notes
    -----
    :meth:`variance` (derived from Lemma 2.4): with ``a = Ax``, ``b = By``, one projection
    gives ``g = exp(-(a^2 + b^2)/2 + w^T (a + b))`` and
    ``E (Re g)^2 = (Re E g^2 + E |g|^2) / 2`` with ``E g^2 = exp(a^2 + b^2 + 4 a^T b)`` and
    ``E |g|^2 = exp(|a|^2 + |b|^2 + 4 Re a . Re b)``; ``MSE = (E (Re g)^2 - SM^2) / m``. For real
    ``A`` this is ``SM^2 (exp(|Ax + By|^2) - 1) / m``.
    """

    symmetric = False

    def __init__(
        self,
        n_features: int = 256,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        orthogonal=False,
        random_state=None,
        A=None,
        max_condition: float = 1e8,
    ):
        super().__init__(n_features, kernel, lengthscale, orthogonal, random_state)
        self.A = A
        self.max_condition = max_condition

    @property
    def is_complex(self) -> bool:
        """Whether ``A`` has a non-zero imaginary part (then ``output_dim = 2 m``)."""
        A = getattr(self, "A_", None)
        if A is None:
            A = np.asarray(self.A) if self.A is not None else np.zeros(1)
        return bool(np.iscomplexobj(A) and np.any(np.imag(A)))

    @property
    def positive(self) -> bool:  # type: ignore[override]
        return not self.is_complex

    @property
    def output_dim(self) -> int:
        return int(self.n_features) * (2 if self.is_complex else 1)

    def _validate_params(self):
        super()._validate_params()
        validate_positive_float(self.max_condition, "max_condition")

    def _fit_parameters(self, X, Y, rng):
        d = X.shape[1]
        self.A_ = _validate_matrix_A(self.A, d, float(self.max_condition))  # (d, d)
        self.B_ = np.linalg.inv(self.A_).T  # (d, d), B = (A^T)^{-1}

    def _build(self):
        super()._build()
        W = self.projection_  # (m, d)
        consts = {}
        for side, M in (("x", self.A_), ("y", self.B_)):
            Mr, Mi = np.real(M), np.imag(M)
            # logits: x -> W M x = X @ (W M)^T, real and imaginary parts
            consts["Mr_T_" + side] = np.ascontiguousarray(Mr.T)  # (d, d)
            consts["WMr_T_" + side] = np.ascontiguousarray((W @ Mr).T)  # (d, m)
            if self.is_complex:
                consts["Mi_T_" + side] = np.ascontiguousarray(Mi.T)
                consts["WMi_T_" + side] = np.ascontiguousarray((W @ Mi).T)
        self._consts = consts

    def _transformed(self, X, xp, side):
        """``(Re M x, Im M x)`` (n, d) each; ``Im`` is None for real ``A``."""
        ar = X @ self._param("Mr_T_" + side, xp, X)
        ai = X @ self._param("Mi_T_" + side, xp, X) if self.is_complex else None
        return ar, ai

    def _scaled_features(self, X, xp, side):
        ar, ai = self._transformed(X, xp, side)
        re = X @ self._param("WMr_T_" + side, xp, X)  # (n, m) Re(w^T M x)
        half_sq = 0.5 * _sq_norms(xp, ar)  # Re (Mx)^2 / 2 = (|ar|^2 - |ai|^2) / 2
        if ai is not None:
            half_sq = half_sq - 0.5 * _sq_norms(xp, ai)
        row = -half_sq - 0.5 * math.log(self.n_features) + self.alpha * _sq_norms(xp, X)
        if re.shape[0] == 0:
            base = re if ai is None else xp.concat([re, re], axis=1)
            return base, row
        row_max = _detach(xp.max(re, axis=1))  # (n,)
        mod = xp.exp(re - row_max[:, None])  # (n, m) |Psi| / exp(scale)
        if ai is None:
            return mod, row_max + row
        im = X @ self._param("WMi_T_" + side, xp, X) - _sum_prod(xp, ar, ai)[:, None]
        sgn = 1.0 if side == "x" else -1.0  # y side: [Re; -Im]
        return xp.concat([mod * xp.cos(im), sgn * mod * xp.sin(im)], axis=1), row_max + row

    def variance(self, X, Y=None):
        """Analytic MSE of :meth:`approx_kernel` (the real part), shape (n, m).

        See the class notes; exact for i.i.d. projections (for other samplers it is the
        i.i.d. value). Zero where ``A x + B y = 0``.
        """
        Y = X if Y is None else Y
        Xs, xp = self._check_X(X, "X")
        Ys, _ = self._check_X(Y, "Y")
        ar, ai = self._transformed(Xs, xp, "x")
        br, bi = self._transformed(Ys, xp, "y")
        xy = Xs @ xp.matrix_transpose(Ys)  # (n, m)
        rr = ar @ xp.matrix_transpose(br)  # Re a . Re b
        log_k2 = 2.0 * xy - math.log(self.n_features)  # log(K^2 / m)
        if self.alpha != 0.0:
            log_k2 = log_k2 + 2.0 * self.alpha * (
                _sq_norms(xp, Xs)[:, None] + _sq_norms(xp, Ys)[None, :]
            )
        if ai is None:
            # |a + b|^2 = |a|^2 + |b|^2 + 2 a.b;  MSE = K^2 expm1(c2) / m, in log space
            c2 = xp.clip(
                _sq_norms(xp, ar)[:, None] + _sq_norms(xp, br)[None, :] + 2.0 * rr, min=0.0
            )
            return _scaled_nonneg(xp, -xp.expm1(-c2), c2 + log_k2)
        na_r, na_i = _sq_norms(xp, ar)[:, None], _sq_norms(xp, ai)[:, None]
        nb_r, nb_i = _sq_norms(xp, br)[None, :], _sq_norms(xp, bi)[None, :]
        ii = ai @ xp.matrix_transpose(bi)
        # log|E g^2 / SM^2| = Re(a^2 + b^2 + 4ab) - 2xy, and the phase q of E g^2
        p = na_r - na_i + nb_r - nb_i + 4.0 * (rr - ii) - 2.0 * xy
        q = 2.0 * (_sum_prod(xp, ar, ai)[:, None] + _sum_prod(xp, br, bi)[None, :]) + 4.0 * (
            ar @ xp.matrix_transpose(bi) + ai @ xp.matrix_transpose(br)
        )
        r = xp.clip(na_r + na_i + nb_r + nb_i + 4.0 * rr - 2.0 * xy, min=0.0)  # log E|g|^2/SM^2
        s = xp.sin(0.5 * q)
        # rel = m MSE / SM^2 = (e^p cos q + e^r) / 2 - 1 (p <= r, r >= 0); we need
        # rel e^{-r}: for small r from the cancellation-free expm1 form, for r >= 1 from
        # the bounded form (e^{p-r} cos q + 1)/2 - e^{-r}, so that nothing overflows
        pc, rc = xp.clip(p, max=1.0), xp.clip(r, max=1.0)
        small = (0.5 * (xp.expm1(pc) * xp.cos(q) - 2.0 * s * s) + 0.5 * xp.expm1(rc)) * xp.exp(-rc)
        large = 0.5 * xp.exp(p - r) * xp.cos(q) + 0.5 - xp.exp(-r)
        inner = xp.where(r < 1.0, small, large)
        return _scaled_nonneg(xp, inner, r + log_k2)

    def _log_second_moment(self, X, Y, xp):
        raise NotImplementedError("ComplexExponentialRF: use variance().")

    def log_relative_variance(self, X, Y=None):
        raise NotImplementedError("ComplexExponentialRF: use variance().")

    def log_objective(self, X, Y=None):
        raise NotImplementedError("ComplexExponentialRF has no FAVOR# fitting objective.")


def _sq_norms3(xp, a):
    return xp.sum(a * a, axis=-1)


def _sum_prod(xp, a, b):
    return xp.sum(a * b, axis=1)


# ====================================================================== clustered hybrid
#: elements of the largest temporary of ClusteredHybridRF.variance per row block
_VARIANCE_BLOCK_ELEMENTS = 1 << 22


class ClusteredHybridRF(FeatureMap):
    """Clustered hybrid random features (Sec. 2.4, App. H, Def. H.1 / H.2).

    k-means (scikit-learn) on the queries ``X`` (``n_q`` centres ``r_i``) and on the keys
    ``Y`` (``n_k`` centres ``r_j``); for every pair ``(i, j)`` a real diagonal
    ``A^{ij} = optimal_diagonal_A(r_i, r_j)`` (eq. 88) and the complex exponential base
    estimator ``SM^{ij} = Psi_{A^{ij}}(x)^T Psi_{(A^{ij})^{-1}}(y)`` (eq. 90-92; positive
    features), all pairs sharing one ``W`` (m x d). The mixtures:

    * ``mixture="zero_one"`` (Def. H.2, the paper's experiments):
      ``lambda^{ij} = 1[x in X_i] 1[y in Y_j]`` (nearest centre), so
      ``Phi_1(x) = concat_ij 1[x in X_i] Psi_{A^{ij}}(x)`` and
      ``Phi_2(y) = concat_ij 1[y in Y_j] Psi_{(A^{ij})^{-1}}(y)``,
      ``output_dim = n_q n_k m``, positive features, exact at the centres when ``l(A) = 0``.
    * ``mixture="gaussian"`` (Def. H.1): ``lambda^{ij} = exp(-|A x + A^{-1} y|^2 / (2 tau^2))``
      estimated with ``n = n_lambda`` positive features on a fresh ``W'`` (eq. 95-96),
      ``x``: ``n^{-1/2} exp(-|Ax|^2/tau^2 + W'Ax/tau)``, ``y``:
      ``n^{-1/2} exp(-|A^{-1}y|^2/tau^2 - W'A^{-1}y/tau)``, and a default estimator
      ``SM^0`` (``default_estimator``, sharing ``W``) with ``lambda^0 = 1 - sum lambda^{ij}``
      (eq. 97-98): ``SM_hat = SM^0 + sum_ij lambda_hat^{ij} (SM^{ij} - SM^0)``. Real form
      ``Phi_1 = [phi0(x); concat_p rho_p(x) (x) Psi_p(x); concat_p rho_p(x) (x) phi0(x)]``,
      ``Phi_2 = [phi0(y); concat_p rho'_p(y) (x) Psi'_p(y); -concat_p rho'_p(y) (x) phi0(y)]``,
      ``output_dim = 2m + 3 P n m`` with ``P = n_q n_k``.

    Both mixtures are unbiased for every input (the mixture weights are independent of
    the base estimators); the clustering only decides where the variance is small.

    Parameters
    ----------
    n_features : int
        ``m``, projections of each base estimator (shared by all pairs).
    kernel, lengthscale, orthogonal, random_state
        As in :class:`AngularHybridRF` (``orthogonal`` selects the sampler of ``W``).
    n_clusters : int or (int, int)
        ``n_q`` query and ``n_k`` key clusters (one int: both). Each must not exceed the
        number of distinct points it clusters.
    mixture : {"zero_one", "gaussian"}
    n_lambda : int
        ``n``, projections of every ``lambda^{ij}`` estimator (Gaussian mixture only).
    tau : float
        Bandwidth of the Gaussian mixture weights.
    default_estimator : {"hyperbolic", "trig"}
        ``SM^0`` of the Gaussian mixture: antithetic FAVOR+ (default, as suggested in
        Sec. 2.4) or sin/cos trig features, ``2m`` features either way.
    eps : float
        Clip of the diagonal entries of ``A`` to ``[eps, 1/eps]`` (:func:`optimal_diagonal_A`).
    n_init : int
        k-means restarts.

    Attributes
    ----------
    centers_x_ : ndarray (n_q, d), centers_y_ : ndarray (n_k, d)
        k-means centres (lengthscale-scaled).
    A_ : ndarray (n_q, n_k, d)
        Diagonals of ``A^{ij}``.
    projection_ : ndarray (m, d); lambda_projection_ : ndarray (n, d) (Gaussian mixture).
    """

    symmetric = False

    def __init__(
        self,
        n_features: int = 64,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        orthogonal=False,
        random_state=None,
        n_clusters=2,
        mixture: str = "zero_one",
        n_lambda: int = 8,
        tau: float = 1.0,
        default_estimator: str = "hyperbolic",
        eps: float = 1e-3,
        n_init: int = 4,
    ):
        super().__init__(n_features, kernel, lengthscale, orthogonal, random_state)
        self.n_clusters = n_clusters
        self.mixture = mixture
        self.n_lambda = n_lambda
        self.tau = tau
        self.default_estimator = default_estimator
        self.eps = eps
        self.n_init = n_init

    # -------------------------------------------------------------- parameters
    @property
    def positive(self) -> bool:  # type: ignore[override]
        return self.mixture == "zero_one"

    def _cluster_counts(self):
        nc = self.n_clusters
        if isinstance(nc, tuple | list):
            if len(nc) != 2:
                raise ValueError(f"n_clusters must be an int or a pair (n_q, n_k), got {nc!r}.")
            return (
                validate_positive_int(nc[0], "n_clusters[0]"),
                validate_positive_int(nc[1], "n_clusters[1]"),
            )
        k = validate_positive_int(nc, "n_clusters")
        return k, k

    def _validate_params(self):
        super()._validate_params()
        self._cluster_counts()
        if self.mixture not in ("zero_one", "gaussian"):
            raise ValueError(f"mixture must be 'zero_one' or 'gaussian', got {self.mixture!r}.")
        validate_positive_int(self.n_lambda, "n_lambda", maximum=2**20)
        validate_positive_float(self.tau, "tau")
        if self.default_estimator not in ("hyperbolic", "trig"):
            raise ValueError(
                f"default_estimator must be 'hyperbolic' or 'trig', got {self.default_estimator!r}."
            )
        if (
            isinstance(self.eps, bool)
            or not isinstance(self.eps, numbers.Real)
            or not 0 < self.eps < 1
        ):
            raise ValueError(f"eps must be a float in (0, 1), got {self.eps!r}.")
        validate_positive_int(self.n_init, "n_init")

    @property
    def output_dim(self) -> int:
        n_q, n_k = self._cluster_counts()
        m, P = int(self.n_features), n_q * n_k
        if self.mixture == "zero_one":
            return P * m
        return 2 * m + 3 * P * int(self.n_lambda) * m

    def _kmeans(self, Z, k, name, seed):
        from sklearn.cluster import KMeans

        n_distinct = np.unique(Z, axis=0).shape[0]
        if k > n_distinct:
            raise ValueError(
                f"n_clusters={k} for {name} exceeds the number of distinct {name} points "
                f"({n_distinct}); lower n_clusters."
            )
        km = KMeans(n_clusters=k, n_init=self.n_init, random_state=seed).fit(Z)
        return km.cluster_centers_  # (k, d)

    def _fit_parameters(self, X, Y, rng):
        n_q, n_k = self._cluster_counts()
        seed = int(rng.integers(0, 2**31 - 1))
        self.centers_x_ = self._kmeans(X, n_q, "X", seed)  # (n_q, d)
        self.centers_y_ = self._kmeans(Y, n_k, "Y", seed + 1)  # (n_k, d)
        self.A_ = optimal_diagonal_A(
            self.centers_x_[:, None, :], self.centers_y_[None, :, :], eps=float(self.eps)
        )  # (n_q, n_k, d)
        if self.mixture == "gaussian":
            self.lambda_projection_ = gaussian_projection(self.n_lambda, X.shape[1], rng)

    def redraw(self, random_state=None):
        """Draw new random projections (``W``, and ``W'`` of the Gaussian mixture), keeping
        the fitted clusters and matrices ``A^{ij}``; returns ``self``.

        Cheap repetitions for Monte Carlo (k-means is not rerun).
        """
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "A_")
        rng = check_random_state(random_state)
        d = self.A_.shape[-1]
        self.projection_ = draw_projection(self.n_features, d, rng, self.orthogonal)
        if self.mixture == "gaussian":
            self.lambda_projection_ = gaussian_projection(self.n_lambda, d, rng)
        self._build()
        return self

    def _build(self):
        super()._build()
        n_q, n_k, d = self.A_.shape
        consts = {
            "W_T": np.ascontiguousarray(self.projection_.T),  # (d, m)
            "Cx": self.centers_x_,
            "Cy": self.centers_y_,
            "A": self.A_,
            "Ainv": 1.0 / self.A_,  # (n_q, n_k, d)
            "A_flat": self.A_.reshape(n_q * n_k, d),
            "Ainv_flat": (1.0 / self.A_).reshape(-1, d),
        }
        if self.mixture == "gaussian":
            consts["T_T"] = np.ascontiguousarray(self.lambda_projection_.T)  # (d, n)
        self._consts = consts

    # -------------------------------------------------------------- features
    def _assign(self, X, xp, side):
        """Index of the nearest centre of each row, (n,), and its one-hot (n, k)."""
        C = self._param("Cx" if side == "x" else "Cy", xp, X)  # (k, d)
        dist = _sq_norms(xp, C)[None, :] - 2.0 * (X @ xp.matrix_transpose(C))  # (n, k) + |x|^2
        idx = xp.argmin(dist, axis=1)  # (n,)
        k = C.shape[0]
        ar = xp.arange(k, device=device(X))
        onehot = xp.astype(idx[:, None] == ar[None, :], X.dtype)  # (n, k)
        return idx, onehot

    def _psi_logits(self, Xm, xp, like):
        """Logits of ``Psi_M(x)`` for transformed rows ``Xm = M x`` (..., d) -> (..., m)."""
        W_T = self._param("W_T", xp, like)
        return (
            Xm @ W_T - 0.5 * xp.sum(Xm * Xm, axis=-1)[..., None] - 0.5 * math.log(self.n_features)
        )

    def _scaled_features(self, X, xp, side):
        if self.mixture == "zero_one":
            base, log_scale = self._zero_one(X, xp, side)
        else:
            base, log_scale = self._gaussian(X, xp, side)
        if self.alpha != 0.0:
            log_scale = log_scale + self.alpha * _sq_norms(xp, X)
        return base, log_scale

    def _zero_one(self, X, xp, side):
        n, m = X.shape[0], int(self.n_features)
        n_q, n_k, _ = self.A_.shape
        idx, onehot = self._assign(X, xp, side)
        if side == "x":
            A = xp.take(self._param("A", xp, X), idx, axis=0)  # (n, n_k, d): A^{i(x) j}
        else:
            Ainv = self._param("Ainv", xp, X)  # (n_q, n_k, d)
            A = xp.take(xp.permute_dims(Ainv, (1, 0, 2)), idx, axis=0)  # (n, n_q, d)
        logits = self._psi_logits(A * X[:, None, :], xp, X)  # (n, k_other, m)
        if n == 0:
            return xp.zeros((0, self.output_dim), dtype=X.dtype, device=device(X)), xp.zeros(
                0, dtype=X.dtype, device=device(X)
            )
        row_max = _detach(xp.max(xp.reshape(logits, (n, -1)), axis=1))  # (n,)
        psi = xp.exp(logits - row_max[:, None, None])  # (n, k_other, m)
        if side == "x":  # block (i(x), j) for every j
            full = onehot[:, :, None, None] * psi[:, None, :, :]  # (n, n_q, n_k, m)
        else:  # block (i, j(y)) for every i
            full = psi[:, :, None, :] * onehot[:, None, :, None]  # (n, n_q, n_k, m)
        return xp.reshape(full, (n, n_q * n_k * m)), row_max

    def _gaussian(self, X, xp, side):
        n, m = X.shape[0], int(self.n_features)
        Mflat = self._param("A_flat" if side == "x" else "Ainv_flat", xp, X)  # (P, d)
        XM = Mflat[None, :, :] * X[:, None, :]  # (n, P, d)
        psi_l = self._psi_logits(XM, xp, X)  # (n, P, m)
        # lambda features: n^{-1/2} exp(-|Mx|^2/tau^2 +- W'Mx/tau), (n, P, L)
        sgn = 1.0 if side == "x" else -1.0
        rho_l = (
            sgn * (XM @ self._param("T_T", xp, X)) / self.tau
            - xp.sum(XM * XM, axis=-1)[..., None] / self.tau**2
            - 0.5 * math.log(self.n_lambda)
        )
        W_T = self._param("W_T", xp, X)
        proj = X @ W_T  # (n, m)
        if self.default_estimator == "hyperbolic":
            z_l = (
                xp.concat([proj, -proj], axis=1)
                - 0.5 * _sq_norms(xp, X)[:, None]
                - 0.5 * math.log(2.0 * m)
            )  # (n, 2m) logits
            z_b, z_ls = None, None
        else:
            z_b = xp.concat([xp.sin(proj), xp.cos(proj)], axis=1) / math.sqrt(m)  # (n, 2m)
            z_ls = 0.5 * _sq_norms(xp, X)
        if n == 0:
            return xp.zeros((0, self.output_dim), dtype=X.dtype, device=device(X)), xp.zeros(
                0, dtype=X.dtype, device=device(X)
            )
        # stabilise each log-domain part by its row max
        ps_max = _detach(xp.max(xp.reshape(psi_l, (n, -1)), axis=1))
        psi = xp.exp(psi_l - ps_max[:, None, None])  # (n, P, m)
        rh_max = _detach(xp.max(xp.reshape(rho_l, (n, -1)), axis=1))
        rho = xp.exp(rho_l - rh_max[:, None, None])  # (n, P, L)
        if z_b is None:
            z_max = _detach(xp.max(z_l, axis=1))
            z_b, z_ls = xp.exp(z_l - z_max[:, None]), z_max
        rp = xp.reshape(rho[:, :, :, None] * psi[:, :, None, :], (n, -1))  # (n, P L m)
        rz = xp.reshape(rho[:, :, :, None] * z_b[:, None, None, :], (n, -1))  # (n, P L 2m)
        return _assemble(
            xp, [(z_b, z_ls, 1.0), (rp, rh_max + ps_max, 1.0), (rz, rh_max + z_ls, sgn)]
        )

    def cluster_pairs(self, X, Y=None):
        """Nearest-centre indices ``(i(x) (n,), j(y) (m,))`` used by the zero-one mixture."""
        Y = X if Y is None else Y
        Xs, xp = self._check_X(X, "X")
        Ys, _ = self._check_X(Y, "Y")
        return self._assign(Xs, xp, "x")[0], self._assign(Ys, xp, "y")[0]

    # -------------------------------------------------------------- variance
    def variance(self, X, Y=None):
        """Analytic MSE of :meth:`approx_kernel`, shape (n, m) (i.i.d. projections).

        * zero-one mixture: for ``x in X_i``, ``y in Y_j`` the estimate is the real complex
          exponential estimator with ``A = A^{ij}``,
          ``MSE = SM^2 (exp(|A x + A^{-1} y|^2) - 1) / m``.
        * Gaussian mixture (derived): with weights ``w_0 = 1 - sum_p lambda_hat_p``,
          ``w_p = lambda_hat_p`` (``sum w = 1``, independent of ``W``) and base estimators
          sharing ``W``, ``MSE = (sum_ij E[w_i w_j] G_ij - SM^2) / m`` where
          ``G_ij = E[g_i g_j]`` is the second moment of single-projection estimates
          (``g_p = exp(-(|a_p|^2 + |b_p|^2)/2 + w.(a_p + b_p))``, ``a_p = A_p x``,
          ``b_p = A_p^{-1} y``; ``g_0`` hyperbolic or trig) and
          ``E[lambda_hat_p lambda_hat_q] = lambda_p lambda_q + (H_pq - lambda_p lambda_q)/n``
          with ``H_pq = exp(-(s_p + s_q)/tau^2 + |e_p + e_q|^2 / (2 tau^2))``,
          ``s_p = |a_p|^2 + |b_p|^2``, ``e_p = a_p - b_p``, for ``P = n_q n_k`` cluster
          pairs.

        For the Gaussian kernel the MSE is multiplied by ``exp(-|x|^2 - |y|^2)``. Everything
        is summed in log space (``inf`` only where the MSE itself overflows) and over row
        blocks of ``X``: temporaries of at most ~4M elements (``(rows, m, d)`` zero-one,
        ``(rows, m, P, P + d)`` Gaussian), whatever ``n``.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional

        Returns
        -------
        array, shape (n, m), non-negative.
        """
        Y = X if Y is None else Y
        Xs, xp = self._check_X(X, "X")
        Ys, _ = self._check_X(Y, "Y")
        xy = Xs @ xp.matrix_transpose(Ys)  # (n, m)
        log_k2 = 2.0 * xy - math.log(self.n_features)  # log(K^2 / m)
        if self.alpha != 0.0:
            log_k2 = log_k2 + 2.0 * self.alpha * (
                _sq_norms(xp, Xs)[:, None] + _sq_norms(xp, Ys)[None, :]
            )
        # m MSE / K^2 = inner * exp(shift), evaluated in log space (finite wherever the MSE
        # is), over row blocks of X so that the (rows, m, P[, P], d) temporaries stay small
        n, m_pts, d = Xs.shape[0], Ys.shape[0], Xs.shape[1]
        if n == 0 or m_pts == 0:
            return xp.zeros_like(xy)
        P = self.A_.shape[0] * self.A_.shape[1]
        per_row = max(1, m_pts * d * (1 if self.mixture == "zero_one" else 2 * P * (P + d)))
        rows = max(1, _VARIANCE_BLOCK_ELEMENTS // per_row)
        parts = []
        for lo in range(0, n, rows):
            hi = min(lo + rows, n)
            if self.mixture == "zero_one":
                parts.append(self._zero_one_rel_mse(Xs[lo:hi], Ys, xp))
            else:
                parts.append(self._gaussian_rel_mse(Xs[lo:hi], Ys, xp, xy[lo:hi]))
        if len(parts) == 1:
            inner, shift = parts[0]
        else:
            inner = xp.concat([q[0] for q in parts], axis=0)
            shift = xp.concat([q[1] for q in parts], axis=0)
        return _scaled_nonneg(xp, inner, shift + log_k2)

    def _zero_one_rel_mse(self, Xs, Ys, xp):
        """``expm1(l) = (1 - e^{-l}) e^{l}`` as ``(inner, shift)``, ``l = |A x + A^{-1} y|^2``
        for the pair's ``A = A^{i(x) j(y)}``; (n, m_pts) each."""
        ix, _ = self._assign(Xs, xp, "x")
        jy, _ = self._assign(Ys, xp, "y")
        A = self._param("A", xp, Xs)  # (n_q, n_k, d)
        Ax = xp.take(A, ix, axis=0)  # (n, n_k, d)
        Ax = xp.take(Ax, jy, axis=1) * Xs[:, None, :]  # (n, m_pts, d): A^{i(x) j(y)} x
        Ainv = self._param("Ainv", xp, Xs)
        By = xp.take(xp.take(Ainv, ix, axis=0), jy, axis=1) * Ys[None, :, :]  # (n, m_pts, d)
        ell = xp.sum((Ax + By) ** 2, axis=-1)  # (n, m_pts)
        return -xp.expm1(-ell), ell

    def _gaussian_rel_mse(self, Xs, Ys, xp, xy):
        """``m MSE / SM^2`` of the Gaussian mixture as ``(inner, shift)``, (n, m_pts) each.

        The sum ``sum_ij E[w_i w_j] G_ij - 1`` is expanded into terms ``coef * exp(log)``
        (weights ``E[w_i w_j]`` written through ``lambda_p`` and ``H_pq``) and summed with a
        common shift, so no intermediate overflows (no ``inf - inf``).
        """
        Af = self._param("A_flat", xp, Xs)  # (P, d)
        a = Af[None, :, :] * Xs[:, None, :]  # (n, P, d)
        b = Ys[:, None, :] / Af[None, :, :]  # (m_pts, P, d)
        c = a[:, None] + b[None, :]  # (n, m_pts, P, d)   a_p + b_p
        e = a[:, None] - b[None, :]  # (n, m_pts, P, d)   a_p - b_p
        s = _sq_norms3(xp, a)[:, None, :] + _sq_norms3(xp, b)[None, :, :]  # (n, m_pts, P)
        cc = c @ xp.matrix_transpose(c)  # (n, m_pts, P, P)
        ee = e @ xp.matrix_transpose(e)
        c2 = xp.linalg.diagonal(cc)  # (n, m_pts, P)
        e2 = xp.linalg.diagonal(ee)
        t2 = self.tau**2
        n_l = float(self.n_lambda)
        two_xy = (2.0 * xy)[:, :, None, None]
        # logs of G_pq / SM^2, H_pq and lambda_p
        spq = s[..., :, None] + s[..., None, :]  # (n, m_pts, P, P)
        lg_pq = -0.5 * spq + 0.5 * (c2[..., :, None] + c2[..., None, :] + 2.0 * cc) - two_xy
        lh_pq = -spq / t2 + 0.5 * (e2[..., :, None] + e2[..., None, :] + 2.0 * ee) / t2
        llam = -0.5 * c2 / t2  # (n, m_pts, P): log lambda_p = -|a_p + b_p|^2 / (2 tau^2)
        lll = llam[..., :, None] + llam[..., None, :]  # (n, m_pts, P, P): log lambda_p lambda_q
        # default estimator g_0: G_00 (n, m_pts) and G_0p (n, m_pts, P), relative to SM^2,
        # as lists of (coefficient, log)
        nx = _sq_norms(xp, Xs)[:, None]
        ny = _sq_norms(xp, Ys)[None, :]
        xy2 = 2.0 * xy
        z = Xs[:, None, :] + Ys[None, :, :]  # (n, m_pts, d)
        z2 = xp.clip(nx + ny + xy2, min=0.0)
        d2 = xp.clip(nx + ny - xy2, min=0.0)
        base = -0.5 * s - 0.5 * (nx + ny)[..., None] - xy2[..., None]  # (n, m_pts, P)
        if self.default_estimator == "hyperbolic":
            g00 = [(0.5, 2.0 * z2 - nx - ny - xy2), (0.5, -nx - ny - xy2)]
            cz = xp.sum(c * z[:, :, None, :], axis=-1)  # (n, m_pts, P)
            zz = z2[..., None]
            g0p = [
                (0.5, base + 0.5 * (c2 + zz + 2.0 * cz)),
                (0.5, base + 0.5 * (c2 + zz - 2.0 * cz)),
            ]
        else:
            delta = Xs[:, None, :] - Ys[None, :, :]
            g00 = [(0.5, nx + ny - xy2), (0.5, nx + ny - xy2 - 2.0 * d2)]
            cd = xp.sum(c * delta[:, :, None, :], axis=-1)  # (n, m_pts, P)
            g0p = [
                (
                    xp.cos(cd),
                    -0.5 * s
                    + 0.5 * (nx + ny)[..., None]
                    - xy2[..., None]
                    + 0.5 * (c2 - d2[..., None]),
                )
            ]
        # E[w_0^2] = 1 - 2 sum_p l_p + sum_pq L_pq, E[w_0 w_p] = l_p - sum_q L_pq,
        # E[w_p w_q] = L_pq = (1 - 1/n) l_p l_q + H_pq / n
        terms = [(-1.0, xp.zeros_like(xy))]  # the "- 1"
        for cf, lg in g00:
            lg3, lg4 = lg[..., None], lg[..., None, None]
            terms += [
                (cf, lg),
                (-2.0 * cf, llam + lg3),
                ((1.0 - 1.0 / n_l) * cf, lll + lg4),
                (cf / n_l, lh_pq + lg4),
            ]
        for cf, lg in g0p:
            cf4 = cf[..., :, None] if not isinstance(cf, float) else cf
            lg4 = lg[..., :, None]  # G_0p broadcast over q
            terms += [
                (2.0 * cf, llam + lg),
                (-2.0 * (1.0 - 1.0 / n_l) * cf4, lll + lg4),
                (-2.0 * cf4 / n_l, lh_pq + lg4),
            ]
        terms += [((1.0 - 1.0 / n_l), lll + lg_pq), (1.0 / n_l, lh_pq + lg_pq)]
        lead = xy.ndim
        shift = None
        for _, lg in terms:
            mx = xp.max(xp.reshape(lg, (*lg.shape[:lead], -1)), axis=-1) if lg.ndim > lead else lg
            shift = mx if shift is None else xp.maximum(shift, mx)
        inner = xp.zeros_like(xy)
        for cf, lg in terms:
            sh = xp.reshape(shift, (*shift.shape, *([1] * (lg.ndim - lead))))
            v = cf * xp.exp(lg - sh)
            v = xp.broadcast_to(v, lg.shape) if lg.ndim > lead else v
            inner = inner + (
                xp.sum(xp.reshape(v, (*v.shape[:lead], -1)), axis=-1) if lg.ndim > lead else v
            )
        return inner, shift

    def _log_second_moment(self, X, Y, xp):
        raise NotImplementedError("ClusteredHybridRF: use variance().")

    def log_relative_variance(self, X, Y=None):
        raise NotImplementedError("ClusteredHybridRF: use variance().")

    def log_objective(self, X, Y=None):
        raise NotImplementedError("ClusteredHybridRF has no FAVOR# fitting objective.")
