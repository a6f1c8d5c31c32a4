"""Samplers of random projection matrices shared by all feature maps.

Every sampler returns a NumPy array ``W`` of shape ``(n_features, d)`` whose rows are
each marginally ``N(0, I_d)``, so any feature map that is unbiased with i.i.d.
Gaussian rows stays unbiased with them. Backends receive them through
:func:`kernelkit._backend.to_backend`.
"""

from __future__ import annotations

import numpy as np

from .._backend import check_random_state, validate_positive_int

__all__ = ["block_orthogonal_projection", "draw_projection", "gaussian_projection"]


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


def draw_projection(n_features: int, d: int, random_state=None, orthogonal: bool = False):
    """Dispatch to :func:`block_orthogonal_projection` or :func:`gaussian_projection`."""
    if orthogonal:
        return block_orthogonal_projection(n_features, d, random_state)
    return gaussian_projection(n_features, d, random_state)
