"""Feature-map benchmark: ``python benchmarks/bench_features.py [--quick]``.

Thin wrapper around :mod:`kernelkit.experiments.bench_features` (also run by
``kernelkit bench features``); see that module for what is timed and how.
"""

from __future__ import annotations

import argparse

from kernelkit.experiments import bench_features


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=bench_features.DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (seconds)")
    args = parser.parse_args(argv)
    return bench_features.run(quick=args.quick)


if __name__ == "__main__":
    main()
