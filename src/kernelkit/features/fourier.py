"""Random Fourier features for the Gaussian kernel (Rahimi & Recht 2007).

Reference forms from Wacker, Kanagawa & Filippone, "Improved Random Features for Dot
Product Kernels" (equation numbers below refer to it; the variances are derived in
``docs/derivations/dot_product.md``):

* eq. 59 (real): ``phi(x) = sqrt(2/D) [cos(w_j^T x), sin(w_j^T x)]_{j <= D/2}``, all cosines
  first, then all sines, ``w_j ~ N(0, I / l^2)``; ``phi(x)^T phi(y) =
  (2/D) sum_j cos(w_j^T (x - y))``.
* eq. 60 (complex): ``phi(x) = D^{-1/2} [exp(i w_j^T x)]_{j <= D}``; the estimate
  ``phi(x)^T conj(phi(y)) = D^{-1} sum_j exp(i w_j^T (x - y))`` is unbiased for the
  kernel, its real part is eq. 59 with ``2D`` features (footnote 19).

Both are unbiased for ``k(x, y) = exp(-|x - y|^2 / (2 l^2))`` with i.i.d. or
block-orthogonal (ORF) frequencies, and approximately unbiased with structured Hadamard
frequencies (SORF; :func:`~kernelkit.features.sampling.structured_hadamard_projection`),
whose rows have a fixed norm instead of a chi-distributed one: the bias is
``O(1/sqrt(d))`` (Yu et al. 2016) and shrinks as the (padded) dimension grows.

:class:`SphericalRandomFeatures` (SRF, Pennington et al. 2015) reuses the eq. 59 features
with frequencies drawn from a Gaussian-mixture spectral density fitted to the polynomial
kernel eq. 57 on the unit sphere.

The cos(w^T x + b) form of footnote 18 is :class:`~kernelkit.features.TrigRF` with
``kernel="gaussian"``.
"""

from __future__ import annotations

import functools
import math
from numbers import Real
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions

from .._backend import device, is_numpy_namespace, validate_positive_float, validate_positive_int
from .._backend.parallel import check_n_jobs
from .._backend.params import N_JOBS, POSITIVE, RANDOM_STATE, int_range
from ._base import (
    FeatureMap,
    _detach,
    as_real_dtype,
    check_bool,
    check_real,
    complex_dtype,
    gaussian_log_kernel,
    param_cache,
    real_gram,
    safe_log,
    sq_norms,
)
from ._trig import trig_features, use_half
from .sampling import SAMPLERS, draw_projection

__all__ = [
    "RandomFourierFeatures",
    "SphericalRandomFeatures",
    "fit_srf_mixture",
    "rff_variance",
]


def rff_variance(
    k, n_features: int, *, complex: bool = False, part: str = "real", one_minus_k2=None
):
    """Analytic variance of the random Fourier feature estimate for i.i.d. frequencies.

    With ``k = k(x, y) = exp(-|delta|^2 / 2)`` (``delta = (x - y) / l``) and
    ``k(2 delta) = k^4``, one frequency gives ``E cos^2(w^T delta) = (1 + k^4) / 2`` and
    ``E sin^2(w^T delta) = (1 - k^4) / 2`` (**derived**; checked by Monte Carlo in the
    tests):

    * real, eq. 59, ``D`` even (``D/2`` frequencies):
      ``Var = (2/D)((1 + k^4)/2 - k^2) = (1 + k^4 - 2 k^2) / D``;
    * real, ``D`` odd: ``(D-1)/2`` cos/sin pairs plus one phase feature
      ``sqrt(2/D) cos(w^T x + b)``, ``b ~ U[0, 2 pi)`` (unbiased, see
      :class:`RandomFourierFeatures`): ``Var = [2 (D-1) ((1 + k^4)/2 - k^2) + (1 + k^4)/2
      + 1/2 - k^2] / D^2``;
    * complex, eq. 60 (``D`` frequencies), real part (what ``approx_kernel`` returns):
      ``Var Re = ((1 + k^4)/2 - k^2) / D`` — eq. 59 with ``2D`` features;
    * complex, ``part="complex"``: ``E|k_hat - k|^2 = (1 - k^2) / D``.

    Parameters
    ----------
    k : array
        Kernel values in ``[0, 1]``.
    n_features : int
        ``D`` (the constructor's ``n_features``).
    complex : bool
        Eq. 60 instead of eq. 59.
    part : {"real", "complex"}
        ``"complex"`` (complex maps only): mean squared modulus ``E|k_hat - k|^2``.
    one_minus_k2 : array like ``k``, optional
        ``1 - k^2 = -expm1(-|delta|^2)`` computed from the distance: accurate where ``k``
        rounds to 1 (``|delta| < 1e-8``), where ``1 - k^2`` from ``k`` is 0.

    Returns
    -------
    array like ``k``, non-negative.
    """
    if part not in ("real", "complex"):
        raise ValueError(f"part must be 'real' or 'complex', got {part!r}.")
    q = 1.0 - k * k if one_minus_k2 is None else one_minus_k2
    # Var cos(w^T delta) for one frequency, (1 + k^4)/2 - k^2 = (1 - k^2)^2 / 2 >= 0 (the
    # squared form keeps its digits for nearby points, where the other cancels)
    pair = 0.5 * q * q
    D = int(n_features)
    if complex:
        if part == "complex":
            return q / D
        return pair / D
    m, r = divmod(D, 2)
    out = 4.0 * m * pair
    if r:
        out = out + (pair + 0.5)
    return out / (D * D)


