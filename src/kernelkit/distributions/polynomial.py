"""Polynomial joint distribution learning (JPDL), App. B, with the SOS positivity SDP."""

from __future__ import annotations

import itertools
import math
import warnings
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from .._backend import caller_stacklevel, validate_positive_float, validate_positive_int
from .._backend.params import POSITIVE, int_range
from .._backend.sklearn_validation import validate_data as sk_validate_data
from ._base import TensorJointModel, check_constraint, check_xy
from ._basis import train_cross
from .joint import solve_low_rank

__all__ = ["PolynomialBasis", "PolynomialJointDistribution", "monomial_exponents"]


def monomial_exponents(d: int, degree: int) -> np.ndarray:
    """Exponents of all monomials in ``d`` variables of total degree <= ``degree``.

    Ordered by degree, then lexicographically; shape ``(C(d + degree, degree), d)``.
    """
    rows = []
    for deg in range(degree + 1):
        for combo in itertools.combinations_with_replacement(range(d), deg):
            e = np.zeros(d, dtype=np.int64)
            for j in combo:
                e[j] += 1
            rows.append(e)
    return np.array(rows, dtype=np.int64).reshape(-1, d)


def check_monomial_count(d: int, degree: int, max_monomials: int) -> int:
    """The number of monomials of total degree ``<= degree`` in ``d`` variables, ``m =
    C(d + degree, degree)`` (the length of the basis vector ``tau(x)`` of App. B, whose
    (m, m) Gram matrix :class:`PolynomialBasis` decomposes), or a ``ValueError`` naming
    ``degree`` and ``max_monomials`` where it exceeds ``max_monomials``."""
    m = math.comb(d + degree, degree)
    if m > max_monomials:
        gib = 8.0 * m * m / 2**30
        raise ValueError(
            f"degree={degree} on {d} features gives C({d + degree}, {degree}) = {m} "
            f"monomials, more than max_monomials={max_monomials}: the basis decomposes an "
            f"{m} x {m} Gram matrix ({gib:.3g} GiB, O(m^3) time). Lower the degree, reduce "
            "the features first (e.g. PCA), or raise max_monomials deliberately."
        )
    return m


def _monomials(Z: np.ndarray, exps: np.ndarray) -> np.ndarray:
    """Vandermonde matrix ``[z_i^alpha]``, shape (n, n_monomials)."""
    q = int(exps.max()) if exps.size else 0
    powers = np.ones((q + 1, *Z.shape))  # powers[k] = Z ** k, (q+1, n, d)
    for k in range(1, q + 1):
        powers[k] = powers[k - 1] * Z
    out = np.ones((Z.shape[0], exps.shape[0]))
    for a, e in enumerate(exps):  # loop over monomials (features), not samples
        for j in np.flatnonzero(e):
            out[:, a] *= powers[e[j], :, j]
    return out


