"""Random features for dot-product (polynomial) kernels: i.i.d. Rademacher and Gaussian
sketches (real and complex), TensorSRHT (real and complex) and TensorSketch.

Reference: Wacker, Kanagawa, Filippone, "Improved Random Features for Dot Product
Kernels" (equation / algorithm numbers below are the paper's), with the errata as
numbered in ``docs/derivations/dot_product.md``:

* TensorSRHT draws a fresh sign vector *and permutation* per (block, degree) (erratum 4;
  a permutation shared by the degrees is unbiased but breaks eq. 28/33);
* ``d`` in eq. 29/33 is the zero-padded (power-of-two) dimension (erratum 9);
* complex TensorSRHT uses ``diag(z_i)`` (erratum 3).

Every map estimates the polynomial kernel ``k(x, y) = (x.y + coef0)^degree`` by
``k_hat = Phi(x)^T conj(Phi(y))`` with ``D = n_features`` features, through the
inhomogeneous trick ``x~ = [x; sqrt(coef0)]`` (appended before any zero-padding).
:meth:`~DotProductFeatureMap.approx_kernel` returns ``Re k_hat``.

Variances (Theorems 2, 5, 10). With ``G = x~.y~``, ``N = |x~|^2 |y~|^2``,
``S = sum_k x~_k^2 y~_k^2`` and weights with ``q = E (Re z)^2``, ``m4 = E|z|^4``,
``r = E z^2 = 2q - 1``:

* i.i.d. sketches, Theorem 2 (eq. 16): ``E|k_hat - k|^2 = [(m4 S + N - S + (r^2 + 1)(G^2 - S))^p
  - G^(2p)] / D``;
* the real part (derived; ``docs/derivations/dot_product.md``):
  ``E(Re k_hat - k)^2 = (E|k_hat - k|^2 + E(k_hat - k)^2) / 2`` with
  ``E(k_hat - k)^2 = [(m4 S + r^2 (N - S) + 2 (G^2 - S))^p - G^(2p)] / D`` (the same
  pairing argument as Theorem 2 without the conjugate);
* TensorSRHT, Theorems 5/10 (eq. 28/33): ``V_q^(p)/D - c(D, d)/D^2 [G^(2p) - (G^2 -
  V_q^(1)/(d - 1))^p]`` with ``c(D, d)`` of eq. 29; the real part uses the same formula
  with ``V_q^(1) = N - S + r^2 (G^2 - S)`` replaced by ``W_q^(1) = G^2 - S + r^2 (N - S)``
  (derived: Lemma 12 applied to the unconjugated pairings).

* TensorSketch (derived here, the paper has none): :func:`tensor_sketch_variance`.

For real maps (``q = 1``) all of these coincide. ``variance(X, Y)`` is the variance of
:meth:`approx_kernel`, ``E(Re k_hat - k)^2``, as on every feature map;
``complex_variance(X, Y)`` is the paper's ``E|k_hat - k|^2 >= E(Re k_hat - k)^2``.
"""

from __future__ import annotations

import math
import numbers
from numbers import Integral, Real
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions

from .._backend import device, is_numpy_namespace, validate_positive_int
from .._backend.fwht import fwht, hadamard, hadamard_factors, next_power_of_two
from .._backend.parallel import check_n_jobs, map_row_blocks
from .._backend.params import N_JOBS, NON_NEGATIVE, POSITIVE, RANDOM_STATE, int_range
from ..kernels import polynomial_kernel
from ._base import (
    FeatureMap,
    _detach,
    _matmul_augmented,
    check_real,
    complex_dtype,
    log_inner_bound,
    log_polynomial_bound,
    narrow_to,
    param_cache,
    safe_log,
    scale_rows,
    times_exp,
    widen_to_float64,
)
from .dot_product_variance import (
    _clip0,
    iid_sketch_variance,
    pair_statistics,
    pair_terms,
    srht_c,
    tensor_sketch_variance,
    tensor_srht_variance,
    unit_rows,
)

__all__ = [
    "DotProductFeatureMap",
    "GaussianSketch",
    "RademacherSketch",
    "TensorSRHT",
    "TensorSketch",
    "iid_sketch_variance",
    "pair_statistics",
    "pair_terms",
    "srht_c",
    "tensor_sketch_variance",
    "tensor_srht_variance",
]


# ============================================================== base class
def _is_bool(v) -> bool:
    return isinstance(v, bool | np.bool_)


#: float64 machine epsilon (the rounding of unit rows' products, per coordinate)
_EPS64 = float(np.finfo(np.float64).eps)


