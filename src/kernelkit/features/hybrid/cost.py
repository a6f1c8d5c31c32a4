"""Cost matching of hybrid and regular random feature maps.

Implements the FLOP counts of App. L (eq. 106) of K. Choromanski et al., "Hybrid Random
Features" (ICLR 2022) and the "FLOP-matched" rule of its comparisons (Fig. 2, Table 1).
"""

from __future__ import annotations

from ..._backend import validate_positive_int


def regular_feature_flops(n_features: int, d: int) -> int:
    """FLOPs to compute a regular random feature map of one input (App. L, eq. 106).

    A trig / positive / hyperbolic map with ``M = n_features`` projections costs
    ``2 M d`` (the projection ``W x``: a multiply and an add per entry) ``+ 2 M`` (two
    nonlinearities per projection: sin and cos, or ``exp(+w.x)`` and ``exp(-w.x)``).
    The Hybrid RF experiments state their FLOP rule with the same constants.
    """
    M = validate_positive_int(n_features, "n_features")
    d = validate_positive_int(d, "d")
    return 2 * M * d + 2 * M


def hybrid_feature_flops(
    n_features: int, n_lambda: int, d: int, *, shared_projection: bool = True
) -> int:
    """FLOPs to compute the angular hybrid map of one input (App. L, eq. 106).

    ``2 (m + n) d`` (projections ``W x`` and ``T x``; ``2 (2m + n) d`` with independent
    base projections) ``+ 4 m`` (sin, cos, ``exp(+)``, ``exp(-)``) ``+ n`` (signs)
    ``+ 4 m n`` (the outer products ``s (x) phi_trig`` and ``s (x) phi_++``, ``2 m n``
    entries each), with ``m = n_features`` and ``n = n_lambda``.
    """
    m = validate_positive_int(n_features, "n_features")
    n = validate_positive_int(n_lambda, "n_lambda")
    d = validate_positive_int(d, "d")
    return 2 * ((m if shared_projection else 2 * m) + n) * d + 4 * m + n + 4 * m * n


def matched_n_features(
    n_features: int,
    d: int,
    n_lambda: int = 8,
    *,
    shared_projection: bool = True,
    rule: str = "flops",
) -> int:
    """Base size ``m`` of an angular hybrid matched in cost to a regular map.

    The matching rule used by the paper's comparisons ("FLOP-matched", Fig. 2, Table 1):

    * ``rule="flops"`` (default): the largest ``m`` with
      ``hybrid_feature_flops(m, n, d) <= regular_feature_flops(M, d)``, i.e.
      ``2(m + n)d + 4m + n + 4mn <= 2Md + 2M`` (shared projections;
      ``2(2m + n)d + ...`` for independent ones): the cost of *computing the features of
      one input* is matched (App. L: ``O(nd + md + mn)`` against ``O(Md)``).
      The hybrid's output dimension ``4m(n+1)`` is then larger than the regular ``2M``, so a
      downstream ``O(L D)`` product (attention, Gram matrices) costs more.
    * ``rule="dimension"``: the largest ``m`` with ``4m(n+1) <= 2M``, i.e. the same output
      dimension as a sin/cos trig map or antithetic FAVOR+ map with ``M`` projections.

    Parameters
    ----------
    n_features : int
        ``M``, projections of the regular map (TrigRF / PositiveRF / HyperbolicRF).
    d : int
        Input dimension.
    n_lambda : int
        ``n``, projections of the hybrid's coefficient estimator.
    shared_projection : bool
        Whether the hybrid shares ``W`` between its two base estimators.
    rule : {"flops", "dimension"}

    Returns
    -------
    int
        ``m >= 1``.

    Raises
    ------
    ValueError
        When even ``m = 1`` exceeds the budget.

    Examples
    --------
    >>> matched_n_features(128, 64, 8)
    95
    >>> matched_n_features(128, 64, 8, rule="dimension")
    7
    """
    M = validate_positive_int(n_features, "n_features")
    d = validate_positive_int(d, "d")
    n = validate_positive_int(n_lambda, "n_lambda")
    if rule == "flops":
        budget = regular_feature_flops(M, d)
        fixed = 2 * n * d + n  # cost of the lambda part, independent of m
        per_m = 2 * d * (1 if shared_projection else 2) + 4 + 4 * n
        m = (budget - fixed) // per_m
    elif rule == "dimension":
        m = (2 * M) // (4 * (n + 1))
    else:
        raise ValueError(f"rule must be 'flops' or 'dimension', got {rule!r}.")
    if m < 1:
        raise ValueError(
            f"No angular hybrid with n_lambda={n} fits the budget of a regular map with "
            f"n_features={M} (d={d}, rule={rule!r}); lower n_lambda or raise n_features."
        )
    return int(m)
