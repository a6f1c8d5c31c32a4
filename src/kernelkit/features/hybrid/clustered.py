"""Clustered hybrid random features.

Implements Sec. 2.4 and App. H (Def. H.1 / H.2, eq. 88-98: k-means centres, per-pair
diagonal ``A^{ij}``, zero-one and Gaussian mixtures with a default estimator) of
K. Choromanski et al., "Hybrid Random Features" (ICLR 2022).
"""

from __future__ import annotations

import math
import numbers
from numbers import Real
from typing import ClassVar

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from ..._backend import check_random_state, device, validate_positive_int
from ..._backend.params import POSITIVE, int_range
from .._base import _detach
from .._projection import ProjectionFeatureMap
from ..sampling import draw_projection, gaussian_projection
from ._common import LogFormVariance, _assemble, _sq_norms, _sq_norms3, validate_bandwidth
from .complex_exponential import optimal_diagonal_A

#: elements of the largest temporary of ClusteredHybridRF.variance per row block; re-exported
#: by the package and read from there, so patch ``kernelkit.features.hybrid``'s copy
_VARIANCE_BLOCK_ELEMENTS = 1 << 22


class TooFewDistinctRows(ValueError):
    """A ``ValueError``: more k-means centres (``n_clusters``) than distinct rows on one
    side (``side``, ``"X"`` or ``"Y"``) of a :class:`ClusteredHybridRF` fit; the counts
    are attributes, so that a caller that chose the map (``RandomFeatures``) can say it in
    its own terms."""

    def __init__(self, n_clusters: int, side: str, n_distinct: int, n_samples: int):
        self.n_clusters, self.side = int(n_clusters), side
        self.n_distinct, self.n_samples = int(n_distinct), int(n_samples)
        super().__init__(
            f"n_clusters={n_clusters} for {side} exceeds the number of distinct {side} "
            f"points ({n_distinct}) among its n_samples={n_samples}; lower n_clusters."
        )