class DotProductFeatureMap(FeatureMap):
    """Base class of random features for ``k(x, y) = (gamma x.y + coef0)^degree``.

    Parameters
    ----------
    n_features : int
        Number of (complex, for ``complex=True``) random features ``D``.
    degree : int
        ``p >= 1``.
    coef0 : float
        ``>= 0``; handled by appending ``sqrt(coef0)`` to every input (before padding).
    gamma : float, default=1.0
        ``> 0``; inputs are multiplied by ``sqrt(gamma)`` (scikit-learn's
        ``PolynomialCountSketch`` parametrisation).
    complex : bool
        Complex weights (eq. 10-11): lower variance on non-negative data (eq. 22).
    real_output : bool
        For complex maps, return the real ``(n, 2D)`` matrix ``[Re Phi, Im Phi]`` from
        :meth:`transform` (so the map feeds real-valued estimators): its Gram matrix is
        exactly ``Re k_hat``. No effect on real maps or on :meth:`approx_kernel`.
    random_state : None, int or numpy.random.Generator
    n_jobs : int, optional
        Threads of the NumPy path (None: all available CPUs, not scikit-learn's one job).

    Notes
    -----
    Accepts sparse input (the first step is a projection of ``x~``).
    ``transform`` / ``transform_y`` return complex features (complex64 for float32
    input, complex128 for float64) for complex maps without ``real_output``;
    :meth:`approx_kernel` always returns ``Re(P conj(S)^T)``. Inputs are not rescaled:
    features grow like ``|x|^degree``.
    """

    #: whether the class supports ``complex=True``
    _supports_complex = True
    #: ``(q, m4)`` of the weight entries, real and complex (Theorem 2)
    _moments: ClassVar[dict] = {False: (1.0, 1.0), True: (0.5, 1.0)}
    accepts_sparse = True
    fit_reads = "shape"  # the random parameters depend on the dimension only
    _warns_value_overflow = True  # |x|^p overflows silently otherwise
    _parameter_constraints: ClassVar[dict] = {
        "n_features": int_range(1, 2**26),
        # an int, or an integer-valued float (checked by _check_params)
        "degree": [
            Interval(Integral, 1, 4096, closed="both"),
            Interval(Real, 1, 4096, closed="both"),
        ],
        "coef0": NON_NEGATIVE,
        "complex": ["boolean"],
        "real_output": ["boolean"],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
        "gamma": POSITIVE,
    }

    def __init__(
        self,
        n_features: int = 256,
        degree: int = 2,
        coef0: float = 0.0,
        complex: bool = False,
        real_output: bool = False,
        random_state=None,
        n_jobs=None,
        gamma: float = 1.0,
    ):
        self.n_features = n_features
        self.degree = degree
        self.coef0 = coef0
        self.complex = complex
        self.real_output = real_output
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.gamma = gamma

    # ------------------------------------------------------------------ parameters
    def _check_params(self):
        check_n_jobs(self.n_jobs)
        check_real(self.gamma, "gamma", minimum=0.0, strict=True)
        validate_positive_int(self.n_features, "n_features", maximum=2**26)
        deg = self.degree
        if _is_bool(deg) or not isinstance(deg, numbers.Real):
            raise TypeError(f"degree must be a positive integer, got {deg!r}.")
        if not (math.isfinite(deg) and float(deg) == int(deg)):
            raise ValueError(f"degree must be a positive integer, got {deg!r}.")
        if int(deg) < 1:
            raise ValueError(f"degree must be >= 1, got {deg!r}.")
        if int(deg) > 4096:
            raise ValueError(f"degree must be <= 4096, got {deg!r}.")
        c = self.coef0
        if _is_bool(c) or not isinstance(c, numbers.Real):
            raise TypeError(f"coef0 must be a non-negative float, got {c!r}.")
        if not math.isfinite(c) or c < 0:
            raise ValueError(
                f"coef0 must be finite and >= 0 (a negative coef0 does not give a positive "
                f"definite kernel), got {c!r}."
            )
        for name in ("complex", "real_output"):
            if not _is_bool(getattr(self, name)):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}.")
        if self.complex and not self._supports_complex:
            raise ValueError(f"{type(self).__name__} has no complex variant; use complex=False.")

    @property
    def _p(self) -> int:
        return int(self.degree)

    @property
    def _c(self) -> float:
        return float(self.coef0)

    @property
    def kernel(self) -> str:
        """Always ``"polynomial"``: ``(x.y + coef0)^degree``."""
        return "polynomial"

    @property
    def is_complex(self) -> bool:
        return bool(self.complex) and not bool(self.real_output)

    def _output_dim_for(self, n_features):
        """Columns of :meth:`transform`: ``2 n_features`` for complex maps with
        ``real_output=True``, else ``n_features``."""
        return int(n_features) * (2 if (self.complex and self.real_output) else 1)

    # ------------------------------------------------------------------ fitting
    def _fit(self, X, Y, xp, rng):
        # the random parameters depend on the input dimension only
        self.input_dim_ = self.n_features_in_ + (1 if self._c > 0 else 0)
        self._draw(rng)
        self._build()

    def _draw(self, rng):
        """Draw the random parameters (fitted attributes) with NumPy ``rng``."""
        raise NotImplementedError

    def _build(self):
        self._cache = {}
        self._consts = {}

    # ------------------------------------------------------------------ features
    def _prepare(self, X, xp, name="X"):
        # (gamma x.y + coef0)^p = (x'.y' + coef0)^p with x' = sqrt(gamma) x
        return X * math.sqrt(float(self.gamma)) if float(self.gamma) != 1.0 else X

    def _augment(self, X, xp, c):
        """``[X, sqrt(c)]`` (n, input_dim_) for ``c > 0``, else ``X`` (array-API paths)."""
        if c <= 0:
            return X
        col = xp.full((X.shape[0], 1), math.sqrt(c), dtype=X.dtype, device=device(X))
        return xp.concat([X, col], axis=1)

    def _raw_features(self, X, xp, c):
        """Features of validated ``X``: real (n, D), complex (n, D) or stacked (n, 2D) per
        ``complex`` / ``real_output``. ``X`` has ``n_features_in_`` columns and gets
        ``sqrt(c)`` appended (``c = coef0``), or is already augmented (``c = 0``)."""
        raise NotImplementedError

    def _log_feature_bound(self) -> float:
        """``L`` with ``|partial products of features| <= exp(p max(0, L + log|x~|))``."""
        return 0.5 * math.log(self.input_dim_)

    def _scaled_or_raw(self, X, xp, products: bool = False):
        """``(base, log_scale)``; ``log_scale`` is None when the raw features can neither
        overflow nor underflow (the usual case: ``base`` is then the features themselves).

        Otherwise ``base`` is computed from ``x~ / |x~|`` and ``log_scale = p log |x~|``
        (the features are homogeneous of degree ``p`` in ``x~``), so that
        :meth:`approx_kernel` stays finite wherever the kernel value is representable.
        ``products``: the raw features only where the sum of ``D`` products of two of them
        cannot overflow either (features up to ``sqrt(max / D)``; the Gram matrix of
        features of ~1e160 overflowed, and a complex one made ``inf - inf = NaN``).
        """
        p, c = self._p, self._c
        if X.shape[0] == 0:
            return self._raw_features(X, xp, c), None
        # amax <= |x~| <= sqrt(d~) amax, with amax = max_j |x~_j| (no over- or underflow)
        if sp.issparse(X):
            amax = abs(X).max(axis=1).toarray().ravel()
        else:
            amax = xp.max(xp.abs(X), axis=1)
        if c > 0:
            amax = xp.clip(amax, min=math.sqrt(c))
        fin = xp.finfo(X.dtype)
        hi = math.log(float(fin.max)) - 4.0  # features up to exp(hi) are safe
        if products:  # and a sum of D products of two of them
            hi = 0.5 * (hi - math.log(max(1, int(self.n_features))))
        lo = math.log(float(fin.tiny)) + 40.0  # and rows of norm^p down to exp(lo)
        big = float(_detach(xp.max(amax)))
        pos = xp.where(amax > 0, amax, xp.full_like(amax, math.inf))
        small = float(_detach(xp.min(pos)))
        L = self._log_feature_bound() + 0.5 * math.log(self.input_dim_)
        raw_ok = big == 0.0 or p * max(0.0, L + math.log(big)) < hi
        if raw_ok and (not math.isfinite(small) or p * math.log(small) > lo):
            return self._raw_features(X, xp, c), None
        Xa = self._augment(self._densify(X), xp, c)
        amax = xp.max(xp.abs(Xa), axis=1)  # (n,); |x~| = amax |x~ / amax| never overflows
        amax = xp.where(amax > 0, amax, xp.ones_like(amax))
        Xa = Xa / amax[:, None]
        norm = xp.sqrt(xp.sum(Xa * Xa, axis=1))
        norm = xp.where(norm > 0, norm, xp.ones_like(norm))
        Xa = Xa / norm[:, None]
        norm = norm * amax
        base = self._raw_features(Xa, xp, 0.0)
        return base, p * xp.log(norm)

    def _scaled_features(self, X, xp, side):
        base, log_scale = self._scaled_or_raw(X, xp)
        if log_scale is None:
            log_scale = xp.zeros(X.shape[0], dtype=X.dtype, device=device(X))
        return base, log_scale

    def _features(self, X, xp, side):
        base, log_scale = self._scaled_or_raw(X, xp)
        if log_scale is None:  # raw features below exp(hi): cannot overflow
            return base
        # +-inf where a feature overflows (with one warning), 0 where the base is 0 (never
        # 0 * inf = NaN)
        return self._checked_features(xp, scale_rows(xp, base, log_scale), side)

    def _finish(self, xp, re, im):
        """Combine real and imaginary parts per ``real_output`` (array-API path)."""
        if self.real_output:
            return xp.concat([re, im], axis=1)
        cdtype = complex_dtype(xp, re.dtype)
        return xp.astype(re, cdtype) + 1j * xp.astype(im, cdtype)

    def _new_output(self, n, dtype):
        """Empty NumPy output of shape (n, output_dim) and the right dtype."""
        if self.complex and not self.real_output:
            cdtype = np.complex64 if dtype == np.float32 else np.complex128
            return np.empty((n, self.n_features), dtype=cdtype)
        return np.empty((n, self.output_dim), dtype=dtype)

    def _store(self, out, lo, hi, re, im=None):
        """Write a row block of the product into the NumPy output."""
        D = int(self.n_features)
        if im is None:
            out[lo:hi] = re
            return
        if self.real_output:
            out[lo:hi, :D] = re
            out[lo:hi, D:] = im
        else:
            o = out[lo:hi]
            o.real = re
            o.imag = im

    def _scaled_pair(self, X, Y, xp):
        P, sx = self._scaled_or_raw(X, xp, products=True)
        S, sy = (P, sx) if Y is X else self._scaled_or_raw(Y, xp, products=True)
        zx = xp.zeros(P.shape[0], dtype=P.real.dtype, device=device(P)) if sx is None else sx
        zy = xp.zeros(S.shape[0], dtype=P.real.dtype, device=device(P)) if sy is None else sy
        return P, zx, S, zy

    def _exact_kernel_plan(self, X, Y, xp):
        """:meth:`FeatureMap._exact_kernel_plan` with the bound ``(d max |X| max |Y| +
        coef0)^degree`` of the kernel (where it is in range, no pass over the output
        looks for an overflow)."""
        bound = log_polynomial_bound(log_inner_bound(xp, X, Y), 1.0, self._c, self._p)
        return self._exact_kernel, bound

    def _exact_kernel(self, X, Y, xp):
        """The exact kernel ``(X Y^T + coef0)^degree`` that this map estimates, (n, m)."""
        if X.shape[0] == 0 or Y.shape[0] == 0:  # polynomial_kernel rejects empty inputs
            return xp.zeros((X.shape[0], Y.shape[0]), dtype=X.dtype, device=device(X))
        return polynomial_kernel(X, Y, degree=self._p, coef0=self._c)

    # ------------------------------------------------------------------ variance
    def _variance_from_stats(self, G, N, S, kind, gaps):
        q, m4 = self._moments[bool(self.complex)]
        return iid_sketch_variance(
            G, N, S, self._p, self.n_features, q=q, m4=m4, kind=kind, gaps=gaps
        )

    def _unit_statistics(self, X, Y, xp):
        """``(G, N, S, (A, B))`` (:func:`pair_terms`) of the unit rows ``x~ / |x~|`` and
        ``y~ / |y~|``, and ``log(|x~|^2 |y~|^2)``, each (n, m). The augmented coordinate
        of a unit row, ``sqrt(coef0) / |x~|``, is passed apart, so ``A`` and ``B`` keep
        their digits where it dominates (small rows).

        Every variance formula is homogeneous of degree ``2p`` in ``x~`` and in ``y~``, as
        ``k^2 = G^(2p)`` is, so the variances are formed on unit rows and scaled back in
        log space: they overflow only where the variance itself leaves the floating-point
        range (the raw powers gave ``inf - inf = nan`` there), and the relative variance
        is finite wherever it is.
        """

        def unit(A):
            return unit_rows(self._augment(A, xp, self._c))  # (n, d~), (n,)

        Xu, lx = unit(X)
        Yu, ly = (Xu, lx) if Y is X else unit(Y)
        if self._c > 0:  # [x; a_x] / |x~|: the rows and the squares of their last entry
            G, N, S, A, B = pair_terms(Xu[:, :-1], Yu[:, :-1], Xu[:, -1] ** 2, Yu[:, -1] ** 2)
        else:
            G, N, S, A, B = pair_terms(Xu, Yu)
        return G, N, S, (A, B), lx[:, None] + ly[None, :]

    def _scaled_variance(self, X, Y, xp, kind):
        with np.errstate(over="ignore", invalid="ignore"):  # checked below
            G, N, S, A, B = pair_terms(X, Y, self._c)  # the raw rows: no extra pass if finite
            V = _clip0(xp, self._variance_from_stats(G, N, S, kind, (A, B)))
        if bool(xp.all(xp.isfinite(V))):
            return V
        G, N, S, gaps, log_n = self._unit_statistics(X, Y, xp)
        V = _clip0(xp, self._variance_from_stats(G, N, S, kind, gaps))
        return times_exp(xp, V, self._p * log_n)  # V |x~|^(2p) |y~|^(2p)

    def _variance(self, X, Y, xp):
        # E(Re k_hat - k)^2, the variance of approx_kernel (derived,
        # docs/derivations/dot_product.md); for real maps the paper's Theorem 2 / eq. 28 / 33
        return self._scaled_variance(X, Y, xp, "real")

    def _log_relative_variance(self, X, Y, xp):
        # log(V / k^2) of the unit rows (scale-free), in float64: the variance ~ k^2 leaves
        # float32's range (k ~ 1e-19 for inputs of norm ~1e-5, degree 2) where the ratio is
        # moderate
        Xw, Yw, dtype = widen_to_float64(xp, X, Y)
        G, N, S, gaps, _ = self._unit_statistics(Xw, Yw, xp)
        # a zero of the kernel (orthogonal one-hot rows, say) within the rounding of the
        # unit rows' product, (d + 2) eps, is a zero: the product rounds to 1e-17 or to 0
        # depending on the BLAS (NumPy's fused multiply-adds, not torch's), a finite log
        # ratio of ~150 on one backend where the other gives inf
        G = xp.where(xp.abs(G) <= (Xw.shape[1] + 2) * _EPS64, xp.zeros_like(G), G)
        V = _clip0(xp, self._variance_from_stats(G, N, S, "real", gaps))
        with np.errstate(invalid="ignore"):
            out = safe_log(xp, V) - (2.0 * self._p) * safe_log(xp, xp.abs(G))
        # V = 0 (a zero augmented row: every feature is 0, the estimate exactly k = 0):
        # exact, -inf, not log(0 / 0)
        out = xp.where(V == 0, xp.full_like(out, -math.inf), out)
        return narrow_to(xp, out, dtype)

    def _complex_variance(self, X, Y, xp):
        # E|k_hat - k|^2 of the complex estimate: the paper's variance (Theorem 2,
        # eq. 16-21; eq. 28/33 for TensorSRHT)
        return self._scaled_variance(X, Y, xp, "complex")

    # ------------------------------------------------------------------ shared engine
    def _weight_matrix(self):
        """Real (input_dim_, ncols) matrix: per degree ``[W_i]`` (real) or ``[Re W_i, Im W_i]``
        (complex), each ``D`` columns, ``D^-1/2`` folded into degree 1; or None."""
        return None

    def _dense_features(self, X, xp, W, c):
        """``prod_i X~ W_i`` for the column blocks of ``W`` (see :meth:`_weight_matrix`)."""
        D, p, cplx = int(self.n_features), self._p, bool(self.complex)
        if not is_numpy_namespace(xp):
            Wb = self._param("W", xp, X)
            U = self._augment(X, xp, c) @ Wb
            if not cplx:
                F = U[:, :D]
                for i in range(1, p):
                    F = F * U[:, i * D : (i + 1) * D]
                return F
            re, im = U[:, :D], U[:, D : 2 * D]
            for i in range(1, p):
                a, b = U[:, 2 * i * D : (2 * i + 1) * D], U[:, (2 * i + 1) * D : (2 * i + 2) * D]
                re, im = re * a - im * b, re * b + im * a
            return self._finish(xp, re, im)

        Wn = self._param("W", np, X)
        n, ncols = X.shape[0], Wn.shape[1]
        out = self._new_output(n, X.dtype)
        extra = (math.sqrt(c),) if c > 0 else ()

        def block(lo, hi):
            U = np.empty((hi - lo, ncols), dtype=X.dtype)
            _matmul_augmented(X[lo:hi], extra, Wn, U)
            if not cplx:
                if p == 1:
                    out[lo:hi] = U
                    return
                o = out[lo:hi]
                np.multiply(U[:, :D], U[:, D : 2 * D], out=o)
                for i in range(2, p):
                    o *= U[:, i * D : (i + 1) * D]
                return
            re, im = U[:, :D], U[:, D : 2 * D]
            for i in range(1, p):
                a, b = U[:, 2 * i * D : (2 * i + 1) * D], U[:, (2 * i + 1) * D : (2 * i + 2) * D]
                t = re * b
                u = im * b
                re *= a
                re -= u
                im *= a
                im += t
            self._store(out, lo, hi, re, im)

        map_row_blocks(block, n, ncols, X.dtype.itemsize, n_jobs=self.n_jobs)
        return out

    def _param(self, name, xp, like):
        """Cached copy of ``self._consts[name]`` in ``like``'s dtype and backend."""
        return param_cache(self, name, xp, like, self._consts)


