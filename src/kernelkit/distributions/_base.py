"""Shared input checks and the conditional machinery of the tensor-product models."""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._backend import caller_stacklevel, to_numpy, validate_data
from .._backend.sklearn_validation import validate_data as sk_validate_data
from ._basis import dot_train, train_dot
from ._chunked import as_dask_rows, is_dask_array, lazy_transform, reduce_rows, train_moments

__all__ = ["TensorJointModel", "check_indicator", "check_xy"]

CONSTRAINTS = (None, "normalized", "positive")


def check_xy(
    X,
    Y,
    *,
    estimator=None,
    reset: bool = True,
    min_samples: int = 2,
    n_features_x=None,
    n_features_y=None,
):
    """Validate paired samples: 2-D float64 ``X``, ``Y`` (1-D ``Y`` becomes one column).

    With ``estimator``, ``X`` goes through scikit-learn's ``validate_data`` (which sets, or
    with ``reset=False`` checks, ``n_features_in_``). Raises ``ValueError`` naming ``X`` /
    ``Y`` for NaN/inf, wrong dimensions, different numbers of rows or fewer than
    ``min_samples`` rows, ``TypeError`` for sparse input.
    """
    if Y is None:
        who = type(estimator).__name__ if estimator is not None else "this function"
        raise ValueError(
            f"{who} requires y to be passed, but the target y is None (pass the paired samples Y)."
        )
    if estimator is not None:
        X = sk_validate_data(
            estimator,
            X,
            reset=reset,
            dtype=np.float64,
            accept_sparse=False,
            ensure_min_samples=min_samples,
        )
        X = np.ascontiguousarray(X)
    else:
        X = _as_float2d(X, "X", n_features_x, allow_empty=min_samples == 0)
    Y = _as_float2d(Y, "Y", n_features_y, allow_empty=min_samples == 0)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"X and Y must have the same number of rows (samples), got X with {X.shape[0]} "
            f"and Y with {Y.shape[0]}."
        )
    if X.shape[0] < min_samples:
        raise ValueError(
            f"at least {min_samples} samples are needed, got n_samples = {X.shape[0]}."
        )
    return X, Y


def _as_float2d(Z, name, n_features=None, allow_empty=False):
    if sp.issparse(Z):
        raise TypeError(f"{name}: sparse input is not supported; pass a dense array.")
    if Z is not None and not hasattr(Z, "ndim"):
        Z = np.asarray(Z)
    if Z is not None and getattr(Z, "ndim", 2) == 1:
        if not hasattr(Z, "reshape"):  # a pandas Series has ndim but no reshape
            Z = np.asarray(Z)
        Z = Z.reshape(-1, 1)
    Z, _ = validate_data(Z, name, n_features=n_features, allow_empty=allow_empty)
    return np.ascontiguousarray(to_numpy(Z, dtype=np.float64))


def _check_mass(den: np.ndarray, n: int) -> None:
    """Warn where ``n + s^T H psi(x)`` (n times the mass of ``1 + h(x, .)`` over the
    training targets) is not positive: the conditional (5) is then no distribution and,
    at exactly 0, infinite."""
    bad = ~(den > 1e-12 * n)
    if np.any(bad):
        warnings.warn(
            f"the model's mass sum_j (1 + h(x, y_j)) is <= 0 at {int(bad.sum())} of "
            f"{den.shape[0]} query points: the conditional there is not a probability "
            "distribution (values may be infinite). Use constraint='positive', a larger "
            "reg or a larger lengthscale.",
            RuntimeWarning,
            stacklevel=caller_stacklevel(),
        )


def _mass_checked(den: np.ndarray, n: int) -> np.ndarray:
    """:func:`_check_mass` on one block of a lazy denominator (warns when computed)."""
    _check_mass(den, n)
    return den


def _divide_by_mass(num, add, den, n: int):
    """``(num + add) / den[:, None]`` after the mass check of ``den`` (n_new,); in place
    for NumPy, lazy (the check runs when computed) for Dask."""
    if is_dask_array(den):
        den = den.map_blocks(_mass_checked, n, dtype=np.float64)
    else:
        _check_mass(den, n)
    if is_dask_array(num) or is_dask_array(den):
        return (num + add) / den[:, None]
    num += add
    num /= den[:, None]
    return num


