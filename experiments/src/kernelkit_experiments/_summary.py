"""``results/REPORT.md``: one page over every experiment of ``kernelkit reproduce all``.

For each paper, each of its experiments contributes its status and run time, its "paper
claims vs our data" section(s) copied from its own ``report.md`` (the tables that set
the paper's number, ours and "holds on our data?" side by side), and its plots inline
(paths relative to ``results/``). Experiments that did not run are listed with the
reason. The page is built from the files on disk, so it can be rebuilt without
re-running anything (:func:`write_summary`).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

__all__ = [
    "PAPERS",
    "claim_counts",
    "claim_sections",
    "claim_verdicts",
    "collect_rows",
    "paper_of",
    "read_run_info",
    "write_summary",
]

#: experiment-name prefix -> (paper title, note)
PAPERS = {
    "favor": (
        "FAVOR#: sharp attention kernel approximations (Likhosherstov et al.)",
        "favor_sharp_derf",
    ),
    "attention": (
        "Linear attention built on FAVOR+/FAVOR++/FAVOR# and hybrid features",
        "favor_sharp_derf",
    ),
    "tiny-lm": (
        "Linear attention built on FAVOR+/FAVOR++/FAVOR# and hybrid features",
        "favor_sharp_derf",
    ),
    "mlm": (
        "Linear attention built on FAVOR+/FAVOR++/FAVOR# and hybrid features",
        "favor_sharp_derf",
    ),
    "dp": (
        "Complex-to-real sketches for dot-product kernels (Wacker et al.)",
        "dot_product_random_features",
    ),
    "hrf": ("Hybrid random features (Choromanski et al.)", "hybrid_random_features"),
    "jdl": ("Joint distribution learning in tensor-product RKHS", "joint_distribution_learning"),
    "sgb": (
        "Stochastic partition-function bound optimization (SPFB / LSPFB)",
        "sgb_partition_function_bound",
    ),
}

_CLAIM_HEADING = re.compile(
    r"^(#{2,4})\s+(.*(claim|vs\.? (the )?paper|paper vs|"
    r"holds).*)$",
    re.IGNORECASE,
)
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
        body = "\n".join(["#" * 4 + " " + m.group(2), *lines[i + 1 : j]]).strip()
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


def read_run_info(exp_dir) -> dict | None:
    """``{"mode", "seconds", "platform"}`` of the run in ``exp_dir`` (its ``results.json``),
    or None when there is no readable ``results.json``."""
    path = Path(exp_dir) / "results.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    quick = data.get("quick")
    secs = data.get("elapsed_s")
    # json reads NaN too; a negative time is not one either
    finite = isinstance(secs, int | float) and math.isfinite(secs) and secs >= 0
    name = data.get("experiment")
    return {
        "mode": "quick" if quick is True else "full" if quick is False else "?",
        "seconds": float(secs) if finite else None,
        "platform": data.get("platform"),
        "experiment": name if isinstance(name, str) else None,
    }


def collect_rows(results_dir, names) -> list[tuple[str, str, float | None, str]]:
    """``(name, status, seconds, message)`` for each experiment in ``names`` from the
    folders already in ``results_dir`` (status ``"ok"`` when ``NAME/report.md`` and
    ``NAME/results.json`` exist; seconds from ``results.json``, None where its time is not
    a non-negative number; ``"unreadable"`` when
    ``results.json`` is there but not a JSON object; ``"mismatch"`` when it records a run
    of another experiment), for :func:`write_summary`.
    """
    base = Path(results_dir)
    rows = []
    for name in names:
        info = read_run_info(base / name)
        if info is None and (base / name / "results.json").is_file():
            rows.append(
                (name, "unreadable", 0.0, f"{name}/results.json is unreadable (not a JSON object)")
            )
            continue
        if info is None or not (base / name / "report.md").is_file():
            rows.append(
                (name, "not run", 0.0, f"no {name}/report.md and results.json in this directory")
            )
            continue
        other = info.get("experiment")
        if other is not None and other != name:  # e.g. `reproduce A --out DIR/B`
            rows.append(
                (
                    name,
                    "mismatch",
                    0.0,
                    f"{name}/results.json holds a run of {other!r}, not {name!r} (written "
                    f"with `--out` pointing at the wrong folder?)",
                )
            )
            continue
        # seconds None: the run's time is unreadable (shown as "?", not added up)
        rows.append((name, "ok", info["seconds"], str(base / name / "report.md")))
    return rows


def _time_cell(status: str, secs: float | None) -> str:
    # a run's time in the summary table: "?" for an ok run whose time is unreadable
    if status == "ok":
        return "?" if secs is None else _fmt_secs(secs)
    return _fmt_secs(secs) if secs else "–"


def _fmt_secs(secs: float) -> str:
    if secs < 60:
        return f"{secs:.0f} s"
    if secs < 3600:
        return f"{secs / 60:.1f} min"
    return f"{secs / 3600:.2f} h"


def _scale_paragraphs(report_md: str) -> list[str]:
    """The report's ``**Scale.**`` paragraphs (this run's size next to the paper's)."""
    out = []
    for p in re.split(r"\n\s*\n", report_md):
        if p.strip().startswith("**Scale.**"):
            out.append(p.strip())
        else:  # a list item of a setup list
            out += [
                line.strip()[2:]
                for line in p.splitlines()
                if line.strip().startswith("- **Scale.**")
            ]
    return out


