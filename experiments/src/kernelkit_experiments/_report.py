"""Shared writer for experiment outputs: ``report.md``, PNG plots and ``results.json``."""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path

import numpy as np

__all__ = ["Report", "markdown_table"]


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


def markdown_table(header: list[str], rows: list[list], floatfmt: str = ".4g") -> str:
    """A GitHub-flavoured markdown table; floats formatted with ``floatfmt``.

    A ``|`` inside a cell (a norm such as ``|x|``) is escaped as ``\\|`` so that it does
    not split the cell.
    """

    def fmt(v):
        if isinstance(v, float | np.floating):
            return format(float(v), floatfmt)
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(fmt(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


class Report:
    """Collects markdown sections, figures and results of one experiment run.

    Usage::

        rep = Report(out_dir, "favor-variance", quick=True)
        rep.add("## Setup", "text ...")
        rep.figure(fig, "variance.png", "caption")    # saves PNG, links it
        rep.results["table"] = {...}
        rep.write()                                    # report.md + results.json

    The run time in the report counts from construction: create the report first.
    Construction removes the ``report.md`` and ``results.json`` of an earlier run in
    ``out_dir``: a run that fails before :meth:`write` leaves no complete-looking mix of
    its own figures and the earlier results (``kernelkit report`` lists it as not run).
    """

    def __init__(self, out_dir, name: str, quick: bool, title: str | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("report.md", "results.json"):
            (self.out_dir / stale).unlink(missing_ok=True)
        self.name = name
        self.quick = quick
        self.title = title or name
        self.sections: list[str] = []
        self.results: dict = {"experiment": name, "quick": quick}
        self._t0 = time.perf_counter()

    def add(self, *blocks: str) -> None:
        self.sections.extend(blocks)

    def figure(self, fig, filename: str, caption: str = "") -> Path:
        path = self.out_dir / filename
        fig.savefig(path, dpi=110, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(fig)
        self.sections.append(
            f"![{caption or filename}]({filename})\n\n*{caption}*"
            if caption
            else f"![{filename}]({filename})"
        )
        return path

    def write(self) -> Path:
        elapsed = time.perf_counter() - self._t0
        self.results["elapsed_s"] = round(elapsed, 2)
        self.results["platform"] = platform.platform()
        mode = "quick" if self.quick else "full"
        head = f"# {self.title}\n\nMode: **{mode}**; run time {elapsed:.1f} s.\n"
        (self.out_dir / "report.md").write_text(head + "\n\n".join(["", *self.sections]) + "\n")
        (self.out_dir / "results.json").write_text(json.dumps(_jsonable(self.results), indent=2))
        return self.out_dir / "report.md"
