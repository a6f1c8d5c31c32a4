"""Shared machinery of ``reproduce sgb-logreg`` and ``bench sgb`` (SGB paper, Sec. 3).

L2-regularised multinomial logistic regression in the **mean form** of Appendix A,

    L(Θ) = (1/T) Σ_i [logsumexp(x_iᵀΘ) − x_iᵀΘ e_{y_i}] + (λ/2) ‖Θ‖²_F,

with Θ ∈ R^{p×n} (column y = w_y, so column-major vec(Θ) = θ of the paper, d = n p) and
x_i carrying a constant 1 (the bias, penalised like every weight). Binary sets use the
same two-column model (the paper's n = 2).

What is here:

* :func:`objective`, :func:`objective_grad`, :func:`hessp` -- exact L, ∇L and ∇²L·V;
* :func:`optimum` -- L* from scikit-learn ``LogisticRegression`` (lbfgs, tight tol, matched
  ``C``, see :func:`optimum`) polished by SciPy Newton-CG on the same objective; L* is the lower
  of the two and ``|f_sklearn − f_newton|`` is recorded;
* baselines with per-epoch traces (objective after each epoch, evaluation excluded from
  the clock): mini-batch SGD (:func:`run_sgd`), Adam (:func:`run_adam`, NumPy, the
  standard bias-corrected update) and full-batch L-BFGS (:func:`run_lbfgs`, SciPy; one
  "epoch" = one function-and-gradient evaluation, i.e. one pass over the data);
* SPFB / LSPFB through :class:`kernelkit.optim.BoundLogisticRegression` (:func:`run_bound`);
* step-size tuning on a grid of the same size for every stochastic method
  (:func:`step_grid`, :func:`tune`), selection by the objective at the epoch budget;
* threshold crossing (:func:`first_reach`) and the suboptimality plots.

Step-size schedules: ``"constant"`` η_t = η₀, ``"inverse"`` η_t = η₀ / t (the paper's,
eq. 2.5), ``"inverse_t0"`` η_t = η₀ / (1 + t / t₀) with t₀ = steps per epoch; t = 1, 2, ...
counts mini-batch steps over the whole run.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy.special import logsumexp

from kernelkit.datasets._sgb import SGBData, add_bias

__all__ = [
    "SCHEDULES",
    "Optimum",
    "Problem",
    "Trace",
    "first_reach",
    "hessp",
    "log_grid",
    "make_problem",
    "objective",
    "objective_grad",
    "optimum",
    "run_adam",
    "run_bound",
    "run_lbfgs",
    "run_sgd",
    "step_grid",
    "tune",
]

SCHEDULES = ("constant", "inverse", "inverse_t0")  # names as in kernelkit.optim

#: a run whose objective exceeds this multiple of L(0) = log n (or is not finite) is
#: stopped and marked diverged
DIVERGENCE_FACTOR = 10.0


# --------------------------------------------------------------------------- problem
@dataclass(frozen=True)
class Problem:
    """A training set with a bias column and its regularisation.

    Attributes
    ----------
    name : str
    X : ndarray, shape (T, p), float64; last column is 1
    y : ndarray, shape (T,), int64 labels 0..n-1
    Y : ndarray, shape (T, n), float64 one-hot of ``y``
    lam : float
        Mean-form λ (Appendix A; the sum form of eq. 2.2 has λ_sum = T λ).
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    Y: np.ndarray
    lam: float
    description: str = ""
    paper: str = ""

    @property
    def T(self) -> int:
        return self.X.shape[0]

    @property
    def p(self) -> int:
        return self.X.shape[1]

    @property
    def n_classes(self) -> int:
        return self.Y.shape[1]

    @functools.cached_property
    def key(self) -> tuple:
        """Identifies the problem for caching: name, shape, λ and a digest of the data."""
        h = hashlib.blake2b(self.X.tobytes(), digest_size=16)
        h.update(self.y.tobytes())
        return (self.name, self.T, self.p, self.n_classes, self.lam, h.hexdigest())