VERDICTS = ("yes", "partly", "no", "tie")
#: a heading of a variant's claims section ("Variant claims: <name>")
_VARIANT_HEADING = re.compile(r"^#+\s*variant\b", re.IGNORECASE)
#: a claim of a named variant by its text ("Variant (<name>): ...")
_VARIANT_CLAIM = re.compile(r"^[*_`]*variant \((?:[^()]|\([^()]*\))+\):", re.IGNORECASE)


def claim_verdicts(sections: list[str]) -> dict[str, int]:
    """Count the verdicts of the claims tables in ``sections``: in every table with a
    header cell mentioning "holds", that column's cells by their first word: ``yes``;
    ``partly`` (or ``mostly``); ``no``; ``tie`` ("tie (within noise)": the difference is
    within two standard errors); anything else (n/a, "see ...") ``other``. Claims of a
    named variant (another reading of the paper's protocol) count as ``variant``
    whatever their verdict: every row of a section headed "Variant ...", and rows whose
    claim (first cell) starts with "Variant (<name>): "."""
    counts = {"yes": 0, "partly": 0, "no": 0, "tie": 0, "other": 0, "variant": 0}
    for sec in sections:
        variant_sec = bool(_VARIANT_HEADING.match(sec.lstrip()))
        # verdict column of the current table, counted from the right: cells before it
        # may hold unescaped "|" (norms such as |x|), which shift the left-based index
        col = None
        for line in sec.splitlines():
            line = line.strip()
            if not line.startswith("|"):
                col = None
                continue
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
            heads = [len(cells) - i for i, c in enumerate(cells) if "holds" in c.lower()]
            if col is None:
                col = heads[0] if heads else 0  # 0: a table without a verdict column
                continue
            if not col or col > len(cells) or set(cells[-col]) <= set("-: "):
                continue
            if variant_sec or _VARIANT_CLAIM.match(cells[0]):
                counts["variant"] += 1
                continue
            word = re.sub(r"[*_`]", "", cells[-col]).strip().lower()
            word = re.split(r"[\s(,;.:]", word, maxsplit=1)[0] if word else ""
            word = {"mostly": "partly"}.get(word, word)
            counts[word if word in VERDICTS else "other"] += 1
    return counts


def claim_counts(exp_dir) -> dict[str, int] | None:
    """:func:`claim_verdicts` of the report in ``exp_dir`` (None without a report)."""
    path = Path(exp_dir) / "report.md"
    if not path.is_file():
        return None
    return claim_verdicts(claim_sections(path.read_text(errors="replace")))


def _fmt_verdicts(c: dict[str, int] | None) -> str:
    if not c or not sum(c.values()):
        return "–"
    out = f"{c['yes']} / {c['partly']} / {c['no']} / {c['tie']} / {c.get('variant', 0)}"
    return out + (f" (+{c['other']} other)" if c["other"] else "")


