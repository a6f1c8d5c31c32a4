"""Variances of the dot-product sketches (Wacker, Kanagawa, Filippone, "Improved Random
Features for Dot Product Kernels"; equation numbers are the paper's).

With ``G = x~.y~``, ``N = |x~|^2 |y~|^2``, ``S = sum_k x~_k^2 y~_k^2`` of the augmented
inputs ``x~ = [x; sqrt(coef0)]`` (:func:`pair_statistics`) and weights with
``q = E (Re z)^2``, ``m4 = E|z|^4``, ``r = E z^2 = 2q - 1``: Theorem 2 (eq. 16-21) for the
i.i.d. sketches, Theorems 5 / 10 (eq. 28 / 33, with the padded dimension) for TensorSRHT,
and the variance of TensorSketch (derived here; the paper has none). ``kind="complex"``
is the paper's ``E|k_hat - k|^2``, ``kind="real"`` the variance of the real part
(derived: the same pairing argument without the conjugate; ``docs/derivations/dot_product.md``,
"Derived formulas").
"""

from __future__ import annotations

import math

from ._base import _namespace_of

__all__ = [
    "iid_sketch_variance",
    "pair_statistics",
    "pair_terms",
    "srht_c",
    "tensor_sketch_variance",
    "tensor_srht_variance",
]


# ============================================================== formulas
def pair_statistics(X, Y=None, coef0: float = 0.0):
    """``(G, N, S)`` of the augmented pairs ``x~ = [x; sqrt(coef0)]``, each (n, m).

    ``G = x~.y~``, ``N = |x~|^2 |y~|^2``, ``S = sum_k x~_k^2 y~_k^2`` (Theorem 2), in
    ``O(nmd)`` without forming ``x~``. The variance formulas use the differences
    ``N - S`` and ``G^2 - S``; :func:`pair_terms` gives them without cancellation.
    """
    return pair_terms(X, Y, coef0)[:3]


def pair_terms(X, Y=None, coef0=0.0, coef0_y=None):
    """``(G, N, S, A, B)``, each (n, m) for X (n, d) and Y (m, d): :func:`pair_statistics`
    and the differences ``A = N - S``, ``B = G^2 - S`` of Theorem 2 (eq. 16-21) and eq.
    28/33, formed without the terms that cancel.

    The augmented coordinate may differ per row: ``coef0`` is a float or an (n,) array of
    the squared last coordinates ``a_x^2`` of the rows of ``X`` (``coef0_y`` the same for
    ``Y``, default ``coef0``); unit rows ``x~ / |x~|`` have ``a_x^2 = coef0 / |x~|^2``.
    With ``a = a_x a_y``::

        A = |x|^2 |y|^2 + a_x^2 |y|^2 + a_y^2 |x|^2 - sum_k x_k^2 y_k^2
        B = (x.y)^2 + 2 a (x.y) - sum_k x_k^2 y_k^2

    so a constant that dominates small rows (``coef0 >> |x|^2``) leaves every digit of
    the differences, which ``N - S`` and ``G^2 - S`` lose (both carry ``coef0^2``).
    """
    Y = X if Y is None else Y
    xp = _namespace_of(X)
    cx = coef0
    cy = cx if coef0_y is None else coef0_y
    dot = X @ xp.matrix_transpose(Y)  # (n, m)
    X2, Y2 = X * X, Y * Y
    sq = X2 @ xp.matrix_transpose(Y2)  # sum_k x_k^2 y_k^2
    nx = xp.sum(X2, axis=1)
    ny = nx if Y is X else xp.sum(Y2, axis=1)
    prod = nx[:, None] * ny[None, :]
    per_row = getattr(cx, "ndim", 0) >= 1 or getattr(cy, "ndim", 0) >= 1
    if not per_row:
        cx, cy = float(cx), float(cy)
        if cx == cy == 0.0:
            return dot, prod, sq, prod - sq, dot * dot - sq
    cx_col = cx[:, None] if getattr(cx, "ndim", 0) >= 1 else cx  # (n, 1) or a float
    cy_row = cy[None, :] if getattr(cy, "ndim", 0) >= 1 else cy  # (1, m) or a float
    if per_row:  # squares of augmented coordinates (unit rows): a_x a_y >= 0
        a = xp.sqrt(cx_col * cy_row)
    else:  # one coef0 c on both sides, of any sign: x~.y~ = x.y + c, as the kernel's
        a = cx if cx == cy else math.sqrt(cx * cy)
    G = dot + a
    S = sq + cx_col * cy_row
    N = (nx[:, None] + cx_col) * (ny[None, :] + cy_row)
    A = (prod - sq) + cx_col * ny[None, :] + cy_row * nx[:, None]
    B = dot * (dot + 2.0 * a) - sq
    return G, N, S, A, B


