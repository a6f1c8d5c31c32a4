"""Random Fourier features for the Gaussian kernel (Rahimi & Recht 2007).

Reference forms from Wacker, Kanagawa & Filippone, "Improved Random Features for Dot
Product Kernels" (equation numbers below refer to it; implementation note
``shared/notes/dot_product_random_features.md`` Sec. 2.6):

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
import numbers

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._backend import (
    check_random_state,
    device,
    is_numpy_namespace,
    validate_data,
    validate_positive_float,
    validate_positive_int,
)
from ._base import FeatureMap
from .sampling import (
    block_orthogonal_projection,
    gaussian_projection,
    structured_hadamard_projection,
)

__all__ = [
    "SAMPLERS",
    "RandomFourierFeatures",
    "SphericalRandomFeatures",
    "fit_srf_mixture",
    "rff_variance",
]

#: frequency samplers by name: (n, d, rng) -> (n, d) rows ~ N(0, I) (SORF: approximately)
SAMPLERS = {
    "iid": gaussian_projection,
    "orthogonal": block_orthogonal_projection,
    "sorf": structured_hadamard_projection,
}


def rff_variance(k, n_features: int, *, complex: bool = False, part: str = "real"):
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

    Returns
    -------
    array like ``k``, non-negative.
    """
    if part not in ("real", "complex"):
        raise ValueError(f"part must be 'real' or 'complex', got {part!r}.")
    k2 = k * k
    k4 = k2 * k2
    pair = 0.5 * (1.0 + k4) - k2  # Var cos(w^T delta) for one frequency, >= 0
    D = int(n_features)
    if complex:
        if part == "complex":
            return (1.0 - k2) / D
        return pair / D
    m, r = divmod(D, 2)
    out = 4.0 * m * pair
    if r:
        out = out + (pair + 0.5)
    return out / (D * D)


