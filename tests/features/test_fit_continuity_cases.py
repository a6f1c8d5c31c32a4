"""The fitted FAVOR# maps are continuous functions of their data.

SDERF and ADERF are fitted through an eigendecomposition (SDERF's ``Q3``, ADERF's left
singular vectors ``U~``). Two eigenvalues a relative ``delta`` apart let a data change of
relative size ``epsilon`` turn their eigenvectors by about ``epsilon / delta``; with the
projections drawn in that basis the features changed by O(1) (a
``FavorAttention(feature_map="sderf")`` under bfloat16 autocast differed from its float32
forward by 12%). The projections are now taken in input coordinates (SDERF: Thm 4.1 with
the symmetric ``A = Q3 diag(a) Q3^T``; ADERF: ``B_x = U~ B~1``), so the features are
spectral functions of the moments and move by O(epsilon).
"""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit.features import ADERF, SDERF
from kernelkit.features.favor import a_star

D = 6


def near_degenerate_data(rng, n=400, delta=3e-5):
    """Rows whose second moment has two eigenvalues a relative ``delta`` apart (above
    the fits' cluster tolerance of 1e-5, so they are not merged): centred Gaussian rows
    whitened exactly, scaled per coordinate, in a random basis. Fitted with ``Y = X``,
    SDERF's ``N = 2 M_x`` and ADERF's singular values (the eigenvalues of ``M_x``, plus
    the ridge) keep the pair."""
    Z = rng.standard_normal((n, D))
    Z -= Z.mean(0)
    Z = Z @ np.linalg.inv(np.linalg.cholesky(Z.T @ Z / n)).T  # second moment exactly I
    scales = np.sqrt([1.0, 1.0 + delta, 0.7, 0.5, 0.4, 0.3]) * 0.5
    Q, _ = np.linalg.qr(rng.standard_normal((D, D)))
    return (Z * scales) @ Q.T


@pytest.mark.parametrize("cls", [SDERF, ADERF], ids=lambda c: c.__name__)
def test_fitted_features_move_linearly_with_the_data(cls):
    """Perturbing the data by a relative ``epsilon`` moves every log feature by
    O(epsilon) (first order: ``epsilon`` times their size, about 10 here), and by ten
    times less for ``epsilon / 10``. With the projections drawn in the eigenbasis the
    near-degenerate pair's eigenvectors turned by about ``epsilon / delta`` times the
    pair's coupling, and the log features moved by 0.12 at ``epsilon = 1e-4``."""
    rng = np.random.default_rng(0)
    X = near_degenerate_data(rng)
    Y = X.copy()
    E = rng.standard_normal(X.shape)
    base = cls(64, random_state=3).fit(X, Y=Y).log_transform(X)  # (n, M)
    changes = []
    for eps in (1e-4, 1e-5):
        Xp = X + eps * np.linalg.norm(X) / np.linalg.norm(E) * E
        moved = cls(64, random_state=3).fit(Xp, Y=Y).log_transform(X)
        changes.append(float(np.max(np.abs(moved - base))))
    # Lipschitz in the data: at most epsilon times the size of the log features (the
    # fits move them by about epsilon / 100 times it here; the eigenbasis form 100 times
    # more than the bound)
    assert changes[0] < 1e-4 * np.max(np.abs(base)), changes
    # first order: the change scales with epsilon (ratio 10; 4..25 leaves room for the
    # second-order term and rounding, not for a jump)
    assert 4.0 < changes[0] / changes[1] < 25.0, changes