def make_problem(data: SGBData, lam: float) -> Problem:
    """Append the bias column and one-hot encode the labels."""
    if not (isinstance(lam, int | float) and math.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be a positive finite number, got {lam!r}.")
    X = add_bias(data.X)
    Y = np.zeros((X.shape[0], data.n_classes))
    Y[np.arange(X.shape[0]), data.y] = 1.0
    return Problem(data.name, X, data.y, Y, float(lam), data.description, data.paper)


def objective(theta, X, Y, lam) -> float:
    """L(Θ) of the module docstring. ``theta`` (p, n), ``X`` (T, p), ``Y`` (T, n)."""
    S = X @ theta  # (T, n) logits
    data = np.mean(logsumexp(S, axis=1) - np.einsum("ij,ij->i", S, Y))
    return float(data + 0.5 * lam * np.vdot(theta, theta))


def objective_grad(theta, X, Y, lam):
    """``(L(Θ), ∇L(Θ))``; ∇L = Xᵀ(P − Y)/T + λΘ, P the softmax of XΘ. Shapes as above."""
    S = X @ theta  # (T, n)
    lse = logsumexp(S, axis=1, keepdims=True)  # (T, 1)
    P = np.exp(S - lse)  # (T, n) softmax probabilities
    f = float(np.mean(lse[:, 0] - np.einsum("ij,ij->i", S, Y)) + 0.5 * lam * np.vdot(theta, theta))
    G = X.T @ (P - Y) / X.shape[0] + lam * theta  # (p, n)
    return f, G


def hessp(theta, V, X, lam):
    """∇²L(Θ)·V = Xᵀ[P∘U − P∘(P∘U)1 1ᵀ]/T + λV with U = XV (softmax Hessian, no (np)² matrix)."""
    S = X @ theta
    P = np.exp(S - logsumexp(S, axis=1, keepdims=True))  # (T, n)
    U = X @ V  # (T, n)
    PU = P * U
    R = PU - P * PU.sum(axis=1, keepdims=True)  # (T, n)
    return X.T @ R / X.shape[0] + lam * V


# --------------------------------------------------------------------------- optimum
@dataclass(frozen=True)
class Optimum:
    """L* and how it was obtained."""

    value: float  # min of the two below
    theta: np.ndarray  # (p, n) minimiser
    value_sklearn: float  # L at scikit-learn's coef (our objective)
    value_newton: float  # after SciPy Newton-CG polishing
    grad_inf: float  # ‖∇L(Θ*)‖_∞
    seconds: float


_OPTIMA: dict = {}


def optimum(problem: Problem) -> Optimum:
    """L* of ``problem`` (cached in-process by :attr:`Problem.key`).

    scikit-learn ``LogisticRegression(C=1/(λT), fit_intercept=False, tol=1e-6)`` on X
    with its constant column minimises the same objective (binary: one weight vector w,
    ``C = 2/(λT)``, Θ = [−w/2, w/2]). Its solution is then polished with
    SciPy Newton-CG (exact Hessian-vector products, :func:`hessp`).
    """
    if problem.key not in _OPTIMA:
        if len(_OPTIMA) >= 16:
            _OPTIMA.pop(next(iter(_OPTIMA)))
        _OPTIMA[problem.key] = _compute_optimum(problem)
    return _OPTIMA[problem.key]


def _compute_optimum(problem: Problem) -> Optimum:
    from scipy.optimize import minimize
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    t0 = time.perf_counter()
    X, Y, lam, T, n = problem.X, problem.Y, problem.lam, problem.T, problem.n_classes
    binary = n == 2
    C = (2.0 if binary else 1.0) / (lam * T)
    clf = LogisticRegression(C=C, fit_intercept=False, tol=1e-6, max_iter=20000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(X, problem.y)
    if binary:
        w = clf.coef_[0]
        theta_sk = np.column_stack([-w / 2, w / 2])
    else:
        theta_sk = clf.coef_.T.copy()  # (p, n)
    f_sk = objective(theta_sk, X, Y, lam)
    shape = theta_sk.shape

    def fg(v):
        f, G = objective_grad(v.reshape(shape), X, Y, lam)
        return f, G.ravel()

    def hp(v, w):
        return hessp(v.reshape(shape), w.reshape(shape), X, lam).ravel()

    res = minimize(
        fg,
        theta_sk.ravel(),
        jac=True,
        hessp=hp,
        method="Newton-CG",
        options={"xtol": 1e-12, "maxiter": 100},
    )
    theta_nt = res.x.reshape(shape)
    f_nt = objective(theta_nt, X, Y, lam)
    theta = theta_nt if f_nt <= f_sk else theta_sk
    g = objective_grad(theta, X, Y, lam)[1]
    return Optimum(
        min(f_sk, f_nt), theta, f_sk, f_nt, float(np.max(np.abs(g))), time.perf_counter() - t0
    )


# --------------------------------------------------------------------------- traces
@dataclass
class Trace:
    """Objective after each epoch of one run.

    ``epochs[0] = 0``, ``seconds[0] = 0`` and ``objective[0] = L(Θ₀)``; ``seconds`` is the
    cumulative optimisation time (objective evaluations excluded).
    """

    method: str
    config: dict
    seed: int
    epochs: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    objective: list = field(default_factory=list)
    diverged: bool = False
    extra: dict = field(default_factory=dict)

    def record(self, epoch, seconds, value):
        self.epochs.append(float(epoch))
        self.seconds.append(float(seconds))
        self.objective.append(float(value))

    @property
    def final(self) -> float:
        """Objective at the budget (inf when the run diverged)."""
        return math.inf if self.diverged or not self.objective else self.objective[-1]

    def gaps(self, f_star: float) -> np.ndarray:
        """Relative suboptimality (L − L*)/L* per recorded epoch."""
        return (np.asarray(self.objective) - f_star) / abs(f_star)

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "config": self.config,
            "seed": self.seed,
            "epochs": self.epochs,
            "seconds": self.seconds,
            "objective": self.objective,
            "diverged": self.diverged,
            **({"extra": self.extra} if self.extra else {}),
        }


def first_reach(trace: Trace, f_star: float, rel_gap: float) -> tuple[float, float]:
    """``(epochs, seconds)`` at the first record with (L − L*)/L* ≤ ``rel_gap``; NaNs if never."""
    g = trace.gaps(f_star)
    hit = np.flatnonzero(g <= rel_gap)
    if hit.size == 0:
        return math.nan, math.nan
    i = int(hit[0])
    return trace.epochs[i], trace.seconds[i]


def _step_size(eta0: float, schedule: str, t: int, t0: float) -> float:
    if schedule == "constant":
        return eta0
    if schedule == "inverse":
        return eta0 / t
    if schedule == "inverse_t0":
        return eta0 / (1.0 + t / t0)
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}.")