class RandomFourierFeatures(FeatureMap):
    """Random Fourier features for the Gaussian kernel (eq. 59 real, eq. 60 complex).

    Estimates ``k(x, y) = exp(-|x - y|^2 / (2 l^2))`` (``= exp(-gamma |x - y|^2)``) by
    ``Re(phi(x)^T conj(phi(y)))``. Accepts sparse input, as scikit-learn's ``RBFSampler``.

    Parameters
    ----------
    n_features : int, default=256
        ``D``. Real maps (eq. 59) use ``D // 2`` frequencies, each giving a cosine and a
        sine column; for odd ``D`` the last column is a phase feature
        ``sqrt(2/D) cos(w^T x + b)`` with ``b ~ U[0, 2 pi)`` so that the estimate stays
        unbiased (a library choice; the paper assumes even ``D``). Complex maps (eq. 60)
        use ``D`` frequencies.
    lengthscale : float, default=1.0
        ``l``; frequencies are ``N(0, I / l^2)``.
    gamma : float, optional
        scikit-learn's parametrisation (``RBFSampler``): ``exp(-gamma |x - y|^2)``, i.e.
        ``l = 1 / sqrt(2 gamma)``. Overrides ``lengthscale`` when given.
    sampler : {"iid", "orthogonal", "sorf", "hadamard", "halton"}, default="iid"
        How the frequency directions are drawn
        (:func:`~kernelkit.features.draw_projection`): i.i.d. Gaussian; block-orthogonal
        Haar blocks with chi-distributed norms (ORF, exactly ``N(0, I)`` marginals, so
        still unbiased); structured Hadamard blocks (SORF, Yu et al. 2016; only
        approximately unbiased, bias ``O(1/sqrt(d))``); SORF directions with chi norms
        (ORF-Had); randomised Halton points (Halton-R).
    complex : bool, default=False
        Eq. 60: complex features ``D^{-1/2} exp(i W x)`` (complex64 / complex128).
    real_output : bool, default=False
        With ``complex=True``: return the real ``(n, 2D)`` matrix ``[Re phi, Im phi]``
        instead, whose Gram matrix is ``Re(phi phi^H)`` — exactly eq. 59 with ``2D``
        features and the same frequencies. Ignored for real maps.
    random_state : None, int or numpy.random.Generator
    n_jobs : int, optional
        Threads of the NumPy path (None: all available CPUs, not scikit-learn's one job).

    Attributes
    ----------
    projection_ : ndarray, shape (n_frequencies, d)
        Unit-lengthscale frequencies (rows ~ N(0, I)); the map uses ``projection_ / l``.
    extra_projection_ : ndarray, shape (1, d) or (0, d)
        Unit-lengthscale frequency of the extra feature for odd real ``D`` (empty
        otherwise).
    offset_ : ndarray, shape (1,) or (0,)
        Phase of the extra feature for odd real ``D`` (empty otherwise).
    lengthscale_ : float
        Effective lengthscale (from ``gamma`` when given).
    n_features_in_ : int

    Notes
    -----
    The same seed draws the same frequencies for ``RandomFourierFeatures(2D)`` (real) and
    ``RandomFourierFeatures(D, complex=True)``, so the latter's ``real_output=True``
    features equal the former's exactly. :meth:`variance` is the i.i.d. formula
    (:func:`rff_variance`); for ``"orthogonal"`` and ``"halton"`` it is an upper bound in
    practice; ``"sorf"`` and ``"hadamard"`` estimates are biased, their error can exceed
    it many times for small ``d``, and :meth:`variance` warns.
    """

    fit_reads = "shape"  # the frequencies need the dimension only

    accepts_sparse = True
    _parameter_constraints: ClassVar[dict] = {
        "n_features": int_range(1, 2**26),
        "lengthscale": POSITIVE,
        "gamma": [None, *POSITIVE],
        "sampler": [StrOptions(set(SAMPLERS))],
        "complex": ["boolean"],
        "real_output": ["boolean"],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        n_features: int = 256,
        lengthscale: float = 1.0,
        gamma: float | None = None,
        sampler: str = "iid",
        complex: bool = False,
        real_output: bool = False,
        random_state=None,
        n_jobs=None,
    ):
        self.n_features = n_features
        self.lengthscale = lengthscale
        self.gamma = gamma
        self.sampler = sampler
        self.complex = complex
        self.real_output = real_output
        self.random_state = random_state
        self.n_jobs = n_jobs

    # ------------------------------------------------------------------ parameters
    @property
    def kernel(self) -> str:
        """Always ``"gaussian"`` (the only kernel these features estimate)."""
        return "gaussian"

    def _effective_lengthscale(self) -> float:
        if self.gamma is not None:
            return 1.0 / math.sqrt(2.0 * validate_positive_float(self.gamma, "gamma"))
        return validate_positive_float(self.lengthscale, "lengthscale")

    def _check_params(self):
        validate_positive_int(self.n_features, "n_features", maximum=2**26)
        if not isinstance(self.sampler, str) or self.sampler not in SAMPLERS:
            raise ValueError(
                f"Unknown sampler {self.sampler!r}; expected one of {sorted(SAMPLERS)}."
            )
        check_bool(self.complex, "complex")
        check_bool(self.real_output, "real_output")
        check_n_jobs(self.n_jobs)
        self._effective_lengthscale()

    @property
    def is_complex(self) -> bool:
        return bool(self.complex) and not bool(self.real_output)

    @property
    def n_frequencies(self) -> int:
        """Number of frequency vectors drawn: ``D`` (complex) or ``D // 2`` (real)."""
        D = int(self.n_features)
        return D if self.complex else D // 2

    def _output_dim_for(self, n_features):
        """``D``, or ``2D`` for ``complex=True, real_output=True``."""
        return 2 * int(n_features) if (self.complex and self.real_output) else int(n_features)

    # ------------------------------------------------------------------ fitting
    def _draw_directions(self, n, d, rng):
        """``(n, d)`` frequency rows at unit lengthscale."""
        return draw_projection(n, d, rng, sampler=self.sampler) if n > 0 else np.zeros((0, d))

    def _draw_extra(self, d, rng):
        """Frequency ``(1, d)`` and phase ``(1,)`` of the last column of an odd real map."""
        return draw_projection(1, d, rng), rng.uniform(0.0, 2.0 * np.pi, size=1)

    def _fit(self, X, Y, xp, rng):
        d = int(X.shape[1])
        W = self._draw_directions(self.n_frequencies, d, rng)
        if (not self.complex) and int(self.n_features) % 2 == 1:
            self.extra_projection_, self.offset_ = self._draw_extra(d, rng)
        else:
            self.extra_projection_, self.offset_ = np.zeros((0, d)), np.zeros(0)
        self.lengthscale_ = self._effective_lengthscale()
        self.projection_ = W  # (n_freq, d)
        self._build()

    def _build(self):
        self._cache = {}
        (m, d), r = self.projection_.shape, self.extra_projection_.shape[0]
        # [W^T, We^T; 0, b] / [l, l; 1, 1] for X augmented with a ones column: one matmul
        # for all columns
        W_aug = np.empty((d + 1, m + r))
        np.divide(self.projection_.T, self.lengthscale_, out=W_aug[:d, :m])  # (d, n_freq)
        np.divide(self.extra_projection_.T, self.lengthscale_, out=W_aug[:d, m:])  # (d, r)
        W_aug[d, :m] = 0.0
        W_aug[d, m:] = self.offset_
        self._consts = {"W_aug": W_aug, "W_aug_half": 0.5 * W_aug}

    def _param(self, name, xp, like):
        return param_cache(self, name, xp, like, self._consts)

    # ------------------------------------------------------------------ features
    def _raw_features(self, X, xp):
        """Features of validated ``X`` (n, d): real (n, D), complex (n, D) or (n, 2D)."""
        D, m = int(self.n_features), self.n_frequencies
        if is_numpy_namespace(xp):
            half = use_half(X.dtype)
            W_aug = self._param("W_aug_half" if half else "W_aug", xp, X)  # (d + 1, K)
            norm = 1.0 / math.sqrt(D) if self.complex else math.sqrt(2.0 / D)
            out = trig_features(X, W_aug, m, norm * self._scale(), n_jobs=self.n_jobs, half=half)
            if not self.is_complex:
                return out  # [cos, sin(, phase)] or [Re phi, Im phi]
            cplx = np.empty((X.shape[0], D), dtype=np.result_type(X.dtype, np.complex64))
            cplx.real, cplx.imag = out[:, :D], out[:, D:]
            return cplx
        W_aug = self._param("W_aug", xp, X)
        ones = xp.ones((X.shape[0], 1), dtype=X.dtype, device=device(X))
        Z = xp.concat([X, ones], axis=1) @ W_aug  # (n, K)
        if self.complex:
            scale = self._scale() / math.sqrt(D)
            C, S = xp.cos(Z) * scale, xp.sin(Z) * scale
            if self.real_output:
                return xp.concat([C, S], axis=1)  # (n, 2D)
            cdtype = complex_dtype(xp, X.dtype)
            return xp.astype(C, cdtype) + 1j * xp.astype(S, cdtype)
        scale = self._scale() * math.sqrt(2.0 / D)
        parts = [xp.cos(Z[:, :m]) * scale, xp.sin(Z[:, :m]) * scale]
        if D % 2:
            parts.append(xp.cos(Z[:, m:]) * scale)
        return xp.concat(parts, axis=1)  # (n, D)

    def _scale(self) -> float:
        return 1.0

    def _scaled_features(self, X, xp, side):
        base = self._raw_features(X, xp)
        return base, xp.zeros(X.shape[0], dtype=base.real.dtype, device=device(X))

    def _features(self, X, xp, side):
        return self._raw_features(X, xp)

    def _scaled_pair(self, X, Y, xp):
        P = self._raw_features(X, xp)
        S = P if Y is X else self._raw_features(Y, xp)
        zero = xp.zeros(0, dtype=P.real.dtype, device=device(P))
        return P, zero, S, zero

    def approx_kernel(self, X, Y=None):
        """``Re(phi(X) conj(phi(Y))^T)``, the unbiased estimate of the kernel matrix.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m), real, same backend and float dtype as ``X``.
        """
        X, Y, xp, dtype = self._check_pair_half_widened(X, Y)
        P, _, S, _ = self._scaled_pair(X, Y, xp)
        return as_real_dtype(xp, real_gram(xp, P, S), dtype)

    # ------------------------------------------------------------------ variance
    def _sq_dist(self, X, Y, xp):
        # |x - y|^2 / l^2 for validated X (n, d), Y (m, d)
        # -2 log k from the differences where |x|^2 + |y|^2 - 2 x.y cancels (near-duplicates
        # far from the origin): 0 at x = y
        Xs, Ys = X / self.lengthscale_, Y / self.lengthscale_
        return -2.0 * gaussian_log_kernel(xp, Xs, Ys, 1.0)

    def _rff_variance(self, X, Y, xp, part="real"):
        """``(rff_variance (n, m), |delta|^2 (n, m))`` for i.i.d. frequencies, with
        ``1 - k^2 = -expm1(-|delta|^2)`` from the distance (accurate for nearby points)."""
        sq = self._sq_dist(X, Y, xp)
        k, q = xp.exp(-0.5 * sq), -xp.expm1(-sq)
        complex_ = part == "complex" or bool(self.complex)
        var = rff_variance(k, int(self.n_features), complex=complex_, part=part, one_minus_k2=q)
        return var, sq

    def _variance(self, X, Y, xp):
        # the variance of the real part
        return self._rff_variance(X, Y, xp)[0]

    def _log_relative_variance(self, X, Y, xp):
        # log(Var / k^2) = log Var + |delta|^2: k = e^{-|delta|^2 / 2} underflows (float32:
        # |delta| > 14) where the ratio is finite
        var, sq = self._rff_variance(X, Y, xp)
        return safe_log(xp, var) + sq  # -inf where exact (x = y)

    def _complex_variance(self, X, Y, xp):
        return self._rff_variance(X, Y, xp, part="complex")[0]

    def _exact_kernel(self, X, Y, xp):
        """The Gaussian kernel ``exp(-|x - y|^2 / (2 l^2))``, (n, m), from the accurate
        exponent of :meth:`_sq_dist` (as :func:`kernelkit.kernels.gaussian_kernel` forms
        it): exactly 1 for equal rows, and never ``inf - inf = NaN`` for rows of norm
        above ~1e154 (over the lengthscale)."""
        return xp.exp(-0.5 * self._sq_dist(X, Y, xp))


