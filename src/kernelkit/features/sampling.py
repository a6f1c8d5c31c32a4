"""Samplers of random projection matrices shared by all feature maps.

Every sampler returns a NumPy array ``W`` of shape ``(n_features, d)`` whose rows are
each marginally ``N(0, I_d)``, so any feature map that is unbiased with i.i.d.
Gaussian rows stays unbiased with them. Backends receive them through
:func:`kernelkit._backend.to_backend`.
"""

from __future__ import annotations

import numpy as np

from .._backend import check_random_state, validate_positive_int

__all__ = [
    "block_orthogonal_projection",
    "draw_projection",
    "gaussian_projection",
    "structured_hadamard_projection",
]


def gaussian_projection(n_features: int, d: int, random_state=None) -> np.ndarray:
    """I.i.d. Gaussian projection rows.

    Returns
    -------
    W : ndarray, shape (n_features, d), entries i.i.d. N(0, 1).
    """
    n_features = validate_positive_int(n_features, "n_features")
    d = validate_positive_int(d, "d")
    rng = check_random_state(random_state)
    return rng.standard_normal((n_features, d))


def haar_orthogonal(d: int, random_state=None) -> np.ndarray:
    """A Haar-distributed random orthogonal matrix, shape (d, d).

    QR of a Gaussian matrix with the signs of ``diag(R)`` moved into ``Q``
    (Mezzadri, 2007), so the distribution is exactly Haar.
    """
    rng = check_random_state(random_state)
    G = rng.standard_normal((d, d))
    Q, R = np.linalg.qr(G)
    signs = np.sign(np.diag(R))
    signs[signs == 0] = 1.0
    return Q * signs[None, :]


def block_orthogonal_projection(n_features: int, d: int, random_state=None) -> np.ndarray:
    """Block-orthogonal projection rows (ORF / Performer construction).

    ``ceil(n_features / d)`` independent Haar-orthogonal ``d x d`` blocks are stacked;
    each row is rescaled by an independent ``chi_d`` norm (the norm of a fresh
    ``N(0, I_d)`` vector), and the first ``n_features`` rows are kept. Rows inside one
    block are exactly orthogonal; each row is marginally ``N(0, I_d)``.

    Returns
    -------
    W : ndarray, shape (n_features, d)
    """
    n_features = validate_positive_int(n_features, "n_features")
    d = validate_positive_int(d, "d")
    rng = check_random_state(random_state)
    n_blocks = -(-n_features // d)
    blocks = [haar_orthogonal(d, rng) for _ in range(n_blocks)]  # each (d, d), rows unit
    W = np.concatenate(blocks, axis=0)[:n_features]  # (M, d)
    norms = np.sqrt(rng.chisquare(d, size=n_features))  # chi_d
    return W * norms[:, None]


def _fwht_axis0(A: np.ndarray) -> np.ndarray:
    """Unnormalised fast Walsh-Hadamard transform along axis 0: ``H_n @ A`` (Sylvester
    ``H``, ``n`` a power of two), O(n k log n) for ``A`` of shape (n, k)."""
    n = A.shape[0]
    A = np.array(A, dtype=np.float64, copy=True)
    h = 1
    while h < n:
        B = A.reshape(n // (2 * h), 2, h, -1)
        top = B[:, 0] + B[:, 1]
        B[:, 1] = B[:, 0] - B[:, 1]
        B[:, 0] = top
        h *= 2
    return A


def structured_hadamard_projection(n_features: int, d: int, random_state=None) -> np.ndarray:
    """Structured orthogonal random features (SORF; Yu et al., NIPS 2016).

    Each block is ``sqrt(d') H D1 H D2 H D3`` with ``H = H_{d'} / sqrt(d')`` the normalised
    Sylvester-Hadamard matrix, ``D_i`` independent diagonal matrices of Rademacher signs and
    ``d' = 2^ceil(log2 d)`` (inputs are implicitly zero-padded to ``d'``: only the first
    ``d`` columns are kept). ``ceil(n_features / d')`` independent blocks are stacked and
    the first ``n_features`` rows kept. Built with the fast Walsh-Hadamard transform,
    O(d'^2 log d') per block.

    Unlike the other samplers, the rows are only *approximately* ``N(0, I_d)``: rows of a
    block are exactly orthogonal with norm ``sqrt(d')`` before truncation to ``d`` columns
    (no chi-distributed radius), entries have mean 0 and variance 1, but they take
    discrete values. Feature maps that are unbiased under Gaussian rows are therefore only
    approximately unbiased with SORF; the bias vanishes as ``d`` grows (Yu et al., Thm. 3:
    ``O(1/sqrt(d))`` for the Gaussian kernel).

    Returns
    -------
    W : ndarray, shape (n_features, d)
    """
    n_features = validate_positive_int(n_features, "n_features")
    d = validate_positive_int(d, "d")
    rng = check_random_state(random_state)
    dp = 1 << max(0, (d - 1).bit_length())  # padded dimension, power of two >= d
    n_blocks = -(-n_features // dp)
    blocks = []
    for _ in range(n_blocks):
        signs = rng.choice(np.array([-1.0, 1.0]), size=(3, dp))  # D1, D2, D3
        T = np.diag(signs[2])  # D3
        T = _fwht_axis0(T) * signs[1][:, None]  # D2 H D3 (H unnormalised)
        T = _fwht_axis0(T) * signs[0][:, None]  # D1 H D2 H D3
        T = _fwht_axis0(T)  # H D1 H D2 H D3, unnormalised: entries scale dp^(3/2)
        blocks.append(T[:, :d] / dp)  # sqrt(dp) * (H/sqrt(dp))^3 = H^3 / dp
    return np.concatenate(blocks, axis=0)[:n_features]


def draw_projection(n_features: int, d: int, random_state=None, orthogonal: bool = False):
    """Dispatch to :func:`block_orthogonal_projection` or :func:`gaussian_projection`."""
    if orthogonal:
        return block_orthogonal_projection(n_features, d, random_state)
    return gaussian_projection(n_features, d, random_state)
