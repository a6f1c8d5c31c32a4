"""Reading one core's L2 cache size from a sysfs-like cache directory."""

from __future__ import annotations

import pytest

from kernelkit._backend.cpu_cache import count_cpu_list, l2_cache_bytes, parse_cache_size


@pytest.mark.parametrize(
    "text, size",
    [
        ("2048K", 2 << 20),
        ("1M", 1 << 20),
        ("512", 512),
        (" 1024K\n", 1 << 20),
        ("1MiB", 1 << 20),
        ("0K", None),
        ("", None),
        ("big", None),
        ("-1K", None),
        ("1.5M", None),
    ],
)
def test_parse_cache_size(text, size):
    assert parse_cache_size(text) == size


def _cache(root, index, level, kind, size, shared=None):
    folder = root / f"index{index}"
    folder.mkdir()
    for name, value in (
        ("level", level),
        ("type", kind),
        ("size", size),
        ("shared_cpu_list", shared),
    ):
        if value is not None:
            (folder / name).write_text(f"{value}\n")


def test_reads_the_level_2_entry(tmp_path):
    _cache(tmp_path, 0, 1, "Data", "48K")
    _cache(tmp_path, 1, 1, "Instruction", "64K")
    _cache(tmp_path, 2, 2, "Unified", "2048K")
    _cache(tmp_path, 3, 3, "Unified", "491520K")
    (tmp_path / "uevent").write_text("")  # not a cache entry
    assert l2_cache_bytes(str(tmp_path)) == 2 << 20


def test_skips_an_instruction_cache_at_level_2(tmp_path):
    _cache(tmp_path, 0, 2, "Instruction", "64K")
    _cache(tmp_path, 1, 2, "Data", "1024K")
    assert l2_cache_bytes(str(tmp_path)) == 1 << 20


@pytest.mark.parametrize("size", [None, "unknown"])
def test_unreadable_size_is_unknown(tmp_path, size):
    _cache(tmp_path, 0, 1, "Data", "32K")
    _cache(tmp_path, 1, 2, "Unified", size)
    assert l2_cache_bytes(str(tmp_path)) is None


def test_no_level_2_or_no_directory_is_unknown(tmp_path):
    assert l2_cache_bytes(str(tmp_path / "missing")) is None
    _cache(tmp_path, 0, 1, "Data", "32K")
    assert l2_cache_bytes(str(tmp_path)) is None


def test_this_machine_gives_a_size_or_none():
    size = l2_cache_bytes()
    assert size is None or (isinstance(size, int) and size >= 1 << 14)


@pytest.mark.parametrize(
    "text, count",
    [
        ("0", 1),
        ("0-1", 2),
        ("0,4", 2),
        ("0-3,8-11", 8),
        (" 2-2\n", 1),
        ("", None),
        ("a-b", None),
        ("3-1", None),
    ],
)
def test_count_cpu_list(text, count):
    assert count_cpu_list(text) == count


def test_a_cache_shared_by_several_cpus_is_split_between_them(tmp_path):
    # e.g. one core's 2 MiB L2 shared by its two hyperthreads: 1 MiB each
    _cache(tmp_path, 0, 2, "Unified", "2048K", shared="0,2")
    assert l2_cache_bytes(str(tmp_path)) == 1 << 20


def test_an_unreadable_sharing_list_keeps_the_whole_size(tmp_path):
    _cache(tmp_path, 0, 2, "Unified", "2048K", shared="?")
    assert l2_cache_bytes(str(tmp_path)) == 2 << 20