def _complex_pair(W):
    """Stack ``[Re W_i, Im W_i]`` per degree for (p, d, D) complex ``W`` -> (d, 2pD)."""
    p = W.shape[0]
    blocks = []
    for i in range(p):
        blocks += [W[i].real, W[i].imag]
    return np.ascontiguousarray(np.concatenate(blocks, axis=1))


# ============================================================== i.i.d. sketches
class _IIDSketch(DotProductFeatureMap):
    """``Phi(x) = D^-1/2 [prod_i w_(i,l)^T x~]_l`` with i.i.d. weights (eq. 5, 10-11).

    Fitted attributes: ``weights_`` (degree, input_dim_, n_features), real (float64) or
    complex (complex128). Tests and power users may edit it and call ``_build()``.
    """

    def _draw_weights(self, rng, shape):
        raise NotImplementedError

    def _draw(self, rng):
        shape = (self._p, self.input_dim_, int(self.n_features))
        self.weights_ = self._draw_weights(rng, shape)

    def _build(self):
        super()._build()
        W = np.array(self.weights_, copy=True)
        # |x~ . w| <= |x~| max_l |w_l| per degree
        self._consts["log_wmax"] = float(
            np.log(np.max(np.sqrt(np.sum(np.abs(W) ** 2, axis=1))) + 1e-300)
        )
        W[0] = W[0] / math.sqrt(int(self.n_features))  # fold D^-1/2 into degree 1
        if np.iscomplexobj(W):
            self._consts["W"] = _complex_pair(W)
        else:
            self._consts["W"] = np.ascontiguousarray(np.concatenate(list(W), axis=1))

    def _raw_features(self, X, xp, c):
        return self._dense_features(X, xp, self._consts["W"], c)

    def _log_feature_bound(self) -> float:
        return self._consts["log_wmax"]


