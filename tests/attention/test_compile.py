"""torch.compile(fullgraph=True): linear_attention and FavorAttention trace without graph
breaks (projections of an integer seed come from a custom op, no host syncs on the hot
path) and agree with eager, forward and backward."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

from kernelkit.attention import FavorAttention, draw_features, linear_attention  # noqa: E402


def _qkv(L=40, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, L, d, generator=g) for _ in range(3)]


def _assert_compiled_matches_eager(f, q, k, v):
    """``torch.compile(f, fullgraph=True)`` equals eager ``f``: outputs and the gradients
    of ``sum(out^2)`` w.r.t. q, k, v."""
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = f(*leaves)
    ref.square().sum().backward()
    grads = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    out = torch.compile(f, fullgraph=True)(*leaves)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    for t, g in zip(leaves, grads, strict=True):
        torch.testing.assert_close(t.grad, g, rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """A fresh trace per test, and no warning of Dynamo about the cached functions it
    traces through: array_api_compat finds namespaces through ``functools.lru_cache``
    functions, and a compiled FAVOR# call printed fifteen such warnings before kernelkit
    recognised torch tensors and NumPy arrays itself (``_backend.namespace``)."""
    torch._dynamo.reset()
    # Dynamo warns once per process (warn_once), which reset() does not forget: without
    # this an earlier test's warning would hide a later one's
    getattr(torch._dynamo.utils, "warn_once_cache", set()).clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    torch._dynamo.reset()
    cached = [str(w.message) for w in caught if "lru_cache" in str(w.message)]
    assert not cached, cached[0]


def test_seeded_projections_are_drawn_once_and_equal_draw_features():
    from kernelkit.attention.functional import _draw_projection_op

    W, T = _draw_projection_op("sderf", 32, 16, "3", "orthogonal", 8, torch.device("cpu"))
    np.testing.assert_array_equal(W.numpy(), draw_features("sderf", 32, 16, 3)["W"])
    assert T.numel() == 0
    W2, _ = _draw_projection_op("sderf", 32, 16, "3", "orthogonal", 8, torch.device("cpu"))
    assert W2 is not W and torch.equal(W, W2)  # a fresh copy of the one draw
    W2.zero_()  # callers may modify theirs
    assert torch.equal(
        _draw_projection_op("sderf", 32, 16, "3", "orthogonal", 8, torch.device("cpu"))[0], W
    )


@pytest.mark.parametrize("name", ["positive", "sderf", "saderf"])
def test_bidirectional_compiles_fullgraph_and_matches_eager(name):
    q, k, v = _qkv()

    def f(q, k, v):
        return linear_attention(q, k, v, name, 32, random_state=0)

    _assert_compiled_matches_eager(f, q, k, v)


def test_check_finite_true_asserts_inside_compiled_graphs():
    q, k, v = _qkv()

    def f(q, k, v):
        return linear_attention(q, k, v, "positive", 32, random_state=0, check_finite=True)

    cf = torch.compile(f, fullgraph=True)
    cf(q, k, v)
    q[0, 0, 3, 1] = float("nan")
    with pytest.raises(RuntimeError, match="q contains NaN or inf"):
        cf(q, k, v)
    with pytest.raises(ValueError, match="q contains NaN or inf"):  # eager default
        linear_attention(q, k, v, "positive", 32, random_state=0)


@pytest.mark.parametrize("name", ["positive", "sderf"])
def test_module_compiles_fullgraph_in_eval_mode(name):
    torch.manual_seed(0)
    m = FavorAttention(16, 2, feature_map=name, n_features=32, random_state=0).eval()
    x = torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(1))
    ref, _ = m(x, x, x)
    out, _ = torch.compile(m, fullgraph=True)(x, x, x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["positive", "sderf", "elu"])
def test_causal_compiles_fullgraph_and_matches_eager(name):
    """The causal scan is one custom op in compiled graphs (its per-block path choice
    reads the data): same output and gradients as eager, with a padding mask."""
    from kernelkit.attention import attention_moments

    q, k, v = _qkv(L=45)
    mom = attention_moments(*_qkv(L=30, seed=5)[:2]) if name == "sderf" else None
    mask = torch.zeros(1, 2, 45, dtype=torch.bool)
    mask[..., 7] = True

    def f(q, k, v):
        return linear_attention(
            q,
            k,
            v,
            name,
            32,
            random_state=0,
            is_causal=True,
            moments=mom,
            key_padding_mask=mask,
            chunk_size=8,
        )

    _assert_compiled_matches_eager(f, q, k, v)


def test_decoding_step_compiles_fullgraph():
    from kernelkit.attention import init_decoding_state, linear_attention_step

    q, k, v = _qkv(L=6)
    state = init_decoding_state((1, 2), 16, "positive", 32, e=16, random_state=0)
    step = torch.compile(linear_attention_step, fullgraph=True)
    eager_state, outs, refs = state, [], []
    for t in range(6):
        o, state = step(q[..., t, :], k[..., t, :], v[..., t, :], state)
        r, eager_state = linear_attention_step(
            q[..., t, :], k[..., t, :], v[..., t, :], eager_state
        )
        outs.append(o)
        refs.append(r)
    torch.testing.assert_close(torch.stack(outs), torch.stack(refs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["positive", "sderf"])
def test_module_causal_compiles_fullgraph_in_eval_mode(name):
    torch.manual_seed(0)
    m = FavorAttention(16, 2, feature_map=name, n_features=32, random_state=0).eval()
    x = torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(1))
    ref, _ = m(x, x, x, is_causal=True)
    out, _ = torch.compile(m, fullgraph=True)(x, x, x, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
