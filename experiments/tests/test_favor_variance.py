"""``kernelkit reproduce favor-variance`` (FAVOR# Sec. 5.1)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelkit import datasets
from kernelkit.features import ADERF, GERF, SDERF, TrigRF
from kernelkit.kernels import scaled_softmax_kernel
from kernelkit_experiments import favor_variance as fv

# small internal configuration: the regimes the checks need, two sigmas; set pairs are
# the seeds
SMALL = {
    "L": 96,
    "sigmas": (0.3, 1.0),
    "regimes": ("sphere", "heterogen", "digits", "mnist"),
}


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("favor-variance")
    return out, fv.run(out, quick=True, seed=0, progress=False, **SMALL)


def _expected_regimes():
    return list(SMALL["regimes"])


def test_run_writes_report_plots_and_json(small_run):
    out, _ = small_run
    report = (out / "report.md").read_text()
    for name in ("report.md", "results.json", "variance.png", "gaps.png"):
        assert (out / name).is_file()
    assert (out / "variance.png").read_bytes()[:4] == b"\x89PNG"
    assert "variance.png" in report and "holds on our data?" in report
    assert "Not reproducible offline" in report and "cifar10" in report
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "favor-variance" and data["config"]["L"] == SMALL["L"]
    assert len(data["runs"]) >= 5  # a fast run: at least five set pairs
    for regime in _expected_regimes():
        for m in fv.METHODS:
            vals = np.asarray(data["runs"][0][f"{regime} {m} mlrv"], dtype=float)
            assert vals.shape == (2,) and np.all(np.isfinite(vals))
    claims = [c["claim"] for c in data["claims"]]
    assert "SDERF vs GERF on heterogen (paper: heterogen)" in claims
    assert "SDERF vs GERF on digits (paper: mnist)" in claims
    assert not any("cifar10)" in c and "on None" in c for c in claims)


def test_fitted_maps_beat_gerf_on_every_regime(small_run):
    """SDERF <= GERF and SADERF, ADERF <= GERF.

    Guaranteed (and checked per set pair and sigma) for the fitting objective (14), the
    mean log second moment: the fitted maps minimise it in closed form over families that
    contain GERF (GERF ⊂ SADERF ⊂ ADERF, GERF ⊂ SDERF). The plotted mean log(Var/K^2) =
    mean log(m2/K^2 - 1) is a concave function of log m2 per point pair, so the ordering
    of its mean is *not* implied by the ordering of mean log m2; we check it with a small
    tolerance as an empirical fact of these data.
    """
    _, res = small_run
    verdicts = {c["claim"]: c["verdict"] for c in res["claims"]}
    assert verdicts["Objective (14): Positive ≥ GERF ≥ SADERF ≥ ADERF, GERF ≥ SDERF"] == "yes"
    for r in res["runs"]:
        for regime in _expected_regimes():
            m2 = {m: np.asarray(r[f"{regime} {m} m2"]) for m in fv.METHODS}  # (sigmas,)
            tol = 1e-9 * (1 + np.abs(m2["GERF"]))
            assert np.all(m2["SDERF"] <= m2["GERF"] + tol), regime
            assert np.all(m2["ADERF"] <= m2["SADERF"] + tol), regime
            assert np.all(m2["SADERF"] <= m2["GERF"] + tol), regime
            assert np.all(m2["GERF"] <= m2["Positive"] + tol), regime
            # the objective is bounded below by its zero-variance value mean 2 log K
            lower = 2 * np.asarray(r[f"{regime} mean_log_K"])
            assert np.all(m2["SDERF"] >= lower) and np.all(m2["ADERF"] >= lower)
            assert np.all(np.asarray(r[f"{regime} SDERF gap"]) <= 0.05), regime
            assert np.all(np.asarray(r[f"{regime} ADERF gap"]) <= 0.05), regime


def test_gaps_grow_on_asymmetric_and_image_regimes(small_run):
    # at sigma = 1 SDERF beats GERF by several nats where the paper says so, in every pair
    runs = small_run[1]["runs"]
    for regime in ("heterogen", "mnist", "digits"):
        assert max(r[f"{regime} SDERF gap"][-1] for r in runs) < -2.0, regime
    # and is essentially GERF on isotropic data
    assert max(abs(r["sphere SDERF gap"][-1]) for r in runs) < 0.5


def test_pair_statistics_match_public_variance():
    # log(Var/K^2) from the maps' log second moment equals the public variance() path
    rng = np.random.default_rng(3)
    X = 0.3 * rng.standard_normal((40, 64))
    Y = 0.3 * rng.standard_normal((30, 64)) + 0.1
    st = fv.pair_statistics(X, Y)
    K = scaled_softmax_kernel(X, Y, 0.0)
    assert st["mean_log_K"] == pytest.approx(np.log(K).mean(), rel=1e-12)
    for label, cls in (("Trig", TrigRF), ("GERF", GERF), ("ADERF", ADERF), ("SDERF", SDERF)):
        fm = cls(n_features=1, kernel="softmax", random_state=0).fit(X, Y=Y)
        rel = fm.variance(X, Y) / K**2  # (40, 30), M = 1
        assert st[label]["mean_log_rel_var"] == pytest.approx(np.log(rel).mean(), rel=1e-9)
        assert st[label]["log_mean_rel_var"] == pytest.approx(np.log(rel.mean()), rel=1e-9)
        assert st[label]["mean_log_m2"] == pytest.approx(fm.log_objective(X, Y), rel=1e-9)


def test_log_relvar_is_stable():
    t = np.array([1e-12, 1e-3, 0.5, 5.0, 30.0])
    np.testing.assert_allclose(fv._log_relvar(t), np.log(np.expm1(t)), rtol=1e-12)
    big = fv._log_relvar(np.array([800.0, 1e5]))  # expm1 would overflow
    np.testing.assert_allclose(big, [800.0, 1e5])
    assert np.isfinite(fv._log_relvar(np.array([0.0])))


def test_sample_sets():
    rng = np.random.default_rng(0)
    pools = {"digits": datasets.load_digits_images()[0]}
    X, Y = fv.sample_sets("sphere", 50, rng, pools)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0)
    X, Y = fv.sample_sets("heterogen", 4000, rng, pools)
    assert abs(X.mean()) < 0.02 and abs(Y.mean() - 1.0) < 0.02
    X, Y = fv.sample_sets("digits", 100, rng, pools)
    assert X.shape == Y.shape == (100, 64)
    pool_rows = {row.tobytes() for row in pools["digits"]}
    assert all(row.tobytes() in pool_rows for row in np.vstack([X, Y]))
    with pytest.raises(ValueError, match="smaller than"):
        fv.sample_sets("digits", 5000, rng, pools)


def test_missing_fashion_skips_its_regimes(monkeypatch, tmp_path):
    def missing(*args, **kwargs):
        raise datasets.DatasetNotAvailable("install dataset-fashion-mnist")

    monkeypatch.setattr(datasets, "load_fashion_mnist", missing)
    res = fv.run(
        tmp_path,
        quick=True,
        progress=False,
        L=70,
        sigmas=(0.5,),
        regimes=("normal", "mnist/fashion"),
    )
    assert {k.split()[0] for k in res["runs"][0]} == {"normal"}
    report = (tmp_path / "report.md").read_text()
    assert "Skipped regimes" in report and "dataset-fashion-mnist" in report
    assert not any("mnist/fashion" in c["claim"] for c in res["claims"])
