"""Timing helpers shared by the benchmarks (``kernelkit bench NAME``).

Benchmarks time kernelkit and its peer in the same run, round-robin, and report ratios
of minimum times; they are never tests.
"""

from __future__ import annotations

import resource
import statistics
import time

__all__ = ["meets", "settle", "start_peak_rss", "text_table", "time_calls"]

#: pause before each timed call: OpenBLAS worker threads spin for up to ~0.1 s after a
#: threaded BLAS call (``OPENBLAS_THREAD_TIMEOUT``), stealing a core from whatever runs
#: next; the pause gives every call the same start. It busy-waits (a sleep would let the
#: core idle and make the next short call pay the wake-up).
SETTLE_S = 0.2


def settle(seconds: float = SETTLE_S) -> None:
    """Busy-wait ``seconds`` (see :data:`SETTLE_S`)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def time_calls(fns: dict, repeats: int, settle_s: float = SETTLE_S) -> dict:
    """Time the callables in ``fns`` round-robin; ``{name: {"min": s, "median": s}}``.

    ``settle_s``: the busy-wait before each call (:data:`SETTLE_S`; 0 where no CPU BLAS
    threads are involved, e.g. CUDA calls that synchronise)."""
    for fn in fns.values():  # warm-up (caches, page mappings, thread start-up)
        fn()
    samples = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            if settle_s:
                settle(settle_s)
            t0 = time.perf_counter()
            fn()
            samples[k].append(time.perf_counter() - t0)
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
