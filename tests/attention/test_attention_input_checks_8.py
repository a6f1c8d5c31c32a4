"""Inputs the attention API took without naming them: NaN in given ``moments`` (blamed on
the query / key norms, or a LAPACK error from ``eigh``), finite inputs whose features
overflow with ``trig`` / ``hybrid_angular`` (a silent NaN output), a non-bool
``inplace`` (read by its truthiness) and a bad ``device`` string for
``init_decoding_state`` (torch's parser error)."""

import pytest
import torch

from kernelkit.attention import (
    attention_moments,
    init_decoding_state,
    linear_attention,
    linear_attention_step,
)


def _qkv(L=6):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, 2, L, 4, generator=g) for _ in range(3))


def _bad_moments(field):
    g = torch.Generator().manual_seed(1)
    mom = attention_moments(torch.randn(2, 10, 4, generator=g), torch.randn(2, 10, 4, generator=g))
    getattr(mom, field).view(-1)[0] = float("nan")
    return mom


@pytest.mark.parametrize("field", ["mean_x", "second_x", "mean_y", "second_y"])
@pytest.mark.parametrize("name", ["gerf", "saderf", "aderf", "sderf"])
@pytest.mark.parametrize("causal", [True, False])
def test_nan_moments_are_named(name, field, causal):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=rf"^moments\.{field} contains NaN or inf"):
        linear_attention(
            q, k, v, name, 16, is_causal=causal, moments=_bad_moments(field), random_state=0
        )


@pytest.mark.parametrize("name", ["gerf", "sderf"])
def test_nan_moments_are_named_by_init_decoding_state(name):
    with pytest.raises(ValueError, match=r"^moments\.second_y contains NaN or inf"):
        init_decoding_state((1, 2), 4, name, 16, moments=_bad_moments("second_y"), random_state=0)


def test_nan_moments_unchecked_with_check_finite_false():
    # check_finite=False never checks: the moments are used as given (no error here)
    q, k, v = _qkv()
    out = linear_attention(
        q, k, v, "gerf", 16, moments=_bad_moments("mean_x"), random_state=0, check_finite=False
    )
    assert out.shape == v.shape


@pytest.mark.parametrize(("name", "side"), [("trig", "k"), ("hybrid_angular", "q"), ("trig", "q")])
def test_finite_inputs_whose_features_overflow_raise(name, side):
    q, k, v = _qkv()
    q, k = (q * 1e19, k) if side == "q" else (q, k * 1e19)
    out = None
    try:
        out = linear_attention(q, k, v, name, 64, random_state=0)
    except ValueError as exc:
        assert "not finite although q, k, v are" in str(exc)
    if out is not None:  # no error: then the output must be finite
        assert torch.isfinite(out).all()


def test_trig_overflow_is_not_checked_with_check_finite_false():
    q, k, v = _qkv()
    out = linear_attention(q, k * 1e19, v, "trig", 64, random_state=0, check_finite=False)
    assert out.shape == v.shape


@pytest.mark.parametrize("flag", ["no", 0.0, 1, None, torch.tensor(True)])
def test_step_inplace_must_be_a_bool(flag):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 4, generator=g) for _ in range(3))
    st = init_decoding_state((1, 2), 4, "positive", 8, random_state=0)
    with pytest.raises(TypeError, match="inplace must be a bool"):
        linear_attention_step(q, k, v, st, inplace=flag)
    assert not st._stale()


@pytest.mark.parametrize("flag", ["no", 0.0, None])
def test_reset_inplace_must_be_a_bool(flag):
    st = init_decoding_state((1, 2), 4, "positive", 8, random_state=0)
    with pytest.raises(TypeError, match="inplace must be a bool"):
        st.reset(torch.tensor([True]), inplace=flag)


@pytest.mark.parametrize(
    ("device", "error"), [("gpu", ValueError), (3.5, TypeError), ([0], TypeError)]
)
def test_init_decoding_state_names_a_bad_device(device, error):
    with pytest.raises(error, match="device"):
        init_decoding_state((1, 2), 4, "positive", 8, device=device)
