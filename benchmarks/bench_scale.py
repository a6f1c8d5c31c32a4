"""Scale-out benchmark: ``python benchmarks/bench_scale.py [--quick]``.

Thin wrapper around :mod:`kernelkit_experiments.bench.bench_scale` (also run by
``kernelkit bench scale``); see that module for what is timed and how.
"""

from __future__ import annotations

import argparse

from kernelkit_experiments.bench import bench_scale


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=bench_scale.DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (seconds)")
    args = parser.parse_args(argv)
    return bench_scale.run(quick=args.quick)


if __name__ == "__main__":
    main()
