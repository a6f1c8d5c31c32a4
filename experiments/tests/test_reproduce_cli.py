"""``kernelkit reproduce`` / ``report`` / ``list`` with the experiments package: its
registries, its reports (``Report``) and the summary ``REPORT.md`` (``_summary``). The
command line itself (exit codes, messages, lookups) is tested with a stand-in suite in
tests/cli/test_cli.py."""

from __future__ import annotations

import json
import sys
import types

import pytest
from click.testing import CliRunner

import kernelkit_experiments as X
from kernelkit import experiments as E
from kernelkit.cli import main

DUMMY = "kernelkit_test_dummy_experiment"
BROKEN = "kernelkit_test_broken_experiment"


def _dummy_module():
    mod = types.ModuleType(DUMMY)
    mod.NAME = "dummy"
    mod.DESCRIPTION = "tiny test experiment"
    mod.calls = []

    def run(out_dir, quick=False, seed=0):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from kernelkit_experiments._report import Report

        mod.calls.append((out_dir, quick, seed))
        rep = Report(out_dir, "dummy", quick=quick)
        rep.add("## Dummy", f"seed {seed}")
        rep.add(
            "## Paper claims vs our data",
            "| claim | paper | ours | holds on our data? |\n|---|---|---|---|\n"
            "| dummy beats nothing | 1.0 | 0.9 | yes |",
        )
        fig, ax = plt.subplots()
        ax.plot([0, 1], [seed, seed + 1])
        rep.figure(fig, "line.png", "a line")
        rep.results["seed"] = seed
        rep.write()
        return rep.results

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
    """The real suite's summary functions over a working, a failing and a missing
    experiment."""
    dummy, broken = _dummy_module(), _broken_module()
    for m in (dummy, broken):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    exps = {
        "dummy": E.Entry("dummy", DUMMY, "tiny test experiment"),
        "broken": E.Entry("broken", BROKEN, "always fails"),
        "absent": E.Entry("absent", "kernelkit.experiments._no_such_module", "not written"),
    }
    suite = types.SimpleNamespace(
        EXPERIMENTS=exps,
        BENCHMARKS={},
        write_summary=X.write_summary,
        collect_rows=X.collect_rows,
        claim_counts=X.claim_counts,
    )
    monkeypatch.setattr(E, "experiment_suite", lambda: suite)
    return types.SimpleNamespace(dummy=dummy, suite=suite)


def test_real_registry_lists_paper_experiments():
    # the production registry: names, modules under kernelkit_experiments, descriptions
    assert E.experiment_suite() is X
    assert list(X.EXPERIMENTS)[:2] == ["favor-variance", "favor-classification"]
    assert X.EXPERIMENTS["favor-variance"].module == "kernelkit_experiments.favor_variance"
    assert all(E.is_available(e) for e in X.EXPERIMENTS.values())
    res = CliRunner().invoke(main, ["list"])
    assert res.exit_code == 0
    assert "favor-variance" in res.output and "favor-classification" in res.output
    assert "features" in res.output and "Benchmarks:" in res.output


def test_real_benchmark_registry():
    # the benchmarks are part of this package: modules under kernelkit_experiments.bench
    assert X.BENCHMARKS["features"].module == "kernelkit_experiments.bench.bench_features"
    assert all(e.kind == "benchmark" for e in X.BENCHMARKS.values())
    assert all(E.is_available(e) for e in X.BENCHMARKS.values())
    assert E.get_benchmark("features").__name__ == "kernelkit_experiments.bench.bench_features"
    with pytest.raises(E.UnknownName, match="Did you mean 'features'"):
        E.get_benchmark("feature")


