"""A decoding state belongs to the feature parameters it was made with, as an inference
engineer serving linear attention relies on: ``FavorAttention.step`` refuses the state of
another module (other projections, or the same seed with other running statistics), and
``state.restore`` refuses a saved state of other features (another module, or this module
after a redraw or a statistics update), while the legitimate uses go on: clones, moved
states, restores into the same module after ``torch.save`` / ``weights_only`` loads,
modules copied with ``copy.deepcopy`` or reloaded from their own ``state_dict``, and
``state_dict``\\ s saved before the fingerprint existed. The check is a comparison of
Python strings at ``step`` (the fingerprint is taken once, when the features are made):
no tensor is hashed per token."""

from __future__ import annotations

import copy
import io

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from kernelkit.attention import (  # noqa: E402
    FavorAttention,
    init_decoding_state,
)
from kernelkit.attention import decoding as _decoding  # noqa: E402

E, H = 16, 2  # model dim, heads (head_dim 8)


def _seq(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _module(feature_map="sderf", random_state=0, data_seed=9, dtype=torch.float64):
    """A FavorAttention in eval mode; a fitted map gets running statistics from one
    causal training forward on data drawn with ``data_seed``. The in-projections are
    drawn from a fixed generator, so that two modules differ in their features only."""
    torch.manual_seed(1)
    m = FavorAttention(E, H, feature_map=feature_map, n_features=16, random_state=random_state)
    if feature_map == "sderf":
        m.train()
        with torch.no_grad():
            x = _seq(3, 10, E, seed=data_seed, dtype=torch.float32)
            m(x, x, x, is_causal=True)
    return m.to(dtype).eval()


def _save_load(sd):
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _prefilled(m, x, n=5):
    with torch.no_grad():
        return m.step(x[:, :n], x[:, :n], x[:, :n], m.init_state(x.shape[0]))[1]


# ---------------------------------------------------------------- 1. another module's
@pytest.mark.parametrize(
    ("other", "what"),
    [
        ({"random_state": 1}, "random projections"),  # another seed
        ({"data_seed": 3}, r"moments \(running statistics\)"),  # the same seed, other data
    ],
)
def test_step_refuses_the_state_of_another_module(other, what):
    """Module A stepping module B's (prefilled) state ran silently with B's features on
    A's projections of the tokens; now it raises, naming what differs and the remedy."""
    a, b = _module(), _module(**other)
    x = _seq(2, 8, E)
    st_b = _prefilled(b, x)
    with torch.no_grad(), pytest.raises(ValueError, match=rf"{what} differ.*init_state"):
        a.step(x[:, 5], x[:, 5], x[:, 5], st_b)
    with torch.no_grad():  # its own module steps it
        b.step(x[:, 5], x[:, 5], x[:, 5], st_b)


def test_step_refuses_a_functional_state_of_other_features_and_takes_equal_ones():
    """A state of ``init_decoding_state`` (no module) is checked by its features: the
    module's own projection gives the module's features, and so does its seed (drawn in
    float64, where the module's buffer holds the float32 rounding, which the fingerprint
    takes); another seed does not."""
    m = _module("positive")  # random_state 0, its projection drawn into float32
    x = _seq(2, E)
    kw = {"dtype": torch.float64}
    same = init_decoding_state((2, H), E // H, "positive", 16, projection=m.projection, **kw)
    seeded = init_decoding_state((2, H), E // H, "positive", 16, random_state=0, **kw)
    other = init_decoding_state((2, H), E // H, "positive", 16, random_state=5, **kw)
    mine = m.init_state(2)
    assert same.features == seeded.features == mine.features != other.features
    with torch.no_grad():
        y, _ = m.step(x, x, x, same)
        y_seed, _ = m.step(x, x, x, seeded)
        y_own, _ = m.step(x, x, x, mine)
        with pytest.raises(ValueError, match="random projections differ"):
            m.step(x, x, x, other)
    assert torch.equal(y, y_own)  # the same features, tensors and operations
    # the seeded projection differs from the float32 one by 6e-8 relative: log features
    # of size ~5 move by ~3e-7, the outputs by about as much; 1e-5 leaves a margin of 30
    torch.testing.assert_close(y_seed, y_own, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- 2. restore
def test_restore_refuses_a_saved_state_of_another_module_or_of_changed_features():
    """A saved state restored for another module, or for this module after a redraw or a
    statistics update (its new init_state has new features), was accepted."""
    m = _module()
    x = _seq(2, 8, E)
    saved = _save_load(_prefilled(m, x).state_dict())
    assert isinstance(saved["features"], str)
    with pytest.raises(ValueError, match="random projections differ"):
        _module(random_state=1).init_state(2).restore(saved)
    redrawn = copy.deepcopy(m)
    redrawn.redraw_features()
    with pytest.raises(ValueError, match=r"random projections differ.*init_state"):
        redrawn.init_state(2).restore(saved)
    updated = copy.deepcopy(m).train()
    with torch.no_grad():
        updated(x, x, x, is_causal=True)  # a statistics update, no redraw yet
    with pytest.raises(ValueError, match=r"moments \(running statistics\) differ"):
        updated.eval().init_state(2).restore(saved)
    # the functional form: other feature arguments
    st = init_decoding_state((1, 2), 8, "positive", 16, random_state=0)
    with pytest.raises(ValueError, match="random projections differ"):
        init_decoding_state((1, 2), 8, "positive", 16, random_state=1).restore(st.state_dict())
    with pytest.raises(ValueError, match="softmax scales differ"):
        init_decoding_state((1, 2), 8, "positive", 16, random_state=0, scale=0.5).restore(
            st.state_dict()
        )


def test_a_state_dict_without_features_still_restores():
    """A ``state_dict`` saved before the fingerprint (keys kvz, c, t), or with None,
    restores with the shape checks only (no check of the features is possible)."""
    m = _module()
    x = _seq(2, 8, E)
    st = _prefilled(m, x)
    old = {k: v for k, v in st.state_dict().items() if k != "features"}
    other = _module(random_state=1).init_state(2)  # accepted: nothing to compare
    for sd in (old, {**old, "features": None}):
        back = other.restore(_save_load(sd))
        assert back.t == 5 and torch.equal(back.kvz, st.kvz)
    with pytest.raises(TypeError, match="features"):
        other.restore({**old, "features": 3})


# ---------------------------------------------------------------- 3. legitimate uses
def test_clones_moved_and_restored_states_of_the_same_module_are_accepted():
    """Clone, ``to(device)``, ``to(dtype)`` of a float32 module's state stepped by the
    module converted with it, and a save / ``weights_only`` load restored into the
    module's new state: all accepted, with the outputs of the state itself."""
    m = _module()
    x = _seq(2, 8, E)
    st = _prefilled(m, x)
    with torch.no_grad():
        ref, _ = m.step(x[:, 5:], x[:, 5:], x[:, 5:], st)
        for s in (st.clone(), st.to("cpu"), copy.deepcopy(st), st.detach()):
            y, _ = m.step(x[:, 5:], x[:, 5:], x[:, 5:], s)
            assert torch.equal(y, ref)
        back = m.init_state(2).restore(_save_load(st.to(torch.float32).state_dict()))
        y, _ = m.step(x[:, 5:], x[:, 5:], x[:, 5:], back)
        # the saved sums went through float32: relative rounding 6e-8 of the state's
        # sums, ~1e-7 on outputs of size ~1; 1e-6 leaves a margin of 10
        torch.testing.assert_close(y, ref, rtol=1e-6, atol=1e-6)
    m32 = _module(dtype=torch.float32)  # float32 module, its state, then both float64
    x32 = x.float()
    st32 = _prefilled(m32, x32)
    m64 = copy.deepcopy(m32).double()
    with torch.no_grad():
        m64.step(x[:, 5], x[:, 5], x[:, 5], st32.to(dtype=torch.float64))
        # the fingerprint rounds to float32: the float64 module's new state takes it
        m64.init_state(2).restore(st32.state_dict())


def test_copied_and_reloaded_modules_step_and_restore_the_original_states():
    """``copy.deepcopy(m)`` and a module built with another seed and loaded with
    ``m.state_dict()`` (the same parameters) step m's states and restore its saved ones,
    with m's outputs."""
    m = _module()
    x = _seq(2, 8, E)
    st = _prefilled(m, x)
    torch.manual_seed(7)
    reloaded = FavorAttention(E, H, feature_map="sderf", n_features=16, random_state=3)
    reloaded = reloaded.double().eval()
    reloaded.load_state_dict(_save_load(m.state_dict()))
    saved = _save_load(st.state_dict())
    with torch.no_grad():
        ref, _ = m.step(x[:, 5:], x[:, 5:], x[:, 5:], st)
        for other in (copy.deepcopy(m), reloaded):
            y, _ = other.step(x[:, 5:], x[:, 5:], x[:, 5:], st)
            assert torch.equal(y, ref)
            y, _ = other.step(x[:, 5:], x[:, 5:], x[:, 5:], other.init_state(2).restore(saved))
            assert torch.equal(y, ref)
        m.load_state_dict(m.state_dict())  # reloaded in place: its states go on
        y, _ = m.step(x[:, 5:], x[:, 5:], x[:, 5:], st)
    assert torch.equal(y, ref)


def test_a_module_steps_its_own_state_after_its_features_changed():
    """A state keeps the features it was made with: after a redraw and a statistics
    update of its own module (or a copy's), stepping it goes on, as before."""
    m = _module()
    x = _seq(2, 8, E)
    st = _prefilled(m, x)
    with torch.no_grad():
        ref, _ = m.step(x[:, 5:], x[:, 5:], x[:, 5:], st)
        m.train()
        m(x, x, x, is_causal=True)  # statistics update
        m.redraw_features()
        m.eval()
        assert m.init_state(2).features != st.features
        y, _ = m.step(x[:, 5:], x[:, 5:], x[:, 5:], st)
        y2, _ = copy.deepcopy(m).step(x[:, 5:], x[:, 5:], x[:, 5:], st)
    assert torch.equal(y, ref) and torch.equal(y2, ref)


def test_beams_of_per_sequence_moments_drop_the_fingerprint_and_module_beams_keep_it():
    """``index_select`` keeps the fingerprint where the feature parameters are shared by
    the batch (a module's), and drops it (None: not checked) where they are selected
    per sequence."""
    m = _module()
    x = _seq(2, 8, E)
    st = _prefilled(m, x)
    assert st.index_select(0, torch.tensor([1, 1, 0])).features == st.features
    mom = m._running_moments()
    fields = (mom.mean_x, mom.second_x, mom.mean_y, mom.second_y)
    per_seq = type(mom)(*(t.expand(2, *t.shape) for t in fields))  # (2, H, ...)
    f = init_decoding_state((2, H), E // H, "sderf", 16, projection=m.projection, moments=per_seq)
    assert f.features is not None and f.index_select(0, torch.tensor([0])).features is None


# ---------------------------------------------------------------- 4. cost
def test_steps_hash_nothing_per_token(monkeypatch):
    """The fingerprint is taken when the features are made: stepping the module's own
    state hashes nothing, and a reloaded module (another module object) hashes its own
    features once, then compares strings at every token."""
    calls = []
    real = _decoding._digest
    monkeypatch.setattr(_decoding, "_digest", lambda ts, *a: calls.append(1) or real(ts, *a))
    m = _module()
    reloaded = copy.deepcopy(m)
    reloaded._decoding_token = "another module object"  # as one built and then loaded
    x = _seq(2, 8, E)
    with torch.no_grad():
        st = m.init_state(2)
        st_r = m.init_state(2)
        n = len(calls)
        for t in range(6):
            _, st = m.step(x[:, t], x[:, t], x[:, t], st)
        assert len(calls) == n  # its own state: no hash at all
        for t in range(6):
            _, st_r = reloaded.step(x[:, t], x[:, t], x[:, t], st_r)
    assert len(calls) - n <= 2  # the reloaded module's projection and moments, once


def test_compiled_step_of_a_state_of_equal_features_has_no_graph_break():
    """``torch.compile(fullgraph=True)`` of ``step`` with a state of another module
    object of the same features (a reloaded copy's): the comparison is of Python
    strings, so it traces, and equals eager."""
    m = _module("positive", dtype=torch.float32)
    other = copy.deepcopy(m)
    other._decoding_token = "another module object"
    x = _seq(2, 4, E, dtype=torch.float32)
    torch._dynamo.reset()
    try:
        # (backend "eager": dynamo's tracing, where a graph break would show, alone)
        cstep = torch.compile(
            lambda x_t, s: m.step(x_t, x_t, x_t, s), fullgraph=True, backend="eager"
        )
        with torch.no_grad():
            st = se = other.init_state(2)
            for t in range(2):
                y, st = cstep(x[:, t], st)
                r, se = m.step(x[:, t], x[:, t], x[:, t], se)
                # the same float32 operations, traced: to float32 rounding (eps 1.2e-7
                # relative on ratios of 16 terms of size <= 1), a margin of ~10 at 1e-5
                torch.testing.assert_close(y, r, rtol=1e-5, atol=1e-5)
    finally:
        torch._dynamo.reset()


def test_saving_the_module_after_init_state_adds_nothing_and_its_states_still_step():
    # the module keeps its fingerprint with references to the buffers it was taken from;
    # torch.save of the whole module must not write that (nor copy.deepcopy copy it),
    # and the loaded module still steps the states of the original (same features)
    m = FavorAttention(16, 2, feature_map="sderf", n_features=8, random_state=0)

    def saved(module):
        buf = io.BytesIO()
        torch.save(module, buf)
        return buf

    before = saved(m).getbuffer().nbytes
    state = m.init_state(1)
    after = saved(m)
    assert after.getbuffer().nbytes == before
    after.seek(0)
    loaded = torch.load(after, weights_only=False)
    x = torch.randn(1, 1, 16)
    out, _ = loaded.step(x, x, x, state)
    ref, _ = m.step(x, x, x, state)
    torch.testing.assert_close(out, ref)