def _diverged(value: float, f0: float) -> bool:
    return not math.isfinite(value) or value > DIVERGENCE_FACTOR * max(f0, 1e-12)


def _batches(T: int, m: int, rng) -> list[np.ndarray]:
    perm = rng.permutation(T)
    return [perm[i : i + m] for i in range(0, T, m)]


def _run_minibatch(
    problem: Problem, method: str, config: dict, step, batch_size: int, epochs: int, seed: int
) -> Trace:
    """Shared epoch loop: ``step(theta, Xb, Yb, eta_t) -> theta`` on shuffled batches."""
    X, Y, lam = problem.X, problem.Y, problem.lam
    rng = np.random.default_rng(seed)
    theta = np.zeros((problem.p, problem.n_classes))
    trace = Trace(method, dict(config, batch_size=batch_size), seed)
    f0 = objective(theta, X, Y, lam)
    trace.record(0, 0.0, f0)
    t, elapsed = 0, 0.0
    t0 = math.ceil(problem.T / batch_size)  # steps per epoch
    for ep in range(1, epochs + 1):
        tic = time.perf_counter()
        for idx in _batches(problem.T, batch_size, rng):
            t += 1
            theta = step(
                theta, X[idx], Y[idx], _step_size(config["eta0"], config["schedule"], t, t0)
            )
        elapsed += time.perf_counter() - tic
        value = objective(theta, X, Y, lam)
        if _diverged(value, f0):
            trace.diverged = True
            break
        trace.record(ep, elapsed, value)
    return trace


def _minibatch_grad(theta, Xb, Yb, lam):
    """Mean-form mini-batch gradient ``Xbᵀ(P − Yb)/m + λΘ``, shape (p, n).

    The products are written ``(Θᵀ Xbᵀ)ᵀ`` and ``((P − Yb)ᵀ Xb)ᵀ``, the layout that
    :mod:`kernelkit.optim` uses too (about twice as fast as ``Xb @ Θ`` and ``Xbᵀ @ R``
    with single-threaded OpenBLAS at m = 1000, p = 785, n = 10), so that every method
    gets the same fast products.
    """
    S = (theta.T @ Xb.T).T  # (m, n) logits
    P = np.exp(S - logsumexp(S, axis=1, keepdims=True))
    return ((P - Yb).T @ Xb).T / Xb.shape[0] + lam * theta