def unit_rows(A):
    """``(A / |A|, log |A|^2)`` of the rows of ``A`` (n, d), shapes (n, d) and (n,).

    ``|a| = amax |a / amax|`` with ``amax = max_k |a_k|``, so the norm never overflows
    or underflows; zero rows stay zero (with ``log |a|^2`` reported as 0: every variance
    of a zero row is 0 whatever its scale). The variances of the dot-product maps are
    homogeneous in each row, so they are formed on these unit rows and scaled back in log
    space. Autograd-safe at zero rows (gradient 0 there, not ``sqrt'(0) * 0 = nan``).
    """
    xp = _namespace_of(A)
    amax = xp.max(xp.abs(A), axis=1)  # (n,)
    amax = xp.where(amax > 0, amax, xp.ones_like(amax))
    A = A / amax[:, None]
    sq = xp.sum(A * A, axis=1)  # (n,) in [1, d] or 0
    norm = xp.sqrt(xp.where(sq > 0, sq, xp.ones_like(sq)))  # zero rows stay zero
    return A / norm[:, None], 2.0 * (xp.log(amax) + xp.log(norm))


def _pow_diff(A, B, delta, p: int):
    """``A^p - B^p`` given ``delta = A - B``, as ``delta * sum_k A^(p-1-k) B^k``.

    No cancellation when ``A, B >= 0`` (``delta`` is the only difference taken).
    """
    s = 1.0
    Bk = None
    for _ in range(1, p):
        Bk = B if Bk is None else Bk * B
        s = s * A + Bk
    return delta * s


def _clip0(xp, V):
    return xp.clip(V, min=0.0) if hasattr(V, "shape") else max(V, 0.0)


def iid_sketch_variance(
    G,
    N,
    S,
    degree: int,
    n_features: int = 1,
    *,
    q: float = 1.0,
    m4: float = 1.0,
    kind: str = "complex",
    gaps=None,
):
    """Variance of an i.i.d. sketch estimate of ``G^degree`` (Theorem 2, eq. 16-21).

    Parameters
    ----------
    G, N, S : arrays (or floats) from :func:`pair_statistics`.
    degree : int
    n_features : int
        ``D``; the variance is divided by it.
    q : float
        ``E (Re z)^2`` of the weight entries (1: real, 1/2: Ex. 2-4).
    m4 : float
        ``E |z|^4`` (1: Rademacher / unit circle, 3: real Gaussian, 2: complex Gaussian).
    kind : {"complex", "real"}
        ``"complex"``: ``E|k_hat - k|^2`` (eq. 16, the paper's); ``"real"``:
        ``E(Re k_hat - k)^2`` (the variance of the real part).
    gaps : (A, B), optional
        ``N - S`` and ``G^2 - S`` from :func:`pair_terms` (without cancellation); by
        default formed from ``N``, ``S`` and ``G``.

    Returns
    -------
    Same shape as ``G``, non-negative.
    """
    p = int(degree)
    r2 = (2.0 * q - 1.0) ** 2
    G2 = G * G
    A, B = (N - S, G2 - S) if gaps is None else gaps
    # E|a|^2 - G^2 for one degree: (m4 - 2 - r^2) S + N + r^2 G^2 (eq. 16 with p = 1),
    # = (m4 - 1) S + A + r^2 B
    d_abs = A + r2 * B if m4 == 1.0 else (m4 - 1.0) * S + A + r2 * B
    V = _pow_diff(G2 + d_abs, G2, d_abs, p)
    if kind == "real":
        # E a^2 - G^2 for one degree: (m4 - r^2 - 2) S + r^2 N + G^2 = (m4 - 1) S + r^2 A + B
        d_sq = r2 * A + B if m4 == 1.0 else (m4 - 1.0) * S + r2 * A + B
        V = 0.5 * (V + _pow_diff(G2 + d_sq, G2, d_sq, p))
    elif kind != "complex":
        raise ValueError(f"kind must be 'complex' or 'real', got {kind!r}.")
    return V / int(n_features)


