"""Training rows and feature statistics of the random-feature ridge / GP fits.

:class:`~kernelkit.estimators.RandomFeatureRidge` and
:class:`~kernelkit.estimators.RandomFeatureGPRegressor` take their rows in one of three
ways and branch on them once, in ``fit`` (user guide: "Scale-out with Dask"):

* **in memory** -- NumPy ``X`` (n, d), ``Y`` (n, T): all features ``Phi`` (n, D) are
  formed and the posterior solved in the primal (App. D, eq. 88-90 of the dot-product
  paper, Wacker et al.) or the dual (eq. 84-85) form;
* **blocked in memory** -- the same arrays, when the primal form is solved and ``n D``
  exceeds :data:`STREAM_ENTRIES`: the statistics below are reduced over contiguous row
  blocks on kernelkit's threads (``n_jobs``), never all features at once;
* **chunked** -- a ``dask.array.Array`` (one task per row chunk on the active Dask
  scheduler, or a ``distributed.Client``, tree-reduced) or an iterable of
  ``(X_block, y_block)`` NumPy pairs (consumed once, in order; a list, tuple or other
  sequence of pairs is read once more for the moments of a FAVOR# map); primal form
  only.

The primal form needs the data only through the sums over rows

    n,  s = sum_i phi_i (D,),  G = Phi^H Phi (D, D),  R = Phi^H (Y - 1 r^T) (D, T),
    sum_i (y_i - r) (T,),  sum_i (y_i - ybar)^2 (T,)

(:class:`FeatureStats`), with the targets taken relative to a reference ``r`` (T,): the
first block's mean. With sample weights ``w_i`` every sum is weighted (``sum_i w_i
phi_i``, ``Phi^H W Phi``, ...) and ``sum_i w_i`` takes the place of ``n`` in the means.
The targets' sum of squares is taken about each block's mean and the blocks' sums are
combined by the pairwise update of Chan, Golub & LeVeque (1979), so the target variance
keeps its precision when the mean is large next to the spread (the raw
``sum_i y_i^2 / n - ybar^2`` loses every digit at ``y = 1e8 + N(0, 1)``). For the same
reason ``R`` and the target sum are kept relative to ``r``: the centred right-hand side
``sum_i phi_i (y_i - ybar)`` formed from the raw ``Phi^H Y`` would cancel the offset's
digits (predictions off by ``1e-13`` times the offset instead of ``1e-16``).
Each block's rows are mapped to features a slab at a time
(``_SLAB_BYTES`` of features, never a whole block's), ``Phi^T Phi`` is accumulated by the
BLAS symmetric rank-k update for real features, and the blocks' statistics are summed
(:func:`kernelkit._backend.chunks.reduce_rows`). The feature map is fitted
on a Dask ``X`` itself when it reads only the dimension or the FAVOR# moments of its data
(``fit_reads``), and on a sequence of blocks with the moments of all its blocks when it
reads them; else on the first non-empty chunk (or block of an iterable).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.linalg.blas import dsyrk
from sklearn.utils.validation import _check_sample_weight, _get_feature_names

from .._backend.chunks import (
    FIRST_SLAB_ROWS,
    as_dask_labels,
    as_dask_rows,
    check_block,
    check_chunk,
    is_block_sequence,
    is_chunked,
    is_dask_array,
    iter_block_pairs,
    known_row_chunks,
    reduce_rows,
)
from .._backend.chunks import predict_in_slabs as _predict_in_slabs
from .._backend.gaussian_exponent import power_of_two_above
from .._backend.sklearn_validation import host_array, validate_data
from ._feature_map_param import fitted_feature_map, map_features
from ._labels import check_raw_labels
from ._posterior import choose_solver, gram_primal

__all__ = [
    "STREAM_ENTRIES",
    "FeatureStats",
    "KnownChunksScore",
    "TrainingRows",
    "block_stats",
    "blocked_statistics",
    "check_pairs_without_y",
    "check_sample_weight",
    "chunk_statistics",
    "chunked_sample_weight",
    "dask_sample_weight",
    "fit_feature_map",
    "noise_rows",
    "predict_in_slabs",
    "prediction_rows",
    "reject_block_iterable",
    "scaled_sq_sums",
    "training_rows",
    "use_blocked_statistics",
    "weights_in_solver_errors",
]

#: ``n x D`` above which an in-memory primal fit reduces statistics in row blocks
#: (:func:`blocked_statistics`) instead of forming all features: same result to
#: round-off, memory O(slab D + D^2) instead of O(n D), and the blocks run in parallel
STREAM_ENTRIES = 1 << 22
#: bytes of one slab of features inside a block (rows are mapped to features a slab at a
#: time, so the (rows, D) slab stays in cache between the feature map and the Gram update)
_SLAB_BYTES = 8 * 1024**2
#: rows of the first slab (before the feature width D is known), as in predictions
_FIRST_SLAB = FIRST_SLAB_ROWS
#: row blocks of a blocked in-memory fit (the most threads that share its work)
_MAX_BLOCKS = 8
#: validate_data options of the regressors: real X, numeric 1-D or 2-D targets
_VALIDATE = dict(dtype=[np.float64, np.float32], multi_output=True, y_numeric=True)


class KnownChunksScore:
    """``score`` of scikit-learn's mixin after one pass that computes the unknown row-chunk
    sizes of Dask ``X``, ``y`` and ``sample_weight`` (a boolean filter leaves them
    unknown, and the mixin's length check raises on them); ``fit`` and ``predict`` take
    such arrays already. Put it before ``ClassifierMixin`` / ``RegressorMixin``."""

    def score(self, X, y, sample_weight=None):
        """The mixin's score: mean accuracy (classifiers) or R^2 (regressors).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            In memory or a Dask array, as ``predict`` takes it.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), optional

        Returns
        -------
        float
        """
        if any(is_dask_array(a) for a in (X, y, sample_weight)):
            X, y, sample_weight = known_row_chunks(X, y, sample_weight)
        return super().score(X, y, sample_weight=sample_weight)


# ---------------------------------------------------------------------- step 1: rows
@dataclass
class TrainingRows:
    """The validated training data of a fit.

    In memory: ``X`` (n, d) and ``Y`` (n, T) NumPy arrays. Chunked: ``X`` and ``Y`` are
    aligned Dask arrays (``Y`` (n,) or (n, T)), or ``X`` is None and ``pairs`` yields the
    checked ``(X_block, y_block)`` pairs of an iterable (``blocks``: the iterable itself
    when it can be read again, a list, tuple or other sequence; None when it is read
    once). ``head`` (n_0, d) is what the feature map is fitted on: all of ``X``, or the
    first non-empty chunk.
    """

    owner: str
    chunked: bool
    X: object
    Y: object
    head: np.ndarray
    y_ndim: int
    pairs: Iterator | None = None
    blocks: Sequence | None = None
    labels: bool = False  # Y holds class labels (a classifier's rows)
    head_y: object = None  # a Dask fit: the targets of the chunk ``head``, as NumPy
    w: object = None  # sample weights (n,): None, float64 NumPy, or Dask aligned with X

    @property
    def known_head(self) -> dict:
        """``{index: (head, head_y)}``: the first non-empty Dask chunk, computed once by
        :func:`chunked_head`, for the passes that would read it again; else ``{}``."""
        if not is_dask_array(self.X):
            return {}
        return {_first_nonempty(self.X): (self.head, self.head_y)}


def _first_nonempty(X) -> int:
    """The index of the first row chunk of the Dask ``X`` (known sizes) with rows."""
    return next((i for i, rows in enumerate(X.chunks[0]) if rows), 0)


def check_sample_weight(sample_weight, X, owner: str):
    """``sample_weight`` for in-memory rows ``X`` (n, d) as float64 (n,), or None.

    scikit-learn's checks (:func:`sklearn.utils.validation._check_sample_weight`: shape
    (n,) or a scalar, finite, non-negative, not all zero), their messages prefixed by the
    estimator and ``sample_weight``; a torch tensor is read as NumPy (detached). In
    float64 whatever ``X``'s dtype, as the sums use them: in a float32 ``X``'s dtype a
    weight below ``1e-45`` would become 0 (its row dropped) and one above ``3.4e38``
    infinity (refused). A scalar NaN or infinity, which scikit-learn broadcasts without a
    check, is refused too. None stays None, so an unweighted fit runs the unweighted
    sums.
    """
    if sample_weight is None:
        return None
    try:
        w = _check_sample_weight(
            host_array(sample_weight), X, dtype=np.float64, ensure_non_negative=True
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{owner}: sample_weight: {exc}") from None
    w = np.asarray(w, dtype=np.float64)
    if not np.all(np.isfinite(w)):  # a scalar is broadcast unchecked by scikit-learn
        raise ValueError(f"{owner}: sample_weight contains NaN or infinity, got {w[0]}.")
    return w


def noise_rows(w: np.ndarray, noise: float) -> np.ndarray:
    """The rows (n,) bool of sample weights ``w`` (n,) whose noise variance ``noise /
    w_i`` is finite: a zero weight drops its row, and so does a positive weight so
    small that ``noise / w_i`` overflows (e.g. ``1e-310``): its term ``w_i / noise <
    1 / DBL_MAX`` next to the prior's 1 in ``B = I + Phi^H W Phi / noise`` is below
    double precision, while an infinite variance would be refused by the solver."""
    with np.errstate(divide="ignore", over="ignore"):
        return np.isfinite(noise / w)


#: the spread of sample weights (largest over smallest positive) from which a failed
#: primal solve is put down to them: ``B = I + Phi^H W Phi / noise`` of weights that far
#: apart has entries far beyond its O(1) part, whose Cholesky pivots then carry rounding
#: errors of ``eps`` times the largest (``1 / sqrt(eps) ~ 7e7``: a square of it is 1 / eps)
WEIGHT_SPREAD = 1e8


@contextlib.contextmanager
def weights_in_solver_errors(owner: str, w, noise_name: str, param=None):
    """Re-raise a ``LinAlgError`` of the primal solve in the block naming ``sample_weight``
    when the weights ``w`` (a NumPy vector; None or a Dask array: unchanged) span more than
    :data:`WEIGHT_SPREAD`: the noise of row ``i`` is ``noise_name / w_i``, and increasing
    the noise, as the solver's message says, does not help. The ``n x n`` dual form
    factorises ``K_hat + diag(noise / w)`` and fits them. Other failures are re-raised
    with the estimator and ``param`` ``(name, value[, hint])``, the parameter that sets
    the noise (``alpha``, ``noise``), in front of the solver's message (and ``hint``, by
    default that the noise is that parameter, after it)."""
    try:
        yield
    except np.linalg.LinAlgError as exc:
        positive = w[w > 0] if isinstance(w, np.ndarray) else np.ones(1)
        spread = float(positive.max() / positive.min()) if positive.size else 1.0
        if "kernel matrix" in str(exc) or not spread >= WEIGHT_SPREAD:  # not the weights
            if param is None:
                raise
            name, value = param[:2]
            hint = param[2] if len(param) > 2 else f"Here the noise / regularisation is {name}."
            raise np.linalg.LinAlgError(f"{owner}({name}={value!r}): {exc} {hint}") from exc
        raise np.linalg.LinAlgError(
            f"{owner}: sample_weight spans {spread:.3g} (its largest over its smallest "
            f"positive weight): the noise of row i is {noise_name} / w_i, and the primal "
            "system B = I + Phi^H W Phi / noise of weights that far apart is not positive "
            "definite in float64 (a larger noise does not help while the weights are as far "
            "apart). Bring the weights closer together (a "
            "weight 1e15 times the others already makes its row an exact constraint), or fit "
            "with solver='dual' (the n x n form, which factorises K_hat + diag(noise / w)) "
            "when n is small."
        ) from exc


def chunked_sample_weight(X, y, sample_weight, owner: str):
    """``(X, y, sample_weight)`` of a chunked fit before :func:`chunked_head`: weights
    with an iterable of blocks are a ``ValueError``; with a Dask ``X`` the unknown row
    counts of ``X``, ``y`` and the weights are computed in one pass."""
    if sample_weight is None:
        return X, y, None
    if not is_dask_array(X):
        raise ValueError(
            f"{owner}: sample_weight is not supported with an iterable of (X_block, "
            "y_block) pairs; fit in-memory arrays, or Dask arrays X, y and sample_weight."
        )
    return known_row_chunks(X, y, sample_weight)


def dask_sample_weight(sample_weight, X, owner: str):
    """``sample_weight`` of a Dask fit as a Dask vector with ``X``'s row chunks (its
    values are checked chunk by chunk by :func:`_checked_weights`), or None; a scalar is
    broadcast. Unknown row counts must have been computed (:func:`chunked_sample_weight`)."""
    if sample_weight is None:
        return None
    if np.ndim(sample_weight) == 0 and not is_dask_array(sample_weight):
        import dask.array as da

        value = check_sample_weight(sample_weight, np.empty((1, 1)), owner)[0]
        return da.full(X.shape[0], value, chunks=(X.chunks[0],))
    w = as_dask_rows(
        host_array(sample_weight), "sample_weight", rows_like=X, owner=owner, vector="keep"
    )
    if w.ndim != 1:
        raise ValueError(
            f"{owner}: sample_weight must be 1-D (one weight per row), got shape {w.shape}."
        )
    return w


def _checked_weights(w, index: int, owner: str) -> np.ndarray:
    """A chunk of Dask sample weights, checked as :func:`check_sample_weight` does
    (finite, non-negative; the all-zero check is on the total, after the reduction)."""
    w = np.asarray(w, dtype=np.float64)
    if not np.all(np.isfinite(w)):
        raise ValueError(f"{owner}: sample_weight: chunk {index} contains NaN or infinity.")
    if np.any(w < 0):
        raise ValueError(f"{owner}: sample_weight: chunk {index} has negative values.")
    return w


def training_rows(est, X, y, sample_weight=None) -> TrainingRows:
    """Validate ``X``, ``y`` for ``est`` (sets ``n_features_in_``, scikit-learn's checks).

    NumPy-like input is validated whole; chunked input (:func:`is_chunked`) by its first
    chunk here and chunk by chunk while its statistics are reduced. ``sample_weight``
    (n,): in memory checked by :func:`check_sample_weight`; with a Dask ``X`` a Dask or
    NumPy vector, rechunked to ``X``'s rows; refused with an iterable of blocks.
    """
    name = type(est).__name__
    check_pairs_without_y(X, y, name)
    # pairs that can be read again (a list of pairs would be array-like X otherwise)
    sequence = X if y is None and is_block_sequence(X) else None
    if sequence is None and not is_chunked(X):
        if y is None and isinstance(X, list | tuple):  # scikit-learn would not say why
            raise ValueError(
                f"{name}: y is required; a list or tuple X that is not a list of "
                "(X_block, y_block) array pairs is an array of rows. To fit pairs chunk "
                "by chunk, pass a list (or another sequence, or an iterator) of them, "
                "e.g. [(X0, y0), (X1, y1)], with y=None."
            )
        y = host_array(y)  # a tensor that requires grad: np.asarray would raise
        try:  # string labels: scikit-learn's message would not name y
            np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: y must be numeric (a regression target); {exc}.") from None
        X, y = validate_data(est, X, y, accept_sparse=False, **_VALIDATE)
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):  # None in an object y passes scikit-learn as NaN
            raise ValueError(f"{name}: y contains NaN, infinity or None.")
        w = check_sample_weight(sample_weight, X, name)
        return TrainingRows(name, False, X, y.reshape(len(y), -1), X, y.ndim, w=w)  # Y (n, T)
    if est.solver == "dual":
        raise ValueError(
            f"{name}: solver='dual' needs all rows in memory; chunked "
            "(Dask / iterable) input is fitted in the primal form."
        )
    X, y, sample_weight = chunked_sample_weight(X, y, sample_weight, name)
    X, y, X0, y0, pairs, names = chunked_head(X, y, name, labels=False)
    validate_data(est, X0, y0, accept_sparse=False, **_VALIDATE)
    if names is not None:  # DataFrame blocks: as in memory
        est.feature_names_in_ = names
    w = dask_sample_weight(sample_weight, X, name)
    return TrainingRows(name, True, X, y, X0, np.ndim(y0), pairs, sequence, head_y=y0, w=w)


def chunked_head(X, y, owner: str, *, labels: bool):
    """The first non-empty chunk of chunked training input, and the rest to reduce.

    ``X`` a Dask array with ``y`` (Dask or NumPy rows: regression targets, or class
    labels of any dtype with ``labels``), or an iterable of ``(X_block, y_block)`` pairs
    with ``y=None`` (checked in order by :func:`_checked_pairs`). Returns ``(X, y, X0,
    y0, pairs, names)``: the Dask arrays (None for an iterable), the first non-empty
    chunk ``X0`` (n_0, d), ``y0`` as NumPy, the iterable's non-empty pairs from the
    first one on (None for Dask), and the column names of DataFrame blocks (else None).
    """
    if is_dask_array(X):
        if y is None:
            raise ValueError(f"{owner}: y is required.")
        X = as_dask_rows(X, "X", owner=owner, vector="error", known_rows=False)
        X, y = known_row_chunks(X, y)  # unknown sizes (a filter): one pass for both
        if labels:
            y = as_dask_labels(y, X, owner=owner)
        else:
            y = as_dask_rows(y, "y", rows_like=X, owner=owner, vector="keep")
        # the first non-empty chunk (boolean filtering can empty any chunk, the first too)
        i = _first_nonempty(X)
        import dask

        X0, y0 = (np.asarray(b) for b in dask.compute(X.blocks[i], y.blocks[i]))  # one pass
        # its width sets n_features_in_ and the map's dimension: it must be X's
        check_chunk(X0, f"{owner}: X", i, X.shape[1])
        return X, y, X0, y0, None, None
    if y is not None:
        raise ValueError(f"{owner}: with an iterable of (X_block, y_block) pairs, pass y=None.")
    columns = []  # the column names of block 0 (None: not a DataFrame)
    blocks = _checked_pairs(X, owner, columns, labels=labels)
    pairs = (pair for pair in blocks if len(pair[0]))  # skips empty blocks
    first = next(pairs, None)  # the checks raise if there are no blocks
    if first is None:
        raise ValueError(f"{owner}: every block of the iterable is empty.")
    X0, y0 = first
    return None, None, X0, y0, itertools.chain([first], pairs), columns[0]


def check_pairs_without_y(X, y, owner: str) -> None:
    """``ValueError`` where a list or tuple of ``(X_block, y_block)`` pairs comes with a
    ``y`` (NumPy's "inhomogeneous shape" error otherwise, as the pairs are then read as
    an array of rows)."""
    if y is not None and is_block_sequence(X):
        raise ValueError(
            f"{owner}: X is a sequence of (X_block, y_block) pairs, which carry the targets: "
            "pass y=None."
        )


def _checked_pairs(blocks, owner: str, columns: list | None = None, labels: bool = False):
    """:func:`iter_block_pairs` of the regressors (1-D ``X`` blocks refused, ``y`` blocks
    1-D or 2-D, float32 kept), with the column names of DataFrame ``X`` blocks checked
    (:func:`named_pairs`; ``columns`` receives block 0's names). ``labels``: the ``y``
    blocks are class labels of any dtype (:func:`label_pairs`)."""
    pairs = named_pairs(blocks, owner, columns)
    if labels:
        return label_pairs(pairs, owner)
    return iter_block_pairs(pairs, owner, ("X", "y"), vector=("error", "keep"), dtype=None)


def named_pairs(pairs, owner: str, columns: list | None = None):
    """The pairs as given, their DataFrame ``X`` blocks' column names checked: every named
    block must have block 0's names in the same order (a ``ValueError`` naming the
    block), so a block whose columns come in another order is not mixed silently.
    ``columns`` (a list) receives block 0's names, or None."""
    first = None
    for i, pair in enumerate(pairs):
        Xb = pair[0] if isinstance(pair, list | tuple) and len(pair) == 2 else None
        names = _get_feature_names(Xb) if hasattr(Xb, "columns") else None
        if i == 0:
            first = names
            if columns is not None:
                columns.append(names)
        elif names is not None and first is not None and not np.array_equal(names, first):
            raise ValueError(
                f"{owner}: X: block {i} has the columns {names.tolist()}, but block 0 "
                f"had {first.tolist()}; give every block the same columns in the same "
                "order."
            )
        yield pair


def label_pairs(pairs, owner: str):
    """The checked ``(X_block, labels)`` pairs of an iterable, in order: ``X`` blocks as
    :func:`iter_block_pairs` checks them, each labels block 1-D (any dtype, no missing
    label) with one label per row. Empty blocks are yielded too."""
    d, i = None, -1
    for i, pair in enumerate(pairs):
        try:
            Xb, yb = pair
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{owner}: an iterable X must yield (X_block, y_block) pairs; item {i} is a "
                f"{type(pair).__name__}."
            ) from exc
        Xb = check_block(Xb, "X", i, owner=owner, n_columns=d, vector="error", dtype=None)
        # the labels as given: a list of ints and strings would become an array of strings
        check_raw_labels(f"{owner}: block {i}", yb if isinstance(yb, list | tuple) else None)
        yb = np.asarray(yb)
        if yb.ndim != 1 or len(yb) != len(Xb):
            raise ValueError(
                f"{owner}: y: block {i} has shape {yb.shape}; expected ({len(Xb)},), one class "
                "label per row of its X block."
            )
        check_raw_labels(f"{owner}: block {i}", yb)
        d = Xb.shape[1]
        yield Xb, yb
    if i < 0:
        raise ValueError(
            f"{owner}: the iterable of blocks is empty (a generator or iterator yields its "
            "blocks once: make a new one for each fit)."
        )


