"""Offline text corpora for character-level language models.

Sources (nothing is downloaded; both ship with the Python standard library):

* ``"pydoc"`` -- the topic help texts of :mod:`pydoc_data.topics` (``help("FOR")`` etc.),
  about 0.47 M characters on CPython 3.11, topics joined in sorted key order;
* ``"stdlib-docstrings"`` -- the module, class and function docstrings of the standard
  library's own ``.py`` sources (parsed with :mod:`ast`, never imported; test suites,
  ``idlelib``, ``tkinter``, ``lib2to3``, ``turtledemo``, ``ensurepip`` and
  ``site-packages`` excluded), about 1.5 M characters, files in sorted path order;
* ``"pydoc+stdlib"`` -- both, pydoc first.

The exact text depends on the installed Python version; :attr:`TextCorpus.sha256`
identifies it.

Split: the corpus is cut into consecutive blocks of ``block_size`` characters and block
``i`` goes to validation when ``floor((i + 1) f) > floor(i f)`` (``f`` the validation
fraction): validation blocks are spread evenly over the whole corpus (every topic area is
represented in both parts), the split is deterministic, and each part is the
concatenation of its blocks (a block boundary joins two unrelated contexts once every
``block_size`` characters).

Vocabulary: the sorted set of characters of the whole corpus (train and validation), so
every validation character has an id; a character seen only in validation keeps its
untrained embedding. ``min_count`` > 1 replaces rarer characters by
:data:`UNKNOWN_CHAR`.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import sysconfig
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernelkit.datasets._images import DatasetNotAvailable

__all__ = [
    "TEXT_SOURCES",
    "UNKNOWN_CHAR",
    "TextCorpus",
    "load_text_corpus",
    "pydoc_topics_text",
    "stdlib_docstrings_text",
]

TEXT_SOURCES = ("pydoc", "stdlib-docstrings", "pydoc+stdlib")
#: replacement for characters rarer than ``min_count``
UNKNOWN_CHAR = "\ufffd"

#: path parts (directories) of the standard library whose sources are skipped
_SKIP_DIRS = frozenset(
    {
        "test",
        "tests",
        "idlelib",
        "site-packages",
        "dist-packages",
        "lib2to3",
        "ensurepip",
        "turtledemo",
        "tkinter",
        "__pycache__",
    }
)
_DOC_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class TextCorpus:
    """A character corpus split into train and validation ids.

    Attributes
    ----------
    source : str
    vocab : tuple of str
        The characters, id ``i`` is ``vocab[i]``.
    train, valid : numpy.ndarray of int64, shape (n_train,), (n_valid,)
        Character ids.
    sha256 : str
        Hash of the full (unsplit) text, to identify the corpus version.
    n_documents : int
        Topics / docstrings joined into the text.
    """

    source: str
    vocab: tuple = field(repr=False)
    train: np.ndarray = field(repr=False)
    valid: np.ndarray = field(repr=False)
    sha256: str
    n_documents: int

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @functools.cached_property
    def _index(self) -> dict:
        return {c: i for i, c in enumerate(self.vocab)}

    def encode(self, text: str) -> np.ndarray:
        """Ids of ``text``; characters outside the vocabulary map to :data:`UNKNOWN_CHAR`
        (``KeyError`` naming the character if the vocabulary has none)."""
        idx = self._index
        unk = idx.get(UNKNOWN_CHAR)
        out = np.empty(len(text), dtype=np.int64)
        for i, c in enumerate(text):
            j = idx.get(c, unk)
            if j is None:
                raise KeyError(f"character {c!r} is not in the vocabulary of this corpus.")
            out[i] = j
        return out

    def decode(self, ids) -> str:
        """Text of a sequence of ids."""
        ids = np.asarray(ids)
        if ids.ndim != 1:
            raise ValueError(f"ids must be one-dimensional, got shape {ids.shape}.")
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.vocab)):
            raise ValueError(f"ids must lie in [0, {len(self.vocab)}).")
        return "".join(self.vocab[i] for i in ids.tolist())

    def summary(self) -> dict:
        return {
            "source": self.source,
            "vocab_size": self.vocab_size,
            "n_train": int(self.train.size),
            "n_valid": int(self.valid.size),
            "n_documents": self.n_documents,
            "sha256": self.sha256,
        }


def pydoc_topics_text() -> tuple[str, int]:
    """The :mod:`pydoc_data.topics` help texts joined in sorted key order; (text, count)."""
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:  # stripped-down Python builds
        raise DatasetNotAvailable(
            "pydoc_data.topics is not importable: install the full Python standard library "
            "(Debian: package libpython3-stdlib / python3.X with pydoc_data)."
        ) from exc
    docs = [topics[k].strip() for k in sorted(topics)]
    docs = [d for d in docs if d]
    return _DOC_SEPARATOR.join(docs), len(docs)


def _stdlib_files(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        if set(rel[:-1]) & _SKIP_DIRS or p.name.startswith("test_"):
            continue
        out.append(p)
    return out


@functools.lru_cache(maxsize=2)
def stdlib_docstrings_text(root: str | None = None) -> tuple[str, int]:
    """Docstrings of the standard library sources under ``root`` (default: this Python's
    ``stdlib`` path), in sorted file order and source order within a file; (text, count).

    Files that do not parse (or are not UTF-8) are skipped.
    """
    path = Path(root or sysconfig.get_paths()["stdlib"])
    files = _stdlib_files(path) if path.is_dir() else []
    if not files:
        raise DatasetNotAvailable(
            f"no standard-library sources (*.py) under {path}: install the Python standard "
            "library sources (Debian: libpython3.X-stdlib)."
        )
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docs = []
    for p in files:
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        # ast.walk is breadth-first; sort by line for source order
        nodes = sorted(
            (n for n in ast.walk(tree) if isinstance(n, kinds)),
            key=lambda n: getattr(n, "lineno", 0),
        )
        for node in nodes:
            doc = ast.get_docstring(node)
            if doc and doc.strip():
                docs.append(doc.strip())
    return _DOC_SEPARATOR.join(docs), len(docs)


def _split_mask(n_blocks: int, valid_fraction: float) -> np.ndarray:
    i = np.arange(n_blocks)
    return np.floor((i + 1) * valid_fraction) > np.floor(i * valid_fraction)


def load_text_corpus(
    source: str = "pydoc",
    *,
    valid_fraction: float = 0.1,
    block_size: int = 4096,
    max_chars: int | None = None,
    min_count: int = 1,
) -> TextCorpus:
    """Load an offline character corpus with a deterministic train / validation split.

    Parameters
    ----------
    source : {"pydoc", "stdlib-docstrings", "pydoc+stdlib"}
    valid_fraction : float in (0, 1)
        Share of blocks that go to validation (evenly spaced, see module docstring).
    block_size : int
        Characters per split block.
    max_chars : int, optional
        Keep only the first ``max_chars`` characters of the joined text (before the split).
    min_count : int
        Characters occurring fewer times in the (truncated) text are replaced by
        :data:`UNKNOWN_CHAR`.

    Returns
    -------
    TextCorpus

    Raises
    ------
    DatasetNotAvailable
        The source is not installed (message names the package).
    """
    if source not in TEXT_SOURCES:
        raise ValueError(f"source must be one of {TEXT_SOURCES}, got {source!r}.")
    if not isinstance(valid_fraction, int | float) or not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must lie in (0, 1), got {valid_fraction!r}.")
    for name, val in (("block_size", block_size), ("min_count", min_count)):
        if isinstance(val, bool) or not isinstance(val, int | np.integer) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}.")
    if max_chars is not None and (
        isinstance(max_chars, bool)
        or not isinstance(max_chars, int | np.integer)
        or max_chars < 2 * block_size
    ):
        raise ValueError(
            f"max_chars must be an integer >= 2 * block_size = {2 * block_size}, got {max_chars!r}."
        )

    parts, n_docs = [], 0
    if source in ("pydoc", "pydoc+stdlib"):
        text, n = pydoc_topics_text()
        parts.append(text)
        n_docs += n
    if source in ("stdlib-docstrings", "pydoc+stdlib"):
        text, n = stdlib_docstrings_text()
        parts.append(text)
        n_docs += n
    text = _DOC_SEPARATOR.join(parts)
    if max_chars is not None:
        text = text[:max_chars]
    counts = Counter(text)
    if min_count > 1:
        rare = {c for c, n in counts.items() if n < min_count}
        if rare:
            text = "".join(UNKNOWN_CHAR if c in rare else c for c in text)
            counts = Counter(text)
    vocab = tuple(sorted(counts))
    # encode through the code points: one array op instead of a Python loop per char
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    keys = np.array([ord(c) for c in vocab], dtype=np.uint32)  # sorted by code point
    ids = np.searchsorted(keys, codes).astype(np.int64)  # vocab is sorted by code point

    n_blocks = -(-ids.size // block_size)
    is_valid = _split_mask(n_blocks, float(valid_fraction))
    if not is_valid.any() or is_valid.all():
        raise ValueError(
            f"the text ({ids.size} characters, {n_blocks} blocks of {block_size}) "
            f"is too short for valid_fraction={valid_fraction}."
        )
    block_of = np.arange(ids.size) // block_size
    valid_chars = is_valid[block_of]
    return TextCorpus(
        source=source,
        vocab=vocab,
        train=ids[~valid_chars].copy(),
        valid=ids[valid_chars].copy(),
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        n_documents=n_docs,
    )