class RandomFourierFeatures(FeatureMap):
    """Random Fourier features for the Gaussian kernel (eq. 59 real, eq. 60 complex).

    Estimates ``k(x, y) = exp(-|x - y|^2 / (2 l^2))`` (``= exp(-gamma |x - y|^2)``) by
    ``Re(phi(x)^T conj(phi(y)))``.

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
    sampler : {"iid", "orthogonal", "sorf"}, default="iid"
        How the frequency directions are drawn: i.i.d. Gaussian; block-orthogonal
        Haar blocks with chi-distributed norms (ORF, exactly ``N(0, I)`` marginals, so
        still unbiased); structured Hadamard ``sqrt(d') H D1 H D2 H D3`` blocks (SORF,
        Yu et al. 2016; only approximately unbiased, bias ``O(1/sqrt(d))``).
    complex : bool, default=False
        Eq. 60: complex features ``D^{-1/2} exp(i W x)`` (complex64 / complex128).
    real_output : bool, default=False
        With ``complex=True``: return the real ``(n, 2D)`` matrix ``[Re phi, Im phi]``
        instead, whose Gram matrix is ``Re(phi phi^H)`` — exactly eq. 59 with ``2D``
        features and the same frequencies. Ignored for real maps.
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    projection_ : ndarray, shape (n_frequencies, d)
        Unit-lengthscale frequencies (rows ~ N(0, I)); the map uses ``projection_ / l``.
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
    (:func:`rff_variance`); for ``"orthogonal"`` it is an upper bound in practice and for
    ``"sorf"`` an approximation.
    """

    symmetric = True
    positive = False

    def __init__(
        self,
        n_features: int = 256,
        lengthscale: float = 1.0,
        gamma: float | None = None,
        sampler: str = "iid",
        complex: bool = False,
        real_output: bool = False,
        random_state=None,
    ):
        self.n_features = n_features
        self.lengthscale = lengthscale
        self.gamma = gamma
        self.sampler = sampler
        self.complex = complex
        self.real_output = real_output
        self.random_state = random_state

    # ------------------------------------------------------------------ parameters
    @property
    def kernel(self) -> str:
        """Always ``"gaussian"`` (the only kernel these features estimate)."""
        return "gaussian"

    def _effective_lengthscale(self) -> float:
        if self.gamma is not None:
            return 1.0 / math.sqrt(2.0 * validate_positive_float(self.gamma, "gamma"))
        return validate_positive_float(self.lengthscale, "lengthscale")

    def _validate_params(self):
        validate_positive_int(self.n_features, "n_features", maximum=2**26)
        if not isinstance(self.sampler, str) or self.sampler not in SAMPLERS:
            raise ValueError(
                f"Unknown sampler {self.sampler!r}; expected one of {sorted(SAMPLERS)}."
            )
        for name in ("complex", "real_output"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}.")
        return self._effective_lengthscale()

    @property
    def n_frequencies(self) -> int:
        """Number of frequency vectors drawn: ``D`` (complex) or ``D // 2`` (real)."""
        D = int(self.n_features)
        return D if self.complex else D // 2

    @property
    def output_dim(self) -> int:
        """``D``, or ``2D`` for ``complex=True, real_output=True``."""
        D = int(self.n_features)
        return 2 * D if (self.complex and self.real_output) else D

    # ------------------------------------------------------------------ fitting
    def fit(self, X, Y=None):
        """Draw the frequencies (nothing is fitted from the data but its dimension).

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional
            Only checked for a matching dimension.

        Returns
        -------
        self
        """
        ls = self._validate_params()
        X, _ = validate_data(X, "X")
        if Y is not None:
            validate_data(Y, "Y", n_features=X.shape[1])
        rng = check_random_state(self.random_state)
        d = int(X.shape[1])
        n_freq = self.n_frequencies
        W = SAMPLERS[self.sampler](n_freq, d, rng) if n_freq > 0 else np.zeros((0, d))
        odd = (not self.complex) and int(self.n_features) % 2 == 1
        self.n_features_in_ = d
        self.lengthscale_ = ls
        if odd:  # one extra frequency and phase for the last column
            self.extra_projection_ = SAMPLERS["iid"](1, d, rng)  # (1, d)
            self.offset_ = rng.uniform(0.0, 2.0 * np.pi, size=1)
        else:
            self.extra_projection_ = np.zeros((0, d))
            self.offset_ = np.zeros(0)
        self.projection_ = W  # (n_freq, d), set last: marks the map as fitted
        self._build()
        return self

    def _build(self):
        self._cache = {}
        Wt = np.ascontiguousarray(self.projection_.T / self.lengthscale_)  # (d, n_freq)
        We = np.ascontiguousarray(self.extra_projection_.T / self.lengthscale_)  # (d, r)
        self._consts = {"W_T": Wt, "We_T": We, "b": self.offset_}

    # ------------------------------------------------------------------ features
    def _check_X(self, X, name):
        check_is_fitted(self, "projection_")
        X, xp = validate_data(X, name, n_features=self.n_features_in_, allow_empty=True)
        return X, xp  # the lengthscale is folded into the frequencies

    def _raw_features(self, X, xp):
        """Features of validated ``X`` (n, d): real (n, D), complex (n, D) or (n, 2D)."""
        D = int(self.n_features)
        Wt = self._param("W_T", xp, X)  # (d, n_freq)
        Z = X @ Wt  # (n, n_freq)
        if self.complex:
            scale = 1.0 / math.sqrt(D)
            C, S = xp.cos(Z) * scale, xp.sin(Z) * scale
            if self.real_output:
                return xp.concat([C, S], axis=1)  # (n, 2D)
            if is_numpy_namespace(xp):
                out = np.empty(C.shape, dtype=np.result_type(C.dtype, np.complex64))
                out.real, out.imag = C, S
                return out
            cdtype = xp.complex64 if X.dtype == xp.float32 else xp.complex128
            return xp.astype(C, cdtype) + 1j * xp.astype(S, cdtype)
        scale = math.sqrt(2.0 / D)
        parts = [xp.cos(Z) * scale, xp.sin(Z) * scale]
        if D % 2:
            We = self._param("We_T", xp, X)  # (d, 1)
            b = self._param("b", xp, X)  # (1,)
            parts.append(xp.cos(X @ We + b[None, :]) * scale)
        return xp.concat(parts, axis=1)  # (n, D)

    def _scaled_features(self, X, xp, side):
        base = self._raw_features(X, xp)
        return base, xp.zeros(X.shape[0], dtype=X.dtype, device=device(X))

    def _features(self, X, side):
        X, xp = self._check_X(X, "X" if side == "x" else "Y")
        return self._raw_features(X, xp)

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
        Y = X if Y is None else Y
        P = self._features(X, "x")
        S = self._features(Y, "y")
        xp = _namespace(P)
        if xp.isdtype(P.dtype, "complex floating"):
            return xp.real(P) @ xp.matrix_transpose(xp.real(S)) + xp.imag(P) @ xp.matrix_transpose(
                xp.imag(S)
            )
        return P @ xp.matrix_transpose(S)

    # ------------------------------------------------------------------ variance
    def _sq_dist(self, X, Y, xp):
        # |x - y|^2 / l^2 for validated X (n, d), Y (m, d)
        Xs, Ys = X / self.lengthscale_, Y / self.lengthscale_
        nx = xp.sum(Xs * Xs, axis=1)[:, None]
        ny = xp.sum(Ys * Ys, axis=1)[None, :]
        return xp.clip(nx + ny - 2.0 * (Xs @ xp.matrix_transpose(Ys)), min=0.0)

    def variance(self, X, Y=None, part: str = "real"):
        """Analytic pointwise variance of :meth:`approx_kernel` for i.i.d. frequencies.

        See :func:`rff_variance` for the formulas. For ``sampler="orthogonal"`` /
        ``"sorf"`` this is the i.i.d. value, not that of the structured estimator.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional
        part : {"real", "complex"}
            ``"complex"`` (complex maps): ``E|k_hat - k|^2`` of the complex estimate
            ``phi(x)^T conj(phi(y))`` rather than the variance of its real part.

        Returns
        -------
        array, shape (n, m)
        """
        Y = X if Y is None else Y
        X, xp = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
        if part == "complex" and not self.complex:
            raise ValueError("part='complex' needs complex=True (a complex estimate).")
        k = xp.exp(-0.5 * self._sq_dist(X, Y, xp))
        return rff_variance(k, int(self.n_features), complex=bool(self.complex), part=part)

    def _log_kernel(self, X, Y, xp):
        return -0.5 * self._sq_dist(X, Y, xp)

    def _log_second_moment(self, X, Y, xp):
        # m2 with Var = (m2 - k^2) / n_features, so FeatureMap's relative-variance helpers
        # apply: m2 = k^2 + D Var
        k = xp.exp(-0.5 * self._sq_dist(X, Y, xp))
        var = rff_variance(k, int(self.n_features), complex=bool(self.complex))
        return xp.log(k * k + int(self.n_features) * var)

    def exact_kernel(self, X, Y=None):
        """The Gaussian kernel this map estimates, ``exp(-|x - y|^2 / (2 l^2))``, (n, m)."""
        Y = X if Y is None else Y
        X, xp = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
        return xp.exp(-0.5 * self._sq_dist(X, Y, xp))


