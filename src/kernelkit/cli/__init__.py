"""The ``kernelkit`` command line.

::

    kernelkit list                              # experiments and benchmarks
    kernelkit reproduce NAME [--quick] [--out DIR] [--seed N]
    kernelkit reproduce all --quick             # every experiment, summary at the end
    kernelkit reproduce --list
    kernelkit report [--out DIR]                # rebuild DIR/REPORT.md from DIR/NAME/
    kernelkit bench NAME [--quick]

Experiments write ``report.md``, PNG plots and ``results.json`` into ``results/NAME/``
(or ``--out``); they and the benchmarks are the separate package
``kernelkit-experiments`` (``pip install -e ./experiments``), found through its entry
point. Everything runs
offline. ``kernelkit report`` assembles ``REPORT.md`` from whatever experiment folders are
already there (e.g. full runs started one by one with
``kernelkit reproduce NAME --out DIR/NAME``), without running anything.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import traceback
from pathlib import Path

import click

from .. import __version__
from .. import experiments as _exp

__all__ = ["main"]

_EXIT_FAILED = 1
_EXIT_USAGE = 2
_EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C
#: largest ``--seed`` (NumPy's legacy seed range, 32 bits)
MAX_SEED = 2**32 - 1


def _fmt_time(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def _suite_or_exit():
    """The installed experiments package, or exit with how to install it."""
    try:
        return _exp.experiment_suite()
    except _exp.ExperimentsNotInstalled as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(_EXIT_FAILED) from None


def _echo_listing() -> None:
    try:
        suite = _exp.experiment_suite()
    except _exp.ExperimentsNotInstalled:
        experiments = benchmarks = None
    else:
        experiments, benchmarks = suite.EXPERIMENTS, getattr(suite, "BENCHMARKS", {})
    for title, reg in (("Experiments", experiments), ("Benchmarks", benchmarks)):
        click.echo(f"{title}:")
        if reg is None:
            click.echo(f"  (not installed: `{_exp.INSTALL_HINT}`)")
            continue
        if not reg:
            click.echo("  (none)")
        width = max((len(n) for n in reg), default=0)
        for name, entry in reg.items():
            missing = "" if _exp.is_available(entry) else "  [module missing]"
            click.echo(f"  {name:<{width}}  {entry.description}{missing}")
    click.echo("\nRun one with `kernelkit reproduce NAME [--quick]` or `kernelkit bench NAME`.")


def _use_agg_backend() -> None:
    # experiments only write PNGs; never try to open a display
    os.environ.setdefault("MPLBACKEND", "Agg")
    if "matplotlib" in sys.modules:
        import matplotlib

        matplotlib.use("Agg")


def _claims_text(suite, out_dir: Path) -> str:
    """``claims 3 yes, 1 no, 2 tie`` from the suite's count of the report's verdicts."""
    counts = getattr(suite, "claim_counts", lambda _: None)(out_dir)
    if not counts:
        return "no claims table"
    words = [f"{counts.get(k, 0)} {k}" for k in ("yes", "no", "tie")]
    words += [f"{counts[k]} {k}" for k in ("partly", "other", "variant") if counts.get(k)]
    return "claims " + ", ".join(words)


class _OutDir(click.Path):
    """``--out``: a directory path as a ``Path``; an empty string, which click would take
    as ``.`` (the working directory), is a usage error."""

    def __init__(self):
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("empty: give an output directory (e.g. results).", param, ctx)
        return super().convert(value, param, ctx)


def _out_dir_or_exit(path: Path) -> None:
    """Create the output directory ``path`` (and its parents) before anything runs, or
    exit with why it cannot be written to (not a traceback after the run)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or str(exc)
        click.echo(f"Error: cannot create the output directory {str(path)!r}: {why}.", err=True)
        raise SystemExit(_EXIT_USAGE) from None
    if not os.access(path, os.W_OK | os.X_OK):
        click.echo(f"Error: the output directory {str(path)!r} is not writable.", err=True)
        raise SystemExit(_EXIT_USAGE)


def _write_summary_or_exit(suite, base: Path, rows, mode: str | None = None) -> Path:
    """``suite.write_summary``, or exit 1 with why ``base/REPORT.md`` cannot be written."""
    try:
        return suite.write_summary(base, rows, mode)
    except OSError as exc:
        why = exc.strerror or str(exc)
        click.echo(f"Error: cannot write {str(base / 'REPORT.md')!r}: {why}.", err=True)
        raise SystemExit(_EXIT_FAILED) from None


