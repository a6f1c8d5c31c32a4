"""The hook to kernelkit's paper experiments and benchmarks (a separate package).

The paper experiments (``kernelkit reproduce``) and the benchmarks (``kernelkit bench``)
are a separate distribution, ``kernelkit-experiments`` (``pip install -e ./experiments``
from a kernelkit checkout), so that the ``kernelkit`` wheel holds the library alone. It
registers a module under the entry point group :data:`ENTRY_POINT_GROUP` that provides
``EXPERIMENTS`` (name -> :class:`Entry`, in the order ``reproduce all`` runs them),
``BENCHMARKS`` (name -> :class:`Entry`), ``write_summary`` and ``collect_rows``;
:func:`experiment_suite` finds it. Nothing is imported until it is run: an entry is a
module path and a one-line description, so ``kernelkit list`` is fast and a module that
does not exist (or fails to import) only affects its own entry. Benchmark modules expose
``run(quick: bool) -> dict`` and print their own table.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = [
    "ENTRY_POINT_GROUP",
    "INSTALL_HINT",
    "Entry",
    "ExperimentsNotInstalled",
    "ModuleNotAvailable",
    "UnknownName",
    "experiment_suite",
    "get_benchmark",
    "get_experiment",
    "is_available",
    "load",
    "run_benchmark",
    "run_experiment",
]

#: Entry point group under which the experiments package registers its module.
ENTRY_POINT_GROUP = "kernelkit.experiments"
#: The import name tried when no entry point is registered (a source checkout on
#: ``sys.path`` without installation).
SUITE_MODULE = "kernelkit_experiments"
#: How to install the experiments (from the root of a kernelkit checkout).
INSTALL_HINT = "pip install -e ./experiments"


@dataclass(frozen=True)
class Entry:
    """A registered experiment or benchmark."""

    name: str
    module: str  # fully qualified module path
    description: str  # one line, shown by ``kernelkit list``
    kind: str = "experiment"  # or "benchmark"


class UnknownName(KeyError):
    """No experiment / benchmark of that name is registered."""

    def __str__(self):  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class ModuleNotAvailable(ImportError):
    """The entry is registered but its module does not exist (yet)."""


class ExperimentsNotInstalled(ImportError):
    """The paper experiments package (``kernelkit-experiments``) is not installed."""


def experiment_suite() -> ModuleType:
    """The installed paper experiments: a module with ``EXPERIMENTS``, ``write_summary``
    and ``collect_rows``.

    Found through the :data:`ENTRY_POINT_GROUP` entry point (the first one registered),
    else by importing :data:`SUITE_MODULE` once.

    Raises
    ------
    ExperimentsNotInstalled
        If neither is there; the message says how to install it.
    """
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        return ep.load()
    try:
        return importlib.import_module(SUITE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != SUITE_MODULE:
            raise
        raise ExperimentsNotInstalled(
            "The paper experiments are a separate package, kernelkit-experiments, which "
            f"is not installed. From the root of a kernelkit checkout: `{INSTALL_HINT}`."
        ) from None


def _registry(kind: str) -> dict[str, Entry]:
    suite = experiment_suite()
    return suite.EXPERIMENTS if kind == "experiment" else getattr(suite, "BENCHMARKS", {})


def _lookup(name: str, kind: str, also: tuple[str, ...] = ()) -> Entry:
    """The entry ``name``; ``UnknownName`` with close matches among the registered names
    and ``also`` (other names the caller accepts, such as ``all``), case-insensitively."""
    reg = _registry(kind)
    if name in reg:
        return reg[name]
    msg = f"Unknown {kind} {name!r}."
    candidates = {c.lower(): c for c in (*reg, *also)}
    close = difflib.get_close_matches(name.lower(), list(candidates), n=3, cutoff=0.5)
    close = [candidates[c] for c in close]
    if close:
        msg += f" Did you mean {' or '.join(repr(c) for c in close)}?"
    msg += f" Available {kind}s: {', '.join(reg) or '(none)'}."
    raise UnknownName(msg)


def is_available(entry: Entry) -> bool:
    """Whether the entry's module can be found (without importing it)."""
    if entry.module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(entry.module) is not None
    except (ImportError, ValueError):
        return False


def load(entry: Entry) -> ModuleType:
    """Import the entry's module.

    Raises
    ------
    ModuleNotAvailable
        If the module itself does not exist. Import errors *inside* an existing module
        (a bug, a missing optional dependency) propagate unchanged.
    """
    try:
        return importlib.import_module(entry.module)
    except ModuleNotFoundError as exc:
        if exc.name == entry.module:
            raise ModuleNotAvailable(
                f"{entry.kind.capitalize()} {entry.name!r} is registered, but its module "
                f"{entry.module} is not available in this installation (not written yet?)."
            ) from exc
        raise


def get_experiment(name: str) -> ModuleType:
    """The experiment module registered under ``name`` (imported on demand)."""
    return load(_lookup(name, "experiment"))


def get_benchmark(name: str) -> ModuleType:
    """The benchmark module registered under ``name`` (imported on demand)."""
    return load(_lookup(name, "benchmark"))


def run_experiment(name: str, out_dir, quick: bool = False, seed: int = 0) -> dict:
    """Run experiment ``name`` into ``out_dir``; returns its results dict."""
    mod = get_experiment(name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return mod.run(out, quick=quick, seed=seed)


def run_benchmark(name: str, quick: bool = False) -> dict:
    """Run benchmark ``name`` (it prints its own table); returns its results dict."""
    return get_benchmark(name).run(quick=quick)