# ---------------------------------------------------------------------- SRF
@functools.lru_cache(maxsize=64)
def _srf_mixture_cached(degree: int, a: float, n_components: int, lmin: float, lmax: float):
    from scipy.optimize import nnls

    tau = np.linspace(0.0, 2.0, 1001)
    ls = np.geomspace(lmin, lmax, n_components)
    A = np.exp(-(tau[:, None] ** 2) / (2.0 * ls[None, :] ** 2))
    target = (1.0 - tau**2 / a**2) ** degree
    alpha, _ = nnls(A, target, maxiter=50 * n_components)
    fine = np.linspace(0.0, 2.0, 4001)
    approx = np.exp(-(fine[:, None] ** 2) / (2.0 * ls[None, :] ** 2)) @ alpha
    err = float(np.max(np.abs(approx - (1.0 - fine**2 / a**2) ** degree)))
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


class SphericalRandomFeatures(RandomFourierFeatures):
    """Spherical Random Features (SRF, Pennington et al. 2015) for the polynomial kernel.

    Approximates eq. 57 on the unit sphere, ``k(x, y) = sigma^2 (1 - |x - y|^2 / a^2)^p``
    (for ``a = 2``: ``sigma^2 ((1 + x^T y) / 2)^p``), by the positive-definite radial kernel
    ``k~(tau) = sigma^2 sum_i alpha_i exp(-tau^2 / (2 l_i^2))`` (:func:`fit_srf_mixture`,
    a library construction: NNLS on a lengthscale grid in the distance domain), and ``k~``
    by eq. 59 random Fourier features: for each frequency a component ``i`` with
    probability ``alpha_i / sum(alpha)``, then ``w ~ N(0, I / l_i^2)``; features
    ``sigma sqrt(sum alpha) sqrt(2/D) [cos(W x), sin(W x)]``.

    :meth:`approx_kernel` is unbiased for ``k~`` (i.i.d. and ``"orthogonal"`` samplers:
    the direction rows have ``N(0, I)`` marginals and are divided by independent mixture
    lengthscales; ``"sorf"``: approximately) and biased for ``k`` by at most
    ``sigma^2 fit_error_`` on unit vectors.

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
    sampler : {"iid", "orthogonal", "sorf"}, default="iid"
        Frequency directions; each row is scaled by ``1 / l_i`` of its own component.
    n_components_mixture : int, default=40
        Size of the lengthscale grid (0.05 .. 50, log-spaced).
    normalize : bool, default=False
        Divide the rows of the inputs by their norm (zero rows stay zero). Otherwise rows
        that are not unit norm (tolerance 1e-6) raise ``ValueError``.
    random_state : None, int or numpy.random.Generator

    Attributes
    ----------
    mixture_weights_ : ndarray, ``alpha_i`` (unit amplitude)
    mixture_lengthscales_ : ndarray, ``l_i``
    fit_error_ : float, ``max_{tau in [0, 2]} |k~(tau) - k(tau)|`` (unit amplitude)
    components_ : ndarray (n_frequencies,), the component drawn for each frequency
    projection_ : ndarray (n_frequencies, d), frequencies ``w_j`` (lengthscales folded in)
    """

    complex = False
    real_output = False
    gamma = None
    lengthscale = 1.0

    def __init__(
        self,
        n_features: int = 256,
        degree: int = 7,
        a: float = 2.0,
        amplitude: float = 1.0,
        sampler: str = "iid",
        n_components_mixture: int = 40,
        normalize: bool = False,
        random_state=None,
    ):
        self.n_features = n_features
        self.degree = degree
        self.a = a
        self.amplitude = amplitude
        self.sampler = sampler
        self.n_components_mixture = n_components_mixture
        self.normalize = normalize
        self.random_state = random_state

    @property
    def kernel(self) -> str:
        """Always ``"polynomial"`` (eq. 57 on the unit sphere)."""
        return "polynomial"

    def _validate_params(self):
        validate_positive_int(self.degree, "degree", maximum=10_000)
        validate_positive_int(self.n_components_mixture, "n_components_mixture", maximum=10_000)
        for name in ("a", "amplitude"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise TypeError(f"{name} must be a finite float, got {v!r}.")
        if self.a < 2:
            raise ValueError(f"a must be >= 2 (eq. 57 on the unit sphere), got {self.a}.")
        if not self.amplitude > 0:
            raise ValueError(f"amplitude must be positive, got {self.amplitude}.")
        if not isinstance(self.normalize, bool | np.bool_):
            raise TypeError(f"normalize must be a bool, got {self.normalize!r}.")
        super()._validate_params()
        return 1.0

    def fit(self, X, Y=None):
        """Fit the mixture (cached per parameters) and draw the frequencies.

        Parameters
        ----------
        X : array, shape (n, d), unit-norm rows (or ``normalize=True``)
        Y : array, shape (m, d), optional

        Returns
        -------
        self
        """
        self._validate_params()
        X, xp = validate_data(X, "X")
        self._unit_rows(X, xp, "X")
        if Y is not None:
            Y, _ = validate_data(Y, "Y", n_features=X.shape[1])
            self._unit_rows(Y, xp, "Y")
        alpha, ls, err = fit_srf_mixture(self.degree, self.a, self.n_components_mixture)
        rng = check_random_state(self.random_state)
        d = int(X.shape[1])
        n_freq = self.n_frequencies
        probs = alpha / alpha.sum()
        W = SAMPLERS[self.sampler](n_freq, d, rng) if n_freq > 0 else np.zeros((0, d))
        comp = rng.choice(len(alpha), size=n_freq, p=probs)
        W = np.asarray(W, dtype=np.float64) / ls[comp][:, None]
        if int(self.n_features) % 2 == 1:
            ce = rng.choice(len(alpha), size=1, p=probs)
            self.extra_projection_ = SAMPLERS["iid"](1, d, rng) / ls[ce][:, None]
            self.offset_ = rng.uniform(0.0, 2.0 * np.pi, size=1)
        else:
            self.extra_projection_ = np.zeros((0, d))
            self.offset_ = np.zeros(0)
        self.mixture_weights_ = alpha
        self.mixture_lengthscales_ = ls
        self.fit_error_ = err
        self.components_ = comp
        self.n_features_in_ = d
        self.lengthscale_ = 1.0
        self.projection_ = W
        self._build()
        return self

    # ------------------------------------------------------------------ inputs
    def _unit_rows(self, X, xp, name):
        """Validated ``X`` with unit-norm rows (normalised or checked)."""
        if X.shape[0] == 0:
            return X
        norms = xp.sqrt(xp.sum(X * X, axis=1))
        if self.normalize:
            safe = xp.where(norms > 0, norms, xp.ones_like(norms))
            return X / safe[:, None]
        dev = float(xp.max(xp.abs(norms - 1.0)))
        if not dev <= 1e-6:
            raise ValueError(
                f"SphericalRandomFeatures needs unit-norm rows of {name} (eq. 57 on the "
                f"unit sphere); the largest | |x| - 1 | is {dev:.3g}. Normalise the "
                "inputs or pass normalize=True."
            )
        return X

    def _check_X(self, X, name):
        X, xp = super()._check_X(X, name)
        return self._unit_rows(X, xp, name), xp

    def _scale(self) -> float:
        return math.sqrt(float(self.amplitude) * float(self.mixture_weights_.sum()))

    def _raw_features(self, X, xp):
        return super()._raw_features(X, xp) * self._scale()

    # ------------------------------------------------------------------ kernels
    def mixture_kernel(self, X, Y=None):
        """``k~(x, y)``, the kernel :meth:`approx_kernel` estimates without bias, (n, m)."""
        Y = X if Y is None else Y
        X, xp = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
        return float(self.amplitude) * _mixture_kernel(
            self._sq_dist(X, Y, xp), self.mixture_weights_, self.mixture_lengthscales_, xp
        )

    def exact_kernel(self, X, Y=None):
        """Eq. 57, ``sigma^2 (1 - |x - y|^2 / a^2)^p`` on unit vectors, (n, m)."""
        Y = X if Y is None else Y
        X, xp = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
        base = xp.clip(1.0 - self._sq_dist(X, Y, xp) / float(self.a) ** 2, min=0.0)
        return float(self.amplitude) * base ** int(self.degree)

    def variance(self, X, Y=None, part: str = "real"):
        """Analytic variance of :meth:`approx_kernel` (i.i.d. frequencies).

        With ``s = sigma^2 sum(alpha)`` and the normalised mixture
        ``kappa(tau) = k~(tau) / s = E_w cos(w^T delta)``, one frequency contributes
        ``s cos(w^T delta)`` with variance ``s^2 pair``, ``pair = (1 + kappa(2 tau)) / 2 -
        kappa(tau)^2`` (``E cos^2 = (1 + E cos(2 w^T delta)) / 2``, **derived**; checked by
        Monte Carlo in the tests), so as in :func:`rff_variance`:
        ``Var = s^2 [4 m pair + r (pair + 1/2)] / D^2`` with ``D = 2 m + r``.
        For ``"orthogonal"`` / ``"sorf"`` this is the i.i.d. value.
        """
        if part != "real":
            raise ValueError("SphericalRandomFeatures is real: part must be 'real'.")
        Y = X if Y is None else Y
        X, xp = self._check_X(X, "X")
        Y, _ = self._check_X(Y, "Y")
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

    def _log_kernel(self, X, Y, xp):
        return xp.log(
            float(self.amplitude)
            * _mixture_kernel(
                self._sq_dist(X, Y, xp), self.mixture_weights_, self.mixture_lengthscales_, xp
            )
        )

    def _log_second_moment(self, X, Y, xp):
        k = xp.exp(self._log_kernel(X, Y, xp))
        return xp.log(k * k + int(self.n_features) * self.variance(X, Y))


def _namespace(a):
    from array_api_compat import array_namespace

    return array_namespace(a)
