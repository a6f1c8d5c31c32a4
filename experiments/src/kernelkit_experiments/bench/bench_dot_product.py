"""Benchmark of the dot-product feature maps (``kernelkit bench dot-product``).

The peer is scikit-learn's :class:`~sklearn.kernel_approximation.PolynomialCountSketch`
(TensorSketch, Pham & Pagh 2013), measured in the same run:

* **speed** -- ``PolynomialCountSketch.transform`` time divided by kernelkit
  ``TensorSRHT.transform`` time (real TensorSRHT, the same number of output columns),
  float64 (scikit-learn's dtype);
* **accuracy** -- relative Frobenius error ``|K - K_hat|_F / |K|_F`` (eq. 58 of Wacker,
  Kanagawa & Filippone, "Improved Random Features for Dot Product Kernels") of complex
  TensorSRHT with ``real_output=True`` and ``D/2`` complex features (so ``D`` real
  columns, as many as scikit-learn's) divided by scikit-learn's error, each the mean over
  ``seeds`` draws, on the first ``m`` rows (exact kernel) of non-negative, non-centred
  image data with unit-norm rows: Fashion-MNIST resized to 8x8 (``d = 64``, the paper's
  main data set; the first ``n`` training images), or scikit-learn's 8x8 digits when the
  ``dataset-fashion-mnist`` package is missing. The per-seed errors are heavy-tailed
  (one bad draw moves every kernel entry), so many seeds are averaged.
  Also reported (no target): the same ratio on synthetic non-negative data
  ``x = |x~| / |x~|``, ``x~ ~ N(0, I_64)``, where the pairs are so aligned
  (``x.y ~ 2/pi``) that the gain of the complex map at half the features is small.

Reported without targets: float32 and complex ``transform`` times, kernelkit's own
``TensorSketch`` (same construction as the peer), and real TensorSRHT's error.

Timing: one warm-up call each, then ``repeats`` rounds calling the two sides of a ratio
alternately, each after a short busy-wait (OpenBLAS threads spin after a threaded call);
a time is the minimum over the rounds (the median is recorded too). Sizes: ``n = 20000,
d = 64, degree = 3, D = 1024`` (``quick``: ``n = 4000``; targets are set for the full run).

Run ``python benchmarks/bench_dot_product.py [--quick]`` or ``kernelkit bench dot-product``.
"""

from __future__ import annotations

import os
import platform
from functools import partial

import numpy as np

from ._timing import meets, text_table, time_calls

NAME = "dot-product"
DESCRIPTION = (
    "dot-product random features: TensorSRHT transform time and complex TensorSRHT "
    "Frobenius error against scikit-learn's PolynomialCountSketch"
)

__all__ = ["DESCRIPTION", "NAME", "TARGETS", "run"]

#: name -> (comparison, threshold)
TARGETS = {
    "PolynomialCountSketch.transform / TensorSRHT.transform [float64]": (">=", 3.0),
    "Frobenius error complex TensorSRHT / PolynomialCountSketch": ("<", 1.0),
}


def _unit_rows(X: np.ndarray) -> np.ndarray:
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300)


def _synthetic(n: int, d: int, seed: int) -> np.ndarray:
    """Non-negative unit vectors ``|x~| / |x~|``, ``x~ ~ N(0, I_d)`` (float64)."""
    return _unit_rows(np.abs(np.random.default_rng(seed).standard_normal((n, d))))


def _image_data(n: int):
    """``(X, name)``: the first ``n`` Fashion-MNIST training images resized to 8x8, or
    the digits (1797 rows) if Fashion-MNIST is not installed; unit-norm rows."""
    from kernelkit.datasets import (
        fashion_mnist_available,
        load_digits_images,
        load_fashion_mnist,
        resize_to_8x8,
    )

    if fashion_mnist_available():
        X, _ = load_fashion_mnist("train", n=n)
        return _unit_rows(resize_to_8x8(X.reshape(-1, 28, 28))), "Fashion-MNIST 8x8"
    X, _ = load_digits_images()
    return _unit_rows(X), "digits 8x8 (Fashion-MNIST not installed)"


def _speed(X, degree, D, repeats, seed):
    from sklearn.kernel_approximation import PolynomialCountSketch

    from kernelkit.features import TensorSketch, TensorSRHT

    sk = PolynomialCountSketch(degree=degree, n_components=D, random_state=seed).fit(X)
    srht = TensorSRHT(n_features=D, degree=degree, random_state=seed).fit(X)
    csrht = TensorSRHT(
        n_features=D // 2, degree=degree, complex=True, real_output=True, random_state=seed
    ).fit(X)
    ts = TensorSketch(n_features=D, degree=degree, random_state=seed).fit(X)
    X32 = X.astype(np.float32)
    assert srht.transform(X[:5]).shape == sk.transform(X[:5]).shape == csrht.transform(X[:5]).shape
    fns = {
        "PolynomialCountSketch.transform": partial(sk.transform, X),
        "TensorSRHT.transform": partial(srht.transform, X),
        "TensorSRHT.transform [float32]": partial(srht.transform, X32),
        "TensorSRHT(complex, D/2, real_output).transform": partial(csrht.transform, X),
        "TensorSketch.transform": partial(ts.transform, X),
        "X @ W (d x degree*D matmul)": partial(np.matmul, X, np.ones((X.shape[1], degree * D))),
    }
    return time_calls(fns, repeats), srht.method if srht.method != "auto" else (
        "dense" if srht._dense else "fwht"
    )


def _rel_fro(K, F):
    return float(np.linalg.norm(F @ F.T - K) / np.linalg.norm(K))


