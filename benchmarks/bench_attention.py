"""Linear-attention benchmark: ``python benchmarks/bench_attention.py [--quick] [--device
cuda] [--dtype bfloat16]``.

Thin wrapper around :mod:`kernelkit_experiments.bench.bench_attention` (also run by
``kernelkit bench attention``); see that module for what is timed and how.
"""

from __future__ import annotations

import argparse

from kernelkit_experiments.bench import bench_attention


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=bench_attention.DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (seconds)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if any)")
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=bench_attention.DTYPES,
        help="dtype of q, k, v (default float32; bfloat16 is the usual CUDA setting)",
    )
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=None, help="sequence lengths L to time"
    )
    args = parser.parse_args(argv)
    try:
        bench_attention.check_args(args.device, args.dtype, args.lengths)
    except ValueError as exc:
        parser.error(str(exc))
    return bench_attention.run(
        quick=args.quick, device=args.device, dtype=args.dtype, lengths=args.lengths
    )


if __name__ == "__main__":
    main()
