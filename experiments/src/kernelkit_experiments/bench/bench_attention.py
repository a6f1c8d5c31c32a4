"""Benchmark of linear attention (``kernelkit bench attention``).

Everything is timed in one run, on the same inputs: batch 1, 8 heads, head dimension
d = 64, queries / keys / values with i.i.d. N(0, 1) entries (so the logits ``q.k / sqrt(d)``
have unit variance), float32 by default (``dtype`` / ``--dtype``: bfloat16 or float16
inputs, which kernelkit computes in float32), and M = 256 random features for every
random-feature method:

* torch :func:`~torch.nn.functional.scaled_dot_product_attention` (SDPA, exact; on CPU
  its fused flash kernel, O(L) memory) bidirectional and causal;
* kernelkit :func:`kernelkit.attention.linear_attention` with FAVOR+ (``"positive"``) and
  FAVOR# (``"sderf"``, the paper's speech variant, and ``"saderf"``, its GLUE variant),
  bidirectional (parameters fitted per batch element and head inside the call) and causal
  (FAVOR# parameters fitted inside the call from ``moments`` of an independent
  calibration batch, as :class:`~kernelkit.attention.FavorAttention` does from its
  running statistics: a causal fit must not see the sequence itself; the moments differ
  slightly from call to call, as running statistics do between training steps, so that
  every timed call fits instead of reusing the fit of equal moments, see
  :class:`_Refitting`);
* performer-pytorch ``FastAttention(dim_heads=64, nb_features=256)`` (FAVOR+, the
  reference Performer implementation; it draws block-orthogonal projections like
  kernelkit, takes ``(B, H, L, d)`` and scales by ``d^{-1/4}`` itself, so it computes the
  same estimator on the same inputs); its causal mode without the optional CUDA extension
  is a pure-PyTorch loop (seconds at L = 256), timed for information at L = 1024 in the
  full run only.

Sizes: L in {1024, 2048, 4096, 16384, 65536} (``quick``: {512, 2048}); exact attention
and the performer causal loop are skipped at an L where their time extrapolated from the
previous L (quadratic / linear) exceeds ``max_call_s`` (that is what "where the exact one
fits" means on a CPU: at L = 65536 SDPA would need ~16x its L = 16384 time).

Each size is timed for the forward pass (under ``torch.no_grad()``) and for forward +
backward (``out.backward(g)`` with a fixed random ``g``, gradients for q, k and v).
Timing: :func:`kernelkit_experiments.bench._timing.time_calls` -- one warm-up call each, then
``repeats`` rounds calling everything round-robin (so every side of a ratio sees the same
machine load), on the CPU each timed call right after the same call has run back to back
for 0.2 s (its steady state, as in a training loop; calls of 2 s or more without it); a
time is the minimum over rounds. On CUDA every call synchronises and is timed as it
comes.

Memory: the peak extra resident memory of one forward call (under ``no_grad``) at
L = 16384 (``quick``: 2048; only where that L is among the timed lengths), each call in a
fresh Python subprocess: after allocating the inputs and warming the call up at a small
L, the process's peak resident set (``VmHWM``) is reset to its current one (``VmRSS``),
and the measure is the peak after the call minus that RSS. On CUDA,
``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` minus
``memory_allocated`` before the call.

Targets (ratios of minimum times; "x / y" is how many times faster y is; mode and L in
:data:`TARGETS`):

* ``SDPA / kernelkit FAVOR#`` (bidirectional forward) >= 12 at L = 16384, >= 1.5 at
  L = 1024;
* ``SDPA causal / kernelkit causal`` (forward) >= 8 at L = 16384, >= 1 at L = 1024;
  forward + backward >= 2 at L = 4096;
* ``kernelkit FAVOR# / kernelkit FAVOR+`` <= 1.1 at every L and in both modes;
* ``performer FAVOR+ / kernelkit FAVOR+`` >= 1 at every L (bidirectional);
* ``kernelkit / SDPA peak extra memory`` (forward, bidirectional and causal) <= 2 at
  L = 16384.

In ``quick`` mode the L = 16384 targets are not measured (reported rows only).

Run ``python benchmarks/bench_attention.py [--quick]`` or ``kernelkit bench attention``.
"""

