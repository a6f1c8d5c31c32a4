"""Random features for the softmax and Gaussian kernels: trig, positive (FAVOR+),
hyperbolic, GERF (FAVOR++) and the dense-exponential family SADERF, ADERF, SDERF
(FAVOR#).

Reference: Likhosherstov et al., "FAVOR#: Sharp Attention Kernel Approximations via
New Classes of Positive Random Features" (equation numbers below refer to it), with the
errata listed in docs/derivations/favor_sharp.md:

* TrigRF uses ``cos(w.y + theta)`` on the y side (eq. 7 prints ``-w.y``);
* GERF uses ``-|x|^2/2`` (eq. 10-11 print ``C|x|^2/2`` with ``C = -1/2``);
* the ADERF scalar parameter uses ``phi = 2 tr(Sigma)/d + 2 mu3`` (Thm 4.2).

Every map is written for ``K^(0)(x, y) = exp(x.y)``; the Gaussian kernel
``K^(-1/2)`` multiplies features by ``exp(-|x|^2/2)`` (Sec. 2.1), which leaves the fitted
parameters unchanged.

All positive maps here are one mechanism, a *diagonal DERF on linearly transformed
inputs* (Thm 4.1 with ``A = diag(a)``; :mod:`kernelkit.features.favor` holds the fits and
the affine log features, shared with :mod:`kernelkit.attention`): PositiveRF is
``a = 0, B = I``; HyperbolicRF the same on the antithetic projections ``[W; -W]``; GERF
``a = A 1, B = I``; SADERF ``B1 = diag(psi), B2 = diag(psi)^-1``; ADERF ``B1 = B~1,
B2 = B~2``; SDERF ``B1 = B2 = Q3^T`` with per-coordinate ``a_l``.
"""

from __future__ import annotations

import math
import numbers
from numbers import Real
from typing import ClassVar

import numpy as np
from sklearn.utils._param_validation import Interval

from .._backend import (
    check_all_finite,
    device,
    is_numpy_namespace,
    is_torch_namespace,
    to_backend,
    to_numpy,
)
from .._backend.exponential import exp2_is_faster
from .._backend.parallel import check_n_jobs, effective_n_jobs, map_row_blocks
from .._backend.params import N_JOBS, NON_NEGATIVE
from ._base import (
    _detach,
    _matmul_augmented,
    as_real_dtype,
    log1mexp,
    sq_norms,
    warn_feature_overflow,
)
from ._projection import ProjectionFeatureMap, SecondMomentVariance
from ._trig import trig_features, use_half
from .favor import (
    DEFAULT_EPS,
    DERFParameters,
    a_star,
    derf_log_weights,
    fit_derf,
    moments,
    moments_are_threaded,
)

__all__ = ["ADERF", "GERF", "SADERF", "SDERF", "HyperbolicRF", "PositiveRF", "TrigRF", "a_star"]


class _ThreadedMap(ProjectionFeatureMap):
    """Projection maps with a threaded NumPy path: adds ``n_jobs`` (scikit-learn's rule)."""

    fit_reads = "shape"

    _parameter_constraints: ClassVar[dict] = {
        **ProjectionFeatureMap._parameter_constraints,
        "n_jobs": N_JOBS,
    }

    def __init__(
        self,
        n_features: int = 256,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        sampler: str = "iid",
        random_state=None,
        n_jobs=None,
    ):
        super().__init__(n_features, kernel, lengthscale, sampler, random_state)
        self.n_jobs = n_jobs

    def _check_params(self):
        super()._check_params()
        check_n_jobs(self.n_jobs)


