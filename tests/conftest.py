"""Shared test fixtures: array backends and the hypothesis profile.

``backend`` parametrises a test over NumPy and PyTorch (skipped where torch is not
importable). Tests build their data with NumPy and move it with ``backend.asarray``.
``cluster_client`` is a two-worker ``distributed.LocalCluster`` on loopback (one per test
process, started by the first test that asks for it); use it with
``dask.config.set(scheduler=cluster_client)``.

Every test starts from the same global random state (Python's ``random``, NumPy's legacy
global generator and, once imported, torch's default generator, seeded with
``KERNELKIT_TEST_SEED``, default 0), so that what a test draws without a generator of its
own (a module's default weight initialisation, say) does not depend on which tests ran
before it in the same process (``pytest -n`` distributes them differently on every run).
The generators kernelkit makes for ``random_state=None`` (fresh operating-system entropy
in use) are seeded from that global state too, a new seed for each, so a feature map
built without a seed draws the same in every run.
Run the suite with another ``KERNELKIT_TEST_SEED`` to see which tests hold only for one
draw.

Most statistical tests pass an explicit seed (``random_state=0``,
``np.random.default_rng(3)``), which ``KERNELKIT_TEST_SEED`` does not change. Set
``KERNELKIT_TEST_RNG_OFFSET`` to a non-negative integer k (default unset: nothing changes)
and ``numpy.random.default_rng`` is wrapped for every test so that an integer seed s
becomes the seed sequence ``[s, k]``; ``None``, Generators, bit generators, SeedSequences
and arrays of integers pass through unchanged. kernelkit's ``check_random_state`` and the
tests' own data then draw anew, and consistently (the same s still gives the same
stream within a run). A test that must stay tied to one draw (a pinned golden value)
builds its generator as ``np.random.Generator(np.random.PCG64(s))``, which the offset
does not reach. Run the suite with a few offsets to see which tolerances hold only for
the explicit seeds. The wrapper lives in the test process (and in processes it forks):
freshly started interpreters (joblib's loky workers, a dask ``LocalCluster``'s
workers) draw numpy's own streams, so tests that compare a search or fit run in such
workers with the same one run in the test process fail under an offset, by design.
"""

from __future__ import annotations

import functools
import importlib.util
import numbers
import os
import random
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import kernelkit._backend

HAS_TORCH = importlib.util.find_spec("torch") is not None

# Deterministic, deadline-free property tests (CI runs on 2 shared cores).
settings.register_profile(
    "kernelkit",
    deadline=None,
    derandomize=True,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "kernelkit"))


TEST_SEED = int(os.environ.get("KERNELKIT_TEST_SEED", "0"))
_RNG_OFFSET_ENV = os.environ.get("KERNELKIT_TEST_RNG_OFFSET", "").strip()
RNG_OFFSET = int(_RNG_OFFSET_ENV) if _RNG_OFFSET_ENV else None
if RNG_OFFSET is not None and RNG_OFFSET < 0:
    raise ValueError(f"KERNELKIT_TEST_RNG_OFFSET must be a non-negative integer, got {RNG_OFFSET}.")

_numpy_default_rng = np.random.default_rng


@functools.wraps(_numpy_default_rng)
def _offset_default_rng(seed=None):
    # an integer seed s (Python or NumPy, not bool) -> the seed sequence [s, offset]; a
    # negative s still raises numpy's ValueError; everything else is numpy's own call
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        return _numpy_default_rng([int(seed), RNG_OFFSET])
    return _numpy_default_rng(seed)


def _seeded_fresh_generator() -> np.random.Generator:
    # random_state=None in the tests: a new generator on every call, as the library's own
    # (OS entropy), but seeded from the global legacy generator seeded below
    return np.random.default_rng(np.random.randint(0, 2**63 - 1, dtype=np.int64))  # noqa: NPY002


@pytest.fixture(autouse=True)
def _global_random_state_seeded(monkeypatch):
    """Seed the global generators before every test (see the module docstring)."""
    random.seed(TEST_SEED)
    np.random.seed(TEST_SEED)  # noqa: NPY002 (scikit-learn's random_state=None draws from it)
    torch = sys.modules.get("torch")
    if torch is not None:  # a fresh import starts from torch's own fixed default seed
        torch.manual_seed(TEST_SEED)
    monkeypatch.setattr(kernelkit._backend, "_fresh_generator", _seeded_fresh_generator)
    if RNG_OFFSET is not None:
        monkeypatch.setattr(np.random, "default_rng", _offset_default_rng)


class Backend:
    """Minimal adaptor: NumPy in, backend array out, and back."""

    def __init__(self, name: str):
        self.name = name
        if name == "torch":
            import torch

            self.lib = torch
            self.float32, self.float64 = torch.float32, torch.float64
        else:
            self.lib = np
            self.float32, self.float64 = np.float32, np.float64

    def asarray(self, a, dtype=None):
        """NumPy ``a`` -> backend array; ``dtype`` is "float32"/"float64"/None (keep)."""
        a = np.asarray(a)
        if dtype is not None:
            a = a.astype(dtype)
        if self.name == "torch":
            return self.lib.from_numpy(np.ascontiguousarray(a))
        return a

    def to_numpy(self, a):
        if self.name == "torch":
            return a.detach().cpu().numpy()
        return np.asarray(a)

    def dtype_name(self, a) -> str:
        return str(a.dtype).replace("torch.", "")

    def __repr__(self):
        return f"Backend({self.name})"


BACKENDS = [
    "numpy",
    pytest.param(
        "torch",
        marks=[pytest.mark.torch, pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")],
    ),
]


@pytest.fixture(params=BACKENDS)
def backend(request) -> Backend:
    """NumPy and (if importable) PyTorch."""
    return Backend(request.param)


@pytest.fixture
def torch():
    """The torch module, skipping the test where it is not installed."""
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def cluster_client():
    """A ``distributed.Client`` of a two-worker, one-thread-each ``LocalCluster`` on
    loopback, not set as the default scheduler (skipped without ``distributed``)."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster, set_as_default=False) as client,
    ):
        assert len(client.scheduler_info()["workers"]) == 2
        yield client
