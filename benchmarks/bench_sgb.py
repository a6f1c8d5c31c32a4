"""SPFB / LSPFB benchmark: ``python benchmarks/bench_sgb.py [--quick]``.

Thin wrapper around :mod:`kernelkit_experiments.bench.bench_sgb` (also run by
``kernelkit bench sgb``); see that module for what is timed and how.
"""

from __future__ import annotations

import argparse

from kernelkit_experiments.bench import bench_sgb


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=bench_sgb.DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a minute)")
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads for every method (0: leave the default)",
    )
    args = parser.parse_args(argv)
    if args.blas_threads < 0:
        parser.error(f"--blas-threads must be 0 (the default) or more, got {args.blas_threads}")
    return bench_sgb.run(quick=args.quick, blas_threads=args.blas_threads or None)


if __name__ == "__main__":
    main()