def write_summary(
    results_dir, rows: list[tuple[str, str, float | None, str]], mode: str | None = None
) -> Path:
    """Write ``results_dir/REPORT.md`` from the experiments' reports.

    Parameters
    ----------
    results_dir : path of the parent directory (each experiment in ``results_dir/NAME``)
    rows : ``(name, status, seconds, message)`` per experiment, in run order
    mode : ``"quick"`` or ``"full"``; None: read from each experiment's ``results.json``
        (``"mixed"`` when they differ)
    """
    base = Path(results_dir)
    base.mkdir(parents=True, exist_ok=True)
    n_ok = sum(r[1] == "ok" for r in rows)
    infos = {n: read_run_info(base / n) if s == "ok" else None for n, s, _, _ in rows}
    modes = {i["mode"] for i in infos.values() if i is not None}
    if mode is None:
        mode = modes.pop() if len(modes) == 1 else ("mixed" if modes else "none")
    total = sum(secs for _, s, secs, _ in rows if s == "ok" and secs is not None)
    platforms = sorted({i["platform"] for i in infos.values() if i and i.get("platform")})
    verdicts = {}
    for n, st, _, _ in rows:
        rep_md = base / n / "report.md"
        if st == "ok" and rep_md.is_file():
            verdicts[n] = claim_verdicts(claim_sections(rep_md.read_text(errors="replace")))
    tot = {k: sum(v[k] for v in verdicts.values()) for k in (*VERDICTS, "other", "variant")}
    parts = [
        "# kernelkit: reproduction report",
        f"Mode: **{mode}**; written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{n_ok}/{len(rows)} experiments ran"
        + (
            f" (their run times add up to {_fmt_secs(total)}; runs started one by one may "
            "have overlapped)"
            if n_ok
            else ""
        )
        + ". Each section below is copied from the experiment's own `report.md` (linked), "
        "which has the full setup, every table and the deviations from the paper's "
        "protocol, including how its size compares with the paper's (its **Scale** line, where "
        "it has one, is copied below)."
        + " Times are the wall-clock run time of each experiment; on a shared machine they "
        "include waiting for the CPU."
        + (f" Platform: {', '.join(platforms)}." if platforms else ""),
        "Claims columns: rows of the experiments' claims tables whose verdict ('holds on our "
        "data?') starts with yes / partly (or mostly) / no / tie (within noise: the "
        "difference is within two standard errors over the seeds, counted apart); "
        "variant: claims of another reading of a protocol the paper leaves open (a named "
        "variant, with the sentence why), whatever their verdict, counted apart from the "
        "headline claims; the tables below give each claim with the "
        f"paper's number and ours. In all: **{tot['yes']} yes, {tot['partly']} partly, "
        f"{tot['no']} no, {tot['tie']} tie (within noise)**"
        + (f", {tot['other']} other (not testable here, n/a)" if tot["other"] else "")
        + f"; **{tot['variant']} variant** claims.",
        "| experiment | paper | status | mode | time | claims yes / partly / no / tie / "
        "variant |\n|---|---|---|---|---|---|",
    ]
    parts[-1] += "".join(
        f"\n| {f'[{n}]({n}/report.md)' if s == 'ok' else n} | "
        f"{paper_of(n).split(' (')[0]} | {s} | "
        f"{infos[n]['mode'] if infos.get(n) else '–'} | "
        f"{_time_cell(s, secs)} | {_fmt_verdicts(verdicts.get(n))} |"
        for n, s, secs, _ in rows
    )
    by_paper: dict[str, list] = {}
    for row in rows:
        by_paper.setdefault(paper_of(row[0]), []).append(row)
    for paper, prow in by_paper.items():
        parts.append(f"## {paper}")
        for name, status, _secs, msg in prow:
            parts.append(f"### {name}")
            report = base / name / "report.md"
            if status != "ok" or not report.is_file():
                parts.append(f"Not in this report: **{status}** ({msg}).")
                continue
            text = report.read_text(errors="replace")
            parts.extend(_scale_paragraphs(text))
            sections = claim_sections(text)
            if sections:
                parts.extend(_relink(s, name) for s in sections)
            else:
                parts.append("_(This report has no claims table; see the report.)_")
            images = [
                m for m in _IMAGE.finditer(text) if not any(m.group(2) in s for s in sections)
            ]
            for m in images:
                parts.append(_relink(m.group(0), name))
            parts.append(f"Full report: [{name}/report.md]({name}/report.md)")
    path = base / "REPORT.md"
    path.write_text("\n\n".join(parts) + "\n")
    return path