class PolynomialBasis(TransformerMixin, BaseEstimator):
    """Empirically orthonormalised monomial basis of App. B.

    ``k_q(x, x') = tau(x) G^{-1} tau(x')^T`` with the Vandermonde ``V`` (n, m) of the
    monomials of degree <= ``degree`` and ``G = V^T V / n``: ``A = L = V G^{-1/2}``,
    ``A^T A = n I`` (so ``Lambda = n I``), ``psi(x) = G^{-1/2} tau(x)^T``. Inputs are
    standardised first (library choice: raw monomials are ill-conditioned).

    Parameters
    ----------
    degree : int, default=4
        Total degree of the monomials.
    standardize : bool, default=True
        Centre and scale every column before forming the monomials.
    max_monomials : int, default=10000
        Largest number of monomials ``m = C(d + degree, degree)`` to build: the basis
        forms an (n, m) Vandermonde matrix and decomposes an (m, m) Gram matrix (8 m^2
        bytes, O(m^3) time), so ``fit`` refuses a larger ``m`` up front with a
        ``ValueError`` instead of exhausting memory. Raise it deliberately.

    Attributes
    ----------
    exponents_ : ndarray of int, shape (m, d)
    mean_, scale_ : ndarray, shape (d,)
        Standardisation
    coef_ : ndarray, shape (m, r)
        ``G^{-1/2}`` (r = m), or ``U Lambda^{-1/2}``
        on the range of ``G`` if it is singular (r = its rank < m)
    eigenvalues_ : ndarray, shape (r,)
        ``n`` (all equal)
    train_features_t_ : ndarray, shape (r, n)
        ``A^T`` (also ``factor_t_``; ``rotation_ = I``)
    train_sums_ : ndarray, shape (r,)
        ``A^T 1``
    n_components_ : int
        ``r``

    Notes
    -----
    Inputs of any real dtype are converted to float64; outputs are float64.
    """

    _parameter_constraints: ClassVar[dict] = {
        "degree": int_range(0, 64),
        "standardize": ["boolean"],
        "max_monomials": int_range(1, None),
    }

    def __init__(self, degree: int = 4, standardize: bool = True, max_monomials: int = 10_000):
        self.degree = degree
        self.standardize = standardize
        self.max_monomials = max_monomials

    def fit(self, X, y=None):
        """Fit the orthonormal monomial basis.

        Sets the attributes of the class docstring (``coef_`` (m, r),
        ``train_features_t_`` (r, n), ...) for the ``m`` monomials of degree <= ``degree``.

        Parameters
        ----------
        X : array-like of shape (n, d)
        y : None
            Ignored.

        Returns
        -------
        PolynomialBasis
            ``self``.
        """
        self._validate_params()
        degree = validate_positive_int(self.degree, "degree", minimum=0, maximum=64)
        X = np.ascontiguousarray(sk_validate_data(self, X, dtype=np.float64, accept_sparse=False))
        n, d = X.shape
        check_monomial_count(d, degree, self.max_monomials)
        if self.standardize:
            # moments of X / max|X| (per column): X.std squares X, which overflows beyond
            # |x| ~ 1e154 and underflows to 0 below ~1e-154 (constant monomials)
            top = np.max(np.abs(X), axis=0)  # (d,)
            top = np.where(top > 0, top, 1.0)
            U = X / top  # (n, d), entries in [-1, 1]
            self.mean_ = U.mean(axis=0) * top
            scale = U.std(axis=0) * top
            self.scale_ = np.where(scale > 0, scale, 1.0)
        else:
            self.mean_, self.scale_ = np.zeros(d), np.ones(d)
        self.exponents_ = monomial_exponents(d, degree)
        with np.errstate(over="ignore", invalid="ignore"):
            V = _monomials((X - self.mean_) / self.scale_, self.exponents_)  # (n, m)
            G = V.T @ V / n
        if not np.all(np.isfinite(G)):
            raise ValueError(
                f"X: the Gram matrix of the degree-{degree} monomials overflows float64 "
                f"(max |x| = {float(np.max(np.abs(X))):.3g}"
                f"{', standardize=False' if not self.standardize else ''}); standardise X "
                "(standardize=True) or lower the degree."
            )
        ev, U = np.linalg.eigh(G)
        keep = ev > 1e-12 * ev.max()
        if np.all(keep):
            self.coef_ = (U / np.sqrt(ev)) @ U.T  # G^{-1/2}, symmetric
        else:  # fewer distinct samples than monomials: the range of G (pseudo-inverse root)
            self.coef_ = U[:, keep] / np.sqrt(ev[keep])  # (n_monomials, rank)
        self.train_features_t_ = np.ascontiguousarray((V @ self.coef_).T)
        # the basis protocol of LowRankBasis: A = L V with L = A, V = I
        self.factor_t_ = self.train_features_t_
        self.rotation_ = np.eye(self.coef_.shape[1])
        self.train_sums_ = self.train_features_t_.sum(axis=1)
        self.eigenvalues_ = np.full(self.coef_.shape[1], float(n))
        self.n_components_ = self.coef_.shape[1]
        return self

    @property
    def train_features_(self):
        return self.train_features_t_.T

    def monomials(self, X) -> np.ndarray:
        """``tau(x)``, the ``m`` monomials of the standardised inputs.

        Parameters
        ----------
        X : array-like of shape (n, d)

        Returns
        -------
        ndarray of shape (n, m)
            float64.
        """
        Z = self._standardized(X)
        with np.errstate(over="ignore", invalid="ignore"):
            return self._finite(_monomials(Z, self.exponents_), Z)

    def transform(self, X) -> np.ndarray:
        """``psi(x) = coef_^T tau(x)``: ``G^{-1/2} tau(x)``, or its projection on the
        range of a singular ``G``.

        Parameters
        ----------
        X : array-like of shape (n, d)

        Returns
        -------
        ndarray of shape (n, r)
            float64; ``r = n_components_`` (``m`` unless ``G`` is singular).

        Raises
        ------
        ValueError
            The monomials (or ``psi``) of a row overflow float64 (``|z|^degree`` beyond
            ~1e308 for the standardised ``z``, e.g. ``|z| > 1e77`` at degree 4): the
            polynomial model cannot be evaluated there.
        """
        Z = self._standardized(X)
        with np.errstate(over="ignore", invalid="ignore"):
            # one check, of psi: a monomial that overflows makes its whole row of psi
            # non-finite (inf times a coefficient, inf - inf or inf * 0 = NaN)
            return self._finite(_monomials(Z, self.exponents_) @ self.coef_, Z)

    def _standardized(self, X) -> np.ndarray:
        """The validated ``X`` (n, d), standardised as at fit (float64)."""
        check_is_fitted(self, "coef_")
        X = np.ascontiguousarray(
            sk_validate_data(
                self, X, reset=False, dtype=np.float64, accept_sparse=False, ensure_min_samples=0
            )
        )
        with np.errstate(over="ignore", invalid="ignore"):  # inf: named by _finite
            return (X - self.mean_) / self.scale_

    def _finite(self, values: np.ndarray, Z: np.ndarray) -> np.ndarray:
        """``values`` (n, k), or a ``ValueError`` naming the rows whose monomials overflow."""
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(values.sum()):  # one pass, no (n, k) temporary: the usual case
                return values
        bad = ~np.all(np.isfinite(values), axis=1)  # (the sum may overflow for finite values)
        if np.any(bad):
            zmax = float(np.max(np.abs(Z[bad])))
            raise ValueError(
                f"X: the degree-{self.degree} monomials of the standardised inputs overflow "
                f"float64 at {int(bad.sum())} of {len(bad)} rows (largest |z| = {zmax:.3g} "
                "standard deviations from the training mean): the polynomial model cannot "
                "be evaluated that far from its training data."
            )
        return values


