"""Review of the reuse of fits for caller-given moments: cases where a reused build must
behave as a new one."""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    Moments,
    _maps,
    attention_moments,
    linear_attention,
)


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch):
    monkeypatch.setattr(_maps, "_BUILT", OrderedDict())


def _data(seed=0, L=24):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, L, 8, generator=g, dtype=torch.float64) for _ in range(3))
    calib = attention_moments(*(torch.randn(2, 3, 32, 8, generator=g) for _ in range(2)))
    return q, k, v, calib


def _fields(m):
    return (m.mean_x, m.second_x, m.mean_y, m.second_y)


@pytest.mark.parametrize("causal", [True, False])
def test_moments_that_require_grad_train_call_after_call(causal):
    # moments that require grad (e.g. computed from learnable calibration inputs) give a
    # fit with an autograd graph on the bidirectional path; a kept build reused by the
    # next training step ran backward through the freed graph of the first step
    q, k, v, calib = _data()
    mom = Moments(*(t.clone().requires_grad_(True) for t in _fields(calib)))
    kw = dict(feature_map="sderf", n_features=16, is_causal=causal, random_state=0)
    with warnings.catch_warnings():
        # kernelkit's own lookup must not warn (torch warns on a scalar of such a tensor)
        warnings.filterwarnings("error", message="Converting a tensor with requires_grad")
        for _ in range(2):
            qg = q.clone().requires_grad_(True)
            linear_attention(qg, k, v, moments=mom, **kw).sum().backward()
            assert qg.grad is not None and torch.isfinite(qg.grad).all()


def test_a_build_evicted_between_lookup_and_reuse(monkeypatch):
    # another thread may evict the entry found (a 17th build) while its tensors are
    # compared (torch.equal releases the GIL): move_to_end then raised KeyError
    q, k, v, calib = _data()
    kw = dict(feature_map="sderf", n_features=16, is_causal=True, random_state=0)
    ref = linear_attention(q, k, v, moments=calib, **kw)
    real = _maps._equal

    def evicting(a, b):
        _maps._BUILT.clear()  # what a concurrent caller's eviction does
        return real(a, b)

    monkeypatch.setattr(_maps, "_equal", evicting)
    out = linear_attention(q, k, v, moments=calib, **kw)
    assert torch.equal(out, ref)  # the same parameters: bit for bit


def test_a_modules_padded_batch_moments_are_not_kept():
    # padded self-attention fits each batch's own moments (N, H, ...): never equal from
    # one batch to the next, so keeping them held up to 16 per-batch fits (each N * H
    # projections of d x M in float64) that no call reuses
    torch.manual_seed(0)
    attn = FavorAttention(16, 2, feature_map="sderf", n_features=16).eval()
    mask = torch.zeros(3, 10, dtype=torch.bool)
    mask[0, 7:] = True
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(3, 10, 16)
            attn(x, x, x, key_padding_mask=mask)
    assert len(_maps._BUILT) == 0


def test_concurrent_calls_get_their_own_builds_and_the_cache_stays_bounded():
    # two threads, 20 distinct calibration moments (more than the 16 kept, so entries
    # are evicted while the other thread looks up): every output is bit for bit that of
    # a fit of its own moments (fits are deterministic, so equality is exact)
    q, k, v, _ = _data(L=8)
    g = torch.Generator().manual_seed(1)
    cal = [
        attention_moments(*(torch.randn(2, 3, 16, 8, generator=g) for _ in range(2)))
        for _ in range(20)
    ]
    kw = dict(feature_map="sderf", n_features=8, is_causal=True, random_state=0)
    refs = [linear_attention(q, k, v, moments=c, **kw) for c in cal]
    bad, errors = [], []

    def work(idx):
        try:
            for _ in range(2):
                for i in idx:
                    if not torch.equal(linear_attention(q, k, v, moments=cal[i], **kw), refs[i]):
                        bad.append(i)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(list(range(j, 20, 2)),)) for j in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and bad == []
    assert len(_maps._BUILT) == _maps._BUILT_MAX
