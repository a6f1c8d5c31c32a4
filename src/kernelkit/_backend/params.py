"""Building blocks of the ``_parameter_constraints`` of kernelkit's estimators and maps.

Every public estimator and feature map declares its constructor parameters in
scikit-learn's ``_parameter_constraints`` convention
(:mod:`sklearn.utils._param_validation`) and calls ``self._validate_params()`` at the
start of ``fit`` (and ``partial_fit``); an invalid value raises ``InvalidParameterError``
(a ``ValueError`` and a ``TypeError``) that names the parameter. The constraints shared
by many classes live here.

``Interval(Real, 0, None, closed="neither")`` rejects NaN and both infinities, so
:data:`POSITIVE` is "a positive finite float"; :data:`NON_NEGATIVE` is "a finite float
>= 0". The intervals here also reject booleans (``True`` is an ``Integral`` to Python, so
scikit-learn's ``Interval`` takes ``lengthscale=True`` as 1).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

__all__ = [
    "NON_NEGATIVE",
    "N_JOBS",
    "POSITIVE",
    "RANDOM_STATE",
    "CaseInsensitiveStrOptions",
    "NameWithAliases",
    "NumberInterval",
    "int_range",
]


class NumberInterval(Interval):
    """scikit-learn's ``Interval`` that rejects ``bool`` and ``numpy.bool_`` values."""

    def is_satisfied_by(self, val):
        return not isinstance(val, bool | np.bool_) and super().is_satisfied_by(val)


#: ``random_state``: None, a non-negative int, a Generator or a legacy RandomState
#: (scikit-learn's ``"random_state"`` constraint does not accept a Generator)
RANDOM_STATE = [
    None,
    NumberInterval(Integral, 0, None, closed="left"),
    np.random.Generator,
    np.random.RandomState,
]

#: ``n_jobs``: None or a non-zero integer (scikit-learn's convention; -1: all CPUs)
N_JOBS = [
    None,
    NumberInterval(Integral, None, -1, closed="right"),
    NumberInterval(Integral, 1, None, closed="left"),
]

#: a positive finite real number (NaN and +-inf rejected)
POSITIVE = [NumberInterval(Real, 0, None, closed="neither")]

#: a finite real number >= 0 (NaN and +-inf rejected)
NON_NEGATIVE = [NumberInterval(Real, 0, None, closed="left")]


def int_range(minimum: int = 1, maximum: int | None = None) -> list:
    """An integer in ``[minimum, maximum]`` (no upper bound for ``maximum=None``)."""
    closed = "left" if maximum is None else "both"
    return [NumberInterval(Integral, minimum, maximum, closed=closed)]


class CaseInsensitiveStrOptions(StrOptions):
    """``StrOptions`` for names read case-insensitively (and stripped), as kernelkit reads
    ``method`` and the kernel names of :mod:`kernelkit.distributions`; ``options`` are
    lower case."""

    def is_satisfied_by(self, val):
        return isinstance(val, str) and val.strip().lower() in self.options

    def canonical(self, val):
        """The name ``val`` stands for (lower case, stripped): two values of one
        canonical name are the same parameter value (a ``set_params`` from one to the
        other after ``fit`` keeps the fit:
        :class:`~kernelkit._backend.fit_state.ParamsSinceFit`)."""
        return val.strip().lower() if isinstance(val, str) else val

    def __str__(self):
        return f"{super().__str__()} (case-insensitive)"


class NameWithAliases(CaseInsensitiveStrOptions):
    """A name read case-insensitively with ``aliases`` (alias -> name, lower case), whose
    value the owner checks itself (a message listing the names and the aliases): the
    constraint takes any ``str``, and :meth:`canonical` maps an alias to its name."""

    def __init__(self, options, aliases):
        super().__init__(set(options))
        self.aliases = dict(aliases)

    def is_satisfied_by(self, val):
        return isinstance(val, str)

    def canonical(self, val):
        val = super().canonical(val)
        return self.aliases.get(val, val) if isinstance(val, str) else val

    def __str__(self):
        return "a str naming one of the options (case-insensitive, with aliases)"
