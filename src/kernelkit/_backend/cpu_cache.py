"""One logical CPU's share of the level-2 cache, for cache-sized blocks of rows.

Blocked kernels (the streaming bidirectional attention) size their row blocks so that a
block of features stays in a core's cache between the product that makes it and the
exponential and reductions that read it. The best size follows the cache: on a 2-core
host with 2 MiB of L2 per core, bidirectional attention (8 heads, d = 64, M = 256,
float32) ran 10-15% faster with 2 MiB blocks than with the fixed 1 MiB used before, at
every length from 1024 to 65536, forward and forward + backward.

Read from Linux's sysfs (``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size,
shared_cpu_list}``); elsewhere, or where the files are missing or unreadable, the size
is unknown (None) and callers keep their default.
"""

from __future__ import annotations

import os
import re

__all__ = ["count_cpu_list", "l2_cache_bytes", "parse_cache_size"]

#: sysfs directory of cpu0's caches (one ``index*`` folder per cache)
SYSFS_CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_cache_size(text: str) -> int | None:
    """Bytes of a sysfs cache size such as ``"2048K"``, ``"1M"`` or ``"512"``; None for
    anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, flags=re.IGNORECASE)
    if match is None:
        return None
    size = int(match.group(1)) * _UNITS[match.group(2).upper()]
    return size or None


def count_cpu_list(text: str) -> int | None:
    """Number of CPUs in a sysfs CPU list such as ``"0-3,8-11"`` (8); None for anything
    else."""
    count = 0
    for part in text.strip().split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None:
            return None
        lo = int(match.group(1))
        hi = lo if match.group(2) is None else int(match.group(2))
        if hi < lo:
            return None
        count += hi - lo + 1
    return count


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def l2_cache_bytes(root: str = SYSFS_CACHE_DIR) -> int | None:
    """One logical CPU's share in bytes of its level-2 data (or unified) cache, None where
    unknown: the cache's size divided by the CPUs that share it (``shared_cpu_list``:
    two hyperthreads of a core halve it; the whole size where the list is unreadable).

    ``root`` is the sysfs cache directory of one CPU (a parameter for tests)."""
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return None
    for entry in entries:
        if not entry.startswith("index"):
            continue
        folder = os.path.join(root, entry)
        if _read(os.path.join(folder, "level")) != "2":
            continue
        if _read(os.path.join(folder, "type")) not in ("Unified", "Data"):
            continue
        size = _read(os.path.join(folder, "size"))
        size = None if size is None else parse_cache_size(size)
        shared = _read(os.path.join(folder, "shared_cpu_list"))
        sharers = None if shared is None else count_cpu_list(shared)
        return size if size is None or not sharers else size // sharers
    return None