# ---------------------------------------------------------------------- SRF
@functools.lru_cache(maxsize=64)
def _srf_mixture_cached(degree: int, a: float, n_components: int, lmin: float, lmax: float):
    from scipy.optimize import nnls

    tau = np.linspace(0.0, 2.0, 1001)
    ls = np.geomspace(lmin, lmax, n_components)
    A = np.exp(-(tau[:, None] ** 2) / (2.0 * ls[None, :] ** 2))
    a2 = a * a  # inf for a huge a, where a**2 raises OverflowError
    target = (1.0 - tau**2 / a2) ** degree
    alpha, _ = nnls(A, target, maxiter=50 * n_components)
    fine = np.linspace(0.0, 2.0, 4001)
    approx = np.exp(-(fine[:, None] ** 2) / (2.0 * ls[None, :] ** 2)) @ alpha
    err = float(np.max(np.abs(approx - (1.0 - fine**2 / a2) ** degree)))
    return alpha, ls, err


def fit_srf_mixture(
    degree: int, a: float = 2.0, n_components: int = 40, lengthscale_range: tuple = (0.05, 50.0)
):
    """Non-negative Gaussian mixture fitted to ``k(tau) = (1 - tau^2 / a^2)^p`` on [0, 2].

    **Library construction** (Pennington et al. 2015 fit the Fourier transform of ``k``
    instead): ``k~(tau) = sum_i alpha_i exp(-tau^2 / (2 l_i^2))`` with the lengthscales
    ``l_i`` fixed on a log-spaced grid and ``alpha >= 0`` fitted by non-negative least
    squares (:func:`scipy.optimize.nnls`) on 1001 equally spaced, unweighted points of
    ``tau in [0, 2]`` (the distances of unit vectors). ``k~`` is positive definite in every
    dimension (its spectral density is a mixture of Gaussians, ``w ~ N(0, I / l_i^2)``).

    Returns
    -------
    alpha : ndarray (n_components,), non-negative weights (most are zero)
    lengthscales : ndarray (n_components,)
    fit_error : float, ``max |k~ - k|`` on 4001 points of [0, 2]
    """
    lo, hi = (float(v) for v in lengthscale_range)
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"lengthscale_range must be 0 < lo < hi, got {lengthscale_range}.")
    alpha, ls, err = _srf_mixture_cached(int(degree), float(a), int(n_components), lo, hi)
    return alpha.copy(), ls.copy(), err