def run_sgd(
    problem: Problem, eta0: float, schedule: str, batch_size: int, epochs: int, seed: int = 0
) -> Trace:
    """Mini-batch SGD on the mean-form objective: Θ ← Θ − η_t ((1/m) Σ_B ∇f_j + λΘ)."""
    lam = problem.lam

    def step(theta, Xb, Yb, eta):
        G = _minibatch_grad(theta, Xb, Yb, lam)  # (p, n)
        return theta - eta * G

    return _run_minibatch(
        problem, "SGD", {"eta0": eta0, "schedule": schedule}, step, batch_size, epochs, seed
    )


def run_adam(
    problem: Problem,
    eta0: float,
    schedule: str,
    batch_size: int,
    epochs: int,
    seed: int = 0,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
) -> Trace:
    """Mini-batch Adam (Kingma & Ba, bias-corrected moments) with learning rate η_t."""
    lam = problem.lam
    b1, b2 = betas
    state = {"m": None, "v": None, "k": 0}

    def step(theta, Xb, Yb, eta):
        G = _minibatch_grad(theta, Xb, Yb, lam)  # (p, n)
        if state["m"] is None:
            state["m"], state["v"] = np.zeros_like(G), np.zeros_like(G)
        state["k"] += 1
        k = state["k"]
        state["m"] = b1 * state["m"] + (1 - b1) * G
        state["v"] = b2 * state["v"] + (1 - b2) * G * G
        mhat = state["m"] / (1 - b1**k)
        vhat = state["v"] / (1 - b2**k)
        return theta - eta * mhat / (np.sqrt(vhat) + eps)

    return _run_minibatch(
        problem, "Adam", {"eta0": eta0, "schedule": schedule}, step, batch_size, epochs, seed
    )


def run_lbfgs(problem: Problem, epochs: int, seed: int = 0, memory: int = 10) -> Trace:
    """Full-batch L-BFGS-B (SciPy, memory ``memory``), from Θ = 0.

    One epoch = one function-and-gradient evaluation (a pass over the data); the trace
    records the objective at each accepted iterate against the evaluations used so far.
    Deterministic (``seed`` is only recorded). Stops after ``epochs`` evaluations.
    """
    from scipy.optimize import minimize

    X, Y, lam = problem.X, problem.Y, problem.lam
    shape = (problem.p, problem.n_classes)
    trace = Trace("L-BFGS", {"memory": memory}, seed)
    theta0 = np.zeros(shape)
    trace.record(0, 0.0, objective(theta0, X, Y, lam))
    state = {"nfev": 0, "paused": 0.0}

    def fg(v):
        state["nfev"] += 1
        f, G = objective_grad(v.reshape(shape), X, Y, lam)
        return f, G.ravel()

    tic = time.perf_counter()

    def callback(intermediate_result):
        # the iterate's objective was already computed by the solver (no extra pass)
        now = time.perf_counter()
        # SciPy checks maxfun only after an iteration, so its last line search can take
        # the count past the budget: that iterate is left out, as the other methods stop
        # at ``epochs`` (the final gap is then the one the plot ends on)
        if state["nfev"] <= epochs:
            trace.record(state["nfev"], now - tic - state["paused"], intermediate_result.fun)
        state["paused"] += time.perf_counter() - now

    minimize(
        fg,
        theta0.ravel(),
        jac=True,
        method="L-BFGS-B",
        callback=callback,
        options={"maxfun": epochs, "maxiter": epochs, "maxcor": memory, "gtol": 1e-12, "ftol": 0.0},
    )
    return trace


# --------------------------------------------------------------------------- bound methods
def bound_solver_available() -> bool:
    """Whether :class:`kernelkit.optim.BoundLogisticRegression` can be imported."""
    try:
        from kernelkit.optim import BoundLogisticRegression  # noqa: F401
    except ImportError:
        return False
    return True


