"""jdl-classification (JDL Sec. 5.2) on the monthly French stand-in: a tiny run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelkit_experiments import _harness as H
from kernelkit_experiments import jdl_classification as jc

pytest.importorskip("linearmodels")

TINY = {
    "ds": (1, 5),
    "ns": (200,),
    "quantiles": (0.05,),
    "ls_factors": (1.0,),
    "regs": (1e-5, 1e-3),
    "regs_klr": (1e-1,),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("jdl_classification")
    return out, jc.run(out, quick=True, seed=0, progress=False, **TINY)


def test_module_interface():
    assert jc.NAME == jc.SPEC.name == "jdl-classification" and jc.DESCRIPTION
    assert jc.FULL.quantiles[0] == 0.01 and jc.PAPER_SUBSAMPLES == 100
    assert jc.SPEC.seeds[1] == jc.FULL_SUBSAMPLES >= H.MIN_SEEDS
    assert {k for k, _ in jc.FULL.variants} == {"jdl", "cme", "klr"}


@pytest.mark.slow
def test_outputs_and_positivity(tiny):
    out, res = tiny
    for f in ("report.md", "results.json", "fig9_loss.png", "fig10_negative.png", "fig11_time.png"):
        assert (out / f).stat().st_size > 0, f
    text = (out / "report.md").read_text()
    assert "stand-in" in text and "holds on our data?" in text
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert len(runs) >= 5  # a fast run: at least five subsamples
    h = -(0.05 * np.log(0.05) + 0.95 * np.log(0.95))
    for r in runs:
        for d in TINY["ds"]:
            pre = f"q=0.05 d={d}"
            # Fig. 10: constrained JDL and KLR never give negative probabilities
            assert np.all(np.asarray(r[f"{pre} jdl/c neg_pct"]) == 0.0)
            assert np.all(np.asarray(r[f"{pre} klr/u neg_pct"]) == 0.0)
            for key in ("jdl/u", "jdl/c", "cme/u", "cme/c", "klr/u"):
                loss = np.asarray(r[f"{pre} {key} loss"])
                assert np.all(np.isfinite(loss) & (loss >= 0)), key
            # the constant-frequency classifier at a 5 % event: near the binary entropy
            base = np.asarray(r[f"{pre} unconditional loss"])
            assert np.all((0.5 * h < base) & (base < 2 * h))
    verdicts = {c["claim"]: c["verdict"] for c in res["claims"]}
    assert verdicts["KLR positive by construction"] == "yes"
    assert verdicts["Fig. 10: constraints cut JDL's negative probabilities to zero"] == "yes"


def test_one_subsample_probabilities():
    """P(Y <= q | x) of JDL equals its conditional weights summed over the event."""
    from kernelkit.datasets._jdl import french_classification_data
    from kernelkit_experiments import _jdl_common as C

    X, y = french_classification_data(1)
    q = float(np.quantile(y[:160], 0.05))
    model = C.fit_model(
        "jdl",
        True,
        X[:160],
        y[:160, None],
        {"lengthscale_x": 0.05, "lengthscale_y": 0.05, "reg": 1e-4},
        1e-3,
    )
    p = model.conditional_probability((y[:160] <= q).astype(float), X[160:200])
    W = model.conditional_weights(X[160:200])
    np.testing.assert_allclose(p, W[:, y[:160] <= q].sum(axis=1), atol=1e-12)
    assert p.min() >= -1e-12 and p.max() <= 1 + 1e-12  # (29) implies weights >= 0 on grid
