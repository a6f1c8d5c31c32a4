"""``--out ""`` is a usage error naming --out (click turned it into ".", so the outputs
went into the working directory)."""

import pytest
from click.testing import CliRunner

from kernelkit.cli import main


@pytest.mark.parametrize("args", [["reproduce", "favor-variance", "--quick"], ["report"]])
def test_empty_out_is_a_usage_error(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, [*args, "--out", ""])
    assert res.exit_code == 2
    assert "--out" in res.output and "empty" in res.output
    assert not any(tmp_path.iterdir())  # nothing written into the working directory