def _indicator_block(values: np.ndarray) -> np.ndarray:
    """``values`` as float64 if every entry is 0 or 1 (booleans included), else ValueError."""
    values = np.asarray(values)
    if values.dtype != bool and (
        not np.issubdtype(values.dtype, np.number) or np.iscomplexobj(values)
    ):
        raise TypeError(f"event must be boolean or 0/1 values, got dtype {values.dtype}.")
    values = values.astype(np.float64)
    bad = (values != 0.0) & (values != 1.0)
    if np.any(bad):
        raise ValueError(
            "event must be an indicator (boolean or 0/1 at the training targets), got "
            f"{int(bad.sum())} other value(s), e.g. {float(values[bad].ravel()[0])!r}; for the "
            "expectation of other values use conditional_expectation."
        )
    return values


def check_indicator(values):
    """An event's indicator values (n,) or (n, 1) as float64; lazily checked, block by
    block, for a Dask array. ``TypeError`` / ``ValueError`` naming ``event`` unless every
    value is boolean, 0 or 1."""
    if is_dask_array(values):
        return values.map_blocks(_indicator_block, dtype=np.float64)
    return _indicator_block(values)


def check_constraint(constraint):
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {constraint!r}.")
    return constraint


def _check_given(given):
    if given not in ("x", "y"):
        raise ValueError(f"given must be 'x' (Y given X) or 'y' (X given Y), got {given!r}.")
    return given


def _train_moments(basis, F2):
    """``(A^T F, 1^T F)`` over the training samples for values ``F`` (n, k)."""
    if basis.factor_t_ is None:  # one pass over the stored samples (NumPy or Dask)
        return train_moments(basis, F2)
    return train_dot(basis, F2), F2.sum(axis=0)


