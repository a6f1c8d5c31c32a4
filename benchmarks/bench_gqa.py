"""Grouped-query attention benchmark: ``python benchmarks/bench_gqa.py [--quick]``.

Bidirectional ``linear_attention(q, k, v, ..., enable_gqa=True)`` with ``Hq = 32`` query
heads and ``Hkv = 8`` key / value heads (batch 1, L = S = 4096, d = e = 64, M = 256,
float32, CPU, 2 threads) for ``positive`` and ``sderf`` (moments shared by the heads),
in the same run, against the same call on keys and values repeated over the query
groups (``repeat_interleave``, as ``linear_attention`` does where the key features
differ per query head): the grouped call forms the key features and ``phi(K)^T [V, 1]``
once per key head. The peer is exact attention with the same heads, torch's
``scaled_dot_product_attention(..., enable_gqa=True)``. Times the forward without autograd
and forward + backward, minimum over alternating rounds; prints the ratios (grouped /
repeat, SDPA / grouped), and the
peak-RSS growth of one forward (+ backward) in a fresh subprocess per method.
``--quick``: L = 1024, 3 rounds, no subprocesses.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

from _peak_rss import start_peak_rss
from kernelkit.attention import attention_moments, linear_attention
from kernelkit.features.favor import Moments

HQ, HKV, D, M = 32, 8, 64, 256
MAPS = ("positive", "sderf")
METHODS = ("grouped", "repeat", "sdpa")


def _inputs(L, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, HQ, L, D, generator=g)
    k = torch.randn(1, HKV, L, D, generator=g)
    v = torch.randn(1, HKV, L, D, generator=g)
    return q, k, v


def _moments(name):
    if name != "sderf":
        return None
    qc, kc, _ = _inputs(256, seed=1)  # calibration data
    mom = attention_moments(qc, kc.repeat_interleave(HQ // HKV, dim=1))  # (1, Hq, ...)
    # one set for every head: the key features are then shared by each query group
    return Moments(*(t.mean((0, 1)) for t in (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)))


def _call(method, name, q, k, v, mom, backward):
    if method == "sdpa":  # the exact peer, the same grouped heads
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        if backward:
            out.sum().backward()
        return out
    if method == "repeat":  # keys and values repeated over the groups (before the call)
        k, v = k.repeat_interleave(HQ // HKV, dim=1), v.repeat_interleave(HQ // HKV, dim=1)
    gqa = method == "grouped"
    out = linear_attention(
        q, k, v, name, M, random_state=0, moments=mom, enable_gqa=gqa, check_finite=False
    )
    if backward:
        out.sum().backward()
    return out


def _run(method, name, inputs, mom, backward):
    q, k, v = inputs
    if backward:
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        return _call(method, name, q, k, v, mom, True)
    with torch.no_grad():
        return _call(method, name, q, k, v, mom, False)


def _rss_child(method, name, L, backward):
    # fresh process: peak RSS of one call above the RSS before (KiB), inputs made before
    torch.set_num_threads(2)
    inputs, mom = _inputs(L), _moments(name)
    _run(method, name, _inputs(64), mom, backward)  # warm-up (lazy initialisation)
    before, peak = start_peak_rss()
    _run(method, name, inputs, mom, backward)
    print(json.dumps({"rss_kib": max(0, peak() - before)}))


def _peak_rss(method, name, L, backward):
    cmd = [sys.executable, __file__, "--_rss", method, name, str(L), str(int(backward))]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])["rss_kib"]


def run(quick=False, rss=True, rounds=None):
    L = 1024 if quick else 4096
    rounds = rounds or (3 if quick else 5)
    torch.set_num_threads(2)
    inputs = _inputs(L)
    load = os.getloadavg()[0]
    print(
        f"bidirectional GQA: Hq = {HQ}, Hkv = {HKV}, batch 1, L = S = {L}, d = e = {D}, "
        f"M = {M}, float32, CPU, 2 threads; min of {rounds} alternating rounds"
    )
    print(f"(load average before the run: {load:.1f} on {os.cpu_count()} CPUs)")
    print(
        f"{'map':9s} {'pass':9s} {'grouped s':>10s} {'repeat s':>9s} {'ratio':>6s} "
        f"{'SDPA s':>8s} {'SDPA/grouped':>13s} {'grouped RSS+':>13s} {'repeat RSS+':>12s} "
        f"{'SDPA RSS+':>10s}"
    )
    rows = {}
    for name in MAPS:
        mom = _moments(name)
        for backward in (False, True):
            for method in METHODS:  # warm-up
                _run(method, name, inputs, mom, backward)
            times = {m: [] for m in METHODS}
            for _ in range(rounds):
                for method in METHODS:
                    t0 = time.perf_counter()
                    _run(method, name, inputs, mom, backward)
                    times[method].append(time.perf_counter() - t0)
            best = {m: min(t) for m, t in times.items()}
            peak = {m: _peak_rss(m, name, L, backward) if rss else None for m in METHODS}
            key = (name, "fwd+bwd" if backward else "forward")
            rows[key] = {"s": best, "rss_kib": peak}
            txt = {m: "-" if peak[m] is None else f"{peak[m] / 1024:.0f} MiB" for m in METHODS}
            print(
                f"{name:9s} {key[1]:9s} {best['grouped']:10.3f} {best['repeat']:9.3f} "
                f"{best['grouped'] / best['repeat']:6.2f} {best['sdpa']:8.3f} "
                f"{best['sdpa'] / best['grouped']:13.2f} {txt['grouped']:>13s} "
                f"{txt['repeat']:>12s} {txt['sdpa']:>10s}"
            )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description="Bidirectional GQA: grouped vs repeated keys.")
    parser.add_argument("--quick", action="store_true", help="L = 1024, no RSS (seconds)")
    parser.add_argument("--no-rss", action="store_true", help="skip the RSS subprocesses")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds per method")
    parser.add_argument("--_rss", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args._rss:
        method, name, L, backward = args._rss
        return _rss_child(method, name, int(L), bool(int(backward)))
    return run(quick=args.quick, rss=not (args.no_rss or args.quick), rounds=args.rounds)


if __name__ == "__main__":
    main()
