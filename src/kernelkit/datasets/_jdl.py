"""Data for the joint-distribution-learning experiments (JDL paper, Sec. 5).

Everything here is generated or loaded offline:

* :func:`archakov_hansen_correlation` / :func:`correlation_to_gamma` -- the
  Archakov-Hansen (2021) parametrisation of correlation matrices by the off-diagonal
  elements of the matrix logarithm, a bijection between ``R^{p(p-1)/2}`` and the
  ``p x p`` positive-definite correlation matrices; :func:`random_correlation_matrix`
  draws ``gamma`` i.i.d. normal (the law is not given in the paper; library choice).
* :func:`sample_gaussian` and :func:`gaussian_conditional_moments` -- ``Z ~ N(0, C)``,
  ``X`` the first ``d_x`` and ``Y`` the last ``d_y`` coordinates, and the closed-form
  true conditional mean and second moments ``E[Y Y^T | X = x]`` (Schur complement).
* :func:`sample_uniform_chain`, :func:`uniform_chain_conditional_moments`,
  :func:`sample_cauchy_chain` -- the small data sets of Sec. 5.1 (Figs. 6-7):
  ``z = (U_1, (U_1+U_2)/2, ..., (U_1+...+U_p)/p)`` with i.i.d. ``U(0, 1)`` (or Cauchy with
  location 0 and scale 0.1) increments.
* :func:`load_french_portfolios` and :func:`french_classification_data` -- the offline
  stand-in for Sec. 5.2's daily Fama-French data: the monthly 3x3 size/value portfolios
  shipped with the PyPI package ``linearmodels`` (819 months, 1949-01 to 2017-03).

This module imports nothing else from kernelkit (datasets layer).
"""

from __future__ import annotations

import numbers

import numpy as np

from ._images import DatasetNotAvailable

__all__ = [
    "FRENCH_SV_PORTFOLIOS",
    "archakov_hansen_correlation",
    "correlation_to_gamma",
    "french_classification_data",
    "gaussian_conditional_moments",
    "load_french_portfolios",
    "random_correlation_matrix",
    "sample_cauchy_chain",
    "sample_gaussian",
    "sample_uniform_chain",
    "uniform_chain_conditional_moments",
]

#: The 3x3 size (S1 small ... S5 big) x value (V1 growth ... V5 value) portfolios of
#: ``linearmodels.datasets.french``, in the order used for ``d`` portfolios.
FRENCH_SV_PORTFOLIOS = ("S1V1", "S1V3", "S1V5", "S3V1", "S3V3", "S3V5", "S5V1", "S5V3", "S5V5")


def _rng(random_state) -> np.random.Generator:
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise ValueError(f"random_state must be a non-negative int, got {random_state}.")
        return np.random.default_rng(int(random_state))
    if random_state is None:
        return np.random.default_rng()
    if isinstance(random_state, np.random.Generator):
        return random_state
    raise TypeError(
        "random_state must be None, an int or a numpy.random.Generator, "
        f"got {type(random_state).__name__}."
    )


def _positive_int(value, name, minimum=1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    return int(value)


def _real(value, name: str) -> float:
    """A finite real number (bools rejected), as ``float``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r}.")
    return float(value)


def _finite_2d(X, name: str) -> np.ndarray:
    """``X`` as a finite float64 array of shape (n, d) with d >= 1."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] == 0:
        raise ValueError(f"{name} must be two-dimensional with >= 1 column, got shape {X.shape}.")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} must be finite (no NaN or inf).")
    return X


def _size_from_gamma_length(k: int) -> int:
    """``p`` with ``p (p - 1) / 2 == k``."""
    p = round((1 + float(np.sqrt(1 + 8 * k))) / 2)
    if k < 1 or p * (p - 1) // 2 != k:
        raise ValueError(f"gamma must have p(p-1)/2 elements for some p >= 2, got {k}.")
    return p


