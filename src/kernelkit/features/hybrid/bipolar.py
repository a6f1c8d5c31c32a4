"""Bipolar hybrids ``lambda_hat SM^{++}_m + (1 - lambda_hat) SM^{trig}_m`` and the angular
hybrid.

Implements eq. 8-12 and 19 (the real form of the mixture and the angular coefficient),
Thm 3.1 with Lemmas 2.2 and 3.2 (the MSE) and App. D of K. Choromanski et al., "Hybrid
Random Features" (ICLR 2022). The Gaussian-coefficient variants are in
:mod:`.bipolar_gaussian`.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ..._backend import device, is_numpy_namespace, validate_positive_int
from ..._backend.params import int_range
from .._base import (
    _detach,
    as_real_dtype,
    check_bool,
    log1mexp,
    pairwise_rows,
    scale_rows,
    times_exp,
    warn_feature_overflow,
)
from .._projection import ProjectionFeatureMap
from ..sampling import draw_projection, gaussian_projection
from ._common import (
    LogFormVariance,
    _assemble,
    _combine,
    _log_nonneg,
    _outer,
    _shifted_sum,
    _sq_norms,
)


class _BipolarHybrid(LogFormVariance, ProjectionFeatureMap):
    """``lambda_hat SM^{++}_m + (1 - lambda_hat) SM^{trig}_m`` as a real asymmetric map.

    Subclasses set the coefficient ``lambda_hat = a + c u(x)^T v(y)`` through
    ``_lambda_a``, ``_lambda_c``, ``_fit_lambda``, ``_lambda_features``, ``_lambda_dim``,
    ``exact_lambda`` and ``_lambda_log_var``.

    Fitted attributes: ``projection_`` (m, d) the ``W`` of ``SM^{++}``;
    ``projection_trig_`` (m, d) the ``W`` of ``SM^{trig}`` (the same array when
    ``shared_projection``); ``lambda_projection_`` (n, d) the ``T`` of the coefficient.
    """

    _unit_scaled_rows = True  # detached stabiliser (FeatureMap.transform_scaled)

    symmetric = False
    positive = False
    #: whether the block ``sqrt|a| phi1`` is present (``a != 0``)
    _has_a_block = True
    _parameter_constraints: ClassVar[dict] = {
        **ProjectionFeatureMap._parameter_constraints,
        "n_lambda": int_range(1, 2**24),
        "shared_projection": ["boolean"],
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
    ):
        super().__init__(n_features, kernel, lengthscale, sampler, random_state)
        self.n_lambda = n_lambda
        self.shared_projection = shared_projection

    # -------------------------------------------------------------- parameters
    def _check_params(self):
        super()._check_params()
        validate_positive_int(self.n_lambda, "n_lambda", maximum=2**24)
        check_bool(self.shared_projection, "shared_projection")

    def _fit_parameters(self, X, Y, rng):
        if self.shared_projection:
            self.projection_trig_ = self.projection_
        else:
            self.projection_trig_ = draw_projection(
                self.n_features, X.shape[1], rng, sampler=self.sampler
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

    def _output_dim_for(self, n_features):
        m2 = 2 * int(n_features)
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
        blocks, extra = self._blocks(X, xp, side)
        base, log_scale = _assemble(xp, blocks)  # (n, D), (n,)
        if extra is not None:
            log_scale = log_scale + extra
        return base, log_scale

    def _features(self, X, xp, side):
        # NumPy rows in blocks of ~2^17 features: the blocks, their scaled copies and the
        # concatenation of the whole (n, D) output took 3x its size
        # the blocks (on kernelkit's threads) report an overflow; one warning, from here
        overflow = []
        out = pairwise_rows(
            lambda Xb: self._features_rows(Xb, xp, side, overflow), X, self.output_dim, xp
        )
        if overflow:
            warn_feature_overflow(
                side,
                *overflow[0],
                "use approx_kernel, which works in log space, or scale the inputs down.",
            )
        return out

    def _features_rows(self, X, xp, side, overflow):
        # base * exp(log_scale) with the common row scale of the blocks: where that scale
        # overflows, the blocks far below it (underflowed to 0 in the base, e.g. the
        # positive ones, ~ exp(-|x|^2/2), next to the trig ones, ~ exp(|x|^2/2)) would be
        # 0 * inf = NaN. There each block is scaled by its own factor instead: inf only
        # where a feature itself overflows, its value (or 0 below the range) elsewhere.
        # The test is on the (n,) row scales, not on the (n, D) output.
        blocks, extra = self._blocks(X, xp, side)
        base, log_scale = _assemble(xp, blocks)  # (n, D), (n,)
        if extra is not None:
            log_scale = log_scale + extra
        on_host = is_numpy_namespace(xp) or getattr(X.device, "type", None) == "cpu"
        if base.shape[0] and on_host:  # (on accelerators the test would wait for the device)
            limit = math.log(float(xp.finfo(base.dtype).max))
            if not bool(xp.all(log_scale < limit)):
                parts = []
                for b, ls, coef in blocks:
                    log_w = ls if extra is None else ls + extra
                    parts.append(times_exp(xp, coef * b, log_w[:, None]))  # 0 where coef = 0
                out = xp.concat(parts, axis=1)
                if not bool(xp.all(xp.isfinite(_detach(out)))):
                    overflow.append((out.dtype, limit))  # (dtype, limit) of the warning
                return out
        return scale_rows(xp, base, log_scale)

    def _blocks(self, X, xp, side):
        """The feature blocks ``[(base (n, k), log_scale (n,), coef), ...]`` and the
        kernel's extra row term ``alpha |x|^2`` (None for the softmax kernel)."""
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
        extra = self.alpha * _sq_norms(xp, X) if self.alpha != 0.0 else None
        return blocks, extra

    # -------------------------------------------------------------- estimates
    def approx_components(self, X, Y=None):
        """The three random parts of the hybrid estimate (eq. 8-11):
        ``approx_kernel = lambda_hat * k_positive + (1 - lambda_hat) * k_trig``.

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
        """
        # a half-precision input formed in float32 and rounded once, as approx_kernel
        Xs, Ys, xp, dtype = self._check_pair_half_widened(X, Y)
        lam, (dp, sp), (dt, st) = self._components_prepared(Xs, Ys, xp)
        return tuple(
            as_real_dtype(xp, part, dtype)
            for part in (lam, _combine(xp, dp, sp), _combine(xp, dt, st))
        )

    def _components_prepared(self, Xs, Ys, xp):
        extra = 0.0
        if self.alpha != 0.0:
            extra = self.alpha * (_sq_norms(xp, Xs)[:, None] + _sq_norms(xp, Ys)[None, :])
        out = []
        for parts in (self._positive_parts, self._trig_parts):
            bx, lx = parts(Xs, xp)  # (n, 2m), (n,)
            by, ly = parts(Ys, xp)
            out.append((bx @ xp.matrix_transpose(by), lx[:, None] + ly[None, :] + extra))
        return self._lambda_hat(Xs, Ys, xp), out[0], out[1]

    def _lambda_hat(self, Xs, Ys, xp):
        """``lambda_hat = a + c u(x)^T v(y)`` (n, m) of prepared inputs."""
        ux, ulx = self._lambda_features(Xs, xp, "x")
        uy, uly = self._lambda_features(Ys, xp, "y")
        uv = _combine(xp, ux @ xp.matrix_transpose(uy), ulx[:, None] + uly[None, :])
        return self._lambda_a + self._lambda_c * uv  # (n, m)

    def approx_kernel(self, X, Y=None):
        """Unbiased hybrid estimate of the kernel matrix.

        ``lambda_hat SM^{++} + (1 - lambda_hat) SM^{trig}`` (eq. 8-11), equal to
        ``transform(X) @ transform_y(Y).T`` (to rounding), computed in
        ``O(n m (m_f + n_l))`` from the components instead of ``O(n m m_f n_l)``. The two
        base estimates are mixed in log space (common shift of their row scales), so the
        result is finite wherever the estimate itself is representable, and an exact
        ``lambda_hat = 0`` or ``1`` drops the other estimator entirely (never ``0 * inf``).

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m), real
            The floating dtype of ``X`` (float64 for an integer ``X``).
        """
        Xs, Ys, xp, dtype = self._check_pair_half_widened(X, Y)
        # row blocks of X for NumPy: a dozen (n, m) temporaries per block, not per call
        return as_real_dtype(xp, self._pairwise(self._approx_prepared, Xs, Ys, xp), dtype)

    def _approx_prepared(self, Xs, Ys, xp):
        lam, (dp, sp), (dt, st) = self._components_prepared(Xs, Ys, xp)
        if dp.shape[0] == 0 or dp.shape[1] == 0:
            return lam * dp
        inner, shift = _shifted_sum(xp, [(lam * dp, sp), ((1.0 - lam) * dt, st)])
        return _combine(xp, inner, shift)

    def exact_lambda(self, X, Y=None):
        """The coefficient ``lambda(x, y) = E lambda_hat``.

        Evaluated as :meth:`variance` is (in float64 for float32 input, as angles and
        ``|x -+ y|^2`` from the float32 Gram matrix would round near the exact angles).

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m), real
            The floating dtype of ``X`` (float64 for an integer ``X``).
        """
        Xs, Ys, xp, dtype = self._check_pair_widened(X, Y)
        return as_real_dtype(xp, self._lambda_exact(Xs, Ys, xp), dtype)

    def _lambda_exact(self, X, Y, xp):
        raise NotImplementedError

    def _lambda_log_var(self, X, Y, xp):
        """``(log lambda (n, m), log Var lambda_hat (n, m))``, ``-inf`` where ``lambda = 0``
        resp. where ``lambda_hat`` is exact. Logs, as either may leave the floating-point
        range where its product with a base estimator's MSE does not (Gaussian coefficient
        at large norms)."""
        raise NotImplementedError

    # -------------------------------------------------------------- variance
    def _variance_log_form(self, Xs, Ys, xp):
        """Analytic MSE of :meth:`approx_kernel` (Thm 3.1 with Lemma 2.2) as
        ``(inner, log_scale)``, ``MSE = max(inner, 0) exp(log_scale)``.

        ``MSE = E[lambda_hat^2] MSE(++) + E[(1-lambda_hat)^2] MSE(trig)
        - shared * (2/m) SM^2 (1 - cos(|x|^2 - |y|^2)) E[lambda_hat (1-lambda_hat)]``,
        with ``MSE(trig) = e^{|x|^2+|y|^2} (1 - e^{-|x-y|^2})^2 / (2m)`` and
        ``MSE(++) = SM^2 e^{|x+y|^2} (1 - e^{-|x+y|^2})^2 / (2m)`` (Lemma 2.2), and the
        moments of ``lambda_hat`` of the subclass (Lemma 3.2, App. F). The last term is
        present only for ``shared_projection=True`` (eq. 38; eq. 36 counts the cross terms
        with ``C(m, 2)``, but they are the ``m(m - 1)`` ordered pairs: Erratum 2). For the
        Gaussian kernel the MSE is multiplied by ``exp(-|x|^2 - |y|^2)``. Exact for i.i.d.
        projections; for structured samplers it is the i.i.d. value.

        Returns ``(inner, log_scale)``, each (n, m).
        """
        m = self.n_features
        nx = _sq_norms(xp, Xs)[:, None]  # (n, 1)
        ny = _sq_norms(xp, Ys)[None, :]  # (1, m)
        xy = Xs @ xp.matrix_transpose(Ys)  # (n, m)
        z2 = _snapped_sq(xp, nx + ny + 2.0 * xy, nx + ny)  # |x+y|^2
        d2 = _snapped_sq(xp, nx + ny - 2.0 * xy, nx + ny)  # |x-y|^2
        ka = 2.0 * self.alpha * (nx + ny)  # log of the Gaussian-kernel factor on the MSE
        log2m = math.log(2.0 * m)
        log_pp = 2.0 * xy + z2 + 2.0 * log1mexp(xp, z2) - log2m + ka
        log_tr = (nx + ny) + 2.0 * log1mexp(xp, d2) - log2m + ka
        # E lambda_hat^2 = lam^2 + v, E (1-lambda_hat)^2 = (1-lam)^2 + v and
        # E lambda_hat (1-lambda_hat) = lam (1-lam) - v, v = Var lambda_hat; lam^2 and v
        # in log space (each may under- or overflow where its product with an MSE does not)
        log_lam, log_v = self._lambda_log_var(Xs, Ys, xp)
        one_m_lam = -xp.expm1(log_lam)  # 1 - lam
        terms = [(1.0, 2.0 * log_lam + log_pp), (one_m_lam * one_m_lam, log_tr)]
        terms += [(1.0, log_v + log_pp), (1.0, log_v + log_tr)]
        if self.shared_projection:
            # (2/m) SM^2 (1 - cos(|x|^2 - |y|^2)) = (4/m) SM^2 sin^2((|x|^2 - |y|^2)/2)
            s = xp.sin(0.5 * (nx - ny))
            w = (4.0 / m) * s * s
            log_sm2 = 2.0 * xy + ka
            terms += [(-w * one_m_lam, log_lam + log_sm2), (w, log_v + log_sm2)]
        # log-space sum: finite wherever the MSE is representable (no inf - inf, 0 * inf)
        return _shifted_sum(xp, terms)


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
    sampler : {"iid", "orthogonal", "sorf", "hadamard", "halton"}
        Sampler of ``W`` (:func:`~kernelkit.features.draw_projection`): ``"iid"``
        ("HRF-iid"), ``"orthogonal"`` block-orthogonal ("HRF-ort") and the others of
        :data:`~kernelkit.features.sampling.SAMPLERS`. ``T`` is always
        i.i.d.
    shared_projection : bool
        ``True``: both base estimators use the same ``W`` (variant II, lower MSE unless
        ``|x| = |y|``, projection cost ``(m + n) d``); ``False``: independent ``W``'s
        (variant I, cost ``(2m + n) d``).
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    projection_ : ndarray (m, d)
        ``W`` of ``SM^{++}``.
    projection_trig_ : ndarray (m, d)
        ``W`` of ``SM^{trig}`` (the same array when ``shared_projection``).
    lambda_projection_ : ndarray (n, d)
        ``T``, the rows ``tau_i`` of the coefficient estimator.

    Notes
    -----
    MSE (:meth:`variance`): Thm 3.1 with Lemma 3.2, ``E lambda_hat^2 = t(t - t/n + 1/n)``,
    ``E(1 - lambda_hat)^2 = (1-t)(1-t+t/n)``, ``E lambda_hat(1-lambda_hat) = t(1-t)(1-1/n)``,
    ``t = theta/pi``; for equal norms it is the corrected eq. 47 (Erratum 3: eq. 47 prints
    ``t(1 - 1/n - t + t/n)``, i.e. ``E lambda_hat(1-lambda_hat)``, as the coefficient of
    the trig MSE, which is ``E(1 - lambda_hat)^2``). A zero input has
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
        # square roots and acos only of guarded values, so that autograd's gradient stays
        # finite at zero rows and parallel pairs (sqrt'(0), acos'(+-1) times 0 is nan)
        sx, sy = _sq_norms(xp, X)[:, None], _sq_norms(xp, Y)[None, :]
        zero = (sx == 0) | (sy == 0)  # (n, m)
        nx = xp.sqrt(xp.where(sx == 0, xp.ones_like(sx), sx))
        ny = xp.sqrt(xp.where(sy == 0, xp.ones_like(sy), sy))
        cos = xp.clip((X @ xp.matrix_transpose(Y)) / (nx * ny), min=-1.0, max=1.0)
        # Gram-based angles resolve theta only to ~sqrt(eps): snap cos within rounding of
        # +-1 (|1 -+ cos| <= 4 eps) to exactly parallel / antiparallel, where the MSE is 0
        # for equal norms (theta ~ 1e-8 would otherwise give a spurious MSE ~ 1e-8 SM^2)
        tol = 4.0 * float(xp.finfo(cos.dtype).eps)
        parallel, antiparallel = cos >= 1.0 - tol, cos <= -1.0 + tol
        t = xp.acos(xp.where(parallel | antiparallel, xp.zeros_like(cos), cos)) / math.pi
        t = xp.where(parallel, xp.zeros_like(t), t)
        return xp.where(antiparallel, xp.ones_like(t), t), zero

    def _lambda_exact(self, X, Y, xp):
        t, zero = self._angle_t(X, Y, xp)
        return xp.where(zero, xp.full_like(t, 0.5), t)

    def _lambda_log_var(self, X, Y, xp):
        t, zero = self._angle_t(X, Y, xp)
        # Var lambda_hat = t (1 - t) / n (Lemma 3.2); lambda_hat = 1/2 exactly when an
        # input is zero
        v = xp.where(zero, xp.zeros_like(t), t * (1.0 - t) / float(self.n_lambda))
        return _log_nonneg(xp, xp.where(zero, xp.full_like(t, 0.5), t)), _log_nonneg(xp, v)


def _snapped_sq(xp, sq, scale):
    """A squared norm ``|x +- y|^2`` formed as ``|x|^2 + |y|^2 +- 2 x.y`` (``scale`` the
    first two terms): 0 where it is within the form's rounding (``4 eps scale``), as at
    ``y = x`` or ``y = -x``, where the estimate is exact (variance 0, ``-inf``) whatever
    other rows share the call; clipped at 0 elsewhere."""
    eps = float(xp.finfo(sq.dtype).eps)
    return xp.where(sq <= 4.0 * eps * scale, xp.zeros_like(sq), sq)
