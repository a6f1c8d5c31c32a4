"""The threaded, blocked moments of large 2-D NumPy input (``favor.moments``).

They must equal the direct sums to round-off and must not depend on the thread count
(row blocks and chunks are fixed by the shape, and summed in order).
"""

import numpy as np
import pytest

from kernelkit.features import favor


def _direct(X):
    X64 = X.astype(np.float64)
    return X64.mean(axis=0), X64.T @ X64 / X.shape[0]


# rows of 512 KiB blocks: 1024 at d = 64, 8192 at d = 8. 9001 x 64: 9 blocks (the last one
# short) in one chunk; 30011 x 64: 30 blocks in 3 chunks of 10; 80000 x 8: 10 blocks
@pytest.mark.parametrize("n, d", [(9001, 64), (30011, 64), (80000, 8)])
@pytest.mark.parametrize("full", [True, False])
def test_blocked_moments_equal_direct_sums_and_ignore_thread_count(n, d, full):
    rng = np.random.default_rng(n + d)
    X = rng.standard_normal((n, d)) + 0.5
    Y = 2.0 * rng.standard_normal((n + 4099, d))
    assert favor.moments_are_threaded(X) and favor.moments_are_threaded(Y)
    one = favor.moments(X, Y, full=full, n_jobs=1)
    two = favor.moments(X, Y, full=full, n_jobs=2)
    for field in ("mean_x", "second_x", "mean_y", "second_y"):
        # bit for bit: the order of the sums is fixed by the shapes
        np.testing.assert_array_equal(getattr(one, field), getattr(two, field))
    for mean, second, Z in ((one.mean_x, one.second_x, X), (one.mean_y, one.second_y, Y)):
        mu, S = _direct(Z)
        # float64 sums of n terms of size ~ max|z|^2: relative error ~ n eps
        tol = Z.shape[0] * np.finfo(np.float64).eps * np.max(np.abs(S))
        np.testing.assert_allclose(mean, mu, rtol=0, atol=tol)
        np.testing.assert_allclose(second, S if full else np.diag(S), rtol=0, atol=tol)


def test_blocked_moments_keep_float32_second_moments():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40000, 16)).astype(np.float32)
    assert favor.moments_are_threaded(X)
    mom = favor.moments(X, full=True, n_jobs=2)
    assert mom.second_x.dtype == np.float32
    mu, S = _direct(X)
    # float32 block Grams (1024-row blocks summed in float32): error ~ n eps32 |S|
    tol = X.shape[0] * np.finfo(np.float32).eps * np.max(np.abs(S))
    np.testing.assert_allclose(mom.second_x, S, rtol=0, atol=tol)
    np.testing.assert_allclose(mom.mean_x, mu, rtol=0, atol=X.shape[0] * np.finfo(np.float32).eps)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("weighted", [False, True])
def test_streamed_diagonal_moments_of_batched_input_equal_direct_sums(backend, dtype, weighted):
    # batched (N-D) input larger than one row block: the diagonal moments are summed
    # block by block (2-D NumPy input takes the threaded path above instead)
    rng = np.random.default_rng(7)
    X = rng.standard_normal((3, 5003, 24)) * np.array([0.1, 1.0, 10.0])[:, None, None] + 0.3
    Y = rng.standard_normal((3, 4099, 24)) - 1.0
    w = rng.uniform(0.0, 1.0, (3, 4099))
    w /= w.sum(-1, keepdims=True)
    assert X.astype(dtype).nbytes > 2 * favor._MOMENT_BLOCK_BYTES  # several blocks
    if backend == "torch":
        torch = pytest.importorskip("torch")
        conv = lambda a: torch.as_tensor(a.astype(dtype))  # noqa: E731
        back = lambda t: t.numpy()  # noqa: E731
    else:
        conv, back = (lambda a: a.astype(dtype)), (lambda a: a)
    kw = {"key_weights": conv(w)} if weighted else {}
    mom = favor.moments(conv(X), conv(Y), full=False, **kw)
    eps = np.finfo(dtype).eps
    Xr, Yr = X.astype(dtype).astype(np.float64), Y.astype(dtype).astype(np.float64)
    wy = w.astype(dtype).astype(np.float64) if weighted else np.full(w.shape, 1.0 / w.shape[-1])
    cases = (
        (mom.mean_x, mom.second_x, Xr, np.full(X.shape[:-1], 1.0 / X.shape[-2])),
        (mom.mean_y, mom.second_y, Yr, wy),
    )
    for mean, second, Z, wz in cases:
        assert back(mean).shape == Z.shape[::2] and back(second).shape == Z.shape[::2]
        mu = np.einsum("bn,bnd->bd", wz, Z)
        sq = np.einsum("bn,bnd->bd", wz, Z * Z)
        # sums of n terms in the input dtype: error ~ n eps max|z|^2 per batch element
        scale = np.max(Z * Z, axis=(1, 2))[:, None]
        tol = Z.shape[1] * eps * scale
        assert np.all(np.abs(back(second) - sq) <= tol)
        assert np.all(np.abs(back(mean) - mu) <= Z.shape[1] * eps * np.sqrt(scale))


@pytest.mark.parametrize("d", [5, 32, 33, 64, 67])
def test_torch_gram_from_two_products_is_the_gram(d):
    # the CPU torch Gram (X_1^T X and X_2^T X_2, the lower-left block transposed): the
    # same matrix as one product to rounding, any d (odd, below 32)
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(d)
    X = torch.randn(2, 3, 200, d, generator=g, dtype=torch.float64) + 0.5
    G = favor._gram(favor.array_namespace(X), X)
    ref = X.mT @ X
    assert G.shape == ref.shape
    torch.testing.assert_close(G, ref, rtol=1e-13, atol=1e-12)
    mom = favor.moments(X, X[..., :150, :], full=True)  # the moments use it
    torch.testing.assert_close(mom.second_x, ref / 200, rtol=1e-13, atol=1e-14)
