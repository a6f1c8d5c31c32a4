"""Feature maps fitted on weighted rows: the FAVOR# moments under sample weights.

The data-dependent maps (GERF, SADERF, ADERF, SDERF: ``fit_reads == "moments"``) read
their data only through the first and second moments of the rows (FAVOR# Sec. 3-4,
:func:`kernelkit.features.favor.moments`). With sample weights ``w_i`` the estimators fit
them on the weighted moments

    mean = sum_i p_i x_i,   second = sum_i p_i x_i x_i^T,   p_i = w_i / sum_j w_j,

which are the moments of the rows repeated ``w_i`` times for integer weights (a zero
weight drops the row), so the fitted map, and with it the model, is the one of the
repeated rows. Maps that read only the dimension (``"shape"``) ignore the weights; maps
that read every row (``"all"``: k-means centres, optimised degree allocations) are fitted
on the rows unweighted. ``RandomFeatures(method="auto")`` chooses its method on the rows
unweighted, then fits the chosen map as above. A ``Pipeline`` feature map is fitted step
by step: steps that take ``sample_weight`` (``StandardScaler``) get the weights, and the
maps inside it are fitted as above on what the steps before them return; a
``FeatureUnion`` part by part.

In memory the weights go to :func:`~kernelkit.features.favor.moments`; on a Dask ``X``
the weighted sums are reduced chunk by chunk (:func:`dask_weighted_moments`), one pass
of the scheduler, each chunk's weights checked as the statistics pass checks them.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..features._dask import finite_moments, injected_moments
from ..features.favor import blocked_sums, moments

__all__ = ["dask_weighted_moments", "fit_map_weighted", "weighted_moments"]


def _probabilities(w):
    """``w / sum(w)`` as float64 (the weights of :func:`~kernelkit.features.favor.moments`,
    summing to 1); None stays None."""
    if w is None:
        return None
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum()


@contextlib.contextmanager
def weighted_moments(fm, X, Y, wx, wy):
    """While ``fm`` is fitted on ``(X, Y)``, its FAVOR# moments (``fit_reads ==
    "moments"``: GERF, SADERF, ADERF, SDERF) are those of the rows weighted by ``wx``
    (n,) and ``wy`` (m,) (non-negative, normalised here to sum to 1; None: uniform), so a
    fit with integer weights equals the fit on the repeated rows; other maps fit as they
    are."""
    if (wx is None and wy is None) or getattr(fm, "fit_reads", "all") != "moments":
        yield
        return
    scale = float(fm.lengthscale)  # the maps' moments are of X / lengthscale
    Y = X if Y is None else Y
    # a DataFrame (a Pipeline step's pandas output) as its values: the map's own fit
    # still gets the DataFrame, for its feature names
    X, Y = (np.asarray(A, dtype=np.float64) if hasattr(A, "columns") else A for A in (X, Y))
    wx, wy = _probabilities(wx), _probabilities(wy)

    def compute():
        with np.errstate(over="ignore", invalid="ignore"):
            return moments(
                X / scale,
                Y / scale,
                full=bool(fm._full_moments),
                query_weights=wx,
                key_weights=wy,
                n_jobs=getattr(fm, "n_jobs", None),
            )

    with injected_moments(fm, compute):
        yield


def fit_map_weighted(fm, X, w):
    """``fm.fit(X)`` for a symmetric map on in-memory rows ``X`` (n, d) with sample
    weights ``w`` (n,) (None: unweighted): a FAVOR# map on the weighted moments.

    A scikit-learn ``Pipeline`` (an estimator's ``feature_map`` such as a
    ``StandardScaler`` then a map) is fitted step by step, each step on what the steps
    before it return: a kernelkit map (or ``RandomFeatures``, or a nested pipeline) as
    here, a step whose ``fit`` takes ``sample_weight`` with the weights, others on the
    rows unweighted; a ``FeatureUnion`` part by part, each as here. Fitted as a whole,
    the pipeline (or union) saw no weights: its scaler and the FAVOR# map inside it were
    fitted on the rows unweighted, and an integer weight was not the row repeated."""
    if w is not None and _is_pipeline(fm):
        return _fit_pipeline_weighted(fm, X, w)
    if w is not None and _is_union(fm):  # each part on X, as FeatureUnion.fit fits them
        for _, part in fm.transformer_list:
            if part is not None and not isinstance(part, str):  # "drop", "passthrough"
                fit_map_weighted(part, X, w)
        return fm
    if w is not None and hasattr(fm, "_fit_chunked"):  # RandomFeatures: its method's map
        return fm._fit_chunked(X, weights=w)
    with weighted_moments(fm, X, None, w, w):
        return fm.fit(X)


def _is_pipeline(fm) -> bool:
    from sklearn.pipeline import Pipeline

    return isinstance(fm, Pipeline)


def _is_union(fm) -> bool:
    from sklearn.pipeline import FeatureUnion

    return isinstance(fm, FeatureUnion)


def _fit_pipeline_weighted(pipe, X, w):
    """Fit the steps of the ``Pipeline`` ``pipe`` in order on ``X`` with the weights
    ``w`` (:func:`fit_map_weighted`); returns ``pipe``, fitted as ``pipe.fit(X)`` fits it
    (its steps in place), with the weights where a step reads them."""
    from sklearn.utils.validation import has_fit_parameter

    Xt = X
    steps = [step for _, step in pipe.steps if step is not None and step != "passthrough"]
    for i, step in enumerate(steps):
        if (
            _is_pipeline(step)
            or _is_union(step)
            or hasattr(step, "_fit_chunked")
            or hasattr(step, "fit_reads")
        ):
            fit_map_weighted(step, Xt, w)
        elif has_fit_parameter(step, "sample_weight"):
            step.fit(Xt, sample_weight=w)
        else:
            step.fit(Xt)
        if i < len(steps) - 1:
            Xt = step.transform(Xt)
    return pipe


def _weighted_sums(Xb, wb, full: bool, index: int, owner: str):
    """``[sum_i w_i, sum_i w_i x_i, sum_i w_i x_i x_i^T (or its diagonal)]`` of one
    chunk, float64, flattened (1 + d + d^2 or 2 d,); its weights checked first (finite,
    non-negative: a ``ValueError`` naming ``sample_weight`` and the chunk)."""
    from ._chunked import _checked_weights

    wb = _checked_weights(np.reshape(np.asarray(wb), -1), index, owner)
    Xb = np.ascontiguousarray(Xb, dtype=np.float64)  # (rows, d)
    ((second, _),) = blocked_sums([Xb * np.sqrt(wb)[:, None]], full)  # sum w x x^T
    return np.concatenate([[wb.sum()], wb @ Xb, second.ravel()])


def dask_weighted_moments(X, w, full: bool, lengthscale: float, owner: str):
    """A function computing the weighted FAVOR# moments of the Dask rows ``X`` (n, d)
    divided by ``lengthscale``, with the Dask weights ``w`` (n,) in ``X``'s row chunks:
    the chunks' weighted sums (:func:`_weighted_sums`) in one pass of the scheduler, added
    in chunk order. All-zero weights are the statistics pass's ``ValueError``."""
    import dask

    from .._backend.chunks import checked_chunks
    from .._backend.parallel import OneThreadPerTask

    def compute():
        Xc = checked_chunks(X, "X")
        lazy = [
            dask.delayed(_weighted_sums)(Xb, wb, full, i, owner)
            for i, (Xb, wb) in enumerate(
                zip(Xc.to_delayed().ravel(), w.to_delayed().ravel(), strict=True)
            )
        ]
        with np.errstate(over="ignore", invalid="ignore"), OneThreadPerTask():
            parts = dask.compute(*lazy)
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        if not total[0] > 0:
            raise ValueError(f"{owner}: sample_weight: the weights are all zero.")
        return finite_moments([total], X.shape[1], full, lengthscale)

    return compute


@contextlib.contextmanager
def weighted_dask_moments(fm, X, w, owner: str):
    """While ``fm`` is fitted on the first rows of the Dask ``X``, its FAVOR# moments are
    the weighted moments of all rows (:func:`dask_weighted_moments`); other maps fit as
    they are."""
    if w is None or getattr(fm, "fit_reads", "all") != "moments":
        yield
        return
    thunk = dask_weighted_moments(X, w, bool(fm._full_moments), float(fm.lengthscale), owner)
    with injected_moments(fm, thunk):
        yield
