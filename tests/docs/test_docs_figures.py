"""The user guide's figures: ``docs/figures/make_figures.py`` draws every one (here at a
tiny size into ``tmp_path``), the benchmark parser reads the committed report, and every
figure a page embeds is in the repository."""

from __future__ import annotations

import importlib.util
import re
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "figures" / "make_figures.py"
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def mf():
    spec = importlib.util.spec_from_file_location("make_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path.name} is not a PNG"
    return struct.unpack(">II", data[16:24])  # IHDR width, height


#: each figure at a size that draws in well under a second
TINY = {
    "softmax_error": {"ms": (16, 32), "dims": (4,), "n_points": 12, "n_seeds": 2},
    "dot_product": {"ms": (16, 32), "n_points": 12, "n_seeds": 2},
    "variance": {"n_draws": 20, "n_points": 3, "d": 4, "n_features": 4},
    "attention": {},
    "attention_memory": {},
    "ridge": {"ms": (16, 32), "n_train": 40, "n_test": 20, "n_seeds": 2},
}


def test_every_figure_function_writes_a_png(mf, tmp_path):
    assert set(TINY) == set(mf.FIGURES), "a figure of the script is not drawn by this test"
    for name, (func, filename) in mf.FIGURES.items():
        out = func(tmp_path / filename, **TINY[name])
        assert out == tmp_path / filename and out.stat().st_size > 0, name
        width, height = _png_size(out)
        # the guide's text column: 6.4 in at 110 dpi is 704 px (tight layout keeps it)
        assert 600 <= width <= 800, (name, width)
        assert 150 <= height <= 600, (name, height)


def test_the_benchmark_report_parses(mf):
    data = mf.parse_bench(mf.BENCH.read_text())
    # the numbers are the committed file's, copied here from its "Times (ms)" table
    assert data["times"][("forward", "SDPA")][16384] == 2861.2
    assert data["times"][("forward+backward", "kernelkit FAVOR# sderf causal")][65536] == 2591.0
    for base, _ in mf.ATTENTION_CALLS:
        for call in (base, base + " causal"):
            assert set(data["times"][("forward", call)]) == {1024, 2048, 4096, 16384, 65536}
    assert ("forward+backward", "SDPA") in data["times"]
    assert 65536 not in data["times"][("forward+backward", "SDPA")]  # skipped in that run
    assert "SDPA" in data["skipped"]
    assert [r[0] for r in data["memory"]] == [
        "kernelkit FAVOR+",
        "kernelkit FAVOR# sderf",
        "kernelkit FAVOR+ causal",
        "kernelkit FAVOR# sderf causal",
    ]
    assert data["memory"][0][1:] == (37.8, "SDPA", 32.3)


def test_parse_bench_rejects_a_file_without_times(mf):
    with pytest.raises(ValueError, match="Times"):
        mf.parse_bench("kernelkit bench attention: nothing\n")


def test_every_figure_in_the_guide_is_committed_and_every_figure_is_used(mf):
    used = set()
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for ref in _IMAGE.findall(page.read_text()):
            target = (page.parent / ref).resolve()
            assert target.is_file(), f"{page.relative_to(ROOT)} embeds missing {ref}"
            _png_size(target)
            # the size the task set: small enough for the repository and the site
            assert target.stat().st_size < 150_000, f"{ref} is over 150 KB"
            used.add(target)
    drawn = {(mf.OUT / filename).resolve() for _, filename in mf.FIGURES.values()}
    assert drawn <= used, f"figures no page embeds: {sorted(p.name for p in drawn - used)}"


def test_every_embedded_figure_names_the_command_that_redraws_it(mf):
    names = {filename: name for name, (_, filename) in mf.FIGURES.items()}
    for page in sorted((ROOT / "docs" / "guide").glob("*.md")):
        text = page.read_text()
        for ref in _IMAGE.findall(text):
            name = names[Path(ref).name]
            assert f"python docs/figures/make_figures.py {name}`" in text, (page.name, ref)