def _accuracy(X, degree, D, m, seeds):
    """Relative Frobenius errors on the first ``m`` rows of ``X`` for each seed."""
    from sklearn.kernel_approximation import PolynomialCountSketch

    from kernelkit.features import TensorSRHT

    Xs = X[:m]
    K = (Xs @ Xs.T) ** degree
    errs = {
        "PolynomialCountSketch": [],
        "TensorSRHT complex (D/2, real_output)": [],
        "TensorSRHT real": [],
    }
    for s in seeds:
        sk = PolynomialCountSketch(degree=degree, n_components=D, random_state=s).fit(X)
        errs["PolynomialCountSketch"].append(_rel_fro(K, sk.transform(Xs)))
        c = TensorSRHT(
            n_features=D // 2, degree=degree, complex=True, real_output=True, random_state=s
        ).fit(X)
        errs["TensorSRHT complex (D/2, real_output)"].append(_rel_fro(K, c.transform(Xs)))
        r = TensorSRHT(n_features=D, degree=degree, random_state=s).fit(X)
        errs["TensorSRHT real"].append(_rel_fro(K, r.transform(Xs)))
    return {
        k: {"mean": float(np.mean(v)), "std": float(np.std(v)), "values": v}
        for k, v in errs.items()
    }


def run(quick: bool = False) -> dict:
    """Run the benchmark, print its tables and return the numbers.

    Returns
    -------
    dict with ``config``, ``timings`` (seconds), ``errors`` (relative Frobenius errors),
    ``targets`` (value, target, pass) and ``all_pass``.
    """
    from kernelkit._backend.parallel import num_threads

    n, d, degree, D = (4000, 64, 3, 1024) if quick else (20000, 64, 3, 1024)
    m = 500 if quick else 1000
    seeds = list(range(8 if quick else 40))
    repeats = 5 if quick else 11
    config = {
        "n": n,
        "d": d,
        "degree": degree,
        "D": D,
        "m_exact": m,
        "seeds": len(seeds),
        "repeats": repeats,
        "quick": quick,
        "cpus": os.cpu_count(),
        "kernelkit_threads": num_threads(),
        "numpy": np.__version__,
        "machine": platform.machine(),
    }
    print(
        f"kernelkit bench dot-product: n={n}, d={d}, degree={degree}, D={D}, "
        f"{repeats} repeats (min over rounds), {os.cpu_count()} CPUs, kernelkit "
        f"threads={num_threads()}"
        + (" [quick sizes; targets are for the full run]" if quick else "")
    )
    X, data_name = _image_data(n)
    if X.shape[0] < n:  # digits: time on synthetic rows of the same shape
        X_speed, speed_name = _synthetic(n, d, seed=0), "synthetic |N(0, I)|, unit rows"
    else:
        X_speed, speed_name = X, data_name
    config.update(data=data_name, speed_data=speed_name)
    print(f"data: {data_name} (accuracy), {speed_name} (timing)")
    timings, method = _speed(X_speed, degree, D, repeats, seed=0)
    errors = _accuracy(X, degree, D, m, seeds)
    errors_syn = _accuracy(_synthetic(m, d, seed=1), degree, D, m, seeds[: max(4, len(seeds) // 4)])

    t_sk = timings["PolynomialCountSketch.transform"]["min"]
    speed = t_sk / timings["TensorSRHT.transform"]["min"]
    cname = "TensorSRHT complex (D/2, real_output)"
    err_ratio = errors[cname]["mean"] / errors["PolynomialCountSketch"]["mean"]
    err_ratio_syn = errors_syn[cname]["mean"] / errors_syn["PolynomialCountSketch"]["mean"]
    values = dict(zip(TARGETS, (speed, err_ratio), strict=True))
    targets, rows = {}, []
    for name, (op, thr) in TARGETS.items():
        ok = meets(values[name], op, thr)
        targets[name] = {"value": values[name], "target": f"{op} {thr:g}", "pass": ok}
        rows.append([name, f"{values[name]:.3f}", f"{op} {thr:g}", "PASS" if ok else "FAIL"])
    print("\nTargets:")
    print(text_table(["quantity", "value", "target", "status"], rows))

    rows = [
        [k, f"{v['min'] * 1e3:.1f}", f"{v['median'] * 1e3:.1f}", f"{t_sk / v['min']:.2f}"]
        for k, v in timings.items()
    ]
    print(f"\nTimes (ms; TensorSRHT evaluates its {method!r} path):")
    print(text_table(["call", "min", "median", "sklearn / this"], rows))

    rows = [
        [name, k, f"{v['mean']:.4f}", f"{v['std']:.4f}", f"{len(v['values'])}"]
        for name, errs in ((data_name, errors), ("synthetic |N(0, I)|", errors_syn))
        for k, v in errs.items()
    ]
    print(
        f"\nRelative Frobenius error (eq. 58), degree {degree}, first {m} rows, mean and "
        f"std over seeds, {D} real output columns each:"
    )
    print(text_table(["data", "map", "mean", "std", "seeds"], rows))
    print(
        f"complex TensorSRHT / PolynomialCountSketch on synthetic |N(0, I)| (no target): "
        f"{err_ratio_syn:.3f}"
    )

    all_pass = all(v["pass"] for v in targets.values())
    print(f"\n{sum(v['pass'] for v in targets.values())}/{len(targets)} targets pass.")
    return {
        "config": config,
        "timings": timings,
        "errors": errors,
        "errors_synthetic": errors_syn,
        "error_ratio_synthetic": err_ratio_syn,
        "targets": targets,
        "all_pass": all_pass,
        "srht_path": method,
    }