def run_bound(
    problem: Problem,
    solver: str,
    eta0: float,
    schedule: str,
    batch_size: int,
    epochs: int,
    seed: int = 0,
    **solver_kw,
) -> Trace:
    """``kernelkit.optim.BoundLogisticRegression(solver=...)`` as a traced run.

    The estimator is fitted with ``fit_intercept=False`` on ``problem.X`` (whose constant
    column is the penalised bias), ``tol=None``, ``finish=None`` (the stochastic method
    the paper compares, without the full-batch finishing phase that kernelkit adds by
    default), ``max_epochs=epochs`` and
    ``alpha = λ`` (multinomial) or ``λ/2`` (binary: its internal two-column model then has
    ridge λ, our objective). The trace is its ``loss_history_`` / ``time_history_``
    (objective evaluation excluded from the clock). A callback stops the run once the
    objective exceeds ``DIVERGENCE_FACTOR · L(0)``; non-finite parameters (the estimator's
    ``FloatingPointError``) also mark it diverged. ``extra["objective_check"]`` is our
    :func:`objective` at the estimator's ``coef_`` minus its last recorded loss (0 up to
    rounding for multinomial models; ≤ 0 for binary ones, where ``coef_`` is the
    symmetrised model).
    """
    from kernelkit.optim import BoundLogisticRegression

    binary = problem.n_classes == 2
    f0 = objective(np.zeros((problem.p, problem.n_classes)), problem.X, problem.Y, problem.lam)
    state = {"diverged": False, "drop_last": False}

    def callback(est, info):
        loss = info.get("loss")
        if loss is not None and _diverged(float(loss), f0):
            state["diverged"] = state["drop_last"] = True  # that loss is already recorded
            return True
        return False

    est = BoundLogisticRegression(
        solver=solver,
        alpha=problem.lam / 2 if binary else problem.lam,
        batch_size=batch_size,
        max_epochs=epochs,
        tol=None,
        eta0=eta0,
        schedule=schedule,
        fit_intercept=False,
        random_state=seed,
        callback=callback,
        finish=None,  # the papers' stochastic methods, without kernelkit's finishing phase
        **solver_kw,
    )
    label = {"spfb": "SPFB", "lspfb": "LSPFB", "sgd": "SGD (optim)", "bound": "bound"}[solver]
    trace = Trace(
        label, {"eta0": eta0, "schedule": schedule, "batch_size": batch_size, **solver_kw}, seed
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow while diverging
            est.fit(problem.X, problem.y)
    except FloatingPointError:  # raised before the failing epoch's loss is recorded
        state["diverged"] = True
    hist = list(getattr(est, "loss_history_", None) or [f0])
    times = list(getattr(est, "time_history_", None) or [0.0])
    trace.diverged = state["diverged"]
    if state["drop_last"] and len(hist) > 1:
        hist, times = hist[:-1], times[:-1]  # drop the epoch that blew up
    for ep, (value, sec) in enumerate(zip(hist, times, strict=True)):
        trace.record(ep, sec, value)
    if hasattr(est, "coef_") and not state["diverged"]:
        coef = est.coef_
        theta = np.column_stack([-coef[0] / 2, coef[0] / 2]) if binary else coef.T
        trace.extra["objective_check"] = (
            objective(theta, problem.X, problem.Y, problem.lam) - hist[-1]
        )
    return trace


def lspfb_available() -> bool:
    """Whether LSPFB (``kernelkit.optim.low_rank``) can be imported."""
    if not bound_solver_available():
        return False
    try:
        from kernelkit.optim import low_rank  # noqa: F401
    except ImportError:
        return False
    return True


# --------------------------------------------------------------------------- tuning
def log_grid(low: float, high: float) -> tuple[float, ...]:
    """Half-decade grid ``{1, 3} × 10^k`` within ``[low, high]`` (factor ≈ 3)."""
    if not (0 < low <= high):
        raise ValueError(f"need 0 < low <= high, got {low}, {high}.")
    out = []
    for k in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for m in (1.0, 3.0):
            v = float(f"{m * 10.0**k:.6g}")
            if low * (1 - 1e-9) <= v <= high * (1 + 1e-9):
                out.append(v)
    return tuple(out)


def step_grid(etas, schedules=SCHEDULES) -> list[dict]:
    """All ``{eta0, schedule}`` pairs: ``len(etas) * len(schedules)`` configurations."""
    etas = tuple(float(e) for e in etas)
    if not etas or any(not (math.isfinite(e) and e > 0) for e in etas):
        raise ValueError(f"etas must be positive and finite, got {etas}.")
    for s in schedules:
        if s not in SCHEDULES:
            raise ValueError(f"unknown schedule {s!r}; expected one of {SCHEDULES}.")
    return [{"eta0": e, "schedule": s} for s in schedules for e in etas]


def tune(run_one, grid: list[dict], progress=None) -> tuple[dict, list[Trace]]:
    """Run ``run_one(**config)`` for every config; the best has the lowest objective at the
    budget (diverged runs count as +inf). Returns ``(best_config, traces)``."""
    traces = []
    for cfg in grid:
        traces.append(run_one(**cfg))
        if progress is not None:
            progress.update(1)
    finals = [tr.final for tr in traces]
    best = int(np.argmin(finals))
    return dict(grid[best]), traces