from __future__ import annotations

import itertools
import math
import os
import platform
import subprocess
import sys
from functools import partial

from ._timing import SETTLE_S, meets, text_table, time_calls

NAME = "attention"
DESCRIPTION = (
    "linear attention vs torch SDPA and performer-pytorch (forward, forward + "
    "backward; batch 1, 8 heads, d = 64, M = 256)"
)

__all__ = ["DESCRIPTION", "NAME", "TARGETS", "peak_extra_memory", "run"]

#: (quantity, mode or None for both, L or None for every L, comparison, threshold)
TARGETS = (
    ("SDPA / kernelkit FAVOR#", "forward", 16384, ">=", 12.0),
    ("SDPA / kernelkit FAVOR#", "forward", 1024, ">=", 1.5),
    ("SDPA causal / kernelkit causal", "forward", 16384, ">=", 8.0),
    ("SDPA causal / kernelkit causal", "forward", 1024, ">=", 1.0),
    ("SDPA causal / kernelkit causal", "forward+backward", 4096, ">=", 2.0),
    ("kernelkit FAVOR# / kernelkit FAVOR+", None, None, "<=", 1.1),
    ("performer FAVOR+ / kernelkit FAVOR+", None, None, ">=", 1.0),
    ("kernelkit / SDPA peak extra memory", "forward", 16384, "<=", 2.0),
)


def _target(quantity, mode, L):
    """``(comparison, threshold)`` of the target row for ``quantity`` at ``mode``, ``L``,
    or None; ``(comparison, threshold, False)`` where the quantity has a target at
    another L only (reported as meets / misses)."""
    other = None
    for q, m, lt, op, thr in TARGETS:
        if q != quantity or (m is not None and m != mode):
            continue
        if lt is None or lt == L:
            return op, thr, True
        other = other or (op, thr, False)
    return other


FULL_L = (1024, 2048, 4096, 16384, 65536)
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


DTYPES = ("float32", "bfloat16", "float16")
#: query rows of the accuracy check (exact attention for all L rows is O(L^2) memory)
ACCURACY_ROWS = 128


def _inputs(L, device, seed, dtype="float32"):
    import torch

    g = torch.Generator().manual_seed(seed)
    q, k, v, grad = (torch.randn(B, H, L, D, generator=g) for _ in range(4))  # (B, H, L, D)
    return tuple(t.to(device=device, dtype=getattr(torch, dtype)) for t in (q, k, v, grad))


def _calls(L, device, seed, skip, performer_ok, dtype="float32"):
    """name -> callable(q, k, v) returning the output (B, H, L, D)."""
    import torch.nn.functional as F

    from kernelkit.attention import FITTED_MAPS, attention_moments, linear_attention

    # causal FAVOR++/FAVOR# parameters come from statistics of *other* data (a module keeps
    # them as running buffers): moments of an independent calibration batch, computed once
    qc, kc, _, _ = _inputs(1024, device, seed + 1, dtype)
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
            fn = partial(
                linear_attention,
                feature_map=fm,
                n_features=M,
                is_causal=causal,
                random_state=seed,
            )
            fns[name] = _Refitting(fn, calib) if causal and fm in FITTED_MAPS else fn
    if performer_ok:
        fa = _performer(device, causal=False, seed=seed)
        fns["performer FAVOR+"] = fa
        if "performer causal" not in skip:
            fns["performer causal"] = _performer(device, causal=True, seed=seed)
    return fns


#: calls of :class:`_Refitting` in this process (a counter shared by every instance, so
#: that no two calls pass equal moments)
_REFIT_CALLS = itertools.count(1)


