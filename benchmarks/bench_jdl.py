"""JDL benchmark: ``python benchmarks/bench_jdl.py [--quick]``.

Thin wrapper around :mod:`kernelkit.experiments.bench_jdl` (also run by
``kernelkit bench jdl``); see that module for what is timed and how.
"""

from __future__ import annotations

import argparse

from kernelkit.experiments import bench_jdl


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=bench_jdl.DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (seconds)")
    args = parser.parse_args(argv)
    return bench_jdl.run(quick=args.quick)


if __name__ == "__main__":
    main()
