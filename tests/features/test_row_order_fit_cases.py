"""The data-dependent (FAVOR++ / FAVOR#) fits do not depend on the order of the rows.

GERF, SADERF, ADERF and SDERF read the data only through its moments, which a
permutation of the rows changes by rounding alone (another summation order). The fitted
parameters, and the features for a fixed seed, must then change by rounding too, also
where the moments are rank-deficient or have repeated eigenvalues and the eigen- or
singular vectors that LAPACK returns are arbitrary: fewer rows than dimensions (n < d,
n = 1, 2), duplicated columns, zero columns, balanced one-hot rows (repeated non-zero
eigenvalues). Checked on NumPy (the feature-map classes) and torch (the attention's
:func:`~kernelkit.attention._maps.build_log_map`, batched over heads).

Tolerances (derived from the conditioning). The moments of the permuted rows differ by
about ``n eps`` relative (sums of ``n`` terms); a fitted quantity moves by that times
its condition number ``kappa`` (times ``d`` for the ``d x d`` eigen- and singular value
decompositions):

* GERF: ``kappa = 1`` (a scalar function of traces);
* SADERF: ``psi_l`` is a ratio of diagonal moments with the ridge, ``kappa =
  max_l (max M_ll + r) / (M_ll + r)``;
* ADERF: the inverse square roots of ``M + lambda I``, ``kappa = cond(M_x + lambda I)``
  (the larger of both sides; the ridge ``lambda`` bounds it by about ``1e6 d``);
* SDERF: eigenvectors of ``N`` move by ``eps |N| / gap``, ``kappa = |N| / (the smallest
  gap between distinct eigenvalue clusters)``.

The tolerance is ``10 n d eps kappa`` relative to the largest entry (the measured
worst case over 20 seeds of these cases is ``0.15 n d eps kappa``). Across backends
the canonical cluster bases use a hash of ``sin`` that differs by about ``1e-11``
between libms (``favor._canonical_clusters``): ``1e-9`` more there. Before the fix a
permutation turned ADERF's rows (and SDERF's, where ``row_signs`` met a tie) by O(1).
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.features import ADERF, GERF, SADERF, SDERF
from kernelkit.features.favor import DEFAULT_EPS, fit_derf, moments

EPS = np.finfo(np.float64).eps
MAPS = {"gerf": GERF, "saderf": SADERF, "aderf": ADERF, "sderf": SDERF}
#: the canonical cluster bases' hash of sin, NumPy's libm against torch's (see above)
CROSS_BACKEND = 1e-9


def _data(case: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if case == "n_lt_d":  # the scikit-learn check's shape: 15 points in 30 dimensions
        return rng.standard_normal((15, 30))
    if case == "n1":
        return rng.standard_normal((1, 6))
    if case == "n2":
        return rng.standard_normal((2, 6))
    if case == "duplicated_columns":  # e_1 - e_3, e_0 - e_5 in the null space
        X = rng.standard_normal((20, 6))
        X[:, 3], X[:, 5] = X[:, 1], X[:, 0]
        return X
    if case == "zero_columns":
        X = rng.standard_normal((20, 6))
        X[:, [2, 4]] = 0.0
        return X
    if case == "one_hot":  # balanced categories: a 5-fold repeated non-zero eigenvalue
        return np.eye(6)[rng.permutation(np.repeat(np.arange(6), 3))]
    raise ValueError(case)


CASES = ["n_lt_d", "n1", "n2", "duplicated_columns", "zero_columns", "one_hot"]


def _keys(X: np.ndarray, kind: str) -> np.ndarray:
    """The keys: the queries themselves, or an affine image of them (other moments, the
    same degeneracies)."""
    return X if kind == "same" else 0.7 * X + 0.1


def _kappa(name: str, mom) -> float:
    """The condition number of the fit ``name`` (module docstring)."""
    d = mom.dim
    if name == "gerf":
        return 1.0
    if name == "saderf":
        sx, sy = mom.diagonals()
        r = DEFAULT_EPS * 0.5 * (sx.mean() + sy.mean())
        return float(max((s.max() + r) / (s.min() + r) for s in (sx, sy)))
    if name == "aderf":
        lam = DEFAULT_EPS * (np.trace(mom.second_x) + np.trace(mom.second_y)) / (2 * d)
        return float(max(np.linalg.cond(M + lam * np.eye(d)) for M in (mom.second_x, mom.second_y)))
    cross = np.outer(mom.mean_x, mom.mean_y)
    ev = np.linalg.eigvalsh(mom.second_x + mom.second_y + cross + cross.T)
    gaps = np.diff(ev)
    gaps = gaps[gaps > 1e-5 * ev.max()]  # the gaps between clusters (favor._CLUSTER_RTOL)
    return float(ev.max() / gaps.min()) if gaps.size else 1.0


def _tol(name: str, X: np.ndarray, Y: np.ndarray) -> float:
    n, d = X.shape
    return 10 * n * d * EPS * _kappa(name, moments(X, Y))


def _params(p) -> list:
    return [np.asarray(v, dtype=np.float64) for v in (p.a, p.B_x, p.B_y) if v is not None]


def _assert_close(got, want, tol, what):
    for g, w in zip(got, want, strict=True):
        scale = max(1.0, float(np.abs(w).max()))
        err = float(np.abs(g - w).max())
        assert err <= tol * scale, f"{what}: differs by {err:.3g} > {tol * scale:.3g}"


def _permutations(n: int, seed: int):
    rng = np.random.default_rng(seed)
    out = [np.arange(n)[::-1]] + [rng.permutation(n) for _ in range(3)]
    return [p for p in out if n > 1] or [np.arange(n)]


@pytest.mark.parametrize("keys", ["same", "affine"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", list(MAPS))
def test_fitted_parameters_do_not_depend_on_row_order(name, case, keys):
    """``fit_derf`` on the moments of permuted queries and keys (each permuted on its
    own): the same ``a``, ``B_x``, ``B_y`` to ``10 n d eps kappa``."""
    X = _data(case)
    Y = _keys(X, keys)
    ref = _params(fit_derf(name, moments(X, Y)))
    tol = _tol(name, X, Y)
    for i, p in enumerate(_permutations(len(X), 1)):
        q = _permutations(len(X), 2 + i)[0]
        got = _params(fit_derf(name, moments(X[p], Y[q])))
        _assert_close(got, ref, tol, f"{name} {case} permutation {i}")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", list(MAPS))
def test_features_do_not_depend_on_row_order(name, case):
    """The feature maps fitted (same seed) on the permuted rows give the same features of
    new points. A log feature ``x . W_x[:, m] + c_m - |B x|^2 / 2`` moves by at most the
    parameters' relative error times ``|x|_1 |B| |W| d`` (``W_x = B^T diag(s) W^T``),
    ``d (1 + |W|^2)`` (``c``) and ``|x|_1^2 |B|^2 d`` (the row term), ``|.|`` the largest
    entries: that bounds the features' relative error."""
    X = _data(case)
    Y = _keys(X, "affine")
    Xn = np.random.default_rng(5).standard_normal((7, X.shape[1])) * 0.5
    ref = MAPS[name](n_features=64, random_state=3).fit(X, Y=Y)
    F_x, F_y = ref.transform(Xn), ref.transform_y(Xn)
    W = np.asarray(ref.projection_)  # (M, d)
    Bs = [float(np.abs(np.asarray(b)).max()) for b in (ref.B_x_, ref.B_y_) if b is not None]
    B = max([1.0, *Bs])
    x1 = float(np.abs(Xn).sum(axis=1).max())
    w = float(np.abs(W).max())
    d = X.shape[1]
    gain = x1 * B * w * d + d * (1.0 + w * w) + x1 * x1 * B * B * d
    tol = _tol(name, X, Y) * gain
    for i, p in enumerate(_permutations(len(X), 7)):
        fm = MAPS[name](n_features=64, random_state=3).fit(X[p], Y=Y[p])
        np.testing.assert_allclose(fm.transform(Xn), F_x, rtol=tol, atol=0, err_msg=f"x {i}")
        np.testing.assert_allclose(fm.transform_y(Xn), F_y, rtol=tol, atol=0, err_msg=f"y {i}")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", list(MAPS))