class TensorJointModel(BaseEstimator):
    """Conditionals of a fitted tensor model ``1 + h(x, y) = 1 + psi_Y(y)^T H psi_X(x)``.

    Subclasses set after ``fit``: ``basis_x_``, ``basis_y_`` (bases with ``transform``,
    the factored training features ``factor_t_`` = ``L^T`` (m, n) and ``rotation_`` = V,
    so ``A = L V``, and ``train_sums_`` = ``A^T 1``), ``coef_`` = ``H`` (m_Y, m_X),
    ``X_fit_`` (n, d_X), ``Y_fit_`` (n, d_Y), ``n_samples_``; then call ``_finish_fit``.

    Conditionals (5) in the low-rank basis (derived; docs/derivations/joint_distribution.md),
    with ``psi = psi_X(x)``::

        w_j(x) = (1 + (A_Y H psi)_j) / (n + s_Y^T H psi)
        E[f(Y) | X=x] = (1^T f + f^T A_Y H psi) / (n + s_Y^T H psi)

    and symmetrically for X given Y (``A_X H^T psi_Y(y)``, ``s_X``). All outputs are
    float64 NumPy arrays (inputs of any real dtype are converted).
    """

    def _finish_fit(self):
        self.s_x_ = self.basis_x_.train_sums_  # A_X^T 1, (m_X,)
        self.s_y_ = self.basis_y_.train_sums_  # A_Y^T 1, (m_Y,)

    # -- sides -----------------------------------------------------------------------
    def _side(self, given):
        """(basis of the conditioning variable, coefficient H oriented (m_target, m_given),
        basis of the target side, s of the target side, target training samples)."""
        _check_given(given)
        if given == "x":
            return self.basis_x_, self.coef_, self.basis_y_, self.s_y_, self.Y_fit_
        return self.basis_y_, self.coef_.T, self.basis_x_, self.s_x_, self.X_fit_

    def _given_features(self, Z, given, basis):
        if is_dask_array(Z):  # lazy: each row chunk is validated and mapped when computed
            return lazy_transform(basis, Z, "X_new" if given == "x" else "Y_new")
        if given == "x":
            Z = sk_validate_data(
                self, Z, reset=False, dtype=np.float64, accept_sparse=False, ensure_min_samples=0
            )
        else:
            Z = _as_float2d(Z, "Y_new", n_features=self.Y_fit_.shape[1], allow_empty=True)
        return basis.transform(Z)  # (n_new, m_given)

    # -- public API ------------------------------------------------------------------
    def conditional_weights(self, X_new, given: str = "x") -> np.ndarray:
        """Weights ``w_j(x)`` of ``Q_{Y|X=x}`` over the training ``y_j`` (5).

        Parameters
        ----------
        X_new : array_like, shape (n_new, d_X)  (``(n_new, d_Y)`` if ``given="y"``)
        given : {"x", "y"}
            ``"x"``: weights of Y given X over the training y's; ``"y"``: weights of X
            given Y over the training x's.

        Returns
        -------
        ndarray, shape (n_new, n)
            Each row sums to one. Entries may be negative at new points unless the model
            is positive there. Memory O(n_new n): use :meth:`conditional_expectation`
            for many points.
        """
        check_is_fitted(self, "coef_")
        basis, H, target_basis, s, _ = self._side(given)
        psi = self._given_features(X_new, given, basis)  # (n_new, m_g)
        P = psi @ H.T  # (n_new, m_t): (H psi)^T
        num = dot_train(target_basis, P)  # (n_new, n) = P A_t^T
        den = self.n_samples_ + P @ s  # (n_new,)
        return _divide_by_mass(num, 1.0, den, self.n_samples_)

    def _values(self, f, target, name="f"):
        """The values of ``f`` (named ``name`` in errors) at the n training targets."""
        n = target.shape[0]
        F = f(target) if callable(f) else f
        # lazy values stay lazy only against lazy training samples (then their finiteness
        # is checked block by block in the pass); otherwise they are computed here
        lazy = is_dask_array(F) and is_dask_array(target)
        if is_dask_array(F) and not lazy:
            F = F.compute()
        if lazy and F.ndim and any(np.isnan(c) for c in F.chunks[0]):
            F = F.compute_chunk_sizes()  # (a boolean filter's unknown sizes: one pass)
        if not lazy:
            F = np.asarray(F)
        if F.dtype == bool:
            F = F.astype(np.float64)
        if F.ndim == 0 or F.shape[0] != n:
            raise ValueError(
                f"{name} must give one value per training sample: expected first dimension "
                f"{n}, got shape {F.shape}. A callable {name} receives the (n, d) array of "
                "training samples and must be vectorised."
            )
        if not np.issubdtype(F.dtype, np.number) or np.iscomplexobj(F):
            raise TypeError(f"{name} values must be real numbers, got dtype {F.dtype}.")
        if lazy:
            return F
        F = F.astype(np.float64, copy=False)
        if not np.all(np.isfinite(F)):
            raise ValueError(f"{name} values contain NaN or infinity.")
        return F

    def conditional_expectation(self, f, X_new, given: str = "x") -> np.ndarray:
        """``E_Q[f(Y) | X = x]`` for every row of ``X_new`` (conditionals (5)).

        Parameters
        ----------
        f : callable or array_like, shape (n, ...)
            Either the values ``f(y_j)`` at the n training targets (vector or matrix
            valued, e.g. ``Y[:, :, None] * Y[:, None, :]`` for second moments), or a
            vectorised callable taking the (n, d_Y) training targets and returning them.
        X_new : array_like, shape (n_new, d_X)  (``(n_new, d_Y)`` if ``given="y"``)
        given : {"x", "y"}
            ``"y"`` gives ``E_Q[f(X) | Y = y]`` (f over the training x's).

        Returns
        -------
        ndarray, shape (n_new, ...)
            Cost O(n m k) once for the ``k`` outputs of ``f``, then O(m_X m_Y + m k) per
            point; no (n_new, n) array. To evaluate the same ``f`` in many calls, build
            the O(n m k) part once with :meth:`expectation_function`.
        """
        return self.expectation_function(f, given=given)(X_new)

    def expectation_function(self, f, given: str = "x"):
        """Precompute ``x -> E_Q[f(Y) | X = x]`` for one ``f`` (conditionals (5)).

        The O(n m k) products ``f^T A_Y H`` and ``s_Y^T H`` are formed once; the returned
        callable maps ``X_new`` (n_new, d) to (n_new, ...) at O(m (m + k)) per point
        (plus the m kernel evaluations of ``psi``).

        Parameters
        ----------
        f : callable or array_like, shape (n, ...)
            As in :meth:`conditional_expectation`.
        given : {"x", "y"}
            As in :meth:`conditional_expectation`.

        Returns
        -------
        callable
            ``X_new`` (n_new, d_X) (``(n_new, d_Y)`` if ``given="y"``) -> ndarray
            (n_new, ...), the values :meth:`conditional_expectation` returns.
        """
        check_is_fitted(self, "coef_")
        basis, H, target_basis, s, target = self._side(given)
        F = self._values(f, target)
        if is_dask_array(F):
            F = F.rechunk({i: -1 for i in range(1, F.ndim)})
        F2 = F.reshape(F.shape[0], -1)  # (n, k)
        AF, total = _train_moments(target_basis, F2)  # A^T F (m_t, k), 1^T F (k,)
        coef = H.T @ AF  # (m_g, k) = (f^T A H)^T
        den_coef = H.T @ s  # (m_g,)
        n, tail = self.n_samples_, F.shape[1:]

        def expectation(X_new):
            psi = self._given_features(X_new, given, basis)  # (n_new, m_g)
            num = psi @ coef  # (n_new, k)
            den = n + psi @ den_coef  # (n_new,): n x the conditional's total mass
            num = _divide_by_mass(num, total, den, n)
            return num.reshape((psi.shape[0], *tail))

        return expectation

    def marginal_ratio(self, X_new, given: str = "x") -> np.ndarray:
        """``(1/n) sum_j (1 + h(x, y_j))``: density of Q's X-marginal w.r.t. ``P_X`` at x.

        The denominator of the conditional (5), divided by n. Q's marginals equal the
        empirical ones only if it is 1 on the training points (Lemma 2.1; not imposed).
        Where it is <= 0 the conditional at x is no probability distribution (the
        conditional methods then warn). ``given="y"``: the same for Q's Y-marginal.

        Parameters
        ----------
        X_new : array_like, shape (n_new, d_X)
            ``(n_new, d_Y)`` if ``given="y"``.
        given : {"x", "y"}

        Returns
        -------
        ndarray, shape (n_new,)
        """
        check_is_fitted(self, "coef_")
        basis, H, _, s, _ = self._side(given)
        psi = self._given_features(X_new, given, basis)  # (n_new, m_g)
        return 1.0 + (psi @ (H.T @ s)) / self.n_samples_

    def conditional_probability(self, event, X_new, given: str = "x") -> np.ndarray:
        """``Q(Y in event | X = x)`` (Sec. 5.2: ``P(Y <= q | x) = sum_j w_j 1(y_j <= q)``).

        Parameters
        ----------
        event : callable or array_like of bool, shape (n,)
            Indicator at the training targets (boolean, or 0 / 1), or a vectorised
            callable ``event(Y_train) -> (n,) bool``; other values raise ``ValueError``.
        X_new : array_like, shape (n_new, d)
        given : {"x", "y"}

        Returns
        -------
        ndarray, shape (n_new,)  (may leave [0, 1] where the model is not positive)
        """
        check_is_fitted(self, "coef_")
        _, _, _, _, target = self._side(given)
        ind = check_indicator(self._values(event, target, "event"))  # (n,) or (n, 1): 0 / 1
        if ind.ndim != 1:
            ind = ind.reshape(ind.shape[0], -1)
            if ind.shape[1] != 1:
                raise ValueError(f"event must give one indicator per sample, got {ind.shape}.")
            ind = ind[:, 0]
        return self.conditional_expectation(ind, X_new, given=given)

    def density_ratio(self, X, Y, grid: bool = False) -> np.ndarray:
        """Radon-Nikodym derivative ``1 + h(x, y)`` of Q with respect to ``P_X x P_Y`` (1).

        Parameters
        ----------
        X : array_like, shape (n_x, d_X)
        Y : array_like, shape (n_y, d_Y) or (n_y,)
        grid : bool, default=False
            ``False``: pairs ``(x_i, y_i)`` (needs ``n_x = n_y``), shape (n,).
            ``True``: every pair, shape (n_y, n_x) with **y on rows** (the grid matrix
            ``(h|_G)_ij = h(x_j, y_i)`` of the representer theorem, ``K_Y H K_X``), e.g. to
            check positivity on a grid.

        Returns
        -------
        ndarray, shape (n,) or (n_y, n_x)
            ``1 + h(x_i, y_i)`` (``grid=False``), or ``1 + h(x_j, y_i)`` at row ``i``,
            column ``j`` (``grid=True``).
        """
        check_is_fitted(self, "coef_")
        if not isinstance(grid, bool | np.bool_):  # a truthy string is not "grid mode"
            raise TypeError(f"grid must be a bool, got {grid!r}.")
        if is_dask_array(X) or is_dask_array(Y):  # lazy, row chunk by row chunk
            X = as_dask_rows(X, "X", n_features=self.n_features_in_)
            Y = as_dask_rows(Y, "Y", n_features=self.Y_fit_.shape[1], rows_like=None if grid else X)
            px, py = lazy_transform(self.basis_x_, X), lazy_transform(self.basis_y_, Y, "Y")
        else:
            if grid:
                X = sk_validate_data(
                    self,
                    X,
                    reset=False,
                    dtype=np.float64,
                    accept_sparse=False,
                    ensure_min_samples=0,
                )
                Y = _as_float2d(Y, "Y", n_features=self.Y_fit_.shape[1], allow_empty=True)
            else:
                X, Y = check_xy(
                    X,
                    Y,
                    estimator=self,
                    reset=False,
                    min_samples=0,
                    n_features_y=self.Y_fit_.shape[1],
                )
            px = self.basis_x_.transform(X)  # (n_x, m_X)
            py = self.basis_y_.transform(Y)  # (n_y, m_Y)
        if grid:
            return 1.0 + (py @ self.coef_) @ px.T  # (n_y, n_x)
        return 1.0 + ((py @ self.coef_) * px).sum(axis=1)  # (n,)

    def validation_loss(self, X, Y) -> float:
        """Held-out version of the loss ``E(h)`` of (8), up to its constant.

        On held-out pairs ``(x_i, y_i)``, ``i = 1..n'``, the loss of Sec. 2 is
        ``E(h) = (1/n'^2) ||(n' I - E) - h|_G||_F^2`` on the grid ``h|_G = A'_Y H A'_X^T``.
        Returned is ``E(h) - (n' - 1)`` (the value at ``h = 0`` is 0)::

            ||A'_Y H A'_X^T||_F^2 / n'^2 - (2/n') sum_i h(x_i, y_i) + (2/n'^2) s'_Y^T H s'_X

        computed in O(n' m^2) without the grid.

        Parameters
        ----------
        X : array_like, shape (n', d_X)
        Y : array_like, shape (n', d_Y) or (n',)

        Returns
        -------
        float
        """
        check_is_fitted(self, "coef_")
        H = self.coef_

        def sums(Xb, Yb):  # (n', Gram_X, Gram_Y, sum_i h(x_i, y_i), A'_X^T 1, A'_Y^T 1)
            px = self.basis_x_.transform(Xb)  # (n', m_X)
            py = self.basis_y_.transform(Yb)  # (n', m_Y)
            return (
                Xb.shape[0],
                px.T @ px,
                py.T @ py,
                np.einsum("ik,ik->", py @ H, px),
                px.sum(axis=0),
                py.sum(axis=0),
            )

        if is_dask_array(X) or is_dask_array(Y):  # one pass over the held-out chunks
            X = as_dask_rows(X, "X", n_features=self.n_features_in_)
            Y = as_dask_rows(Y, "Y", n_features=self.Y_fit_.shape[1], rows_like=X)
            n, gx, gy, diag, sx, sy = reduce_rows(sums, [X, Y], ["X", "Y"])
            if n < 1:
                raise ValueError("validation_loss needs at least one sample.")
        else:
            X, Y = check_xy(
                X, Y, estimator=self, reset=False, min_samples=1, n_features_y=self.Y_fit_.shape[1]
            )
            n, gx, gy, diag, sx, sy = sums(X, Y)
        quad = float(np.sum((gy @ H) * (H @ gx)))
        diag = float(diag)
        cross = float(sy @ H @ sx)
        return quad / n**2 - 2.0 * diag / n + 2.0 * cross / n**2

    def score(self, X, Y=None, y=None) -> float:
        """Negative held-out loss, ``-validation_loss(X, Y)`` (higher is better).

        ``score > 0`` means the model beats independence (``h = 0``) on ``(X, Y)``. Use it
        with scikit-learn's ``GridSearchCV`` (``fit(X, Y)``). The paper's losses (31) and
        (32) need the true moments / a threshold: see
        :func:`kernelkit.distributions.holdout_select`.

        Parameters
        ----------
        X : array_like, shape (n', d_X)
        Y : array_like, shape (n', d_Y) or (n',)
        y : array_like, shape (n', d_Y) or (n',), optional
            An alias of ``Y`` (scikit-learn passes it by that name).

        Returns
        -------
        float
        """
        return -self.validation_loss(X, Y if Y is not None else y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.target_tags.required = True
        tags.target_tags.multi_output = True
        return tags
