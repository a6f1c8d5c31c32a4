"""Shared pieces of the JDL experiments (``jdl-gaussian``, ``jdl-small``,
``jdl-classification``) and the ``jdl`` benchmark: metrics, hyper-parameter grids, a
model construction, grid searches that share bases through
:class:`kernelkit.distributions.BasisCache`, and plotting helpers.

Metrics (JDL paper, Sec. 5.1):

* loss (31): ``mean_i ||M(x_i) - M_hat(x_i)||_F^2 / ||M(x_i)||_F^2`` against the true
  conditional second moments (:func:`kernelkit.distributions.second_moment_loss`);
* normalisation error: ``max_i |E_model[1 | x_i] - 1|``;
* positivity error: the fraction of test points whose ``M_hat(x)`` is not positive
  semi-definite "up to machine precision" (the paper gives no threshold; ours:
  smallest eigenvalue ``< -PSD_RTOL * max |eigenvalue|``);
* loss (32), the clipped logistic loss (:func:`kernelkit.distributions.clipped_log_loss`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
import warnings

import numpy as np

__all__ = [
    "MODEL_LABELS",
    "PSD_RTOL",
    "fit_model",
    "grid_for",
    "median_distance",
    "moments_and_totals",
    "negative_fraction",
    "nonpositive_mass_fraction",
    "normalization_error",
    "psd_violation_fraction",
    "quiet_mass_warnings",
    "rel_tol_for_n",
    "second_moment_loss",
    "select",
]

#: relative threshold of the PSD check: M is "not PSD" if
#: lambda_min(M) < -PSD_RTOL * max |lambda(M)| (about 500 ulps of the largest eigenvalue)
PSD_RTOL = 1e-13

MODEL_LABELS = {"jdl": "JDL", "jpdl": "JPDL", "cme": "CME", "klr": "KLR"}
VARIANT_LABELS = {False: "unconstrained", True: "constrained"}


# ====================================================================== metrics
def normalization_error(totals) -> float:
    """``max_i |E[1 | x_i] - 1|`` from the predicted totals ``E[1 | x_i]`` (n,)."""
    totals = np.asarray(totals, dtype=np.float64)
    return float(np.max(np.abs(totals - 1.0))) if totals.size else 0.0


def psd_violation_fraction(M, rtol: float = PSD_RTOL) -> float:
    """Fraction of the matrices ``M[i]`` (n, d, d) that are not PSD up to ``rtol``."""
    M = np.asarray(M, dtype=np.float64)
    w = np.linalg.eigvalsh((M + np.swapaxes(M, -1, -2)) / 2)  # (n, d), ascending
    scale = np.abs(w).max(axis=-1)
    return float(np.mean(w[..., 0] < -rtol * scale))


def negative_fraction(values) -> float:
    """Fraction of negative entries (e.g. Radon-Nikodym derivatives, Fig. 7(b))."""
    values = np.asarray(values)
    return float(np.mean(values < 0)) if values.size else 0.0


def second_moment_loss(M_true, M_pred) -> float:
    """Loss (31) (:func:`kernelkit.distributions.second_moment_loss`)."""
    from kernelkit.distributions import second_moment_loss as loss

    return loss(M_true, M_pred)


def rel_tol_for_n(n: int) -> float:
    """The paper's relative pivoted-Cholesky tolerance for a data size ``n`` (Sec. 5.1):
    1e-3 up to 1e5, 1e-2 at 1e6, 1e-1 at 1e7."""
    if n <= 100_000:
        return 1e-3
    if n <= 1_000_000:
        return 1e-2
    return 1e-1


def median_distance(X, max_points: int = 2000, random_state=0) -> float:
    """Median pairwise Euclidean distance of (a subsample of) the rows of ``X``."""
    X = np.asarray(X, dtype=np.float64)
    if len(X) > max_points:
        X = X[np.random.default_rng(random_state).choice(len(X), max_points, replace=False)]
    sq = np.einsum("ij,ij->i", X, X)
    D2 = np.maximum(sq[:, None] + sq[None, :] - 2 * X @ X.T, 0.0)
    iu = np.triu_indices(len(X), 1)
    med = float(np.sqrt(np.median(D2[iu]))) if iu[0].size else 1.0
    return med if med > 0 else 1.0


# ====================================================================== models
def fit_model(kind: str, constrained: bool, X, Y, params: dict, rel_tol: float, cache=None):
    """Fit one model of Sec. 5 with hyper-parameters ``params``.

    ``kind``: ``"jdl"`` (:class:`JointDistribution`; constrained = (20) + (29),
    ``constraint="positive"``), ``"cme"`` (:class:`ConditionalMeanEmbedding`; constrained
    = (51) + (52), ``constraint="positive"``), ``"jpdl"``
    (:class:`PolynomialJointDistribution`, degree 4; constrained = (20) + SOS (39)) or
    ``"klr"`` (:class:`KernelLogisticRegression` on the labels ``Y``; no variants).
    ``cache``: a :class:`kernelkit.distributions.BasisCache` shared by the kernel models
    (JPDL's polynomial basis is cheap and not cached).
    """
    from kernelkit import distributions as D

    con = "positive" if constrained else None
    if kind == "jdl":
        est = D.JointDistribution(rel_tol=rel_tol, constraint=con, basis_cache=cache, **params)
    elif kind == "cme":
        est = D.ConditionalMeanEmbedding(
            rel_tol=rel_tol, constraint=con, basis_cache=cache, **params
        )
    elif kind == "jpdl":
        est = D.PolynomialJointDistribution(degree=4, constraint=con, **params)
    elif kind == "klr":
        est = D.KernelLogisticRegression(rel_tol=rel_tol, basis_cache=cache, **params)
    else:
        raise ValueError(f"unknown model {kind!r}.")
    return est.fit(X, Y)


def grid_for(kind: str, ls_x, ls_y, regs, regs_poly) -> list[dict]:
    """Hyper-parameter grid of a model (lists of lengthscales and regularisations)."""
    if kind == "jpdl":
        return [{"reg": r} for r in regs_poly]
    if kind == "klr":
        return [{"lengthscale": lx, "reg": r} for lx, r in itertools.product(ls_x, regs)]
    return [
        {"lengthscale_x": lx, "lengthscale_y": ly, "reg": r}
        for lx, ly, r in itertools.product(ls_x, ls_y, regs)
    ]


def select(kind, constrained, Xtr, Ytr, grid, val_loss, rel_tol, cache=None):
    """Fit every grid point on ``(Xtr, Ytr)`` and keep the best.

    The fits share one :class:`kernelkit.distributions.BasisCache` (``cache``, or a new
    one), so a grid costs one pivoted Cholesky per (side, lengthscale); results equal
    uncached fits. ``val_loss(model) -> float`` is the validation loss. Returns
    ``(model, params, loss, all_losses)``; a grid point whose fit fails (e.g. an
    infeasible constrained problem) or gives a non-finite loss is skipped.
    """
    from kernelkit.distributions import BasisCache

    cache = BasisCache() if cache is None else cache
    best = (math.inf, None, None)
    losses = []
    for params in grid:
        try:
            model = fit_model(kind, constrained, Xtr, Ytr, params, rel_tol, cache)
            value = float(val_loss(model))
        except (ValueError, RuntimeError, np.linalg.LinAlgError):
            value = math.nan
        losses.append(value)
        if math.isfinite(value) and value < best[0]:
            best = (value, params, model)
    if best[1] is None:
        raise RuntimeError(f"no grid point of {kind} gave a finite validation loss.")
    return best[2], best[1], best[0], losses


def nonpositive_mass_fraction(model, Xq) -> float | None:
    """Fraction of query points where a tensor model's conditional has mass <= 0
    (``marginal_ratio(x) <= 0``: the conditional there is no distribution); None for
    models without one (CME, KLR)."""
    if not hasattr(model, "marginal_ratio"):
        return None
    return float(np.mean(model.marginal_ratio(Xq) <= 1e-12))


@contextlib.contextmanager
def quiet_mass_warnings():
    """Silence the conditional methods' non-positive-mass warning: the experiments
    measure it (:func:`nonpositive_mass_fraction`) instead."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="the model's mass", category=RuntimeWarning)
        yield


def moments_and_totals(model, Ytr, Xq):
    """Predicted ``E[Y Y^T | x]`` (n_q, d, d) and ``E[1 | x]`` (n_q,) in one call."""
    d = Ytr.shape[1]
    F = np.concatenate(
        [np.ones((len(Ytr), 1)), (Ytr[:, :, None] * Ytr[:, None, :]).reshape(len(Ytr), d * d)],
        axis=1,
    )
    out = model.conditional_expectation(F, Xq)  # (n_q, 1 + d^2)
    return out[:, 1:].reshape(len(Xq), d, d), out[:, 0]


def timed_fit_eval(kind, constrained, X, Y, params, rel_tol, Xq):
    """Seconds to fit (no basis cache) plus the conditional second moments at ``Xq``."""
    t0 = time.perf_counter()
    model = fit_model(kind, constrained, X, Y, params, rel_tol)
    t1 = time.perf_counter()
    moments_and_totals(model, Y, Xq)
    t2 = time.perf_counter()
    return {"fit_s": t1 - t0, "eval_s": t2 - t1, "total_s": t2 - t0}


def model_rank(model) -> tuple[int, int]:
    """``(m_X, m_Y)`` of a fitted tensor model (0 where not applicable)."""

    def m(b):
        return int(getattr(b, "n_components_", getattr(b, "n_output_features_", 0)) or 0)

    if hasattr(model, "basis_x_"):
        return m(model.basis_x_), m(model.basis_y_)
    if hasattr(model, "basis_"):
        return m(model.basis_), 0
    return 0, 0


# ====================================================================== plotting
def band_plot(ax, xs, rows, label, color=None, marker="o", logy=True):
    """Median line with a 5-95 % band over the rows (repetitions) at each x."""
    rows = [np.asarray(r, dtype=np.float64) for r in rows]
    mid = [np.nanmean(r) if r.size else np.nan for r in rows]
    lo = [np.nanquantile(r, 0.05) if r.size else np.nan for r in rows]
    hi = [np.nanquantile(r, 0.95) if r.size else np.nan for r in rows]
    (line,) = ax.plot(xs, mid, marker=marker, label=label, color=color)
    ax.fill_between(xs, lo, hi, alpha=0.15, color=line.get_color())
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    return line
