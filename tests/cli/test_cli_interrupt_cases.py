"""Ctrl-C while ``kernelkit reproduce`` starts up (imports) gives one line and exit 130,
as it does while an experiment runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kernelkit

_SRC = str(Path(kernelkit.__file__).resolve().parents[1])  # this checkout's src/

# The console script's code (``from kernelkit.cli import main; sys.exit(main())``), run
# with an import hook that delivers a real SIGINT to the process when TRIGGER is first
# imported: a Ctrl-C at that moment of the start-up.
_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys

    # as a terminal delivers it (a parent may pass SIGINT on ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    TRIGGER = sys.argv[1]


    class Hook:
        def find_spec(self, name, path=None, target=None):
            if name == TRIGGER:
                sys.meta_path.remove(self)
                print("interrupting", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGINT)
            return None


    sys.meta_path.insert(0, Hook())
    sys.argv = ["kernelkit", *sys.argv[2:]]
    from kernelkit.cli import main

    sys.exit(main())
    """
)


def _start(tmp_path, trigger, *args):
    script = tmp_path / "console_script.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [_SRC, *filter(None, [env.get("PYTHONPATH")]), *filter(None, sys.path)]
    )
    return subprocess.run(
        [sys.executable, str(script), trigger, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "trigger",
    [
        "kernelkit_experiments",  # the experiments package (the suite)
        "numpy",  # imported by the suite, before the experiment is looked up
        "sklearn",  # imported by `import kernelkit` before (now by the experiment)
    ],
)
def test_ctrl_c_during_the_start_up_imports_exits_130_with_one_line(tmp_path, trigger):
    pytest.importorskip("kernelkit_experiments")
    # both are imported before the experiment's run starts (the interrupt ends it there)
    res = _start(tmp_path, trigger, "reproduce", "jdl-small", "--quick", "--out", str(tmp_path))
    assert "interrupting" in res.stderr, res.stderr  # the hook fired
    assert res.returncode == 130, res.stderr
    assert "Traceback" not in res.stderr and "Aborted" not in res.stderr, res.stderr
    said = [ln for ln in res.stderr.splitlines() if "Interrupted" in ln]
    assert len(said) == 1 and said[0].startswith("Interrupted during"), res.stderr


def test_import_kernelkit_imports_no_subpackage():
    # `import kernelkit` (run first by the console script and `python -m kernelkit`)
    # leaves every subpackage to first access, so that the command line's own
    # Ctrl-C handling is in place before the heavy imports
    code = (
        "import sys, kernelkit; "
        "print(sorted(m for m in sys.modules if m.startswith(('kernelkit.', 'sklearn'))))"
    )
    env = dict(os.environ, PYTHONPATH=_SRC)
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
    # first access still imports them
    assert kernelkit.features.__name__ == "kernelkit.features"
    from kernelkit import kernels

    assert kernels.__name__ == "kernelkit.kernels"
