"""Variances of the dot-product sketches with ``coef0 > 0`` at small input norms: the
differences ``N - S`` and ``G^2 - S`` of the augmented rows are formed without the
``coef0`` terms that cancel, so ``variance`` keeps its digits (checked against the same
formula in exact rational arithmetic) and ``log_relative_variance`` is finite where the
estimate varies, in NumPy and torch alike."""

from fractions import Fraction as Fr

import numpy as np
import pytest

from kernelkit.features import RademacherSketch, TensorSketch


def _stats(x, y, c):
    x = [Fr(float(v)) for v in x]
    y = [Fr(float(v)) for v in y]
    c = Fr(c)
    G = sum(a * b for a, b in zip(x, y, strict=True)) + c
    N = (sum(a * a for a in x) + c) * (sum(b * b for b in y) + c)
    S = sum(a * a * b * b for a, b in zip(x, y, strict=True)) + c * c
    return G, N - S, G * G - S  # G, A, B


def _exact(cls, x, y, c, D, p=2):
    G, A, B = _stats(x, y, c)
    G2 = G * G
    if cls is RademacherSketch:  # real Rademacher: q = m4 = 1, d_abs = d_sq = A + B
        return float(((G2 + A + B) ** p - G2**p) / D)
    g = 2 if D % 2 == 0 else 1  # TensorSketch
    pa, pb = (G2 + A) ** p - G2**p, (G2 + B) ** p - G2**p
    pab = (G2 + A + B) ** p - G2**p
    return float((pa + pb) / D + Fr(g, D * D) * (pab - pa - pb))


@pytest.mark.parametrize("cls", [RademacherSketch, TensorSketch])
@pytest.mark.parametrize("scale", [1e-2, 1e-6, 1e-8, 1e-10])
def test_variance_keeps_its_digits_at_small_norms(cls, scale):
    rng = np.random.default_rng(0)
    X, Y = scale * rng.standard_normal((1, 3)), scale * rng.standard_normal((1, 3))
    fm = cls(4, degree=2, coef0=1.0, random_state=0).fit(X)
    want = _exact(cls, X[0], Y[0], 1.0, 4)
    assert want > 0
    np.testing.assert_allclose(fm.variance(X, Y)[0, 0], want, rtol=1e-9)
    lrv = fm.log_relative_variance(X, Y)[0, 0]
    G = float(X[0] @ Y[0]) + 1.0
    np.testing.assert_allclose(lrv, np.log(want) - 4 * np.log(G), rtol=1e-9)


def test_numpy_and_torch_agree_on_log_relative_variance_of_small_rows():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 3))
    X[1] *= 1e-8
    fm = RademacherSketch(4, degree=2, coef0=1.0, complex=True, random_state=0).fit(X)
    a = fm.log_relative_variance(X, X)
    b = fm.log_relative_variance(torch.as_tensor(X), torch.as_tensor(X)).numpy()
    np.testing.assert_allclose(b, a, rtol=1e-9)
    assert np.all(np.isfinite(a))
