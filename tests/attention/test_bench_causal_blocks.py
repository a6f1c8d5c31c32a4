"""The block-size benchmark script (``benchmarks/bench_causal_blocks.py``) runs, and the
block size it sets is the one the causal kernel uses (the script replaces an internal
function whose signature it must follow)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernelkit.attention import _linear  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_causal_blocks.py"


def _script():
    spec = importlib.util.spec_from_file_location("bench_causal_blocks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_row_setting_reaches_the_causal_kernel(monkeypatch, capsys):
    used = []
    apply = _linear._CausalExp.apply

    def spy(xq, xk, v, keep, feat, chunk, block, grad):
        used.append((xq.shape[1], chunk, block))
        return apply(xq, xk, v, keep, feat, chunk, block, grad)

    monkeypatch.setattr(_linear._CausalExp, "apply", spy)
    results = _script().main(["--device", "cpu", "--lengths", "256", "--rows", "64", "128"])
    assert [(L, name, rows) for L, name, rows, *_ in results] == [
        (256, "positive", 64),
        (256, "positive", 128),
        (256, "sderf", 64),
        (256, "sderf", 128),
    ]
    assert all(f > 0 and b > 0 and m is None for *_, f, b, m in results)
    # every timed call (forward and forward + backward) ran with the row setting
    assert {block for *_, block in used} == {64, 128}
    assert all(L == 256 and chunk == 64 for L, chunk, _ in used)
    out = capsys.readouterr().out
    default = _linear.block_rows_for(256, 64, 8, 256, 4, "cpu", 65)
    assert f"L=256: default block {default} rows" in out