def test_sderf_features_are_thm_4_1_with_the_symmetric_matrix():
    """SDERF's log features equal Thm 4.1's with ``A = Q3 diag(a) Q3^T`` and ``B = (I -
    4A)^{1/2}`` on the untransformed inputs, computed here from an independent
    eigendecomposition of ``N`` (``a_l = A*(lambda_l)``) and SciPy's matrix square root:
    ``log f(w, x) = w^T A w + w^T B x - |x|^2/2 + log det(I - 4A)/4 - log(M)/2``."""
    scipy_linalg = pytest.importorskip("scipy.linalg")
    rng = np.random.default_rng(1)
    X, Y = 0.4 * rng.standard_normal((50, D)), 0.3 * rng.standard_normal((40, D)) + 0.1
    M = 32
    fm = SDERF(M, random_state=0).fit(X, Y=Y)
    mx, my = X.mean(0), Y.mean(0)
    N = X.T @ X / len(X) + Y.T @ Y / len(Y) + np.outer(mx, my) + np.outer(my, mx)
    lam, Q = np.linalg.eigh(N)
    A = (Q * a_star(lam)) @ Q.T
    B = np.real(scipy_linalg.sqrtm(np.eye(D) - 4.0 * A))
    W = fm.projection_  # (M, d), input coordinates
    _, logdet = np.linalg.slogdet(np.eye(D) - 4.0 * A)
    expected = (
        np.einsum("md,de,me->m", W, A, W)[None, :]
        + X @ B @ W.T
        - 0.5 * np.sum(X * X, axis=1)[:, None]
        + 0.25 * logdet
        - 0.5 * np.log(M)
    )
    # float64 throughout; entries O(10), a d x d eigendecomposition and sqrtm: 1e-9
    np.testing.assert_allclose(fm.log_transform(X), expected, rtol=0, atol=1e-9)


def test_aderf_transforms_are_the_rotation_free_form():
    """ADERF's ``B_x``, ``B_y``: ``B_x^T B_y = I`` (Thm 4.2's constraint) and ``B_x M_x
    B_x^T = B_y M_y B_y^T`` symmetric positive (``U~ S U~^T``, to the ridge), invariant under
    an orthogonal change of the input basis: ``B(X R^T) = R B(X) R^T``, which the
    eigenbasis form (rows of ``B~`` fixed by LAPACK's basis) satisfies only up to a
    rotation of the rows."""
    rng = np.random.default_rng(2)
    X, Y = 0.5 * rng.standard_normal((60, D)), 0.4 * rng.standard_normal((50, D))
    fm = ADERF(16, random_state=0).fit(X, Y=Y)
    Bx, By = fm.B_x_, fm.B_y_
    np.testing.assert_allclose(Bx.T @ By, np.eye(D), atol=1e-12)
    Sx = Bx @ (X.T @ X / len(X)) @ Bx.T
    Sy = By @ (Y.T @ Y / len(Y)) @ By.T
    # the ridge (eps = 1e-6 of the mean eigenvalue ~0.2) moves them apart by ~1e-7
    np.testing.assert_allclose(Sx, Sy, atol=1e-6)
    np.testing.assert_allclose(Sx, Sx.T, atol=1e-12)
    assert np.linalg.eigvalsh(Sx).min() > 0
    R, _ = np.linalg.qr(rng.standard_normal((D, D)))
    turned = ADERF(16, random_state=0).fit(X @ R.T, Y=Y @ R.T)
    np.testing.assert_allclose(turned.B_x_, R @ Bx @ R.T, atol=1e-10)
    np.testing.assert_allclose(turned.B_y_, R @ By @ R.T, atol=1e-10)


@pytest.mark.parametrize("feature_map", ["sderf", "aderf"])
@pytest.mark.parametrize("seed", [0, 9, 144, 153])
def test_attention_under_bfloat16_autocast_is_its_float32_forward_rounded(feature_map, seed):
    """A ``FavorAttention`` with 16 features on 5 tokens, run under bfloat16 autocast, is
    its float32 forward on the same inputs to the rounding of its projections: about six
    roundings of relative size ``u = 2^-8`` between input and output, 6 u in the norm. Its
    weights come from the global generator at ``seed`` (for which the eigenbasis-drawn
    SDERF was 12%, 5% and 4.5% off for 9, 144 and 153 under torch 2.13)."""
    torch = pytest.importorskip("torch")
    from kernelkit.attention import FavorAttention

    torch.manual_seed(seed)
    m = FavorAttention(8, 2, n_features=16, feature_map=feature_map, random_state=0).eval()
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = m(x, x, x)
        ref, _ = m(x.float(), x.float(), x.float())
    assert out.dtype == torch.bfloat16
    assert float((out.float() - ref).norm() / ref.norm()) < 6 * 2.0**-8
