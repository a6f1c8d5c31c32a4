"""Kernels for the low-rank bases of :mod:`kernelkit.distributions`.

A kernel is given by name with a lengthscale ``l`` (all are stationary, ``k(x, x) = 1``):

========================  ==========================================================
``"gaussian"``            ``exp(-|x - x'|^2 / (2 l^2))`` (library choice)
``"laplacian"``           ``exp(-|x - x'| / l)`` (alias ``"exponential"``)
``"matern32"``            ``(1 + sqrt(3) r / l) exp(-sqrt(3) r / l)``
``"matern52"``            ``(1 + sqrt(5) r / l + 5 r^2 / (3 l^2)) exp(-sqrt(5) r / l)``
``"cauchy"``              ``1 / (1 + |x - x'|^2 / l^2)``
========================  ==========================================================

or as a callable ``k(A, B) -> (len(A), len(B))`` array (positive semi-definite); an
optional ``k.diag(A) -> (len(A),)`` attribute avoids evaluating diagonal blocks. The
lengthscale is ignored for callables (scale the inputs inside the callable).

Every lengthscale in ``(0, inf)`` gives the kernel's value or its limit (0 or 1). Squared
distances are formed in float64 before they are divided by ``l^2``, so inputs whose
distances exceed about 1e154 overflow (kernel 0) and those below about 1e-154 underflow
(kernel 1) whatever the lengthscale: rescale such data first.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import validate_positive_float

__all__ = ["KERNEL_NAMES", "Kernel", "make_kernel"]

_ALIASES = {"exponential": "laplacian", "rbf": "gaussian", "matern12": "laplacian"}
_DIRECT_DIMS = 8  # up to this dimension, squared distances from explicit differences
KERNEL_NAMES = ("gaussian", "laplacian", "exponential", "matern32", "matern52", "cauchy")


def _scale(r: np.ndarray, a: float, ls: float, times: int) -> np.ndarray:
    """``a r / ls^times`` in place (``times`` 1 or 2): one product with the constant where
    it is a finite nonzero float, else division step by step (no ``ls^times``, no
    ``a / ls``): exact limits 0 and inf at extreme lengthscales, never NaN for finite
    ``r``."""
    p = ls if times == 1 else ls * ls  # a Python float: 0.0 or inf, never raises
    c = a / p if p > 0.0 else math.inf
    if 0.0 < abs(c) < math.inf:
        r *= c
        return r
    with np.errstate(over="ignore", under="ignore"):
        for _ in range(times):
            r /= ls
        r *= a
    return r


def _profile(name: str, r2: np.ndarray, ls: float) -> np.ndarray:
    """Kernel value from squared distances ``r2`` (modified in place and returned).

    ``r / l`` is formed as one product with a precomputed constant where that constant
    is a normal float, and by division otherwise (lengthscales below about 1e-154 or
    above about 1e154), so every lengthscale gives the kernel's value or its limit
    (0 or 1), never a ``ZeroDivisionError``, an ``OverflowError`` or NaN.
    """
    if name in ("gaussian", "cauchy"):
        _scale(r2, -0.5 if name == "gaussian" else 1.0, ls, 2)
        if name == "gaussian":
            return np.exp(r2, out=r2)
        r2 += 1.0
        return np.reciprocal(r2, out=r2)
    r = np.sqrt(r2, out=r2)
    a = {"laplacian": -1.0, "matern32": math.sqrt(3.0), "matern52": math.sqrt(5.0)}[name]
    _scale(r, a, ls, 1)
    if name == "laplacian":
        return np.exp(r, out=r)
    # beyond r = 1e3, exp(-r) is 0 in float64: clamping keeps the value and avoids inf * 0
    np.minimum(r, 1e3, out=r)
    if name == "matern32":
        out = np.exp(-r)
        r += 1.0
        out *= r
        return out
    out = np.exp(-r)
    poly = r * r
    poly *= 1.0 / 3.0
    poly += r
    poly += 1.0
    out *= poly
    return out


def _below(sq_norms: np.ndarray) -> bool:
    """Whether every squared norm is below 1e300: then ``|a|^2 + |b|^2`` and ``2 a.b``
    (at most ``|a|^2 + |b|^2``) stay finite, so the norms' form of the squared distance
    has no ``inf - inf``."""
    return sq_norms.size == 0 or bool(np.max(sq_norms) < 1e300)


class Kernel:
    """A kernel with cached squared norms, evaluated in column blocks.

    Parameters
    ----------
    kernel : str or callable
    lengthscale : float
    """

    def __init__(self, kernel, lengthscale: float = 1.0):
        if callable(kernel):
            self.name = None
            self.func = kernel
            self.lengthscale = 1.0
        elif isinstance(kernel, str):
            name = _ALIASES.get(kernel.lower(), kernel.lower())
            if name not in KERNEL_NAMES:
                raise ValueError(
                    f"kernel must be one of {KERNEL_NAMES} or a callable, got {kernel!r}."
                )
            self.name = name
            self.func = None
            self.lengthscale = validate_positive_float(lengthscale, "lengthscale")
        else:
            raise TypeError(f"kernel must be a string or a callable, got {type(kernel).__name__}.")

    @property
    def stationary(self) -> bool:
        return self.name is not None

    def diag(self, X: np.ndarray) -> np.ndarray:
        """``[k(x_i, x_i)]_i``, shape (n,)."""
        if self.name is not None:
            return np.ones(X.shape[0])
        if hasattr(self.func, "diag"):
            d = np.asarray(self.func.diag(X), dtype=np.float64).reshape(-1)
        else:  # diagonal of small diagonal blocks: O(n * 64) evaluations, no Python per-sample
            blocks = []
            for s in range(0, X.shape[0], 64):
                Kb = np.asarray(self.func(X[s : s + 64], X[s : s + 64]), dtype=np.float64)
                blocks.append(np.diagonal(Kb).copy())
            d = np.concatenate(blocks)
        if d.shape != (X.shape[0],) or not np.all(np.isfinite(d)):
            raise ValueError("the kernel callable returned a non-finite or misshaped diagonal.")
        return d

    def column(self, Xt: np.ndarray, x: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> np.ndarray:
        """``[k(x_i, x)]_i`` into ``out`` (n,), from the transposed data ``Xt`` (d, n).

        Contiguous, in-place passes (one per coordinate plus the profile): the column
        oracle of the pivoted Cholesky (named kernels only; ``tmp`` is scratch (n,)).
        """
        # squared distances that overflow are inf, the kernel there its limit 0: no
        # warning (as in __call__)
        with np.errstate(over="ignore"):
            np.subtract(Xt[0], x[0], out=out)
            np.square(out, out=out)
            for j in range(1, Xt.shape[0]):
                np.subtract(Xt[j], x[j], out=tmp)
                np.square(tmp, out=tmp)
                out += tmp
        res = _profile(self.name, out, self.lengthscale)
        if res is not out:
            out[:] = res
        return out

    def __call__(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """Kernel matrix ``[k(a_i, b_j)]``, shape (len(A), len(B)), float64.

        Up to dimension 8 the squared distances come from explicit differences. Above,
        from the norms' form ``|a|^2 + |b|^2 - 2 a.b`` (one product), taken about the
        mean of ``B``: a translation leaves every distance unchanged, and the form's
        cancellation error, about ``eps (|a|^2 + |b|^2)``, is then relative to the
        points' spread about the data instead of to their distance from the origin (data
        at 1e8 would otherwise lose every digit). Entries where that error would still
        be large relative to the distance (below ``1e-4 (|a|^2 + |b|^2)``: near pairs,
        or rows far from the mean, as with one far row of ``B`` or two far-apart
        clusters) are formed again from explicit differences.
        """
        if self.name is None:
            K = np.asarray(self.func(A, B), dtype=np.float64)
            if K.shape != (A.shape[0], B.shape[0]):
                raise ValueError(
                    f"the kernel callable returned shape {K.shape}, expected "
                    f"{(A.shape[0], B.shape[0])}."
                )
            return K
        # squared distances that overflow (points far from each other, e.g. queries far
        # outside the data) are inf, and the kernel there is its limit 0: no warning
        with np.errstate(over="ignore", invalid="ignore"):
            norms = A.shape[1] > _DIRECT_DIMS
            if norms:
                Ac, Bc = _about_mean_of(A, B)
                a2 = np.einsum("ij,ij->i", Ac, Ac)
                b2 = np.einsum("ij,ij->i", Bc, Bc)
            # the norms' form is inf - inf = NaN where a norm (or a.b) leaves float64:
            # there, too, the explicit differences
            if not norms or not (_below(a2) and _below(b2)):
                # exact differences: no cancellation near r = 0
                r2 = np.subtract.outer(A[:, 0], B[:, 0])  # (na, nb)
                r2 *= r2
                for j in range(1, A.shape[1]):
                    diff = np.subtract.outer(A[:, j], B[:, j])
                    diff *= diff
                    r2 += diff
            else:
                r2 = Ac @ Bc.T  # (na, nb)
                r2 *= -2.0
                r2 += a2[:, None]
                r2 += b2[None, :]
                np.maximum(r2, 0.0, out=r2)
                # (from the rows as given: the centred ones carry the centring's rounding)
                _exact_where_cancelled(r2, A, B, a2, b2)
        return _profile(self.name, r2, self.lengthscale)


#: entries of the norms' form below this fraction of ``|a|^2 + |b|^2`` are formed again
#: from explicit differences: elsewhere its relative error is at most about eps / it
_CANCEL_FRACTION = 1e-4
#: pairs per chunk of that recomputation (a (chunk, d) temporary)
_CANCEL_CHUNK = 1 << 14


def _exact_where_cancelled(r2, A, B, a2, b2) -> None:
    """Squared distances ``r2`` (na, nb) of the norms' form, in place: the entries below
    ``_CANCEL_FRACTION (|a|^2 + |b|^2)``, where the form's cancellation error (about
    ``eps (|a|^2 + |b|^2)``) would be large relative to the distance, from explicit
    differences (near pairs, and rows far from the centring point: one far row of ``B``
    or two far-apart clusters move the mean of ``B`` away from the others)."""
    i, j = np.nonzero(r2 < _CANCEL_FRACTION * (a2[:, None] + b2[None, :]))
    for lo in range(0, i.size, _CANCEL_CHUNK):
        ii, jj = i[lo : lo + _CANCEL_CHUNK], j[lo : lo + _CANCEL_CHUNK]
        diff = A[ii] - B[jj]  # (chunk, d)
        r2[ii, jj] = np.einsum("ij,ij->i", diff, diff)


def _about_mean_of(A: np.ndarray, B: np.ndarray):
    """``(A - c, B - c)`` with ``c`` the mean row of ``B`` (when it and both differences
    are finite; else ``A``, ``B`` unchanged, and the caller's overflow path applies)."""
    if B.shape[0] == 0:
        return A, B
    c = B.mean(axis=0)  # (d,)
    if not np.all(np.isfinite(c)):
        return A, B
    Ac, Bc = A - c, B - c
    if not (np.all(np.isfinite(Ac)) and np.all(np.isfinite(Bc))):
        return A, B
    return Ac, Bc


def make_kernel(kernel, lengthscale=1.0) -> Kernel:
    """Return a :class:`Kernel` (``kernel`` may already be one)."""
    if isinstance(kernel, Kernel):
        return kernel
    return Kernel(kernel, lengthscale)