# ============================================================== trig
class TrigRF(SecondMomentVariance, _ThreadedMap):
    """Trigonometric random features (FAVOR# eq. 5-7, corrected).

    ``f1(w, x) = sqrt(2) exp(|x|^2/2) cos(w.x + theta)``, ``f2`` the same in ``y``
    (erratum a: eq. 7 prints ``cos(-w.y + theta)``, which estimates ``exp(-x.y)``),
    ``w ~ N(0, I)``, ``theta ~ U[0, 2 pi]``. For the Gaussian kernel this is
    exactly random Fourier features, ``sqrt(2/M) cos(X W^T + theta)``. Not positive.
    Accepts sparse input.

    Variance (derived, docs/derivations/favor_sharp.md):
    ``Var f1 f2 = e^{|x|^2+|y|^2}(1 + e^{-2|x-y|^2}/2) - e^{2 x.y}`` for the softmax kernel.

    Parameters
    ----------
    n_features, kernel, lengthscale, sampler, random_state
        See :class:`~kernelkit.features.PositiveRF`.
    n_jobs : int, optional
        Threads of the NumPy path (None: all available CPUs, not scikit-learn's one job).

    Attributes
    ----------
    projection_ : ndarray (M, d)
    offset_ : ndarray (M,), the phases ``theta``
    """

    accepts_sparse = True

    def _fit_parameters(self, X, Y, rng):
        self.offset_ = rng.uniform(0.0, 2.0 * np.pi, size=self.n_features)  # (M,)

    def _build(self):
        super()._build()
        # [W^T; theta] for X augmented with a ones column (theta folded into the matmul),
        # and its half (exact) for the tan form of cos
        W_aug = np.vstack([self.projection_.T, self.offset_[None, :]])  # (d + 1, M)
        self._consts = {"W_aug": W_aug, "W_aug_half": 0.5 * W_aug}

    def _cos_numpy(self, X, scale=None):
        """NumPy ``sqrt(2/M) cos(X W^T + theta) * scale[:, None]`` (threaded row blocks)."""
        half = use_half(X.dtype)
        W_aug = self._param("W_aug_half" if half else "W_aug", np, X)  # (d + 1, M)
        norm = math.sqrt(2.0 / self.n_features)
        return trig_features(X, W_aug, 0, norm, scale, n_jobs=self.n_jobs, half=half)

    def _log_row(self, X, xp):
        coef = 0.5 + self.alpha  # log f carries coef * |x|^2
        if coef == 0.0:
            return None
        return coef * sq_norms(xp, X)

    def _features(self, X, xp, side):
        row = self._log_row(X, xp)
        if not is_numpy_namespace(xp):
            base, _ = self._scaled_features(X, xp, side)
            if row is None:
                return base
            # (a half-precision input arrives widened to float32: FeatureMap._features_of)
            on_host = X.device.type == "cpu"  # (on accelerators a test waits for the device)
            scale = xp.exp(row)  # (n,)
            if on_host:
                self._check_scale_overflow(scale, side, xp)
            return base * scale[:, None]
        scale = None
        if row is not None:
            with np.errstate(over="ignore"):
                scale = np.exp(row)  # (n,)
            self._check_scale_overflow(scale, side, xp)
        return self._cos_numpy(X, scale)

    def _check_scale_overflow(self, scale, side, xp):
        """Warn where a row's scale ``exp((1/2 + alpha) |x|^2)`` (n,) is inf: its features
        are +-inf (or NaN where the cosine rounds to 0), though the kernel may be finite."""
        if not bool(xp.all(xp.isfinite(_detach(scale)))):
            warn_feature_overflow(
                side,
                scale.dtype,
                math.log(float(xp.finfo(scale.dtype).max)),
                "use approx_kernel, which combines the row scales in log space, or scale "
                "the inputs down (or raise the lengthscale).",
            )

    def _scaled_features(self, X, xp, side):
        if is_numpy_namespace(xp):
            base = self._cos_numpy(X)  # (n, M)
        else:
            W_aug = self._param("W_aug", xp, X)  # (d + 1, M): [W^T; theta]
            ones = xp.ones((X.shape[0], 1), dtype=X.dtype, device=device(X))
            base = xp.cos(xp.concat([X, ones], axis=1) @ W_aug) * math.sqrt(2.0 / self.n_features)
        row = self._log_row(X, xp)
        if row is None:
            row = xp.zeros(X.shape[0], dtype=X.dtype, device=device(X))
        return base, row

    def _log_second_moment(self, X, Y, xp):
        nx = xp.sum(X * X, axis=1)[:, None]  # (n, 1)
        ny = xp.sum(Y * Y, axis=1)[None, :]  # (1, m)
        dist2 = xp.clip(nx + ny - 2.0 * (X @ xp.matrix_transpose(Y)), min=0.0)
        out = (nx + ny) + xp.log1p(0.5 * xp.exp(-2.0 * dist2))
        return out + 2.0 * self.alpha * (nx + ny)


# ============================================================== positive (DERF) maps
def _stabilised_exp(xp, logits, row_term):
    """``exp(logits + row_term[:, None])`` as ``(base, log_scale)``, base row max 1.

    logits : (n, D), row_term : (n,). Works in place for NumPy.
    """
    if logits.shape[0] == 0:
        return logits, row_term
    if is_numpy_namespace(xp):
        row_max = logits.max(axis=1)  # (n,)
        logits -= row_max[:, None]
        np.exp(logits, out=logits)
        return logits, row_max + row_term
    row_max = xp.max(logits, axis=1)
    if hasattr(row_max, "detach"):
        row_max = row_max.detach()
    return xp.exp(logits - row_max[:, None]), row_max + row_term


def _diagonal_of(B):
    """The diagonal of ``B`` (d,) when ``B`` is a diagonal matrix, else None."""
    diag = np.diagonal(B)
    return diag.copy() if np.array_equal(B, np.diag(diag)) else None


