"""Benchmark scripts read by a skeptic: what they measure and print (no timing asserts)."""

from __future__ import annotations

import mmap
import sys
import types
from pathlib import Path

import pytest

from kernelkit_experiments.bench import bench_attention as ba

MiB = 2**20


def _touched_mapping(n_bytes):
    """An anonymous mapping of ``n_bytes`` with every page written (resident). Mapped
    directly, not through malloc: closing it returns its pages to the system whatever the
    allocator's state (a freed NumPy buffer can stay in the heap after earlier tests, and
    a later one then reuses its resident pages without any RSS growth)."""
    m = mmap.mmap(-1, n_bytes)
    page = mmap.PAGESIZE
    for off in range(0, n_bytes, page):
        m[off] = 1
    return m


BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc/self/clear_refs"
)
def test_attention_peak_extra_memory_counts_from_the_current_rss_not_an_earlier_peak():
    # a freed 96 MiB buffer leaves the process's peak 96 MiB above its resident set (as
    # the float32 draws of bfloat16 inputs do); the buffers are mapped and unmapped
    # directly (_touched_mapping), so the test does not depend on the allocator's state
    _touched_mapping(96 * MiB).close()
    extra = ba._peak_extra_bytes(lambda: _touched_mapping(48 * MiB), "cpu")
    # the call adds its 48 MiB array (measured from the RSS: a baseline at the earlier
    # peak reads 0); 4 MiB below for pages the allocator or the interpreter returns in
    # between, 16 MiB above for unrelated allocations of the test process
    assert 44 * MiB <= extra <= 64 * MiB


@pytest.mark.parametrize(
    ("quick", "lengths", "expected"),
    [
        (False, ba.FULL_L, 16384),
        (True, ba.QUICK_L, 2048),
        (False, (1024,), None),  # --lengths 1024: no six probes at L = 16384
        (True, (512,), None),
        (False, (1024, 16384), 16384),
    ],
)
def test_attention_memory_probes_only_at_a_requested_length(quick, lengths, expected):
    assert ba.memory_length(quick, lengths) == expected


def test_attention_run_with_lengths_skips_the_memory_probes(monkeypatch, capsys):
    pytest.importorskip("torch")
    probed = []
    monkeypatch.setattr(ba, "peak_extra_memory", lambda *a, **k: probed.append(a) or 1.0)

    def once(fns, *args, **kwargs):  # each call once, no timing (not what is tested here)
        for fn in fns.values():
            fn()
        return {name: {"min": 1.0, "median": 1.0} for name in fns}

    monkeypatch.setattr(ba, "time_calls", once)
    # one cheap call and no accuracy table: only the memory section is under test
    monkeypatch.setattr(ba, "_calls", lambda *a, **k: {"SDPA": lambda q, k, v: q})
    monkeypatch.setattr(ba, "_accuracy", lambda *a, **k: ({}, None))
    res = ba.run(quick=False, device="cpu", lengths=[32])
    assert probed == [] and res["memory_mib"] == {}
    assert "Peak extra memory not measured" in capsys.readouterr().out


def test_attention_ratio_table_has_the_user_guide_columns():
    names = ["SDPA", "SDPA causal"] + [
        f"kernelkit {label}{suffix}"
        for label in ("FAVOR+", "FAVOR# sderf", "FAVOR# saderf")
        for suffix in ("", " causal")
    ]
    rows = {(n, d) for _, n, d in ba._ratio_rows(dict.fromkeys(names))}
    # the CPU table of docs/guide/attention.md: SDPA time over kernelkit time for
    # bidirectional FAVOR+ and FAVOR# (sderf), causal FAVOR+ and FAVOR# (sderf)
    assert ("SDPA", "kernelkit FAVOR+") in rows
    assert ("SDPA", "kernelkit FAVOR# sderf") in rows
    assert ("SDPA causal", "kernelkit FAVOR+ causal") in rows
    assert ("SDPA causal", "kernelkit FAVOR# sderf causal") in rows
    # the new FAVOR+ row is reported without a target
    assert ba._target("SDPA / kernelkit FAVOR+", "forward", 16384) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lengths": [0]}, "positive integers"),
        ({"lengths": [-3]}, "positive integers"),
        ({"lengths": []}, "positive integers"),
        ({"device": "foo"}, "unknown device"),
        ({"device": "mps"}, "cpu or cuda"),
        ({"dtype": "float64"}, "dtype must be one of"),
    ],
)
def test_attention_bad_arguments_raise_clear_errors(kwargs, message):
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match=message):
        ba.check_args(**kwargs)


