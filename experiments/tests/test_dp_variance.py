"""``kernelkit reproduce dp-variance`` (dot-product RF paper, Figs. 2-3), tiny config."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelkit import datasets
from kernelkit_experiments import claim_counts
from kernelkit_experiments import dp_variance as dv

TINY = {
    "dims": (8, 16),
    "degrees": (1, 2, 3),
    "n_pairs": 60,
    "n_draws": 400,
    "pairs_per_fit": 5,
    "fig3_pairs": 60,
    "fig3_degrees": (2, 3),
    "fig3_data": ("digits", "fashion"),
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp-variance")
    res = dv.run(out, quick=True, seed=0, progress=False, **TINY)
    return out, res


def test_run_writes_report_plots_and_json(tiny_run):
    out, _ = tiny_run
    for name in ("report.md", "results.json", "fig2.png", "fig3.png"):
        assert (out / name).is_file()
    assert (out / "fig2.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "report.md").read_text()
    assert "fig2.png" in report and "fig3.png" in report and "97.8%" in report
    assert "not available offline" in report and "holds on our data?" in report
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "dp-variance" and len(data["runs"]) >= 5
    counts = claim_counts(out)  # the summary reads the verdicts of the claims table
    assert sum(counts.values()) == len(data["claims"]) and counts["other"] == 0
    assert {k.split()[0] for k in data["runs"][0] if k.startswith("d=")} == {"d=8", "d=16"}
    has_fashion = any(k.startswith("fashion ") for k in data["runs"][0])
    assert has_fashion == datasets.fashion_mnist_available()
    if not has_fashion:
        assert "Skipped" in report


def test_fig2_claims_hold_analytically(tiny_run):
    """Theorem 2: complex below real, the ratio falls with p, Rademacher below Gaussian;
    the analytic values vary with the pairs only, so every seed agrees."""
    _, res = tiny_run
    verdicts = {c["claim"]: c["verdict"] for c in res["claims"]}
    fig2 = {k: v for k, v in verdicts.items() if "analytic" in k}
    assert len(fig2) == 2 * (2 * 2 + 1) + 1 and set(fig2.values()) == {"yes"}
    assert verdicts["complex SRHT variance smaller for (nearly) all pairs (digits)"] == "yes"


def _exact_mse(X, Y, p, sketch, cplx):
    """Mean over pairs of eq. 18-21 (D = 1), written out here."""
    G = np.sum(X * Y, 1)
    N = np.sum(X * X, 1) * np.sum(Y * Y, 1)
    S = np.sum(X * X * Y * Y, 1)
    if sketch == "Rademacher":
        base = N + G * G - S if cplx else N + 2 * (G * G - S)
    else:
        base = N + G * G if cplx else N + 2 * G * G
    return float(np.mean(base**p - G ** (2 * p)))


def test_fig2_analytic_matches_eq_18_21_and_monte_carlo(tiny_run):
    _, res = tiny_run
    for d in TINY["dims"]:
        for sketch in dv.SKETCHES:
            for kind in ("real", "complex"):
                key = f"d={d} {sketch} {kind}"
                for k, p in enumerate(TINY["degrees"]):
                    diff, var = 0.0, 0.0
                    for seed, r in zip(res["seeds"], res["runs"], strict=True):
                        X, Y = dv.fig2_pairs(TINY["n_pairs"], d, seed=seed)
                        exact = _exact_mse(X, Y, p, sketch, kind == "complex")
                        np.testing.assert_allclose(r[f"{key} analytic"][k], exact, rtol=1e-10)
                        diff += r[f"{key} mc"][k] - exact
                        var += r[f"{key} mc_se"][k] ** 2
                    # low degrees: light enough tails for a Monte Carlo check; the seeds'
                    # errors are independent, so their sum has variance sum(se^2)
                    z = diff / np.sqrt(var)
                    assert abs(z) < 4.5, (d, sketch, kind, p, z)
        for r in res["runs"]:
            for sketch in dv.SKETCHES:
                ratio = np.asarray(r[f"d={d} {sketch} ratio"])
                assert np.all(ratio < 1) and np.all(np.diff(ratio) < 0)


def test_fig3_ratios_on_digits(tiny_run):
    _, res = tiny_run
    for r in res["runs"]:
        for p in TINY["fig3_degrees"]:
            q = np.asarray(r[f"digits p={p} quantiles"])
            assert q.shape == (dv.N_QUANTILES,) and np.all(np.isfinite(q)) and np.all(q > 0)
            assert np.all(np.diff(q) >= 0) and q[-1] < 1.0  # every pair: complex < real
            assert r[f"digits p={p} pct"] == 100.0
            # 60 pairs: the levels 0.495, 0.505 sit symmetrically between the two middle
            # order statistics, so the median of the quantiles is the sample median
            assert r[f"digits p={p} median"] == pytest.approx(np.median(q), rel=1e-12)
        assert r["digits p=3 median"] < r["digits p=2 median"]


def test_fig3_quantiles_are_those_of_eq_34_ratios():
    """fig3_data's quantiles are the quantiles of the ratios of its own pairs (re-drawn
    here with the same generator) and the share below 1 is theirs."""
    cfg = dv.Config(fig3_pairs=50, fig3_degrees=(3,), fig3_data=("digits",))
    got = dv.fig3_data(cfg, "digits", seed=7)
    X = dv._load_fig3("digits")
    rng = np.random.default_rng([7, 3, 0])
    i = rng.integers(0, len(X), size=50)
    j = (i + rng.integers(1, len(X), size=50)) % len(X)
    r = dv._ratios(X[i], X[j], 3, 64)["complex"]
    levels = (np.arange(dv.N_QUANTILES) + 0.5) / dv.N_QUANTILES
    np.testing.assert_allclose(got["digits p=3 quantiles"], np.quantile(r, levels))
    assert got["digits p=3 pct"] == 100.0 * np.mean(r < 1)
    assert np.all(i != j)


def test_fig3_ratio_is_eq_34():
    """The ratio of eq. 34 (D = d) written out for one pair equals the experiment's."""
    X, _ = datasets.load_digits_images()
    x, y = X[3] / np.linalg.norm(X[3]), X[10] / np.linalg.norm(X[10])
    G, N, S = x @ y, 1.0, np.sum(x * x * y * y)
    d, p = 64, 3

    def eq34(V1, Vp):
        return Vp / d - (d - 1) / d * (G ** (2 * p) - (G * G - V1 / (d - 1)) ** p)

    real = eq34(N + G * G - 2 * S, (N + 2 * (G * G - S)) ** p - G ** (2 * p))
    cplx = eq34(N - S, (N + G * G - S) ** p - G ** (2 * p))
    r = dv._ratios(x[None], y[None], p, d)["complex"][0]
    np.testing.assert_allclose(r, cplx / real, rtol=1e-10)
