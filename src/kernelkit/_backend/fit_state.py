"""A ``fit`` that raises leaves the estimator's (or feature map's) fitted state as it was
before the call."""

from __future__ import annotations

import functools

__all__ = ["keep_model_on_error"]


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
        state = {key: value for key, value in vars(self).items() if key not in params}
        try:
            return fit(self, *args, **kwargs)
        except BaseException:
            for key in [key for key in vars(self) if key not in params]:
                del self.__dict__[key]
            self.__dict__.update(state)
            raise

    return wrapper
