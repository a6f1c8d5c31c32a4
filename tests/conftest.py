"""Shared test fixtures: array backends and the hypothesis profile.

``backend`` parametrises a test over NumPy and PyTorch (skipped where torch is not
importable). Tests build their data with NumPy and move it with ``backend.asarray``.
``cluster_client`` is a two-worker ``distributed.LocalCluster`` on loopback (one per test
process, started by the first test that asks for it); use it with
``dask.config.set(scheduler=cluster_client)``.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

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