def fit_feature_map(est, rows: TrainingRows, n_jobs, random_state=None):
    """Step 2 of the ridge / GP fits: ``est.feature_map`` cloned and fitted on the rows. In
    memory on ``X``; on a Dask ``X`` itself when the map reads only the dimension or the
    FAVOR# moments (``fit_reads``), else on the first non-empty chunk. On an iterable of
    blocks: on the first non-empty block, with the FAVOR# moments of all blocks when the
    map reads them and the iterable can be read again (a sequence: one more pass over its
    blocks, before the pass of :func:`chunk_statistics`); a generator or iterator is read
    once, by the statistics, so its map sees the first block only. ``random_state``:
    the seed of the map (default ``est.random_state``). With sample weights
    (``rows.w``, in memory or Dask) a map that reads the FAVOR# moments is fitted on the
    weighted moments (:mod:`kernelkit.estimators._weighted_fit`; on Dask reduced chunk by
    chunk), so an integer weight is the row repeated and a zero weight drops it."""
    blocks = None
    if rows.blocks is not None:

        def blocks():  # a new pass over the sequence's X blocks, each checked
            pairs = _checked_pairs(rows.blocks, rows.owner, labels=rows.labels)
            return (Xb for Xb, _ in pairs)

    known = contextlib.nullcontext()
    if is_dask_array(rows.X):  # the map's fit takes the head, computed once
        from ..features._dask import known_first_rows

        known = known_first_rows(rows.X, rows.head, _first_nonempty(rows.X))
    with known:
        return fitted_feature_map(
            est.feature_map,
            est.random_state if random_state is None else random_state,
            rows.head,
            rows.owner,
            n_jobs,
            all_rows=rows.X if rows.chunked else None,  # a Dask array (None: iterable)
            blocks=blocks,
            weights=rows.w,  # the FAVOR# maps' moments are the weighted ones
            chunked=rows.chunked,
        )


