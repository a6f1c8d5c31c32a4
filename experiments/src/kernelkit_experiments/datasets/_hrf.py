"""Data for the hybrid-random-feature experiments (HRF paper, Table 1 and App. H).

* ``load_hrf_uci("wine")``: the UCI wine recognition data bundled with scikit-learn
  (178 x 13); ``load_hrf_uci("boston")``: the Boston housing data bundled with mlxtend
  (``mlxtend.data.boston_housing_data``, 506 x 13; scikit-learn no longer ships it).
* :func:`hrf_preprocess`: the paper does not state its preprocessing; we standardise the
  columns and then either put every point on the sphere of radius ``r`` (``"sphere"``) or
  scale the whole set so that the mean norm is ``r`` (``"global"``, norms keep varying).
* :func:`make_clustered`: the synthetic clustered data of App. H.1 / H.3.

Everything is offline; a missing source raises
:class:`kernelkit.datasets.DatasetNotAvailable` naming the package to install.
"""

from __future__ import annotations

import numpy as np

from kernelkit.datasets._images import DatasetNotAvailable

__all__ = ["HRF_UCI_DATASETS", "hrf_preprocess", "load_hrf_uci", "make_clustered"]

HRF_UCI_DATASETS = ("wine", "boston")


def load_hrf_uci(name: str) -> np.ndarray:
    """Raw features of a Table 1 data set, float64 array of shape (n, 13).

    Raises
    ------
    ValueError
        Unknown ``name``.
    DatasetNotAvailable
        scikit-learn (wine) or mlxtend (boston) is not installed.
    """
    if name == "wine":
        try:
            from sklearn.datasets import load_wine
        except ImportError as exc:  # pragma: no cover - scikit-learn is a dependency
            raise DatasetNotAvailable(
                "The wine data ship with scikit-learn: pip install scikit-learn"
            ) from exc
        return np.asarray(load_wine().data, dtype=np.float64)
    if name == "boston":
        try:
            from mlxtend.data import boston_housing_data
        except ImportError as exc:
            raise DatasetNotAvailable(
                "The Boston housing data ship with mlxtend: pip install mlxtend"
            ) from exc
        X, _ = boston_housing_data()
        return np.asarray(X, dtype=np.float64)
    raise ValueError(f"name must be one of {HRF_UCI_DATASETS}, got {name!r}.")