class ClusteredHybridRF(LogFormVariance, ProjectionFeatureMap):
    """Clustered hybrid random features (Sec. 2.4, App. H, Def. H.1 / H.2).

    k-means (scikit-learn) on the queries ``X`` (``n_q`` centres ``r_i``) and on the keys
    ``Y`` (``n_k`` centres ``r_j``); for every pair ``(i, j)`` a real diagonal
    ``A^{ij} = optimal_diagonal_A(r_i, r_j)`` (eq. 88) and the complex exponential base
    estimator ``SM^{ij} = Psi_{A^{ij}}(x)^T Psi_{(A^{ij})^{-1}}(y)`` (eq. 90-92; positive
    features), all pairs sharing one ``W`` (m x d). The mixtures:

    * ``mixture="zero_one"`` (Def. H.2, the paper's experiments):
      ``lambda^{ij} = 1[x in X_i] 1[y in Y_j]`` (nearest centre), so
      ``Phi_1(x) = concat_ij 1[x in X_i] Psi_{A^{ij}}(x)`` and
      ``Phi_2(y) = concat_ij 1[y in Y_j] Psi_{(A^{ij})^{-1}}(y)``,
      ``output_dim = n_q n_k m``, positive features, exact at the centres when ``l(A) = 0``.
    * ``mixture="gaussian"`` (Def. H.1): ``lambda^{ij} = exp(-|A x + A^{-1} y|^2 / (2 tau^2))``
      estimated with ``n = n_lambda`` positive features on a fresh ``W'`` (eq. 95-96),
      ``x``: ``n^{-1/2} exp(-|Ax|^2/tau^2 + W'Ax/tau)``, ``y``:
      ``n^{-1/2} exp(-|A^{-1}y|^2/tau^2 - W'A^{-1}y/tau)``, and a default estimator
      ``SM^0`` (``default_estimator``, sharing ``W``) with ``lambda^0 = 1 - sum lambda^{ij}``
      (eq. 97-98): ``SM_hat = SM^0 + sum_ij lambda_hat^{ij} (SM^{ij} - SM^0)``. Real form
      ``Phi_1 = [phi0(x); concat_p rho_p(x) (x) Psi_p(x); concat_p rho_p(x) (x) phi0(x)]``,
      ``Phi_2 = [phi0(y); concat_p rho'_p(y) (x) Psi'_p(y); -concat_p rho'_p(y) (x) phi0(y)]``,
      ``output_dim = 2m + 3 P n m`` with ``P = n_q n_k``.

    Both mixtures are unbiased for every input (the mixture weights are independent of
    the base estimators); the clustering only decides where the variance is small.

    Parameters
    ----------
    n_features : int
        ``m``, projections of each base estimator (shared by all pairs).
    kernel, lengthscale, sampler, random_state
        As in :class:`AngularHybridRF` (``sampler`` draws ``W``).
    n_clusters : int or (int, int)
        ``n_q`` query and ``n_k`` key clusters (one int: both). Each must not exceed the
        number of distinct points it clusters.
    mixture : {"zero_one", "gaussian"}
    n_lambda : int
        ``n``, projections of every ``lambda^{ij}`` estimator (Gaussian mixture only).
    tau : float
        Bandwidth of the Gaussian mixture weights, in ``[1e-150, 1e150]`` (``tau^2`` stays
        a normal float64 number).
    default_estimator : {"hyperbolic", "trig"}
        ``SM^0`` of the Gaussian mixture: antithetic FAVOR+ (default, as suggested in
        Sec. 2.4) or sin/cos trig features, ``2m`` features either way.
    eps : float
        Clip of the diagonal entries of ``A`` to ``[eps, 1/eps]`` (:func:`optimal_diagonal_A`).
        A centre coordinate near zero gives an entry near ``1/eps``, and the points of its
        cluster far from the centre a variance growing like ``exp(|A x + A^-1 y|^2)``
        (user guide, "Hybrid random features": check :meth:`variance` on the data).
    n_init : int
        k-means restarts.

    Attributes
    ----------
    centers_x_ : ndarray (n_q, d), centers_y_ : ndarray (n_k, d)
        k-means centres (lengthscale-scaled).
    A_ : ndarray (n_q, n_k, d)
        Diagonals of ``A^{ij}``.
    projection_ : ndarray (m, d)
    lambda_projection_ : ndarray (n_lambda, d)
        The projections ``W'`` of the Gaussian mixture (``mixture="gaussian"`` only).
    """

    _unit_scaled_rows = True  # detached stabiliser (FeatureMap.transform_scaled)

    #: NumPy rows in blocks: the whole (n, D) parts took 2x to 3x the output
    _row_blocked_features = True

    symmetric = False
    # k-means centres of X and of Y: fitted on the pair (X, Y), or on (X, X) without Y
    data_dependent = True
    _parameter_constraints: ClassVar[dict] = {
        **ProjectionFeatureMap._parameter_constraints,
        # an int, or a pair (n_q, n_k) whose entries _cluster_counts checks
        "n_clusters": [*int_range(1), tuple, list],
        "mixture": [StrOptions({"zero_one", "gaussian"})],
        "n_lambda": int_range(1, 2**20),
        "tau": POSITIVE,
        "default_estimator": [StrOptions({"hyperbolic", "trig"})],
        "eps": [Interval(Real, 0, 1, closed="neither")],
        "n_init": int_range(1),
    }

    def __init__(
        self,
        n_features: int = 64,
        kernel: str = "softmax",
        lengthscale: float = 1.0,
        sampler: str = "iid",
        random_state=None,
        n_clusters=2,
        mixture: str = "zero_one",
        n_lambda: int = 8,
        tau: float = 1.0,
        default_estimator: str = "hyperbolic",
        eps: float = 1e-3,
        n_init: int = 4,
    ):
        super().__init__(n_features, kernel, lengthscale, sampler, random_state)
        self.n_clusters = n_clusters
        self.mixture = mixture
        self.n_lambda = n_lambda
        self.tau = tau
        self.default_estimator = default_estimator
        self.eps = eps
        self.n_init = n_init

    # -------------------------------------------------------------- parameters
    @property
    def positive(self) -> bool:  # type: ignore[override]
        return self.mixture == "zero_one"

    def _cluster_counts(self):
        nc = self.n_clusters
        if isinstance(nc, tuple | list):
            if len(nc) != 2:
                raise ValueError(f"n_clusters must be an int or a pair (n_q, n_k), got {nc!r}.")
            return (
                validate_positive_int(nc[0], "n_clusters[0]"),
                validate_positive_int(nc[1], "n_clusters[1]"),
            )
        k = validate_positive_int(nc, "n_clusters")
        return k, k

    def _check_params(self):
        super()._check_params()
        self._cluster_counts()
        if self.mixture not in ("zero_one", "gaussian"):
            raise ValueError(f"mixture must be 'zero_one' or 'gaussian', got {self.mixture!r}.")
        validate_positive_int(self.n_lambda, "n_lambda", maximum=2**20)
        validate_bandwidth(self.tau, "tau")
        if self.default_estimator not in ("hyperbolic", "trig"):
            raise ValueError(
                f"default_estimator must be 'hyperbolic' or 'trig', got {self.default_estimator!r}."
            )
        if (
            isinstance(self.eps, bool)
            or not isinstance(self.eps, numbers.Real)
            or not 0 < self.eps < 1
        ):
            raise ValueError(f"eps must be a float in (0, 1), got {self.eps!r}.")
        validate_positive_int(self.n_init, "n_init")

    def _output_dim_for(self, n_features):
        n_q, n_k = self._cluster_counts()
        m, P = int(n_features), n_q * n_k
        if self.mixture == "zero_one":
            return P * m
        return 2 * m + 3 * P * int(self.n_lambda) * m

    def _kmeans(self, Z, k, name, seed):
        from sklearn.cluster import KMeans

        n_distinct = np.unique(Z, axis=0).shape[0]
        if k > n_distinct:
            raise TooFewDistinctRows(k, name, n_distinct, Z.shape[0])
        # k-means++ seeds from row indices: on the rows in lexicographic order, and with
        # the centres in that order too, the fit is a function of the data set, not
        # of the order of its rows (the pair blocks of the features follow the centres)
        Z = Z[_canonical_row_order(Z)]
        km = KMeans(n_clusters=k, n_init=self.n_init, random_state=seed).fit(Z)
        C = km.cluster_centers_  # (k, d)
        return C[np.lexsort(C.T[::-1])]

    def _fit_parameters(self, X, Y, rng):
        n_q, n_k = self._cluster_counts()
        seed = int(rng.integers(0, 2**31 - 1))
        self.centers_x_ = self._kmeans(X, n_q, "X", seed)  # (n_q, d)
        self.centers_y_ = self._kmeans(Y, n_k, "Y", seed + 1)  # (n_k, d)
        self.A_ = optimal_diagonal_A(
            self.centers_x_[:, None, :], self.centers_y_[None, :, :], eps=float(self.eps)
        )  # (n_q, n_k, d)
        if self.mixture == "gaussian":
            self.lambda_projection_ = gaussian_projection(self.n_lambda, X.shape[1], rng)

    def redraw(self, random_state=None):
        """Draw new random projections (``W``, and ``W'`` of the Gaussian mixture), keeping
        the fitted clusters and matrices ``A^{ij}``; returns ``self``.

        Cheap repetitions for Monte Carlo (k-means is not rerun). The draws follow the
        current ``n_features``, ``sampler`` and ``n_lambda``, so these may be changed by
        ``set_params`` before a redraw (other changes need ``fit``).

        Parameters
        ----------
        random_state : None, int or numpy.random.Generator
            Seeds the new projections.

        Returns
        -------
        ClusteredHybridRF
            ``self``, redrawn in place.
        """
        self._check_fitted(redrawn=("n_features", "sampler", "n_lambda"))
        self._validate_params()  # values set since fit: checked as fit checks them
        self._check_params()
        rng = check_random_state(random_state)
        d = self.A_.shape[-1]
        self.projection_ = draw_projection(self.n_features, d, rng, sampler=self.sampler)
        if self.mixture == "gaussian":
            self.lambda_projection_ = gaussian_projection(self.n_lambda, d, rng)
        self._build()
        self._record_fitted_params()
        return self

    def _build(self):
        super()._build()
        n_q, n_k, d = self.A_.shape
        consts = {
            "W_T": np.ascontiguousarray(self.projection_.T),  # (d, m)
            "Cx": self.centers_x_,
            "Cy": self.centers_y_,
            "A": self.A_,
            "Ainv": 1.0 / self.A_,  # (n_q, n_k, d)
            "A_flat": self.A_.reshape(n_q * n_k, d),
            "Ainv_flat": (1.0 / self.A_).reshape(-1, d),
        }
        if self.mixture == "gaussian":
            consts["T_T"] = np.ascontiguousarray(self.lambda_projection_.T)  # (d, n)
        self._consts = consts

    # -------------------------------------------------------------- features
    def _assign(self, X, xp, side):
        """Index of the nearest centre of each row, (n,), and its one-hot (n, k)."""
        C = self._param("Cx" if side == "x" else "Cy", xp, X)  # (k, d)
        dist = _sq_norms(xp, C)[None, :] - 2.0 * (X @ xp.matrix_transpose(C))  # (n, k) + |x|^2
        idx = xp.argmin(dist, axis=1)  # (n,)
        k = C.shape[0]
        ar = xp.arange(k, device=device(X))
        onehot = xp.astype(idx[:, None] == ar[None, :], X.dtype)  # (n, k)
        return idx, onehot

    def _psi_logits(self, Xm, xp, like):
        """Logits of ``Psi_M(x)`` for transformed rows ``Xm = M x`` (..., d) -> (..., m)."""
        W_T = self._param("W_T", xp, like)
        return (
            Xm @ W_T - 0.5 * xp.sum(Xm * Xm, axis=-1)[..., None] - 0.5 * math.log(self.n_features)
        )

    def _scaled_features(self, X, xp, side):
        if self.mixture == "zero_one":
            base, log_scale = self._zero_one(X, xp, side)
        else:
            base, log_scale = self._gaussian(X, xp, side)
        if self.alpha != 0.0:
            log_scale = log_scale + self.alpha * _sq_norms(xp, X)
        return base, log_scale

    def _zero_one(self, X, xp, side):
        n, m = X.shape[0], int(self.n_features)
        n_q, n_k, _ = self.A_.shape
        idx, onehot = self._assign(X, xp, side)
        if side == "x":
            A = xp.take(self._param("A", xp, X), idx, axis=0)  # (n, n_k, d): A^{i(x) j}
        else:
            Ainv = self._param("Ainv", xp, X)  # (n_q, n_k, d)
            A = xp.take(xp.permute_dims(Ainv, (1, 0, 2)), idx, axis=0)  # (n, n_q, d)
        logits = self._psi_logits(A * X[:, None, :], xp, X)  # (n, k_other, m)
        if n == 0:
            return _no_rows(xp, X, self.output_dim)
        row_max = _detach(xp.max(xp.reshape(logits, (n, -1)), axis=1))  # (n,)
        psi = xp.exp(logits - row_max[:, None, None])  # (n, k_other, m)
        if side == "x":  # block (i(x), j) for every j
            full = onehot[:, :, None, None] * psi[:, None, :, :]  # (n, n_q, n_k, m)
        else:  # block (i, j(y)) for every i
            full = psi[:, :, None, :] * onehot[:, None, :, None]  # (n, n_q, n_k, m)
        return xp.reshape(full, (n, n_q * n_k * m)), row_max

    def _gaussian(self, X, xp, side):
        n, m = X.shape[0], int(self.n_features)
        Mflat = self._param("A_flat" if side == "x" else "Ainv_flat", xp, X)  # (P, d)
        XM = Mflat[None, :, :] * X[:, None, :]  # (n, P, d)
        psi_l = self._psi_logits(XM, xp, X)  # (n, P, m)
        # lambda features: n^{-1/2} exp(-|Mx|^2/tau^2 +- W'Mx/tau), (n, P, L)
        sgn = 1.0 if side == "x" else -1.0
        rho_l = (
            sgn * (XM @ self._param("T_T", xp, X)) / float(self.tau)
            - xp.sum(XM * XM, axis=-1)[..., None] / float(self.tau) ** 2
            - 0.5 * math.log(self.n_lambda)
        )
        W_T = self._param("W_T", xp, X)
        proj = X @ W_T  # (n, m)
        if self.default_estimator == "hyperbolic":
            z_l = (
                xp.concat([proj, -proj], axis=1)
                - 0.5 * _sq_norms(xp, X)[:, None]
                - 0.5 * math.log(2.0 * m)
            )  # (n, 2m) logits
            z_b, z_ls = None, None
        else:
            z_b = xp.concat([xp.sin(proj), xp.cos(proj)], axis=1) / math.sqrt(m)  # (n, 2m)
            z_ls = 0.5 * _sq_norms(xp, X)
        if n == 0:
            return _no_rows(xp, X, self.output_dim)
        # stabilise each log-domain part by its row max
        ps_max = _detach(xp.max(xp.reshape(psi_l, (n, -1)), axis=1))
        psi = xp.exp(psi_l - ps_max[:, None, None])  # (n, P, m)
        rh_max = _detach(xp.max(xp.reshape(rho_l, (n, -1)), axis=1))
        rho = xp.exp(rho_l - rh_max[:, None, None])  # (n, P, L)
        if z_b is None:
            z_max = _detach(xp.max(z_l, axis=1))
            z_b, z_ls = xp.exp(z_l - z_max[:, None]), z_max
        rp = xp.reshape(rho[:, :, :, None] * psi[:, :, None, :], (n, -1))  # (n, P L m)
        rz = xp.reshape(rho[:, :, :, None] * z_b[:, None, None, :], (n, -1))  # (n, P L 2m)
        return _assemble(
            xp, [(z_b, z_ls, 1.0), (rp, rh_max + ps_max, 1.0), (rz, rh_max + z_ls, sgn)]
        )

    def cluster_pairs(self, X, Y=None):
        """Nearest-centre indices ``i(x)``, ``j(y)`` used by the zero-one mixture.

        Parameters
        ----------
        X : array, shape (n, d)
        Y : array, shape (m, d), optional (defaults to ``X``)

        Returns
        -------
        i : ndarray of int, shape (n,)
            The x-side cluster of each row of ``X``.
        j : ndarray of int, shape (m,)
            The y-side cluster of each row of ``Y``.
        """
        # a half-precision input formed in float32 (the distances to the centres)
        Xs, Ys, xp, _ = self._check_pair_half_widened(X, Y)
        return self._assign(Xs, xp, "x")[0], self._assign(Ys, xp, "y")[0]

    # -------------------------------------------------------------- variance
    def _variance_log_form(self, Xs, Ys, xp):
        """Analytic MSE of :meth:`approx_kernel` (i.i.d. projections) as
        ``(inner, log_scale)``, each (n, m), ``MSE = max(inner, 0) exp(log_scale)``.

        * zero-one mixture: for ``x in X_i``, ``y in Y_j`` the estimate is the real complex
          exponential estimator with ``A = A^{ij}``,
          ``MSE = SM^2 (exp(|A x + A^{-1} y|^2) - 1) / m``.
        * Gaussian mixture (derived): with weights ``w_0 = 1 - sum_p lambda_hat_p``,
          ``w_p = lambda_hat_p`` (``sum w = 1``, independent of ``W``) and base estimators
          sharing ``W``, ``MSE = (sum_ij E[w_i w_j] G_ij - SM^2) / m`` where
          ``G_ij = E[g_i g_j]`` is the second moment of single-projection estimates
          (``g_p = exp(-(|a_p|^2 + |b_p|^2)/2 + w.(a_p + b_p))``, ``a_p = A_p x``,
          ``b_p = A_p^{-1} y``; ``g_0`` hyperbolic or trig) and
          ``E[lambda_hat_p lambda_hat_q] = lambda_p lambda_q + (H_pq - lambda_p lambda_q)/n``
          with ``H_pq = exp(-(s_p + s_q)/tau^2 + |e_p + e_q|^2 / (2 tau^2))``,
          ``s_p = |a_p|^2 + |b_p|^2``, ``e_p = a_p - b_p``, for ``P = n_q n_k`` cluster
          pairs.

        For the Gaussian kernel the MSE is multiplied by ``exp(-|x|^2 - |y|^2)``. Everything
        is summed in log space (``inf`` only where the MSE itself overflows) and over row
        blocks of ``X``: temporaries of at most ~4M elements (``(rows, m, d)`` zero-one,
        ``(rows, m, P, P + d)`` Gaussian), whatever ``n``.

        Returns ``(inner, log_scale)``, each (n, m).
        """
        xy = Xs @ xp.matrix_transpose(Ys)  # (n, m)
        log_k2 = 2.0 * xy - math.log(self.n_features)  # log(K^2 / m)
        if self.alpha != 0.0:
            log_k2 = log_k2 + 2.0 * self.alpha * (
                _sq_norms(xp, Xs)[:, None] + _sq_norms(xp, Ys)[None, :]
            )
        # m MSE / K^2 = inner * exp(shift), evaluated in log space (finite wherever the MSE
        # is), over row blocks of X so that the (rows, m, P[, P], d) temporaries stay small
        n, m_pts, d = Xs.shape[0], Ys.shape[0], Xs.shape[1]
        if n == 0 or m_pts == 0:
            return xp.zeros_like(xy), xp.zeros_like(xy)
        P = self.A_.shape[0] * self.A_.shape[1]
        per_row = max(1, m_pts * d * (1 if self.mixture == "zero_one" else 2 * P * (P + d)))
        rows = max(1, _VARIANCE_BLOCK_ELEMENTS // per_row)
        parts = []
        for lo in range(0, n, rows):
            hi = min(lo + rows, n)
            if self.mixture == "zero_one":
                parts.append(self._zero_one_rel_mse(Xs[lo:hi], Ys, xp))
            else:
                parts.append(self._gaussian_rel_mse(Xs[lo:hi], Ys, xp, xy[lo:hi]))
        if len(parts) == 1:
            inner, shift = parts[0]
        else:
            inner = xp.concat([q[0] for q in parts], axis=0)
            shift = xp.concat([q[1] for q in parts], axis=0)
        return inner, shift + log_k2

    def _zero_one_rel_mse(self, Xs, Ys, xp):
        """``expm1(l) = (1 - e^{-l}) e^{l}`` as ``(inner, shift)``, ``l = |A x + A^{-1} y|^2``
        for the pair's ``A = A^{i(x) j(y)}``; (n, m_pts) each."""
        ix, _ = self._assign(Xs, xp, "x")
        jy, _ = self._assign(Ys, xp, "y")
        A = self._param("A", xp, Xs)  # (n_q, n_k, d)
        Ax = xp.take(A, ix, axis=0)  # (n, n_k, d)
        Ax = xp.take(Ax, jy, axis=1) * Xs[:, None, :]  # (n, m_pts, d): A^{i(x) j(y)} x
        Ainv = self._param("Ainv", xp, Xs)
        By = xp.take(xp.take(Ainv, ix, axis=0), jy, axis=1) * Ys[None, :, :]  # (n, m_pts, d)
        ell = xp.sum((Ax + By) ** 2, axis=-1)  # (n, m_pts)
        return -xp.expm1(-ell), ell

    def _gaussian_rel_mse(self, Xs, Ys, xp, xy):
        """``m MSE / SM^2`` of the Gaussian mixture as ``(inner, shift)``, (n, m_pts) each.

        The sum ``sum_ij E[w_i w_j] G_ij - 1`` is expanded into terms ``coef * exp(log)``
        (weights ``E[w_i w_j]`` written through ``lambda_p`` and ``H_pq``) and summed with a
        common shift, so no intermediate overflows (no ``inf - inf``).
        """
        Af = self._param("A_flat", xp, Xs)  # (P, d)
        a = Af[None, :, :] * Xs[:, None, :]  # (n, P, d)
        b = Ys[:, None, :] / Af[None, :, :]  # (m_pts, P, d)
        c = a[:, None] + b[None, :]  # (n, m_pts, P, d)   a_p + b_p
        e = a[:, None] - b[None, :]  # (n, m_pts, P, d)   a_p - b_p
        s = _sq_norms3(xp, a)[:, None, :] + _sq_norms3(xp, b)[None, :, :]  # (n, m_pts, P)
        cc = c @ xp.matrix_transpose(c)  # (n, m_pts, P, P)
        ee = e @ xp.matrix_transpose(e)
        c2 = xp.linalg.diagonal(cc)  # (n, m_pts, P)
        e2 = xp.linalg.diagonal(ee)
        t2 = float(self.tau) ** 2
        n_l = float(self.n_lambda)
        two_xy = (2.0 * xy)[:, :, None, None]
        # logs of G_pq / SM^2, H_pq and lambda_p
        spq = s[..., :, None] + s[..., None, :]  # (n, m_pts, P, P)
        lg_pq = -0.5 * spq + 0.5 * (c2[..., :, None] + c2[..., None, :] + 2.0 * cc) - two_xy
        lh_pq = -spq / t2 + 0.5 * (e2[..., :, None] + e2[..., None, :] + 2.0 * ee) / t2
        llam = -0.5 * c2 / t2  # (n, m_pts, P): log lambda_p = -|a_p + b_p|^2 / (2 tau^2)
        lll = llam[..., :, None] + llam[..., None, :]  # (n, m_pts, P, P): log lambda_p lambda_q
        # default estimator g_0: G_00 (n, m_pts) and G_0p (n, m_pts, P), relative to SM^2,
        # as lists of (coefficient, log)
        nx = _sq_norms(xp, Xs)[:, None]
        ny = _sq_norms(xp, Ys)[None, :]
        xy2 = 2.0 * xy
        z = Xs[:, None, :] + Ys[None, :, :]  # (n, m_pts, d)
        z2 = xp.clip(nx + ny + xy2, min=0.0)
        d2 = xp.clip(nx + ny - xy2, min=0.0)
        base = -0.5 * s - 0.5 * (nx + ny)[..., None] - xy2[..., None]  # (n, m_pts, P)
        if self.default_estimator == "hyperbolic":
            g00 = [(0.5, 2.0 * z2 - nx - ny - xy2), (0.5, -nx - ny - xy2)]
            cz = xp.sum(c * z[:, :, None, :], axis=-1)  # (n, m_pts, P)
            zz = z2[..., None]
            g0p = [
                (0.5, base + 0.5 * (c2 + zz + 2.0 * cz)),
                (0.5, base + 0.5 * (c2 + zz - 2.0 * cz)),
            ]
        else:
            delta = Xs[:, None, :] - Ys[None, :, :]
            g00 = [(0.5, nx + ny - xy2), (0.5, nx + ny - xy2 - 2.0 * d2)]
            cd = xp.sum(c * delta[:, :, None, :], axis=-1)  # (n, m_pts, P)
            g0p = [
                (
                    xp.cos(cd),
                    -0.5 * s
                    + 0.5 * (nx + ny)[..., None]
                    - xy2[..., None]
                    + 0.5 * (c2 - d2[..., None]),
                )
            ]
        # E[w_0^2] = 1 - 2 sum_p l_p + sum_pq L_pq, E[w_0 w_p] = l_p - sum_q L_pq,
        # E[w_p w_q] = L_pq = (1 - 1/n) l_p l_q + H_pq / n
        terms = [(-1.0, xp.zeros_like(xy))]  # the "- 1"
        for cf, lg in g00:
            lg3, lg4 = lg[..., None], lg[..., None, None]
            terms += [
                (cf, lg),
                (-2.0 * cf, llam + lg3),
                ((1.0 - 1.0 / n_l) * cf, lll + lg4),
                (cf / n_l, lh_pq + lg4),
            ]
        for cf, lg in g0p:
            cf4 = cf[..., :, None] if not isinstance(cf, float) else cf
            lg4 = lg[..., :, None]  # G_0p broadcast over q
            terms += [
                (2.0 * cf, llam + lg),
                (-2.0 * (1.0 - 1.0 / n_l) * cf4, lll + lg4),
                (-2.0 * cf4 / n_l, lh_pq + lg4),
            ]
        terms += [((1.0 - 1.0 / n_l), lll + lg_pq), (1.0 / n_l, lh_pq + lg_pq)]
        lead = xy.ndim
        shift = None
        for _, lg in terms:
            mx = xp.max(xp.reshape(lg, (*lg.shape[:lead], -1)), axis=-1) if lg.ndim > lead else lg
            shift = mx if shift is None else xp.maximum(shift, mx)
        inner = xp.zeros_like(xy)
        for cf, lg in terms:
            sh = xp.reshape(shift, (*shift.shape, *([1] * (lg.ndim - lead))))
            v = cf * xp.exp(lg - sh)
            v = xp.broadcast_to(v, lg.shape) if lg.ndim > lead else v
            inner = inner + (
                xp.sum(xp.reshape(v, (*v.shape[:lead], -1)), axis=-1) if lg.ndim > lead else v
            )
        return inner, shift


def _canonical_row_order(Z):
    """A permutation sorting the rows of ``Z`` (n, d) lexicographically by value (ties in
    any order: they are equal rows), as ``np.lexsort`` over the d columns but in one
    argsort: each float is mapped to an unsigned integer of the same order (sign bit
    set for non-negative values, all bits flipped for negative ones; ``+ 0.0`` first
    maps -0.0 to 0.0) and stored big-endian, so that comparing the rows' bytes compares
    their values column by column. Float32 data sorts as its float64 values. About 4x
    faster than ``np.lexsort`` at n = 20000, d = 64."""
    u = (np.asarray(Z, dtype=np.float64) + 0.0).view(np.uint64)  # (n, d)
    flip = (u >> np.uint64(63)) * np.uint64(0xFFFFFFFFFFFFFFFF) | np.uint64(1 << 63)
    keys = np.ascontiguousarray(u ^ flip, dtype=">u8")  # (n, d), order-preserving
    rows = keys.view(np.dtype((np.void, 8 * keys.shape[1]))).ravel()  # (n,)
    return np.argsort(rows, kind="stable")


def _no_rows(xp, X, width):
    """``(base (0, width), log_scale (0,))`` of an ``X`` without rows, on ``X``'s autograd
    graph as every other transform's output is (a loss over no rows backpropagates)."""
    zero = X[:, :1] * 0.0  # (0, 1)
    return zero * xp.zeros((1, width), dtype=X.dtype, device=device(X)), zero[:, 0]