def test_attention_cuda_without_cuda_is_a_clear_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ValueError, match="no CUDA device"):
        ba.check_args(device="cuda")


def test_attention_script_reports_bad_lengths_as_a_usage_error(monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("bench_attention", None)
    import bench_attention

    with pytest.raises(SystemExit) as exc:
        bench_attention.main(["--lengths", "0"])
    assert exc.value.code == 2
    assert "lengths must be positive integers" in capsys.readouterr().err


def _bench_script(monkeypatch, name):
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop(name, None)
    return __import__(name)


def test_decoding_rounds_alternate_and_keep_each_methods_fastest_round(monkeypatch):
    bd = _bench_script(monkeypatch, "bench_decoding")
    calls = []

    def fake_decode(method, n):
        r = sum(m == method for m, _ in calls)  # this method's round
        calls.append((method, n))
        stall = 1.0 if (method, r) == ("a", 0) else 0.0  # a stall in a's first round
        return [0.001 * (r + 1) + stall] * n, 8

    best = bd.decode_rounds(4, 3, methods=("a", "b"), decode=fake_decode)
    # every method decodes in every round; the order alternates between rounds
    assert [m for m, _ in calls] == ["a", "b", "b", "a", "a", "b"]
    assert best["a"][0] == [0.002] * 4  # not the stalled round, the fastest of the others
    assert best["b"][0] == [0.001] * 4
    assert all(nbytes == 8 for _, nbytes in best.values())


@pytest.mark.parametrize("name", ["bench_decoding", "bench_gqa"])
def test_decoding_and_gqa_reject_rounds_below_one(monkeypatch, capsys, name):
    mod = _bench_script(monkeypatch, name)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--rounds", "-1"])
    assert exc.value.code == 2
    assert "--rounds must be at least 1" in capsys.readouterr().err


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc/self/clear_refs"
)
def test_peak_rss_growth_is_counted_from_the_current_rss():
    from kernelkit_experiments.bench._timing import start_peak_rss

    _touched_mapping(96 * MiB).close()  # the process's max RSS now exceeds its RSS by 96 MiB
    before, peak = start_peak_rss()
    a = _touched_mapping(48 * MiB)
    growth = (peak() - before) * 1024
    a.close()
    # the 48 MiB array (ru_maxrss growth would read 0); bounds as in the attention test
    assert 44 * MiB <= growth <= 64 * MiB


def test_jdl_out_of_core_reports_the_peak_growth_of_its_own_fit(monkeypatch):
    from kernelkit_experiments.bench import bench_jdl

    # the peak after the fit is 5 MiB above the RSS before it, whatever the process's
    # earlier max RSS (the exact n = 1e6 runs come first in the benchmark)
    monkeypatch.setattr(bench_jdl, "start_peak_rss", lambda: (100, lambda: 100 + 5 * 1024))
    res = bench_jdl._out_of_core_run(3000, 50, 1e-2, 0, dask_input=False)
    assert res["rss_growth_mib"] == 5.0


def test_sgb_rejects_negative_blas_threads(monkeypatch, capsys):
    from kernelkit_experiments.bench import bench_sgb

    monkeypatch.setattr(bench_sgb, "run", lambda **kw: kw)  # nothing is benchmarked
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("bench_sgb", None)
    import bench_sgb as script

    assert script.main(["--blas-threads", "0"])["blas_threads"] is None  # the default
    assert script.main([])["blas_threads"] == 1
    with pytest.raises(SystemExit) as exc:
        script.main(["--blas-threads", "-2"])
    assert exc.value.code == 2
    assert "--blas-threads must be 0" in capsys.readouterr().err