def _lookup_or_exit(name: str, kind: str, also: tuple[str, ...] = ()) -> _exp.Entry:
    try:
        return _exp._lookup(name, kind, also)
    except _exp.UnknownName as exc:
        hint = "kernelkit list"
        click.echo(f"Error: {exc}\nSee `{hint}`.", err=True)
        raise SystemExit(_EXIT_USAGE) from None


def _exit_interrupted(where: str):
    """Ctrl-C: one line saying where, exit status 130 (no traceback)."""
    click.echo(f"\nInterrupted {where}".rstrip() + ".", err=True)
    raise SystemExit(_EXIT_INTERRUPTED) from None


def _run_one(entry: _exp.Entry, out_dir: Path, quick: bool, seed: int) -> tuple[str, float, str]:
    """Run one experiment; returns (status, seconds, message). Never raises."""
    t0 = time.perf_counter()
    try:
        module = _exp.load(entry)
        out_dir.mkdir(parents=True, exist_ok=True)
        module.run(out_dir, quick=quick, seed=seed)
    except _exp.ModuleNotAvailable as exc:
        return "missing", time.perf_counter() - t0, str(exc)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # report and go on (reproduce all continues past failures)
        traceback.print_exc()
        return "FAILED", time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
    return "ok", time.perf_counter() - t0, str(out_dir / "report.md")