class RademacherSketch(_IIDSketch):
    """Rademacher sketch for ``(x.y + coef0)^degree`` (eq. 5; complex: eq. 10-11, Ex. 4).

    Real: weights uniform on ``{-1, 1}``. Complex: uniform on ``{1, -1, i, -i}`` (Ex. 4,
    ``q = 1/2``, ``m4 = 1``; the same estimate as Ex. 2's ``(v + iw)/sqrt 2``): each weight
    is purely real or imaginary, so ``X z = X Re z + i X Im z`` costs two real matmuls.
    Variance: eq. 18 (real); for complex weights eq. 19, ``E|k_hat - k|^2``, is
    :meth:`complex_variance`, and :meth:`variance` is the variance of the real part
    (what :meth:`approx_kernel` returns; smaller, derived).

    Parameters
    ----------
    n_features, degree, coef0, complex, real_output, random_state, n_jobs, gamma
        See :class:`DotProductFeatureMap`.

    Attributes
    ----------
    input_dim_ : int
        ``d~ = d + 1`` for ``coef0 > 0`` (the appended ``sqrt(coef0)``), else ``d``.
    weights_ : ndarray (degree, input_dim_, n_features)
        float64 (real) or complex128 (complex); column ``l`` of slice ``i`` is ``w_(i,l)``.
    """

    _moments: ClassVar[dict] = {False: (1.0, 1.0), True: (0.5, 1.0)}

    def _draw_weights(self, rng, shape):
        if not self.complex:
            return 2.0 * rng.integers(0, 2, size=shape).astype(np.float64) - 1.0
        return np.array([1.0, 1.0j, -1.0, -1.0j])[rng.integers(0, 4, size=shape)]


