"""Gaussian-process posterior with (complex) random features, App. D of Wacker et al.

Model (App. D.2): ``f ~ CGP(0, k_hat)``, ``k_hat(x, y) = phi(x)^T conj(phi(y))`` with
``Phi = Phi(X)`` (N, D) real or complex, independent noise of variance ``sigma_i^2``, and
targets ``Y`` (N, T). The posterior (eq. 84-85) is computed in one of two equivalent
forms, both with Cholesky factorisations and triangular solves (never inverses):

* **primal / weight space** (eq. 88-90), O(N D^2 + D^3):
  ``B = Phi^H diag(sigma^-2) Phi + I_D = L L^H``,
  ``mu(x) = phi(x)^T B^-1 Phi^H diag(sigma^-2) Y``,
  ``k_N(x, x') = phi(x)^T B^-1 conj(phi(x'))``;
  for complex features ``B`` is formed from three real products (footnote 16):
  ``Re B = R^T W R + J^T W J + I``, ``Im B = R^T W J - (R^T W J)^T`` with
  ``Phi = R + iJ``, ``W = diag(sigma^-2)``;
* **dual / function space** (eq. 84-85), O(N^2 D + N^3), cheaper when ``D > N``:
  ``K_n = Phi Phi^H + diag(sigma^2) = L L^H``, ``mu(x) = phi(x)^T Phi^H K_n^-1 Y``,
  ``k_N(x, x') = k_hat(x, x') - phi(x)^T Phi^H K_n^-1 Phi conj(phi(x'))``.

Predictions are the real parts (eq. 86-87): ``Re mu`` and ``Re k_N``; the posterior
variance ``k_N(x, x)`` is real by construction (``|L^-1 conj phi(x)|^2`` in the primal
form).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky, solve_triangular

__all__ = ["FeaturePosterior", "as_feature_matrix", "gram_dual", "gram_primal"]

_CHUNK = 2048  # test points per block in variance / covariance computations
SOLVERS = ("auto", "primal", "dual")


def as_feature_matrix(P, name: str = "features") -> np.ndarray:
    """Features as float64 / complex128 NumPy, checked finite."""
    if hasattr(P, "detach"):
        P = P.detach().cpu().numpy()
    P = np.asarray(P)
    P = P.astype(np.complex128 if np.iscomplexobj(P) else np.float64, copy=False)
    if P.ndim != 2:
        raise ValueError(f"The feature map returned {name} of shape {P.shape}; expected 2-D.")
    if not np.all(np.isfinite(P)):
        raise ValueError(
            f"The feature map returned non-finite {name} (overflow?): rescale the inputs or "
            "use a feature map with bounded features."
        )
    return P


def gram_primal(Phi: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """``Phi^H diag(w) Phi`` (D, D), with three real products for complex ``Phi``.

    Real ``Phi`` with uniform or non-negative ``w`` is a symmetric rank-k update
    (``w0 Phi^T Phi`` or ``(sqrt(w) Phi)^T (sqrt(w) Phi)``: NumPy calls BLAS ``syrk`` for
    ``A.T @ A``, half the flops of a general product).
    """
    if w is not None and not np.iscomplexobj(Phi):
        w = np.asarray(w)
        if w.size and np.all(w == w.flat[0]):
            return w.flat[0] * (Phi.T @ Phi)
        if np.all(w >= 0):
            Ps = Phi * np.sqrt(w)[:, None]
            return Ps.T @ Ps
    if np.iscomplexobj(Phi):
        R, J = Phi.real, Phi.imag
        Rw = R if w is None else R * w[:, None]
        Jw = J if w is None else J * w[:, None]
        A3 = Rw.T @ J  # R^T W J
        out = np.empty((Phi.shape[1], Phi.shape[1]), dtype=np.complex128)
        out.real = Rw.T @ R + Jw.T @ J
        out.imag = A3 - A3.T
        return out
    Pw = Phi if w is None else Phi * w[:, None]
    return Pw.T @ Phi


def gram_dual(Phi: np.ndarray, Psi: np.ndarray | None = None) -> np.ndarray:
    """``Phi conj(Psi)^T`` (N, M) (``k_hat`` between the rows), ``Psi`` defaults to ``Phi``."""
    Psi = Phi if Psi is None else Psi
    if np.iscomplexobj(Phi) or np.iscomplexobj(Psi):
        return Phi @ np.conj(Psi).T
    return Phi @ Psi.T


def _cholesky(A: np.ndarray, what: str) -> np.ndarray:
    _check_finite(A, what)  # an inf entry gives NaN factors, not an error
    try:
        return cholesky(A, lower=True, check_finite=False)
    except LinAlgError as exc:
        raise np.linalg.LinAlgError(
            f"Cholesky factorisation of the {what} failed (not positive definite): the "
            "noise is too small for the scale of the features; increase the noise / "
            "regularisation."
        ) from exc


def _check_finite(A: np.ndarray, what: str) -> None:
    """Raise if ``A`` has an entry that overflowed (an O(size) check)."""
    if not np.all(np.isfinite(A)):
        raise np.linalg.LinAlgError(
            f"The {what} overflows float64: the noise / regularisation is too small for "
            "the scale of the features and targets; increase it or scale the targets down."
        )


def choose_solver(solver: str, n: int, D: int) -> str:
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}.")
    if solver == "auto":
        return "dual" if D > n else "primal"
    return solver


class FeaturePosterior:
    """Fitted posterior of one (complex) random-feature GP; see the module docstring.

    Build with :meth:`fit` (generic noise) or :meth:`from_primal` (a precomputed ``B`` and
    right-hand side, e.g. when several noise vectors share Gram matrices).
    """

    def __init__(self, mode, L, coef, Phi=None, dual_coef=None):
        self.mode = mode  # "primal" or "dual"
        self.L = L  # Cholesky factor of B (D, D) or K_n (N, N)
        self.coef = coef  # (D, T): mu(x) = Re(phi(x)^T coef)
        self.Phi = Phi  # training features (dual only)
        self.dual_coef = dual_coef  # K_n^-1 Y (N, T) (dual only)

    # ------------------------------------------------------------------ building
    @classmethod
    def fit(cls, Phi, Y, noise, solver: str = "auto") -> FeaturePosterior:
        """Posterior from features ``Phi`` (N, D), targets ``Y`` (N, T), noise (N,) > 0."""
        n, D = Phi.shape
        noise = np.broadcast_to(np.asarray(noise, dtype=np.float64), (n,))
        if np.any(~np.isfinite(noise)) or np.any(noise <= 0):
            raise ValueError("The noise variances must be positive and finite.")
        mode = choose_solver(solver, n, D)
        if mode == "primal":
            w = 1.0 / noise
            B = gram_primal(Phi, w)
            B[np.diag_indices(D)] += 1.0
            PhiH = np.conj(Phi).T if np.iscomplexobj(Phi) else Phi.T  # no copy if real
            rhs = PhiH @ (Y * w[:, None])  # Phi^H W Y (D, T)
            return cls.from_primal(B, rhs)
        Kn = gram_dual(Phi)
        Kn[np.diag_indices(n)] += noise
        return cls.from_dual(Kn, Y, Phi)

    @classmethod
    def from_primal(cls, B, rhs) -> FeaturePosterior:
        """From ``B = Phi^H W Phi + I`` (D, D) and ``rhs = Phi^H W Y`` (D, T)."""
        L = _cholesky(B, "weight-space matrix B = Phi^H diag(sigma^-2) Phi + I")
        coef = cho_solve((L, True), rhs, check_finite=False)
        _check_finite(coef, "posterior mean's weight vector B^-1 Phi^H diag(sigma^-2) Y")
        return cls("primal", L, coef)

    @classmethod
    def from_dual(cls, Kn, Y, Phi) -> FeaturePosterior:
        """From ``K_n = Phi Phi^H + diag(sigma^2)`` (N, N), targets (N, T), features."""
        L = _cholesky(Kn, "kernel matrix K_hat + diag(sigma^2)")
        a = cho_solve((L, True), Y.astype(Kn.dtype, copy=False), check_finite=False)
        coef = np.conj(Phi).T @ a  # Phi^H K_n^-1 Y (D, T)
        _check_finite(coef, "posterior mean's weight vector Phi^H K_n^-1 Y")
        return cls("dual", L, coef, Phi=Phi, dual_coef=a)

    # ------------------------------------------------------------------ predictions
    def mean(self, Phi_s) -> np.ndarray:
        """``Re mu`` (eq. 86), shape (n, T)."""
        if np.iscomplexobj(Phi_s) or np.iscomplexobj(self.coef):
            c = self.coef
            return (
                Phi_s.real @ c.real - Phi_s.imag @ c.imag
                if np.iscomplexobj(Phi_s)
                else (Phi_s @ c.real)
            )
        return Phi_s @ self.coef

    def _whitened(self, Phi_s):
        # primal: L^-1 conj(Phi_s)^T (D, n); dual: L^-1 Phi conj(Phi_s)^T (N, n)
        rhs = np.conj(Phi_s).T if self.mode == "primal" else gram_dual(self.Phi, Phi_s)
        return solve_triangular(self.L, rhs, lower=True, check_finite=False)

    def var(self, Phi_s) -> np.ndarray:
        """Latent posterior variance ``k_N(x, x)`` (real, clipped at 0), shape (n,)."""
        out = np.empty(Phi_s.shape[0])
        for lo in range(0, Phi_s.shape[0], _CHUNK):
            P = Phi_s[lo : lo + _CHUNK]
            U = self._whitened(P)
            q = np.sum(U.real**2, axis=0) + (
                np.sum(U.imag**2, axis=0) if np.iscomplexobj(U) else 0.0
            )
            if self.mode == "primal":
                v = q
            else:
                prior = np.sum(P.real**2, axis=1) + (
                    np.sum(P.imag**2, axis=1) if np.iscomplexobj(P) else 0.0
                )
                v = prior - q
            out[lo : lo + _CHUNK] = np.maximum(v, 0.0)
        return out

    def cov(self, Phi_s) -> np.ndarray:
        """``Re k_N(x_i, x_j)`` (eq. 87), shape (n, n)."""
        U = self._whitened(Phi_s)
        C = np.real(np.conj(U).T @ U)
        if self.mode == "dual":
            C = np.real(gram_dual(Phi_s)) - C
        return 0.5 * (C + C.T)
