"""Recurrent decoding benchmark: ``python benchmarks/bench_decoding.py [--quick]``.

Generates ``n`` tokens one at a time (batch 1, 8 heads, d = e = 64, float32, CPU, 2
threads) with

* kernelkit's :func:`~kernelkit.attention.linear_attention_step` (``positive`` and
  ``sderf``, M = 256): a constant-size state;
* ``torch.nn.functional.scaled_dot_product_attention`` with a preallocated KV cache of
  ``n`` positions (as a static cache): each step writes its key and value at ``t`` and
  attends to the first ``t + 1`` entries;
* both with grouped-query attention (``enable_gqa``, 2 key / value heads for the 8 query
  heads): the ``positive`` state is kept per key head, the cache holds 2 heads.

All are timed in the same run on the same pre-drawn inputs (attention only, no
projections), in ``--rounds`` rounds (default 3) that decode the ``n`` tokens with every
method in turn (the order alternating between rounds); each method's figures come from
its fastest round (least total time), so one stall of a shared machine does not decide
a row. Prints tokens per second, the ratio to SDPA, the per-token time around
t = 512 and t = n (constant for the state, growing for the cache; t = n / 4 and n with
``--quick``), the bytes of the state vs the cache at t = n and the peak-RSS growth of a
fresh subprocess per method.
The kernelkit steps update the state in place (``inplace=True``), as the cache is
written in place.

Prefill: a prompt of ``P`` tokens (2048; 256 with ``--quick``) given to
:func:`~kernelkit.attention.linear_attention_step` as one block (``positive`` and
``sderf``), against SDPA writing the prompt into the cache and attending causally
(``is_causal=True``), and against kernelkit's causal ``linear_attention`` forward on the
same prompt (the same work without a state to return); minimum of interleaved rounds.
``--quick``: n = 512 and no RSS subprocesses (seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from _peak_rss import start_peak_rss
from kernelkit.attention import (
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)

H, D, M = 8, 64, 256
HKV = 2  # key / value heads of the GQA rows
METHODS = ("positive", "sderf", "sdpa", "positive_gqa", "sdpa_gqa")


def _inputs(n, seed=0, hkv=H):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, 1, H, D, generator=g)  # (n, 1, H, d)
    k, v = (torch.randn(n, 1, hkv, D, generator=g) for _ in range(2))  # (n, 1, Hkv, d)
    return q, k, v


def _moments(method):
    # FAVOR# statistics from calibration data (other tokens than the decoded ones)
    if method != "sderf":
        return None
    qc, kc, _ = _inputs(256, seed=1)
    return attention_moments(qc[:, 0].transpose(0, 1), kc[:, 0].transpose(0, 1))  # (H, ..)


def _decode(method, n, inputs=None, moments=None):
    """Per-token wall times (seconds, list of n) and the bytes of the state / cache.

    The empty state (features prepared, FAVOR# fitted from ``moments``) or the zeroed
    cache of n positions is allocated here, before the loop."""
    gqa = method.endswith("_gqa")
    hkv = HKV if gqa else H
    q, k, v = _inputs(n, hkv=hkv) if inputs is None else inputs
    if method.startswith("sdpa"):
        state = torch.zeros(2, 1, hkv, n, D)  # [K, V], each (1, Hkv, n, d): a static cache
    else:
        moments = _moments(method) if moments is None else moments
        state = init_decoding_state(
            (1, H),
            D,
            method.removesuffix("_gqa"),
            M,
            random_state=0,
            moments=moments,
            enable_gqa=gqa,
            num_kv_heads=HKV if gqa else None,
        )
    times = []
    with torch.no_grad():
        if method.startswith("sdpa"):
            K, V = state
            for t in range(n):
                t0 = time.perf_counter()
                K[:, :, t] = k[t]
                V[:, :, t] = v[t]
                F.scaled_dot_product_attention(
                    q[t][:, :, None], K[:, :, : t + 1], V[:, :, : t + 1], enable_gqa=gqa
                )  # (1, H, 1, d)
                times.append(time.perf_counter() - t0)
            return times, state.nbytes
        for t in range(n):
            t0 = time.perf_counter()
            _, state = linear_attention_step(
                q[t], k[t], v[t], state, check_finite=False, inplace=True, enable_gqa=gqa
            )
            times.append(time.perf_counter() - t0)
        return times, state.nbytes()


def _prefill_calls(P):
    """name -> callable prefilling a prompt of P tokens (batch 1, H heads), no grad."""
    q, k, v = (t[:, 0].transpose(0, 1)[None].contiguous() for t in _inputs(P))  # (1, H, P, d)
    calls = {}
    for method in ("positive", "sderf"):
        moments = _moments(method)

        def step(method=method, moments=moments):
            state = init_decoding_state(
                (1, H), D, method, M, random_state=0, moments=moments
            )  # the empty state: part of a prefill
            return linear_attention_step(q, k, v, state, check_finite=False)

        def forward(method=method, moments=moments):
            return linear_attention(
                q, k, v, feature_map=method, n_features=M, is_causal=True,
                random_state=0, moments=moments, check_finite=False,
            )  # fmt: skip

        calls[f"kernelkit {method} step (block)"] = step
        calls[f"kernelkit {method} causal forward"] = forward
    cache = torch.zeros(2, 1, H, P, D)  # a static cache of the prompt's length

    def sdpa():
        cache[0], cache[1] = k, v
        return F.scaled_dot_product_attention(q, cache[0], cache[1], is_causal=True)

    calls["SDPA causal + KV cache"] = sdpa
    return calls


def prefill(P, rounds=5):
    """Minimum prefill time (ms) of every call of :func:`_prefill_calls`, interleaved."""
    calls = _prefill_calls(P)
    best = dict.fromkeys(calls, float("inf"))
    with torch.no_grad():
        for fn in calls.values():  # warm-up
            fn()
        for _ in range(rounds):
            for name, fn in calls.items():
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], 1e3 * (time.perf_counter() - t0))
    sd = best["SDPA causal + KV cache"]
    print(f"\nprefill of a {P}-token prompt (min of {rounds} interleaved rounds):")
    print(f"{'call':34s} {'ms':>8s} {'SDPA / call':>12s}")
    for name, ms in best.items():
        print(f"{name:34s} {ms:8.2f} {sd / ms:11.2f}x")
    return best


def _rss_child(method, n):
    # fresh process: peak RSS of allocating the state / cache and decoding, above the RSS
    # before (KiB); inputs and calibration moments are made before
    torch.set_num_threads(2)
    _decode(method, 16)  # warm-up (lazy initialisation of kernels)
    inputs = _inputs(n, hkv=HKV if method.endswith("_gqa") else H)
    moments = _moments(method)
    before, peak = start_peak_rss()
    _decode(method, n, inputs, moments)
    print(json.dumps({"rss_kib": max(0, peak() - before)}))


def _peak_rss(method, n):
    cmd = [sys.executable, __file__, "--_rss", method, "--n", str(n)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])["rss_kib"]


def _window(times, t, w=64):
    # mean per-token time (microseconds) over the w steps ending at t
    sl = times[max(0, t - w) : t]
    return 1e6 * sum(sl) / len(sl)


def decode_rounds(n, rounds, methods=METHODS, decode=None):
    """Decode ``n`` tokens with every method, ``rounds`` times, the methods alternating
    within each round (so that each sees the same machine load, as a round-robin timing
    does); per method, the per-token times of its fastest round (least total time) and
    the bytes of its state / cache."""
    decode = decode or _decode
    best = {}
    for r in range(rounds):
        for method in methods if r % 2 == 0 else methods[::-1]:  # alternate who goes first
            times, nbytes = decode(method, n)
            if method not in best or sum(times) < sum(best[method][0]):
                best[method] = (times, nbytes)
    return {m: best[m] for m in methods}


def run(quick=False, rss=True, rounds=3):
    n = 512 if quick else 4096
    t1 = 512 if n > 512 else n // 4  # early window for the per-token time
    load = os.getloadavg()[0]
    torch.set_num_threads(2)
    for method in METHODS:  # warm-up
        _decode(method, 16)
    rows = {}
    for method, (times, nbytes) in decode_rounds(n, rounds).items():
        rows[method] = {
            "tok_s": n / sum(times),
            "us_t1": _window(times, t1),
            "us_n": _window(times, n),
            "bytes": nbytes,
            "rss_kib": _peak_rss(method, n) if rss else None,
        }
    print(
        f"decoding {n} tokens, batch 1, {H} heads (GQA rows: {HKV} key / value heads), "
        f"d = e = {D}, M = {M}, float32, CPU, 2 threads; per method its fastest of {rounds} "
        "rounds (least total time; the methods alternate within each round)"
    )
    print(f"(load average before the run: {load:.1f} on {os.cpu_count()} CPUs)")
    head = (
        f"{'method':22s} {'tokens/s':>9s} {'vs SDPA':>8s} {'us/tok t=' + str(t1):>13s} "
        f"{'us/tok t=' + str(n):>13s} {'state/cache':>12s} {'peak RSS +':>11s}"
    )
    print(head)
    sd = rows["sdpa"]["tok_s"]
    names = {
        "positive": "kernelkit positive",
        "sderf": "kernelkit sderf",
        "sdpa": "SDPA + static KV cache",
        "positive_gqa": "kernelkit positive GQA",
        "sdpa_gqa": "SDPA GQA static cache",
    }
    for method, r in rows.items():
        rss_txt = "-" if r["rss_kib"] is None else f"{r['rss_kib'] / 1024:.1f} MiB"
        print(
            f"{names[method]:22s} {r['tok_s']:9.0f} {r['tok_s'] / sd:7.2f}x "
            f"{r['us_t1']:13.1f} {r['us_n']:13.1f} {r['bytes'] / 2**20:8.2f} MiB {rss_txt:>11s}"
        )
    rows["prefill"] = prefill(256 if quick else 2048)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description="Recurrent linear-attention decoding vs SDPA.")
    parser.add_argument("--quick", action="store_true", help="512 tokens, no RSS (seconds)")
    parser.add_argument("--no-rss", action="store_true", help="skip the RSS subprocesses")
    parser.add_argument(
        "--rounds", type=int, default=3, help="decoding rounds; per method the fastest (3)"
    )
    parser.add_argument("--_rss", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=4096, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._rss:
        return _rss_child(args._rss, args.n)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    return run(quick=args.quick, rss=not (args.no_rss or args.quick), rounds=args.rounds)


if __name__ == "__main__":
    main()
