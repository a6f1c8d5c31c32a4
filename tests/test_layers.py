"""The package's layers (documentation home page, "How the package is built"): imports
point downward only, and no subpackage reaches into another one's private names."""

from __future__ import annotations

import ast
import pathlib

import kernelkit

ROOT = pathlib.Path(kernelkit.__file__).parent
#: bottom to top: a subpackage may import only those before it
ORDER = ("_backend", "kernels", "features", "optim", "distributions", "attention", "estimators")
#: imports nothing of kernelkit but itself
STANDALONE = ("datasets",)


def _cross_imports():
    """``(importing subpackage, file, imported module path, imported names)`` for every
    import of one kernelkit subpackage by a module of another (the CLI and the top-level
    modules excluded: they sit above everything)."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if len(parts) == 1 or parts[0] == "cli":
            continue
        here, pkg = parts[0], parts[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
                if node.level:  # relative: from the package, up level - 1
                    base = list(pkg[: len(pkg) - node.level + 1])
                    target = base + (node.module.split(".") if node.module else [])
                elif (node.module or "").split(".")[0] == "kernelkit":
                    target = node.module.split(".")[1:]
                else:
                    continue
                if not target:  # "from .. import features"
                    target = [names[0]]
            elif isinstance(node, ast.Import):
                found = [
                    a.name.split(".")[1:] for a in node.names if a.name.startswith("kernelkit.")
                ]
                if not found:
                    continue
                target = found[0]
            else:
                continue
            if target and target[0] != here:
                out.append((here, path.relative_to(ROOT).as_posix(), target, names))
    return out


CROSS = _cross_imports()


def test_the_scan_sees_the_imports_it_checks():
    # the check below is vacuous if the scan finds nothing: the estimators import features
    assert any(h == "estimators" and t[0] == "features" for h, _, t, _ in CROSS)
    assert any(h == "attention" and t[0] == "_backend" for h, _, t, _ in CROSS)


def test_imports_point_downward():
    wrong = [
        (f, ".".join(t))
        for h, f, t, _ in CROSS
        if h in STANDALONE
        or t[0] not in ORDER
        or h not in ORDER
        or ORDER.index(t[0]) >= ORDER.index(h)
    ]
    assert not wrong, f"imports that do not point downward: {wrong}"


def test_no_subpackage_imports_another_ones_private_names():
    # a private module of another subpackage may be imported for the names it declares
    # in its __all__ (features._dask: the scale-out fits the estimators run), never for
    # underscore names, and the feature maps' base module not at all
    wrong = [
        (f, ".".join(t), n)
        for h, f, t, names in CROSS
        for n in names
        if n.startswith("_") or t[:2] == ["features", "_base"]
    ]
    assert not wrong, f"private names imported across subpackages: {wrong}"