class GaussianSketch(_IIDSketch):
    """Gaussian sketch for ``(x.y + coef0)^degree`` (eq. 5; complex: Ex. 3).

    Real: ``w ~ N(0, I)`` (``m4 = 3``); complex: ``(v + i w)/sqrt 2`` with ``v, w ~ N(0, I)``
    (``q = 1/2``, ``m4 = 2``). Variance: eq. 20 (real); for complex weights eq. 21,
    ``E|k_hat - k|^2``, is :meth:`complex_variance`, and :meth:`variance` is the variance
    of the real part (what :meth:`approx_kernel` returns; smaller, derived).

    Parameters
    ----------
    n_features, degree, coef0, complex, real_output, random_state, n_jobs, gamma
        See :class:`DotProductFeatureMap`.

    Attributes
    ----------
    input_dim_ : int
        ``d~ = d + 1`` for ``coef0 > 0`` (the appended ``sqrt(coef0)``), else ``d``.
    weights_ : ndarray (degree, input_dim_, n_features)
        float64 (real) or complex128 (complex); column ``l`` of slice ``i`` is ``w_(i,l)``.
    """

    _moments: ClassVar[dict] = {False: (1.0, 3.0), True: (0.5, 2.0)}

    def _draw_weights(self, rng, shape):
        if not self.complex:
            return rng.standard_normal(shape)
        v = rng.standard_normal(shape)
        w = rng.standard_normal(shape)
        return (v + 1j * w) / math.sqrt(2.0)