def test_reproduce_writes_the_reports_outputs(registry, tmp_path):
    # the CLI itself is tested in tests/cli; here: what Report writes through it
    out = tmp_path / "dummy-out"
    res = CliRunner().invoke(
        main, ["reproduce", "dummy", "--quick", "--seed", "7", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert (out / "report.md").read_text().startswith("# dummy")
    assert (out / "line.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((out / "results.json").read_text())
    assert data["seed"] == 7 and data["quick"] is True
    assert "claims 1 yes, 0 no, 0 tie" in res.output  # counted from the report's table


def test_reproduce_all_writes_the_summary_report(registry, tmp_path):
    # the CLI's summary lines are tested in tests/cli; here: the suite's REPORT.md
    res = CliRunner().invoke(main, ["reproduce", "all", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 1
    assert "<== dummy: ok in " in res.output and "; claims 1 yes, 0 no, 0 tie" in res.output
    report = (tmp_path / "REPORT.md").read_text()
    assert "| dummy beats nothing | 1.0 | 0.9 | yes |" in report  # claims copied
    assert "](dummy/line.png)" in report  # plot inline, relative to results/
    assert "broken" in report and "FAILED" in report and "boom" in report
    assert "absent" in report and "missing" in report


def test_claim_sections_and_paper_grouping():
    from kernelkit_experiments._summary import claim_sections, paper_of

    md = (
        "# t\n\n## Setup\nx\n\n## Paper claims vs ours\n| a |\n### detail\nmore\n"
        "## Timing\nno\n### Holds on our data?\nyes\n"
    )
    secs = claim_sections(md)
    assert len(secs) == 2
    assert "| a |" in secs[0] and "more" in secs[0] and "Timing" not in secs[0]
    assert secs[1].endswith("yes")
    assert paper_of("hrf-uci").startswith("Hybrid") and paper_of("jdl-small").startswith("Joint")
    assert paper_of("favor-variance").startswith("FAVOR#") and paper_of("xyz") == (
        "Other experiments"
    )


def _fake_run(exp_dir, quick, seconds, extra=""):
    """A results folder as an experiment leaves it (report.md, a PNG, results.json)."""
    exp_dir.mkdir(parents=True)
    mode = "quick" if quick else "full"
    (exp_dir / "report.md").write_text(
        f"# fake\n\nMode: **{mode}**; run time {seconds} s.\n\n## Setup\n\nx\n\n"
        f"**Scale.** This run: 3 seeds. The paper: 10 seeds.\n\n{extra}"
        "## Paper claims vs our data\n\n| claim | paper | ours | holds on our data? |\n"
        "|---|---|---|---|\n| fake claim | 2.0 | 1.5 | **no** |\n\n## Timing\n\n"
        "![a plot](plot.png)\n"
    )
    (exp_dir / "plot.png").write_bytes(b"\x89PNG fake")
    (exp_dir / "results.json").write_text(
        json.dumps(
            {
                "experiment": exp_dir.name,
                "quick": quick,
                "elapsed_s": seconds,
                "platform": "Linux-test",
            }
        )
    )


def test_report_rebuilds_from_folders(registry, tmp_path):
    # dummy ran in full mode (125 s); broken and absent never ran: no folders
    _fake_run(tmp_path / "dummy", quick=False, seconds=125.0)
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "1/3 experiments" in res.output
    assert registry.dummy.calls == []  # nothing was run
    report = (tmp_path / "REPORT.md").read_text()
    assert "Mode: **full**" in report and "Linux-test" in report
    assert (
        "| [dummy](dummy/report.md) | Other experiments | ok | full | 2.1 min | 0 / 0 / 1 / 0 / 0 |"
        in report
    )
    assert "| broken | Other experiments | not run | – | – | – |" in report
    assert "In all: **0 yes, 0 partly, 1 no, 0 tie (within noise)**" in report
    assert "| fake claim | 2.0 | 1.5 | **no** |" in report  # claims copied as they are
    assert "**Scale.** This run: 3 seeds. The paper: 10 seeds." in report
    assert "![a plot](dummy/plot.png)" in report  # plots relative to the report
    assert "Timing" not in report  # only the claims sections are copied


def test_report_mixed_modes_and_errors(registry, tmp_path):
    _fake_run(tmp_path / "dummy", quick=False, seconds=30.0)
    _fake_run(tmp_path / "broken", quick=True, seconds=4.0)
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    report = (tmp_path / "REPORT.md").read_text()
    assert "Mode: **mixed**" in report
    assert "| ok | quick | 4 s | 0 / 0 / 1 / 0 / 0 |" in report and "| ok | full | 30 s |" in report
    # a folder without results.json does not count as a run
    (tmp_path / "broken" / "results.json").unlink()
    CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert "Mode: **full**" in (tmp_path / "REPORT.md").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(main, ["report", "--out", str(empty)])
    assert res.exit_code == 1 and "no experiment results" in res.output
    assert not (empty / "REPORT.md").exists()
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "not a directory" in res.output


def test_reproduce_all_report_has_modes(registry, tmp_path):
    res = CliRunner().invoke(main, ["reproduce", "all", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 1
    report = (tmp_path / "REPORT.md").read_text()
    assert "| [dummy](dummy/report.md) | Other experiments | ok | quick |" in report
    # `kernelkit report` over the same folder gives the same rows (times from results.json)
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (
        "| [dummy](dummy/report.md) | Other experiments | ok | quick |"
        in (tmp_path / "REPORT.md").read_text()
    )


def test_claim_verdicts_counts_the_holds_column():
    from kernelkit_experiments._summary import claim_verdicts

    sec = (
        "#### Paper claims\n\n| claim | paper | ours | holds on our data? |\n"
        "|---|---|---|---|\n| a | 1 | 1 | yes |\n| b | 1 | 2 | **no** |\n"
        "| c | 1 | 1.5 | partly (2/3) |\n| d | 1 | – | not reproducible offline |\n"
        "| e | 1 | 1 | yes (n.s.) |\n\nA table without a verdict column:\n\n"
        "| x | y |\n|---|---|\n| no | no |\n"
    )
    assert claim_verdicts([sec]) == {
        "yes": 2,
        "partly": 1,
        "no": 1,
        "tie": 0,
        "other": 1,
        "variant": 0,
    }
    # the verdict column need not be the last; "mostly" counts as partly
    sec2 = (
        "| claim | holds on our data? | detail |\n|---|---|---|\n| a | mostly (16/18) | x |\n"
        "| b | no | yes |\n| c | yes (18/18) | |\n"
    )
    assert claim_verdicts([sec2]) == {
        "yes": 1,
        "partly": 1,
        "no": 1,
        "tie": 0,
        "other": 0,
        "variant": 0,
    }
    # unescaped pipes in an earlier cell (a norm |x|) do not shift the verdict column
    sec3 = (
        "| claim | setting | holds on our data? |\n|---|---|---|\n"
        "| a | s1 (|X0| x 1) | no |\n| b | max |e| / SM | yes |\n"
    )
    assert claim_verdicts([sec3]) == {
        "yes": 1,
        "partly": 0,
        "no": 1,
        "tie": 0,
        "other": 0,
        "variant": 0,
    }
    assert claim_verdicts([]) == {
        "yes": 0,
        "partly": 0,
        "no": 0,
        "tie": 0,
        "other": 0,
        "variant": 0,
    }
    # ties (within noise) are counted apart, not as "other"
    sec4 = "| claim | holds on our data? |\n|---|---|\n| a | tie (within noise) |\n| b | no |\n"
    assert claim_verdicts([sec4]) == {
        "yes": 0,
        "partly": 0,
        "no": 1,
        "tie": 1,
        "other": 0,
        "variant": 0,
    }


def test_markdown_table_escapes_pipes_in_cells():
    from kernelkit_experiments._report import markdown_table
    from kernelkit_experiments._summary import claim_verdicts

    md = markdown_table(["claim", "holds on our data?"], [["max |e| / SM", "yes"], ["b", 0.5]])
    assert md.splitlines()[2] == "| max \\|e\\| / SM | yes |"
    assert md.splitlines()[3] == "| b | 0.5 |"
    assert claim_verdicts([md]) == {
        "yes": 1,
        "partly": 0,
        "no": 0,
        "tie": 0,
        "other": 1,
        "variant": 0,
    }


def test_entry_point_finds_the_package():
    import importlib.metadata

    eps = importlib.metadata.entry_points(group=E.ENTRY_POINT_GROUP)
    if not any(ep.value == "kernelkit_experiments" for ep in eps):
        pytest.skip("kernelkit-experiments is importable but not pip-installed")
    assert E.experiment_suite() is X


@pytest.mark.parametrize("seconds", ["fast", -30.0, None])
def test_report_shows_an_unreadable_run_time_as_unknown(registry, tmp_path, seconds):
    # a missing or non-numeric elapsed_s was shown as "0.0 s", a negative one added up
    _fake_run(tmp_path / "dummy", quick=False, seconds=seconds)
    res = CliRunner().invoke(main, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.strip().startswith("dummy"))
    assert line.split()[1:] == ["ok", "?"]
    report = (tmp_path / "REPORT.md").read_text()
    assert "| [dummy](dummy/report.md) | Other experiments | ok | full | ? |" in report
    assert "add up to 0 s" in report
