"""The fitted state of an estimator (or feature map): a ``fit`` that raises leaves it as
it was before the call, and a ``set_params`` after ``fit`` is recorded until the next
``fit``."""

from __future__ import annotations

import copy
import functools

import numpy as np
from sklearn.exceptions import NotFittedError

__all__ = ["ParamsSinceFit", "keep_model_on_error", "same_value"]


def keep_model_on_error(fit):
    """Decorate ``fit`` so that an exception restores the fitted state.

    A fit replaces its attributes one after another (the width ``n_features_in_`` and
    column names when ``X`` is validated, then the draw, the feature map, the classes,
    the weights); a chunked (Dask) fit can fail on a late chunk after the first ones were
    replaced. Without the restore the
    estimator kept a mixture of two models that predicts without error. The constructor
    parameters are not restored: ``est.set_params(...).fit(X, y)`` keeps what was set.
    """

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        params = set(self.get_params(deep=False))
        # lists and dicts copied (a warm start appends to its histories in place), NumPy
        # generators too (a warm start draws on from the fitted one); arrays and other
        # objects by reference (fits rebind them)
        state = {key: _snapshot(value) for key, value in vars(self).items() if key not in params}
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            for key in [key for key in vars(self) if key not in params]:
                del self.__dict__[key]
            self.__dict__.update(state)
            raise

    return wrapper


def _snapshot(value):
    """What :func:`keep_model_on_error` keeps of an attribute: a copy of a list, dict or
    NumPy generator (mutated in place by a warm-started fit), else the object itself."""
    if isinstance(value, list | dict):
        return copy.copy(value)
    if isinstance(value, np.random.Generator):
        return copy.deepcopy(value)
    return value


def same_value(a, b) -> bool:
    """Whether two parameter values are equal (arrays by value, a list and a tuple
    element by element; False if not comparable)."""
    if a is b:
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(map(same_value, a, b))
    try:
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return bool(np.array_equal(a, b))
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):
        return False


class ParamsSinceFit:
    """Mixin (before ``BaseEstimator``): the constructor parameters that changed since
    ``fit``.

    A ``set_params`` takes effect at the next ``fit``, as on any scikit-learn estimator;
    on a fitted object, a change of any parameter but those in ``_kept_after_fit``
    (``n_jobs``, ``random_state``: they do not change what was fitted) is recorded, and
    the methods that use the fitted state call :meth:`_check_unchanged_since_fit`, which
    raises ``NotFittedError`` until the next ``fit`` (the fitted state belongs to the old
    values: its columns, scales and kernel would not match the new ones).
    """

    #: parameters whose change leaves the fitted state valid
    _kept_after_fit = ("n_jobs", "random_state")

    def _record_fit_params(self):
        """The parameters the fitted state belongs to (call at the end of ``fit``)."""
        self._fitted_params = self.get_params(deep=False)
        self.__dict__.pop("_changed_params", None)

    def set_params(self, **params):
        """Set parameters (scikit-learn's ``set_params``); they take effect at the next
        ``fit``. After ``fit``, a change of any parameter but ``n_jobs`` and
        ``random_state`` makes the methods that use the fitted state raise
        ``NotFittedError`` until the next ``fit``; another spelling of the same value (a
        name its constraint reads case-insensitively or through an alias) is no change.

        Parameters
        ----------
        **params
            Constructor parameters by name.

        Returns
        -------
        self
        """
        super().set_params(**params)
        fitted = self.__dict__.get("_fitted_params")
        if fitted is not None:
            now = self.get_params(deep=False)
            self._changed_params = {
                k: (fitted[k], now[k])
                for k in fitted
                if k not in self._kept_after_fit and not self._same_param(k, fitted[k], now[k])
            }
        return self

    @classmethod
    def _same_param(cls, name: str, a, b) -> bool:
        """Whether ``a`` and ``b`` are the same value of parameter ``name``: equal
        (:func:`same_value`), or two spellings of one name where the parameter's
        constraint (in ``_parameter_constraints``) reads names case-insensitively or with
        aliases (its ``canonical``: ``"SDERF"`` is ``"sderf"``)."""
        if same_value(a, b):
            return True
        for constraint in getattr(cls, "_parameter_constraints", {}).get(name, ()):
            canonical = getattr(constraint, "canonical", None)
            if (
                canonical is not None
                and constraint.is_satisfied_by(a)
                and constraint.is_satisfied_by(b)
            ):
                return same_value(canonical(a), canonical(b))
        return False

    def _check_unchanged_since_fit(self, ignore=(), using: str = "this estimator"):
        """``NotFittedError`` naming the parameters changed since ``fit`` (but those in
        ``ignore``: a ``redraw`` method draws again from their current values), asking for
        a new ``fit`` before ``using`` the fitted state."""
        changed = self.__dict__.get("_changed_params") or {}
        what = [f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items() if k not in ignore]
        if what:
            raise NotFittedError(
                f"The parameters of this {type(self).__name__} changed since fit "
                f"({', '.join(what)}); call 'fit' again before using {using}."
            )