def test_torch_fit_and_attention_maps_do_not_depend_on_row_order(name, case):
    """Torch (float64): ``fit_derf`` of torch moments of the permuted rows equals the
    NumPy fit of the rows in order, and the attention's log-feature parameters
    (``build_log_map``, batched: two heads, the second with the rows permuted) of both
    heads agree; tolerance as NumPy's plus the cross-backend term."""
    torch = pytest.importorskip("torch")
    from kernelkit.attention._maps import build_log_map, fit_moments

    X = _data(case)
    Y = _keys(X, "affine")
    tol = _tol(name, X, Y) + CROSS_BACKEND
    ref = _params(fit_derf(name, moments(X, Y)))
    p = _permutations(len(X), 11)[-1]
    tx, ty = torch.from_numpy(X[p]), torch.from_numpy(Y[p])
    got = [v.numpy() for v in _params_torch(fit_derf(name, moments(tx, ty)))]
    _assert_close(got, ref, tol, f"torch {name} {case}")
    # the attention: (2, n, d) inputs, head 1 the rows of head 0 permuted
    xs = torch.stack([torch.from_numpy(X), tx])
    ys = torch.stack([torch.from_numpy(Y), ty])
    W = torch.from_numpy(np.random.default_rng(4).standard_normal((16, X.shape[1])))
    lm = build_log_map(name, W, fit_moments(xs, ys), X.shape[1])
    for field in ("W_q", "W_k", "c", "B_q", "B_k"):
        v = getattr(lm, field)
        if v is None:
            continue
        v = v.numpy()
        scale = max(1.0, float(np.abs(v[0]).max()))
        gain = float(np.abs(W.numpy()).max()) * X.shape[1] if field != "B_q" else 1.0
        err = float(np.abs(v[1] - v[0]).max())
        assert err <= tol * gain * scale, f"{field}: heads differ by {err:.3g}"


