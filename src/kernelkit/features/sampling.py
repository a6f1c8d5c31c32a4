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
    "SAMPLERS",
    "block_orthogonal_projection",
    "draw_projection",
    "gaussian_projection",
    "halton_projection",
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


def structured_hadamard_projection(
    n_features: int, d: int, random_state=None, *, chi_norms: bool = False
) -> np.ndarray:
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

    ``chi_norms=True`` gives the Hadamard-based orthogonal random features ("ORF-Had",
    Choromanski et al. 2017; Table 1 of Hybrid Random Features): the same SORF directions,
    each row rescaled to an independent ``chi_d`` norm (as :func:`block_orthogonal_projection`
    does for Haar blocks), so that row norms are distributed as those of ``N(0, I_d)`` rows.
    Rows stay orthogonal within a block when ``d`` is a power of two. The directions are
    still discrete, so estimators remain only approximately unbiased.

    Parameters
    ----------
    n_features, d : int
    random_state : None, int or numpy.random.Generator
    chi_norms : bool
        Rescale rows to independent ``chi_d`` norms (ORF-Had); default ``False`` (SORF).

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
    W = np.concatenate(blocks, axis=0)[:n_features]  # (M, d)
    if chi_norms:
        norms = np.linalg.norm(W, axis=1)  # > 0: a row of an orthogonal matrix restricted
        norms[norms == 0] = 1.0  # to d >= 1 columns can vanish only in degenerate cases
        W = W * (np.sqrt(rng.chisquare(d, size=W.shape[0])) / norms)[:, None]
    return W


#: unit-interval guard for the inverse normal CDF (keeps Halton rows finite)
_U_EPS = 2.0**-53


def halton_projection(
    n_features: int, d: int, random_state=None, *, scramble: bool = True
) -> np.ndarray:
    """Randomised Halton quasi-Monte Carlo rows mapped to Gaussians ("Halton-R").

    ``n_features`` points of the ``d``-dimensional Halton sequence
    (:class:`scipy.stats.qmc.Halton`, digit-scrambled when ``scramble``), shifted by one
    uniform random vector modulo 1 (Cranley-Patterson rotation), and mapped coordinate-wise
    through the inverse normal CDF. The random shift makes every row *exactly* ``N(0, I_d)``
    marginally (a fixed point plus a uniform shift mod 1 is uniform on the cube), so every
    estimator that is unbiased with i.i.d. Gaussian rows stays unbiased; the rows are
    negatively dependent (low discrepancy), which lowers the variance for smooth integrands.

    Parameters
    ----------
    n_features, d : int
    random_state : None, int or numpy.random.Generator
        Seeds both the scrambling and the shift.
    scramble : bool
        Scramble the Halton digits before the shift (default ``True``).

    Returns
    -------
    W : ndarray, shape (n_features, d)
    """
    from scipy.special import ndtri
    from scipy.stats import qmc

    n_features = validate_positive_int(n_features, "n_features")
    d = validate_positive_int(d, "d")
    rng = check_random_state(random_state)
    seed = int(rng.integers(0, 2**63 - 1))
    U = qmc.Halton(d, scramble=bool(scramble), rng=np.random.default_rng(seed)).random(
        n_features
    )  # (M, d) in [0, 1)
    U = (U + rng.random(d)[None, :]) % 1.0  # Cranley-Patterson rotation
    np.clip(U, _U_EPS, 1.0 - _U_EPS, out=U)
    return ndtri(U)


def _hadamard_chi(n_features, d, random_state=None):
    return structured_hadamard_projection(n_features, d, random_state, chi_norms=True)


#: projection samplers by name, ``(n_features, d, random_state) -> (n_features, d)``.
#: "iid": i.i.d. Gaussian; "orthogonal": block-orthogonal with chi norms (ORF-reg);
#: "sorf": structured Hadamard SORF (fixed norms); "hadamard": SORF directions with chi
#: norms (ORF-Had); "halton": randomised Halton QMC (Halton-R).
SAMPLERS = {
    "iid": gaussian_projection,
    "orthogonal": block_orthogonal_projection,
    "sorf": structured_hadamard_projection,
    "hadamard": _hadamard_chi,
    "halton": halton_projection,
}


def resolve_sampler(orthogonal=False, sampler=None) -> str:
    """Name of the sampler selected by the ``orthogonal`` / ``sampler`` pair.

    ``orthogonal`` may be a bool (``False`` -> "iid", ``True`` -> "orthogonal") or, so that
    every feature map's ``orthogonal=`` parameter can select any sampler, a sampler name.
    ``sampler`` (a name) overrides ``orthogonal=False``; combining it with a different
    ``orthogonal`` choice is an error.
    """
    if isinstance(orthogonal, str):
        from_orth = orthogonal
    elif isinstance(orthogonal, bool | np.bool_):
        from_orth = "orthogonal" if orthogonal else "iid"
    else:
        raise TypeError(
            f"orthogonal must be a bool or a sampler name {sorted(SAMPLERS)}, got {orthogonal!r}."
        )
    if sampler is None:
        name = from_orth
    elif not isinstance(sampler, str):
        raise TypeError(f"sampler must be a string in {sorted(SAMPLERS)}, got {sampler!r}.")
    else:
        if from_orth not in ("iid", sampler):
            raise ValueError(
                f"sampler={sampler!r} conflicts with orthogonal={orthogonal!r}; pass one."
            )
        name = sampler
    if name not in SAMPLERS:
        raise ValueError(f"Unknown sampler {name!r}; expected one of {sorted(SAMPLERS)}.")
    return name


def draw_projection(
    n_features: int, d: int, random_state=None, orthogonal=False, sampler: str | None = None
):
    """Draw ``(n_features, d)`` projection rows with the selected sampler.

    Parameters
    ----------
    n_features, d : int
    random_state : None, int or numpy.random.Generator
    orthogonal : bool or str
        ``False``: i.i.d. Gaussian (:func:`gaussian_projection`); ``True``: block-orthogonal
        (:func:`block_orthogonal_projection`); a string: any name of :data:`SAMPLERS`
        (lets a feature map's ``orthogonal=`` parameter pick e.g. ``"halton"``).
    sampler : str, optional
        A name of :data:`SAMPLERS` ("iid", "orthogonal", "sorf", "hadamard", "halton");
        overrides ``orthogonal=False``.

    Returns
    -------
    W : ndarray, shape (n_features, d)
    """
    return SAMPLERS[resolve_sampler(orthogonal, sampler)](n_features, d, random_state)