def prediction_rows(est, X):
    """A Dask ``X`` for the fitted ``est``'s predictions, checked now (2-D, real, the fitted
    width); its columns in one chunk and unknown row counts left unknown (a row-wise map
    needs none)."""
    return as_dask_rows(
        X, "X", est.n_features_in_, owner=type(est).__name__, vector="error", known_rows=False
    )


def predict_in_slabs(fn, X, fm, n_jobs=None):
    """``fn(X)`` for in-memory rows ``X`` (n, d), a slab of rows at a time: the
    predictions of their features by the fitted transformer ``fm``, whose width sizes the
    slabs (:func:`kernelkit._backend.chunks.predict_in_slabs`, on ``n_jobs`` threads)."""

    def width():
        D = getattr(fm, "output_dim", None)  # a kernelkit map; else any transformer
        return D if isinstance(D, numbers.Integral) else map_features(fm, X[:1]).shape[1]

    return _predict_in_slabs(fn, X, width, n_jobs)


def reject_block_iterable(est, X) -> None:
    """``TypeError`` if ``X`` is an iterable of blocks (not a Dask array) for ``est``, an
    estimator that fits in memory (scikit-learn would only say that ``y`` is missing)."""
    if is_chunked(X) and not is_dask_array(X):
        raise TypeError(
            f"{type(est).__name__} fits in memory: X must be an array (n_samples, "
            f"n_features), got a {type(X).__name__}. RandomFeatureRidge, "
            "RandomFeatureGPRegressor and RandomFeatureGPClassifier fit an iterable of "
            '(X_block, y_block) pairs chunk by chunk (user guide: "Scale-out with Dask").'
        )


