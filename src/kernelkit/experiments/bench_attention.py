"""Benchmark of linear attention (``kernelkit bench attention``).

Everything is timed in one run, on the same inputs (batch 1, 8 heads, head dimension
d = 64, float32, queries / keys / values with i.i.d. N(0, 1) entries, so the logits
``q.k / sqrt(d)`` have unit variance), with M = 256 random features for every
random-feature method:

* torch :func:`~torch.nn.functional.scaled_dot_product_attention` (SDPA, exact; on CPU
  its fused flash kernel, O(L) memory) bidirectional and causal;
* kernelkit :func:`kernelkit.attention.linear_attention` with FAVOR+ (``"positive"``) and
  FAVOR# (``"sderf"``, the paper's speech variant, and ``"saderf"``, its GLUE variant),
  bidirectional (parameters fitted per batch element and head inside the call) and causal
  (FAVOR# parameters fitted inside the call from ``moments`` of an independent
  calibration batch, as :class:`~kernelkit.attention.FavorAttention` does from its
  running statistics: a causal fit must not see the sequence itself);
* performer-pytorch ``FastAttention(dim_heads=64, nb_features=256)`` (FAVOR+, the
  reference Performer implementation; it draws block-orthogonal projections like
  kernelkit, takes ``(B, H, L, d)`` and scales by ``d^{-1/4}`` itself, so it computes the
  same estimator on the same inputs); its causal mode without the optional CUDA extension
  is a pure-PyTorch loop (seconds at L = 256), timed for information at L = 1024 in the
  full run only.

Sizes: L in {1024, 4096, 16384, 65536} (``quick``: {512, 2048}); exact attention and the
performer causal loop are skipped at an L where their time extrapolated from the previous
L (quadratic / linear) exceeds ``max_call_s`` (that is what "where the exact one fits"
means on a CPU: at L = 65536 SDPA would need ~16x its L = 16384 time).

Each size is timed for the forward pass (under ``torch.no_grad()``) and for forward +
backward (``out.backward(g)`` with a fixed random ``g``, gradients for q, k and v).
Timing: :func:`kernelkit.experiments._timing.time_calls` -- one warm-up call each, then
``repeats`` rounds calling everything round-robin (so every side of a ratio sees the same
machine load); a time is the minimum over rounds. On CUDA every call synchronises.

Targets (ratios of minimum times; "x / y" is how many times faster y is):

* ``SDPA / kernelkit FAVOR#`` (bidirectional) >= 6 at L = 16384;
* ``SDPA causal / kernelkit causal`` >= 3 at L = 16384 (FAVOR+ and FAVOR# causal rows);
* ``kernelkit FAVOR# / kernelkit FAVOR+`` <= 1.5 at every L (bidirectional);
* ``performer FAVOR+ / kernelkit FAVOR+`` >= 1 at every L (bidirectional).

Forward and forward + backward rows are both target rows. In ``quick`` mode the
L = 16384 targets are not measured (reported rows only).

Run ``python benchmarks/bench_attention.py [--quick]`` or ``kernelkit bench attention``.
"""

from __future__ import annotations

import math
import os
import platform
from functools import partial

from ._timing import meets, text_table, time_calls

NAME = "attention"
DESCRIPTION = (
    "linear attention vs torch SDPA and performer-pytorch (forward, forward + "
    "backward; batch 1, 8 heads, d = 64, M = 256)"
)

__all__ = ["DESCRIPTION", "NAME", "TARGETS", "run"]

#: quantity -> (comparison, threshold, L the target is set for or None for every L)
TARGETS = {
    "SDPA / kernelkit FAVOR#": (">=", 6.0, 16384),
    "SDPA causal / kernelkit causal": (">=", 3.0, 16384),
    "kernelkit FAVOR# / kernelkit FAVOR+": ("<=", 1.5, None),
    "performer FAVOR+ / kernelkit FAVOR+": (">=", 1.0, None),
}

FULL_L = (1024, 4096, 16384, 65536)
QUICK_L = (512, 2048)
B, H, D, M = 1, 8, 64, 256
SHARP = ("sderf", "saderf")  # FAVOR# variants timed (SDERF: speech; SADERF: GLUE)
#: calls whose cost grows faster than the linear ones, with the exponent of L used to
#: extrapolate their time to the next size
_SLOW = {"SDPA": 2, "SDPA causal": 2, "performer causal": 1}


