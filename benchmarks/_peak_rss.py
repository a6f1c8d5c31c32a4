"""Peak resident memory of one call, measured in the benchmark's own fresh process."""

from __future__ import annotations

import resource


def _vm_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(field)


def start_peak_rss():
    """Reset the peak and return ``(before, peak)``: the RSS now (KiB) and a function
    returning the peak RSS since (KiB), so ``peak() - before`` is what the code run in
    between added. Linux: the high-water mark ``VmHWM`` reset through ``clear_refs``;
    elsewhere ``getrusage``'s ``ru_maxrss``, a peak since the process started (so the
    difference may be 0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS to the current RSS
        return _vm_kib("VmRSS"), lambda: _vm_kib("VmHWM")
    except OSError:

        def peak():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

        return peak(), peak
