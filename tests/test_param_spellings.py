"""A list and a tuple of the same values are one parameter value after fit.

``ComplexExponentialRF(A=array)`` kept its fit through ``set_params(A=list of the same
values)`` (arrays compare by value), but ``ClusteredHybridRF(n_clusters=(2, 1))`` lost
its fit to ``set_params(n_clusters=[2, 1])``: ``(2, 1) == [2, 1]`` is False in Python.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from kernelkit._backend.fit_state import same_value
from kernelkit.features import ClusteredHybridRF


def test_list_and_tuple_of_one_value_keep_the_fit():
    X = np.random.default_rng(0).standard_normal((60, 3))
    fm = ClusteredHybridRF(n_clusters=(2, 1), random_state=0).fit(X)
    before = fm.transform(X)
    fm.set_params(n_clusters=[2, 1])
    np.testing.assert_array_equal(fm.transform(X), before)
    fm.set_params(n_clusters=[1, 2])  # another value: the fit is stale
    with pytest.raises(NotFittedError, match="n_clusters"):
        fm.transform(X)


def test_same_value_of_sequences():
    assert same_value((2, 1), [2, 1])
    assert same_value([np.float64(0.5), (1, 2)], (0.5, [1, 2]))
    assert not same_value((2, 1), [2, 1, 0])
    assert not same_value((2, 1), [1, 2])
    assert not same_value((2, 1), "21")
