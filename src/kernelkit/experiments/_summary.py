"""``results/REPORT.md``: one page over every experiment of ``kernelkit reproduce all``.

For each paper, each of its experiments contributes its status and run time, its "paper
claims vs our data" section(s) copied from its own ``report.md`` (the tables that set
the paper's number, ours and "holds on our data?" side by side), and its plots inline
(paths relative to ``results/``). Experiments that did not run are listed with the
reason. The page is built from the files on disk, so it can be rebuilt without
re-running anything (:func:`write_summary`).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

__all__ = ["PAPERS", "claim_sections", "paper_of", "write_summary"]

#: experiment-name prefix -> (paper title, note)
PAPERS = {
    "favor": ("FAVOR#: sharp attention kernel approximations (Likhosherstov et al.)",
              "favor_sharp_derf"),
    "attention": ("Linear attention built on FAVOR+/FAVOR++/FAVOR# and hybrid features",
                  "favor_sharp_derf"),
    "tiny-lm": ("Linear attention built on FAVOR+/FAVOR++/FAVOR# and hybrid features",
                "favor_sharp_derf"),
    "dp": ("Complex-to-real sketches for dot-product kernels (Wacker et al.)",
           "dot_product_random_features"),
    "hrf": ("Hybrid random features (Choromanski et al.)", "hybrid_random_features"),
    "jdl": ("Joint distribution learning in tensor-product RKHS", "joint_distribution_learning"),
    "sgb": ("Stochastic partition-function bound optimization (SPFB / LSPFB)",
            "sgb_partition_function_bound"),
}

_CLAIM_HEADING = re.compile(r"^(#{2,4})\s+(.*(claim|vs\.? (the )?paper|paper vs|"
                            r"holds).*)$", re.IGNORECASE)
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def paper_of(name: str) -> str:
    """The paper title an experiment belongs to (by its name's prefix)."""
    for prefix, (title, _) in PAPERS.items():
        if name == prefix or name.startswith(prefix + "-"):
            return title
    return "Other experiments"


def claim_sections(report_md: str) -> list[str]:
    """The sections of a report whose heading is about the paper's claims.

    A section runs from its heading to the next heading of the same or a higher level.
    """
    lines = report_md.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _CLAIM_HEADING.match(lines[i])
        if not m:
            i += 1
            continue
        level = len(m.group(1))
        j = i + 1
        while j < len(lines):
            h = re.match(r"^(#{1,6})\s", lines[j])
            if h and len(h.group(1)) <= level:
                break
            j += 1
        body = "\n".join(["#" * 4 + " " + m.group(2), *lines[i + 1:j]]).strip()
        out.append(body)
        i = j
    return out


def _relink(text: str, prefix: str) -> str:
    """Make image links of an experiment's report relative to the results directory."""
    def fix(m):
        target = m.group(2)
        if re.match(r"^[a-z]+://", target) or target.startswith("/"):
            return m.group(0)
        return f"![{m.group(1)}]({prefix}/{target})"

    return _IMAGE.sub(fix, text)


def write_summary(results_dir, rows: list[tuple[str, str, float, str]], mode: str) -> Path:
    """Write ``results_dir/REPORT.md`` from the experiments' reports.

    Parameters
    ----------
    results_dir : path of the parent directory (each experiment in ``results_dir/NAME``)
    rows : ``(name, status, seconds, message)`` per experiment, in run order
    mode : ``"quick"`` or ``"full"``
    """
    base = Path(results_dir)
    base.mkdir(parents=True, exist_ok=True)
    n_ok = sum(r[1] == "ok" for r in rows)
    parts = [
        "# kernelkit: reproduction report",
        f"Mode: **{mode}**; written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{n_ok}/{len(rows)} experiments ran. Each section below is copied from the "
        "experiment's own `report.md` (linked), which has the full setup, every table and "
        "the deviations from the paper's protocol.",
        "| experiment | paper | status | time |\n|---|---|---|---|",
    ]
    parts[-1] += "".join(
        f"\n| [{n}]({n}/report.md) | {paper_of(n).split(' (')[0]} | {s} | {secs:.0f} s |"
        for n, s, secs, _ in rows)
    by_paper: dict[str, list] = {}
    for row in rows:
        by_paper.setdefault(paper_of(row[0]), []).append(row)
    for paper, prow in by_paper.items():
        parts.append(f"## {paper}")
        for name, status, _secs, msg in prow:
            parts.append(f"### {name}")
            report = base / name / "report.md"
            if status != "ok" or not report.is_file():
                parts.append(f"Not run: **{status}** ({msg}).")
                continue
            text = report.read_text()
            sections = claim_sections(text)
            if sections:
                parts.extend(_relink(s, name) for s in sections)
            else:
                parts.append("_(This report has no claims table; see the report.)_")
            images = [m for m in _IMAGE.finditer(text)
                      if not any(m.group(2) in s for s in sections)]
            for m in images:
                parts.append(_relink(m.group(0), name))
            parts.append(f"Full report: [{name}/report.md]({name}/report.md)")
    path = base / "REPORT.md"
    path.write_text("\n\n".join(parts) + "\n")
    return path
