"""The command line as an independent tester meets it: Ctrl-C (click's "Aborted!" with
exit status 1, indistinguishable from a failed run, and no word on what was left), a
mistyped ``all`` (no suggestion), ``python -m kernelkit.cli`` (its usage line named
the module, not ``kernelkit``) and ``kernelkit report`` on a folder that holds another
experiment's run (counted as that folder's experiment). Each test failed before its
fix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

import kernelkit
from kernelkit import experiments as E
from kernelkit.cli import main

DUMMY = "kernelkit_test_tryout_experiment"
_SRC = str(Path(kernelkit.__file__).resolve().parents[1])  # this checkout's src/


@pytest.fixture
def suite(monkeypatch):
    """A stand-in suite: ``ok`` writes a report, ``interrupted`` is stopped by Ctrl-C."""
    ok = types.ModuleType(DUMMY + "_ok")

    def run_ok(out_dir, quick=False, seed=0):
        (out_dir / "report.md").write_text("# ok\n")
        (out_dir / "results.json").write_text(json.dumps({"quick": quick, "elapsed_s": 0.1}))

    ok.run = run_ok
    stop = types.ModuleType(DUMMY + "_stop")

    def run_stop(out_dir=None, quick=False, seed=0):
        raise KeyboardInterrupt

    stop.run = run_stop
    for m in (ok, stop):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    s = types.SimpleNamespace(
        EXPERIMENTS={
            "ok": E.Entry("ok", ok.__name__, "works"),
            "interrupted": E.Entry("interrupted", stop.__name__, "Ctrl-C"),
        },
        BENCHMARKS={"interrupted": E.Entry("interrupted", stop.__name__, "Ctrl-C", "benchmark")},
        write_summary=lambda base, rows, mode=None: base / "REPORT.md",
        collect_rows=lambda base, names: [],
    )
    monkeypatch.setattr(E, "experiment_suite", lambda: s)
    return s


def test_ctrl_c_in_one_experiment_exits_130_with_one_line(suite, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["reproduce", "interrupted", "--out", str(out)])
    assert res.exit_code == 130, res.output
    assert f"Interrupted during 'interrupted'; {str(out)!r} may hold a partial run." in res.output
    assert "Aborted" not in res.output and "Traceback" not in res.output


def test_ctrl_c_in_reproduce_all_says_what_finished(suite, tmp_path):
    res = CliRunner().invoke(main, ["reproduce", "all", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 130, res.output
    assert (
        f"Interrupted during 'interrupted' (1 finished before it: `kernelkit report --out "
        f"{tmp_path}` summarises them)." in res.output
    )
    assert (tmp_path / "ok" / "report.md").is_file()  # the finished one is kept


def test_ctrl_c_in_the_first_experiment_of_all_suggests_no_report(suite, tmp_path):
    suite.EXPERIMENTS = dict(reversed(list(suite.EXPERIMENTS.items())))  # interrupted first
    res = CliRunner().invoke(main, ["reproduce", "all", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 130, res.output
    assert "Interrupted during 'interrupted'." in res.output
    assert "kernelkit report" not in res.output


def test_ctrl_c_in_a_benchmark_exits_130(suite):
    res = CliRunner().invoke(main, ["bench", "interrupted"])
    assert res.exit_code == 130, res.output
    assert "Interrupted during benchmark 'interrupted'." in res.output
    assert "Traceback" not in res.output


def test_sigint_to_the_process_exits_130_without_traceback(tmp_path):
    # a real Ctrl-C: SIGINT to a `kernelkit reproduce` process while its experiment runs
    script = tmp_path / "cli.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import signal, sys, time, types
            from kernelkit import experiments as E

            # Ctrl-C as a terminal delivers it: a parent that runs the suite in the
            # background (or CI) may pass SIGINT on ignored, and Python then installs
            # no KeyboardInterrupt handler of its own
            signal.signal(signal.SIGINT, signal.default_int_handler)
            from kernelkit.cli import main

            mod = types.ModuleType("slow_exp")

            def run(out_dir, quick=False, seed=0):
                print("started", flush=True)
                time.sleep(60)

            mod.run = run
            sys.modules["slow_exp"] = mod
            suite = types.SimpleNamespace(EXPERIMENTS={{"slow": E.Entry("slow", "slow_exp", "")}})
            E.experiment_suite = lambda: suite
            main(["reproduce", "slow", "--out", {str(tmp_path / "out")!r}], prog_name="kernelkit")
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=_SRC)
    p = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        line = ""
        while "started" not in line and time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line and p.poll() is not None:
                break
        assert "started" in line, p.stderr.read()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "Interrupted during 'slow'" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("typo", ["ALL", "All", "al"])
def test_mistyped_all_is_suggested(suite, typo):
    res = CliRunner().invoke(main, ["reproduce", typo, "--quick"])
    assert res.exit_code == 2
    assert "Did you mean 'all'?" in res.output


def test_python_m_kernelkit_cli_names_the_program_kernelkit():
    env = dict(os.environ, PYTHONPATH=_SRC)
    res = subprocess.run(
        [sys.executable, "-m", "kernelkit.cli", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: kernelkit [OPTIONS] COMMAND [ARGS]...")


def test_report_flags_a_folder_holding_another_experiments_run(monkeypatch, tmp_path):
    # `kernelkit reproduce b --out DIR/a` by mistake: DIR/a is b's run, not a's
    summary = pytest.importorskip("kernelkit_experiments._summary")
    for folder, exp in (("a", "b"), ("b", "b")):
        d = tmp_path / folder
        d.mkdir()
        (d / "report.md").write_text(f"# {exp}\n")
        (d / "results.json").write_text(
            json.dumps({"experiment": exp, "quick": True, "elapsed_s": 2.0})
        )
    rows = summary.collect_rows(tmp_path, ["a", "b"])
    assert [r[:2] for r in rows] == [("a", "mismatch"), ("b", "ok")]
    assert "a/results.json holds a run of 'b', not 'a'" in rows[0][3]
    s = types.SimpleNamespace(
        EXPERIMENTS={n: E.Entry(n, "nowhere", "") for n in ("a", "b")},
        collect_rows=summary.collect_rows,
        write_summary=lambda base, rows, mode=None: base / "REPORT.md",
    )
    monkeypatch.setattr(E, "experiment_suite", lambda: s)
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "a: mismatch: a/results.json holds a run of 'b'" in res.output
    assert "(1/2 experiments)" in res.output
