"""Monte Carlo checks of the dot-product feature maps: unbiasedness and variances.

* i.i.d. sketches: one fit with ``D = 200,000`` features gives 200,000 independent
  single-feature estimates ``g_l = D Phi_l(x) conj Phi_l(y)``.
* TensorSRHT: blocks are independent, and the first ``r`` features of a full block have
  the distribution of a partial block of ``r`` features, so one fit with many blocks
  gives ``R >= 100,000`` independent replicates of a ``D``-feature estimate
  (``k`` full blocks + ``r`` features of the next one).
* TensorSketch: refits (its features are not independent across columns); its variance
  formula is kernelkit's own derivation (``tensor_sketch_variance``).

Unbiasedness: ``|mean - k| < 4`` standard errors (from the empirical spread, not from
the library's variance). Variances: the empirical ``E|k_hat - k|^2`` and
``E(Re k_hat - k)^2`` against ``fm.complex_variance(kind=...)`` within 5% and 4.5 z
(standard error from the empirical 4th moment).
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.features import GaussianSketch, RademacherSketch, TensorSketch, TensorSRHT

Z_MEAN = 4.0
Z_VAR = 4.5
PAIRS = [(0, 0), (0, 1), (1, 2)]


def unit_rows(n, d, seed, nonneg=False):
    X = np.random.default_rng(seed).standard_normal((n, d))
    if nonneg:
        X = np.abs(X)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def poly(X, p, coef0):
    return (X @ X.T + coef0) ** p


def check_mean(est, k, label):
    """``est`` (R,) complex or real replicates of an estimate of the real ``k``."""
    re = np.real(est)
    se = re.std(ddof=1) / np.sqrt(re.size)
    z = (re.mean() - k) / se if se > 0 else (0.0 if abs(re.mean() - k) < 1e-12 else np.inf)
    assert abs(z) < Z_MEAN, f"{label}: mean {re.mean():.6g} vs k = {k:.6g} (z = {z:.2f})"
    if np.iscomplexobj(est):
        im = np.imag(est)
        se = im.std(ddof=1) / np.sqrt(im.size)
        assert se == 0 or abs(im.mean() / se) < Z_MEAN, f"{label}: imaginary mean"


def check_var(sq, V, label, rel_tol=0.05):
    """``sq`` (R,) squared errors, ``V`` their expected value (the analytic variance)."""
    m = sq.mean()
    if V < 1e-14:
        assert m < 1e-12, f"{label}: expected zero variance, got {m:.3g}"
        return
    se = sq.std(ddof=1) / np.sqrt(sq.size)
    z = (m - V) / se
    assert abs(z) < Z_VAR, f"{label}: MC {m:.6g} vs analytic {V:.6g} (z = {z:.2f})"
    assert abs(m / V - 1) < rel_tol, f"{label}: MC {m:.6g} vs analytic {V:.6g}"


def check_replicates(est, k, Vc, Vr, label):
    check_mean(est, k, label)
    check_var(np.abs(est - k) ** 2, Vc, label + " E|k_hat - k|^2")
    check_var((np.real(est) - k) ** 2, Vr, label + " E(Re k_hat - k)^2")


# ---------------------------------------------------------------- i.i.d. sketches
IID_CASES = [
    (RademacherSketch, 1),
    (RademacherSketch, 2),
    (RademacherSketch, 3),
    (GaussianSketch, 1),
    (GaussianSketch, 2),
]


@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("cls,p", IID_CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_iid_sketch_unbiased_and_variance(cls, p, cplx):
    X = unit_rows(3, 5, 1)
    D, coef0 = 200_000, 0.3
    fm = cls(n_features=D, degree=p, coef0=coef0, complex=cplx, random_state=2).fit(X)
    P = fm.transform(X) * np.sqrt(D)  # single-feature factors
    K = poly(X, p, coef0)
    one = cls(n_features=1, degree=p, coef0=coef0, complex=cplx).fit(X)
    Vc, Vr = one.complex_variance(X), one.variance(X)
    for i, j in PAIRS:
        g = P[i] * np.conj(P[j])
        check_replicates(g, K[i, j], Vc[i, j], Vr[i, j], f"{cls.__name__} p={p} ({i},{j})")


def test_gaussian_degree_three_unbiased():
    X = unit_rows(3, 5, 3, nonneg=True)
    K = poly(X, 3, 0.0)
    for cplx in (False, True):
        fm = GaussianSketch(n_features=200_000, degree=3, complex=cplx, random_state=4).fit(X)
        P = fm.transform(X) * np.sqrt(fm.n_features)
        for i, j in PAIRS:
            check_mean(P[i] * np.conj(P[j]), K[i, j], f"Gaussian p=3 complex={cplx}")


def test_counterexample_real_zero_complex_quarter():
    """x = (1,1)/sqrt2, y = (1,-1)/sqrt2, p = 2: every real Rademacher feature product is
    exactly k = 0 (w.x w.y = (w1^2 - w2^2)/2 = 0); the complex one has variance 0.25."""
    u = np.array([[1.0, 1.0], [1.0, -1.0]]) / np.sqrt(2)
    real = RademacherSketch(n_features=100_000, degree=2, random_state=5).fit(u)
    P = real.transform(u) * np.sqrt(real.n_features)
    np.testing.assert_allclose(P[0] * P[1], 0.0, atol=1e-15)
    cplx = RademacherSketch(n_features=200_000, degree=2, complex=True, random_state=6).fit(u)
    P = cplx.transform(u) * np.sqrt(cplx.n_features)
    check_var(np.abs(P[0] * np.conj(P[1])) ** 2, 0.25, "complex counterexample")


def test_complex_beats_real_on_worked_example():
    """x = (.6, .8), y = (.8, .6): MC variance ratio complex / real = 0.539, 0.452, 0.370."""
    X = np.array([[0.6, 0.8], [0.8, 0.6]])
    for p, ratio in ((1, 0.539), (2, 0.452), (3, 0.370)):
        v = {}
        for cplx in (False, True):
            fm = RademacherSketch(
                n_features=200_000, degree=p, complex=cplx, random_state=7 + p
            ).fit(X)
            P = fm.transform(X) * np.sqrt(fm.n_features)
            v[cplx] = np.mean(np.abs(P[0] * np.conj(P[1]) - 0.96**p) ** 2)
        assert abs(v[True] / v[False] / ratio - 1) < 0.03, (p, v[True] / v[False])


# ---------------------------------------------------------------- TensorSRHT
def srht_replicates(X, p, D, cplx, coef0, R, seed):
    """``R`` independent replicates of the ``D``-feature TensorSRHT estimate for the
    pairs in ``PAIRS``, from one fit with ``R (k + [r > 0])`` blocks."""
    d = 1 << (X.shape[1] + (coef0 > 0) - 1).bit_length()
    k, r = divmod(D, d)
    per = k + (r > 0)
    big = TensorSRHT(
        n_features=R * per * d, degree=p, coef0=coef0, complex=cplx, random_state=seed
    ).fit(X)
    assert big.padded_dim_ == d
    P = big.transform(X) * np.sqrt(big.n_features)  # unscaled features
    out = {}
    for i, j in PAIRS:
        g = (P[i] * np.conj(P[j])).reshape(R, per, d)
        tot = g[:, :k, :].sum(axis=(1, 2))
        if r:
            tot = tot + g[:, k, :r].sum(axis=1)
        out[i, j] = tot / D
    return out


SRHT_DATA = [(8, 0.0), (6, 0.0), (7, 0.5)]  # (d0, coef0): d = 8, no padding / padded / both


@pytest.mark.parametrize("D", [3, 8, 19], ids=["D<d", "D=d", "D=2d+3"])
@pytest.mark.parametrize("d0,coef0", SRHT_DATA, ids=["d8", "d6-padded", "d7-coef0"])
@pytest.mark.parametrize("cplx", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("p", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_tensor_srht_unbiased_and_variance_eq_33(p, cplx, d0, coef0, D):
    X = unit_rows(3, d0, 10 + d0, nonneg=False)
    reps = srht_replicates(X, p, D, cplx, coef0, R=100_000, seed=11)
    fm = TensorSRHT(n_features=D, degree=p, coef0=coef0, complex=cplx).fit(X)
    K = poly(X, p, coef0)
    Vc, Vr = fm.complex_variance(X), fm.variance(X)
    for (i, j), est in reps.items():
        check_replicates(
            est,
            K[i, j],
            Vc[i, j],
            Vr[i, j],
            f"TensorSRHT p={p} complex={cplx} d0={d0} D={D} ({i},{j})",
        )


def test_tensor_srht_shared_permutation_would_break_eq_33():
    """Erratum 4: with one permutation per block shared by the degrees, the MC variance
    is far from eq. 33 (note: 0.1537 vs 0.0379) -- so the per-degree draws matter."""
    X = unit_rows(3, 8, 12)
    R, d, p = 40_000, 8, 2
    big = TensorSRHT(n_features=R * d, degree=p, random_state=13).fit(X)
    big.permutations_[1] = big.permutations_[0]
    big._build()
    P = big.transform(X) * np.sqrt(big.n_features)
    est = (P[0] * P[1]).reshape(R, d).mean(axis=1)
    k = (X[0] @ X[1]) ** 2
    V = TensorSRHT(n_features=d, degree=p).fit(X).complex_variance(X)[0, 1]
    mc = np.mean((est - k) ** 2)
    assert mc > 1.3 * V, (mc, V)


# ---------------------------------------------------------------- TensorSketch
def _tensor_sketch_draws(X, p, D, coef0, n_draws, seed):
    fm = TensorSketch(n_features=D, degree=p, coef0=coef0, random_state=0).fit(X)
    rng = np.random.default_rng(seed)
    out = np.empty((n_draws, len(PAIRS)))
    for t in range(n_draws):
        fm._draw(rng)
        fm._build()
        F = fm._raw_features(X, np, fm._c)
        out[t] = [F[i] @ F[j] for i, j in PAIRS]
    return out


@pytest.mark.parametrize("p,D", [(2, 7), (3, 8)])
@pytest.mark.parametrize("n_draws", [20_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_tensor_sketch_unbiased_and_variance(n_draws, p, D):
    """Unbiased; variance (derived, incl. the gcd(2, D) term: odd and even D) vs MC."""
    X = unit_rows(3, 5, 14, nonneg=True)
    X[2] = unit_rows(1, 5, 16)[0]  # one mixed-sign point: G^2 - S < 0 for its pairs
    est = _tensor_sketch_draws(X, p, D, 0.5, n_draws, seed=15 + p)
    K = poly(X, p, 0.5)
    V = TensorSketch(n_features=D, degree=p, coef0=0.5).fit(X).complex_variance(X)
    for c, (i, j) in enumerate(PAIRS):
        check_mean(est[:, c], K[i, j], f"TensorSketch ({i},{j})")
        check_var(
            (est[:, c] - K[i, j]) ** 2,
            V[i, j],
            f"TensorSketch var ({i},{j})",
            rel_tol=0.05 if n_draws >= 100_000 else 0.1,
        )


# ---------------------------------------------------------------- real data
def test_complex_srht_lower_frobenius_error_on_nonnegative_digits():
    """Non-centred (non-negative) digits, p = 3, D = d: complex TensorSRHT (D complex
    features) has a lower relative Frobenius error than real TensorSRHT on average."""
    from sklearn.datasets import load_digits

    X = load_digits().data[:300]
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    K = poly(X, 3, 0.0)
    err = {False: [], True: []}
    for seed in range(5):
        for cplx in (False, True):
            fm = TensorSRHT(n_features=64, degree=3, complex=cplx, random_state=seed).fit(X)
            err[cplx].append(np.linalg.norm(fm.approx_kernel(X) - K) / np.linalg.norm(K))
    assert np.mean(err[True]) < 0.8 * np.mean(err[False]), err