# ============================================================== TensorSRHT
#: auto mode uses the dense ``diag(z) H P`` matrices while their weight matrix is at most
#: this many bytes (float64)
_DENSE_MAX_BYTES = 64 << 20


class TensorSRHT(DotProductFeatureMap):
    """TensorSRHT for ``(x.y + coef0)^degree`` (Algorithm 1; complex: Sec. 4.2).

    ``x~`` is zero-padded to ``d = 2^ceil(log2 d~)`` and, for every block ``b < B =
    ceil(D/d)`` and degree ``i``, a sign vector ``z`` (uniform on ``{-1, 1}``, or on
    ``{1, -1, i, -i}`` for ``complex=True``) and a permutation ``pi`` are drawn (per
    (block, degree): erratum 4); ``U_(b,i) = FWHT(x~ * z)[pi]``, ``Phi_b = prod_i U_(b,i)``,
    and ``Phi`` is the first ``D`` entries of the concatenated blocks times ``D^-1/2``.
    Unbiased; for ``degree = 1`` and ``D`` a multiple of ``d`` it is exact. Variance:
    eq. 28 (real) with the padded ``d``; for ``complex=True`` eq. 33, ``E|k_hat - k|^2``,
    is :meth:`complex_variance`, and :meth:`variance` is the variance of the real part
    (what :meth:`approx_kernel` returns; smaller, derived).

    Parameters
    ----------
    n_features, degree, coef0, complex, real_output, random_state, n_jobs, gamma
        See :class:`DotProductFeatureMap`.
    method : {"auto", "dense", "fwht"}
        How to evaluate ``(x~ * z) H_d P``: ``"fwht"`` runs the Walsh-Hadamard transform
        (:func:`kernelkit._backend.fwht.fwht`) on the ``(n, B, d)`` blocks; ``"dense"``
        multiplies by the precomputed ``(d~, D)`` matrices ``diag(z) H_d P`` (per degree),
        fastest in BLAS for small ``d``. ``"auto"`` takes ``"dense"`` when its per-point
        cost ``d~`` is at most the FWHT's (``sum`` of the Kronecker factors of ``d``, +32)
        and its matrices fit in 64 MiB. The features are the same either way (up to
        rounding).

    Attributes
    ----------
    padded_dim_ : int
        ``d``.
    n_blocks_ : int
        ``B``.
    signs_ : ndarray (degree, B, d)
        float64 ``+-1`` or complex128 in ``{1, -1, i, -i}``.
    permutations_ : ndarray (degree, B, d), int64
    """

    def __init__(
        self,
        n_features: int = 256,
        degree: int = 2,
        coef0: float = 0.0,
        complex: bool = False,
        real_output: bool = False,
        method: str = "auto",
        random_state=None,
        n_jobs=None,
        gamma: float = 1.0,
    ):
        super().__init__(
            n_features=n_features,
            degree=degree,
            coef0=coef0,
            complex=complex,
            real_output=real_output,
            random_state=random_state,
            n_jobs=n_jobs,
            gamma=gamma,
        )
        self.method = method

    _parameter_constraints: ClassVar[dict] = {
        **DotProductFeatureMap._parameter_constraints,
        "method": [StrOptions({"auto", "dense", "fwht"})],
    }

    def _check_params(self):
        super()._check_params()
        if self.method not in ("auto", "dense", "fwht"):
            raise ValueError(f"method must be 'auto', 'dense' or 'fwht', got {self.method!r}.")

    def _draw(self, rng):
        d = next_power_of_two(self.input_dim_)
        D, p = int(self.n_features), self._p
        B = -(-D // d)
        self.padded_dim_ = d
        self.n_blocks_ = B
        if self.complex:
            self.signs_ = np.array([1.0, 1.0j, -1.0, -1.0j])[rng.integers(0, 4, size=(p, B, d))]
        else:
            self.signs_ = 2.0 * rng.integers(0, 2, size=(p, B, d)).astype(np.float64) - 1.0
        self.permutations_ = rng.permuted(np.broadcast_to(np.arange(d), (p, B, d)), axis=-1)

    def _use_dense(self) -> bool:
        if self.method != "auto":
            return self.method == "dense"
        d, din = self.padded_dim_, self.input_dim_
        cols = int(self.n_features) * self._p * (2 if self.complex else 1)
        return din <= sum(hadamard_factors(d)) + 32 and din * cols * 8 <= _DENSE_MAX_BYTES

    def _build(self):
        super()._build()
        d, B, D, p = self.padded_dim_, self.n_blocks_, int(self.n_features), self._p
        din = self.input_dim_
        z = np.array(self.signs_, copy=True)
        z[0] = z[0] / math.sqrt(D)  # fold D^-1/2 into degree 1
        perm = np.asarray(self.permutations_, dtype=np.int64)
        # column l of block b reads entry pi_b(l) of the block's transform
        idx = (perm + (np.arange(B) * d)[None, :, None]).reshape(p, B * d)[:, :D]  # (p, D)
        self._dense = self._use_dense()
        if self._dense:
            H = hadamard(d)
            W = np.empty((p, din, D), dtype=z.dtype)
            for i in range(p):
                # W_i[j, b d + l] = z_(b,i)[j] H[j, pi_(b,i)(l)]
                Wi = (z[i].T[:, :, None] * H[:, perm[i]]).reshape(d, B * d)  # (d, B d)
                W[i] = Wi[:din, :D]
            self._consts["W"] = (
                _complex_pair(W)
                if np.iscomplexobj(W)
                else np.ascontiguousarray(np.concatenate(list(W), axis=1))
            )
        else:
            self._consts["z_re"] = np.ascontiguousarray(z.real)  # (p, B, d)
            if self.complex:
                self._consts["z_im"] = np.ascontiguousarray(z.imag)
            self._consts["idx"] = np.ascontiguousarray(idx)

    def _raw_features(self, X, xp, c):
        if self._dense:
            return self._dense_features(X, xp, self._consts["W"], c)
        return self._fwht_features(X, xp, c)

    def _transforms(self, Xp, xp, i, zname):
        """``FWHT(x~ * z_(b,i))[pi_(b,i)]`` for all blocks: (k, D) from padded (k, d)."""
        z = self._param(zname, xp, Xp)[i]  # (B, d)
        k, d, B = Xp.shape[0], self.padded_dim_, self.n_blocks_
        V = fwht(xp.reshape(Xp[:, None, :] * z[None, :, :], (k * B, d)))
        idx = self._param("idx", xp, Xp)[i]  # (D,)
        return xp.take(xp.reshape(V, (k, B * d)), idx, axis=1)

    def _fwht_features(self, X, xp, c):
        d, din, p = self.padded_dim_, self.input_dim_, self._p
        cplx = bool(self.complex)

        def product(Xp):
            re = self._transforms(Xp, xp, 0, "z_re")
            im = self._transforms(Xp, xp, 0, "z_im") if cplx else None
            for i in range(1, p):
                a = self._transforms(Xp, xp, i, "z_re")
                if not cplx:
                    re = re * a
                    continue
                b = self._transforms(Xp, xp, i, "z_im")
                re, im = re * a - im * b, re * b + im * a
            return re, im

        def padded(Xb):
            Xb = self._densify(Xb)  # the transform needs every padded coordinate
            k = Xb.shape[0]
            parts = [Xb]
            if c > 0:
                parts.append(xp.full((k, 1), math.sqrt(c), dtype=Xb.dtype, device=device(Xb)))
            if d > din:
                parts.append(xp.zeros((k, d - din), dtype=Xb.dtype, device=device(Xb)))
            return xp.concat(parts, axis=1) if len(parts) > 1 else Xb

        if not is_numpy_namespace(xp):
            re, im = product(padded(X))
            return re if not cplx else self._finish(xp, re, im)

        n = X.shape[0]
        out = self._new_output(n, X.dtype)

        def block(lo, hi):
            re, im = product(padded(X[lo:hi]))
            self._store(out, lo, hi, re, im)

        width = self.n_blocks_ * d * (2 if cplx else 1) * 2
        map_row_blocks(block, n, width, X.dtype.itemsize, n_jobs=self.n_jobs)
        return out

    def _variance_from_stats(self, G, N, S, kind, gaps):
        return tensor_srht_variance(
            G,
            N,
            S,
            self._p,
            self.n_features,
            self.padded_dim_,
            complex=bool(self.complex),
            kind=kind,
            gaps=gaps,
        )


# ============================================================== TensorSketch
class TensorSketch(DotProductFeatureMap):
    """TensorSketch (Pham & Pagh 2013) for ``(x.y + coef0)^degree``.

    For each degree ``i`` a hash ``h_i: [d~] -> [D]`` and signs ``s_i: [d~] -> {-1, 1}``
    give the count sketch ``C_i(x)_k = sum_(h_i(j) = k) s_i(j) x~_j``; the features are
    ``Re IFFT(prod_i FFT C_i(x))`` (no scaling): a count sketch of ``x~^(tensor p)``. Real
    output, unbiased. The same construction as scikit-learn's
    :class:`~sklearn.kernel_approximation.PolynomialCountSketch`.

    Fitted attributes: ``hashes_`` (degree, input_dim_) int64 in ``[0, D)`` and ``signs_``
    (degree, input_dim_) float64 ``+-1``. The count sketches are kept as a sparse
    ``(d~, p D)`` matrix (one non-zero per coordinate and degree), so the NumPy path costs
    ``O(p (nnz + D log D))`` per row and ``O(p d~)`` memory whatever ``D``; other array-API
    backends apply its dense form in one matrix product.

    Variance (derived here; the paper gives none): see :func:`tensor_sketch_variance`.
    The estimate is real, so ``kind`` makes no difference.

    Parameters
    ----------
    n_features, degree, coef0, random_state, n_jobs, gamma
        See :class:`DotProductFeatureMap` (TensorSketch has no complex variant).
    """

    _supports_complex = False
    _parameter_constraints: ClassVar[dict] = {
        key: value
        for key, value in DotProductFeatureMap._parameter_constraints.items()
        if key not in ("complex", "real_output")  # not parameters of TensorSketch
    }

    def __init__(
        self,
        n_features: int = 256,
        degree: int = 2,
        coef0: float = 0.0,
        random_state=None,
        n_jobs=None,
        gamma: float = 1.0,
    ):
        super().__init__(
            n_features=n_features,
            degree=degree,
            coef0=coef0,
            complex=False,
            real_output=False,
            random_state=random_state,
            n_jobs=n_jobs,
            gamma=gamma,
        )

    def _draw(self, rng):
        shape = (self._p, self.input_dim_)
        self.hashes_ = rng.integers(0, int(self.n_features), size=shape)
        self.signs_ = 2.0 * rng.integers(0, 2, size=shape).astype(np.float64) - 1.0

    def _build(self):
        super()._build()
        p, din, D = self._p, self.input_dim_, int(self.n_features)
        cols = np.asarray(self.hashes_, dtype=np.int64) + D * np.arange(p)[:, None]  # (p, d~)
        rows = np.broadcast_to(np.arange(din), (p, din))
        # (d~, p D) count-sketch matrices, stored sparse: one non-zero per input coordinate
        # and degree, so a row costs O(p nnz) to sketch and no d~ x p D array is formed
        self._count_sketch = sp.csr_array(
            (np.asarray(self.signs_, dtype=np.float64).ravel(), (rows.ravel(), cols.ravel())),
            shape=(din, p * D),
        )

    def _sketch_matrix(self, dtype):
        """The sparse count-sketch matrices (d~, p D) in ``dtype`` (cached)."""
        key = ("count_sketch", np.dtype(dtype).str)
        if key not in self._cache:
            self._cache[key] = self._count_sketch.astype(dtype)
        return self._cache[key]

    def _raw_features(self, X, xp, c):
        D, p = int(self.n_features), self._p
        if not is_numpy_namespace(xp):
            half = X.dtype in (xp.float16, getattr(xp, "bfloat16", xp.float16))
            Xc = xp.astype(X, xp.float32) if half else X  # half FFTs: unsupported or lossy
            if "C" not in self._consts:  # dense on the array-API backends (GPU products)
                self._consts["C"] = self._count_sketch.toarray()
            U = self._augment(Xc, xp, c) @ self._param("C", xp, Xc)  # (n, p D)
            if U.shape[0] == 0:  # torch's FFT of no rows raises (MKL: inconsistent
                out = U[:, :D]  # configuration); no rows, no products (and autograd's graph)
            else:
                F = xp.fft.rfft(U[:, :D], axis=-1)
                for i in range(1, p):
                    F = F * xp.fft.rfft(U[:, i * D : (i + 1) * D], axis=-1)
                out = xp.fft.irfft(F, n=D, axis=-1)  # (n, D)
            return xp.astype(out, X.dtype) if half else out

        import scipy.fft as sfft

        C = self._sketch_matrix(X.dtype)
        n, d = X.shape
        out = np.empty((n, D), dtype=X.dtype)
        # the appended coordinate sqrt(c) adds its signed column to every row
        const = math.sqrt(c) * C[[d]].toarray() if c > 0 else None  # (1, p D)
        Cx = C[:d] if c > 0 else C

        def block(lo, hi):
            # count sketches of the rows: O(p nnz) with the sparse matrix (a sparse X gives
            # a sparse product, a dense X a dense one)
            Ut = Cx.T @ X[lo:hi].T  # (p D, k)
            Ut = Ut.toarray() if sp.issparse(Ut) else Ut
            # (k, p D) as a strided view: the FFT reads the strided rows itself, which is
            # half the time of a C-ordered transposed copy (2x the whole transform for
            # small d, where the copy dominated)
            U = Ut.astype(X.dtype, copy=False).T
            if const is not None:
                U += const
            F = sfft.rfft(U.reshape(hi - lo, p, D), axis=-1, overwrite_x=True)
            prod = F[:, 0]
            for i in range(1, p):
                prod *= F[:, i]
            out[lo:hi] = sfft.irfft(prod, n=D, axis=-1, overwrite_x=True)

        map_row_blocks(block, n, p * D, X.dtype.itemsize, n_jobs=self.n_jobs)
        return out

    def _variance_from_stats(self, G, N, S, kind, gaps):
        return tensor_sketch_variance(G, N, S, self._p, self.n_features, gaps=gaps)