class _Refitting:
    """``fn(q, k, v, moments=...)`` with moments that differ slightly from every earlier
    call's, so that each call fits its FAVOR# parameters.

    ``linear_attention`` reuses the fit of moments equal to a recent call's (a module's
    frozen running statistics in eval mode); timed repeatedly on one calibration set,
    only the warm-up call would fit, and the timed calls would leave out a cost a
    training step pays (its running statistics move every step). The ``i``-th such call
    of the process scales the (float64) moments by ``1 + i 2^-20``: never equal to an
    earlier call's, about ``1e-4`` off after a hundred calls and ``1e-3`` after a thousand
    (the timer's warming runs count); four small tensors per call."""

    def __init__(self, fn, moments):
        self.fn, self.moments = fn, moments

    def __call__(self, q, k, v):
        from kernelkit.features.favor import Moments

        s, m = 1.0 + next(_REFIT_CALLS) * 2.0**-20, self.moments
        moments = Moments(m.mean_x * s, m.second_x * s, m.mean_y * s, m.second_y * s)
        return self.fn(q, k, v, moments=moments)


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
    calls = {name: partial(wrap, fn) for name, fn in fns.items()}
    # no BLAS threads to wait out on a GPU: no settling pause (every call synchronises)
    return time_calls(calls, repeats, settle_s=SETTLE_S if device == "cpu" else 0.0)


#: calls whose peak extra memory is measured, with the SDPA call they are compared to
_MEMORY_CALLS = {
    "kernelkit FAVOR+": "SDPA",
    "kernelkit FAVOR# sderf": "SDPA",
    "kernelkit FAVOR+ causal": "SDPA causal",
    "kernelkit FAVOR# sderf causal": "SDPA causal",
}


def _status_bytes(field: str) -> float:
    with open("/proc/self/status") as f:  # Linux
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024.0
    raise OSError(f"no {field} in /proc/self/status")


def _peak_bytes(device) -> float:
    if str(device).startswith("cuda"):
        import torch

        return float(torch.cuda.max_memory_allocated())
    return _status_bytes("VmHWM")  # peak resident set


