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
    with rb.writer(chunks=CHUNKS) as w:
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


def test_error_inside_the_block_keeps_only_committed_episodes():
    rb = ReplayBuffer.create_empty("zarr")
    with pytest.raises(RuntimeError):
        with rb.writer(chunks={"x": (100, 2)}) as w:
            w.add_episode({"x": np.zeros((3, 2), "f4")})
            raise RuntimeError("recording failed")
    assert rb["x"].shape[0] == rb.n_steps  # nothing past the committed episodes
