"""Dot-product feature-map benchmark: ``python benchmarks/bench_dot_product.py [--quick]``.

Thin wrapper around :mod:`kernelkit_experiments.bench.bench_dot_product` (also run by
``kernelkit bench dot-product``); see that module for what is timed and how.
"""

from __future__ import annotations

import argparse

from kernelkit_experiments.bench import bench_dot_product


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=bench_dot_product.DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (seconds)")
    args = parser.parse_args(argv)
    return bench_dot_product.run(quick=args.quick)


if __name__ == "__main__":
    main()
