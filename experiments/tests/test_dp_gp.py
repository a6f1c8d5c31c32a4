"""``kernelkit reproduce dp-gp`` (dot-product features, Table 3), on a tiny configuration."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from kernelkit.experiments import get_experiment
from kernelkit_experiments import dp_gp

TINY = replace(
    dp_gp.QUICK,
    regression=("boston",),
    classification=("digits",),
    n_max=220,
    m_max=60,
    noise_grid=(2.0**-4, 1.0),
    alpha_grid=(1e-2,),
    n_mc=50,
    maclaurin_subsample=80,
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp-gp")
    return out, dp_gp.run(out, quick=True, seed=0, config=TINY)


def test_registered():
    assert get_experiment("dp-gp") is dp_gp
    assert dp_gp.NAME == "dp-gp"


def test_writes_report_plot_and_json(tiny_run):
    out, _ = tiny_run
    for name in ("report.md", "results.json", "frobenius.png"):
        assert (out / name).is_file()
    report = (out / "report.md").read_text()
    assert "Table 3" in report and "(3.410)" in report  # paper's Boston value alongside
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "dp-gp"
    assert set(data["datasets"]) == {"boston", "digits"}
    assert data["datasets"]["digits"]["D"] == 5 * 64


def test_metrics_are_finite_and_sane(tiny_run):
    _, res = tiny_run
    assert "maclaurin" in res["methods"]
    for key, runs in res["runs"].items():
        for r in runs:
            assert "error" not in r, (key, r)
            for method in res["methods"]:
                m = r[method]
                assert np.isfinite(m["mnll"]) and m["frob"] > 0 and m["kl"] >= 0
                if key.split("/")[1] == "digits":
                    assert 0 <= m["error"] <= 100
                else:
                    assert m["nmse"] > 0
            assert r["reg"] in TINY.noise_grid + TINY.alpha_grid


def test_preprocessing_and_kernel():
    rng = np.random.default_rng(0)
    Xtr, Xte = rng.uniform(2, 5, size=(20, 3)), rng.uniform(2, 5, size=(5, 3))
    A, _ = dp_gp._preprocess(Xtr, Xte, centre=False, unit=True)
    np.testing.assert_allclose(np.linalg.norm(A, axis=1), 1.0)
    assert A.min() >= 0  # non-centred data stay non-negative
    C, _ = dp_gp._preprocess(Xtr, Xte, centre=True, unit=False)
    np.testing.assert_allclose(C.mean(0), 0.0, atol=1e-12)
    k = dp_gp._Kernel("polynomial", degree=3)
    # eq. 57 with a = 2 on unit vectors: ((1 + x.y) / 2)^p
    np.testing.assert_allclose(k.exact(k.prep(A), k.prep(A)), ((1 + A @ A.T) / 2) ** 3)
    assert dp_gp._pad_dim(13) == 16 and dp_gp._pad_dim(64) == 64