# ====================================================================== Archakov-Hansen
def _log_diag_expm(A, x, *, jacobian=False):
    """``log diag(expm(A[x]))``, shape (p,), and its Jacobian in ``x``, shape (p, p).

    ``A[x]`` is ``A`` with diagonal ``x``. With ``A[x] = V diag(w) V^T``:
    ``diag_i = sum_k V_ik^2 e^{w_k}`` and, by the Daleckii-Krein formula,
    ``d diag_i / d x_j = sum_kl V_ik V_il V_jk V_jl (e^{w_k} - e^{w_l}) / (w_k - w_l)``
    (``e^{w_k}`` where ``w_k = w_l``). Everything is shifted by ``max w`` against overflow.
    """
    A = A.copy()
    A[np.diag_indices(A.shape[0])] = x
    w, V = np.linalg.eigh(A)
    w_max = w.max()
    e = np.exp(w - w_max)  # (p,)
    diag = (V**2) @ e  # (p,)
    F = np.log(diag) + w_max
    if not jacobian:
        return F
    delta = w[:, None] - w[None, :]  # (p, p): w_k - w_l
    near = np.abs(delta) < 1.0  # expm1 form (no cancellation); else the plain quotient
    safe = np.where(near, delta, 1.0)
    ratio = np.where(delta == 0, 1.0, np.expm1(safe) / np.where(safe == 0, 1.0, safe))
    far = (e[:, None] - e[None, :]) / np.where(near, 1.0, delta)
    phi = np.where(near, e[None, :] * ratio, far)  # divided differences of exp, shifted
    T = V[:, :, None] * V[:, None, :]  # (p, k, l): V_ik V_il
    J = np.einsum("ikl,kl,jkl->ij", T, phi, T) / diag[:, None]
    return F, J


def archakov_hansen_correlation(gamma, *, tol: float = 1e-13, max_iter: int = 1000):
    """Correlation matrix ``C(gamma)`` of Archakov and Hansen (2021).

    ``gamma`` fills the strictly lower triangle of a symmetric ``A`` (row-major order of
    ``numpy.tril_indices(p, -1)``, mirrored above the diagonal); the diagonal ``x`` is the
    unique vector with ``diag(expm(A[x])) = 1``, found by Newton's method on
    ``log(diag(expm(A[x]))) = 0``, safeguarded by the fixed-point iteration
    ``x <- x - log(diag(expm(A[x])))`` (a contraction; Archakov & Hansen, Thm. 1) where
    a Newton step does not reduce the residual; where ``tol`` is below the rounding floor
    (extreme ``gamma``) it stops once the residual is at most ``1e-8`` and has not
    improved for 20 steps. Then
    ``C = expm(A[x])`` is a positive-definite correlation matrix and ``logm(C)`` has
    off-diagonal ``gamma``, so this is a bijection with inverse
    :func:`correlation_to_gamma`.

    Parameters
    ----------
    gamma : array_like, shape (p (p - 1) / 2,)
        Finite real numbers (any values).
    tol : float
        Stop when ``max |log diag(expm(A))| <= tol``.
    max_iter : int

    Returns
    -------
    C : ndarray, shape (p, p)
        Symmetric, unit diagonal (to ``tol``), positive definite (numerically
        semi-definite for extreme ``gamma``, ``|gamma| >~ 30``).

    Raises
    ------
    RuntimeError
        No convergence in ``max_iter`` steps: only for extreme ``gamma`` (``|gamma|`` near
        100 and beyond), where ``C`` is singular in floating point.
    """
    g = np.asarray(gamma, dtype=np.float64)
    if g.ndim != 1:
        raise ValueError(f"gamma must be one-dimensional, got shape {g.shape}.")
    if not np.all(np.isfinite(g)):
        raise ValueError("gamma must be finite (no NaN or inf).")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}.")
    p = _size_from_gamma_length(g.size)
    A = np.zeros((p, p))
    rows, cols = np.tril_indices(p, -1)
    A[rows, cols] = g
    A[cols, rows] = g
    x = np.zeros(p)
    F, J = _log_diag_expm(A, x, jacobian=True)
    best, stalls = np.inf, 0
    for _ in range(max_iter):
        res = np.max(np.abs(F))
        # converged, or no progress at the rounding floor (eps times the conditioning of
        # extreme gamma, |gamma| ~ 30, where tol is out of reach)
        stalls = 0 if res < best else stalls + 1
        if res <= tol or (res <= 1e-8 and stalls >= 20):
            break
        best = min(best, res)
        # Newton step on F(x) = log diag expm(A[x]); the fixed-point step x - F (the
        # contraction of Archakov & Hansen, Thm. 1) where Newton does not reduce max |F|
        try:
            x_new = x - np.linalg.solve(J, F)
        except np.linalg.LinAlgError:
            x_new = x - F
        F_new, J_new = _log_diag_expm(A, x_new, jacobian=True)
        if not np.max(np.abs(F_new)) < res:
            x_new = x - F
            F_new, J_new = _log_diag_expm(A, x_new, jacobian=True)
        x, F, J = x_new, F_new, J_new
    else:
        raise RuntimeError(
            f"Archakov-Hansen iteration did not converge in max_iter={max_iter} steps; "
            f"max |log diag| = {np.max(np.abs(F)):.3g}. max |gamma| = "
            f"{np.max(np.abs(g)):.3g} is so large that C is singular in floating point; "
            "use smaller gamma (or scale)."
        )
    A[np.diag_indices(p)] = x
    w, V = np.linalg.eigh(A)
    C = (V * np.exp(w)) @ V.T
    C = (C + C.T) / 2
    d = np.sqrt(np.diag(C))
    C = C / d[:, None] / d[None, :]  # remove the last <= tol of diagonal round-off
    C[np.diag_indices(p)] = 1.0
    return C