class _DiagonalDERF(SecondMomentVariance, _ThreadedMap):
    """Positive dense-exponential features with diagonal ``A`` on transformed inputs.

    Fitted attributes (NumPy): ``A_`` (d,) diagonal of ``A``; ``B_x_``, ``B_y_`` (d, d) input
    transforms (None for the identity). Subclasses fill them in ``_fit_parameters``; the
    features are :func:`kernelkit.features.favor.derf_log_weights` of them. Tests and power
    users may edit them and call ``_build()`` (SDERF keeps turning its projections by the
    edited ``B_x_``, so the features move continuously with the edit).
    """

    _unit_scaled_rows = True  # detached stabiliser (FeatureMap.transform_scaled)

    positive = True
    #: name of the fit in :func:`kernelkit.features.favor.fit_derf`
    _derf = "positive"
    #: whether the fit needs full second-moment matrices (ADERF, SDERF)
    _full_moments = True
    #: whether the projections enter turned by ``B_x`` (SDERF; :class:`DERFParameters`)
    _rotate_projections = False
    fit_reads = "moments"  # only through _fit_statistics

    def _checks_finite_in_fit(self):
        return self._derf != "positive"  # the moments' sums see every entry

    def _draw_beside_fit(self, X, Y):
        # large X, Y: the threaded moments (O((n + m) d^2)) first, then the O(M d) draw on
        # a pool thread beside the serial O(d^3) fit
        return (
            self._derf != "positive"
            and effective_n_jobs(self.n_jobs) > 1
            and moments_are_threaded(X)
            and moments_are_threaded(Y)
        )

    def _fit_statistics(self, X, Y):
        all_rows = self.__dict__.get("_all_rows_moments")
        if all_rows is not None:  # fitting a Dask array or a sequence of blocks on its
            return all_rows()  # first rows: the moments of all its rows
        with np.errstate(over="ignore", invalid="ignore"):  # NaN / inf: checked below
            mom = moments(X, Y, full=self._full_moments, n_jobs=self.n_jobs)
        _check_finite_moments(mom, X, Y)
        return mom

    def _fit_parameters(self, X, Y, rng, stats=None):
        if self._derf == "positive":
            params = fit_derf("positive", None, dim=X.shape[1])
        else:
            mom = self._fit_statistics(X, Y) if stats is None else stats
            params = fit_derf(self._derf, mom, eps=getattr(self, "eps", DEFAULT_EPS))
        self._set_parameters(params)

    def _set_parameters(self, params: DERFParameters):
        self.A_ = np.asarray(params.a, dtype=np.float64).reshape(-1)  # (d,)

        def full(B):
            if B is None:
                return None
            B = np.asarray(B, dtype=np.float64)
            return np.diag(B) if B.ndim == 1 else B

        self.B_x_ = full(params.B_x)
        self.B_y_ = self.B_x_ if params.symmetric else full(params.B_y)

    def _projections(self):
        """The projections the features use, (M', d)."""
        return self.projection_

    def _parameters(self) -> DERFParameters:
        """:class:`DERFParameters` of the fitted attributes (diagonal ``B`` as a vector)."""

        def compact(B):
            # (B, whether |B x| = |x|): None and rotations as they are, diagonal matrices
            # as their diagonal (one pass over the (d, d) matrix each)
            if B is None:
                return None, True
            if _is_orthogonal(B):
                return B, True
            diag = _diagonal_of(B)
            return (B if diag is None else diag), False

        bx, ox = compact(self.B_x_)
        by, oy = (bx, ox) if self.B_y_ is self.B_x_ else compact(self.B_y_)
        a = np.asarray(self.A_, dtype=np.float64)
        # SDERF turns its projections by B_x after any edit too (a copy for B_y_, a B_x_
        # orthogonal only to rounding): the features stay continuous in the attributes
        rotate = self._rotate_projections and bx is not None
        return DERFParameters(a, bx, by, orthogonal=ox and oy, rotate_projections=rotate)

    def _build(self):
        super()._build()
        params = self._parameters()
        W = self._projections()  # (M', d)
        M, d = W.shape
        # the x side's W_aug = [W_x; const; 1]: derf_log_weights writes W_x into its head
        # where W_x is one product (no fresh (d, M') array and copy)
        aug_x = np.empty((d + 2, M))
        head_x = aug_x[:d]
        if params.B_x is None and params.B_y is None and not np.any(params.a):
            # FAVOR+ (a = 0, B = I): what derf_log_weights returns, bit for bit (its
            # sqrt(1 - 4a) is exactly 1 and its const exactly -log(M')/2), without its
            # (d, M') temporaries
            W_x = W_y = W.T
            const = np.full(W.shape[0], -0.5 * math.log(W.shape[0]))
        else:
            W_x, W_y, const = derf_log_weights(params, W, out=head_x)  # (d, M'), (d, M'), (M',)
        consts = {"const": const}
        for side, Wk, B in (("x", W_x, params.B_x), ("y", W_y, params.B_y)):
            if side == "y" and Wk is W_x:  # symmetric parameters: the x-side arrays serve
                for key in ("W_T_", "W_aug_", "W_aug2_"):
                    consts[key + "y"] = consts[key + "x"]
            else:
                # W_aug = [W_eff; const; 1] for X augmented with [1, row term] (folded into
                # the matmul: no pass over the (n, M) output for either)
                W_aug = aug_x if side == "x" else np.empty((d + 2, M))
                if Wk is not head_x:
                    W_aug[:d] = Wk
                W_aug[d] = const
                W_aug[d + 1] = 1.0
                consts["W_T_" + side] = W_aug[:d]  # (d, M), a C-contiguous view
                consts["W_aug_" + side] = W_aug
                # exp(z) = exp2(z log2(e)): float64 exp2 is the cheaper SIMD kernel
                consts["W_aug2_" + side] = W_aug * (1.0 / math.log(2.0))
            if B is not None and not params.orthogonal:
                consts["B_" + side] = np.ascontiguousarray(B.T if B.ndim == 2 else B)
            # log-feature bound |x| max_m |W_x[:, m]| + max_m const_m (+ row term): where it
            # cannot reach the largest finite exponent, transform skips the overflow check
            consts["bound_" + side] = (
                float(np.sqrt(np.max(np.einsum("dm,dm->m", Wk, Wk)))),
                float(np.max(const)),
            )
        self._consts = consts

    def _transformed_sq_norm(self, X, xp, side):
        # |B x|^2 (n,), equal to |x|^2 when B is orthogonal or None
        key = "B_" + side
        if key in self._consts:
            B = self._param(key, xp, X)
            X = X * B if B.ndim == 1 else X @ B
        if isinstance(X, np.ndarray):
            return np.einsum("ij,ij->i", X, X)  # one pass, no (n, d) temporary
        return sq_norms(xp, X)

    def _row_term(self, X, xp, side):
        # -|x'|^2/2 + alpha |x|^2   (n,)
        if "B_" + side not in self._consts:
            if isinstance(X, np.ndarray):
                row = np.einsum("ij,ij->i", X, X)
                row *= self.alpha - 0.5
                return row
            return (self.alpha - 0.5) * sq_norms(xp, X)
        row = -0.5 * self._transformed_sq_norm(X, xp, side)
        if self.alpha != 0.0:
            row = row + self.alpha * sq_norms(xp, X)
        return row

    def _logits(self, X, xp, side):
        W_T = self._param("W_T_" + side, xp, X)  # (d, M)
        const = self._param("const", xp, X)  # (M,)
        logits = X @ W_T  # (n, M)
        if is_numpy_namespace(xp):
            logits = np.asarray(logits)
            logits += const
            return logits
        return logits + const

    def _scaled_features(self, X, xp, side):
        return _stabilised_exp(xp, self._logits(X, xp, side), self._row_term(X, xp, side))

    def _scaled_pair(self, X, Y, xp):
        # Joint stabilisation for approx_kernel. A per-feature constant c_m subtracted from
        # the x-side log features and added to the y side cancels in every product
        # f1(w_m, x) f2(w_m, y). With c_m = (max_i lx_im - max_j ly_jm) / 2 both sides peak
        # at the same height for every feature, so the row-normalised bases do not both
        # underflow where their product carries the estimate (e.g. |x| >> |y| with fitted
        # A << 0, where exp(lx - max lx) * exp(ly - max ly) ~ e^-800 even in float64).
        rx, ry = self._row_term(X, xp, "x"), self._row_term(Y, xp, "y")  # (n,), (m,)
        lx, ly = self._logits(X, xp, "x"), self._logits(Y, xp, "y")  # (n, M), (m, M)
        if lx.shape[0] == 0 or ly.shape[0] == 0:
            return (*_stabilised_exp(xp, lx, rx), *_stabilised_exp(xp, ly, ry))
        if is_numpy_namespace(xp):
            lx += rx[:, None]
            ly += ry[:, None]
            c = 0.5 * (lx.max(axis=0) - ly.max(axis=0))  # (M,)
            lx -= c
            ly += c
        else:
            lx, ly = lx + rx[:, None], ly + ry[:, None]
            c = 0.5 * (xp.max(lx, axis=0) - xp.max(ly, axis=0))
            c = c.detach() if hasattr(c, "detach") else c
            lx, ly = lx - c, ly + c
        return (
            *_stabilised_exp(xp, lx, xp.zeros_like(rx)),
            *_stabilised_exp(xp, ly, xp.zeros_like(ry)),
        )

    def _features(self, X, xp, side):
        W_aug = self._param("W_aug_" + side, xp, X)  # (d + 2, M): [W^T; const; 1]
        if not is_numpy_namespace(xp):
            # [X, 1, row] @ [W^T; const; 1]: one (n, M) temporary fewer per folded term
            ones = xp.ones((X.shape[0], 1), dtype=X.dtype, device=device(X))
            row = self._row_term(X, xp, side)[:, None]  # (n, 1)
            Xa = xp.concat([X, ones, row], axis=1)  # (n, d + 2)
            if not is_torch_namespace(xp):
                return xp.exp(Xa @ W_aug)
            # torch: in place on the fresh product (a second (n, M) allocation costs as
            # much as the product's page faults), with exp2 and log2(e) folded into the
            # weights where ATen's exp2 is the faster kernel (the same values up to
            # rounding; autograd records both in-place exponentials)
            if exp2_is_faster(X):
                out = (Xa @ self._param("W_aug2_" + side, xp, X)).exp2_()
            else:
                out = (Xa @ W_aug).exp_()
            if X.device.type == "cpu" and X.shape[0]:  # (a host sync elsewhere)
                self._check_torch_overflow(X, xp, row[:, 0], out, side)
            return out
        # NumPy: exp([X, 1, row] @ [W^T; const; 1]) per row block, in threads: one matmul
        # and one in-place exp per block, nothing else touches the (n, M) output. float64
        # with a SIMD exp2: exp2([X, 1, row] @ ([W^T; const; 1] log2(e))), the same values
        # up to rounding (~1e-15 relative) and ~15% less time in the exponential
        from ._trig import simd_f64

        exp = np.exp
        if X.dtype == np.float64 and simd_f64("exp2"):
            W_aug, exp = self._param("W_aug2_" + side, xp, X), np.exp2
        self._row_term(X[:1], xp, side)  # puts the row-term constants in the cache
        (n, d), M = X.shape, W_aug.shape[1]
        out = np.empty((n, M), dtype=X.dtype)
        dense = isinstance(X, np.ndarray)
        wmax, cmax = self._consts["bound_" + side]
        limit = math.log(np.finfo(X.dtype).max)
        plain_row = "B_" + side not in self._consts  # alpha is 0 or -1/2: never 1/2
        overflow = []

        def block(lo, hi):
            o = out[lo:hi]
            Xb = X[lo:hi]
            row = self._row_term(Xb, xp, side)  # (hi - lo,), per block: X B^T is threaded too
            if dense:
                Xa = np.empty((hi - lo, d + 2), dtype=X.dtype)  # [X, 1, row]
                Xa[:, :d] = Xb
                Xa[:, d] = 1.0
                Xa[:, d + 1] = row
                np.matmul(Xa, W_aug, out=o)  # X W^T + const + row
            else:
                _matmul_augmented(Xb, (1.0, row), W_aug, o)
            if plain_row:  # row = (alpha - 1/2) |x|^2: |x|^2 without another pass
                sq = row / (self.alpha - 0.5)
            elif dense:
                sq = np.einsum("ij,ij->i", Xb, Xb)
            else:
                sq = np.asarray(Xb.multiply(Xb).sum(axis=1)).ravel()
            with np.errstate(over="ignore"):
                exp(o, out=o)
            # (hi - lo,) bound on the block's log-features; a full check only past it. A
            # row whose squared norm overflows makes it inf - inf = NaN: not within the
            # limit either (other rows of the block may overflow)
            with np.errstate(invalid="ignore"):
                bound = np.max(np.sqrt(sq) * wmax + cmax + row)
            if not bound <= limit and not np.all(np.isfinite(o)):
                overflow.append(lo)

        # 4 MiB output blocks (512 float64 rows of 1024 features): fewer, larger matmuls
        # (each one packs all of W) measured faster than L2-sized blocks on 2 threads
        rows = max(64, (1 << 22) // (M * out.itemsize))
        map_row_blocks(block, n, M, out.itemsize, rows=rows, n_jobs=self.n_jobs)
        if overflow:
            self._warn_overflow(side, X.dtype, limit)
        return out

    def _check_torch_overflow(self, X, xp, row, out, side):
        # as the NumPy path: the (n,) bound |x| max_m |W_x[:, m]| + max_m const_m + row on
        # the log features, and the full check of the (n, M) output only past it
        import torch

        wmax, cmax = self._consts["bound_" + side]
        limit = math.log(torch.finfo(X.dtype).max)
        X, row = X.detach(), row.detach()  # a check: no graph, no float() of a grad tensor
        sq = sq_norms(xp, X)  # (n,)
        # NaN (inf - inf for a row whose squared norm overflows) is not within the limit
        bound = float((sq.sqrt() * wmax + cmax + row).max())
        if not bound <= limit and not bool(torch.isfinite(out).all()):
            self._warn_overflow(side, X.dtype, limit)

    @staticmethod
    def _warn_overflow(side, dtype, limit):
        warn_feature_overflow(
            side,
            dtype,
            limit,
            f"use log_transform{'' if side == 'x' else '_y'}, or approx_kernel, which works "
            "in log space, or scale the inputs down.",
        )

    def log_transform(self, X):
        """Logarithm of the x-side features; never overflows.

        Parameters
        ----------
        X : array-like, shape (n, d)

        Returns
        -------
        array, shape (n, output_dim)
            The floating dtype of ``X`` (float64 for an integer ``X``).
        """
        X, xp, dtype = self._check_X_half_widened(X, "X")
        out = self._logits(X, xp, "x") + self._row_term(X, xp, "x")[:, None]
        return as_real_dtype(xp, out, dtype)

    def log_transform_y(self, Y):
        """Logarithm of the y-side features.

        Parameters
        ----------
        Y : array-like, shape (m, d)

        Returns
        -------
        array, shape (m, output_dim)
            The floating dtype of ``Y`` (float64 for an integer ``Y``).
        """
        Y, xp, dtype = self._check_X_half_widened(Y, "Y")
        out = self._logits(Y, xp, "y") + self._row_term(Y, xp, "y")[:, None]
        return as_real_dtype(xp, out, dtype)

    # ----------------------------------------------------------- variance / objective
    def _transformed(self, X, xp, side):
        B = self.B_x_ if side == "x" else self.B_y_
        if B is None:
            return X
        return X @ to_backend(np.ascontiguousarray(B.T), xp, X)

    def _log_second_moment(self, X, Y, xp):
        # FAVOR# eq. (15) with diagonal A, transformed inputs (docs/derivations/favor_sharp.md):
        # log m2 = sum_l [log(1-4a_l) - log(1-8a_l)/2] + 2 sum_l w_l (x'_l + y'_l)^2
        #          - |x'|^2 - |y'|^2 + 2 alpha (|x|^2 + |y|^2),  w_l = (1-4a_l)/(1-8a_l)
        a = np.asarray(self.A_, dtype=np.float64)
        c0 = float(np.sum(np.log1p(-4.0 * a) - 0.5 * np.log1p(-8.0 * a)))
        w = to_backend((1.0 - 4.0 * a) / (1.0 - 8.0 * a), xp, X)  # (d,)
        Xp, Yp = self._transformed(X, xp, "x"), self._transformed(Y, xp, "y")
        qx = xp.sum(w * Xp * Xp, axis=1)[:, None]  # (n, 1)
        qy = xp.sum(w * Yp * Yp, axis=1)[None, :]  # (1, m)
        cross = (Xp * w) @ xp.matrix_transpose(Yp)  # (n, m)
        out = c0 + 2.0 * (qx + qy + 2.0 * cross)
        out = out - xp.sum(Xp * Xp, axis=1)[:, None] - xp.sum(Yp * Yp, axis=1)[None, :]
        if self.alpha != 0.0:
            out = out + 2.0 * self.alpha * (
                xp.sum(X * X, axis=1)[:, None] + xp.sum(Y * Y, axis=1)[None, :]
            )
        return out

    def log_objective(self, X, Y=None):
        """FAVOR# eq. (14): mean over pairs of the log second moment, in O((n+m) d^2).

        For the fitted ADERF / SDERF this equals the optimum (16) / (17).

        Parameters
        ----------
        X : array-like, shape (n, d)
        Y : array-like, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        float
            Evaluated in float64.
        """
        X, Y, _, _ = self._check_pair_half_widened(X, Y)
        X, Y = to_numpy(self._densify(X), np.float64), to_numpy(self._densify(Y), np.float64)
        a = np.asarray(self.A_, dtype=np.float64)
        c0 = float(np.sum(np.log1p(-4.0 * a) - 0.5 * np.log1p(-8.0 * a)))
        w = (1.0 - 4.0 * a) / (1.0 - 8.0 * a)
        Xp = X if self.B_x_ is None else X @ self.B_x_.T
        Yp = Y if self.B_y_ is None else Y @ self.B_y_.T
        mean_pair = (
            (w * Xp * Xp).sum(1).mean()
            + (w * Yp * Yp).sum(1).mean()
            + 2.0 * (w * Xp.mean(0) * Yp.mean(0)).sum()
        )
        out = c0 + 2.0 * mean_pair - (Xp * Xp).sum(1).mean() - (Yp * Yp).sum(1).mean()
        out += 2.0 * self.alpha * ((X * X).sum(1).mean() + (Y * Y).sum(1).mean())
        return float(out)


def _check_finite_moments(mom, X, Y):
    """NaN / inf in ``X`` or ``Y`` reach the moments' sums (an entry ``v`` adds ``v^2`` to
    a diagonal second moment): check the sums, and only then the data, for the message."""
    sx, sy = mom.diagonals()
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.sum(sx) + np.sum(sy) + np.sum(mom.mean_x) + np.sum(mom.mean_y)
    if np.isfinite(total):
        return
    check_all_finite(X, "X")
    check_all_finite(Y, "Y")
    raise ValueError(
        "The second moments of X and Y overflow float64 (entries of magnitude up to "
        f"{max(np.abs(X).max(), np.abs(Y).max()):.3g} after dividing by the lengthscale): "
        "rescale the data or increase lengthscale."
    )


def _is_orthogonal(B):
    B = np.asarray(B)
    if B.ndim != 2 or B.shape[0] != B.shape[1]:
        return False
    # B B^T = I to rounding: a rotation from an eigendecomposition errs by ~d eps. Not
    # np.allclose's rtol of 1e-5, which took B = diag(psi) with psi^2 = 1 + 9e-6 (SADERF of
    # keys 1e-5 larger than the queries) for a rotation: the features dropped B's
    # (psi^2 - 1) |x|^2 / 2 from their row term, a bias, and jumped at that threshold
    d = B.shape[0]
    tol = max(1e-12, 8.0 * d * np.finfo(np.float64).eps)
    return bool(np.all(np.abs(B @ B.T - np.eye(d)) <= tol))


#: smallest ``GERF(A=...)``: ``1 - 8A`` and the features' ``A |w|^2`` stay in float64
_MIN_A = -1e300


def _sum_sq(X, Y, xp):
    """``(|x|^2 (n, 1), |y|^2 (1, m), |x+y|^2 (n, m))``."""
    nx = sq_norms(xp, X)[:, None]
    ny = sq_norms(xp, Y)[None, :]
    return nx, ny, nx + ny + 2.0 * (X @ xp.matrix_transpose(Y))


class _VarianceFromRelative:
    """``variance`` as ``K^2`` times the map's closed-form relative variance
    (``_log_relative_variance`` from ``|x + y|^2``), in log space: exactly 0 where that is
    ``-inf`` (``y = -x`` for FAVOR+ and the antithetic pair)."""

    def _variance(self, X, Y, xp):
        log_var = 2.0 * self._log_kernel(X, Y, xp) + self._log_relative_variance(X, Y, xp)
        if is_numpy_namespace(xp):
            with np.errstate(over="ignore"):  # inf is the answer beyond the dtype's range
                return np.exp(log_var)
        return xp.exp(log_var)


class PositiveRF(_VarianceFromRelative, _DiagonalDERF):
    """Positive random features, FAVOR+ (FAVOR# eq. 8-9).

    ``f1 = f2 = exp(w.x - |x|^2/2)``, ``w ~ N(0, I)``; GERF with ``A = 0``. Accepts sparse
    input. Variance: ``Var = exp(2|x+y|^2 - |x|^2 - |y|^2) - e^{2x.y}`` per feature.

    Parameters
    ----------
    n_features : int, default=256
        Number of random projections ``M`` (the output dimension).
    kernel : {"softmax", "gaussian"}, default="softmax"
        ``"softmax"``: ``exp(x^T y / l^2)``; ``"gaussian"``: ``exp(-|x-y|^2 / (2 l^2))``.
    lengthscale : float, default=1.0
        ``l`` above; inputs are divided by it.
    sampler : {"iid", "orthogonal", "sorf", "hadamard", "halton"}, default="iid"
        How the projections are drawn (:func:`~kernelkit.features.draw_projection`).
    random_state : None, int or numpy.random.Generator
    n_jobs : int, optional
        Threads of the NumPy path (None: all available CPUs, not scikit-learn's one job).

    Attributes
    ----------
    projection_ : ndarray (M, d)
    A_ : ndarray (d,), zeros
    """

    accepts_sparse = True

    def _log_relative_variance(self, X, Y, xp):
        # m2 / K^2 = e^{z2} (z2 = |x+y|^2, any alpha: the kernel's row factors cancel), so
        # log(Var / K^2) = log(expm1(z2)) - log M = z2 + log(1 - e^{-z2}) - log M, from z2
        # directly: -inf (zero variance, zero gradient) exactly at y = -x, where the
        # difference of the two logs was rounding noise for the Gaussian kernel
        z2 = xp.clip(_sum_sq(X, Y, xp)[2], min=0.0)
        return z2 + log1mexp(xp, z2) - math.log(self.n_features)


class HyperbolicRF(_VarianceFromRelative, _DiagonalDERF):
    """Hyperbolic (antithetic positive) random features.

    ``f(w, x) = exp(-|x|^2/2) [exp(w.x), exp(-w.x)] / sqrt(2)``, so that
    ``E f1 f2 = E[cosh(w.(x+y))] e^{-(|x|^2+|y|^2)/2} = exp(x.y)``: FAVOR+ on the
    antithetic projections ``[W; -W]``. Positive; output dimension ``2 M`` for
    ``M = n_features`` projections. Accepts sparse input.

    Variance: ``Var = (e^{2|x+y|^2} + 1)/2 e^{-|x|^2-|y|^2} - e^{2x.y}`` per projection.

    Parameters
    ----------
    n_features, kernel, lengthscale, sampler, random_state, n_jobs
        As in :class:`PositiveRF`; ``n_features`` is the number of projections ``M``
        (the output has ``2 M`` columns).

    Attributes
    ----------
    projection_ : ndarray (M, d)
        ``W``; the features use ``[W; -W]``.
    A_ : ndarray (d,), zeros
    """

    accepts_sparse = True

    def _output_dim_for(self, n_features):
        return 2 * int(n_features)

    def _projections(self):
        return np.concatenate([self.projection_, -self.projection_], axis=0)  # (2M, d)

    def _log_second_moment(self, X, Y, xp):
        nx, ny, z2 = _sum_sq(X, Y, xp)
        out = xp.logaddexp(2.0 * z2, xp.zeros_like(z2)) - math.log(2.0) - nx - ny
        return out + 2.0 * self.alpha * (nx + ny)

    # FAVOR# eq. (14) for the antithetic pair, from its own second moment (O(n m d)):
    # _DiagonalDERF's closed form is that of one exponential feature, FAVOR+'s here
    log_objective = SecondMomentVariance.log_objective

    def _log_relative_variance(self, X, Y, xp):
        # m2 / K^2 - 1 = cosh|x+y|^2 - 1 = e^{z2} (1 - e^{-z2})^2 / 2 (z2 = |x+y|^2): from z2
        # directly, not as the difference of two logs, which cancels for small inputs
        # (relative variance ~ z2^2 / 2: all digits lost in float32 at |x| ~ 1e-3)
        z2 = xp.clip(_sum_sq(X, Y, xp)[2], min=0.0)
        log1m = log1mexp(xp, z2)  # -inf where exact (y = -x)
        return z2 + 2.0 * log1m - math.log(2.0 * self.n_features)


class GERF(_DiagonalDERF):
    """Generalized exponential random features, FAVOR++ (FAVOR# eq. 10-11, corrected).

    ``f1 = f2 = (1-4A)^{d/4} exp(A|w|^2 + sqrt(1-4A) w.x - |x|^2/2)`` (erratum b: the
    paper prints the norm term ``-|x|^2/4``, biased by ``exp((|x|^2 + |y|^2)/4)``), with
    ``A = A*(phi)`` fitted in closed form, ``phi = sum_ij |x_i+y_j|^2 / (d n m)``
    (Sec. 3.1, Lemma A.1; :func:`kernelkit.features.favor.fit_gerf`). Pass ``A`` to fix the
    parameter instead of fitting it.

    Variance (eq. 12-13): ``log m2 = d log((1-4A)/sqrt(1-8A)) + 2(1-4A)/(1-8A)|x+y|^2
    - |x|^2 - |y|^2``.

    Parameters
    ----------
    n_features, kernel, lengthscale, sampler, random_state, n_jobs
        See :class:`PositiveRF`.
    A : float, optional
        A fixed ``A`` in ``[-1e300, 1/8)`` instead of the fitted one.

    Attributes
    ----------
    projection_ : ndarray (M, d)
    A_ : ndarray (d,), constant: the fitted (or given) ``A``
    """

    _derf = "gerf"
    _full_moments = False
    data_dependent = True
    _parameter_constraints: ClassVar[dict] = {
        **_DiagonalDERF._parameter_constraints,
        # below -1e300, 1 - 8A and the log features of ordinary inputs leave float64
        "A": [None, Interval(Real, _MIN_A, 0.125, closed="left")],
    }

    def __init__(
        self,
        n_features=256,
        kernel="softmax",
        lengthscale=1.0,
        sampler="iid",
        random_state=None,
        n_jobs=None,
        A=None,
    ):
        super().__init__(n_features, kernel, lengthscale, sampler, random_state, n_jobs)
        self.A = A

    def _validate_params(self):
        # scikit-learn's Interval compares A in its own type: a float32 or float16 A casts
        # the bound -1e300 to -inf with an "overflow encountered in cast" warning (the
        # comparison is right either way; _check_params checks float(A))
        with np.errstate(over="ignore"):
            super()._validate_params()

    def _check_params(self):
        super()._check_params()
        if self.A is not None:
            if isinstance(self.A, bool) or not isinstance(self.A, numbers.Real):
                raise TypeError(f"A must be a float below 1/8, got {self.A!r}.")
            if not (_MIN_A <= float(self.A) < 0.125 and math.isfinite(self.A)):
                raise ValueError(
                    f"A must be in [{_MIN_A:g}, 1/8) (1 - 8A > 0, and finite in float64), "
                    f"got {self.A}."
                )

    def _checks_finite_in_fit(self):
        return self.A is None

    def _draw_beside_fit(self, X, Y):
        return self.A is None and super()._draw_beside_fit(X, Y)  # a given A needs no moments

    def _fit_parameters(self, X, Y, rng, stats=None):
        if self.A is None:
            return super()._fit_parameters(X, Y, rng, stats=stats)
        self._set_parameters(DERFParameters(np.full(X.shape[1], float(self.A))))

    def _fit_reads_data(self) -> bool:
        return self.A is None  # a given A: nothing is fitted to the data


class _AsymmetricDERF(_DiagonalDERF):
    symmetric = False
    data_dependent = True
    _parameter_constraints: ClassVar[dict] = {
        **_DiagonalDERF._parameter_constraints,
        "eps": NON_NEGATIVE,
    }

    def __init__(
        self,
        n_features=256,
        kernel="softmax",
        lengthscale=1.0,
        sampler="iid",
        random_state=None,
        n_jobs=None,
        eps=DEFAULT_EPS,
    ):
        super().__init__(n_features, kernel, lengthscale, sampler, random_state, n_jobs)
        self.eps = eps

    def _check_params(self):
        super()._check_params()
        eps = self.eps
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (eps >= 0):
            raise ValueError(f"eps must be a non-negative float, got {eps!r}.")


class SADERF(_AsymmetricDERF):
    """Simplified asymmetric dense-exponential random features (FAVOR# Sec. 4.3, eq. 20).

    ``f1(w, x) = f_GE(w, psi x)``, ``f2(w, y) = f_GE(w, y / psi)`` with the diagonal
    ``psi_l = (mean_j y_jl^2 / mean_i x_il^2)^{1/4}``, GERF's ``A`` fitted on the
    transformed sets (:func:`kernelkit.features.favor.fit_saderf`). No matrix
    decomposition; fit O((n + m) d). Asymmetric.

    Parameters
    ----------
    n_features, kernel, lengthscale, sampler, random_state, n_jobs
        See :class:`PositiveRF`.
    eps : float
        Relative ridge on the per-coordinate second moments (a library choice, user
        guide), so that zero coordinates give finite ``psi``. Valid and unbiased for any
        input, but a coordinate that is zero in every fitting query and non-zero in a
        later one is scaled by about ``eps**-1/4`` (``psi_l`` ~ 30 with the default):
        that later query's relative variance can be astronomical (e^59 for
        ``x_l = 0.3`` where the keys' coordinates have scale 0.3) and its estimates
        collapse to 0. Pass a larger ``eps`` (1e-2 costs little on the fitting data),
        fit on data that covers every coordinate, or use SDERF (no ridge).

    Attributes
    ----------
    projection_ : ndarray (M, d)
    psi_ : ndarray (d,)
    A_ : ndarray (d,), constant
    B_x_, B_y_ : ndarray (d, d), ``diag(psi)`` and ``diag(1 / psi)``
    """

    _derf = "saderf"
    _full_moments = False

    def _set_parameters(self, params):
        super()._set_parameters(params)
        self.psi_ = np.asarray(params.B_x, dtype=np.float64).copy()  # (d,)


class ADERF(_AsymmetricDERF):
    """Asymmetric dense-exponential random features (FAVOR# Thm 4.2).

    ``f_k(w, x) = (1-4A)^{d/4} exp(A|w|^2 + sqrt(1-4A) w.B~_k x - |B~_k x|^2/2)`` with
    ``B~1^T B~2 = I``; ``B~1``, ``B~2``, ``A`` fitted in closed form by
    :func:`kernelkit.features.favor.fit_aderf`. Asymmetric; fit O((n + m) d^2 + d^3).

    Parameters
    ----------
    n_features, kernel, lengthscale, sampler, random_state, n_jobs
        See :class:`PositiveRF`.
    eps : float
        Relative ridge on the second-moment matrices (a library choice,
        docs/derivations/favor_sharp.md): both get ``eps (tr M_x + tr M_y) / (2d) I``.
        Keeps fewer-points-than-dimensions and zero-column data valid and unbiased, but
        the directions the fitting queries (or keys) do not span are scaled up, the more
        the smaller ``eps``: a later query with a component there gets a huge relative
        variance (e^170 for 2 fitting queries in d = 6 and an offset of 0.25 per
        coordinate) and estimates near 0. Pass a larger ``eps`` (1e-2 costs little on
        the fitting data), fit on data that spans the later inputs, or use SDERF, whose
        fit needs no ridge. Moments too ill-conditioned for the ridge (singular ones with
        ``eps = 0``) raise a ``ValueError``: their ``B~1^T B~2`` would miss the identity,
        and the map would be biased.

    Attributes
    ----------
    projection_ : ndarray (M, d)
    A_ : ndarray (d,), constant: the fitted ``A``
    B_x_, B_y_ : ndarray (d, d)
        ``B~1`` (query side) and ``B~2`` (key side), ``B_x_.T @ B_y_ = I``, in the
        rotation-free form ``U~ B~k`` of :func:`kernelkit.features.favor.fit_aderf`
        (``B_x_ M_x B_x_.T = B_y_ M_y B_y_.T`` symmetric, not diagonal; the same
        estimator, continuous in the data).
    """

    _derf = "aderf"

    #: largest accepted ``max |B_x^T B_y - I|`` (Thm 4.2's constraint, which makes
    #: ``x'.y' = x.y``): beyond it the fit is too ill-conditioned for its ridge
    _CONSTRAINT_TOL = 1e-6

    def _set_parameters(self, params):
        super()._set_parameters(params)
        # singular second moments with eps = 0 (or a ridge too small for their
        # conditioning) leave B~1, B~2 of huge entries whose product misses the identity:
        # the map would be biased (x'.y' != x.y), with estimates of 0, so refuse it
        with np.errstate(over="ignore", invalid="ignore"):
            dev = float(np.max(np.abs(self.B_x_.T @ self.B_y_ - np.eye(self.B_x_.shape[0]))))
        if not dev <= self._CONSTRAINT_TOL:
            raise ValueError(
                f"ADERF(eps={self.eps!r}): the second moments of X and Y are singular or too "
                "ill-conditioned for this ridge (fewer points than dimensions, constant "
                f"coordinates): B_x^T B_y misses the identity by {dev:.3g}, so the estimate "
                "would be biased. Pass a larger eps (default 1e-6), or use SDERF, which "
                "needs no ridge."
            )


class SDERF(_DiagonalDERF):
    """Symmetric dense-exponential random features, FAVOR# (Thm 4.3).

    ``f(w, x) = det(I-4A)^{1/4} exp(w^T A w + w^T B x - |x|^2/2)``, ``B = (I-4A)^{1/2} Q3^T``,
    ``A = diag(A*(L3))`` from the eigendecomposition of
    ``N = mean_ij (x_i + y_j)(x_i + y_j)^T`` (:func:`kernelkit.features.favor.fit_sderf`).
    Symmetric (``f1 = f2``); features are computed as per-coordinate GERF on rotated
    inputs ``Q3^T x`` and rotated projections ``Q3^T w`` (the rows of ``projection_`` are
    ``w``, in input coordinates): Thm 4.1's features with the symmetric matrix ``Q3
    diag(a) Q3^T``, the same estimator in distribution as projections drawn in the
    eigenbasis, but continuous in the data where ``Q3`` is not (two close eigenvalues);
    see "Continuity in the data" among the library choices of Derivations: FAVOR#.

    Variance (eq. 40 corrected, erratum c: the paper prints the prefactor
    ``det(I-4A)^{1/4} det(I-8A)^{-1/2}``; the normaliser of both features squared is
    ``det(I-4A)``): ``m2 = prod_l (1-4a_l)/sqrt(1-8a_l)
    exp(-|x|^2 - |y|^2 + 2 sum_l (1-4a_l)/(1-8a_l) ((Q3^T(x+y))_l)^2)``.

    Parameters
    ----------
    n_features, kernel, lengthscale, sampler, random_state, n_jobs
        See :class:`PositiveRF`.

    Attributes
    ----------
    projection_ : ndarray (M, d)
    A_ : ndarray (d,)
        The diagonal ``a_l = A*(L3_l)`` of ``A``.
    B_x_, B_y_ : ndarray (d, d)
        Both ``Q3^T`` (the same array): the rotation of the inputs and of the projections.
    """

    _derf = "sderf"
    _rotate_projections = True
    data_dependent = True