def hrf_preprocess(X, mode: str = "sphere", r: float = 1.0) -> np.ndarray:
    """Standardise the columns, then rescale norms.

    Parameters
    ----------
    X : array, shape (n, d)
    mode : {"sphere", "global"}
        ``"sphere"``: every row gets norm ``r``; ``"global"``: one factor for all rows so
        that the mean row norm is ``r``.
    r : float, > 0

    Returns
    -------
    ndarray, shape (n, d), float64
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-d array, got shape {X.shape}.")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or inf.")
    if not (np.isfinite(r) and r > 0):
        raise ValueError(f"r must be a positive finite number, got {r!r}.")
    sd = X.std(axis=0)
    Z = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    norms = np.linalg.norm(Z, axis=1)
    if mode == "sphere":
        return r * Z / np.where(norms > 0, norms, 1.0)[:, None]
    if mode == "global":
        return r * Z / norms.mean()
    raise ValueError(f"mode must be 'sphere' or 'global', got {mode!r}.")


def _sign_edit(cx, cy, target, max_flips: int = 10000):
    """Greedy coordinate sign flips of the cluster centres so that
    ``l_ij = 4 sum_{k: cx_ik cy_jk > 0} cx_ik cy_jk`` (the residual of the optimal real
    diagonal A, eq. 88) approaches ``target[i, j]``.

    cx : (p, d), cy : (q, d), target : (p, q). Returns sign vectors ``(sx (p, d), sy (q, d))``
    to multiply the coordinates of each cluster with.
    """
    d = cx.shape[1]
    ax, ay = np.abs(cx), np.abs(cy)
    # start: every x-centre coordinate positive, every y-centre coordinate negative: l = 0
    sx = np.where(cx < 0, -1.0, 1.0)  # (p, d)
    sy = np.where(cy < 0, 1.0, -1.0)  # (q, d)
    gx, gy = np.sign(cx) * 1.0, np.sign(cy) * 1.0

    def loss(sx, sy):
        same = ((sx * gx)[:, None, :] * (sy * gy)[None, :, :]) > 0  # (p, q, d)
        lv = 4.0 * np.sum(same * ax[:, None, :] * ay[None, :, :], axis=-1)
        return np.sum((lv - target) ** 2), lv

    best, _ = loss(sx, sy)
    for _ in range(max_flips):
        cand = []
        for side, S in (("x", sx), ("y", sy)):
            for i in range(S.shape[0]):
                for k in range(d):
                    S[i, k] = -S[i, k]
                    cand.append((loss(sx, sy)[0], side, i, k))
                    S[i, k] = -S[i, k]
        val, side, i, k = min(cand)
        if val >= best:
            break
        best = val
        S = sx if side == "x" else sy
        S[i, k] = -S[i, k]
    return sx, sy


def make_clustered(
    s_target,
    sigma: float,
    n_per_cluster: int = 1000,
    d: int = 50,
    radius: float = 1.0,
    random_state=None,
    mean_scale: float = 1.0,
):
    """Synthetic clustered queries / keys of App. H.1 / H.3.

    Two random vectors ``X0, Y0 ~ N(0, mean_scale^2 I_d)``; cluster means ``X_i = O^{i,1} X0``,
    ``Y_j = O^{j,2} Y0`` with Haar-random orthogonal ``O``; ``n_per_cluster`` points per
    cluster from ``N(mean, sigma^2 I)``; every point rescaled to norm ``radius`` (the paper
    "normalises the l2 norms", target not stated). The coordinate signs of each cluster
    (mean and noise together, which leaves the law of the noise and every norm unchanged)
    are then edited greedily so that ``s_ij = l(A^{ij})`` computed on the normalised
    cluster means approaches ``s_target[i, j]`` (the paper edits the signs of the means to
    "control the value of s").

    Parameters
    ----------
    s_target : array, shape (2, 2) or (4,) (row-major over (i, j))
    sigma : float > 0
    n_per_cluster, d : int
    radius : float > 0
    random_state : None, int or Generator
    mean_scale : float > 0
        Scale of ``X0, Y0`` (the paper: "random vectors", scale not given). After the
        normalisation only ``sigma / mean_scale`` matters (the clusters' tightness).

    Returns
    -------
    X : ndarray (2 n_per_cluster, d); Y : ndarray (2 n_per_cluster, d)
    labels_x, labels_y : int arrays, true cluster of each point
    s : ndarray (2, 2), achieved ``l(A^{ij})`` at the normalised true cluster means
    """
    rng = np.random.default_rng(random_state)
    target = np.asarray(s_target, dtype=np.float64).reshape(2, 2)
    if not (sigma > 0 and radius > 0 and mean_scale > 0):
        raise ValueError("sigma, radius and mean_scale must be positive.")

    def haar(d):
        Q, R = np.linalg.qr(rng.standard_normal((d, d)))
        return Q * np.sign(np.diag(R))[None, :]

    x0, y0 = mean_scale * rng.standard_normal(d), mean_scale * rng.standard_normal(d)
    mx = np.stack([haar(d) @ x0 for _ in range(2)])  # (2, d)
    my = np.stack([haar(d) @ y0 for _ in range(2)])
    labels = np.repeat(np.arange(2), n_per_cluster)
    X = mx[labels] + sigma * rng.standard_normal((2 * n_per_cluster, d))
    Y = my[labels] + sigma * rng.standard_normal((2 * n_per_cluster, d))
    X *= radius / np.linalg.norm(X, axis=1, keepdims=True)
    Y *= radius / np.linalg.norm(Y, axis=1, keepdims=True)
    cx = np.stack([X[labels == i].mean(axis=0) for i in range(2)])  # (2, d)
    cy = np.stack([Y[labels == j].mean(axis=0) for j in range(2)])
    sx, sy = _sign_edit(cx, cy, target)
    X *= sx[labels]
    Y *= sy[labels]
    cx, cy = cx * sx, cy * sy
    prod = cx[:, None, :] * cy[None, :, :]
    s = 4.0 * np.sum(np.where(prod > 0, prod, 0.0), axis=-1)
    return X, Y, labels, labels.copy(), s
