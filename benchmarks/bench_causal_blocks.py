"""Block size of the causal kernel: ``python benchmarks/bench_causal_blocks.py [--device
cuda] [--lengths 16384 65536] [--rows 1024 2048 4096 8192] [--quick]``.

Causal ``linear_attention`` (batch 1, 8 heads, d = e = 64, M = 256, float32) with the
rows per block of the causal kernel set to each of ``--rows`` (whole chunks, at most L;
the setting replaces ``kernelkit.attention._linear.block_rows_for`` for the run: an
internal setting, which this script exists to measure), for FAVOR+ (``positive``) and
FAVOR# (``sderf``, moments passed). Prints the minimum over 5 calls of the forward
without autograd and of the forward + backward (the device synchronised after each
call), and on CUDA the peak extra memory of one forward (``torch.cuda.max_memory_allocated``
above the memory in use before it). The default block
(:func:`kernelkit.attention._linear.block_rows_for`) is printed for reference: on the CPU
at most 512 rows (cache-sized), on accelerators a 64 MiB block of features. ``--quick``:
L = 1024 and 2048, rows 256 and 1024.
"""

from __future__ import annotations

import argparse
import time

import torch

from kernelkit.attention import _linear, attention_moments, linear_attention

H, D, M = 8, 64, 256
MAPS = ("positive", "sderf")


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _min_ms(fn, device, reps=5):
    fn()
    _sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def _peak_mib(fn, device):
    if device.type != "cuda":
        return None
    _sync(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = fn()
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del out
    return peak / 2**20


def _measure(q, k, v, kw, rows, device):
    """(forward ms, forward + backward ms, peak extra MiB or None) with blocks of ``rows``
    rows (whole chunks, at most the sequence)."""
    default = _linear.block_rows_for

    def fixed(L, chunk, *_shape):  # (L, chunk, B, M, itemsize, device, values)
        return chunk * max(1, min(rows, L) // chunk)

    def call():
        return linear_attention(q, k, v, **kw)

    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

    def call_backward():
        linear_attention(qg, kg, vg, **kw).sum().backward()

    _linear.block_rows_for = fixed
    try:
        with torch.no_grad():
            fwd = _min_ms(call, device)
            mib = _peak_mib(call, device)
        both = _min_ms(call_backward, device)
    finally:
        _linear.block_rows_for = default
    return fwd, both, mib


def run(device=None, lengths=(16384, 65536), rows=(1024, 2048, 4096, 8192)) -> list:
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    default = _linear.block_rows_for
    print(
        f"causal block size: batch 1, {H} heads, d={D}, M={M}, float32, device={device}, "
        f"torch {torch.__version__}"
    )
    results = []
    for L in lengths:
        g = torch.Generator(device=device).manual_seed(0)
        q, k = (torch.randn(1, H, L, D, device=device, generator=g) * 0.3 for _ in range(2))
        v = torch.randn(1, H, L, D, device=device, generator=g)
        moments = attention_moments(q, k)
        rows_default = default(L, 64, H, M, 4, device, D + 1)
        print(f"L={L}: default block {rows_default} rows")
        for name in MAPS:
            kw = dict(feature_map=name, n_features=M, is_causal=True, random_state=0)
            if name == "sderf":
                kw["moments"] = moments
            for cap in rows:
                fwd, both, mib = _measure(q, k, v, kw, cap, device)
                mem = "" if mib is None else f", peak extra memory {mib:.0f} MiB"
                print(
                    f"  {name:8s} {cap:5d} rows per block: forward {fwd:8.2f} ms, "
                    f"forward+backward {both:8.2f} ms{mem}"
                )
                results.append((L, name, cap, fwd, both, mib))
    return results


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description="causal kernel: time and memory per block size")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if any)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16384, 65536])
    parser.add_argument("--rows", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--quick", action="store_true", help="L = 1024, 2048; rows 256, 1024")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.rows = [1024, 2048], [256, 1024]
    return run(args.device, args.lengths, args.rows)


if __name__ == "__main__":
    main()