def _reset_peak(device) -> float:
    """Reset the peak to the memory in use now and return the latter (bytes), so that
    ``_peak_bytes(device) - _reset_peak(device)`` is what the code run in between added.

    CPU: the process's peak resident set ``VmHWM`` is reset to its current ``VmRSS``
    (``/proc/self/clear_refs``). Without the reset the baseline would be the peak so far,
    which exceeds the current RSS by whatever was freed before (e.g. the float32 draws of
    bfloat16 inputs) and would hide up to that much of the call's own memory."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return float(torch.cuda.memory_allocated())
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    return _status_bytes("VmRSS")


def _peak_extra_bytes(call, device) -> float:
    """Peak memory (bytes) that ``call()`` adds to what is in use before it (see
    :func:`_reset_peak`); the result of the call is alive at the peak reading."""
    base = _reset_peak(device)
    out = call()
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    peak = _peak_bytes(device)
    del out
    return peak - base


def _memory_child(name: str, L: int, device: str, seed: int, dtype: str = "float32") -> None:
    """In a fresh process: print the peak extra memory (bytes) of one forward call."""
    import torch

    torch.set_num_threads(_bench_threads() if device == "cpu" else torch.get_num_threads())
    fn = _calls(L, device, seed, set(), False, dtype)[name]
    q, k, v, _ = _inputs(L, device, seed, dtype)
    with torch.no_grad():
        fn(*(t[..., :256, :].contiguous() for t in (q, k, v)))  # warm-up at a small L
        extra = _peak_extra_bytes(lambda: fn(q, k, v), device)
    print(extra)


def peak_extra_memory(
    name: str, L: int, device: str = "cpu", seed: int = 0, dtype: str = "float32"
) -> float:
    """Peak extra memory (MiB) of one forward call of ``name`` (a key of the benchmark's
    calls) at length ``L``, measured in a fresh Python subprocess (module docstring)."""
    code = (
        "from kernelkit_experiments.bench.bench_attention import _memory_child; "
        f"_memory_child({name!r}, {int(L)}, {device!r}, {int(seed)}, {dtype!r})"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"memory probe of {name!r} failed:\n{res.stderr[-2000:]}")
    return float(res.stdout.strip().splitlines()[-1]) / 2**20


def _accuracy(q, k, v, seed, performer_ok):
    """Relative L2 error of the outputs against exact attention (bidirectional), and the
    check that performer-pytorch computes kernelkit's FAVOR+ estimator: with kernelkit's
    projection and its ``eps`` set to 0 the two outputs agree to rounding.

    Bidirectional output rows are independent, so the exact reference is formed for the
    first ``ACCURACY_ROWS`` queries only (against every key): its float64 ``(H, rows, L)``
    logits stay within ~0.5 GiB at L = 65536, where all ``L`` rows would need
    ``8 H L^2`` bytes (17 GiB at L = 16384)."""
    import torch

    from kernelkit.attention import draw_features, linear_attention
    from kernelkit.kernels import softmax_attention

    rows = min(q.shape[-2], ACCURACY_ROWS)
    with torch.no_grad():
        exact = softmax_attention(q[..., :rows, :].double(), k.double(), v.double())
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
                torch.linalg.vector_norm(o[..., :rows, :].double() - exact)
                / torch.linalg.vector_norm(exact)
            )
            for name, o in outs.items()
        }
        return errs, same


def memory_length(quick: bool, lengths) -> int | None:
    """The L of the memory probes: 16384 (``quick``: 2048), or None where that L is not
    among the timed ``lengths`` (``--lengths`` asks for those sizes only)."""
    L_mem = 2048 if quick else 16384
    return L_mem if L_mem in tuple(lengths) else None


def check_args(device=None, dtype="float32", lengths=None) -> None:
    """Raise ValueError with a clear message for an unknown dtype or device, a CUDA
    device without CUDA, or lengths that are not positive integers."""
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if lengths is not None:
        lengths = list(lengths)
        bad = [L for L in lengths if isinstance(L, bool) or int(L) != L or L < 1]
        if not lengths or bad:
            raise ValueError(f"lengths must be positive integers, got {lengths}")
    if device is not None:
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"unknown device {device!r}: {exc}") from None
        if dev.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {device!r}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"device {device!r} requested, but torch {torch.__version__} sees no CUDA "
                "device (torch.cuda.is_available() is False)"
            )


def _ratio_rows(times):
    """(quantity, numerator, denominator) for every ratio that can be formed."""
    # FAVOR+ bidirectional has no SDPA target but is a column of the user guide's table
    rows = [("SDPA / kernelkit FAVOR+", "SDPA", "kernelkit FAVOR+")]
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
    dtype: str = "float32",
) -> dict:
    """Run the benchmark, print its tables and return the numbers.

    Parameters
    ----------
    quick : bool
        L in :data:`QUICK_L` (seconds) instead of :data:`FULL_L`.
    device : str, optional
        ``"cpu"`` or ``"cuda"`` (ValueError where CUDA is missing); default ``"cuda"`` when
        available, else ``"cpu"``.
    lengths : sequence of int, optional
        Overrides the L set (positive integers); the peak memory is measured only where
        its L (:func:`memory_length`) is among them.
    max_call_s : float, optional
        Skip exact attention / the performer causal loop where one call would take longer
        (extrapolated); default 90 s (full), 5 s (quick).
    seed : int
        Seed of the inputs and of the random features.
    dtype : {"float32", "bfloat16", "float16"}
        Dtype of q, k, v for every call (kernelkit computes half-precision inputs in
        float32 and returns their dtype; SDPA runs in the inputs' dtype, on CUDA with its
        flash kernel).

    Returns
    -------
    dict with ``config``, ``timings`` (``{mode: {L: {call: {"min", "median"}}}}``, seconds),
    ``ratios`` (list of rows), ``targets`` (rows with a target: value, target, pass),
    ``skipped``, ``accuracy`` and ``all_pass``.
    """
    import importlib.util

    import torch

    check_args(device, dtype, lengths)
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
        "dtype": dtype,
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
        "card": torch.cuda.get_device_name(device) if device.startswith("cuda") else None,
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
        f"kernelkit bench attention: batch {B}, {H} heads, d={D}, M={M}, {dtype}, "
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
                q, k, v, grad = _inputs(L, device, seed, dtype)
                if mode == "forward" and L == lengths[0]:
                    accuracy, same_estimator = _accuracy(q, k, v, seed, performer_ok)
                fns = _calls(L, device, seed, skip, performer_ok, dtype)
                slowest = max(
                    (
                        timings[mode][prev_L].get(n, {}).get("min", 0.0) * (L / prev_L) ** 2
                        for n in fns
                        if n in _SLOW and prev_L
                    ),
                    default=0.0,
                )
                repeats = 1 if slowest > 10 else (3 if slowest > 1 or L >= 16384 or quick else 5)
                if device != "cpu" and slowest <= 0.1:
                    repeats = 10  # milliseconds a call: more rounds against launch jitter
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
                tgt = _target(quantity, mode, L)
                if tgt is not None:
                    op, thr, here = tgt
                    ok = meets(value, op, thr)
                    entry.update(target=f"{op} {thr:g}", met=ok)
                    if here:
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

    # ---- peak extra memory of the forward pass, each call in a fresh process
    L_mem = memory_length(quick, lengths)
    memory = {}
    if L_mem is None:
        print(
            f"\nPeak extra memory not measured: it is measured at L={2048 if quick else 16384}"
            f"{' (quick)' if quick else ''}, which is not among the lengths {list(lengths)}."
        )
    else:
        for name in ("SDPA", "SDPA causal", *_MEMORY_CALLS):
            memory[name] = peak_extra_memory(name, L_mem, device, seed, dtype)
        mem_rows = []
        for name, ref in _MEMORY_CALLS.items():
            value = memory[name] / max(memory[ref], 1e-9)
            op, thr, here = _target("kernelkit / SDPA peak extra memory", "forward", L_mem) or (
                "<=",
                2.0,
                False,
            )
            ok = meets(value, op, thr)
            entry = {
                "mode": "forward",
                "L": L_mem,
                "quantity": "kernelkit / SDPA peak extra memory",
                "numerator": name,
                "denominator": ref,
                "value": value,
                "target": f"{op} {thr:g}",
                "met": ok,
            }
            if here:
                entry["is_target"] = True
                targets.append(entry)
            ratio_rows.append(entry)
            status = (
                ("met" if ok else "NOT MET") if here else f"(report: {'meets' if ok else 'misses'})"
            )
            mem_rows.append(
                [name, f"{memory[name]:.1f}", ref, f"{memory[ref]:.1f}", f"{value:.2f}", status]
            )
        itemsize = torch.empty((), dtype=getattr(torch, dtype)).element_size()
        print(
            f"\nPeak extra memory of one forward call at L={L_mem} (MiB, fresh process each; "
            f"the (B, H, L, d) {dtype} output alone is "
            f"{B * H * L_mem * D * itemsize / 2**20:.0f} MiB):"
        )
        print(text_table(["call", "MiB", "vs", "MiB", "ratio", "status"], mem_rows))

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
            f"(bidirectional, one draw, the first {min(lengths[0], ACCURACY_ROWS)} query "
            "rows). performer-pytorch adds eps = 1e-4 to every "
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
        "memory_mib": memory,
        "accuracy": accuracy,
        "performer_eps0_vs_kernelkit": same_estimator,
        "all_pass": bool(targets) and n_met == len(targets),
    }
