"""bench_features helpers (no timing asserts): the peers compute the same features, the
ratio table has every target, and the before / after worker times both API versions."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kernelkit_experiments.bench import bench_features as bf


@pytest.mark.parametrize("M", [64, 65])
def test_rbf_sampler_with_rff_frequencies_gives_the_same_features(M):
    pytest.importorskip("sklearn")
    X = bf._data(300, 16, np.float64, 0)
    t, diff = bf._rff_vs_sklearn(X, M, repeats=1, seed=0)
    assert diff < 1e-12  # cos / sin pairs as cos(z) and cos(z - pi/2), odd M: phase column
    assert set(t) == {"RBFSampler (RFF weights)", "RandomFourierFeatures"}
    assert all(v["min"] > 0 for v in t.values())


def test_transforms_time_both_sderf_fits_next_to_the_transforms():
    X = bf._data(200, 8, np.float64, 0)
    Y = bf._data(200, 8, np.float64, 3)
    t = bf._transforms(X, Y, 16, repeats=1, seed=0)
    assert {"X@W", "PositiveRF.transform", "SDERF.transform", "SDERF.fit(X)"} <= set(t)
    assert "SDERF.fit(X, Y=Y)" in t


def test_targets_name_the_issue_ratios():
    names = set(bf.TARGETS)
    assert "RBFSampler.transform / RandomFourierFeatures.transform" in names
    assert bf.TARGETS["PositiveRF.transform / X@W"][:2] == ("<=", 1.3)
    assert bf.TARGETS["SDERF.fit(X, Y=Y) / SDERF.transform"][:2] == ("<=", 0.1)


def test_compare_maps_cover_every_feature_map():
    from kernelkit import features

    maps = {
        n
        for n in features.__all__
        if isinstance(getattr(features, n), type)
        and issubclass(getattr(features, n), features.FeatureMap)
        and n not in ("FeatureMap", "DotProductFeatureMap")
    }
    assert maps == set(bf.COMPARE_MAPS)
    assert len(bf.COMPARE_MAPS) == 20


_OLD_API = '''
import numpy as np


class PositiveRF:
    """Stand-in for a pre-refactor map: orthogonal= and fit(X, Y=None)."""

    def __init__(self, n_features=256, orthogonal=False, random_state=None):
        self.n_features, self.orthogonal = n_features, orthogonal

    def fit(self, X, Y=None):
        assert Y is not None and Y.shape == X.shape and self.orthogonal is True
        return self

    def transform(self, X):
        return np.exp(X[:, :1] * np.arange(self.n_features))
'''


def test_worker_translates_renamed_arguments(tmp_path):
    src = tmp_path / "src"
    (src / "kernelkit").mkdir(parents=True)
    (src / "kernelkit" / "__init__.py").write_text("")
    (src / "kernelkit" / "features.py").write_text(textwrap.dedent(_OLD_API))
    script = tmp_path / "worker.py"
    script.write_text(bf._WORKER)
    w = bf._Worker(str(script), src)
    try:
        params = {"n_features": 5, "sampler": "orthogonal"}
        res = w.ask(cmd="setup", name="PositiveRF", params=params, n=50, d=4, seed=0)
        assert "error" not in res, res
        assert res["params"] == {"n_features": 5, "orthogonal": True, "random_state": 0}
        assert res["shape"] == [50, 5] and len(res["probe"]) == 16
        for op in ("fit", "transform"):
            t = w.ask(cmd="time", op=op, inner=2, settle=0.0)
            assert t["t"] > 0
        assert "error" in w.ask(cmd="setup", name="NoSuchMap", params={}, n=5, d=2, seed=0)
    finally:
        w.close()


def _git_checkout() -> Path | None:
    if shutil.which("git") is None:
        return None
    try:
        src = bf._current_src()
        return Path(bf._git("rev-parse", "--show-toplevel", cwd=src))
    except (RuntimeError, OSError, subprocess.SubprocessError):
        return None


@pytest.mark.slow
def test_compare_against_head_runs_both_sides_and_removes_its_worktree():
    root = _git_checkout()
    if root is None:
        pytest.skip("kernelkit is not running from a git checkout")
    before = bf._git("worktree", "list", "--porcelain", cwd=root)
    res = bf.compare("HEAD", quick=True, repeats=1, maps=["PositiveRF"])
    row = res["rows"]["PositiveRF"]
    assert "error" not in row, row
    assert row["columns"] == 1024
    for op in ("fit", "transform"):
        assert row[op]["before"] > 0 and row[op]["after"] > 0
    assert row["probe_rel_diff"] < 1e-6  # the same map at HEAD and in the working tree
    assert bf._git("worktree", "list", "--porcelain", cwd=root) == before
