"""Claims of the user guide (contract, scale, estimators, attention) checked against the
code, one test per claim that a review found false or that nothing else pinned down.

The executed examples of ``test_docs.py`` show that the code blocks run; these tests
check what the prose says around them.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from kernelkit.estimators import NadarayaWatsonClassifier, RandomFeatures


@pytest.mark.parametrize(
    ("estimator", "method"),
    [
        (RandomFeatures, "nope"),
        (NadarayaWatsonClassifier, "foo"),
        # a name of another estimator's list: not one the Nadaraya-Watson classifier takes
        (NadarayaWatsonClassifier, "hybrid_angular"),
    ],
)
def test_unknown_method_is_an_invalid_parameter_error(estimator, method):
    """contract.md, "Parameter validation": an unknown option string raises
    scikit-learn's InvalidParameterError (both a ValueError and a TypeError) whose
    message names the parameter and the values it accepts. ``method`` is checked by
    name (case-insensitive, with aliases), not by a StrOptions constraint."""
    X, y = np.eye(4), [0, 1, 1, 0]
    with pytest.raises(InvalidParameterError, match="'method' parameter") as info:
        estimator(method=method).fit(X, y)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)
    assert "sderf" in str(info.value)  # the values it accepts


def test_n_jobs_none_is_every_available_cpu_not_one(monkeypatch):
    """contract.md, "One name for each thing", and scale.md, "Threads": ``n_jobs=-1`` and
    ``k`` are scikit-learn's, but ``None`` is all the CPUs available (capped by
    ``KERNELKIT_NUM_THREADS``), not scikit-learn's one job."""
    from threadpoolctl import threadpool_limits

    from kernelkit._backend.parallel import _cpus, effective_n_jobs

    assert effective_n_jobs(3) == 3
    assert effective_n_jobs(-1) == _cpus()
    monkeypatch.setenv("KERNELKIT_NUM_THREADS", "3")
    assert effective_n_jobs(None) == 3  # scikit-learn's None would be 1
    monkeypatch.delenv("KERNELKIT_NUM_THREADS")
    with threadpool_limits(limits=1, user_api="blas"):  # a surrounding limit caps it
        assert effective_n_jobs(None) == 1
        assert effective_n_jobs(2) == 2  # an explicit count is not capped
