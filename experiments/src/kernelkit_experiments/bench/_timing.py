"""Timing helpers shared by the benchmarks (``kernelkit bench NAME``).

Benchmarks time kernelkit and its peer in the same run, round-robin, and report ratios
of minimum times; they are never tests.
"""

from __future__ import annotations

import resource
import statistics
import time

__all__ = [
    "LONG_CALL_S",
    "SETTLE_S",
    "meets",
    "start_peak_rss",
    "text_table",
    "time_calls",
    "warm",
]

#: before each timed call on the CPU, the call itself runs back to back for this long (at
#: least once): every call is timed in its steady state, as in a loop of it (a training
#: step, a batch transform), whatever ran before it. The time also outlasts the worker
#: threads of the call before (OpenBLAS threads spin for up to ~0.1 s after a threaded
#: call, ``OPENBLAS_THREAD_TIMEOUT``, and would steal a core from a different call).
#: A pause does not serve: on a 2-core virtual machine, after 0.2 s of busy-waiting on
#: one core (or of sleep), the next call ran 2-5x slower than back to back (a float32
#: 1024 x 1024 product 13.5 ms against 6.8 ms; bidirectional FAVOR+ at L = 1024 37-40 ms
#: against 12 ms; ``SDERF.fit`` of 2 x 20000 x 64 rows 54 ms against 9.8 ms).
SETTLE_S = 0.2
#: calls at least this long (their previous time) are timed without the warming run:
#: a slow start costs them at most a few per cent, and warming would double their cost
LONG_CALL_S = 2.0


def warm(fn, seconds: float = SETTLE_S) -> None:
    """Call ``fn`` back to back for ``seconds`` (at least once; not at all for
    ``seconds <= 0``); see :data:`SETTLE_S`."""
    if seconds <= 0:
        return
    end = time.perf_counter() + seconds
    fn()
    while time.perf_counter() < end:
        fn()


def time_calls(fns: dict, repeats: int, settle_s: float = SETTLE_S) -> dict:
    """Time the callables in ``fns`` round-robin; ``{name: {"min": s, "median": s}}``.

    One timed warm-up call each (caches, page mappings, thread start-up), then
    ``repeats`` rounds, each call timed right after :func:`warm` runs it for
    ``settle_s`` (:data:`SETTLE_S`; 0 for no warming, e.g. CUDA calls, which
    synchronise) unless its previous time was at least :data:`LONG_CALL_S`."""
    last = {}
    for k, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        last[k] = time.perf_counter() - t0
    samples = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            if last[k] < LONG_CALL_S:
                warm(fn, settle_s)
            t0 = time.perf_counter()
            fn()
            last[k] = time.perf_counter() - t0
            samples[k].append(last[k])
    return {k: {"min": min(v), "median": statistics.median(v)} for k, v in samples.items()}


def meets(value: float, op: str, threshold: float) -> bool:
    """Whether ``value op threshold`` holds, ``op`` in ``{"<=", "<", ">=", ">"}``."""
    return {
        "<=": value <= threshold,
        "<": value < threshold,
        ">=": value >= threshold,
        ">": value > threshold,
    }[op]


def text_table(header, rows) -> str:
    """A plain-text table with left-aligned columns and a dashed rule under the header."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [line.format(*header), line.format(*("-" * w for w in widths))]
    out += [line.format(*(str(c) for c in r)) for r in rows]
    return "\n".join(out)


def _vm_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(field)


def start_peak_rss():
    """Reset the peak and return ``(before, peak)``: the RSS now (KiB) and a function
    returning the peak RSS since (KiB), so ``peak() - before`` is what the code run in
    between added. Linux: the high-water mark ``VmHWM`` reset to ``VmRSS`` through
    ``/proc/self/clear_refs``; elsewhere ``getrusage``'s ``ru_maxrss``, a peak since the
    process started, so the difference reads 0 wherever an earlier step peaked higher.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS to the current RSS
        return _vm_kib("VmRSS"), lambda: _vm_kib("VmHWM")
    except OSError:

        def peak():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

        return peak(), peak
