"""The ``kernelkit`` command line (click's CliRunner) and the hook to the separate
experiments package, which holds the experiments and the benchmarks (here a stand-in
suite; the real one is tested in experiments/tests)."""

from __future__ import annotations

import json
import sys
import types

import pytest
from click.testing import CliRunner

from kernelkit import experiments as E
from kernelkit.cli import main

DUMMY = "kernelkit_test_dummy_experiment"
BROKEN = "kernelkit_test_broken_experiment"
BENCH = "kernelkit_test_dummy_bench"


def _dummy_module():
    mod = types.ModuleType(DUMMY)
    mod.NAME = "dummy"
    mod.DESCRIPTION = "tiny test experiment"
    mod.calls = []

    def run(out_dir, quick=False, seed=0):
        mod.calls.append((out_dir, quick, seed))
        (out_dir / "report.md").write_text(f"# dummy\n\nseed {seed}\n")
        results = {"experiment": "dummy", "quick": quick, "seed": seed, "elapsed_s": 0.1}
        (out_dir / "results.json").write_text(json.dumps(results))
        return results

    mod.run = run
    return mod


def _broken_module():
    mod = types.ModuleType(BROKEN)
    mod.NAME, mod.DESCRIPTION = "broken", "always fails"

    def run(out_dir, quick=False, seed=0):
        raise RuntimeError("boom")

    mod.run = run
    return mod


@pytest.fixture
def registry(monkeypatch):
    """Registry with a working, a failing and a missing experiment, and one benchmark."""
    dummy, broken = _dummy_module(), _broken_module()
    bench = types.ModuleType(BENCH)
    bench.calls = []

    def bench_run(quick=False):
        bench.calls.append(quick)
        print("| method | time |\n| a | 1 |")
        return {"quick": quick}

    bench.run = bench_run
    for m in (dummy, broken, bench):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    exps = {
        "dummy": E.Entry("dummy", DUMMY, "tiny test experiment"),
        "broken": E.Entry("broken", BROKEN, "always fails"),
        "absent": E.Entry("absent", "kernelkit.experiments._no_such_module", "not written"),
    }
    benches = {
        "tiny": E.Entry("tiny", BENCH, "tiny bench", "benchmark"),
        "nobench": E.Entry("nobench", "kernelkit.experiments._no_such_bench", "nope", "benchmark"),
    }
    summaries = []

    def write_summary(results_dir, rows, mode=None):
        summaries.append((results_dir, rows, mode))
        path = results_dir / "REPORT.md"
        path.write_text("".join(f"{n} {s} {m}\n" for n, s, _, m in rows))
        return path

    def collect_rows(results_dir, names):
        return [
            (n, "ok", 1.0, "")
            if (results_dir / n / "report.md").is_file()
            else (n, "not run", 0.0, "")
            for n in names
        ]

    def claim_counts(exp_dir):  # what the suite reads from the report's claims table
        if not (exp_dir / "report.md").is_file():
            return None
        return {"yes": 1, "partly": 0, "no": 0, "tie": 2, "other": 1, "variant": 3}

    suite = types.SimpleNamespace(
        EXPERIMENTS=exps,
        BENCHMARKS=benches,
        write_summary=write_summary,
        collect_rows=collect_rows,
        claim_counts=claim_counts,
    )
    monkeypatch.setattr(E, "experiment_suite", lambda: suite)
    return types.SimpleNamespace(dummy=dummy, bench=bench, suite=suite, summaries=summaries)


def test_help():
    runner = CliRunner()
    res = runner.invoke(main, ["--help"])
    assert res.exit_code == 0
    for word in ("reproduce", "bench", "list"):
        assert word in res.output
    res = runner.invoke(main, ["reproduce", "--help"])
    assert res.exit_code == 0 and "--quick" in res.output and "--seed" in res.output
    assert runner.invoke(main, ["--version"]).exit_code == 0