def srht_c(n_features: int, d: int) -> int:
    """``c(D, d) = floor(D/d) d (d - 1) + r (r - 1)``, ``r = D mod d`` (eq. 29): the number of
    ordered pairs of distinct features within the same block."""
    D, d = int(n_features), int(d)
    r = D % d
    return (D // d) * d * (d - 1) + r * (r - 1)


def tensor_srht_variance(
    G,
    N,
    S,
    degree: int,
    n_features: int,
    d: int,
    *,
    complex: bool = False,
    kind: str = "complex",
    gaps=None,
):
    """Variance of the TensorSRHT estimate (Theorems 5 and 10, eq. 28/33).

    ``V_q^(p)/D - c(D, d)/D^2 [G^(2p) - (G^2 - V_q^(1)/(d - 1))^p]`` with
    ``V_q^(1) = N - S + (2q - 1)^2 (G^2 - S)`` (``q = 1`` real, ``1/2`` complex) and ``d``
    the **padded** dimension (erratum 9). ``kind="real"`` gives ``E(Re k_hat - k)^2``
    (see the module docstring).

    Parameters
    ----------
    G, N, S : arrays from :func:`pair_statistics` (on the augmented, unpadded inputs;
        zero-padding changes none of them).
    degree, n_features : int
    d : int
        Padded dimension (a power of two).
    complex : bool
    kind : {"complex", "real"}
    gaps : (A, B), optional
        ``N - S`` and ``G^2 - S`` from :func:`pair_terms`, as in :func:`iid_sketch_variance`.
    """
    p, D, d = int(degree), int(n_features), int(d)
    r2 = 0.0 if complex else 1.0
    G2 = G * G
    c = srht_c(D, d)

    def one(v1):
        V = _pow_diff(G2 + v1, G2, v1, p) / D
        if c and d > 1:
            e = v1 / (d - 1)
            V = V - (c / (D * D)) * _pow_diff(G2, G2 - e, e, p)
        return V

    A, B = (N - S, G2 - S) if gaps is None else gaps
    V = one(A + r2 * B)
    if kind == "real":
        V = 0.5 * (V + one(B + r2 * A))
    elif kind != "complex":
        raise ValueError(f"kind must be 'complex' or 'real', got {kind!r}.")
    return V


def tensor_sketch_variance(G, N, S, degree: int, n_features: int, *, gaps=None):
    """Variance of the TensorSketch estimate of ``G^degree`` (derived; not in the paper).

    With ``A = N - S``, ``B = G^2 - S`` and ``g = gcd(2, D)``::

        Var = [(G^2 + A)^p + (G^2 + B)^p - 2 G^(2p)] / D
              + g / D^2 [(G^2 + A + B)^p - (G^2 + A)^p - (G^2 + B)^p + G^(2p)]

    Derivation: ``k_hat - k = sum_(a != b) sigma(a) sigma(b) X_a Y_b 1[H(a) = H(b)]`` over
    tensor indices ``a, b in [d]^p`` (``H(a) = sum_i h_i(a_i) mod D``). The sign expectation
    leaves, on the set ``T`` of degrees where ``a_i != b_i``, ``(c_i, e_i) = (a_i, b_i)``
    (weight ``x_a^2 y_b^2``, summing to ``A``) or ``(b_i, a_i)`` (weight ``B``), and
    ``c_i = e_i`` elsewhere (``G^2``). Both hash collisions happen with probability ``1/D``
    when the choice is the same on all of ``T``, else ``gcd(2, D)/D^2`` (the differences
    ``h_i(a_i) - h_i(b_i)`` are independent and uniform on ``Z_D``). For ``p = 1`` this is
    the count-sketch variance ``(N + G^2 - 2S)/D``. ``gaps``: ``(A, B)`` from
    :func:`pair_terms` (without cancellation), by default formed from ``N``, ``S``, ``G``.
    """
    p, D = int(degree), int(n_features)
    g = 2 if D % 2 == 0 else 1
    G2 = G * G
    A, B = (N - S, G2 - S) if gaps is None else gaps
    pa = _pow_diff(G2 + A, G2, A, p)  # (G^2 + A)^p - G^2p
    pb = _pow_diff(G2 + B, G2, B, p)
    pab = _pow_diff(G2 + A + B, G2, A + B, p)
    return (pa + pb) / D + (g / (D * D)) * (pab - pa - pb)
