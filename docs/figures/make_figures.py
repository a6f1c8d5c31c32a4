"""Make the user guide's figures (``docs/figures/*.png``) from kernelkit itself.

Run from the repository root::

    python docs/figures/make_figures.py            # all figures, 1 to 1.5 min on 2 cores
    python docs/figures/make_figures.py attention  # only the named ones

Every number comes from the library (fixed seeds, no network, no experiments package),
except the attention timings, which are read from the committed benchmark output
``reports/bench_attention_cpu.txt`` and not re-timed. Each ``*_figure`` function takes
the output path and its sizes as keywords, so that a test can draw it small.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from kernelkit.features import (
    ADERF,
    GERF,
    SADERF,
    SDERF,
    AngularHybridRF,
    OptimizedMaclaurin,
    PositiveRF,
    RademacherSketch,
    RandomMaclaurin,
    TensorSketch,
    TensorSRHT,
    TrigRF,
)
from kernelkit.kernels import polynomial_kernel, softmax_kernel
from kernelkit.metrics import relative_frobenius_error

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "figures"
BENCH = ROOT / "reports" / "bench_attention_cpu.txt"

#: Okabe-Ito, the colour-blind-safe palette (its yellow left out: unreadable on white)
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
DPI = 110
WIDTH_IN = 6.4  # 704 px at DPI 110: the guide's text column

#: data seeds differ from the projection seeds (0, 1, ...): data drawn from the same
#: stream as a projection would make its rows copies of the projection's rows
DATA_SEED = 20261128


def _style() -> None:
    plt.rcParams.update(
        {
            "font.size": 9,
            "axes.titlesize": 9.5,
            "axes.labelsize": 9,
            "legend.fontsize": 8,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "grid.linewidth": 0.5,
            "savefig.dpi": DPI,
        }
    )


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # no timestamp or version in the PNG: the same inputs give the same file
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def attention_like(n: int, d: int, rng: np.random.Generator, *, scale: float = 0.6):
    """Queries and keys as one attention head sees them: ``q / d^{1/4}`` and
    ``k / d^{1/4}`` with entries of s.d. ``scale`` (so the logits ``x . y`` have s.d.
    ``scale^2`` whatever ``d``, and ``|x|^2 ~ scale^2 sqrt(d)``); the keys share a mean
    direction, as keys of a trained layer do, so the two sides differ in distribution."""
    X = scale * rng.standard_normal((n, d)) / d**0.25
    shift = np.zeros(d)
    shift[0] = 0.5 * scale * d**0.25  # a common key direction, half a key's norm
    Y = scale * rng.standard_normal((n, d)) / d**0.25 + shift / d**0.25
    return X, Y


def _error_curves(K, make, ms, n_seeds, X, Y):
    """(len(ms), n_seeds) relative Frobenius errors of ``make(M, seed)``."""
    err = np.empty((len(ms), n_seeds))
    for i, m in enumerate(ms):
        for s in range(n_seeds):
            fm = make(m, s).fit(X, Y=Y)
            err[i, s] = relative_frobenius_error(K, fm.approx_kernel(X, Y))
    return err


def _draw_errors(ax, ms, curves: dict, *, ref: bool = True) -> None:
    ms = np.asarray(ms, dtype=float)
    for j, (label, err) in enumerate(curves.items()):
        c = PALETTE[j % len(PALETTE)]
        mean = err.mean(axis=1)
        ax.plot(ms, mean, color=c, marker=MARKERS[j % len(MARKERS)], ms=3.5, lw=1.3, label=label)
        if err.shape[1] > 1:
            ax.fill_between(ms, err.min(axis=1), err.max(axis=1), color=c, alpha=0.15, lw=0)
    if ref:
        # the 1/sqrt(M) slope, through the geometric mean of the curves at the smallest M
        start = np.exp(np.mean([np.log(e[0].mean()) for e in curves.values()]))
        ax.plot(ms, start * np.sqrt(ms[0] / ms), color="0.45", ls="--", lw=1, label="∝ 1/√M")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ms)
    ax.set_xticklabels([str(int(m)) for m in ms])
    ax.minorticks_off()
    ax.set_xlabel("features per input M (columns of φ(x))")


SOFTMAX_MAPS = {
    "TrigRF": lambda m, s: TrigRF(m, random_state=s),
    "PositiveRF (FAVOR+)": lambda m, s: PositiveRF(m, random_state=s),
    "GERF (FAVOR++)": lambda m, s: GERF(m, random_state=s),
    "SADERF": lambda m, s: SADERF(m, random_state=s),
    "SDERF": lambda m, s: SDERF(m, random_state=s),
    "ADERF": lambda m, s: ADERF(m, random_state=s),
    # output 4 m (n + 1) = 8 m columns with n_lambda = 1: m = M / 8 matches M columns
    "AngularHybridRF": lambda m, s: AngularHybridRF(max(m // 8, 1), n_lambda=1, random_state=s),
}


def softmax_error_figure(
    path: Path,
    *,
    ms: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024),
    dims: Sequence[int] = (16, 64),
    n_points: int = 200,
    n_seeds: int = 10,
) -> Path:
    """Relative Frobenius error of the softmax-kernel maps against M, one panel per d."""
    _style()
    fig, axes = plt.subplots(1, len(dims), figsize=(WIDTH_IN, 3.9), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, d in zip(axes, dims, strict=True):
        X, Y = attention_like(n_points, d, np.random.default_rng(DATA_SEED + d))
        K = softmax_kernel(X, Y)
        curves = {
            name: _error_curves(K, make, ms, n_seeds, X, Y) for name, make in SOFTMAX_MAPS.items()
        }
        _draw_errors(ax, ms, curves)
        r2 = float(np.mean(np.sum(X**2, axis=1)))
        ax.set_title(f"d = {d}, mean |x|² = {r2:.1f}")
    axes[0].set_ylabel("relative Frobenius error ‖K̂ − K‖ / ‖K‖")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False)
    fig.suptitle(
        f"exp(x·y), {n_points} queries × {n_points} keys, {n_seeds} seeds: "
        "line mean, band min to max",
        y=0.99,
    )
    fig.tight_layout(rect=(0, 0.14, 1, 0.97))
    return _save(fig, path)


def dot_product_error_figure(
    path: Path,
    *,
    ms: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024),
    n_points: int = 200,
    n_seeds: int = 10,
) -> Path:
    """Polynomial kernel (sketches) and exponential kernel (Maclaurin maps) against M."""
    _style()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(WIDTH_IN, 3.9), sharey=True)
    rng = np.random.default_rng(DATA_SEED)
    # the dot-product guide's data: non-negative unit vectors, degree-3 kernel
    X = np.abs(rng.standard_normal((n_points, 64)))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    K = polynomial_kernel(X, X, degree=3, coef0=1.0)
    poly = {
        "RademacherSketch": lambda m, s: RademacherSketch(m, degree=3, coef0=1.0, random_state=s),
        "TensorSRHT": lambda m, s: TensorSRHT(m, degree=3, coef0=1.0, random_state=s),
        "TensorSketch": lambda m, s: TensorSketch(m, degree=3, coef0=1.0, random_state=s),
        # M / 2 complex features = M real columns [Re, Im]
        "TensorSRHT complex": lambda m, s: TensorSRHT(
            max(m // 2, 1), degree=3, coef0=1.0, complex=True, real_output=True, random_state=s
        ),
    }
    _draw_errors(ax1, ms, {k: _error_curves(K, f, ms, n_seeds, X, X) for k, f in poly.items()})
    ax1.set_title("(x·y + 1)³, d = 64, non-negative unit x")
    ax1.set_ylim(bottom=0.015)
    ax1.set_ylabel("relative Frobenius error ‖K̂ − K‖ / ‖K‖")
    ax1.legend(loc="lower left", frameon=False)

    Z = rng.standard_normal((n_points, 10)) / np.sqrt(10)
    Ke = softmax_kernel(Z, Z)
    expo = {
        "RandomMaclaurin": lambda m, s: RandomMaclaurin(m, kernel="softmax", random_state=s),
        "OptimizedMaclaurin": lambda m, s: OptimizedMaclaurin(m, kernel="softmax", random_state=s),
    }
    _draw_errors(ax2, ms, {k: _error_curves(Ke, f, ms, n_seeds, Z, Z) for k, f in expo.items()})
    ax2.set_title("exp(x·y), d = 10, |x| ≈ 1")
    ax2.legend(loc="lower left", frameon=False)
    fig.suptitle(f"Dot-product kernels, {n_seeds} seeds (line: mean, band: min to max)", y=0.99)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return _save(fig, path)


def variance_check_figure(
    path: Path,
    *,
    n_draws: int = 2000,
    n_points: int = 10,
    d: int = 8,
    n_features: int = 16,
) -> Path:
    """Analytic ``variance()`` against the variance of ``n_draws`` independent draws."""
    _style()
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 3.4))
    X, Y = attention_like(n_points, d, np.random.default_rng(DATA_SEED + 1))
    K = softmax_kernel(X, Y)
    for ax, (name, cls) in zip(
        axes, [("SDERF (FAVOR#)", SDERF), ("PositiveRF (FAVOR+)", PositiveRF)], strict=True
    ):
        draws = np.stack(
            [
                cls(n_features, random_state=s).fit(X, Y=Y).approx_kernel(X, Y)
                for s in range(n_draws)
            ]
        )
        analytic = cls(n_features, random_state=0).fit(X, Y=Y).variance(X, Y).ravel()
        empirical = draws.var(axis=0, ddof=1).ravel()
        bias = np.abs(draws.mean(axis=0) - K).ravel() / np.sqrt(analytic / n_draws)
        lo, hi = min(analytic.min(), empirical.min()), max(analytic.max(), empirical.max())
        line = np.array([lo / 1.5, hi * 1.5])
        ax.plot(line, line, color="0.45", ls="--", lw=1, label="empirical = analytic")
        ax.scatter(
            analytic,
            empirical,
            s=9,
            color=PALETTE[0],
            alpha=0.7,
            lw=0,
            label=f"{analytic.size} query-key pairs",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(*line)
        ax.set_ylim(*line)
        ratio = np.median(empirical / analytic)
        ax.set_title(f"{name}, M = {n_features}, d = {d}")
        ax.text(
            0.97,
            0.04,
            f"median empirical / analytic = {ratio:.3f}\nmax |mean − K| = {bias.max():.1f} s.e.",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=8,
        )
        ax.set_xlabel("analytic variance, fm.variance(X, Y)")
        ax.legend(loc="upper left", frameon=False)
    axes[0].set_ylabel(f"variance over {n_draws} draws")
    fig.tight_layout()
    return _save(fig, path)


def ridge_error_figure(
    path: Path,
    *,
    ms: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024, 2048),
    n_train: int = 600,
    n_test: int = 400,
    n_seeds: int = 5,
) -> Path:
    """Test RMSE of ``RandomFeatureRidge`` on random Fourier features against M, with the
    exact kernel ridge regression (scikit-learn's ``KernelRidge``, the same kernel and
    penalty) as the line it approaches."""
    from sklearn.datasets import make_friedman1
    from sklearn.kernel_ridge import KernelRidge

    from kernelkit.estimators import RandomFeatureRidge
    from kernelkit.features import RandomFourierFeatures

    _style()
    noise, lengthscale, alpha = 0.5, 1.0, 0.01
    X, y = make_friedman1(n_train + n_test, n_features=8, noise=noise, random_state=DATA_SEED)
    Xtr, Xte, ytr, yte = X[:n_train], X[n_train:], y[:n_train], y[n_train:]
    mu = ytr.mean()  # both models without intercept, on centred targets: the same problem

    def rmse(pred):
        return float(np.sqrt(np.mean((pred + mu - yte) ** 2)))

    exact = KernelRidge(alpha=alpha, kernel="rbf", gamma=0.5 / lengthscale**2).fit(Xtr, ytr - mu)
    curves = {}
    for label, sampler in (("RFF, iid", "iid"), ("RFF, orthogonal", "orthogonal")):
        err = np.empty((len(ms), n_seeds))
        for i, m in enumerate(ms):
            for s in range(n_seeds):
                fm = RandomFourierFeatures(
                    m, lengthscale=lengthscale, sampler=sampler, random_state=s
                )
                model = RandomFeatureRidge(fm, alpha=alpha, fit_intercept=False).fit(Xtr, ytr - mu)
                err[i, s] = rmse(model.predict(Xte))
        curves[label] = err
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.5))
    _draw_errors(ax, ms, curves, ref=False)
    ax.set_xlabel("random features M")
    ax.set_yscale("linear")  # a decade at most: a linear axis reads better
    ax.set_ylim(0, 1.05 * max(e.max() for e in curves.values()))
    ax.axhline(rmse(exact.predict(Xte)), color=PALETTE[6], lw=1.2, label="exact kernel ridge")
    ax.axhline(noise, color="0.45", ls=":", lw=1.2, label=f"noise s.d. ({noise})")
    ax.set_ylabel("test RMSE")
    ax.set_title(
        f"Friedman #1 (d = 8), {n_train} train / {n_test} test, Gaussian kernel l = {lengthscale}, "
        f"alpha = {alpha}; {n_seeds} seeds",
        fontsize=8.5,
    )
    ax.legend(loc="upper right", frameon=False)
    fig.tight_layout()
    return _save(fig, path)


_TIME_ROW = re.compile(r"^(forward\+backward|forward)\s+(\d+)\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s*$")
_MEM_ROW = re.compile(r"^(.+?)\s+([\d.]+)\s+(SDPA(?: causal)?)\s+([\d.]+)\s+([\d.]+)\s+\S+\s*$")


def parse_bench(text: str) -> dict:
    """The committed benchmark output: ``{"header": str, "times": {(mode, call): {L: min
    ms}}, "memory": [(call, MiB, reference, reference MiB)]}`` (the ``Times (ms)`` and the
    ``Peak extra memory`` tables; other sections ignored)."""
    lines = text.splitlines()
    out: dict = {"header": lines[0] if lines else "", "times": {}, "memory": [], "skipped": ""}
    section = None
    for line in lines:
        if line.startswith("Times (ms)"):
            section = "times"
        elif line.startswith("Peak extra memory"):
            section = "memory"
            out["memory_title"] = line.rstrip(":")
        elif line.startswith("Skipped (time limit): "):
            out["skipped"] = line.removeprefix("Skipped (time limit): ").strip()
            section = None
        elif not line.strip() or line.startswith(("Relative", "Ratios")):
            section = None
        elif section == "times" and (m := _TIME_ROW.match(line)):
            mode, length, call, tmin = m.group(1), int(m.group(2)), m.group(3), float(m.group(4))
            out["times"].setdefault((mode, call), {})[length] = tmin
        elif section == "memory" and (m := _MEM_ROW.match(line)):
            out["memory"].append((m.group(1), float(m.group(2)), m.group(3), float(m.group(4))))
    if not out["times"]:
        raise ValueError("no 'Times (ms)' rows found in the benchmark output")
    return out


#: (label in the report, colour index); causal variants are drawn dashed
ATTENTION_CALLS = (
    ("SDPA", 6),
    ("kernelkit FAVOR+", 0),
    ("kernelkit FAVOR# sderf", 1),
    ("kernelkit FAVOR# saderf", 2),
)


def attention_time_figure(path: Path, *, bench: Path = BENCH) -> Path:
    """CPU time against L from the committed benchmark table (not re-timed)."""
    _style()
    data = parse_bench(Path(bench).read_text())
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 4.1), sharey=True)
    handles = {}
    for ax, mode in zip(axes, ("forward", "forward+backward"), strict=True):
        for base, ci in ATTENTION_CALLS:
            for causal in (False, True):
                call = base + (" causal" if causal else "")
                series = data["times"].get((mode, call))
                if not series:
                    continue
                ls = sorted(series)
                label = call.replace("kernelkit ", "")
                (h,) = ax.plot(
                    ls,
                    [series[x] / 1e3 for x in ls],
                    color=PALETTE[ci],
                    ls="--" if causal else "-",
                    marker=MARKERS[ci % len(MARKERS)],
                    ms=3.5,
                    lw=1.3,
                    label=label,
                )
                handles.setdefault(label, h)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        lengths = sorted({x for (md, _), s in data["times"].items() if md == mode for x in s})
        ax.set_xticks(lengths)
        # 1k, 2k and 4k sit close on a log axis: 2k keeps its tick, not its label
        ax.set_xticklabels(["" if x == 2048 else f"{x // 1024}k" for x in lengths])
        ax.minorticks_off()
        ax.set_xlabel("sequence length L (tokens)")
        ax.set_title(mode.replace("+", " + "))
    axes[0].set_ylabel("time per call (s, min over repeats)")
    if data["skipped"]:
        where, _, what = data["skipped"].partition(": ")
        axes[1].text(
            0.97,
            0.03,
            f"not run ({where.split()[-1]}),\nover the time limit:\n" + what.replace("), ", "),\n"),
            transform=axes[1].transAxes,
            ha="right",
            va="bottom",
            fontsize=7,
        )
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=4, frameon=False)
    fig.suptitle(data["header"].replace("kernelkit bench attention: ", ""), fontsize=7.5, y=0.99)
    fig.tight_layout(rect=(0, 0.12, 1, 0.97))
    return _save(fig, path)


def attention_memory_figure(path: Path, *, bench: Path = BENCH) -> Path:
    """Peak extra memory of one forward call, from the committed benchmark output."""
    _style()
    data = parse_bench(Path(bench).read_text())
    rows = data["memory"]
    if not rows:
        raise ValueError("no 'Peak extra memory' rows found in the benchmark output")
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.45 * len(rows) + 1.2))
    y = np.arange(len(rows))
    ax.barh(y, [r[1] for r in rows], color=PALETTE[0], height=0.55, label="kernelkit")
    ax.scatter(
        [r[3] for r in rows],
        y,
        color=PALETTE[6],
        marker="|",
        s=250,
        lw=2,
        zorder=3,
        label="SDPA of the same mode",
    )
    for yi, r in zip(y, rows, strict=True):
        ax.text(
            max(r[1], r[3]) + 1.5,
            yi,
            f"{r[1]:.1f} MiB ({r[1] / r[3]:.2f}× SDPA)",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(y)
    ax.set_yticklabels([r[0].replace("kernelkit ", "") for r in rows])
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set_xlim(0, 2.4 * max(max(r[1], r[3]) for r in rows))  # room for labels and legend
    ax.set_xlabel("peak extra memory of one forward call (MiB)")
    ax.set_title("\n".join(textwrap.wrap(data.get("memory_title", ""), 80)), fontsize=8)
    ax.legend(loc="upper right", frameon=False, fontsize=7.5)
    fig.tight_layout()
    return _save(fig, path)


FIGURES = {
    "softmax_error": (softmax_error_figure, "softmax_error_vs_m.png"),
    "dot_product": (dot_product_error_figure, "dot_product_error_vs_m.png"),
    "variance": (variance_check_figure, "variance_analytic_vs_empirical.png"),
    "attention": (attention_time_figure, "attention_cpu_time.png"),
    "attention_memory": (attention_memory_figure, "attention_cpu_memory.png"),
    "ridge": (ridge_error_figure, "ridge_error_vs_m.png"),
}


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        description="Draw the user guide's figures into docs/figures/ (all by default)."
    )
    parser.add_argument("names", nargs="*", metavar="FIGURE", help=f"of {sorted(FIGURES)}")
    names = parser.parse_args(argv).names or list(FIGURES)
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        print(f"unknown figure(s) {unknown}; choose from {sorted(FIGURES)}", file=sys.stderr)
        return 2
    for name in names:
        func, filename = FIGURES[name]
        print("wrote", func(OUT / filename).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
