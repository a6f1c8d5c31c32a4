"""The benchmarks of ``kernelkit bench NAME``, behind a lazy registry.

Nothing here imports a benchmark module until it is run: :data:`BENCHMARKS` maps a name
to a module path and a one-line description, so ``kernelkit list`` is fast and a module
that fails to import only affects its own entry. Benchmark modules expose
``run(quick: bool) -> dict`` and print their own table; they time kernelkit and its peer
in the same run (:mod:`._timing`) and are never tests. ``benchmarks/bench_*.py`` in a
kernelkit checkout are thin command-line wrappers around them.
"""

from __future__ import annotations

from kernelkit.experiments import Entry

__all__ = ["BENCHMARKS"]


def _bench(name, module, description):
    return Entry(name, f"{__name__}.{module}", description, "benchmark")


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
