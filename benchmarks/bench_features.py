"""Feature-map benchmark: ``python benchmarks/bench_features.py [--quick] [--compare REF]``.

Thin wrapper around :mod:`kernelkit_experiments.bench.bench_features` (also run by
``kernelkit bench features``); see that module for what is timed and how.
``--compare REF`` adds the before / after table of every feature map against git revision
``REF`` (e.g. ``--compare a850c55``), timed in two worker processes.
"""

from __future__ import annotations

import argparse

from kernelkit_experiments.bench import bench_features


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=bench_features.DESCRIPTION)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (seconds)")
    parser.add_argument(
        "--compare",
        metavar="REF",
        default=None,
        help="also time every feature map at git revision REF (before) against the current "
        "code (after)",
    )
    parser.add_argument(
        "--compare-only",
        action="store_true",
        help="with --compare: print only the before / after table",
    )
    args = parser.parse_args(argv)
    if args.compare_only:
        if args.compare is None:
            parser.error("--compare-only needs --compare REF")
        return bench_features.compare(args.compare, quick=args.quick)
    return bench_features.run(quick=args.quick, compare_ref=args.compare)


if __name__ == "__main__":
    main()