# ------------------------------------------------------------------ step 3: statistics
@dataclass
class FeatureStats:
    """Sums over rows of features ``phi`` (D,) and targets ``y`` (T,); see module doc.

    The target sums are relative to the reference ``y_ref`` (T,) (a block mean), so that a
    large common offset of the targets never enters a sum that is later cancelled. With
    sample weights ``w_i`` every sum is weighted (``s = sum_i w_i phi_i``, ``G = Phi^H W
    Phi``, ``R = Phi^H W (Y - 1 r^T)``, ...) and ``w_sum = sum_i w_i`` takes the place of
    the row count in the means; unweighted, ``w_i = 1`` and ``w_sum = n``.
    """

    n: int
    s_phi: np.ndarray  # (D,)
    gram: np.ndarray  # (D, D) Phi^H W Phi
    rhs: np.ndarray  # (D, T) Phi^H W (Y - 1 y_ref^T)
    s_y: np.ndarray  # (T,) sum_i w_i (y_i - y_ref)
    # (T,) the centred sum of squares sum_i w_i (y_i - ybar)^2 as ss_scale^2 ss_rel, with
    # ss_scale a power of two at least max |y_i - ybar|: no square underflows (targets of
    # 1e-170) or overflows (1e170) where the standard deviation itself is in range
    ss_rel: np.ndarray
    ss_scale: np.ndarray
    y_ref: np.ndarray  # (T,) the reference of rhs and s_y
    w_sum: float  # sum_i w_i (n unweighted)

    @property
    def y_mean(self) -> np.ndarray:
        """The targets' (weighted) mean ``ybar`` (T,)."""
        return self.y_ref + self.s_y / self.w_sum

    @property
    def ss_y(self) -> np.ndarray:
        """The centred sum of squares ``sum_i w_i (y_i - ybar)^2`` (T,) (may under- or
        overflow where :attr:`y_std` does not)."""
        with np.errstate(over="ignore", under="ignore"):
            return self.ss_scale**2 * self.ss_rel

    @property
    def y_std(self) -> np.ndarray:
        """The targets' (weighted) standard deviation (T,), from the scaled sums."""
        with np.errstate(over="ignore"):
            return self.ss_scale * np.sqrt(self.ss_rel / self.w_sum)

    def __add__(self, other: FeatureStats) -> FeatureStats:
        if not (self.w_sum > 0 and other.w_sum > 0):  # a block of zero weights adds rows only
            kept = self if self.w_sum > 0 or not other.w_sum > 0 else other
            return dataclasses.replace(kept, n=self.n + other.n)
        # other's target sums moved to self's reference: shift = the references' difference,
        # of the size of the spread of the block means (no cancellation of a common offset)
        shift = other.y_ref - self.y_ref  # (T,)
        s_y_other = other.s_y + other.w_sum * shift
        rhs_other = other.rhs + np.multiply.outer(np.conj(other.s_phi), shift)
        # Chan et al.'s update of the centred sums of squares (weights as frequencies):
        # exact in exact arithmetic, without the cancellation of sum y^2 - n ybar^2; the
        # harmonic weight a b / (a + b) <= min(a, b) as a (b / (a + b)), whose product a b
        # would overflow for weights from ~1e155 (normalize_y then saw an infinite variance)
        a, b = self.w_sum, other.w_sum
        delta = other.s_y / b + shift - self.s_y / a  # (T,) difference of the means
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            # the sums of squares at a common power-of-two scale P >= |delta|, from the
            # sides with a spread (a constant or one-row block's scale of 1 must not set
            # it: the others' squares would underflow); inf: reported by normalize_y
            P = np.maximum.reduce(
                [
                    np.where(self.ss_rel > 0, self.ss_scale, 0.0),
                    np.where(other.ss_rel > 0, other.ss_scale, 0.0),
                    np.where(delta != 0, power_of_two_above(delta), 0.0),
                ]
            )
            P = np.where(P > 0, P, 1.0)
            ss_rel = (
                _rescaled(self.ss_rel, self.ss_scale, P)
                + _rescaled(other.ss_rel, other.ss_scale, P)
                + (delta / P) ** 2 * (a * (b / (a + b)))
            )
        return FeatureStats(
            self.n + other.n,
            self.s_phi + other.s_phi,
            self.gram + other.gram,
            self.rhs + rhs_other,
            self.s_y + s_y_other,
            ss_rel,
            P,
            self.y_ref,
            a + b,
        )

    def centred(
        self, centre_targets: bool, y_scale: np.ndarray, centre_features: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(G_c, R_c)``: the Gram and right-hand side of shifted features and targets.

        With ``c = s_phi / w_sum`` (the weighted feature mean) if ``centre_features`` else
        ``0``, and the target shift ``t = ybar`` (:attr:`y_mean`) if ``centre_targets``
        else ``0``: ``G_c = sum_i w_i conj(phi_i - c) (phi_i - c)^T`` (D, D) and
        ``R_c = sum_i w_i conj(phi_i - c) ((y_i - t) / y_scale)^T`` (D, T), expanded in
        the sums (the targets through ``y_i - t = (y_i - y_ref) - (t - y_ref)``).
        """
        n, s = self.w_sum, self.s_phi
        c = s / n if centre_features else np.zeros_like(s)  # (D,)
        G = (
            self.gram
            - np.outer(np.conj(s), c)
            - np.outer(np.conj(c), s)
            + n * np.outer(np.conj(c), c)
        )
        # t - y_ref, computed without forming t itself (exact for t = ybar)
        t_rel = self.s_y / n if centre_targets else -self.y_ref  # (T,)
        R = (
            self.rhs - np.outer(np.conj(s), t_rel) - np.outer(np.conj(c), self.s_y - n * t_rel)
        ) / y_scale
        return G, R


def scaled_sq_sums(dev, w=None):
    """``(ss_rel (T,), scale (T,))`` with ``sum_i w_i dev_i^2 = scale^2 ss_rel`` for the
    deviations ``dev`` (n, T) and weights ``w`` (n,) (None: all 1): ``scale`` the power
    of two above the largest deviation of a row of positive weight, so that no square
    underflows (deviations of 1e-170) or overflows (1e170) where the sum's square root is
    in range; rows of zero weight add nothing (an outlier among them sets no scale).
    Call under ``np.errstate(over=..., under=..., invalid=...)`` as needed."""
    live = dev if w is None else dev[w > 0]
    top = np.max(np.abs(live), axis=0) if len(live) else np.zeros(dev.shape[1])  # (T,)
    scale = power_of_two_above(top)
    u = live / scale
    return (u**2 if w is None else w[w > 0][:, None] * u**2).sum(axis=0), scale


def _rescaled(ss_rel, scale, P):
    """``ss_rel (scale / P)^2``: a scaled sum of squares moved to the scale ``P``; 0 where
    it is 0 (whatever its scale: no ``inf * 0``)."""
    return np.where(ss_rel > 0, ss_rel * (scale / P) ** 2, 0.0)


class _Accumulator:
    """Running sums of :class:`FeatureStats` over slabs of one block (see ``block_stats``).

    Real features: ``G`` holds the upper triangle of ``Phi^T Phi``, updated in place by
    the BLAS symmetric rank-k update ``dsyrk`` (``D^2 b`` flops per slab of ``b`` rows,
    half a GEMM's); the lower triangle is mirrored once at the end. Complex features use
    :func:`gram_primal` per slab.
    """

    def __init__(self, D: int, T: int, complex_: bool):
        dt = np.complex128 if complex_ else np.float64
        self.complex = complex_
        self.n = 0
        self.s_phi = np.zeros(D, dtype=dt)
        self.gram = np.zeros((D, D), dtype=dt, order="F")
        self.rhs = np.zeros((D, T), dtype=dt)

    def add(self, Phi: np.ndarray, Y: np.ndarray, w: np.ndarray | None = None) -> None:
        """Add a slab: features ``Phi`` (b, D), targets ``Y`` (b, T), weights ``w`` (b,)
        (None: all 1)."""
        self.n += len(Phi)
        if w is not None:  # sum_i w_i phi_i, Phi^H W Phi (by sqrt(w) Phi if real), Phi^H W Y
            self.s_phi += w @ Phi
            Y = Y * w[:, None]
        else:
            self.s_phi += Phi.sum(axis=0)
        if self.complex:
            self.gram += gram_primal(Phi, w)
            self.rhs += np.conj(Phi).T @ Y
        else:
            rhs = Phi.T @ Y
            if w is not None:
                Phi = Phi * np.sqrt(w)[:, None]
            # Phi.T is the F-ordered (D, b) view of the C-ordered slab: no copy
            self.gram = dsyrk(1.0, Phi.T, beta=1.0, c=self.gram, trans=0, lower=0, overwrite_c=1)
            self.rhs += rhs

    def stats(self, Yc: np.ndarray, y_ref: np.ndarray, w: np.ndarray | None) -> FeatureStats:
        """The block's statistics; ``Yc`` (b, T): its targets minus ``y_ref`` (T,), the
        block's (weighted) mean; ``w`` (b,) its weights or None."""
        G = self.gram
        if not self.complex:
            G = np.triu(G)
            G += np.triu(G, 1).T
        w_sum = float(len(Yc)) if w is None else float(w.sum())
        Yw = Yc if w is None else Yc * w[:, None]
        s_y = Yw.sum(axis=0)  # (T,)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            # about the block mean (0 for a block of zero weights); inf: reported by
            # normalize_y, else unused
            ss_rel, scale = scaled_sq_sums(Yc - (s_y / w_sum if w_sum > 0 else 0.0), w)
        return FeatureStats(
            n=self.n,
            s_phi=self.s_phi,
            gram=np.ascontiguousarray(G),
            rhs=self.rhs,
            s_y=s_y,
            ss_rel=ss_rel,
            ss_scale=scale,
            y_ref=y_ref,
            w_sum=w_sum,
        )


def block_stats(fm, Xb, yb, amplitude: float = 1.0, wb=None) -> FeatureStats:
    """Statistics of one block: rows ``Xb`` (b, d), targets ``yb`` (b,) or (b, T), sample
    weights ``wb`` (b,) (None: unweighted).

    The rows are mapped to features in slabs of about ``_SLAB_BYTES`` (never the whole
    block's ``(b, D)`` features at once); the statistics are accumulated over the slabs.
    """
    Xb = np.asarray(Xb)
    Y = np.asarray(yb, dtype=np.float64).reshape(len(Xb), -1)  # (b, T)
    w = None if wb is None else np.asarray(wb, dtype=np.float64)
    n = len(Xb)
    if n == 0:
        raise ValueError("empty block")
    with np.errstate(over="ignore"):  # inf: reported by normalize_y, else unused
        # (T,) the block's reference (module doc): its mean, weighted where it can be
        y_ref = Y.mean(axis=0) if w is None or not w.sum() > 0 else np.average(Y, 0, w)
        Y = Y - y_ref  # (b, T)
    acc, lo, step = None, 0, _FIRST_SLAB
    while lo < n:
        Phi = map_features(fm, Xb[lo : lo + step], amplitude)  # (<= step, D) f64 / c128
        if acc is None:
            acc = _Accumulator(Phi.shape[1], Y.shape[1], np.iscomplexobj(Phi))
            step = max(_FIRST_SLAB, _SLAB_BYTES // (Phi.itemsize * Phi.shape[1]))
            hi = lo + len(Phi)
        else:
            hi = lo + step
        acc.add(Phi, Y[lo:hi], None if w is None else w[lo:hi])
        lo = hi
    return acc.stats(Y, y_ref, w)


def use_blocked_statistics(fm, X, solver: str) -> bool:
    """Whether the in-memory fit of ``X`` (n, d) is primal with ``n D > STREAM_ENTRIES``."""
    D = map_features(fm, X[:1]).shape[1]
    return choose_solver(solver, len(X), D) == "primal" and len(X) * D > STREAM_ENTRIES


def blocked_statistics(fm, X, Y, amplitude: float = 1.0, n_jobs=None, w=None) -> FeatureStats:
    """:class:`FeatureStats` of in-memory rows ``X`` (n, d), targets ``Y`` (n, T), sample
    weights ``w`` (n,) or None.

    Up to ``_MAX_BLOCKS`` contiguous row blocks of at least ``4 * _FIRST_SLAB`` rows, a
    number fixed by ``n`` alone, run on ``n_jobs`` threads (a ``(D, D)`` accumulator per
    thread, and the running total) and summed in block order: the model does not depend
    on the threads.
    """
    n = len(X)
    k = max(1, min(_MAX_BLOCKS, n // (4 * _FIRST_SLAB)))  # not the threads: same sums
    return reduce_rows(
        lambda _, Xb, Yb, wb=None: block_stats(fm, Xb, Yb, amplitude, wb),
        [X, Y] + ([] if w is None else [w]),
        block=-(-n // k),
        n_jobs=n_jobs,
    )


def chunk_statistics(fm, rows: TrainingRows, amplitude: float = 1.0) -> FeatureStats:
    """:class:`FeatureStats` over every chunk of chunked ``rows`` (each checked here)."""
    if rows.pairs is not None:  # an iterable: checked by iter_block_pairs, in order
        return functools.reduce(_add, (block_stats(fm, *pair, amplitude) for pair in rows.pairs))
    owner, d = rows.owner, rows.head.shape[1]

    def stats(index, Xb, yb, wb=None):  # one Dask task per row chunk
        Xb = check_block(Xb, "X", index, owner=owner, n_columns=d, vector="error", dtype=None)
        yb = check_block(yb, "y", index, owner=owner, vector="keep", dtype=None)
        if wb is not None:
            wb = _checked_weights(wb, index, owner)
        return block_stats(fm, Xb, yb, amplitude, wb) if len(Xb) else None  # None: empty

    if rows.w is None:
        return reduce_rows(stats, [rows.X, rows.Y], _add, known=rows.known_head)
    total = reduce_rows(stats, [rows.X, rows.Y, rows.w], _add)
    if not total.w_sum > 0:
        raise ValueError(f"{owner}: sample_weight: the weights are all zero.")
    return total


def _add(u: FeatureStats | None, v: FeatureStats | None) -> FeatureStats | None:
    """``u + v``, with None for the statistics of an empty chunk."""
    return v if u is None else u if v is None else u + v
