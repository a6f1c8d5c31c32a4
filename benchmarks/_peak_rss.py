"""Peak resident memory of one call, measured in the benchmark's own fresh process: the
experiments package's :func:`~kernelkit_experiments.bench._timing.start_peak_rss`, which
the wrapped benchmarks use too."""

from __future__ import annotations

from kernelkit_experiments.bench._timing import start_peak_rss

__all__ = ["start_peak_rss"]
