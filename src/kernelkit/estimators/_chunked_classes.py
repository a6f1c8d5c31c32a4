"""Training rows and per-class feature statistics of the GP classifier's chunked fit.

:class:`~kernelkit.estimators.RandomFeatureGPClassifier` needs its training rows only
through the Gram matrix ``G_c = Phi_c^H Phi_c`` (D, D) and the column sums
``s_c = Phi_c^H 1`` (D,) of the rows of each class ``c`` (the primal form of App. D,
eq. 88-90, of the dot-product paper, Wacker et al., with the noise of the Milios et al.
transform: ``_class_posteriors_primal``).
A Dask ``X`` (labels ``y`` of any dtype, NumPy or Dask) or an iterable of
``(X_block, labels)`` pairs is reduced to these sums chunk by chunk, one task per chunk
on the active Dask scheduler, as the ridge / GP regression fits are
(:mod:`kernelkit.estimators._chunked`; the feature map is fitted as there). The classes
are the labels met in any chunk; memory is ``O(C D^2)`` on top of one chunk's features.
"""

from __future__ import annotations

import functools

import numpy as np

from .._backend.chunks import (
    check_block,
    is_block_sequence,
    reduce_rows,
)
from .._backend.sklearn_validation import validate_data
from ._chunked import (
    _FIRST_SLAB,
    _MAX_BLOCKS,
    _SLAB_BYTES,
    TrainingRows,
    _checked_weights,
    chunked_head,
    chunked_sample_weight,
    dask_sample_weight,
)
from ._feature_map_param import map_features
from ._labels import check_label_targets, check_raw_labels, encode_labels
from ._posterior import gram_primal

__all__ = ["blocked_class_statistics", "class_statistics", "class_training_rows"]


def class_training_rows(est, X, y, sample_weight=None) -> TrainingRows:
    """The chunked rows of a classifier: ``X`` a Dask array with labels ``y`` (n,), or an
    iterable of ``(X_block, labels)`` pairs with ``y=None``. Checked here by the first
    non-empty chunk (which sets ``n_features_in_``), the others as they are reduced.
    ``sample_weight``: as :func:`~kernelkit.estimators._chunked.training_rows` takes it."""
    name = type(est).__name__
    if est.solver == "dual":
        raise ValueError(
            f"{name}: solver='dual' needs all rows in memory; chunked (Dask / iterable) "
            "input is fitted in the primal form."
        )
    sequence = X if y is None and is_block_sequence(X) else None
    X, y, sample_weight = chunked_sample_weight(X, y, sample_weight, name)
    X, y, X0, y0, pairs, names = chunked_head(X, y, name, labels=True)
    check_raw_labels(name, y0)
    validate_data(est, X0, y0, dtype=[np.float64, np.float32], accept_sparse=False)
    if names is not None:  # DataFrame blocks: as in memory
        est.feature_names_in_ = names
    w = dask_sample_weight(sample_weight, X, name)
    return TrainingRows(name, True, X, y, X0, 1, pairs, sequence, labels=True, head_y=y0, w=w)


