"""The documentation: every ```python block (of docs/ and the README) runs, and the MkDocs
site builds offline.

Blocks of one page run in order in one namespace (a page is one session). The site is
built with ``mkdocs build --strict`` (mkdocstrings renders the API reference from the
docstrings; a broken reference or link fails the build).
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md"))
#: the packages with an API reference page, docs/api/<pkg>.md
API_PACKAGES = (
    "features",
    "kernels",
    "attention",
    "estimators",
    "distributions",
    "optim",
    "metrics",
    "datasets",
)
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[str]:
    return [m.group(1) for m in _BLOCK.finditer(text)]


def test_pages_exist_and_have_examples():
    names = {p.relative_to(DOCS).as_posix() for p in PAGES}
    assert {"index.md", "guide/choosing.md", "guide/scale.md", "api/features.md"} <= names
    guides = [p for p in PAGES if p.parent.name == "guide" and p.name != "reproduce.md"]
    for page in guides:
        assert python_blocks(page.read_text()), f"{page.name} has no runnable example"


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if python_blocks(p.read_text())],
    ids=lambda p: p.relative_to(DOCS).as_posix(),
)
def test_examples_run(page, monkeypatch, tmp_path):
    # a page of an extra's feature (attention: torch; scale-out: dask) needs that extra
    for module in ("torch", "dask", "distributed", "cvxpy"):
        if f"import {module}" in page.read_text():
            pytest.importorskip(module, reason=f"{module} not installed (an optional extra)")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for i, code in enumerate(python_blocks(page.read_text())):
        try:
            exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
        except Exception as exc:  # pragma: no cover - the failure message is the point
            raise AssertionError(
                f"{page.relative_to(DOCS)} block {i} failed: {type(exc).__name__}: {exc}"
            ) from exc


def test_readme_example_runs(monkeypatch, tmp_path):
    """The README's example, the first code a new user runs, runs as written."""
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert blocks, "README.md has no python example"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md[block {i}]", "exec"), namespace)
    assert namespace["K_hat"].shape == (500, 400)


@pytest.mark.slow
def test_site_builds_strict():
    """The README's docs command as written, ``mkdocs build`` (strict by mkdocs.yml),
    builds without a single warning (none hidden by ``--quiet``)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    site = ROOT / "build" / "site"  # mkdocs.yml's site_dir
    cmd = [sys.executable, "-m", "mkdocs", "build"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log
    assert "WARNING" not in log, log
    assert (site / "index.html").is_file()
    api = (site / "api" / "features" / "index.html").read_text()
    assert "SDERF" in api and "approx_kernel" in api  # rendered from the docstrings
    # every public name of every package has its entry in the API reference
    for pkg in API_PACKAGES:
        _check_api_entries(site, pkg)
    # the docstrings' Sphinx roles are rendered as code (docs/hooks/sphinx_roles.py)
    for page in (site / "api").rglob("index.html"):
        text = page.read_text()
        assert not re.search(r":(class|func|meth|mod|attr|data):<code>", text), page
        assert "::</p>" not in text, page


def _check_api_entries(site: Path, pkg: str) -> None:
    """Every name of ``kernelkit.<pkg>.__all__`` is an entry (an anchor) of its API page."""
    if pkg == "attention":
        pytest.importorskip("torch")
    module = importlib.import_module(f"kernelkit.{pkg}")
    html = (site / "api" / pkg / "index.html").read_text()
    anchors = set(re.findall(r'id="(kernelkit\.[\w.]+)"', html))
    short = {a.rsplit(".", 1)[-1] for a in anchors}
    missing = [name for name in module.__all__ if name not in short]
    assert not missing, f"kernelkit.{pkg}: no API entry for {missing}"


def test_sphinx_roles_hook():
    """The hook drops the role, keeps the code span, and shortens a ``~`` name."""
    sys.path.insert(0, str(DOCS / "hooks"))
    try:
        from sphinx_roles import render_roles
    finally:
        sys.path.remove(str(DOCS / "hooks"))
    html = (
        "see :class:<code>~kernelkit.features.SDERF</code> and :func:<code>a_star</code>, "
        "not <code>:class:</code>"
    )
    assert render_roles(html) == (
        "see <code>SDERF</code> and <code>a_star</code>, not <code>:class:</code>"
    )
    # reST's literal-block marker: "text::" shows as "text:"; a C++-style name stays
    assert render_roles("<p>the loss::</p><p>the op <code>a::b</code></p>") == (
        "<p>the loss:</p><p>the op <code>a::b</code></p>"
    )
