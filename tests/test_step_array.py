"""``rb[key]`` on an opened store: a :class:`StepArray` that indexes exactly like the NumPy array of
the episodes added (the model: the arrays handed to ``add_episode``, concatenated), before and after
``warm``, and writes rows back through the backend; on a read-only buffer a key in memory (warmed, or
small) is a read-only ``np.ndarray`` itself, as diffusion_policy's normaliser needs."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.errors import ReadOnlyError
from replaybuf_core.store import step_array
from replaybuf_core.store.step_array import StepArray

N = 37  # steps in the store: 3 episodes, chunks of 8 rows (the edges fall inside chunks)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    rng = np.random.default_rng(5)
    path = tmp_path_factory.mktemp("steps") / "s.zarr"
    rb = ReplayBuffer.create_empty("zarr", path)
    eps = [{"obs": rng.random((n, 3, 2), dtype=np.float32), "img": rng.integers(0, 256, (n, 6, 5, 3), dtype=np.uint8)}
           for n in (12, 9, 16)]
    for ep in eps:
        rb.add_episode(ep, chunks={"obs": (8, 3, 2), "img": (8, 6, 5, 3)})
    rb.close()
    model = {k: np.concatenate([e[k] for e in eps]) for k in ("obs", "img")}
    return path, model


steps = st.integers(-N, N - 1)
slices = st.builds(slice, st.none() | st.integers(-N - 3, N + 3), st.none() | st.integers(-N - 3, N + 3),
                   st.none() | st.sampled_from([1, 2, 5, -1, -3]))
rows = st.lists(steps, max_size=6).map(lambda r: np.array(r, dtype=np.int64))
masks = st.lists(st.booleans(), min_size=N, max_size=N).map(np.array)
firsts = steps | slices | rows | masks | st.just(Ellipsis)
index = firsts | st.tuples(firsts, st.integers(0, 2)) | st.tuples(firsts, st.just(Ellipsis), st.integers(0, 1))


@settings(max_examples=150, deadline=None)
@given(idx=index, key=st.sampled_from(["obs", "img"]), warm=st.booleans(), small=st.booleans())
def test_step_arrays_index_like_numpy(stored, idx, key, warm, small):
    path, model = stored
    with mock.patch.object(step_array, "AUTO_PIN_KEY_BYTES", step_array.AUTO_PIN_KEY_BYTES if small else 0):
        rb = ReplayBuffer.create_from_path(path)
        if warm:
            rb.warm([key])
        arr = rb[key]
    # in memory (warmed, or small numbers: not camera frames): the read-only ndarray itself; else read lazily
    assert type(arr) is (np.ndarray if warm or (small and key == "obs") else StepArray)
    assert arr.shape == model[key].shape and arr.dtype == model[key].dtype
    assert len(arr) == N and arr.ndim == model[key].ndim
    try:
        want = model[key][idx]
    except IndexError:  # NumPy refuses it (an index past a step axis): so must we
        with pytest.raises(IndexError):
            arr[idx]
        return
    got = arr[idx]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == model[key].dtype


def test_out_of_range_and_bad_indices_name_the_key(stored, monkeypatch):
    path, model = stored
    monkeypatch.setattr(step_array, "AUTO_PIN_KEY_BYTES", 0)  # read lazily, through a StepArray
    rb = ReplayBuffer.create_from_path(path)
    with pytest.raises(IndexError, match="step 37 is out of range for data key 'obs' of 37 steps"):
        rb["obs"][37]
    with pytest.raises(IndexError, match="'img'"):
        rb["img"][[0, -38]]
    with pytest.raises(TypeError, match="'obs'"):
        rb["obs"][1.5]
    with pytest.raises(ReadOnlyError):
        rb["obs"][0] = 0
    np.testing.assert_array_equal(np.asarray(rb["obs"]), model["obs"])
    assert rb["obs"].chunks == (8, 3, 2)  # the native array's attributes come through
    with pytest.raises(AttributeError, match=r"rb\['obs'\] \(a StepArray.*no attribute 'type'.*np.asarray"):
        rb["obs"].type  # diffusion_policy's normaliser on a key too big to be loaded: told what to do
    assert sorted(rb["data"]) == ["img", "obs"] and isinstance(rb["data"]["img"], StepArray)  # rb['data'][key]
    np.testing.assert_array_equal(rb.meta["episode_ends"][:], [12, 21, 37])


def test_assignment_writes_rows_through_the_backend(stored, tmp_path):
    import shutil

    path, model = stored
    shutil.copytree(path, tmp_path / "w.zarr")
    want = model["obs"].copy()
    with ReplayBuffer(tmp_path / "w.zarr") as rb:
        before = rb["obs"][5:20]  # read (and cache) first: the write must not leave stale chunks behind
        np.testing.assert_array_equal(before, want[5:20])
        rb["obs"][5:20] = -1.0
        rb["obs"][30, 1] = 7.0
        rb["obs"][2:4, :, 0] = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
        want[5:20] = -1.0
        want[30, 1] = 7.0
        want[2:4, :, 0] = [[1, 2, 3], [4, 5, 6]]
        np.testing.assert_array_equal(rb["obs"][:], want)
        with pytest.raises(TypeError, match="int or a slice of step 1"):
            rb["obs"][::2] = 0
        np.testing.assert_array_equal(rb["obs"][:], want)  # the refused write changed nothing
    import zarr

    np.testing.assert_array_equal(zarr.open_array(tmp_path / "w.zarr/data/obs", mode="r")[:], want)  # on disk


def test_in_memory_buffers_hand_out_their_numpy_arrays():
    rb = ReplayBuffer.create_empty_numpy()
    rb.add_episode({"a": np.arange(4.0)})
    assert type(rb["a"]) is np.ndarray


def test_writes_through_a_step_array_never_leave_stale_statistics(stored, tmp_path):
    import shutil

    path, model = stored
    shutil.copytree(path, tmp_path / "w.zarr")
    with ReplayBuffer(tmp_path / "w.zarr") as rb:
        before = rb.get_stats(["obs"])["obs"]["mean"]  # stored with the store now
        np.testing.assert_allclose(before, model["obs"].astype(np.float64).mean(0), rtol=1e-6)
        rb["obs"][0:20] = 0.0
        want = model["obs"].astype(np.float64).copy()
        want[0:20] = 0.0
        np.testing.assert_allclose(rb.get_stats(["obs"])["obs"]["mean"], want.mean(0), rtol=1e-6)
    from replaybuf_core.inspection.verify import verify_store

    assert [p for p in verify_store(str(tmp_path / "w.zarr")) if p.level == "error"] == []


def test_small_keys_of_a_read_only_buffer_are_read_only_ndarrays_in_memory(stored, tmp_path, monkeypatch):
    path, model = stored
    rb = ReplayBuffer.create_from_path(path)
    assert rb.store.pinned("data", "obs") is None  # opening loads nothing
    obs = rb["obs"]
    assert type(obs) is np.ndarray and not obs.flags.writeable  # the store's copy: never written through
    np.testing.assert_array_equal(obs, model["obs"])
    np.testing.assert_array_equal(rb.store.pinned("data", "obs"), model["obs"])
    with pytest.raises(ValueError, match="read-only"):
        obs[0] = 0
    for i in range(0, N - 4, 3):  # and slices of it are the store's rows
        np.testing.assert_array_equal(rb["obs"][i:i + 4], model["obs"][i:i + 4])
    # camera frames, however small: the chunk reader keeps serving them (a damaged chunk fails only its reads)
    for i in range(8):
        assert isinstance(rb["img"], StepArray)
        np.testing.assert_array_equal(rb["img"][i % N], model["img"][i % N])
    assert rb.store.pinned("data", "img") is None
    # over the per-key limit or the per-buffer budget: the same
    for limit, budget in ((model["obs"].nbytes - 1, 1 << 20), (1 << 20, model["obs"].nbytes - 1)):
        monkeypatch.setattr(step_array, "AUTO_PIN_KEY_BYTES", limit)
        monkeypatch.setattr(step_array, "AUTO_PIN_TOTAL_BYTES", budget)
        rb2 = ReplayBuffer.create_from_path(path)
        assert isinstance(rb2["obs"], StepArray) and rb2.store.pinned("data", "obs") is None
        np.testing.assert_array_equal(rb2["obs"][3:7], model["obs"][3:7])
    # a writable buffer never loads a key on its own (its writes would drop the copy again)
    work = tmp_path / "w.zarr"
    import shutil

    shutil.copytree(path, work)
    with ReplayBuffer(work) as w:
        for i in range(8):
            assert isinstance(w["obs"], StepArray)
            w["obs"][i % 10]
        assert w.store.pinned("data", "obs") is None
