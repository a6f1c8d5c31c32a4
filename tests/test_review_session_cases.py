"""Review of the day's changes: cases the new code missed.

- SDERF's canonical null-space basis with float32 moments: the same basis as from the
  float64 moments of the same data, on NumPy and torch alike.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from kernelkit.estimators import RandomFeatureRidge, RandomFeatures
from kernelkit.features import TrigRF, favor


def _rank_deficient_moments(dtype):
    """Moments of 5 queries and 5 keys in d = 16 (rank 9 < 16: a 7-dimensional null space
    spanned by no coordinate axis), in ``dtype``."""
    rng = np.random.default_rng(0)
    x, y = (0.3 * rng.standard_normal((5, 16)) for _ in range(2))
    return favor.moments(x.astype(dtype), y.astype(dtype))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sderf_null_basis_of_float32_moments_is_the_float64_basis(backend):
    """The canonical basis of the null space orthonormalises fixed vectors ``G`` projected
    on it; ``G`` was computed in the moments' dtype, and in float32 ``sin(...) * 43758``
    keeps no correct digit of its fractional part, so float32 moments got another basis
    than float64 ones (and NumPy's float32 another than torch's, 2e-3 apart)."""
    m64 = _rank_deficient_moments(np.float64)
    m32 = _rank_deficient_moments(np.float32)
    if backend == "torch":
        torch = pytest.importorskip("torch", reason="torch not installed (the torch extra)")
        m64, m32 = (
            favor.Moments(*(torch.from_numpy(np.asarray(a)) for a in vars(m).values()))
            for m in (m64, m32)
        )
    Q64, a64 = favor.fit_sderf(m64)
    Q32, a32 = favor.fit_sderf(m32)
    Q64, Q32 = np.asarray(Q64, dtype=np.float64), np.asarray(Q32, dtype=np.float64)
    # float32 moments are the float64 ones rounded (relative 6e-8); the eigenvectors move
    # by that over the relative eigenvalue gap (here > 1e-2 of the largest) and the QR
    # of the d x d projection adds d eps: about 1e-5 at most; 1e-4 leaves a margin and
    # still fails a basis of another G (1e-1 apart)
    np.testing.assert_allclose(Q32, Q64, rtol=0, atol=1e-4)
    np.testing.assert_allclose(np.asarray(a32, dtype=np.float64), a64, rtol=0, atol=1e-5)


def test_column_check_of_a_wide_frame_tests_each_dtype_once(monkeypatch):
    """A DataFrame of 2000 float64 columns and one int64: the check that its columns are
    numbers runs on every fit and transform, and asked pandas once per column (16 ms per
    call for 10000 columns, a sixth of the transform). The dtypes to test are the
    distinct ones; counting pandas' dtype tests shows it without timing."""
    import pandas.api.types as ptypes

    calls = []
    real = ptypes.is_numeric_dtype
    rng = np.random.default_rng(1)
    df = pd.DataFrame(rng.standard_normal((8, 2000))).add_prefix("c")
    df["n"] = np.arange(8)
    rf = RandomFeatures(method="trig", n_components=8, random_state=0).fit(df)
    monkeypatch.setattr(ptypes, "is_numeric_dtype", lambda dt: calls.append(dt) or real(dt))
    out = rf.transform(df)
    assert out.shape == (8, 8)
    assert len(calls) <= 2  # the two distinct dtypes


def test_column_check_still_names_a_text_column_among_many():
    """The same check with one text column among 2000 numbers: still a TypeError naming
    that column, and a missing value in an object column of numbers still NaN."""
    rng = np.random.default_rng(2)
    df = pd.DataFrame(rng.standard_normal((4, 2000))).add_prefix("c")
    df["city"] = ["a", "b", "c", "d"]
    with pytest.raises(TypeError, match="column 'city' has dtype"):
        RandomFeatures(method="trig", n_components=8, random_state=0).fit(df)
    df["city"] = pd.Series([1.0, None, 2.0, 3.0], dtype=object)
    with pytest.raises(ValueError, match="missing values in column 'city'"):
        RandomFeatures(method="trig", n_components=8, random_state=0).fit(df)


def test_guide_on_sparse_input_of_the_estimators():
    """estimators.md, "Inputs and outputs": the estimators that solve on the rows refuse
    SciPy sparse X (in memory or as Dask chunks) with a TypeError, but RandomFeatures, a
    transformer like the maps, takes it with a projection method; the guide said all
    estimators need dense rows."""
    rng = np.random.default_rng(3)
    dense = rng.standard_normal((40, 5))
    dense[dense < 0.5] = 0.0
    S = sp.csr_matrix(dense)
    da = pytest.importorskip("dask.array", reason="dask not installed (the dask extra)")
    chunks = da.from_array(S, chunks=(20, 5), asarray=False)
    y = dense[:, 0]
    for X in (S, chunks):
        with pytest.raises(TypeError, match="dense data is required"):
            RandomFeatureRidge(TrigRF(n_features=8, random_state=0)).fit(X, y)
        rf = RandomFeatures(method="trig", n_components=8, random_state=0).fit(X)
        # the same draw on the same rows: the dense input's features to the last bits
        ref = RandomFeatures(method="trig", n_components=8, random_state=0).fit(dense)
        out = rf.transform(X)
        out = out.compute() if hasattr(out, "compute") else out
        np.testing.assert_allclose(out, ref.transform(dense), rtol=1e-12, atol=1e-12)
    guide = (Path(__file__).parents[1] / "docs" / "guide" / "estimators.md").read_text()
    sentence = re.search(r"need dense rows[^.]*\.", " ".join(guide.split()))
    assert sentence is not None and "RandomFeatures" in sentence.group(0)


@pytest.mark.parametrize("kind", ["frame", "array"])
def test_transform_y_names_y_for_non_numeric_keys(kind):
    """The column check's TypeError (a DataFrame with a text column, or an array of
    strings) of the keys given to transform_y said 'X must be numeric', as its NaN
    ValueError already says 'Input Y'."""
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [0.5, 1.0, 2.0, 3.0]})
    rf = RandomFeatures(method="gerf", kernel="softmax", n_components=8, random_state=0)
    rf.fit(df)
    if kind == "frame":
        bad, match = df.assign(b=["u", "v", "w", "z"]), r"^Y must be numeric; column 'b'"
    else:
        bad, match = np.array([["u", "v"]]), r"^Y must be numeric"
    with pytest.raises(TypeError, match=match):
        rf.transform_y(bad)
    with pytest.raises(TypeError, match=r"^X must be numeric"):  # transform: still X
        rf.transform(bad)


def test_autocast_switch_accepts_a_device_without_autocast():
    """The autocast switch of the attention kernels (moments, step, backward) is a null
    context on devices autocast does not know: ``torch.autocast("meta", enabled=False)``
    raises, and attention_moments of meta tensors (shape inference) worked before the
    switch was added."""
    torch = pytest.importorskip("torch", reason="torch not installed (the torch extra)")
    from kernelkit.attention import attention_moments
    from kernelkit.attention._linear import autocast_off

    q = torch.randn(1, 2, 8, 16, device="meta")
    mom = attention_moments(q, q)
    assert mom.mean_x.shape == (1, 2, 16) and mom.second_x.shape == (1, 2, 16, 16)
    with autocast_off("meta"):
        pass
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with autocast_off("cpu"):
            assert not torch.is_autocast_enabled("cpu")
        assert torch.is_autocast_enabled("cpu")
