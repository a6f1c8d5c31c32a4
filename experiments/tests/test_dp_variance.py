"""``kernelkit reproduce dp-variance`` (dot-product RF paper, Figs. 2-3), tiny config."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelkit import datasets
from kernelkit_experiments import dp_variance as dv

TINY = dv.Config(
    dims=(8, 16),
    degrees=(1, 2, 3),
    n_pairs=40,
    n_draws=400,
    pairs_per_fit=10,
    fig3_pairs=60,
    fig3_degrees=(2, 3),
    fig3_data=("digits", "fashion"),
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp-variance")
    res = dv.run(out, quick=True, seed=0, config=TINY, progress=False)
    return out, res


def test_run_writes_report_plots_and_json(tiny_run):
    out, _ = tiny_run
    for name in ("report.md", "results.json", "fig2.png", "fig3.png"):
        assert (out / name).is_file()
    assert (out / "fig2.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "report.md").read_text()
    assert "fig2.png" in report and "fig3.png" in report and "97.8%" in report
    assert "not available offline" in report
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "dp-variance"
    assert data["paper_fig3"]["MNIST"] == 97.8
    assert set(data["fig2"]) == {"8", "16"}
    if datasets.fashion_mnist_available():
        assert "fashion" in data["fig3"]
    else:
        assert "fashion" in data["fig3_skipped"]


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
    for d in TINY.dims:
        X, Y = dv.fig2_pairs(TINY.n_pairs, d, seed=0)
        for sketch in dv.SKETCHES:
            for kind in ("real", "complex"):
                r = res["fig2"][str(d)][sketch][kind]
                for k, p in enumerate(TINY.degrees):
                    exact = _exact_mse(X, Y, p, sketch, kind == "complex")
                    np.testing.assert_allclose(r["analytic"][k], exact, rtol=1e-10)
                    # low degrees: light enough tails for a Monte Carlo check
                    z = (r["mc"][k] - exact) / r["mc_se"][k]
                    assert abs(z) < 4.5, (d, sketch, kind, p, r["mc"][k], exact)
            ratio = np.array(res["fig2"][str(d)][sketch]["complex"]["analytic"]) / np.array(
                res["fig2"][str(d)][sketch]["real"]["analytic"]
            )
            assert np.all(ratio < 1) and np.all(np.diff(ratio) < 0)


def test_fig3_ratios_on_digits(tiny_run):
    _, res = tiny_run
    e = res["fig3"]["digits"]
    assert e["d"] == 64 and e["d_padded"] == 64
    for p in TINY.fig3_degrees:
        r = np.asarray(e["ratios"][str(p)])
        assert r.shape == (TINY.fig3_pairs,) and np.all(np.isfinite(r)) and np.all(r > 0)
        assert e["pct_below_1"][str(p)] == 100.0
        assert np.all(np.asarray(e["ratios_real_part"][str(p)]) > 0)
    assert e["median"]["3"] < e["median"]["2"]


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