def _bench_threads() -> int:
    """Every CPU available to this process (``KERNELKIT_TORCH_THREADS`` overrides)."""
    env = os.environ.get("KERNELKIT_TORCH_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _inputs(L, device, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    q, k, v, grad = (torch.randn(B, H, L, D, generator=g) for _ in range(4))  # (B, H, L, D)
    return tuple(t.to(device) for t in (q, k, v, grad))


def _calls(L, device, seed, skip, performer_ok):
    """name -> callable(q, k, v) returning the output (B, H, L, D)."""
    import torch.nn.functional as F

    from kernelkit.attention import FITTED_MAPS, attention_moments, linear_attention

    # causal FAVOR++/FAVOR# parameters come from statistics of *other* data (a module keeps
    # them as running buffers): moments of an independent calibration batch, computed once
    qc, kc, _, _ = _inputs(1024, device, seed + 1)
    calib = attention_moments(qc, kc)
    fns = {}
    if "SDPA" not in skip:
        fns["SDPA"] = F.scaled_dot_product_attention
    if "SDPA causal" not in skip:
        fns["SDPA causal"] = partial(F.scaled_dot_product_attention, is_causal=True)
    for fm in ("positive", *SHARP):
        label = "FAVOR+" if fm == "positive" else f"FAVOR# {fm}"
        for causal in (False, True):
            name = f"kernelkit {label}" + (" causal" if causal else "")
            if name in skip:
                continue
            extra = {"moments": calib} if causal and fm in FITTED_MAPS else {}
            fns[name] = partial(
                linear_attention,
                feature_map=fm,
                n_features=M,
                is_causal=causal,
                random_state=seed,
                **extra,
            )
    if performer_ok:
        fa = _performer(device, causal=False, seed=seed)
        fns["performer FAVOR+"] = fa
        if "performer causal" not in skip:
            fns["performer causal"] = _performer(device, causal=True, seed=seed)
    return fns


def _performer(device, causal, seed):
    import contextlib
    import io

    import torch
    from performer_pytorch import FastAttention

    torch.manual_seed(seed)
    with contextlib.redirect_stdout(io.StringIO()):  # "unable to import cuda code ..."
        fa = FastAttention(dim_heads=D, nb_features=M, causal=causal)
    return fa.to(device)


def _timed(fns, q, k, v, grad, backward, repeats, device):
    """Time every call on the same inputs; forward under no_grad or forward + backward."""
    import torch

    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)

    def fwd(fn):
        with torch.no_grad():
            fn(q, k, v)
        sync()

    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]

    def fwd_bwd(fn):
        for t in leaves:
            t.grad = None
        fn(*leaves).backward(grad)
        sync()

    wrap = fwd_bwd if backward else fwd
    return time_calls({name: partial(wrap, fn) for name, fn in fns.items()}, repeats)


def _accuracy(q, k, v, seed, performer_ok):
    """Relative L2 error of the outputs against exact attention (bidirectional), and the
    check that performer-pytorch computes kernelkit's FAVOR+ estimator: with kernelkit's
    projection and its ``eps`` set to 0 the two outputs agree to rounding."""
    import torch

    from kernelkit.attention import draw_features, linear_attention
    from kernelkit.kernels import softmax_attention

    with torch.no_grad():
        exact = softmax_attention(q.double(), k.double(), v.double())
        outs = {
            f"kernelkit {'FAVOR+' if fm == 'positive' else 'FAVOR# ' + fm}": linear_attention(
                q, k, v, feature_map=fm, n_features=M, random_state=seed
            )
            for fm in ("positive", *SHARP)
        }
        same = None
        if performer_ok:
            from performer_pytorch.performer_pytorch import linear_attention as p_linear
            from performer_pytorch.performer_pytorch import softmax_kernel

            outs["performer FAVOR+ (eps=1e-4, default)"] = _performer(q.device, False, seed)(
                q, k, v
            )
            W = torch.as_tensor(
                draw_features("positive", M, D, seed)["W"], dtype=q.dtype, device=q.device
            )  # (M, d)
            qp = softmax_kernel(q, projection_matrix=W, is_query=True, eps=0.0)
            kp = softmax_kernel(k, projection_matrix=W, is_query=False, eps=0.0)
            ours = outs["kernelkit FAVOR+"]
            theirs = p_linear(qp, kp, v)
            outs["performer FAVOR+ (eps=0, kernelkit's W)"] = theirs
            same = float(torch.linalg.vector_norm(theirs - ours) / torch.linalg.vector_norm(ours))
        errs = {
            name: float(
                torch.linalg.vector_norm(o.double() - exact) / torch.linalg.vector_norm(exact)
            )
            for name, o in outs.items()
        }
        return errs, same