class _Group(click.Group):
    """The command group; Ctrl-C anywhere in a command (its imports included, e.g. of the
    experiments package) exits with one line and status 130, as the commands do around
    their runs, instead of click's "Aborted!" and status 1. ``import kernelkit`` imports
    no subpackage, so only Python's start and the import of click and of this module
    (well under 0.1 s) come before this handler; a Ctrl-C there still gets Python's
    traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            sub = ctx.invoked_subcommand
            _exit_interrupted(f"during `kernelkit {sub}`" if sub else "")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kernelkit")
def main():
    """kernelkit: kernel methods at scale.

    Reproduce paper experiments offline (`kernelkit reproduce NAME`) and run
    benchmarks (`kernelkit bench NAME`). `kernelkit list` shows what is available.

    Exit status: 0 on success; 2 on a usage error (unknown name or option, an --out
    that cannot be created); 130 when interrupted (Ctrl-C); 1 on any other failure (a
    run that fails included).
    """


@main.command("list")
def list_cmd():
    """List experiments and benchmarks with one-line descriptions."""
    _echo_listing()


@main.command()
@click.argument("name", required=False)
@click.option("--quick", is_flag=True, help="Reduced size (seconds to a minute each).")
@click.option(
    "--out",
    "out",
    type=_OutDir(),
    default=None,
    help="Output directory (default results/NAME). With `all`: the parent "
    "directory, each experiment writes to OUT/NAME (default results/). Created if "
    "missing; a second run into it overwrites report.md, results.json and the plots "
    "(other files stay).",
)
@click.option(
    "--seed",
    # seeds of the runs are seed * 1000 + i; NumPy refuses negative seeds, and torch's
    # generators take at most 64 bits, which seed * 1000 * (feature draws) can exceed
    type=click.IntRange(min=0, max=MAX_SEED),
    default=0,
    show_default=True,
    help=f"Random seed (an integer from 0 to {MAX_SEED}).",
)
@click.option("--list", "list_", is_flag=True, help="List experiments and benchmarks.")
def reproduce(name, quick, out, seed, list_):
    """Run experiment NAME (or `all`) and write report.md, PNG plots and results.json.

    `all` runs every registered experiment in order, continues past failures, prints
    a summary with timings and exits non-zero if any experiment failed.
    """
    if list_:
        _echo_listing()
        return
    if not name:
        raise click.UsageError("Missing experiment NAME (or `all`); see `kernelkit list`.")
    suite = _suite_or_exit()
    _use_agg_backend()
    mode = "quick" if quick else "full"
    if name == "all":
        base = out if out is not None else Path("results")
        _out_dir_or_exit(base)
        rows = []
        for entry in suite.EXPERIMENTS.values():
            click.echo(f"==> {entry.name} ({mode})")
            try:
                status, secs, msg = _run_one(entry, base / entry.name, quick, seed)
            except KeyboardInterrupt:
                done = sum(r[1] == "ok" for r in rows)
                where = f"during {entry.name!r}"
                if done:
                    where += (
                        f" ({done} finished before it: `kernelkit report --out "
                        f"{shlex.quote(str(base))}` summarises them)"
                    )
                _exit_interrupted(where)
            if status != "ok":
                click.echo(f"    {status}: {msg}", err=True)
            claims = _claims_text(suite, base / entry.name) if status == "ok" else msg
            click.echo(f"<== {entry.name}: {status} in {_fmt_time(secs)}; {claims}")
            rows.append((entry.name, status, secs, msg))
        width = max((len(r[0]) for r in rows), default=4)
        click.echo(f"\nSummary ({mode} mode):")
        for n, status, secs, msg in rows:
            click.echo(f"  {n:<{width}}  {status:<7} {_fmt_time(secs):>12}  {msg}")
        total = sum(r[2] for r in rows)
        n_bad = sum(r[1] != "ok" for r in rows)
        summary = _write_summary_or_exit(suite, base, rows, mode)
        click.echo(f"  report: {summary}")
        click.echo(f"  total {_fmt_time(total)}; {len(rows) - n_bad}/{len(rows)} succeeded.")
        if n_bad:
            raise SystemExit(_EXIT_FAILED)
        return
    entry = _lookup_or_exit(name, "experiment", also=("all",))
    out_dir = out if out is not None else Path("results") / entry.name
    _out_dir_or_exit(out_dir)
    click.echo(f"==> {entry.name} ({mode}) -> {out_dir}")
    try:
        status, secs, msg = _run_one(entry, out_dir, quick, seed)
    except KeyboardInterrupt:
        _exit_interrupted(f"during {entry.name!r}; {str(out_dir)!r} may hold a partial run")
    if status != "ok":
        if status == "missing":
            click.echo(f"Error: {msg}", err=True)
        else:
            click.echo(f"Error: experiment {entry.name!r} failed: {msg}", err=True)
        raise SystemExit(_EXIT_FAILED)
    click.echo(f"done in {_fmt_time(secs)}; {_claims_text(suite, out_dir)}: {msg}")


@main.command()
@click.option(
    "--out",
    "out",
    type=_OutDir(),
    default=Path("results"),
    show_default=True,
    help="Results directory: experiments in OUT/NAME, the report in OUT/REPORT.md.",
)
def report(out):
    """Rebuild OUT/REPORT.md from the experiment folders already in OUT (runs nothing).

    Every registered experiment gets a row: its mode and run time from
    OUT/NAME/results.json, or "not run" when the folder has no report. Exits non-zero
    only when OUT holds no experiment results at all.
    """
    suite = _suite_or_exit()
    if not out.is_dir():
        click.echo(f"Error: --out {str(out)!r} is not a directory.", err=True)
        raise SystemExit(_EXIT_USAGE)
    rows = suite.collect_rows(out, list(suite.EXPERIMENTS))
    n_ok = sum(r[1] == "ok" for r in rows)
    for n, status, _, msg in rows:
        if status not in ("ok", "not run"):  # there, but damaged or another run's
            click.echo(f"  {n}: {status}: {msg}", err=True)
    if not n_ok:
        click.echo(
            f"Error: no experiment results (NAME/report.md + NAME/results.json) in "
            f"{str(out)!r}; run `kernelkit reproduce NAME --out "
            f"{shlex.quote(f'{out}/NAME')}` first.",
            err=True,
        )
        raise SystemExit(_EXIT_FAILED)
    path = _write_summary_or_exit(suite, out, rows)
    width = max(len(r[0]) for r in rows)
    swidth = max(7, *(len(r[1]) for r in rows))  # "unreadable", "mismatch"
    for n, status, secs, _ in rows:
        t = ("?" if secs is None else _fmt_time(secs)) if status == "ok" else ""
        click.echo(f"  {n:<{width}}  {status:<{swidth}} {t:>12}")
    click.echo(f"report: {path} ({n_ok}/{len(rows)} experiments)")


@main.command()
@click.argument("name", required=False)
@click.option("--quick", is_flag=True, help="Smaller problem sizes.")
@click.option("--list", "list_", is_flag=True, help="List experiments and benchmarks.")
def bench(name, quick, list_):
    """Run benchmark NAME (it prints its own table of timings and ratios)."""
    if list_:
        _echo_listing()
        return
    if not name:
        raise click.UsageError("Missing benchmark NAME; see `kernelkit list`.")
    _suite_or_exit()
    _use_agg_backend()
    entry = _lookup_or_exit(name, "benchmark")
    t0 = time.perf_counter()
    try:
        module = _exp.load(entry)
    except _exp.ModuleNotAvailable as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(_EXIT_FAILED) from None
    try:
        module.run(quick=quick)
    except KeyboardInterrupt:
        _exit_interrupted(f"during benchmark {entry.name!r}")
    except Exception as exc:  # the traceback, then the one-line error reproduce prints
        traceback.print_exc()
        click.echo(f"Error: benchmark {entry.name!r} failed: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(_EXIT_FAILED) from None
    click.echo(f"benchmark {entry.name!r} done in {_fmt_time(time.perf_counter() - t0)}.")


if __name__ == "__main__":  # pragma: no cover
    main()
