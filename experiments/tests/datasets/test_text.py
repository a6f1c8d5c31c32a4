"""Offline character corpora (``kernelkit.datasets._text``)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.datasets._images import DatasetNotAvailable
from kernelkit_experiments.datasets._text import (
    UNKNOWN_CHAR,
    _split_mask,
    load_text_corpus,
    pydoc_topics_text,
    stdlib_docstrings_text,
)


@pytest.fixture(scope="module")
def pydoc():
    return load_text_corpus("pydoc")


def test_pydoc_corpus_reassembles_the_topics_text(pydoc):
    text, n_docs = pydoc_topics_text()
    assert pydoc.n_documents == n_docs > 50
    assert pydoc.train.dtype == np.int64 and pydoc.valid.dtype == np.int64
    assert pydoc.train.size + pydoc.valid.size == len(text)
    # undo the block split: blocks are interleaved in corpus order
    block = 4096
    n_blocks = -(-len(text) // block)
    is_valid = _split_mask(n_blocks, 0.1)
    tr, va, pieces = (
        iter(np.split(pydoc.train, np.cumsum([block] * int((~is_valid).sum()))[:-1])),
        iter(np.split(pydoc.valid, np.cumsum([block] * int(is_valid.sum()))[:-1])),
        [],
    )
    for v in is_valid:
        pieces.append(next(va) if v else next(tr))
    assert pydoc.decode(np.concatenate(pieces)) == text
    # vocabulary: the sorted distinct characters, every id used
    assert list(pydoc.vocab) == sorted(set(text))
    assert np.union1d(pydoc.train, pydoc.valid).size == pydoc.vocab_size


def test_split_is_deterministic_evenly_spread_and_of_the_right_size(pydoc):
    again = load_text_corpus("pydoc")
    np.testing.assert_array_equal(again.train, pydoc.train)
    np.testing.assert_array_equal(again.valid, pydoc.valid)
    assert again.sha256 == pydoc.sha256
    n = pydoc.train.size + pydoc.valid.size
    assert abs(pydoc.valid.size / n - 0.1) < 4096 / n + 1e-9
    mask = _split_mask(100, 0.1)
    np.testing.assert_array_equal(np.flatnonzero(mask), np.arange(9, 100, 10))
    assert _split_mask(7, 0.3).sum() == 2  # floor(7 * 0.3)


def test_encode_decode_roundtrip_and_errors(pydoc):
    s = 'for x in range(3):\n    print("hi")'
    ids = pydoc.encode(s)
    assert ids.dtype == np.int64 and pydoc.decode(ids) == s
    with pytest.raises(KeyError, match="vocabulary"):
        pydoc.encode("\u4e2d")
    with pytest.raises(ValueError, match="ids must lie"):
        pydoc.decode([pydoc.vocab_size])
    with pytest.raises(ValueError, match="one-dimensional"):
        pydoc.decode(np.zeros((2, 2), dtype=int))


def test_min_count_and_max_chars():
    c = load_text_corpus("pydoc", max_chars=50_000, min_count=50)
    text = c.decode(np.concatenate([c.train, c.valid]))
    assert len(text) == 50_000
    assert UNKNOWN_CHAR in c.vocab
    counts = {ch: text.count(ch) for ch in c.vocab if ch != UNKNOWN_CHAR}
    assert min(counts.values()) >= 50
    assert c.decode(c.encode("\u4e2d")) == UNKNOWN_CHAR  # unknown characters map to it


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"source": "shakespeare"}, "source"),
        ({"valid_fraction": 0.0}, "valid_fraction"),
        ({"valid_fraction": 1.5}, "valid_fraction"),
        ({"block_size": 0}, "block_size"),
        ({"min_count": 1.5}, "min_count"),
        ({"max_chars": 10}, "max_chars"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_text_corpus(**kwargs)


def test_stdlib_docstrings(tmp_path):
    (tmp_path / "mod.py").write_text('"""Module doc."""\ndef f():\n    """F doc."""\n')
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "skipped.py").write_text('"""Skipped."""\n')
    (tmp_path / "broken.py").write_text("def (:\n")
    text, n = stdlib_docstrings_text(str(tmp_path))
    assert (text, n) == ("Module doc.\n\nF doc.", 2)
    with pytest.raises(DatasetNotAvailable, match="standard"):
        stdlib_docstrings_text(str(tmp_path / "missing"))