def _ratio_rows(times):
    """(quantity, numerator, denominator) for every ratio that can be formed."""
    rows = []
    for fm in SHARP:
        rows.append(("SDPA / kernelkit FAVOR#", "SDPA", f"kernelkit FAVOR# {fm}"))
    for label in ("FAVOR+", *(f"FAVOR# {fm}" for fm in SHARP)):
        rows.append(("SDPA causal / kernelkit causal", "SDPA causal", f"kernelkit {label} causal"))
    for fm in SHARP:
        rows.append(
            ("kernelkit FAVOR# / kernelkit FAVOR+", f"kernelkit FAVOR# {fm}", "kernelkit FAVOR+")
        )
        rows.append(
            (
                "kernelkit FAVOR# / kernelkit FAVOR+",
                f"kernelkit FAVOR# {fm} causal",
                "kernelkit FAVOR+ causal",
            )
        )
    rows.append(("performer FAVOR+ / kernelkit FAVOR+", "performer FAVOR+", "kernelkit FAVOR+"))
    rows.append(
        (
            "performer causal / kernelkit causal (info)",
            "performer causal",
            "kernelkit FAVOR+ causal",
        )
    )
    return [(q, n, d) for q, n, d in rows if n in times and d in times]


def run(
    quick: bool = False,
    device: str | None = None,
    lengths=None,
    max_call_s: float | None = None,
    seed: int = 0,
) -> dict:
    """Run the benchmark, print its tables and return the numbers.

    Parameters
    ----------
    quick : bool
        L in :data:`QUICK_L` (seconds) instead of :data:`FULL_L`.
    device : str, optional
        ``"cuda"`` when available, else ``"cpu"``.
    lengths : sequence of int, optional
        Overrides the L set.
    max_call_s : float, optional
        Skip exact attention / the performer causal loop where one call would take longer
        (extrapolated); default 90 s (full), 5 s (quick).

    Returns
    -------
    dict with ``config``, ``timings`` (``{mode: {L: {call: {"min", "median"}}}}``, seconds),
    ``ratios`` (list of rows), ``targets`` (rows with a target: value, target, pass),
    ``skipped``, ``accuracy`` and ``all_pass``.
    """
    import importlib.util

    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    lengths = tuple(lengths or (QUICK_L if quick else FULL_L))
    max_call_s = max_call_s or (5.0 if quick else 90.0)
    performer_ok = importlib.util.find_spec("performer_pytorch") is not None
    threads = _bench_threads() if device == "cpu" else torch.get_num_threads()
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    config = {
        "B": B,
        "H": H,
        "d": D,
        "M": M,
        "lengths": list(lengths),
        "device": device,
        "torch": torch.__version__,
        "threads": threads,
        "cpus": os.cpu_count(),
        "quick": quick,
        "max_call_s": max_call_s,
        "machine": platform.machine(),
        "performer_pytorch": performer_ok,
    }
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    config["load_average_1min"] = load
    if device == "cpu" and threads > 1 and load > (os.cpu_count() or 1):
        print(
            f"WARNING: load average {load:.1f} exceeds the {os.cpu_count()} CPUs: with "
            f"{threads} torch threads every small op waits for a busy core (the causal "
            "scans slow down by 10-25x on a loaded machine); timings are unreliable. "
            "KERNELKIT_TORCH_THREADS=1 gives steadier numbers."
        )
    print(
        f"kernelkit bench attention: batch {B}, {H} heads, d={D}, M={M}, float32, "
        f"L in {list(lengths)}, device={device}, torch {torch.__version__} "
        f"({threads} threads)"
        + (" [quick sizes; the L=16384 targets need the full run]" if quick else "")
    )
    if not performer_ok:
        print(
            "performer-pytorch not installed: its rows are skipped (pip install performer-pytorch)."
        )

    timings = {"forward": {}, "forward+backward": {}}
    skipped, accuracy, same_estimator = {}, {}, None
    try:
        for mode, backward in (("forward", False), ("forward+backward", True)):
            prev_L = None
            for L in lengths:
                skip = set()
                if performer_ok and (quick or L > 1024):
                    # a pure-PyTorch loop (seconds already at L = 256): full run, L <= 1024
                    skip.add("performer causal")
                if prev_L is not None:
                    for name, power in _SLOW.items():
                        if name in skip:
                            continue
                        t_prev = timings[mode][prev_L].get(name, {}).get("min")
                        est = t_prev * (L / prev_L) ** power if t_prev is not None else math.inf
                        if est > max_call_s:
                            skip.add(name)
                            why = (
                                f"est. {est:.0f} s > {max_call_s:g} s"
                                if math.isfinite(est)
                                else "skipped at a smaller L"
                            )
                            skipped.setdefault(mode, {}).setdefault(L, []).append(f"{name} ({why})")
                q, k, v, grad = _inputs(L, device, seed)
                if mode == "forward" and L == lengths[0]:
                    accuracy, same_estimator = _accuracy(q, k, v, seed, performer_ok)
                fns = _calls(L, device, seed, skip, performer_ok)
                slowest = max(
                    (
                        timings[mode][prev_L].get(n, {}).get("min", 0.0) * (L / prev_L) ** 2
                        for n in fns
                        if n in _SLOW and prev_L
                    ),
                    default=0.0,
                )
                repeats = 1 if slowest > 10 else (3 if slowest > 1 or L >= 16384 or quick else 5)
                timings[mode][L] = _timed(fns, q, k, v, grad, backward, repeats, device)
                prev_L = L
                print(
                    f"  {mode:16s} L={L:6d}: "
                    + ", ".join(
                        f"{n} {t['min'] * 1e3:.1f} ms" for n, t in timings[mode][L].items()
                    ),
                    flush=True,
                )
    finally:
        torch.set_num_threads(old_threads)

    # ---- ratios and targets
    ratio_rows, targets, rows = [], [], []
    for mode, per_L in timings.items():
        for L, t in per_L.items():
            for quantity, num, den in _ratio_rows(t):
                value = t[num]["min"] / t[den]["min"]
                entry = {
                    "mode": mode,
                    "L": L,
                    "quantity": quantity,
                    "numerator": num,
                    "denominator": den,
                    "value": value,
                }
                status = "(info)"
                if quantity in TARGETS:
                    op, thr, L_target = TARGETS[quantity]
                    ok = meets(value, op, thr)
                    entry.update(target=f"{op} {thr:g}", met=ok)
                    if L_target is None or L_target == L:
                        entry["is_target"] = True
                        targets.append(entry)
                        status = "met" if ok else "NOT MET"
                    else:
                        status = f"(report: {'meets' if ok else 'misses'})"
                ratio_rows.append(entry)
                rows.append(
                    [mode, L, f"{num} / {den}", f"{value:.2f}", entry.get("target", ""), status]
                )
    print(
        "\nRatios of minimum times (target rows: 'met' / 'NOT MET'; SDPA targets are "
        "set for L=16384):"
    )
    print(text_table(["mode", "L", "ratio", "value", "target", "status"], rows))

    rows = [
        [mode, L, name, f"{v['min'] * 1e3:.1f}", f"{v['median'] * 1e3:.1f}"]
        for mode, per_L in timings.items()
        for L, t in per_L.items()
        for name, v in t.items()
    ]
    print("\nTimes (ms):")
    print(text_table(["mode", "L", "call", "min", "median"], rows))
    if skipped:
        print(
            "\nSkipped (time limit): "
            + "; ".join(
                f"{mode} L={L}: {', '.join(v)}" for mode, d in skipped.items() for L, v in d.items()
            )
        )
    if accuracy:
        print(
            f"\nRelative L2 error of the output vs exact attention at L={lengths[0]} "
            "(bidirectional, one draw). performer-pytorch adds eps = 1e-4 to every "
            "stabilised feature: a bias towards uniform attention, which lowers the error "
            "where the unbiased estimate is this noisy (N(0, 1) inputs, d = 64); with "
            "eps = 0 and the same projection it computes kernelkit's estimator:"
        )
        print(text_table(["method", "rel. error"], [[k, f"{v:.3f}"] for k, v in accuracy.items()]))
        if same_estimator is not None:
            print(
                f"performer (eps=0, kernelkit's W) vs kernelkit FAVOR+: relative "
                f"difference {same_estimator:.1e}"
            )
    n_met = sum(e["met"] for e in targets)
    print(f"\n{n_met}/{len(targets)} target rows met.")
    return {
        "config": config,
        "timings": timings,
        "ratios": ratio_rows,
        "targets": targets,
        "skipped": skipped,
        "accuracy": accuracy,
        "performer_eps0_vs_kernelkit": same_estimator,
        "all_pass": bool(targets) and n_met == len(targets),
    }