def _params_torch(p) -> list:
    return [v.double() for v in (p.a, p.B_x, p.B_y) if v is not None]


@pytest.mark.parametrize("case", ["duplicated_columns", "one_hot"])
def test_sderf_repeated_eigenvalues_get_equal_a_and_a_canonical_basis(case):
    """Where ``N`` has a repeated eigenvalue (a null space from duplicated columns, a
    repeated non-zero eigenvalue from balanced one-hot rows), its ``a_l`` are equal and
    ``Q3^T N Q3`` stays diagonal: the canonical basis is an eigenbasis."""
    X = _data(case)
    mom = moments(X, X)
    Q3t, a = fit_derf("sderf", mom).B_x, fit_derf("sderf", mom).a
    cross = np.outer(mom.mean_x, mom.mean_y)
    N = mom.second_x + mom.second_y + cross + cross.T
    D = Q3t @ N @ Q3t.T
    # eigenvector error eps |N| d / gap (module docstring), diagonal error that times |N|
    tol = 10 * len(X) * X.shape[1] * EPS * _kappa("sderf", mom) * np.abs(N).max()
    np.testing.assert_allclose(D, np.diag(np.diag(D)), rtol=0, atol=tol)
    np.testing.assert_allclose(Q3t @ Q3t.T, np.eye(X.shape[1]), rtol=0, atol=tol)
    lam = np.linalg.eigvalsh(N)[::-1]
    repeated = np.isclose(lam[:, None], lam[None, :], rtol=0, atol=1e-5 * lam[0])
    assert (repeated.sum(axis=1) > 1).any()  # the case has a cluster
    spread = np.abs(a[:, None] - a[None, :])[repeated]
    assert spread.max() == 0.0  # the cluster's mean: exactly equal
