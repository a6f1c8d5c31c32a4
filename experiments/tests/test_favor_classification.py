"""favor-classification experiment (FAVOR# Sec. 5.2): a tiny end-to-end run and the engine."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelkit.estimators import NadarayaWatsonClassifier
from kernelkit_experiments import favor_classification as fc


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("favor_classification")
    cfg = fc.Config(datasets=("iris", "wine"), n_seeds=2, Ms=(16, 32))
    return out, cfg, fc._run(cfg, out, seed=0, quick=True, progress=False)


def test_module_interface():
    assert fc.NAME == "favor-classification"
    assert isinstance(fc.DESCRIPTION, str) and fc.DESCRIPTION
    assert callable(fc.run)
    assert fc.PAPER.n_seeds == 50 and fc.FULL.n_seeds >= 20 and fc.FULL.Ms == (16, 32, 64, 128)
    assert len(fc.FULL.sigmas) == 10
    np.testing.assert_allclose([fc.FULL.sigmas[0], fc.FULL.sigmas[-1]], [1e-2, 1e2])
    assert set(fc.FULL.methods) == {"trig", "positive", "gerf", "saderf", "aderf", "sderf"}
    assert len(fc.FULL.datasets) >= 6 and {"mnist", "fashion_mnist"} <= set(fc.FULL.datasets)


@pytest.mark.slow
def test_outputs_written(tiny_run):
    out, cfg, _ = tiny_run
    for name in ("report.md", "results.json", "average_accuracy.png", "accuracy_per_dataset.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    report = (out / "report.md").read_text()
    assert "holds on our data?" in report and "SDERF best on most" in report
    for name in ("iris", "wine"):
        assert f"### {name}" in report
    data = json.loads((out / "results.json").read_text())
    assert data["experiment"] == "favor-classification" and data["quick"] is True
    assert isinstance(data["claim"]["holds"], bool)
    assert data["claim"]["pairs"] == 2 * len(cfg.Ms)
    for name in ("iris", "wine"):
        methods = data["datasets"][name]["methods"]
        assert set(methods) == set(cfg.methods)
        for m in cfg.methods:
            test = np.asarray(methods[m]["test"])
            assert test.shape == (len(cfg.Ms), cfg.n_seeds)
            assert ((test >= 0) & (test <= 1)).all()
            assert np.asarray(methods[m]["val_mean"]).shape == (len(cfg.sigmas), len(cfg.Ms))
            assert all(s in cfg.sigmas for s in methods[m]["best_sigma"])


@pytest.mark.slow
def test_exact_kernel_accuracy_high(tiny_run):
    _, _, res = tiny_run
    for name in ("iris", "wine"):
        ex = res["results"]["datasets"][name]["exact"]
        assert max(ex["val"]) >= 0.85, ex  # at the validation-selected sigma
        assert max(ex["test_per_sigma"]) >= 0.85, ex
        assert 0.0 <= ex["test"] <= 1.0


def test_split_is_90_5_5_and_standardised_on_train():
    d = fc.prepare_dataset("wine", fc.Config(), seed=0)
    info = d["info"]
    assert (info["n_train"], info["n_val"], info["n_test"]) == (160, 9, 9)
    np.testing.assert_allclose(d["Xtr"].mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(d["Xtr"].std(0), 1, atol=1e-12)
    d2 = fc.prepare_dataset("wine", fc.Config(), seed=0)
    np.testing.assert_array_equal(d["Xte"], d2["Xte"])  # fixed for every method
    capped = fc.prepare_dataset("digits", fc.Config(max_samples={"digits": 300}), seed=0)
    assert capped["info"]["n"] == 300 and capped["info"]["subsampled"]


@pytest.mark.parametrize("method", fc.METHODS)
def test_engine_matches_classifier(method):
    """rf_accuracies at M = max(Ms) equals NadarayaWatsonClassifier with the same seed."""
    d = fc.prepare_dataset("wine", fc.Config(), seed=1)
    R, target = fc._one_hot(d["ytr"], d["yva"])
    seeds = [fc.feature_seed(1, s) for s in range(3)]
    for sigma in (0.3, 3.0):
        acc = fc.rf_accuracies(method, d["Xva"], target, d["Xtr"], R, sigma, seeds, (8, 32))
        ref = [
            NadarayaWatsonClassifier(
                method=method, n_components=32, sigma=sigma, random_state=s, fit_on="batch"
            )
            .fit(d["Xtr"], d["ytr"])
            .score(d["Xva"], d["yva"])
            for s in seeds
        ]
        np.testing.assert_allclose(acc[1], ref)
        assert acc.shape == (2, 3)


def test_engine_chunks_over_seeds(monkeypatch):
    d = fc.prepare_dataset("iris", fc.Config(), seed=0)
    R, target = fc._one_hot(d["ytr"], d["yva"])
    seeds = list(range(5))
    full = fc.rf_accuracies("sderf", d["Xva"], target, d["Xtr"], R, 1.0, seeds, (4, 16))
    monkeypatch.setattr(fc, "_BLOCK_ELEMENTS", 1)  # one seed per chunk
    np.testing.assert_array_equal(
        fc.rf_accuracies("sderf", d["Xva"], target, d["Xtr"], R, 1.0, seeds, (4, 16)), full
    )


def _fake_results(acc_by_method):
    # acc_by_method: method -> (n_datasets, n_M)
    names = [f"d{i}" for i in range(len(next(iter(acc_by_method.values()))))]
    return names, {
        n: {"methods": {m: {"test_mean": np.asarray(a[i])} for m, a in acc_by_method.items()}}
        for i, n in enumerate(names)
    }


def test_claim_evaluation():
    names, res = _fake_results(
        {"trig": [[0.5, 0.6], [0.7, 0.7]], "sderf": [[0.6, 0.7], [0.7, 0.6]]}
    )
    c = fc.evaluate_claim(res, ("trig", "sderf"), (16, 32), names)
    assert c["pairs"] == 4
    assert c["wins_or_ties"] == {"trig": 2, "sderf": 3}
    assert c["strict_wins"] == {"trig": 1, "sderf": 2}
    assert c["sderf_best_on_most_pairs"] and c["sderf_best_on_average"] and c["holds"]
    assert c["sderf_head_to_head"] == {"trig": {"sderf_better": 2, "tied": 1, "sderf_worse": 1}}
    names, res = _fake_results({"trig": [[0.9, 0.9]], "sderf": [[0.5, 0.95]]})
    c = fc.evaluate_claim(res, ("trig", "sderf"), (16, 32), names)
    assert not c["sderf_best_on_most_pairs"] and not c["holds"]
    assert c["best_on_average_per_M"] == ["trig", "sderf"]


def test_bad_config(tmp_path):
    with pytest.raises(ValueError, match="Unknown data sets"):
        fc._run(fc.Config(datasets=("nope",)), tmp_path, progress=False)
    with pytest.raises(ValueError, match="Unsupported methods"):
        fc._run(fc.Config(datasets=("iris",), methods=("hyperbolic",)), tmp_path, progress=False)
