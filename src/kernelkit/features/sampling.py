"""Samplers of random projection matrices shared by all feature maps.

Every sampler returns a NumPy array ``W`` of shape ``(n_features, d)`` whose rows are
each marginally ``N(0, I_d)``, so any feature map that is unbiased with i.i.d.
Gaussian rows stays unbiased with them. Backends receive them through
:func:`kernelkit._backend.to_backend`.
"""

from __future__ import annotations

import numpy as np

from .._backend import ThreadFlag, check_random_state, validate_positive_int
from .._backend.fwht import fwht

__all__ = [
    "BIASED_SAMPLERS",
    "SAMPLERS",
    "biased_sampler_warnings_off",
    "block_orthogonal_projection",
    "draw_projection",
    "gaussian_projection",
    "halton_projection",
    "structured_hadamard_projection",
]

#: samplers whose rows are only approximately N(0, I) (discrete directions): their
#: estimates are biased and the analytic (i.i.d.) variance does not bound their error
BIASED_SAMPLERS = ("sorf", "hadamard")

#: set (per thread) inside :func:`biased_sampler_warnings_off`
_BIASED_QUIET = ThreadFlag()


def biased_sampler_warnings_off():
    """Context: the calling thread's analytic variances and expected kernels of biased
    samplers do not warn (callers that rank them by design, ``RandomFeatures(method=
    "auto")``). Per thread (:class:`~kernelkit._backend.ThreadFlag`), unlike
    ``warnings.catch_warnings``, whose save and restore of the process-wide filters under
    concurrent fits left the caller's filter installed for good, or dropped another
    thread's."""
    return _BIASED_QUIET.on()


def gaussian_projection(n_features: int, d: int, random_state=None) -> np.ndarray:
    """I.i.d. Gaussian projection rows.

    Parameters
    ----------
    n_features : int
        The number of rows.
    d : int
        The input dimension.
    random_state : None, int or numpy.random.Generator

    Returns
    -------
    W : ndarray, shape (n_features, d)
        Entries i.i.d. N(0, 1).
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

    Parameters
    ----------
    n_features : int
        The number of rows.
    d : int
        The input dimension.
    random_state : None, int or numpy.random.Generator

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
    Rows stay orthogonal within a block when ``d`` is a power of two. Otherwise a row can
    vanish on the ``d`` columns kept; such a row takes the direction of a Gaussian row
    instead. The directions are still discrete, so estimators remain only approximately
    unbiased.

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
        T = fwht(T, axis=0) * signs[1][:, None]  # D2 H D3 (H unnormalised)
        T = fwht(T, axis=0) * signs[0][:, None]  # D1 H D2 H D3
        T = fwht(T, axis=0)  # H D1 H D2 H D3, unnormalised: entries scale dp^(3/2)
        blocks.append(T[:, :d] / dp)  # sqrt(dp) * (H/sqrt(dp))^3 = H^3 / dp
    W = np.concatenate(blocks, axis=0)[:n_features]  # (M, d)
    if chi_norms:
        norms = np.linalg.norm(W, axis=1)  # (M,)
        # d not a power of two: a row of a block can vanish on the d columns kept (6% of
        # rows at d = 3), and a zero row has no direction to rescale. It takes the
        # direction of a Gaussian row instead (uniform on the sphere), so that every row
        # has a chi_d norm and E[w w^T] = I holds as for the other rows
        zero = norms == 0
        if np.any(zero):
            W[zero] = rng.standard_normal((int(np.count_nonzero(zero)), d))
            norms[zero] = np.linalg.norm(W[zero], axis=1)
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


def draw_projection(n_features: int, d: int, random_state=None, sampler: str = "iid"):
    """Draw ``(n_features, d)`` projection rows with the sampler named ``sampler``.

    The one way every feature map draws its Gaussian projections: ``sampler`` is the
    maps' parameter of the same name.

    Parameters
    ----------
    n_features, d : int
    random_state : None, int or numpy.random.Generator
    sampler : {"iid", "orthogonal", "sorf", "hadamard", "halton"}
        A name of :data:`SAMPLERS`.

    Returns
    -------
    W : ndarray, shape (n_features, d)
    """
    if not isinstance(sampler, str) or sampler not in SAMPLERS:
        raise ValueError(f"Unknown sampler {sampler!r}; expected one of {sorted(SAMPLERS)}.")
    return SAMPLERS[sampler](n_features, d, random_state)