def _mixture_kernel(sq_dist, alpha, ls, xp):
    """``sum_i alpha_i exp(-sq_dist / (2 l_i^2))`` elementwise (non-zero weights only)."""
    out = xp.zeros_like(sq_dist)
    for al, li in zip(alpha, ls, strict=True):
        if al > 0:
            out = out + float(al) * xp.exp(sq_dist * (-0.5 / float(li) ** 2))
    return out


def _in_range_norms(xp, X):
    """The squared row norms (n,) of ``X`` if every one lies in ``[tiny / eps, max]`` of
    its dtype, so that ``x / sqrt(|x|^2)`` is accurate (a square that underflowed is below
    ``eps^2 |x|^2``); else None: zero rows, and rows whose norm under- or overflows, take
    the scale-free path. None on accelerators, where the test would wait for the device."""
    on_host = sp.issparse(X) or is_numpy_namespace(xp) or getattr(X.device, "type", None) == "cpu"
    if not on_host:
        return None
    with np.errstate(over="ignore"):  # out of range: the scale-free path
        sq = sq_norms(xp, X)  # (n,)
    info = np.finfo(X.dtype) if sp.issparse(X) else xp.finfo(X.dtype)
    lo, hi = float(info.smallest_normal) / float(info.eps), float(info.max)
    return sq if bool(xp.all((sq >= lo) & (sq <= hi))) else None


