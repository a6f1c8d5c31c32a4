"""The benchmarks' timer: round-robin rounds, each timed call right after a run of the
same call (its steady state), long calls without it."""

from __future__ import annotations

from kernelkit_experiments.bench import _timing


def _fake_clock(monkeypatch):
    """A clock that moves by the calls' costs (and 1 us per read, so that a busy-wait on it
    ends)."""
    clock = [0.0]

    def read():
        clock[0] += 1e-6
        return clock[0]

    monkeypatch.setattr(_timing.time, "perf_counter", read)
    return clock


def _recorder(log, name, cost=0.0, clock=None):
    def fn():
        log.append(name)
        if clock is not None:
            clock[0] += cost

    return fn


def test_each_timed_call_follows_runs_of_itself(monkeypatch):
    log, clock = [], _fake_clock(monkeypatch)
    # every call of "a" or "b" takes 0.05 s: warming for 0.2 s is four calls
    fns = {n: _recorder(log, n, 0.05, clock) for n in ("a", "b")}
    out = _timing.time_calls(fns, repeats=3, settle_s=0.2)
    assert set(out) == {"a", "b"}
    assert all(abs(v["min"] - 0.05) < 1e-4 and abs(v["median"] - 0.05) < 1e-4 for v in out.values())
    # warm-up a, b; then per round: a x4 (warming) a (timed), b x4, b
    rounds = ["a"] * 5 + ["b"] * 5
    assert log == ["a", "b"] + rounds * 3


def test_no_warming_without_a_settle_time_or_for_long_calls(monkeypatch):
    log, clock = [], _fake_clock(monkeypatch)
    fns = {
        "short": _recorder(log, "short", 0.01, clock),
        "long": _recorder(log, "long", 3.0, clock),
    }
    _timing.time_calls(fns, repeats=2, settle_s=0.0)
    assert log == ["short", "long"] * 3
    log.clear()
    _timing.time_calls(fns, repeats=2, settle_s=0.05)
    # "long" (3 s >= LONG_CALL_S) is timed as it comes; "short" after 0.05 s of itself
    assert _timing.LONG_CALL_S <= 3.0
    assert log == ["short", "long"] + (["short"] * 6 + ["long"]) * 2


def test_warm_runs_at_least_once_and_for_the_time_given(monkeypatch):
    log, clock = [], _fake_clock(monkeypatch)
    fn = _recorder(log, "f", 0.3, clock)
    _timing.warm(fn, 0.2)
    assert log == ["f"]  # one call already takes longer than 0.2 s
    log.clear()
    _timing.warm(_recorder(log, "g", 0.05, clock), 0.2)
    assert log == ["g"] * 4
    log.clear()
    _timing.warm(fn, 0.0)
    assert log == []
