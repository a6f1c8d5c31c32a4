"""JDL benchmark: ``python benchmarks/bench_jdl.py [--quick] [--exact-fit]``.

Thin wrapper around :mod:`kernelkit_experiments.bench.bench_jdl` (also run by
``kernelkit bench jdl``); see that module for what is timed and how.
"""

from __future__ import annotations

import argparse

from kernelkit_experiments.bench import bench_jdl


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=bench_jdl.DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument(
        "--exact-fit",
        action="store_true",
        help="only the exact fit (l = 1, reg = 1e-6, rel_tol = 1e-2) next to its GEMM",
    )
    args = parser.parse_args(argv)
    return bench_jdl.run(quick=args.quick, exact_fit_only=args.exact_fit)


if __name__ == "__main__":
    main()