def _import_cvxpy():
    try:
        import cvxpy as cp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "PolynomialJointDistribution(constraint='positive') solves a sum-of-squares "
            "SDP with cvxpy, which is not installed: pip install 'kernelkit[sdp]'."
        ) from exc
    return cp


#: cvxpy solvers of semidefinite programs (``solver`` of the ``"positive"`` SDP); cvxpy
#: reads the names case-insensitively
_SDP_SOLVERS = {
    case(name)
    for name in ("CLARABEL", "SCS", "MOSEK", "CVXOPT", "SDPA", "COPT", "COSMO", "CUCLARABEL")
    for case in (str.upper, str.lower)
}


class PolynomialJointDistribution(TensorJointModel):
    """Polynomial JDL (JPDL, App. B): ``h(x, y) = psi_Y(y)^T H psi_X(x)`` with
    empirically orthonormal monomials of degree <= ``degree`` (exact, tolerance 0).

    Objective (38) is the diagonal form of problem (22)
    (``docs/derivations/joint_distribution.md``) with ``W = 1 + reg`` and ``A = L``:
    unconstrained ``H = (L_Y^T L_X / n - S / n^2) / (1 + reg)``; normalised with one
    multiplier. ``constraint="positive"`` adds the sum-of-squares condition (39)
    ``1 + h(z) = tau(z) M tau(z)^T``, ``M >= 0`` (PSD), ``z = (x, y)``, which makes
    ``1 + h >= 0`` for **all** (x, y), plus (20); solved as an SDP with cvxpy (Clarabel
    by default; optional extra ``kernelkit[sdp]``). ``tau`` holds the monomials
    ``x^a y^b`` with ``|a|, |b| <= degree // 2``: by Reznick's half-Newton-polytope
    theorem no other monomial of the paper's ``tau_q(z)`` can carry weight, so the
    feasible set is that of (39) while the Gram block shrinks from
    ``C(d_X + d_Y + q, q)`` = 210 to ``C(d_X + q/2, q/2) C(d_Y + q/2, q/2)`` = 100 for
    d_X = d_Y = 3, q = 4 (1225 instead of 3003 coefficient equations; derived).

    Parameters
    ----------
    degree : int, default=4
    reg : float, default=1e-3
    constraint : {None, "normalized", "positive"}, default=None
    solver : str, optional
        cvxpy solver for the SDP ("CLARABEL" default, or "SCS").
    standardize : bool, default=True
    max_monomials : int, default=10000
        Largest monomial count of either basis (:class:`PolynomialBasis`); checked for
        both sides before anything is built.

    Attributes
    ----------
    coef_ : ndarray, shape (m_Y, m_X)
        ``m_X = C(d_X + degree, d_X)`` and ``m_Y = C(d_Y + degree, d_Y)`` monomials (App. B
        prints ``m_Y = C(d_X + q, d_X)``), fewer where a basis is rank-deficient.
    basis_x_, basis_y_ : PolynomialBasis
    sos_gram_ : ndarray (N, N), the SOS Gram matrix (``"positive"`` only)
    sos_exponents_ : ndarray (N, d_X + d_Y), exponents of ``tau`` (standardised x, y)
        (``"positive"`` only)

    Notes
    -----
    Inputs of any real dtype are converted to float64; outputs are float64 NumPy arrays.
    """

    _parameter_constraints: ClassVar[dict] = {
        "degree": int_range(0, 64),
        "reg": POSITIVE,
        "constraint": [None, StrOptions({"normalized", "positive"})],
        "solver": [None, StrOptions(_SDP_SOLVERS)],
        "standardize": ["boolean"],
        "max_monomials": int_range(1, None),
    }

    def __init__(
        self,
        degree: int = 4,
        reg: float = 1e-3,
        constraint=None,
        solver=None,
        standardize: bool = True,
        max_monomials: int = 10_000,
    ):
        self.degree = degree
        self.reg = reg
        self.constraint = constraint
        self.solver = solver
        self.standardize = standardize
        self.max_monomials = max_monomials

    def fit(self, X, Y):
        """Fit on paired samples.

        Parameters
        ----------
        X : array-like of shape (n, d_X)
        Y : array-like of shape (n, d_Y) or (n,)

        Returns
        -------
        PolynomialJointDistribution
            ``self``.
        """
        self._validate_params()
        reg = validate_positive_float(self.reg, "reg")
        constraint = check_constraint(self.constraint)
        X, Y = check_xy(X, Y, estimator=self)
        n = X.shape[0]
        for Z in (X, Y):  # both sides before either is built
            check_monomial_count(Z.shape[1], int(self.degree), self.max_monomials)
        self.basis_x_ = PolynomialBasis(self.degree, self.standardize, self.max_monomials).fit(X)
        self.basis_y_ = PolynomialBasis(self.degree, self.standardize, self.max_monomials).fit(Y)
        self.X_fit_, self.Y_fit_, self.n_samples_ = X, Y, n
        self._finish_fit()
        G = train_cross(self.basis_y_, self.basis_x_)  # L_Y^T L_X, (m_Y, m_X)
        lx, ly = self.basis_x_.eigenvalues_, self.basis_y_.eigenvalues_
        if constraint == "positive":
            self.coef_, self.sos_gram_, self.solver_info_ = self._solve_sos(G, n, reg)
        else:
            self.coef_, self.solver_info_ = solve_low_rank(
                G, self.s_x_, self.s_y_, lx, ly, n, reg, constraint
            )
        return self

    def _solve_sos(self, G, n, reg):
        cp = _import_cvxpy()
        bx, by = self.basis_x_, self.basis_y_
        dx, dy = bx.exponents_.shape[1], by.exponents_.shape[1]
        q = int(self.degree)
        ex, ey = bx.exponents_, by.exponents_  # (m_X, d_X), (m_Y, d_Y)
        mx, my = ex.shape[0], ey.shape[0]  # monomial counts
        # SOS basis: by Reznick's half-Newton-polytope theorem every square in an SOS
        # decomposition of 1 + h has its exponents in half the Newton polytope of 1 + h,
        # which lies in {|a| <= q, |b| <= q}; so only x^a y^b with |a|, |b| <= q // 2 can
        # occur (a subset of tau_q(z) with the same feasible set as (39)).
        hx, hy = monomial_exponents(dx, q // 2), monomial_exponents(dy, q // 2)
        ez = np.concatenate(
            [np.repeat(hx, hy.shape[0], axis=0), np.tile(hy, (hx.shape[0], 1))], axis=1
        )  # (N, d_X + d_Y)
        if getattr(self, "_full_sos_basis", False):  # the paper's tau_q(z) (tests only)
            ez = monomial_exponents(dx + dy, q)
        N = ez.shape[0]
        gam = np.concatenate([np.repeat(ex, my, axis=0), np.tile(ey, (mx, 1))], axis=1)
        pair_all = (ez[:, None, :] + ez[None, :, :]).reshape(N * N, -1)
        index = {}
        for g in map(tuple, np.concatenate([pair_all, gam, np.zeros((1, dx + dy), int)])):
            index.setdefault(g, len(index))
        n_gamma = len(index)
        # coefficient of z^gamma in tau M tau^T: sum over pairs (a, b) with e_a + e_b = gamma
        pair = (ez[:, None, :] + ez[None, :, :]).reshape(N * N, -1)
        rows_m = np.array([index[tuple(g)] for g in pair])
        vec_m = (np.arange(N)[:, None] + N * np.arange(N)[None, :]).ravel()  # F-order vec
        import scipy.sparse as sp

        Cm = sp.csr_array((np.ones(N * N), (rows_m, vec_m)), shape=(n_gamma, N * N))
        # coefficient of x^alpha y^beta in h = tau_Y(y) Mc tau_X(x)^T, Mc = Gy^-1/2 H Gx^-1/2
        rows_h = np.array([index[tuple(g)] for g in gam])  # (mx * my,) in F-order of Mc
        Ch = sp.csr_array(
            (np.ones(mx * my), (rows_h, np.arange(mx * my))), shape=(n_gamma, mx * my)
        )
        e0 = np.zeros(n_gamma)
        e0[index[(0,) * (dx + dy)]] = 1.0

        S = np.multiply.outer(self.s_y_, self.s_x_)
        c = G / n - S / n**2
        H = cp.Variable((by.coef_.shape[1], bx.coef_.shape[1]))
        M = cp.Variable((N, N), PSD=True)
        # monomial coefficients of h = tau_Y C_Y H C_X^T tau_X^T (standardised inputs)
        Mc = by.coef_ @ H @ bx.coef_.T
        obj = (1.0 + reg) * cp.sum_squares(H) - 2 * cp.sum(cp.multiply(c, H))
        cons = [
            Cm @ cp.vec(M, order="F") == e0 + Ch @ cp.vec(Mc, order="F"),
            cp.sum(cp.multiply(S / np.abs(S).max(), H)) == 0,
        ]
        prob = cp.Problem(cp.Minimize(obj), cons)
        solver = self.solver or "CLARABEL"
        prob.solve(solver=solver)
        if prob.status not in ("optimal", "optimal_inaccurate") or H.value is None:
            raise RuntimeError(f"the SOS program did not solve: status {prob.status!r}.")
        if prob.status == "optimal_inaccurate":
            warnings.warn(
                f"{type(self).__name__}: the SOS program ({solver}) stopped at reduced "
                "accuracy (status 'optimal_inaccurate'); the constraint 1 + h >= 0 may hold "
                "only approximately. Try another solver (solver=...) or a larger reg.",
                ConvergenceWarning,
                stacklevel=caller_stacklevel(),
            )
        self.sos_exponents_ = ez
        return (
            np.asarray(H.value),
            np.asarray(M.value),
            {
                "status": prob.status,
                "solver": solver,
                "sos_size": N,
                "n_equations": n_gamma,
                "compile_time": prob.compilation_time,
                "solve_time": prob.solver_stats.solve_time,
                "iterations": prob.solver_stats.num_iters,
            },
        )
