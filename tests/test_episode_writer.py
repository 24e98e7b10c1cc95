"""EpisodeWriter: same buffer as add_episode, episodes commit about once per stored object."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer

CHUNKS = {"obs": (1000, 3), "img": (8, 4, 4, 3)}  # a long number chunk beside short image chunks


@settings(max_examples=15, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=25), backend=st.sampled_from(["numpy", "zarr"]))
def test_writer_equals_add_episode_and_stages_little(lengths, backend):
    rng = np.random.default_rng(len(lengths))
    eps = [{"obs": rng.random((n, 3)).astype("f4"), "img": rng.integers(0, 255, (n, 4, 4, 3), dtype=np.uint8)}
           for n in lengths]
    ref = ReplayBuffer.create_empty(backend)
    for e in eps:
        ref.add_episode(e, chunks=CHUNKS)
    rb = ReplayBuffer.create_empty(backend)
    with rb.writer(chunks=CHUNKS, commit_interval=0) as w:
        for e in eps:
            w.add_episode(e)
            staged_rows = (w._ends[-1] - rb.n_steps) if w.n_staged_episodes else 0
            # the 1000-row number chunk does not hold commits back: about one image chunk is staged
            assert staged_rows < CHUNKS["img"][0] + max(lengths)
    np.testing.assert_array_equal(rb.episode_ends, ref.episode_ends)
    for k in ref.keys():
        np.testing.assert_array_equal(rb[k][:], ref[k][:])


def test_writer_rejects_bad_episode_and_stages_nothing():
    rb = ReplayBuffer.create_empty("zarr")
    with rb.writer() as w:
        w.add_episode({"x": np.zeros((3, 2), "f4")})
        with pytest.raises(ValueError):
            w.add_episode({"x": np.zeros((3, 5), "f4")})
        assert w.n_staged_episodes + rb.n_episodes == 1
    assert rb.n_episodes == 1 and rb.n_steps == 3


def test_a_failing_flush_leaves_nothing_past_the_committed_episodes(monkeypatch):
    rb = ReplayBuffer.create_empty("zarr")
    with pytest.raises(RuntimeError):
        with rb.writer(chunks={"x": (100, 2)}) as w:
            w.add_episode({"x": np.zeros((3, 2), "f4")})
            monkeypatch.setattr(rb.store, "write", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
            raise RuntimeError("recording failed")
    monkeypatch.undo()
    assert rb.n_episodes == 0 and rb["x"].shape[0] == rb.n_steps == 0


def test_an_interrupted_block_keeps_every_episode_already_added():
    rb = ReplayBuffer.create_empty("zarr")
    with pytest.raises(KeyboardInterrupt):
        with rb.writer(chunks={"x": (100, 2)}) as w:
            for i in range(3):
                w.add_episode({"x": np.full((4, 2), i, "f4")})
            raise KeyboardInterrupt
    assert rb.n_episodes == 3
    np.testing.assert_array_equal(rb.get_episode(2)["x"], np.full((4, 2), 2, "f4"))
