"""Random Maclaurin and Optimized Maclaurin features for dot-product kernels.

Reference: Wacker, Kanagawa, Filippone, "Improved Random Features for Dot Product
Kernels" (equation / algorithm numbers below are the paper's), with the errata as
numbered in ``docs/derivations/dot_product.md``:

* Algorithm 2 is budget-respecting (erratum 1): ``D_n = 1[a_n > 0]`` to start, then one
  feature at a time while ``sum D_n < D_total``;
* whether the exact constant feature ``sqrt(a_0)`` counts in the budget is an option
  (erratum 2, ``constant_in_budget``);
* the TensorSRHT surrogate (eq. 72-73) picks its branch from the *summed* covariance
  term (erratum 10) and uses the padded dimension ``d`` (erratum 9).

A dot-product kernel is ``k(x, y) = sum_n a_n (x^T y)^n`` with ``a_n >= 0`` (eq. 36):

* ``"polynomial"``: ``(gamma x^T y + coef0)^degree`` (eq. 37),
  ``a_n = C(degree, n) coef0^(degree-n) gamma^n``;
* ``"softmax"``: ``exp(x^T y / l^2)`` (eq. 38), ``a_n = 1 / (n! l^(2n))``;
* ``"gaussian"``: ``exp(-|x - y|^2 / (2 l^2))`` (eq. 39), the exponential ``a_n`` with
  every feature (the constant included) times ``exp(-|x|^2 / 2l^2)``.

The unit-sphere kernel of eq. 57, ``(1 - |x - y|^2 / a^2)^p`` for ``|x| = |y| = 1``, is
the polynomial kernel with ``gamma = 2/a^2``, ``coef0 = 1 - 2/a^2``
(:func:`unit_sphere_polynomial`).

Both maps estimate the *truncated* series ``sum_{n <= p} a_n (x^T y)^n`` (times the
Gaussian factors) without bias; the constant ``a_0`` is an exact feature ``sqrt(a_0)``.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Hidden, StrOptions

from .._backend import (
    check_random_state,
    device,
    is_numpy_namespace,
    to_backend,
    to_numpy,
    validate_positive_int,
)
from .._backend.fwht import next_power_of_two
from .._backend.parallel import check_n_jobs
from .._backend.params import N_JOBS, NON_NEGATIVE, POSITIVE, RANDOM_STATE, int_range
from ._base import (
    FeatureMap,
    _below_range,
    as_real_dtype,
    check_real,
    gaussian_log_kernel,
    log_inner_bound,
    log_polynomial_bound,
    narrow_to,
    safe_gram,
    safe_log,
    scale_rows,
    sq_norms,
    times_exp,
    widen_to_float64,
)
from .dot_product_variance import (
    iid_sketch_variance,
    pair_statistics,
    tensor_srht_variance,
    unit_rows,
)
from .maclaurin_series import (
    MACLAURIN_KERNELS,
    SKETCH_MOMENTS,
    SKETCHES,
    MaclaurinPairSums,
    _check_degree,
    greedy_allocation,
    maclaurin_coefficients,
    maclaurin_pair_sums,
    optimize_allocation,
    random_maclaurin_measure,
    srht_surrogate,
    unit_sphere_polynomial,
)

__all__ = [
    "SKETCHES",
    "SKETCH_MOMENTS",
    "MaclaurinPairSums",
    "OptimizedMaclaurin",
    "RandomMaclaurin",
    "greedy_allocation",
    "maclaurin_coefficients",
    "maclaurin_pair_sums",
    "optimize_allocation",
    "random_maclaurin_measure",
    "srht_surrogate",
    "unit_sphere_polynomial",
]


# ============================================================== feature maps
def _canonical_row_order(X, xp) -> np.ndarray:
    """Indices that sort the rows of ``X`` (dense, sparse or a tensor) by two fixed random
    projections: the same rows in any order give the same sequence of rows (rows that
    agree to rounding in both projections keep their relative order; they are equal up
    to rounding). O(n d + n log n)."""
    d = X.shape[1]
    V = np.random.default_rng(0x5EED).standard_normal((d, 2))
    if isinstance(X, np.ndarray):
        # einsum's own loop, not BLAS: a threaded BLAS call here (1.3 M multiply-adds at
        # n = 10000, d = 64) left OpenBLAS's threads spinning beside the pair sums' pool,
        # +30% on the whole fit
        keys = np.einsum("ij,jk->ik", X, V, optimize=False).astype(np.float64, copy=False)
    elif hasattr(X, "toarray"):  # SciPy sparse: its own product
        keys = np.asarray(X @ V, dtype=np.float64)
    else:
        keys = to_numpy(X @ to_backend(V, xp, like=X), np.float64)
    return np.lexsort((keys[:, 1], keys[:, 0]))


def _fit_streams(rng):
    """Two independent generators (the subsample's, the sketches') spawned from ``rng``,
    which then advances by one draw: a ``Generator`` passed as ``random_state`` is a
    stream that every fit moves on, as with every map (``Generator.spawn`` alone leaves
    its stream where it was). An int seed gives the same two streams as ``spawn``."""
    streams = rng.spawn(2)
    rng.integers(0, 2)
    return streams


def _nan_as_inf(xp, V):
    """``V`` with NaN as ``+inf``: on the unit rows of finite inputs a NaN is ``inf - inf``
    of degree terms that overflow even scaled (the measure's ``1 / mu(n)`` at degrees of
    hundreds), a variance beyond the floating-point range."""
    return xp.where(xp.isnan(V), xp.full_like(V, math.inf), V)


def _exp(xp, v):
    """``exp(v)`` of a float (the raw-row weights) or an array; ``inf`` where a float's
    exponential overflows (``math.exp`` raises), as for arrays, so that the callers'
    switch to the overflow-safe unit-row form runs."""
    if not isinstance(v, float):
        return xp.exp(v)
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


class _MaclaurinBase(FeatureMap):
    """Shared machinery: coefficients, per-degree sketches, constant, Gaussian factor.

    Features (complex count): ``[sqrt(a_0)] ++ [scale_n Phi_n(x)]_{n: D_n > 0}``, times
    ``exp(-|x|^2 / 2 l^2)`` for the Gaussian kernel; ``Phi_n`` is an unbiased degree-``n``
    sketch of ``(x'^T y')^n`` with ``D_n`` features on the scaled input
    ``x' = sqrt(s) x`` (``s = gamma`` for the polynomial kernel, ``1 / l^2`` otherwise),
    whose coefficients are ``b_n = a_n / s^n``. The constant feature exists iff
    ``a_0 > 0``.
    """

    _sketches: tuple[str, ...] = ("rademacher", "gaussian")
    #: the parameters of both Maclaurin maps; every one is checked whatever the kernel
    _parameter_constraints: ClassVar[dict] = {
        "n_features": int_range(1, 2**26),
        # "exponential" passes here so that _check_params can point to "softmax"
        "kernel": [StrOptions(set(MACLAURIN_KERNELS)), Hidden(StrOptions({"exponential"}))],
        "degree": int_range(1, 1000),
        "gamma": POSITIVE,
        "coef0": NON_NEGATIVE,
        "lengthscale": POSITIVE,
        "sketch": [StrOptions({"rademacher", "gaussian"})],
        "complex": ["boolean"],
        "real_output": ["boolean"],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
    }

    # ------------------------------------------------------------------ parameters
    accepts_sparse = True
    _warns_value_overflow = True  # |x^T y|^p and exp(x^T y) overflow silently otherwise

    def _validate_common(self):
        check_n_jobs(self.n_jobs)
        if self.kernel == "exponential":
            raise ValueError(
                "kernel='exponential' (eq. 38, exp(x.y / l^2)) is called 'softmax' in "
                "kernelkit, as on every feature map: use kernel='softmax'."
            )
        if not isinstance(self.kernel, str) or self.kernel not in MACLAURIN_KERNELS:
            raise ValueError(
                f"Unknown kernel {self.kernel!r}; expected one of {list(MACLAURIN_KERNELS)}."
            )
        if not isinstance(self.sketch, str) or self.sketch not in self._sketches:
            raise ValueError(
                f"Unknown sketch {self.sketch!r}; expected one of {list(self._sketches)}."
            )
        if not isinstance(self.complex, bool | np.bool_):
            raise TypeError(f"complex must be a bool, got {self.complex!r}.")
        if not isinstance(self.real_output, bool | np.bool_):
            raise TypeError(f"real_output must be a bool, got {self.real_output!r}.")
        if self.kernel == "polynomial":
            _check_degree(self.degree, "degree")
            check_real(self.gamma, "gamma", minimum=0.0, strict=True)
            check_real(self.coef0, "coef0", minimum=0.0)
        else:
            check_real(self.lengthscale, "lengthscale", minimum=0.0, strict=True)

    def _input_root(self) -> float:
        """``sqrt(s)`` with ``x' = sqrt(s) x``: ``sqrt(gamma)`` for the polynomial kernel,
        ``1 / l`` otherwise, formed without ``s`` itself (``1 / l^2`` leaves float64 for
        lengthscales beyond about 1e154 or below 1e-154, where ``1 / l`` does not)."""
        if self.kernel == "polynomial":
            return math.sqrt(float(self.gamma))
        return 1.0 / float(self.lengthscale)

    def _prepare(self, X, xp, name="X"):
        # the scaled input x' = sqrt(s) x, formed once here: every method then computes
        # the kernel of unit scale (coefficients b_n, exp(x'.y'), exp(-|x'|^2 / 2)). Formed
        # inside each method as X * sqrt(s) with s = 1 / l^2, it raised ZeroDivisionError
        # (l = 1e-200) or OverflowError (l = 1e200), and gave NaN near l = 1e-160 (s
        # subnormal), where the other maps, which divide by l, are exact
        r = self._input_root()
        if r == 1.0:
            return X
        if sp.issparse(X):
            # SciPy multiplies by a Python float in float64: scale the stored values in
            # their own dtype, as NumPy does for dense float32 X (float32 stays float32)
            X = X.copy()
            X.data *= X.dtype.type(r)
            return X
        return X * r

    def _coefficients(self, max_degree: int) -> np.ndarray:
        return maclaurin_coefficients(
            self.kernel,
            max_degree,
            degree=self.degree,
            gamma=self.gamma,
            coef0=self.coef0,
            lengthscale=self.lengthscale,
        )

    def _unit_coefficients_for(self, max_degree: int) -> np.ndarray:
        """The unit-scale coefficients ``b_n = a_n / s^n`` of degrees ``0 .. max_degree``.

        Formed at ``s = 1`` (``gamma = 1``, ``lengthscale = 1``) rather than by the
        division: ``a_n`` and ``s^n`` over- or underflow (gamma 1e100 or 1e-100,
        lengthscale 1e-60) where ``b_n`` does not, and ``inf / inf`` or ``0 / 0`` made
        ``b_n`` NaN (NaN features, a series bound that left the term out). Which degrees
        have a term (``b_n > 0``, that is ``a_n > 0`` in exact arithmetic) is read here too:
        ``a_n`` itself underflows to 0 for large lengthscales (``1 / (n! l^(2n))`` of degree
        10 from ``l ~ 1e16``, of degree 2 from ``l ~ 1e81``) although the term, on inputs of
        that scale, is not small.
        """
        return maclaurin_coefficients(
            self.kernel,
            max_degree,
            degree=self.degree,
            gamma=1.0,
            coef0=self.coef0,
            lengthscale=1.0,
        )

    @property
    def is_complex(self) -> bool:
        return bool(self.complex) and not bool(self.real_output)

    def _has_constant(self) -> bool:
        """Whether ``a_0 > 0`` (the exact constant feature ``sqrt(a_0)`` is present)."""
        return self.kernel != "polynomial" or float(self.coef0) > 0

    def _sketch_budget(self, n_features: int) -> int:
        """Sketch features (complex count) for ``n_features``."""
        return int(n_features)

    def _output_dim_for(self, n_features):
        """The sketch features (doubled for ``real_output`` with complex sketches) plus the
        constant feature."""
        D = self._sketch_budget(n_features)
        if self.complex and self.real_output:
            D *= 2
        return D + int(self._has_constant())

    # ------------------------------------------------------------------ sketches
    def _draw_sketches(self, d: int, rng):
        """Draw independent per-degree sketches for ``n_features_per_degree_``."""
        Dn = self.n_features_per_degree_
        self._unit_coefficients = self._unit_coefficients_for(len(self.coefficients_) - 1)
        if not np.all(np.isfinite(self._unit_coefficients)):
            # C(p, n) coef0^(p - n) beyond float64 (coef0 1e200, degree 12): the kernel is
            # inf at x = y = 0 already, and the weights sqrt(b_n) inf made the estimates
            # inf - inf = NaN
            raise ValueError(
                "The kernel's Maclaurin coefficients overflow float64 "
                f"(kernel={self.kernel!r}, degree={self.degree}, coef0={self.coef0}); "
                "scale coef0 down."
            )
        dummy = np.zeros((1, d))
        sketches = []
        for n in range(1, len(Dn)):
            if Dn[n] == 0:
                continue
            seed = int(rng.integers(0, 2**63 - 1))
            sk = SKETCHES[self.sketch](
                n_features=int(Dn[n]),
                degree=n,
                coef0=0.0,
                complex=bool(self.complex),
                random_state=seed,
                n_jobs=self.n_jobs,
            )
            sk.fit(dummy)
            sketches.append((n, sk, math.sqrt(self._block_weight(n))))
        self.sketches_ = sketches

    def _block_weight(self, n: int) -> float:
        """Weight multiplying ``Phi_n(x)^T conj Phi_n(y)`` in the estimate."""
        raise NotImplementedError

    # ------------------------------------------------------------------ features
    def _scaled_features(self, X, xp, side):
        return self._scaled_blocks(X, xp)[:2]

    def _features_of_rows(self, X, xp, side):
        base, log_scale, bounded = self._scaled_blocks(X, xp)
        out = scale_rows(xp, base, log_scale)
        return out if bounded else self._checked_features(xp, out, side)

    def _scaled_blocks(self, X, xp):
        """``(base (n, D), log_scale (n,), bounded)``: the features are ``base *
        exp(log_scale)``; ``bounded`` when every degree's sketch took its raw features,
        each at most ``exp(hi)`` (:meth:`DotProductFeatureMap._scaled_or_raw` with
        ``products``), so that with their weights and ``log_scale <= 0`` no feature can
        overflow (then no pass over the features looks for inf)."""
        n = X.shape[0]
        Xs = X  # prepared: x' = sqrt(s) x
        # each degree's sketch in scaled form (base, log-scale or None for 0), brought to
        # the rows' largest log-scale: the blocks of degree n grow like |x|^n, and the raw
        # features of rows of norm ~1e80 (or their products) overflowed, and a Gaussian
        # factor exp(-|x|^2 / 2) that underflows times them made 0 * inf = NaN
        parts = [(w, *sk._scaled_or_raw(Xs, xp, products=True)) for _, sk, w in self.sketches_]
        log_scale = None
        if any(ls is not None for _, _, ls in parts):
            zero = xp.zeros(n, dtype=X.dtype, device=device(X))
            scales = [zero if ls is None else ls for _, _, ls in parts]
            log_scale = zero if self.n_features_per_degree_[0] else scales[0]
            for ls in scales:
                log_scale = xp.maximum(log_scale, ls)
            blocks = [
                w * B * xp.exp(ls - log_scale)[:, None]
                for (w, B, _), ls in zip(parts, scales, strict=True)
            ]
        elif is_numpy_namespace(xp):  # each sketch's fresh features, weighted in place
            blocks = [np.multiply(B, w, out=B) for w, B, _ in parts]
        else:
            blocks = [w * B for w, B, _ in parts]
        cplx = bool(self.complex)
        if cplx and self.real_output:
            # the parts of complex64 sketches of a half-precision X: back to X's dtype
            parts = [xp.real(B) for B in blocks] + [xp.imag(B) for B in blocks]
            blocks = [as_real_dtype(xp, B, X.dtype) for B in parts]
            cplx = False
        if self.n_features_per_degree_[0]:
            const = xp.full(
                (n, 1), math.sqrt(float(self.coefficients_[0])), dtype=X.dtype, device=device(X)
            )
            if log_scale is not None:
                const = const * xp.exp(-log_scale)[:, None]
            if cplx:
                const = xp.astype(const, blocks[0].dtype)
            blocks = [const, *blocks]
        base = xp.concat(blocks, axis=1)
        bounded = log_scale is None and self._raw_blocks_bounded(X.dtype, xp)
        if log_scale is None:
            log_scale = xp.zeros(n, dtype=X.dtype, device=device(X))
        if self.kernel == "gaussian":
            with np.errstate(over="ignore"):  # |x|^2 = inf: a factor exp(-inf) = 0
                log_scale = log_scale - 0.5 * sq_norms(xp, X)
        return base, log_scale, bounded

    def _raw_blocks_bounded(self, dtype, xp) -> bool:
        """Whether raw sketch features (each below ``exp(hi)``, ``hi = (log max - 4 -
        log D_n) / 2``) times their block weights, and the constant feature, stay below
        the largest ``dtype`` value."""
        top = math.log(float(xp.finfo(dtype).max))
        logs = [
            math.log(w) + 0.5 * (top - 4.0 - math.log(max(1, int(sk.n_features))))
            for _, sk, w in self.sketches_
            if w > 0
        ]
        if self.n_features_per_degree_[0]:
            c0 = float(self.coefficients_[0])
            logs.append(0.5 * math.log(c0) if c0 > 0 else -math.inf)
        return all(v < top - 1.0 for v in logs)

    # ------------------------------------------------------------------ variance
    def _pair_moments(self, X, Y, xp, unit=True):
        """``(G, N, S, log_n, log_e2)``: :func:`pair_statistics` of the unit rows
        ``x' / |x'|``, ``y' / |y'|`` of the scaled inputs (``N`` is 1, or 0 for a zero row),
        ``log_n = log(|x'|^2 |y'|^2)``, and the log of the Gaussian weight ``e_x^2 e_y^2``
        (None for the other kernels), each (n, m); ``unit=False``: of the scaled rows
        themselves, with ``log_n = 0``.

        The degree-``n`` terms of the variances are homogeneous of degree ``2n`` in ``x'``
        and in ``y'``, so they are formed on unit rows with the weights
        ``exp(n log_n)`` (:meth:`_term_logs`) and never overflow where the variance does
        not.
        """
        log_e = self._gaussian_weight(X, Y, xp)
        log_e2 = None if log_e is None else 2.0 * log_e
        if not unit:
            return (*pair_statistics(X, Y, 0.0), 0.0, log_e2)
        Xu, lx = unit_rows(X)  # (n, d), (n,)
        Yu, ly = unit_rows(Y)
        G, N, S = pair_statistics(Xu, Yu, 0.0)
        return G, N, S, lx[:, None] + ly[None, :], log_e2

    def _term_logs(self, log_n, xp):
        """``(c, L)``: ``c[n] = log(b_n |x'|^n |y'|^n) - L / 2`` (n, m) for the degrees
        ``n <= p`` with ``b_n > 0`` (``c[n]`` None otherwise) and ``L = 2 max_n`` of
        these logs, the scale of the squared series: every scaled term is at most 1.
        For the raw rows (``log_n = 0``): ``c[n] = log b_n`` (floats) and ``L = 0``."""
        b = self._unit_coefficients
        c = [None] * (self.degree_ + 1)
        active = [n for n in range(self.degree_ + 1) if b[n] > 0]
        for n in active:
            c[n] = math.log(float(b[n])) + 0.5 * n * log_n
        if isinstance(log_n, float):
            return c, 0.0
        L = c[active[0]]
        for n in active[1:]:
            L = xp.maximum(L, c[n])  # (n, m)
        for n in active:
            c[n] = c[n] - L
        return c, 2.0 * L

    def _full_polynomial(self) -> bool:
        """Whether the truncated series is the whole polynomial kernel: every degree up to
        ``degree`` (``a_n = 0`` beyond it), so the expected kernel is the kernel itself
        and is formed in closed form. Summed term by term the binomial expansion
        alternates in sign for ``x'^T y' < 0`` and keeps an absolute error of ``eps
        (|x'^T y'| + coef0)^degree``: near ``x'^T y' = -coef0`` every digit (``-8e-16``
        for ``1e-20`` at degree 10)."""
        return self.kernel == "polynomial" and self.degree_ >= int(self.degree)

    def _scaled_expected(self, G, log_n, xp):
        """The expected kernel scaled as :meth:`_scaled_series` scales the series (by
        ``exp(-L / 2)``, ``L`` of :meth:`_term_logs`) for the inner products or cosines
        ``G`` and ``log_n`` of :meth:`_pair_moments`; in closed form for the whole
        polynomial kernel (:meth:`_full_polynomial`): ``(G e^h + coef0)^p e^(-L/2)``
        with ``h = log_n / 2``, in log space, ``p`` the degree."""
        c, L = self._term_logs(log_n, xp)
        if not self._full_polynomial():
            return self._scaled_series(G, c, xp)
        p, c0 = int(self.degree), float(self.coef0)
        if isinstance(log_n, float):  # the raw rows: L = 0, G = x'^T y'
            return (G + c0) ** p
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            a = xp.log(xp.abs(G)) + 0.5 * log_n  # log |x'^T y'|
            if c0 == 0.0:
                v, m = xp.sign(G), a
            else:
                m = xp.maximum(a, xp.full_like(a, math.log(c0)))
                v = xp.sign(G) * xp.exp(a - m) + xp.exp(math.log(c0) - m)  # in [-1, 2]
            mag = xp.exp(p * (xp.log(xp.abs(v)) + m) - 0.5 * L)
        return mag * (xp.sign(v) ** p)

    def _scaled_series(self, G, c, xp):
        """``sum_n exp(c[n]) G^n`` (n, m) over the degrees ``n <= p`` of ``c`` (from
        :meth:`_term_logs`: floats for the raw rows, (n, m) arrays for the unit rows,
        None for ``b_n = 0``) and the cosines or inner products ``G`` (n, m): the series
        ``sum_n b_n (x'^T y')^n e^(-L/2)``, every term at most 1 for the unit rows."""
        out = xp.zeros_like(G)
        Gn = xp.ones_like(G)
        for n in range(self.degree_ + 1):
            if n:
                Gn = Gn * G
            if c[n] is not None:
                out = out + _exp(xp, c[n]) * Gn
        return out

    def _gaussian_weight(self, X, Y, xp):
        """``log(e_x e_y)`` (n, m) of prepared inputs, None for the other kernels."""
        if self.kernel != "gaussian":
            return None
        with np.errstate(over="ignore"):  # |x|^2 = inf: a weight exp(-inf) = 0
            return -0.5 * (xp.sum(X * X, axis=1)[:, None] + xp.sum(Y * Y, axis=1)[None, :])

    def _degree_variance(self, G, N, S, n: int, D: int, kind: str):
        """Variance of one degree-``n`` sketch estimate of ``G^n`` with ``D`` features
        (the sketch classes' formulas: Theorem 2 or eq. 33)."""
        if self.sketch == "srht":
            return tensor_srht_variance(
                G,
                N,
                S,
                n,
                D,
                next_power_of_two(self.n_features_in_),
                complex=bool(self.complex),
                kind=kind,
            )
        q, m4 = SKETCH_MOMENTS[(self.sketch, bool(self.complex))]
        return iid_sketch_variance(G, N, S, n, D, q=q, m4=m4, kind=kind)

    def _variance(self, X, Y, xp):
        # the variance of approx_kernel, Re k_hat (derived, docs/derivations/dot_product.md)
        return self._variance_kind(X, Y, xp, "real")

    def _complex_variance(self, X, Y, xp):
        # E|k_hat - E k_hat|^2 of the complex estimate (the paper's, what the objective uses)
        return self._variance_kind(X, Y, xp, "complex")

    def _variance_kind(self, X, Y, xp, kind):
        Xw, Yw, dtype = widen_to_float64(xp, X, Y)
        with np.errstate(over="ignore", invalid="ignore"):  # checked below
            out, log_w = self._series_variance(Xw, Yw, xp, kind, unit=False)  # raw rows
        if not bool(xp.all(xp.isfinite(out))):  # the terms overflow: unit rows
            out, log_w = self._series_variance(Xw, Yw, xp, kind)
            out = _nan_as_inf(xp, out)
        return narrow_to(xp, times_exp(xp, out, log_w), dtype)

    def _series_variance(self, X, Y, xp, kind, scaled=False, unit=True, moments=None):
        """``(V, log_w)``: the variance is ``V exp(log_w)`` (n, m), ``log_w`` the scale
        ``L`` of :meth:`_term_logs` plus ``log e_x^2 e_y^2`` for the Gaussian kernel.
        ``scaled=True`` leaves ``V`` divided by ``exp(L)`` (for ratios); ``unit=False``
        forms the terms on the raw rows (cheaper; may overflow); ``moments``: those of
        :meth:`_pair_moments`, if already computed."""
        raise NotImplementedError

    def _finish_variance(self, V, L, log_e2, scaled):
        if scaled or isinstance(L, float):  # L = 0 on the raw rows
            return V, log_e2
        return V, L if log_e2 is None else L + log_e2

    def _log_relative_variance(self, X, Y, xp):
        # the Gaussian weights e_x^2 e_y^2 of the variance and of the squared expected
        # kernel cancel, and so do the scales exp(L) of the unit-row terms: the ratio of
        # the scaled polynomial parts, finite where the variance and the kernel leave the
        # floating-point range together
        Xw, Yw, dtype = widen_to_float64(xp, X, Y)
        for unit in (False, True):  # the raw rows unless their terms leave the range
            with np.errstate(over="ignore", invalid="ignore"):
                moments = self._pair_moments(Xw, Yw, xp, unit)
                var, _ = self._series_variance(Xw, Yw, xp, "real", True, unit, moments)
                G, log_n = moments[0], moments[3]
                k = self._scaled_expected(G, log_n, xp)
            if bool(xp.all(xp.isfinite(var)) and xp.all(xp.isfinite(k)) and xp.all(k != 0)):
                break
        var = _nan_as_inf(xp, var)
        with np.errstate(invalid="ignore"):
            out = safe_log(xp, var) - 2.0 * safe_log(xp, xp.abs(k))
        # var = 0: the estimate is exact (e.g. a zero row with a_0 = 0 gives k = 0 and
        # only zero features): -inf, not log(0 / 0)
        out = xp.where(var == 0, xp.full_like(out, -math.inf), out)
        return narrow_to(xp, out, dtype)

    def expected_kernel(self, X, Y=None):
        """``E approx_kernel(X, Y)``: the truncated series ``sum_{n <= p} a_n (x^T y)^n``
        with ``p = degree_`` (times ``e_x e_y`` for the Gaussian kernel). The expectation
        is over every random draw of ``fit``: for Random Maclaurin that includes the
        degrees (a single draw may give a degree no features).

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m)
        """
        args = "X" if Y is None else "X, Y"
        X, Y, xp, dtype = self._check_pair_half_widened(X, Y)
        X, Y = self._densify(X), self._densify(Y)
        log_g = self._log_g_bound(X, Y, xp)
        bound = self._log_series_bound(X, Y, xp, log_g)
        # the raw series forms the powers G^n before their coefficients b_n (1 / n!, or
        # the binomial's, below 1) scale them down, so a representable series can have
        # powers that overflow (softmax, degree 10, |x^T y| ~ 1e31: G^10 inf, G^10 / 10!
        # not): it runs unchecked only where |G^n| <= g^p stays in range too
        raw_bound = max(bound, self.degree_ * max(log_g, 0.0))
        out = as_real_dtype(xp, self._expected_kernel_prepared(X, Y, xp, raw_bound), dtype)
        return self._checked_values(xp, out, "expected_kernel", args, exact=True, log_bound=bound)

    def _log_g_bound(self, X, Y, xp) -> float:
        """``log g`` with ``g = d max |X| max |Y|``, a bound of ``|x'^T y'|`` over the
        rows of prepared ``X`` (n, d), ``Y`` (m, d)."""
        return log_inner_bound(xp, X, Y)

    def _log_series_bound(self, X, Y, xp, log_g=None) -> float:
        """An upper bound of ``log |series|`` (and of the expected kernel, ``e_x e_y <=
        1``) for prepared ``X`` (n, d), ``Y`` (m, d): ``sum_n |b_n| g^n`` in log space
        (``log_g``: :meth:`_log_g_bound`, from reductions over the inputs)."""
        lg = self._log_g_bound(X, Y, xp) if log_g is None else log_g
        b = self._unit_coefficients
        terms = [math.log(abs(float(b[0])))] if b[0] else []
        terms += [math.log(float(b[n])) + n * lg for n in range(1, self.degree_ + 1) if b[n] > 0]
        return float(np.logaddexp.reduce(terms)) if terms else -math.inf

    def _expected_kernel_prepared(self, X, Y, xp, log_bound=None):
        """The expected kernel (n, m) of prepared ``X``, ``Y``; the unit-row series only
        where the raw one overflows (never looked for where ``log_bound``, from
        :meth:`_log_series_bound`, keeps it in range)."""
        Xw, Yw, dtype = widen_to_float64(xp, X, Y)
        if self._full_polynomial():  # the kernel itself, in closed form
            return narrow_to(xp, self._exact_kernel(Xw, Yw, xp), dtype)
        with np.errstate(over="ignore", invalid="ignore"):  # checked below
            series = self._series(Xw, Yw, xp)
        if not _below_range(xp, log_bound, Xw.dtype) and not bool(xp.all(xp.isfinite(series))):
            # the powers of x^T y overflow (and +-inf terms of alternating sign made
            # inf - inf = NaN): the series of the unit rows, sum_n exp(c_n) G^n with every
            # term at most 1, scaled back in log space (_term_logs)
            G, _, _, log_n, _ = self._pair_moments(Xw, Yw, xp)
            c, L = self._term_logs(log_n, xp)
            series = self._scaled_series(G, c, xp)
            log_e = self._gaussian_weight(Xw, Yw, xp)
            out = times_exp(xp, series, 0.5 * L if log_e is None else 0.5 * L + log_e)
            return narrow_to(xp, out, dtype)
        out = times_exp(xp, series, self._gaussian_weight(Xw, Yw, xp))
        return narrow_to(xp, out, dtype)

    def _series(self, X, Y, xp):
        """The truncated series ``sum_{n <= p} a_n (x^T y)^n`` (n, m), without ``e_x e_y``."""
        G = X @ xp.matrix_transpose(Y)  # prepared: x'^T y' = s x^T y
        b = self._unit_coefficients
        out = xp.zeros_like(G) + float(b[0])
        Gp = xp.ones_like(G)
        for n in range(1, self.degree_ + 1):
            Gp = Gp * G
            if b[n] > 0:
                out = out + float(b[n]) * Gp
        return out

    def _exact_kernel_plan(self, X, Y, xp):
        """:meth:`FeatureMap._exact_kernel_plan`: the bound of the kernel from ``|x^T y| <=
        d max |X| max |Y|`` (the Gaussian kernel is at most 1), and the overflow-safe
        blocks (``safe``) only where that bound, or that of ``|x|^2``, leaves the range."""
        if self.kernel == "gaussian":  # at most 1, from gaussian_log_kernel
            return self._exact_kernel, 0.0
        log_g = log_inner_bound(xp, X, Y)
        if self.kernel == "polynomial":
            # (x'^T y' + coef0)^degree: gamma is in the prepared rows
            bound = log_polynomial_bound(log_g, 1.0, float(self.coef0), self.degree)
        else:  # exp(x'^T y')
            bound = math.exp(log_g) if log_g < 700.0 else math.inf
        safe = not (_below_range(xp, log_g, X.dtype) and _below_range(xp, bound, X.dtype))
        return functools.partial(self._exact_kernel, safe=safe, log_g=log_g), bound

    def _exact_kernel(self, X, Y, xp, safe: bool = True, log_g=None):
        """The kernel this map approximates (untruncated), shape (n, m): +-inf (or 0)
        where it leaves the floating-point range, never NaN (``x^T y`` of rows of norm
        ~1e160 by :func:`safe_gram`; the Gaussian kernel as
        :func:`kernelkit.kernels.gaussian_kernel` forms it). ``safe=False``: the plain
        products, for inputs whose bound keeps every value in range
        (:meth:`_exact_kernel_plan`); ``log_g``: the plan's :func:`log_inner_bound` of all
        rows, handed to :func:`safe_gram`."""
        if self.kernel != "gaussian":  # on the prepared rows x' = sqrt(s) x
            G = safe_gram(xp, X, Y, log_g) if safe else X @ xp.matrix_transpose(Y)
            with np.errstate(over="ignore"):  # FeatureMap._checked_values warns
                if self.kernel == "polynomial":
                    return (G + float(self.coef0)) ** int(self.degree)
                return xp.exp(G)
        return xp.exp(gaussian_log_kernel(xp, X, Y, 1.0))  # prepared rows: l = 1


class RandomMaclaurin(_MaclaurinBase):
    """Random Maclaurin features (Kar & Karnick 2012; paper Sec. 5.2, eq. 40-43).

    Draws the degrees ``n_1 .. n_D ~ mu``, ``mu(n) ∝ 2^-(n+1)`` on the degrees
    ``1 <= n <= p`` with ``a_n > 0`` (:func:`random_maclaurin_measure`), counts them
    (``D_n``), and sketches degree ``n`` with ``D_n`` independent features:

        Phi(x) = [sqrt(a_0), (+)_{D_n > 0} sqrt(D_n a_n / (D mu(n))) Phi_n(x)]

    (times ``exp(-|x|^2 / 2 l^2)`` for the Gaussian kernel). Unbiased for the truncated
    series ``sum_{n <= p} a_n (x^T y)^n`` over the draw of the degrees and the sketches.

    Parameters
    ----------
    n_features : int
        ``D``, the number of sketch features; the output has one more column, the exact
        constant ``sqrt(a_0)``, when ``a_0 > 0``.
    kernel : {"polynomial", "softmax", "gaussian"}
        ``(gamma x^T y + coef0)^degree``, ``exp(x^T y / l^2)`` or
        ``exp(-|x - y|^2 / 2 l^2)``.
    degree : int
        Degree of the polynomial kernel (the truncation ``p`` for it).
    max_degree : int
        Truncation degree ``p`` of the exponential and Gaussian kernels.
    gamma, coef0 : float
        Polynomial kernel parameters (scikit-learn names); eq. 57's unit-sphere kernel is
        ``gamma = 2/a^2``, ``coef0 = 1 - 2/a^2`` (:func:`unit_sphere_polynomial`).
    lengthscale : float
        ``l`` of the exponential and Gaussian kernels.
    sketch : {"rademacher", "gaussian"}
        Degree-``n`` sketch (the paper's "Rnd. Macl." baseline uses real Rademacher).
    complex : bool
        Complex sketches (Ex. 4 / Ex. 3 weights); features are complex.
    real_output : bool
        With ``complex=True``, output ``[Re Phi, Im Phi]`` (real, ``2 D`` sketch columns)
        whose inner products equal ``Re k_hat``.
    random_state : None, int or numpy.random.Generator
    n_jobs : int, optional
        Threads of the NumPy path (None: all available CPUs, not scikit-learn's one job).

    Attributes
    ----------
    coefficients_ : ndarray, shape (p + 1,)
        ``a_0 .. a_p``.
    degree_ : int
        ``p``.
    degree_measure_ : ndarray, shape (p + 1,)
        ``mu``.
    n_features_per_degree_ : ndarray of int, shape (p + 1,)
        ``D_n``; entry 0 is the constant feature (1 if ``a_0 > 0``).
    sketches_ : list of (degree, sketch, weight)
    """

    fit_reads = "shape"  # the degrees and sketches need the dimension only

    _parameter_constraints: ClassVar[dict] = {
        **_MaclaurinBase._parameter_constraints,
        "max_degree": int_range(1, 1000),
    }

    def __init__(
        self,
        n_features: int = 256,
        kernel: str = "polynomial",
        degree: int = 2,
        max_degree: int = 10,
        gamma: float = 1.0,
        coef0: float = 1.0,
        lengthscale: float = 1.0,
        sketch: str = "rademacher",
        complex: bool = False,
        real_output: bool = False,
        random_state=None,
        n_jobs=None,
    ):
        self.n_features = n_features
        self.kernel = kernel
        self.degree = degree
        self.max_degree = max_degree
        self.gamma = gamma
        self.coef0 = coef0
        self.lengthscale = lengthscale
        self.sketch = sketch
        self.complex = complex
        self.real_output = real_output
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _check_params(self):
        validate_positive_int(self.n_features, "n_features", maximum=2**26)
        self._validate_common()
        if self.kernel != "polynomial":
            _check_degree(self.max_degree, "max_degree")

    def _fit(self, X, Y, xp, rng):
        # draw the degrees and the sketches (X only supplies the dimension)
        p = int(self.degree) if self.kernel == "polynomial" else int(self.max_degree)
        self.degree_ = p
        self.coefficients_ = self._coefficients(p)
        # on the degrees with a term: those of b_n > 0, not a_n > 0, which underflows
        # (lengthscale 1e100: every feature went to degree 1, the estimate biased by
        # hundreds of its standard deviations)
        self.degree_measure_ = random_maclaurin_measure(self._unit_coefficients_for(p), p)
        Dn = np.zeros(p + 1, dtype=np.int64)
        Dn[1:] = rng.multinomial(int(self.n_features), self.degree_measure_[1:])
        Dn[0] = int(self.coefficients_[0] > 0)
        self.n_features_per_degree_ = Dn
        self._draw_sketches(X.shape[1], rng)

    def _block_weight(self, n):
        # D_n a_n / (D mu(n)), on the unit scale (Phi_n carries 1/sqrt(D_n))
        return (
            self.n_features_per_degree_[n]
            * self._unit_coefficients[n]
            / (self.n_features * self.degree_measure_[n])
        )

    def _series_variance(self, X, Y, xp, kind, scaled=False, unit=True, moments=None):
        """Variance of the estimate over the degree draw and the sketches.

        The ``D`` features are i.i.d. terms ``T = (a_n / mu(n)) Pi_n(x) conj Pi_n(y)`` with
        ``n ~ mu``; ``E|T|^2 = sum_n a_n^2 (G^(2n) + V_n) / mu(n)`` with ``V_n`` the
        one-feature variance of the degree-``n`` sketch (Theorem 2), so
        ``Var = (sum_n a_n^2 (G^(2n) + V_n) / mu(n) - (sum_{n >= 1} a_n G^n)^2) / D``
        (times ``e_x^2 e_y^2`` for the Gaussian kernel).

        ``kind="real"``: the variance of :meth:`approx_kernel` (:meth:`variance`);
        ``"complex"``: ``E|k_hat - E k_hat|^2`` of the complex estimate
        (:meth:`complex_variance`, the paper's). Identical for real sketches.
        """
        G, N, S, log_n, log_e2 = moments or self._pair_moments(X, Y, xp, unit)
        c, L = self._term_logs(log_n, xp)  # terms scaled by exp(-L) (second moments)
        mu = self.degree_measure_
        second = xp.zeros_like(G)
        mean = xp.zeros_like(G)
        Gn = xp.ones_like(G)
        for n in range(1, self.degree_ + 1):
            Gn = Gn * G
            if mu[n] > 0:
                m2 = Gn * Gn + self._degree_variance(G, N, S, n, 1, kind)
                second = second + (_exp(xp, 2.0 * c[n]) / float(mu[n])) * m2
                mean = mean + _exp(xp, c[n]) * Gn
        V = xp.clip(second - mean * mean, min=0.0) / int(self.n_features)
        return self._finish_variance(V, L, log_e2, scaled)


class OptimizedMaclaurin(_MaclaurinBase):
    """Optimized Maclaurin features (paper Sec. 5.3-5.4, Algorithms 2-4).

    ``fit(X)`` chooses the truncation degree ``p*`` in ``[p_min, p_max]`` and the number
    of features ``D_n`` of every degree by minimising the U-statistic estimate ``g`` of the
    integrated mean squared error (variance + squared truncation bias, eq. 49-51; eq. 55
    for the Gaussian kernel) on (a subsample of) ``X``, with the budget-respecting
    Incremental Algorithm (erratum 1) for every ``p`` (Algorithm 3). TensorSRHT sketches
    are allocated on the convex surrogate of App. C (so ``D_1 <= d``, Remark 15, whenever
    another degree gains from a feature; ``p* = 1`` puts the whole budget on degree 1). The map
    (Algorithm 4)

        Phi(x) = [sqrt(a_0), sqrt(a_n) Phi_n(x)]_{n <= p*, D_n > 0}

    is unbiased for ``sum_{n <= p*} a_n (x^T y)^n`` (times ``e_x e_y`` for the Gaussian
    kernel).

    Parameters
    ----------
    n_features : int
        The budget. ``D_total = n_features`` sketch features plus the constant
        ``sqrt(a_0)`` (``constant_in_budget=False``, Algorithm 4), or
        ``D_total = n_features - 1`` so the output has exactly ``n_features`` columns
        (complex count; ``constant_in_budget=True``, the Sec. 5.6 convention). Erratum 2.
    kernel, degree, gamma, coef0, lengthscale :
        As in :class:`RandomMaclaurin`. For the polynomial kernel ``p`` never exceeds its
        degree (higher degrees have ``a_n = 0``).
    p_min, p_max : int
        Range of the truncation degree (the paper: 2 and 10 in Sec. 6; 1 and 20 in App. F).
    sketch : {"rademacher", "gaussian", "srht"}
        Degree-``n`` sketch; ``"srht"`` is TensorSRHT.
    complex, real_output : bool
        As in :class:`RandomMaclaurin`.
    constant_in_budget : bool
    n_subsample : int or None
        ``m``: the objective uses ``min(n, m)`` rows of ``X`` drawn without replacement
        (cost O(m^2 (d + p_max))). The paper uses up to 5000 and finds 2000 enough for
        the Gaussian kernel (App. F); ``None`` uses all rows. The draw uses
        ``random_state``, so for ``n > m`` the allocation, too, may change with the seed;
        it does not depend on the order of the rows of ``X``.
    random_state : None, int or numpy.random.Generator
    n_jobs : int, optional
        Threads of the NumPy path (None: all available CPUs, not scikit-learn's one job).

    Attributes
    ----------
    coefficients_ : ndarray, shape (p* + 1,)
    degree_ : int
        ``p*``.
    n_features_per_degree_ : ndarray of int, shape (p* + 1,)
        ``D_n`` (entry 0: the constant feature, 1 if ``a_0 > 0``); ``D_n = 0`` iff
        ``a_n = 0``; ``sum_{n >= 1} D_n = D_total``.
    objective_ : dict
        ``{p: g(p, D_p)}`` for every ``p`` searched (``inf`` where the budget cannot give
        every degree one feature); TensorSRHT values use the exact variance (eq. 33).
    pair_sums_ : MaclaurinPairSums
        The precomputed U-statistic sums.
    sketches_ : list of (degree, sketch, weight)
    """

    fit_reads = "all"  # the degree allocation is optimised on the rows

    _sketches = ("rademacher", "gaussian", "srht")
    _parameter_constraints: ClassVar[dict] = {
        **_MaclaurinBase._parameter_constraints,
        "p_min": int_range(1, 1000),
        "p_max": int_range(1, 1000),  # p_min <= p_max: _check_params
        "sketch": [StrOptions({"rademacher", "gaussian", "srht"})],
        "constant_in_budget": ["boolean"],
        "n_subsample": [None, *int_range(2)],
    }

    def __init__(
        self,
        n_features: int = 256,
        kernel: str = "polynomial",
        degree: int = 2,
        gamma: float = 1.0,
        coef0: float = 1.0,
        lengthscale: float = 1.0,
        p_min: int = 1,
        p_max: int = 10,
        sketch: str = "rademacher",
        complex: bool = False,
        real_output: bool = False,
        constant_in_budget: bool = False,
        n_subsample: int | None = 2000,
        random_state=None,
        n_jobs=None,
    ):
        self.n_features = n_features
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.lengthscale = lengthscale
        self.p_min = p_min
        self.p_max = p_max
        self.sketch = sketch
        self.complex = complex
        self.real_output = real_output
        self.constant_in_budget = constant_in_budget
        self.n_subsample = n_subsample
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _sketch_budget(self, n_features):
        # D_total: the constant feature takes one column of the budget when it counts
        return int(n_features) - int(bool(self.constant_in_budget) and self._has_constant())

    def _check_params(self):
        validate_positive_int(self.n_features, "n_features", maximum=2**26)
        self._validate_common()
        p_min = _check_degree(self.p_min, "p_min")
        p_max = _check_degree(self.p_max, "p_max")
        if p_min > p_max:
            raise ValueError(f"p_min must be <= p_max, got p_min={p_min} > p_max={p_max}.")
        if not isinstance(self.constant_in_budget, bool | np.bool_):
            raise TypeError("constant_in_budget must be a bool.")
        if self.n_subsample is not None:
            validate_positive_int(self.n_subsample, "n_subsample", minimum=2)

    def _degree_range(self):
        p_min, p_max = int(self.p_min), int(self.p_max)
        if self.kernel == "polynomial":  # a_n = 0 beyond the degree: same g for all p >= it
            p_max = min(p_max, int(self.degree))
            p_min = min(p_min, p_max)
        return p_min, p_max

    def _fit(self, X, Y, xp, rng):
        # optimise the degree allocation on X (Algorithm 3) and draw the sketches; the
        # kernel is symmetric, so Y only has its dimension checked
        if X.shape[0] < 2:
            raise ValueError(
                "OptimizedMaclaurin.fit needs at least 2 samples (the U-statistic objective "
                f"uses pairs); got 1 sample (n_samples = {X.shape[0]})."
            )
        p_min, p_max = self._degree_range()
        K = int(self.degree) if self.kernel == "polynomial" else p_max
        a_kernel = self._coefficients(K)
        # the objective on the scaled rows x' = sqrt(s) x with the unit-scale coefficients
        # b_n = a_n / s^n: the same sums, but a_n (1 / (n! l^(2n)), gamma^n) underflows to
        # 0 or overflows for lengthscales far from 1 (data in large units: l = 1e100),
        # where the fit on the raw rows met a_n r^(2n) = 0 * inf and raised "overflow"
        b_kernel = self._unit_coefficients_for(K)
        has_const = bool(b_kernel[0] > 0)
        D_total = int(self.n_features) - int(bool(self.constant_in_budget) and has_const)
        needed = int(np.count_nonzero(b_kernel[1 : p_min + 1]))
        if D_total < max(1, needed):
            raise ValueError(
                f"n_features={self.n_features} leaves {D_total} sketch features, fewer than "
                f"the {max(1, needed)} degrees 1..p_min={p_min} with a_n > 0 need (one each)."
            )
        # independent streams: the subsample does not shift the sketches (see redraw)
        sub_rng, sketch_rng = _fit_streams(rng)
        # the rows in a canonical order, so that the subsample (and the rounding of the
        # pair sums) depends on the data set and the seed, not on the order of the rows
        order, m = _canonical_row_order(X, xp), X.shape[0]
        if self.n_subsample is not None and m > int(self.n_subsample):
            order = order[np.sort(sub_rng.choice(m, size=int(self.n_subsample), replace=False))]
        Xn = to_numpy(self._densify(X[order]), np.float64) * self._input_root()
        self.pair_sums_ = maclaurin_pair_sums(
            Xn,
            b_kernel,
            p_max,
            kernel=self.kernel,
            lengthscale=1.0,
            sketch=self.sketch,
            complex=bool(self.complex),
            n_jobs=self.n_jobs,
        )
        p_star, D_star, objective = optimize_allocation(
            self.pair_sums_, b_kernel, D_total, p_min, p_max
        )
        self.degree_ = int(p_star)
        self.objective_ = objective
        self.coefficients_ = np.zeros(p_star + 1)
        self.coefficients_[: min(len(a_kernel), p_star + 1)] = a_kernel[: p_star + 1]
        D_star = np.asarray(D_star, dtype=np.int64).copy()
        D_star[0] = int(has_const)
        self.n_features_per_degree_ = D_star
        self._draw_sketches(X.shape[1], sketch_rng)

    def redraw(self, random_state=None):
        """A copy with the same fitted allocation and freshly drawn sketches.

        The allocation (Algorithm 3) is deterministic given the rows the objective uses,
        so Monte Carlo over sketches need not repeat the O(m^2 (d + p)) objective. The
        copy's sketches are those ``fit`` draws with ``random_state`` (its ``random_state``
        parameter is set to it); when ``fit`` used every row (``n <= n_subsample``) the copy
        equals ``set_params(random_state=random_state).fit(X)``.

        Parameters
        ----------
        random_state : None, int or numpy.random.Generator
            Seeds the copy's sketches.

        Returns
        -------
        OptimizedMaclaurin
        """
        self._check_fitted()
        new = copy.copy(self)
        new.random_state = random_state
        new._draw_sketches(self.n_features_in_, _fit_streams(check_random_state(random_state))[1])
        return new

    def _block_weight(self, n):
        return self._unit_coefficients[n]

    def _series_variance(self, X, Y, xp, kind, scaled=False, unit=True, moments=None):
        """Variance ``sum_n a_n^2 Var[Phi_n(x)^T conj Phi_n(y)]`` of the estimate (eq. 47).

        Independent sketches per degree: Theorem 2 or, for TensorSRHT, eq. 33 with the
        padded dimension (the sketch classes' formulas); times ``e_x^2 e_y^2`` for the
        Gaussian kernel.

        ``kind="real"``: the variance of :meth:`approx_kernel` (:meth:`variance`);
        ``"complex"``: ``E|k_hat - E k_hat|^2`` of the complex estimate
        (:meth:`complex_variance`, the paper's, and what the objective uses).
        """
        G, N, S, log_n, log_e2 = moments or self._pair_moments(X, Y, xp, unit)
        c, L = self._term_logs(log_n, xp)  # terms scaled by exp(-L)
        Dn = self.n_features_per_degree_
        out = xp.zeros_like(G)
        for n in range(1, self.degree_ + 1):
            if Dn[n] > 0:
                V = self._degree_variance(G, N, S, n, int(Dn[n]), kind)
                out = out + _exp(xp, 2.0 * c[n]) * V
        return self._finish_variance(xp.clip(out, min=0.0), L, log_e2, scaled)