def class_block_stats(fm, Xb, yb, amplitude: float, owner: str, wb=None) -> dict:
    """``{label: (G_c (D, D), s_c (D,))}`` of one block: rows ``Xb`` (b, d), labels ``yb``
    (b,), sample weights ``wb`` (b,) or None (then ``G_c = Phi_c^H W_c Phi_c``, ``s_c =
    Phi_c^H w_c``). The rows are mapped to features a slab at a time (``_SLAB_BYTES``),
    never the whole block's; a class absent from the block has no entry."""
    labels, idx = encode_labels(owner, yb, check=False)  # (k,), (b,): checked at the end
    out, lo, step = {}, 0, _FIRST_SLAB
    while lo < len(Xb):
        Phi = map_features(fm, Xb[lo : lo + step], amplitude)  # (<= step, D)
        hi = lo + len(Phi)
        for k, label in enumerate(labels):  # the classes of the slab (not its rows)
            on = idx[lo:hi] == k
            P = Phi[on]  # (n_k, D)
            if len(P):
                if wb is None:
                    part = (gram_primal(P), np.conj(P).sum(axis=0))
                else:
                    wk = np.asarray(wb[lo:hi], dtype=np.float64)[on]
                    part = (gram_primal(P, wk), np.conj(P).T @ wk)
                out = _merge(out, {label: part})
        step = max(_FIRST_SLAB, _SLAB_BYTES // (Phi.itemsize * Phi.shape[1]))
        lo = hi
    return out


def class_statistics(fm, rows: TrainingRows, amplitude: float):
    """``(classes (C,), [(G_c, s_c)] in the order of classes)`` over every chunk."""
    owner, d = rows.owner, rows.head.shape[1]
    dtypes = [np.asarray(rows.head_y).dtype]  # the labels' dtypes, for classes_
    if rows.pairs is not None:  # an iterable: checked by label_pairs, in order

        def part(Xb, yb):
            yb = np.asarray(yb)
            dtypes.append(yb.dtype)
            return class_block_stats(fm, Xb, yb, amplitude, owner)

        stats = functools.reduce(_merge, (part(Xb, yb) for Xb, yb in rows.pairs), {})
    else:

        def block(index, Xb, yb, wb=None):  # one Dask task per row chunk
            Xb = check_block(Xb, "X", index, owner=owner, n_columns=d, vector="error", dtype=None)
            yb = np.asarray(yb)
            check_raw_labels(f"{owner}: block {index}", yb)
            return class_block_stats(fm, Xb, yb, amplitude, owner, wb) if len(Xb) else {}

        def weighted(index, Xb, yb, wb):  # and the chunk's total weight
            wb = _checked_weights(wb, index, owner)
            return block(index, Xb, yb, wb), wb.sum()

        dtypes.append(rows.Y.dtype)
        if rows.w is None:
            stats = reduce_rows(block, [rows.X, rows.Y], _merge, known=rows.known_head)
        else:
            stats, total = reduce_rows(weighted, [rows.X, rows.Y, rows.w], _merge_weighted)
            if not total > 0:
                raise ValueError(f"{owner}: sample_weight: the weights are all zero.")
    keys = np.empty(len(stats), dtype=object)
    keys[:] = list(stats)
    _, order = encode_labels(owner, keys, check=False)  # a TypeError naming y: mixed types
    ranked = [None] * len(keys)
    for key, rank in zip(keys, order, strict=True):
        ranked[rank] = key
    # the labels' own dtype, as np.unique of all labels in memory (object labels stay
    # object: scikit-learn's check below refuses object numbers, as in memory)
    classes = np.asarray(ranked, dtype=np.result_type(*dtypes))
    # e.g. "Unknown label type: continuous". Each label twice: distinct labels are not
    # "more unique classes than 50 % of the samples" (scikit-learn's warning), without
    # warnings.catch_warnings, whose process-wide save and restore is not thread-safe
    check_label_targets(owner, np.repeat(classes, 2))
    return classes, [stats[key] for key in ranked]


def blocked_class_statistics(fm, X, y_idx, n_classes: int, amplitude: float, n_jobs=None, w=None):
    """``[(G_c, s_c)]`` for ``c = 0 .. n_classes - 1`` of in-memory rows ``X`` (n, d) with
    class indices ``y_idx`` (n,) and sample weights ``w`` (n,) or None, over row blocks as
    :func:`~kernelkit.estimators._chunked.blocked_statistics` (a number of blocks fixed by
    ``n``, summed in block order on ``n_jobs`` threads): one slab of features at a time."""
    n = len(X)
    k = max(1, min(_MAX_BLOCKS, n // (4 * _FIRST_SLAB)))
    arrays = [X, np.asarray(y_idx)] + ([] if w is None else [w])
    stats = reduce_rows(
        lambda _, Xb, yb, wb=None: class_block_stats(fm, Xb, yb, amplitude, "classes", wb),
        arrays,
        _merge,
        block=-(-n // k),
        n_jobs=n_jobs,
    )
    return [stats[c] for c in range(n_classes)]


def _merge_weighted(u: tuple, v: tuple) -> tuple:
    """:func:`_merge` of ``(stats, total weight)`` pairs."""
    return _merge(u[0], v[0]), u[1] + v[1]


def _merge(u: dict, v: dict) -> dict:
    """The per-class sums of ``u`` and ``v`` added (a class in one of them only kept)."""
    out = dict(u)
    for key, (G, s) in v.items():
        out[key] = (out[key][0] + G, out[key][1] + s) if key in out else (G, s)
    return out