def correlation_to_gamma(C):
    """Inverse of :func:`archakov_hansen_correlation`: ``gamma = vecl(logm(C))``.

    Parameters
    ----------
    C : array_like, shape (p, p)
        Symmetric positive-definite correlation matrix (unit diagonal), ``p >= 2``.

    Returns
    -------
    gamma : ndarray, shape (p (p - 1) / 2,)
        Strictly lower triangle of ``logm(C)``, order of ``numpy.tril_indices(p, -1)``.
    """
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2 or C.shape[0] != C.shape[1] or C.shape[0] < 2:
        raise ValueError(f"C must be a square matrix of size >= 2, got shape {C.shape}.")
    if not np.all(np.isfinite(C)):
        raise ValueError("C must be finite (no NaN or inf).")
    if not np.allclose(C, C.T, atol=1e-10):
        raise ValueError("C must be symmetric.")
    if not np.allclose(np.diag(C), 1.0, atol=1e-8):
        raise ValueError("C must have a unit diagonal (a correlation matrix).")
    w, V = np.linalg.eigh((C + C.T) / 2)
    if w.min() <= 0:
        raise ValueError(f"C must be positive definite (smallest eigenvalue {w.min():.3g}).")
    logC = (V * np.log(w)) @ V.T
    return logC[np.tril_indices(C.shape[0], -1)]


