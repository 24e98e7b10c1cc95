"""Batch outputs reused once nobody holds them (``sampling/arena.py``), and the once-a-batch image
conversion (``torch/images.py``).

The arena's promise is checked against a model of what the caller holds: an array handed out never
shares memory with anything the caller still holds (an array, a view of it, a tensor made from it),
and an array every holder dropped is handed out again.  The conversion is checked bit for bit
against torch's own ``x.float() / 255`` and ``permute``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer, SequenceSampler, WindowSampler
from replaybuf_core.sampling.arena import OutputArena

SHAPES = [(64, 32, 32, 3), (16, 64, 64), (300, 1000)]

ops = st.lists(st.tuples(st.sampled_from(["take", "view", "drop"]), st.integers(0, 2), st.integers(0, 50)),
               max_size=40)


@settings(max_examples=200, deadline=None)
@given(ops=ops, slots=st.integers(1, 3))
def test_an_array_handed_out_never_overlaps_one_still_held(ops, slots):
    arena = OutputArena(slots=slots, min_bytes=1)
    held: list = []  # what the caller holds: arrays and views of them
    for op, shape_i, pick in ops:
        if op == "take":
            a = arena.empty(SHAPES[shape_i], np.float32)
            assert a.shape == SHAPES[shape_i] and a.dtype == np.float32 and a.flags.c_contiguous
            assert not any(np.shares_memory(a, h) for h in held), "handed out memory the caller still holds"
            a[...] = len(held)  # the caller writes its batch
            held.append(a)
        elif op == "view" and held:
            held.append(held[pick % len(held)][1:])  # a view keeps its base alive
        elif op == "drop" and held:
            held.pop(pick % len(held))
    del held
    a = None  # noqa: F841  (the loop's last array, held by this name, would keep its slot busy: a flaky reuse below)
    first = arena.empty(SHAPES[0], np.float32)
    second = arena.empty(SHAPES[0], np.float32)
    assert not np.shares_memory(first, second)
    pointer = first.ctypes.data
    del first
    assert arena.empty(SHAPES[0], np.float32).ctypes.data == pointer  # dropped by all: reused


def test_a_tensor_made_from_a_batch_keeps_it_from_being_reused():
    torch = pytest.importorskip("torch")
    arena = OutputArena(slots=1, min_bytes=1)
    a = arena.empty((8, 1024), np.float32)
    pointer = a.ctypes.data
    t = torch.from_numpy(a)[2:]  # only a view of a tensor is left
    del a
    b = arena.empty((8, 1024), np.float32)
    assert not np.shares_memory(b, t.numpy())
    del t
    import gc

    gc.collect()
    assert arena.empty((8, 1024), np.float32).ctypes.data == pointer  # the tensor is gone: the slot is free


@pytest.mark.parametrize("sampler", ["window", "sequence"])
def test_a_batch_the_caller_keeps_is_never_written_over(tmp_path, sampler):
    rng = np.random.default_rng(3)
    eps = [{"img": rng.integers(0, 256, (n, 24, 32, 3), dtype=np.uint8), "act": rng.random((n, 2), dtype=np.float32)}
           for n in (30, 41, 25)]
    with ReplayBuffer.create_empty("zarr", tmp_path / "s.zarr") as rb:
        for ep in eps:
            rb.add_episode(ep)
    rb = ReplayBuffer.create_from_path(tmp_path / "s.zarr")
    s = (WindowSampler(rb, {"img": [-1, 0], "act": list(range(8))}) if sampler == "window"
         else SequenceSampler(rb, sequence_length=6, pad_before=1, pad_after=2))
    s.arena.min_bytes = 1  # every output through the arena
    kept = [s.sample_batch(rng.integers(0, len(s), 48)) for _ in range(5)]
    copies = [{k: v.copy() for k, v in b.items()} for b in kept]
    for _ in range(6):  # more batches than the arena has slots, dropped at once
        s.sample_batch(rng.integers(0, len(s), 48))
    for b, c in zip(kept, copies):
        for k in b:
            np.testing.assert_array_equal(b[k], c[k], err_msg=k)
    # and what every holder dropped is reused
    first = s.sample_batch(np.arange(48))["img"]
    pointer = first.ctypes.data
    del first
    assert s.sample_batch(np.arange(48))["img"].ctypes.data == pointer


@pytest.mark.parametrize("channels_first", [True, False])
@pytest.mark.parametrize("to_float", [True, False])
def test_image_conversion_equals_torchs_own(channels_first, to_float):
    torch = pytest.importorskip("torch")
    from replaybuf_core.torch.images import PARALLEL_VALUES, convert_images

    rng = np.random.default_rng(0)
    for shape in [(2, 3, 16, 17, 3), (256, 1, 4, 5, 3), (1, 2, 1, 256, 1),
                  (4, 1, 64, 1 + PARALLEL_VALUES // 256, 4)]:  # the last on the conversion threads
        x = rng.integers(0, 256, shape, dtype=np.uint8)
        x.reshape(-1)[:256] = np.arange(256)  # every value once
        batch = {"cam": x.copy()}
        convert_images(batch, ["cam"], channels_first, to_float, arena=OutputArena(min_bytes=1))
        want = torch.from_numpy(x)
        if channels_first:
            want = want.permute(0, 1, 4, 2, 3)
        if to_float:
            want = want.float() / 255
        got = torch.from_numpy(np.asarray(batch["cam"]))
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want.contiguous())


@pytest.mark.parametrize("channels_first", [True, False])
@pytest.mark.parametrize("to_float", [True, False])
@pytest.mark.parametrize("shared", [False, True])
def test_frames_taken_and_converted_in_one_pass_equal_torchs_own(channels_first, to_float, shared):
    """``take_converted``: ``out[at] = convert(src[rows])`` (the streaming dataset's gather) equals
    torch's conversion of NumPy's gather, on one thread and on the conversion threads."""
    torch = pytest.importorskip("torch")
    from replaybuf_core.torch.images import PARALLEL_VALUES, converted_empty, take_converted

    rng = np.random.default_rng(1)
    for frame, n in [((4, 5, 3), 7), ((1, 256, 1), 3), ((64, 1 + PARALLEL_VALUES // 512, 4), 6)]:
        src = rng.integers(0, 256, (n,) + frame, dtype=np.uint8)
        src.reshape(-1)[:256] = np.arange(256)
        rows = rng.integers(0, n, (5, 2))
        value, out = converted_empty(rows.shape, frame, channels_first, to_float, shared=shared,
                                     arena=OutputArena(min_bytes=1))
        flat = out.reshape((-1,) + out.shape[2:])
        at = rng.permutation(rows.size)  # written in any order
        take_converted(src, rows.reshape(-1)[at.argsort()][at.argsort().argsort()], flat, np.arange(rows.size),
                       channels_first, to_float)
        want = torch.from_numpy(src[rows])
        if channels_first:
            want = want.permute(0, 1, 4, 2, 3)
        if to_float:
            want = want.float() / 255
        got = value if shared else torch.from_numpy(value)
        assert isinstance(value, torch.Tensor) == shared and got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want.contiguous())
        flat[...] = 0
        take_converted(src, rows.reshape(-1)[at], flat, at, channels_first, to_float)  # scattered places
        assert torch.equal(got, want.contiguous())
    with pytest.raises(ValueError, match="outside"):
        take_converted(src, np.array([n]), flat, np.array([0]), channels_first, to_float)