def test_attention_causal_favor_sharp_fits_in_every_timed_call(monkeypatch):
    torch = pytest.importorskip("torch")
    from kernelkit.attention import _maps

    builds, real = [], _maps.build_log_map

    def counting(name, *args):
        builds.append(name)
        return real(name, *args)

    monkeypatch.setattr(_maps, "build_log_map", counting)
    q, k, v, _ = ba._inputs(64, "cpu", 0)
    with torch.no_grad():
        # the benchmark makes its calls anew per length and mode: no call of any of them
        # may reuse an earlier call's fit (a training step refits: its statistics move)
        for _ in range(2):
            fn = ba._calls(64, "cpu", 0, set(), False)["kernelkit FAVOR# sderf causal"]
            for _ in range(3):
                fn(q, k, v)
    assert builds.count("sderf") == 6


def test_sgb_convergence_seconds_count_the_fit_outside_its_epochs(monkeypatch):
    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    sys.modules.pop("bench_sgb_convergence", None)
    import bench_sgb_convergence as bsc

    clock = [100.0]

    class FakeBound:  # set-up 2 s outside time_history_, then epochs of 1 s each
        def __init__(self, **kw):
            pass

        def fit(self, X, y):
            clock[0] += 2.0 + 3.0
            self.loss_history_ = [4.0, 2.0, 1.0, 1.0]
            self.time_history_ = [0.0, 1.0, 2.0, 3.0]
            self.switch_epoch_, self.n_iter_ = None, 3
            return self

    monkeypatch.setattr(bsc, "BoundLogisticRegression", FakeBound)
    monkeypatch.setattr(bsc, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    res = bsc.run_bound(None, None, 1e-3, True, 10, 1.0, "spfb", 10, 60.0)
    # the target (gap 0) at epoch 2, 2 s of epochs, plus the 2 s outside them: what a
    # wall-clock timing of a fit stopped there gives, as the L-BFGS peer's seconds do
    assert res["epochs"] == 2
    assert res["seconds"] == 4.0


def test_attention_accuracy_check_forms_exact_attention_for_a_few_query_rows(monkeypatch):
    # `bench_attention.py --lengths 16384` was killed for memory: the float64 exact
    # reference of all L query rows needs 8 H L^2 bytes (17 GiB). Only ACCURACY_ROWS
    # rows are formed, and the errors are those of the same rows of every output.
    torch = pytest.importorskip("torch")
    import kernelkit.kernels as kernels
    from kernelkit.attention import linear_attention

    seen = []
    exact_fn = kernels.softmax_attention

    def spy(q, k, v, **kw):
        seen.append(tuple(q.shape))
        return exact_fn(q, k, v, **kw)

    monkeypatch.setattr(kernels, "softmax_attention", spy)
    monkeypatch.setattr(ba, "ACCURACY_ROWS", 5)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, ba.D, generator=g) * 0.5 for _ in range(3))
    errs, _ = ba._accuracy(q, k, v, seed=0, performer_ok=False)
    assert seen == [(1, 2, 5, ba.D)]
    ours = linear_attention(q, k, v, feature_map="positive", n_features=ba.M, random_state=0)
    exact = exact_fn(q[..., :5, :].double(), k.double(), v.double())
    want = float(torch.linalg.vector_norm(ours[..., :5, :].double() - exact) / exact.norm())
    assert errs["kernelkit FAVOR+"] == pytest.approx(want, rel=1e-12)
    assert 0 < want < 1


def test_a_report_removes_the_results_of_an_earlier_run(tmp_path):
    # a rerun that failed after its first figure left the earlier report.md and
    # results.json beside its own figures: `kernelkit report` listed the mix as "ok"
    from kernelkit_experiments._report import Report

    (tmp_path / "report.md").write_text("# old\n")
    (tmp_path / "results.json").write_text('{"experiment": "x"}')
    (tmp_path / "other.txt").write_text("kept")
    rep = Report(tmp_path, "x", quick=True)
    assert not (tmp_path / "report.md").exists()
    assert not (tmp_path / "results.json").exists()
    assert (tmp_path / "other.txt").read_text() == "kept"
    rep.write()
    assert (tmp_path / "results.json").exists()