def test_list(registry):
    runner = CliRunner()
    for args in (["list"], ["reproduce", "--list"]):
        res = runner.invoke(main, args)
        assert res.exit_code == 0, res.output
        assert "dummy" in res.output and "tiny test experiment" in res.output
        assert "tiny bench" in res.output
        assert "absent" in res.output and "module missing" in res.output


def test_unknown_name(registry):
    res = CliRunner().invoke(main, ["reproduce", "dumy"])
    assert res.exit_code != 0
    assert "Unknown experiment 'dumy'" in res.output
    assert "Did you mean 'dummy'" in res.output
    res = CliRunner().invoke(main, ["bench", "nothing"])
    assert res.exit_code != 0 and "Unknown benchmark" in res.output
    res = CliRunner().invoke(main, ["reproduce"])
    assert res.exit_code != 0 and "NAME" in res.output


def test_reproduce_writes_outputs(registry, tmp_path):
    out = tmp_path / "dummy-out"
    res = CliRunner().invoke(
        main, ["reproduce", "dummy", "--quick", "--seed", "7", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert registry.dummy.calls == [(out, True, 7)]
    assert (out / "report.md").read_text().startswith("# dummy")
    data = json.loads((out / "results.json").read_text())
    assert data["seed"] == 7 and data["quick"] is True


def test_reproduce_default_out_dir(registry, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["reproduce", "dummy"])
    assert res.exit_code == 0, res.output
    assert registry.dummy.calls[0][1] is False  # full mode by default
    assert (tmp_path / "results" / "dummy" / "results.json").is_file()


def test_reproduce_failure_and_missing(registry, tmp_path):
    res = CliRunner().invoke(main, ["reproduce", "broken", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "boom" in res.output
    res = CliRunner().invoke(main, ["reproduce", "absent", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "not available" in res.output


def test_reproduce_all_continues_past_failures(registry, tmp_path):
    res = CliRunner().invoke(main, ["reproduce", "all", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 1
    assert (tmp_path / "dummy" / "report.md").is_file()
    summary = res.output[res.output.index("Summary") :]
    assert "dummy" in summary and "ok" in summary
    assert "broken" in summary and "FAILED" in summary and "boom" in summary
    assert "absent" in summary and "missing" in summary
    assert "1/3 succeeded" in summary
    # a line per finished experiment as it finishes: time and claim counts (ties apart)
    lines = [ln for ln in res.output.splitlines() if ln.startswith("<== ")]
    assert len(lines) == 3
    assert lines[0].startswith("<== dummy: ok in ")
    assert lines[0].endswith("s; claims 1 yes, 0 no, 2 tie, 1 other, 3 variant")
    assert lines[1].startswith("<== broken: FAILED in ") and "boom" in lines[1]
    assert lines[2].startswith("<== absent: missing in ")
    # the suite writes REPORT.md from every row, in run order, failures included
    [(base, rows, mode)] = registry.summaries
    assert base == tmp_path and mode == "quick"
    assert [(n, st) for n, st, _, _ in rows] == [
        ("dummy", "ok"),
        ("broken", "FAILED"),
        ("absent", "missing"),
    ]
    assert "boom" in rows[1][3]
    assert f"report: {tmp_path / 'REPORT.md'}" in res.output


def test_reproduce_all_success(registry, tmp_path, monkeypatch):
    monkeypatch.setattr(
        registry.suite, "EXPERIMENTS", {"dummy": registry.suite.EXPERIMENTS["dummy"]}
    )
    res = CliRunner().invoke(main, ["reproduce", "all", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "1/1 succeeded" in res.output


def test_bench(registry):
    res = CliRunner().invoke(main, ["bench", "tiny", "--quick"])
    assert res.exit_code == 0, res.output
    assert registry.bench.calls == [True] and "| method | time |" in res.output
    res = CliRunner().invoke(main, ["bench", "nobench"])
    assert res.exit_code == 1 and "not available" in res.output


def test_registry_api(registry):
    assert E.get_experiment("dummy") is registry.dummy
    with pytest.raises(E.UnknownName, match="Available"):
        E.get_experiment("nope")
    with pytest.raises(E.ModuleNotAvailable):
        E.get_experiment("absent")
    assert E.is_available(registry.suite.EXPERIMENTS["dummy"])
    assert not E.is_available(registry.suite.EXPERIMENTS["absent"])


def test_import_error_inside_module_propagates(monkeypatch):
    # a module that exists but fails to import is a bug, not "missing"
    entry = E.Entry("x", "kernelkit.metrics", "x")
    assert E.load(entry).__name__ == "kernelkit.metrics"
    err = ModuleNotFoundError("No module named 'somedep'", name="somedep")

    def fake_import(name):
        raise err

    monkeypatch.setattr(E.importlib, "import_module", fake_import)
    with pytest.raises(ModuleNotFoundError) as info:
        E.load(entry)
    assert not isinstance(info.value, E.ModuleNotAvailable)


def test_report_uses_the_suite(registry, tmp_path):
    (tmp_path / "dummy").mkdir()
    (tmp_path / "dummy" / "report.md").write_text("# dummy\n")
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "1/3 experiments" in res.output and registry.dummy.calls == []
    assert (tmp_path / "REPORT.md").read_text().splitlines()[0] == "dummy ok "
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(main, ["report", "--out", str(empty)])
    assert res.exit_code == 1 and "no experiment results" in res.output
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "not a directory" in res.output


# ------------------------------------------------ the experiments package is separate
@pytest.fixture
def not_installed(monkeypatch):
    """No entry point registered and ``import kernelkit_experiments`` fails."""
    real_import = E.importlib.import_module

    def fake_import(name, *args):
        if name == E.SUITE_MODULE or name.startswith(E.SUITE_MODULE + "."):
            raise ModuleNotFoundError(f"No module named {E.SUITE_MODULE!r}", name=E.SUITE_MODULE)
        return real_import(name, *args)

    monkeypatch.setattr(E.importlib.metadata, "entry_points", lambda group: [])
    monkeypatch.setattr(E.importlib, "import_module", fake_import)


def test_without_experiments_package_cli_says_how_to_install(not_installed, tmp_path):
    with pytest.raises(E.ExperimentsNotInstalled, match=r"pip install -e \./experiments"):
        E.experiment_suite()
    runner = CliRunner()
    for args in (["reproduce", "favor-variance", "--quick"], ["reproduce", "all", "--quick"]):
        res = runner.invoke(main, [*args, "--out", str(tmp_path / "r")])
        assert res.exit_code == 1 and "pip install -e ./experiments" in res.output
        assert not (tmp_path / "r").exists()
    res = runner.invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "pip install -e ./experiments" in res.output
    res = runner.invoke(main, ["bench", "features", "--quick"])  # part of the same package
    assert res.exit_code == 1 and "pip install -e ./experiments" in res.output
    res = runner.invoke(main, ["list"])  # the library's command still works
    assert res.exit_code == 0
    assert res.output.count("not installed: `pip install -e ./experiments`") == 2


def test_suite_found_through_entry_point_first(monkeypatch):
    suite = types.ModuleType("some_other_suite")

    class EP:
        value = "some_other_suite"

        def load(self):
            return suite

    seen = []

    def entry_points(group):
        seen.append(group)
        return [EP()]

    monkeypatch.setattr(E.importlib.metadata, "entry_points", entry_points)
    assert E.experiment_suite() is suite
    assert seen == ["kernelkit.experiments"]


def test_suite_import_error_inside_propagates(monkeypatch):
    # an installed package missing one of its own dependencies is not "not installed"
    err = ModuleNotFoundError("No module named 'cvxpy'", name="cvxpy")

    def fake_import(name, *args):
        raise err

    monkeypatch.setattr(E.importlib.metadata, "entry_points", lambda group: [])
    monkeypatch.setattr(E.importlib, "import_module", fake_import)
    with pytest.raises(ModuleNotFoundError) as info:
        E.experiment_suite()
    assert not isinstance(info.value, E.ExperimentsNotInstalled)
