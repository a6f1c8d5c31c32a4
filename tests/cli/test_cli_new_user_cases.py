"""The command line as a new user meets it: an --out that cannot be created, a negative
--seed, a benchmark that raises, damaged results folders (a report.md that is not UTF-8,
a NaN run time, a results.json that is not JSON) and a REPORT.md that cannot be written
give a clear message and exit code, not a traceback. Each test of a fix failed before
it; the relative --out with spaces is a case that already worked."""

from __future__ import annotations

import json
import re
import sys
import types

import pytest
from click.testing import CliRunner

from kernelkit import experiments as E
from kernelkit.cli import main

DUMMY = "kernelkit_test_new_user_experiment"


@pytest.fixture
def dummy(monkeypatch):
    """A stand-in suite with one experiment that records its calls."""
    mod = types.ModuleType(DUMMY)
    mod.calls = []

    def run(out_dir, quick=False, seed=0):
        mod.calls.append(out_dir)
        (out_dir / "report.md").write_text("# dummy\n")
        (out_dir / "results.json").write_text(json.dumps({"quick": quick, "elapsed_s": 0.1}))
        return {}

    mod.run = run
    monkeypatch.setitem(sys.modules, DUMMY, mod)
    suite = types.SimpleNamespace(
        EXPERIMENTS={"dummy": E.Entry("dummy", DUMMY, "tiny")},
        BENCHMARKS={},
        write_summary=lambda base, rows, mode=None: base / "REPORT.md",
        collect_rows=lambda base, names: [],
    )
    monkeypatch.setattr(E, "experiment_suite", lambda: suite)
    return mod


@pytest.mark.parametrize("name", ["dummy", "all"])
def test_out_that_cannot_be_created_is_a_usage_error_before_the_run(dummy, tmp_path, name):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "nested" / "out"  # a regular file in the path: mkdir fails
    res = CliRunner().invoke(main, ["reproduce", name, "--quick", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert f"cannot create the output directory {str(out)!r}" in res.output
    assert "Traceback" not in res.output
    assert dummy.calls == []  # nothing ran


def test_out_nested_relative_with_spaces_is_created_where_reported(dummy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["reproduce", "dummy", "--out", "new dir/with space/x"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "new dir" / "with space" / "x" / "report.md").is_file()
    assert "new dir/with space/x/report.md" in res.output


def _results_folder(tmp_path, report: bytes, results: str):
    exp = tmp_path / "favor-variance"
    exp.mkdir()
    (exp / "report.md").write_bytes(report)
    (exp / "results.json").write_text(results)
    return exp


_REPORT = b"# favor-variance\n\n## Paper's claims vs ours\n\n| claim | holds on our data? |\n"
_REPORT += b"|---|---|\n| a | yes |\n"


def test_report_on_a_report_that_is_not_utf8(tmp_path):
    _results_folder(tmp_path, _REPORT + b"\xff\xfe stray bytes\n", '{"quick": true}')
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and res.exception is None
    text = (tmp_path / "REPORT.md").read_text()
    assert "**1 yes, 0 partly, 0 no, 0 tie" in text  # the claims table still counts


def test_report_with_a_non_finite_run_time(tmp_path):
    # json.loads accepts NaN and Infinity: a hand-edited or foreign results.json
    _results_folder(tmp_path, _REPORT, '{"quick": false, "elapsed_s": NaN}')
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert res.exception is None
    assert re.search(r"^  favor-variance +ok ", res.output, re.MULTILINE)


def test_report_names_a_corrupted_results_json(tmp_path):
    _results_folder(tmp_path, _REPORT, '{"quick": tru')  # cut short
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 1
    assert "favor-variance/results.json is unreadable (not a JSON object)" in res.output
    assert "Traceback" not in res.output


def test_negative_seed_is_a_usage_error_before_the_run(dummy, tmp_path):
    # it used to start the run and fail in NumPy with a traceback
    res = CliRunner().invoke(main, ["reproduce", "dummy", "--seed", "-1", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "Invalid value for '--seed'" in res.output and "0<=x<=" in res.output
    assert dummy.calls == []


def test_a_failing_benchmark_ends_with_an_error_line_and_exit_1(dummy, monkeypatch):
    bench = types.ModuleType("kernelkit_test_failing_bench")

    def run(quick=False):
        raise RuntimeError("out of memory")

    bench.run = run
    monkeypatch.setitem(sys.modules, bench.__name__, bench)
    suite = E.experiment_suite()
    suite.BENCHMARKS["bad"] = E.Entry("bad", bench.__name__, "fails", "benchmark")
    res = CliRunner().invoke(main, ["bench", "bad", "--quick"])
    assert res.exit_code == 1
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert "Error: benchmark 'bad' failed: RuntimeError: out of memory" in res.output


def test_report_hint_quotes_a_folder_with_spaces(tmp_path):
    empty = tmp_path / "my results"
    empty.mkdir()
    res = CliRunner().invoke(main, ["report", "--out", str(empty)])
    assert res.exit_code == 1
    # the suggested command can be pasted as it is
    assert f"run `kernelkit reproduce NAME --out '{empty}/NAME'` first" in res.output


def test_report_md_that_cannot_be_written_is_an_error_line(tmp_path):
    _results_folder(tmp_path, _REPORT, '{"quick": true, "elapsed_s": 1.0}')
    (tmp_path / "REPORT.md").mkdir()  # as a read-only or odd folder would refuse it
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 1
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert f"Error: cannot write {str(tmp_path / 'REPORT.md')!r}: Is a directory." in res.output