def _divide_rows(xp, X, v):
    """``X`` (n, d) with row ``i`` divided by ``v[i]`` (n,); SciPy sparse stays sparse (CSR)
    in ``X``'s dtype."""
    if sp.issparse(X):
        return sp.csr_matrix(sp.diags(1.0 / v) @ X, dtype=X.dtype)
    return X / v[:, None]


class SphericalRandomFeatures(RandomFourierFeatures):
    """Spherical Random Features (SRF, Pennington et al. 2015) for the polynomial kernel.

    Approximates eq. 57 on the unit sphere, ``k(x, y) = sigma^2 (1 - |x - y|^2 / a^2)^p``
    (for ``a = 2``: ``sigma^2 ((1 + x^T y) / 2)^p``), by the positive-definite radial kernel
    ``k~(tau) = sigma^2 sum_i alpha_i exp(-tau^2 / (2 l_i^2))`` (:func:`fit_srf_mixture`,
    a library construction: NNLS on a lengthscale grid in the distance domain), and ``k~``
    by eq. 59 random Fourier features: for each frequency a component ``i`` with
    probability ``alpha_i / sum(alpha)``, then ``w ~ N(0, I / l_i^2)``; features
    ``sigma sqrt(sum alpha) sqrt(2/D) [cos(W x), sin(W x)]``.

    :meth:`approx_kernel` is unbiased for ``k~`` (:meth:`expected_kernel`; i.i.d. and
    ``"orthogonal"`` samplers: the direction rows have ``N(0, I)`` marginals and are
    divided by independent mixture lengthscales; ``"sorf"``: approximately) and biased for
    ``k`` (:meth:`exact_kernel`) by at most ``sigma^2 fit_error_`` on unit vectors.
    Accepts sparse input.

    Parameters
    ----------
    n_features : int, default=256
        ``D`` (odd ``D``: last column a phase feature, as in :class:`RandomFourierFeatures`).
    degree : int, default=7
        ``p``.
    a : float, default=2.0
        ``a >= 2`` (eq. 57).
    amplitude : float, default=1.0
        ``sigma^2``.
    sampler : {"iid", "orthogonal", "sorf", "hadamard", "halton"}, default="iid"
        Frequency directions; each row is scaled by ``1 / l_i`` of its own component.
    n_components_mixture : int, default=40
        Size of the lengthscale grid (0.05 .. 50, log-spaced).
    normalize : bool, default=True
        Divide the rows of the inputs by their norm (zero rows stay zero), so that any
        data can be fed. With ``False``, rows that are not unit norm (tolerance 1e-6, or
        the eps of a float16 / bfloat16 tensor) raise ``ValueError``.
    random_state : None, int or numpy.random.Generator
    n_jobs : int, optional
        Threads of the NumPy path (None: all available CPUs, not scikit-learn's one job).

    Attributes
    ----------
    mixture_weights_ : ndarray (K,), ``alpha_i`` (unit amplitude), ``K`` mixture components
    mixture_lengthscales_ : ndarray (K,), ``l_i``
    fit_error_ : float, ``max_{tau in [0, 2]} |k~(tau) - k(tau)|`` (unit amplitude)
    components_ : ndarray (n_frequencies,), the component drawn for each frequency
    projection_ : ndarray (n_frequencies, d), frequencies ``w_j`` (lengthscales folded in)
    extra_projection_ : ndarray (1, d) or (0, d)
        Frequency of the extra column of an odd ``n_features`` (empty otherwise).
    offset_ : ndarray (1,) or (0,)
        Phase of that extra column (empty otherwise).
    """

    fit_reads = "all"  # fit checks that every row has unit norm

    complex = False
    real_output = False
    gamma = None
    lengthscale = 1.0
    _parameter_constraints: ClassVar[dict] = {
        "n_features": int_range(1, 2**26),
        "degree": int_range(1, 10_000),
        "a": [Interval(Real, 2, None, closed="left")],  # eq. 57 on the unit sphere
        "amplitude": POSITIVE,
        "sampler": [StrOptions(set(SAMPLERS))],
        "n_components_mixture": int_range(1, 10_000),
        "normalize": ["boolean"],
        "random_state": RANDOM_STATE,
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        n_features: int = 256,
        degree: int = 7,
        a: float = 2.0,
        amplitude: float = 1.0,
        sampler: str = "iid",
        n_components_mixture: int = 40,
        normalize: bool = True,
        random_state=None,
        n_jobs=None,
    ):
        self.n_features = n_features
        self.degree = degree
        self.a = a
        self.amplitude = amplitude
        self.sampler = sampler
        self.n_components_mixture = n_components_mixture
        self.normalize = normalize
        self.random_state = random_state
        self.n_jobs = n_jobs

    @property
    def kernel(self) -> str:
        """Always ``"polynomial"`` (eq. 57 on the unit sphere)."""
        return "polynomial"

    def _check_params(self):
        validate_positive_int(self.degree, "degree", maximum=10_000)
        validate_positive_int(self.n_components_mixture, "n_components_mixture", maximum=10_000)
        a = check_real(self.a, "a")
        if a < 2:
            raise ValueError(f"a must be >= 2 (eq. 57 on the unit sphere), got {self.a}.")
        check_real(self.amplitude, "amplitude", minimum=0.0, strict=True)
        check_bool(self.normalize, "normalize")
        super()._check_params()

    def _fit(self, X, Y, xp, rng):
        # the mixture (cached per parameters), then the frequencies of RandomFourierFeatures
        # with per-frequency mixture lengthscales; unit rows are checked (or made) first
        self._unit_rows(X, xp, "X")
        if Y is not None:
            self._unit_rows(Y, xp, "Y")
        alpha, ls, err = fit_srf_mixture(self.degree, self.a, self.n_components_mixture)
        self.mixture_weights_ = alpha
        self.mixture_lengthscales_ = ls
        self.fit_error_ = err
        super()._fit(X, Y, xp, rng)  # lengthscale_ = 1: the mixture's are in projection_

    def _draw_component(self, n, rng):
        alpha = self.mixture_weights_
        return rng.choice(len(alpha), size=n, p=alpha / alpha.sum())

    def _draw_directions(self, n, d, rng):
        W = super()._draw_directions(n, d, rng)
        self.components_ = self._draw_component(n, rng)
        return (
            np.asarray(W, dtype=np.float64) / self.mixture_lengthscales_[self.components_][:, None]
        )

    def _draw_extra(self, d, rng):
        ce = self._draw_component(1, rng)
        We = draw_projection(1, d, rng) / self.mixture_lengthscales_[ce][:, None]
        return We, rng.uniform(0.0, 2.0 * np.pi, size=1)

    def _effective_lengthscale(self) -> float:
        return 1.0

    # ------------------------------------------------------------------ inputs
    def _unit_rows(self, X, xp, name, rounded_to=None):
        """``X`` with unit-norm rows (normalised or checked); sparse stays sparse.
        ``rounded_to``: the dtype ``X`` was rounded to before it was widened (its rows are
        checked to that dtype's precision)."""
        if X.shape[0] == 0:
            return X
        if self.normalize:
            sq = _in_range_norms(xp, X)
            if sq is None:
                # each row is first divided by its largest |entry| (exactly where that is a
                # power of two, else rounded once), so that its squared norm neither
                # underflows nor overflows: x / |x| is then scale-free over the whole range
                # of the dtype (zero rows are divided by 1)
                if sp.issparse(X):
                    big = np.asarray(abs(X).max(axis=1).toarray()).ravel()
                    X = _divide_rows(xp, X, np.where(big > 0, big, 1.0))
                else:
                    big = _detach(xp.max(xp.abs(X), axis=1))  # the result does not depend on it
                    X = _divide_rows(xp, X, xp.where(big > 0, big, xp.ones_like(big)))
                sq = sq_norms(xp, X)  # (n,), in [1, d] for nonzero rows
            # zero rows are divided by 1 and stay zero; the square root of the guarded
            # value keeps autograd's gradient finite there (sqrt'(0) = inf times 0 is nan)
            if sp.issparse(X):
                return _divide_rows(xp, X, np.sqrt(np.where(sq > 0, sq, 1.0)))
            return _divide_rows(xp, X, xp.where(sq > 0, sq, xp.ones_like(sq)) ** 0.5)
        # a half-precision tensor (torch's float16, bfloat16): its norms in float32, and
        # rows unit to its precision pass (rounding each coordinate of a unit row moves
        # its norm by up to eps / 2)
        tol = 1e-6
        rounded_to = X.dtype if rounded_to is None or sp.issparse(X) else rounded_to
        if not sp.issparse(X) and xp.finfo(rounded_to).bits < 32:
            tol = max(tol, float(xp.finfo(rounded_to).eps))
            sq = sq_norms(xp, xp.astype(_detach(X), xp.float32))
        else:
            sq = sq_norms(xp, X)  # (n,)
        if sp.issparse(X):
            dev = float(np.max(np.abs(np.sqrt(sq) - 1.0)))
        else:
            dev = float(_detach(xp.max(xp.abs(sq**0.5 - 1.0))))
        if not dev <= tol:
            raise ValueError(
                f"SphericalRandomFeatures needs unit-norm rows of {name} (eq. 57 on the "
                f"unit sphere); the largest | |x| - 1 | is {dev:.3g}. Normalise the "
                "inputs or pass normalize=True."
            )
        return X

    def _prepare(self, X, xp, name="X"):
        return self._unit_rows(X, xp, name)

    def _prepare_widened(self, X, xp, name, dtype):
        return self._unit_rows(X, xp, name, rounded_to=dtype)

    def _scale(self) -> float:
        return math.sqrt(float(self.amplitude) * float(self.mixture_weights_.sum()))

    # ------------------------------------------------------------------ kernels
    def mixture_kernel(self, X, Y=None):
        """``k~(x, y)``, the kernel :meth:`approx_kernel` estimates without bias.

        Parameters
        ----------
        X : array, shape (n, d)
            Unit-norm rows.
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m)
            The floating dtype of ``X`` (float64 for an integer ``X``).
        """
        X, Y, xp, dtype = self._check_pair_half_widened(X, Y)
        return as_real_dtype(xp, self._mixture(self._densify(X), self._densify(Y), xp), dtype)

    def _mixture(self, X, Y, xp):
        return float(self.amplitude) * _mixture_kernel(
            self._sq_dist(X, Y, xp), self.mixture_weights_, self.mixture_lengthscales_, xp
        )

    def expected_kernel(self, X, Y=None):
        """``E approx_kernel``: the mixture kernel ``k~`` (:meth:`mixture_kernel`); for
        i.i.d. projections (``"sorf"`` / ``"hadamard"`` warn, as for the base maps).

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        array, shape (n, m)
        """
        self._warn_biased_sampler("expected_kernel")
        return self.mixture_kernel(X, Y)

    def _expected_kernel_prepared(self, X, Y, xp):
        return self._mixture(X, Y, xp)

    def _exact_kernel(self, X, Y, xp):
        """Eq. 57, ``sigma^2 (1 - |x - y|^2 / a^2)^p`` on unit vectors, (n, m)."""
        a = float(self.a)  # a * a: inf for a huge a, where a ** 2 raises OverflowError
        base = xp.clip(1.0 - self._sq_dist(X, Y, xp) / (a * a), min=0.0)
        return float(self.amplitude) * base ** int(self.degree)

    def _log_relative_variance(self, X, Y, xp):
        # from variance and kernel, not the Gaussian kernel's log form of the parent
        return FeatureMap._log_relative_variance(self, X, Y, xp)

    def _variance(self, X, Y, xp):
        # With s = sigma^2 sum(alpha) and the normalised mixture kappa(tau) = k~(tau) / s
        # = E_w cos(w^T delta), one frequency contributes s cos(w^T delta) with variance
        # s^2 pair, pair = (1 + kappa(2 tau)) / 2 - kappa(tau)^2 (E cos^2 = (1 + E cos(2 w^T
        # delta)) / 2, derived; checked by Monte Carlo in the tests), so as in rff_variance:
        # Var = s^2 [4 m pair + r (pair + 1/2)] / D^2 with D = 2 m + r
        sq = self._sq_dist(X, Y, xp)
        alpha, ls = self.mixture_weights_, self.mixture_lengthscales_
        s = float(alpha.sum())
        kap = _mixture_kernel(sq, alpha, ls, xp) / s
        kap2 = _mixture_kernel(4.0 * sq, alpha, ls, xp) / s
        pair = xp.clip(0.5 * (1.0 + kap2) - kap * kap, min=0.0)
        D = int(self.n_features)
        m, r = divmod(D, 2)
        out = 4.0 * m * pair
        if r:
            out = out + (pair + 0.5)
        return (float(self.amplitude) * s) ** 2 * out / (D * D)
