"""``python -m kernelkit`` behaves like the ``kernelkit`` console script.

Reference: the click command of the console script (``kernelkit.cli:main``, as declared
in pyproject.toml), invoked in-process with the program name ``kernelkit``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import kernelkit
from kernelkit.cli import main

_SRC = str(Path(kernelkit.__file__).resolve().parents[1])  # this checkout's src/
_WIDTH = 78  # help text width: click wraps at min(terminal columns, 80) - 2


def _run_module(*args):
    """``python -m kernelkit ARGS`` in a subprocess that imports this checkout and sees
    what this process sees (the experiments package may be on ``sys.path`` through
    pytest's ``pythonpath`` rather than installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [_SRC, *filter(None, [env.get("PYTHONPATH")]), *filter(None, sys.path)]
    )
    env["COLUMNS"] = str(_WIDTH + 2)
    return subprocess.run(
        [sys.executable, "-m", "kernelkit", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _run_console_script(*args):
    return CliRunner().invoke(main, list(args), prog_name="kernelkit", terminal_width=_WIDTH)


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        pytest.param(("list",), marks=pytest.mark.slow),  # each run starts Python: ~3 s
        pytest.param(("reproduce", "--help"), marks=pytest.mark.slow),
    ],
    ids=["help", "list", "reproduce-help"],
)
def test_python_m_kernelkit_prints_what_the_command_prints(args):
    got = _run_module(*args)
    want = _run_console_script(*args)
    assert got.returncode == want.exit_code == 0, got.stderr
    assert got.stdout == want.output
    if args == ("--help",):
        assert got.stdout.startswith("Usage: kernelkit [OPTIONS] COMMAND [ARGS]...")
        assert "reproduce" in got.stdout and "bench" in got.stdout


@pytest.mark.slow
def test_python_m_kernelkit_usage_errors_match_the_command():
    got = _run_module("no-such-command")
    want = _run_console_script("no-such-command")
    assert got.returncode == want.exit_code == 2
    assert "Usage: kernelkit" in got.stderr
    assert "No such command 'no-such-command'" in got.stderr
    assert got.stderr == want.output  # click's runner mixes stderr into output
