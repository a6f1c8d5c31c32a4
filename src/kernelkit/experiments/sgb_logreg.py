"""Alias of :mod:`kernelkit_experiments.sgb_logreg` for ``bench_sgb``, which imports it
relatively; it goes when the benchmarks move into the experiments package."""

import sys

from . import _moved

sys.modules[__name__] = _moved("sgb_logreg")