def random_correlation_matrix(p: int, random_state=None, *, scale: float = 1.0):
    """Random ``p x p`` correlation matrix: ``C(gamma)`` with ``gamma ~ N(0, scale^2 I)``.

    The paper draws its correlation matrices "following Archakov and Hansen (2021)" but
    does not give the law of ``gamma`` (Sec. 5.1): i.i.d. normal with
    standard deviation ``scale`` is a library choice. With ``scale = 1`` and ``p = 6`` the
    absolute correlations spread over ``[0, 0.99]`` (quartiles about 0.28, 0.53, 0.75):
    from nearly independent to strongly dependent pairs. For ``p = 2``, ``C_12 =
    tanh(gamma)``.

    Parameters
    ----------
    p : int
        The dimension.
    random_state : None, int or numpy.random.Generator
    scale : float, default=1.0
        Keyword-only; the standard deviation of the entries of ``gamma``.

    Returns
    -------
    ndarray, shape (p, p)
        Symmetric positive definite, unit diagonal.
    """
    p = _positive_int(p, "p", minimum=2)
    scale = _real(scale, "scale")
    if not (np.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be finite and >= 0, got {scale}.")
    gamma = _rng(random_state).normal(0.0, scale, size=p * (p - 1) // 2)
    return archakov_hansen_correlation(gamma)


# ====================================================================== Gaussian data
def _check_cov(C, d_x):
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise ValueError(f"C must be a square matrix, got shape {C.shape}.")
    p = C.shape[0]
    d_x = _positive_int(d_x, "d_x")
    if d_x >= p:
        raise ValueError(f"d_x must be smaller than the size of C ({p}), got {d_x}.")
    if not np.all(np.isfinite(C)):
        raise ValueError("C must be finite (no NaN or inf).")
    if not np.allclose(C, C.T, rtol=0, atol=1e-10 * np.max(np.abs(C))):
        raise ValueError("C must be symmetric (a covariance matrix).")
    try:
        np.linalg.cholesky(C)
    except np.linalg.LinAlgError:
        raise ValueError(
            f"C must be positive definite (smallest eigenvalue {np.linalg.eigvalsh(C).min():.3g})."
        ) from None
    return C, p, d_x


def sample_gaussian(C, n: int, d_x: int, random_state=None):
    """``n`` draws of ``Z ~ N(0, C)``; ``X = Z[:, :d_x]``, ``Y = Z[:, d_x:]``.

    Parameters
    ----------
    C : array_like, shape (p, p)
        Covariance (e.g. :func:`random_correlation_matrix`).
    n : int
        Number of draws.
    d_x : int
        Number of coordinates in ``X``, ``0 < d_x < p``.
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    X : ndarray, shape (n, d_x)
    Y : ndarray, shape (n, p - d_x)
    """
    C, p, d_x = _check_cov(C, d_x)
    n = _positive_int(n, "n")
    Lc = np.linalg.cholesky(C)  # (p, p)
    Z = _rng(random_state).standard_normal((n, p)) @ Lc.T  # (n, p)
    return np.ascontiguousarray(Z[:, :d_x]), np.ascontiguousarray(Z[:, d_x:])


def gaussian_conditional_moments(C, X, d_x: int | None = None):
    """True conditional mean and second moments of ``Y`` given ``X = x`` for ``N(0, C)``.

    With ``B = Sigma_YX Sigma_XX^{-1}`` and the Schur complement
    ``S = Sigma_YY - B Sigma_XY``: ``E[Y | x] = B x`` and
    ``E[Y Y^T | x] = S + (B x)(B x)^T`` (Gaussian conditioning; the truth in loss (31)).

    Parameters
    ----------
    C : array_like, shape (p, p)
    X : array_like, shape (n, d_x)
    d_x : int, optional
        Defaults to ``X.shape[1]``.

    Returns
    -------
    mean : ndarray, shape (n, d_y)
    second : ndarray, shape (n, d_y, d_y)
    """
    X = _finite_2d(X, "X")
    C, _, d_x = _check_cov(C, X.shape[1] if d_x is None else d_x)
    if X.shape[1] != d_x:
        raise ValueError(f"X must have d_x = {d_x} columns, got {X.shape[1]}.")
    Sxx, Sxy, Syy = C[:d_x, :d_x], C[:d_x, d_x:], C[d_x:, d_x:]
    B = np.linalg.solve(Sxx, Sxy).T  # (d_y, d_x) = Sigma_YX Sigma_XX^-1
    S = Syy - B @ Sxy  # (d_y, d_y)
    mean = X @ B.T  # (n, d_y)
    second = S[None, :, :] + mean[:, :, None] * mean[:, None, :]  # (n, d_y, d_y)
    return mean, second


# ====================================================================== small data sets
def _chain(incr):
    """Running means ``(u_1, (u_1+u_2)/2, ...)`` of the increments, row by row."""
    p = incr.shape[1]
    return np.cumsum(incr, axis=1) / np.arange(1, p + 1)


def sample_uniform_chain(n: int, random_state=None, *, p: int = 6, d_x: int = 3):
    """Sec. 5.1's uniform small data (Fig. 6): running means of i.i.d. ``U(0, 1)``.

    ``z = (U_1, (U_1+U_2)/2, ..., (U_1+...+U_p)/p)``; ``X`` the first ``d_x`` and ``Y``
    the last ``p - d_x`` coordinates (the split is not given in the paper; library
    choice, as for the Gaussian data).

    Parameters
    ----------
    n : int
        Number of draws.
    random_state : None, int or numpy.random.Generator
    p : int, default=6
        Keyword-only; the length of the chain ``z``.
    d_x : int, default=3
        Keyword-only; the coordinates in ``X``.

    Returns
    -------
    X : ndarray, shape (n, d_x)
    Y : ndarray, shape (n, p - d_x)
    """
    n, p, d_x = _positive_int(n, "n"), _positive_int(p, "p", 2), _positive_int(d_x, "d_x")
    if d_x >= p:
        raise ValueError(f"d_x must be smaller than p = {p}, got {d_x}.")
    Z = _chain(_rng(random_state).uniform(0.0, 1.0, size=(n, p)))
    return np.ascontiguousarray(Z[:, :d_x]), np.ascontiguousarray(Z[:, d_x:])


def uniform_chain_conditional_moments(X, p: int = 6):
    """True ``E[Y | x]`` and ``E[Y Y^T | x]`` for :func:`sample_uniform_chain`.

    Given ``x``, the partial sum ``s = d_x x_{d_x}`` is known and
    ``Y_k = (s + T_k) / (d_x + k)`` with ``T_k`` a sum of ``k`` fresh uniforms, so
    ``E[Y_k Y_l | x] = (s^2 + s (k + l) / 2 + min(k, l) / 12 + k l / 4)
    / ((d_x + k)(d_x + l))`` (derived).

    Parameters
    ----------
    X : array_like, shape (n, d_x)
    p : int, default=6
        Length of the chain, as in :func:`sample_uniform_chain`; ``d_x < p``.

    Returns
    -------
    mean : ndarray, shape (n, p - d_x)
    second : ndarray, shape (n, p - d_x, p - d_x)
    """
    X = _finite_2d(X, "X")
    p = _positive_int(p, "p", 2)
    d_x = X.shape[1]
    if d_x >= p:
        raise ValueError(f"X must have fewer than p = {p} columns, got {d_x}.")
    s = d_x * X[:, -1]  # (n,)
    k = np.arange(1, p - d_x + 1, dtype=np.float64)  # (d_y,)
    den = d_x + k
    mean = (s[:, None] + k / 2) / den  # (n, d_y)
    kk, ll = k[:, None], k[None, :]
    const = np.minimum(kk, ll) / 12 + kk * ll / 4  # (d_y, d_y)
    second = (s[:, None, None] ** 2 + s[:, None, None] * (kk + ll) / 2 + const) / (
        den[:, None] * den[None, :]
    )  # (n, d_y, d_y)
    return mean, second


def sample_cauchy_chain(n: int, random_state=None, *, p: int = 6, d_x: int = 3, scale: float = 0.1):
    """Sec. 5.1's heavy-tailed small data (Fig. 7): running means of i.i.d. Cauchy
    increments with location 0 and scale ``scale`` (0.1 in the paper).

    ``E[Y Y^T | x]`` does not exist for this law; the experiments report only positivity
    and normalisation of the model's conditional moments.

    Parameters
    ----------
    n : int
        Number of draws.
    random_state : None, int or numpy.random.Generator
    p : int, default=6
        Keyword-only; the length of the chain ``z``.
    d_x : int, default=3
        Keyword-only; the coordinates in ``X``.
    scale : float, default=0.1
        Keyword-only; the scale of the Cauchy increments.

    Returns
    -------
    X : ndarray, shape (n, d_x)
    Y : ndarray, shape (n, p - d_x)
    """
    n, p, d_x = _positive_int(n, "n"), _positive_int(p, "p", 2), _positive_int(d_x, "d_x")
    if d_x >= p:
        raise ValueError(f"d_x must be smaller than p = {p}, got {d_x}.")
    scale = _real(scale, "scale")
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale}.")
    Z = _chain(scale * _rng(random_state).standard_cauchy(size=(n, p)))
    return np.ascontiguousarray(Z[:, :d_x]), np.ascontiguousarray(Z[:, d_x:])


# ====================================================================== Fama-French proxy
def load_french_portfolios():
    """Monthly excess returns of the 3x3 size/value portfolios (linearmodels).

    ``linearmodels.datasets.french`` ships 819 monthly rows (1949-01 to 2017-03). Its
    portfolio columns are raw returns, so the risk-free rate ``RF`` is subtracted (an
    offline stand-in for the daily excess returns of Sec. 5.2).

    Returns
    -------
    dates : ndarray of datetime64, shape (819,)
    Z : ndarray, shape (819, 9)
        Excess returns of :data:`FRENCH_SV_PORTFOLIOS`, in that column order.

    Raises
    ------
    DatasetNotAvailable
        If the PyPI package ``linearmodels`` is not installed.
    """
    try:
        from linearmodels.datasets import french
    except ImportError as exc:
        raise DatasetNotAvailable(
            "The Fama-French portfolio data ship with the PyPI package 'linearmodels' "
            "(pip install linearmodels, or pip install -e ./experiments)."
        ) from exc
    df = french.load()
    Z = df[list(FRENCH_SV_PORTFOLIOS)].to_numpy(np.float64) - df[["RF"]].to_numpy(np.float64)
    return df["dates"].to_numpy(), np.ascontiguousarray(Z)


def french_classification_data(d: int):
    """Sec. 5.2's regression pairs on the monthly stand-in.

    ``y_t = sum_{i <= d} z_{t,i}`` (scalar) and ``x_t = (z_{t-1,1}, ..., z_{t-1,d})``,
    with ``z`` the excess returns of the first ``d`` of :data:`FRENCH_SV_PORTFOLIOS`.

    Parameters
    ----------
    d : int
        The number of portfolios (at most ``len(FRENCH_SV_PORTFOLIOS)``).

    Returns
    -------
    X : ndarray, shape (818, d)
    y : ndarray, shape (818,)
    """
    d = _positive_int(d, "d")
    if d > len(FRENCH_SV_PORTFOLIOS):
        raise ValueError(f"d must be <= {len(FRENCH_SV_PORTFOLIOS)}, got {d}.")
    _, Z = load_french_portfolios()
    Z = Z[:, :d]
    return np.ascontiguousarray(Z[:-1]), Z[1:].sum(axis=1)
