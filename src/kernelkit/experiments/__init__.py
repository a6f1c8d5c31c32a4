"""Paper experiments and benchmarks, behind a lazy registry.

Nothing here imports an experiment module until it is run: the registry maps a name to
a module path and a one-line description, so ``kernelkit list`` is fast and a module
that does not exist yet (or fails to import) only affects its own entry.

Experiment modules expose::

    NAME: str
    DESCRIPTION: str
    def run(out_dir: pathlib.Path, quick: bool = False, seed: int = 0) -> dict

and write ``report.md``, PNG plots and ``results.json`` into ``out_dir`` through
:class:`kernelkit.experiments._report.Report`. Benchmark modules expose
``run(quick: bool) -> dict`` and print their own table.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = [
    "BENCHMARKS",
    "EXPERIMENTS",
    "Entry",
    "ModuleNotAvailable",
    "UnknownName",
    "get_benchmark",
    "get_experiment",
    "is_available",
    "load",
    "run_benchmark",
    "run_experiment",
]


@dataclass(frozen=True)
class Entry:
    """A registered experiment or benchmark."""

    name: str
    module: str  # fully qualified module path
    description: str  # one line, shown by ``kernelkit list``
    kind: str = "experiment"  # or "benchmark"


def _exp(name, module, description):
    return Entry(name, f"{__name__}.{module}", description, "experiment")


def _bench(name, module, description):
    return Entry(name, f"{__name__}.{module}", description, "benchmark")


#: Experiments in the order ``kernelkit reproduce all`` runs them.
EXPERIMENTS: dict[str, Entry] = {
    e.name: e
    for e in (
        _exp(
            "favor-variance",
            "favor_variance",
            "FAVOR# Sec. 5.1: relative variance of softmax-kernel random features "
            "(Trig ... SDERF) vs sigma",
        ),
        _exp(
            "favor-classification",
            "favor_classification",
            "FAVOR# Sec. 5.2: Nadaraya-Watson kernel classification with random features",
        ),
        _exp(
            "dp-gp",
            "dp_gp",
            "Dot-product features Table 3: GP regression / classification with a Gaussian "
            "sketch or RFF vs Optimized Maclaurin",
        ),
        _exp(
            "dp-variance",
            "dp_variance",
            "Dot-product RF Figs. 2-3: MSE of real vs complex sketches vs degree; complex / "
            "real TensorSRHT variance ratio on image data",
        ),
        _exp(
            "dp-frobenius",
            "dp_frobenius",
            "Dot-product RF Fig. 6: relative Frobenius error of every sketch, Random and "
            "Optimized Maclaurin on Fashion-MNIST (p = 3, 7, 10; D = d, 3d, 5d)",
        ),
        _exp(
            "hrf-pointwise",
            "hrf_pointwise",
            "Hybrid RF Figs. 2/5: pointwise relative error of the softmax kernel on the "
            "sphere (d = 64) vs angle, Trig / FAVOR+ vs FLOP-matched hybrids",
        ),
        _exp(
            "hrf-uci",
            "hrf_uci",
            "Hybrid RF Table 1: softmax-kernel MSE on wine and Boston (HRF-ort, HRF-iid, "
            "ORF-reg, ORF-Had, Halton-R)",
        ),
        _exp(
            "hrf-clustered",
            "hrf_clustered",
            "Hybrid RF Table 3: clustered hybrid features on synthetic clustered data",
        ),
        _exp(
            "attention-approx",
            "attention_approx",
            "Linear attention: error of every feature map against exact softmax attention "
            "vs number of features",
        ),
        _exp(
            "tiny-lm",
            "tiny_lm",
            "Linear attention: character-level Transformer LM with exact, FAVOR+, FAVOR++, "
            "FAVOR# and hybrid attention",
        ),
        _exp(
            "jdl-gaussian",
            "jdl_gaussian",
            "JDL Sec. 5.1: conditional second moments of Gaussian data, JDL vs JPDL vs CME",
        ),
        _exp(
            "jdl-small",
            "jdl_small",
            "JDL Sec. 5.1: uniform and Cauchy data sets with n in {50, 100, 200}",
        ),
        _exp(
            "jdl-classification",
            "jdl_classification",
            "JDL Sec. 5.2: classification as a conditional distribution, JDL vs CME vs KLR",
        ),
        _exp(
            "sgb-logreg",
            "sgb_logreg",
            "SGB: multinomial logistic regression, SPFB / LSPFB vs SGD, Adam, L-BFGS",
        ),
    )
}

#: Benchmarks for ``kernelkit bench NAME``.
BENCHMARKS: dict[str, Entry] = {
    e.name: e
    for e in (
        _bench(
            "features",
            "bench_features",
            "random feature maps: fit/transform time against their peers",
        ),
        _bench(
            "dot-product",
            "bench_dot_product",
            "dot-product features: TensorSRHT vs scikit-learn PolynomialCountSketch "
            "(time, Frobenius error)",
        ),
        _bench(
            "attention",
            "bench_attention",
            "linear attention vs torch SDPA and performer-pytorch (forward, backward)",
        ),
        _bench(
            "jdl", "bench_jdl", "joint distribution learning at n = 1e6 vs scikit-learn KernelRidge"
        ),
        _bench(
            "sgb",
            "bench_sgb",
            "SPFB step matrix-free vs dense; epochs and seconds to suboptimality vs SGD, "
            "Adam, L-BFGS",
        ),
        _bench(
            "scale",
            "bench_scale",
            "out-of-core RandomFeatureRidge on Dask (10^7 x 16, 1024 features): rows/s in "
            "memory, threads, LocalCluster; ratio to Nystroem + Ridge",
        ),
    )
}


class UnknownName(KeyError):
    """No experiment / benchmark of that name is registered."""

    def __str__(self):  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class ModuleNotAvailable(ImportError):
    """The entry is registered but its module does not exist (yet)."""


def _registry(kind: str) -> dict[str, Entry]:
    return EXPERIMENTS if kind == "experiment" else BENCHMARKS


def _lookup(name: str, kind: str) -> Entry:
    reg = _registry(kind)
    if name in reg:
        return reg[name]
    msg = f"Unknown {kind} {name!r}."
    close = difflib.get_close_matches(name, list(reg), n=3, cutoff=0.5)
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
