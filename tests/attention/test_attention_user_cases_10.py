"""Session 30 new-user hunt of the functional attention API."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernelkit.attention import (  # noqa: E402
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)

HUGE = "exceeds 1e30"


def _huge_key_inputs():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 4), torch.randn(1, 2, 4), torch.randn(1, 2, 2)
    k[0, 0] *= 1e16  # finite, |k|^2 ~ 1e32: its row term is below the masked keys' -1e30
    return q, k, v


def test_a_huge_key_is_not_silently_left_out():
    # causal, and bidirectional with a padding mask, gave zeros where only that key is
    # visible: its log features ranked below the -1e30 of masked keys and empty prefixes
    q, k, v = _huge_key_inputs()
    kw = {"feature_map": "positive", "n_features": 16, "random_state": 0}
    with pytest.raises(ValueError, match=HUGE):
        linear_attention(q, k, v, is_causal=True, **kw)
    with pytest.raises(ValueError, match=HUGE):
        linear_attention(q, k, v, key_padding_mask=torch.tensor([[False, True]]), **kw)
    # without a mask the bidirectional stream has no -1e30 and gets it right: the only
    # key of softmax weight ~1 is the huge one
    out = linear_attention(q[:, :1], k[:, :1], v[:, :1], **kw)
    torch.testing.assert_close(out, v[:, :1])
    # a huge key that is masked is not an error, and is left out
    keep_second = torch.tensor([[True, False]])
    for causal in (False, True):
        out = linear_attention(q, k, v, is_causal=causal, key_padding_mask=keep_second, **kw)
        torch.testing.assert_close(out[:, 1], v[:, 1])


def test_a_huge_key_in_a_decoding_step_raises():
    q, k, v = _huge_key_inputs()

    def state():
        return init_decoding_state((1,), 4, "positive", 16, e=2, random_state=0)

    with pytest.raises(ValueError, match=HUGE):
        linear_attention_step(q[:, 0], k[:, 0], v[:, 0], state())  # one token
    with pytest.raises(ValueError, match=HUGE):
        linear_attention_step(q, k, v, state())  # a prefill block
    out, _ = linear_attention_step(q, k, v, state(), key_padding_mask=torch.tensor([[True, False]]))
    torch.testing.assert_close(out[:, 1], v[:, 1])


def test_moments_of_a_larger_batch_are_refused_naming_moments():
    # they passed the broadcast check and failed later with a RuntimeError of expand
    q, k, v = (torch.randn(2, 8, 4) for _ in range(3))
    mom = attention_moments(q, k)  # batch (2,)
    for causal in (False, True):
        with pytest.raises(ValueError, match=r"moments with batch shape \(2,\)"):
            linear_attention(
                q[:1], k[:1], v[:1], "sderf", 16, moments=mom, random_state=0, is_causal=causal
            )


@pytest.mark.parametrize(
    ("name", "projection"),
    [
        ("positive", np.zeros((0, 4))),
        ("trig", np.zeros((0, 4))),  # gave zeros
        ("hybrid_angular", {"W": np.zeros((0, 4)), "T": np.ones((8, 4))}),
        ("hybrid_angular", {"W": np.ones((2, 4)), "T": np.zeros((0, 4))}),
    ],
)
def test_an_empty_projection_is_refused_naming_it(name, projection):
    q, k, v = (torch.randn(6, 4) for _ in range(3))
    with pytest.raises(ValueError, match=r"projection.*>= 1"):
        linear_attention(q, k, v, name, 8, projection=projection)


def test_attention_moments_that_overflow_raise():
    # finite float32 queries whose squares overflow gave inf moments without a word
    q, k = torch.randn(8, 4) * 1e20, torch.randn(8, 4)
    with pytest.raises(ValueError, match="second moments is not finite although q, k"):
        attention_moments(q, k)
    mom = attention_moments(q.double(), k.double())  # float64 holds them
    assert torch.isfinite(mom.second_x).all()


@pytest.mark.parametrize("bad", [None, "abc", np.array([object()] * 4)])
def test_a_non_numeric_query_names_its_own_type(bad):
    k = v = torch.randn(6, 4)
    what = "ndarray of dtype object" if isinstance(bad, np.ndarray) else type(bad).__name__
    with pytest.raises(TypeError, match=f"q must be a tensor or a numeric array, got {what}"):
        linear_attention(bad, k.numpy(), v.numpy())


def test_a_huge_key_that_other_keys_outweigh_is_no_error():
    # the check raised wherever a visible key was that large, also where an earlier or
    # another visible key outweighs it (its estimator weight is exp(-1e31) = 0, as the
    # plain bidirectional pass computes): an all-False mask must change nothing
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 6, 4, dtype=torch.float64) for _ in range(3))
    k[0, 3] *= 1e16
    kw = {"feature_map": "positive", "n_features": 64, "random_state": 0}
    ref = linear_attention(q, k, v, **kw)
    none_masked = torch.zeros(1, 6, dtype=torch.bool)
    torch.testing.assert_close(linear_attention(q, k, v, key_padding_mask=none_masked, **kw), ref)
    last = none_masked.clone()
    last[0, 5] = True
    torch.testing.assert_close(
        linear_attention(q, k, v, key_padding_mask=last, **kw),
        linear_attention(q, k[:, :5], v[:, :5], **kw),
    )
    causal = linear_attention(q, k, v, is_causal=True, **kw)
    assert torch.isfinite(causal).all()
    st = init_decoding_state((1,), 4, "positive", 64, e=4, random_state=0, dtype=torch.float64)
    outs = []
    for t in range(6):
        o, st = linear_attention_step(q[:, t], k[:, t], v[:, t], st)
        outs.append(o)
    torch.testing.assert_close(torch.stack(outs, dim=1), causal)


def test_decoding_state_refuses_an_empty_projection_and_takes_unit_batch_moments():
    with pytest.raises(ValueError, match=r"projection.*>= 1"):
        init_decoding_state((1,), 4, "positive", 8, e=4, projection=np.zeros((0, 4)))
    # moments of q[None]: the extra leading size-1 dim is dropped, as before
    q, k, v = (torch.randn(2, 8, 4, dtype=torch.float64) for _ in range(3))
    mom = attention_moments(q[None], k[None])
    ref = linear_attention(
        q, k, v, "sderf", 16, moments=attention_moments(q, k), random_state=0, is_causal=True
    )
    got = linear_attention(q, k, v, "sderf", 16, moments=mom, random_state=0, is_causal=True)
    torch.testing.assert_close(got, ref)
    st = init_decoding_state(
        (2,), 4, "sderf", 16, e=4, moments=mom, random_state=0, dtype=torch.float64
    )
    out, _ = linear_attention_step(q, k, v, st)
    torch.testing.assert_close(out, ref)


def test_a_fully_padded_sequence_with_a_huge_padded_key_gives_zeros():
    # its key 0 stood in for the missing first visible key: the check raised
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 6, 4) for _ in range(3))
    k[1, 0] *= 1e16
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1] = True
    kw = {"feature_map": "positive", "n_features": 16, "random_state": 0}
    out = linear_attention(q, k, v, is_causal=True, key_padding_mask=pad, **kw)
    assert torch.all(out[1] == 0)
    torch.testing.assert_close(
        out[0], linear_attention(q[:1], k[:1], v[:1], is_causal=True, **kw)[0]
    )


def test_hand_built_moments_whose_fields_broadcast_get_the_batch_error():
    # the leading size-1 dims were dropped from every field by mean_x's count: a raw
    # RuntimeError of reshape
    from kernelkit.features.favor import Moments

    q, k, v = (torch.randn(2, 8, 4, dtype=torch.float64) for _ in range(3))
    mom = Moments(
        torch.zeros(1, 2, 4, dtype=torch.float64),
        torch.ones(4, dtype=torch.float64),
        torch.zeros(1, 2, 4, dtype=torch.float64),
        torch.ones(4, dtype=torch.float64),
    )
    with pytest.raises(ValueError, match="moments with batch shape"):
        linear_attention(q, k, v, "gerf", 16, moments=mom, random_state=0)
