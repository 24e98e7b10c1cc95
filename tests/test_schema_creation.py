"""Schema-driven creation: DatasetSchema validation, create_zarr_arrays, create_zarr_replay_buffer."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
import zarr

from replaybuf_core import ReplayBuffer
from replaybuf_core.layout.schema import DatasetSchema, is_uint8_image_spec
from replaybuf_zarr.codecs import WebPCodec
from replaybuf_zarr import create_zarr_arrays, create_zarr_replay_buffer

SPECS = {
    "img": {"shape": (0, 8, 8, 3), "chunks": (1, 8, 8, 3), "dtype": "uint8", "needs_compressor": True},
    "pos": {"shape": (0, 2), "chunks": (64, 2), "dtype": "float32", "needs_compressor": True},
    "raw": {"shape": (0, 1), "chunks": (64, 1), "dtype": "int16", "needs_compressor": False},
}


def _episode(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"img": rng.integers(0, 255, (n, 8, 8, 3), dtype=np.uint8),
            "pos": rng.random((n, 2)).astype(np.float32),
            "raw": rng.integers(-9, 9, (n, 1)).astype(np.int16)}


def _tree_digest(path) -> str:
    h = hashlib.sha256()
    for d, _, files in sorted(os.walk(path)):
        for f in sorted(files):
            p = os.path.join(d, f)
            h.update(p.encode())
            h.update(open(p, "rb").read())
    return h.hexdigest()


def test_is_uint8_image_spec():
    assert is_uint8_image_spec(SPECS["img"])
    assert not is_uint8_image_spec(SPECS["pos"])
    assert not is_uint8_image_spec({"shape": (0, 8, 8), "dtype": "uint8"})


@pytest.mark.parametrize("specs, error", [
    ({}, ValueError),
    ({"x": {"shape": (5, 2), "chunks": (1, 2), "dtype": "f4", "needs_compressor": True}}, ValueError),
    ({"x": {"shape": (0, 2), "chunks": (1,), "dtype": "f4", "needs_compressor": True}}, ValueError),
    ({"x": {"shape": (0, 2), "chunks": (1.5, 2), "dtype": "f4", "needs_compressor": True}}, TypeError),
    ({"x": {"shape": (0, 2), "chunks": (1, 2), "needs_compressor": True}}, KeyError),
    ({"a/b": {"shape": (0, 2), "chunks": (1, 2), "dtype": "f4", "needs_compressor": True}}, ValueError),
])
def test_bad_schemas(tmp_path, specs, error):
    with pytest.raises(error):
        DatasetSchema(tmp_path / "x.zarr", specs)


def test_schema_specs_are_normalised(tmp_path):
    schema = DatasetSchema("~/x.zarr", SPECS)
    assert not str(schema.zarr_path).startswith("~")
    specs = schema.get_zarr_array_specs()
    assert specs["pos"]["dtype"] == np.dtype("float32") and specs["pos"]["chunks"] == (64, 2)


@pytest.mark.parametrize("fps", [None, 4])
def test_create_and_read_back(tmp_path, fps):
    schema = DatasetSchema(tmp_path / "b.zarr", SPECS)
    eps = [_episode(n, i) for i, n in enumerate([5, 9, 3, 7])]
    rb = create_zarr_replay_buffer(schema, iter(eps), total_episodes=len(eps), image_frames_per_shard=fps,
                                   image_codec=WebPCodec(level=90, lossless=True), progress=False)
    assert rb.n_episodes == 4 and rb.n_steps == 24
    again = ReplayBuffer.create_from_path(tmp_path / "b.zarr")
    for i, ep in enumerate(eps):
        got = again.get_episode(i)
        for k in ep:
            np.testing.assert_array_equal(got[k], ep[k])
    codecs = again.get_compressors()
    assert codecs["img"] == WebPCodec(level=90, lossless=True)
    assert codecs["raw"] is None and codecs["pos"] is not None
    assert again.store.chunks("data", "img") == (1, 8, 8, 3)
    assert again.store.shards("data", "img") == ((fps, 8, 8, 3) if fps else None)
    # plain zarr-python reads it too
    np.testing.assert_array_equal(zarr.open_group(tmp_path / "b.zarr", mode="r")["data/img"][5:14],
                                  eps[1]["img"])


def test_zero_episodes_give_an_empty_buffer_that_opens(tmp_path):
    schema = DatasetSchema(tmp_path / "e.zarr", SPECS)
    create_zarr_replay_buffer(schema, [], progress=False)
    rb = ReplayBuffer.create_from_path(tmp_path / "e.zarr")
    assert rb.n_episodes == 0 and sorted(rb.keys()) == ["img", "pos", "raw"]


@pytest.mark.parametrize("mutate, match", [
    (lambda e: e.pop("pos"), r"episode 2: keys differ.*missing \['pos'\]"),
    (lambda e: e.update(extra=np.zeros((4, 1))), r"episode 2: keys differ.*extra \['extra'\]"),
    (lambda e: e.update(pos=e["pos"].astype(np.float64)), r"episode 2, key 'pos': dtype float64"),
    (lambda e: e.update(img=e["img"][:, :4]), r"episode 2, key 'img': step shape"),
    (lambda e: e.update(raw=e["raw"][:2]), r"episode 2: .* has 4 steps but 'raw' has 2"),
])
def test_a_bad_episode_names_index_and_key_and_writes_nothing_of_it(tmp_path, mutate, match):
    schema = DatasetSchema(tmp_path / "b.zarr", SPECS)
    bad = _episode(4, 2)
    mutate(bad)
    eps = [_episode(3, 0), _episode(5, 1), bad, _episode(6, 3)]
    with pytest.raises(ValueError, match=match):
        create_zarr_replay_buffer(schema, iter(eps), image_frames_per_shard=None, progress=False)
    rb = ReplayBuffer.create_from_path(tmp_path / "b.zarr")
    assert rb.n_steps <= 8  # nothing of episode 2 committed
    for i in range(rb.n_episodes):
        np.testing.assert_array_equal(rb.get_episode(i)["pos"], eps[i]["pos"])


@pytest.mark.parametrize("fps, error", [(True, TypeError), (2.5, TypeError), (0, ValueError), (-4, ValueError)])
def test_bad_frames_per_shard_is_rejected_before_anything_is_written(tmp_path, fps, error):
    target = tmp_path / "b.zarr"
    schema = DatasetSchema(target, SPECS)
    create_zarr_replay_buffer(schema, [_episode(3, 0)], image_frames_per_shard=None, progress=False)
    before = _tree_digest(target)
    with pytest.raises(error):
        create_zarr_replay_buffer(schema, [_episode(3, 1)], image_frames_per_shard=fps, progress=False)
    assert _tree_digest(target) == before


def test_create_zarr_arrays_refuses_existing_names(tmp_path):
    g = zarr.open_group(tmp_path / "g.zarr", mode="w").require_group("data")
    schema = DatasetSchema(tmp_path / "g.zarr", SPECS)
    create_zarr_arrays(g, schema, image_frames_per_shard=None)
    with pytest.raises(FileExistsError):
        create_zarr_arrays(g, schema)


def test_webp_settings_survive_copy_save_rechunk_and_set_compressors(tmp_path):
    from zarr.storage import MemoryStore

    from replaybuf_core import ReplayBuffer
    from replaybuf_zarr import rechunk_recompress_array

    codec = WebPCodec(level=70, lossless=False)
    schema = DatasetSchema(tmp_path / "w.zarr", SPECS)
    rb = create_zarr_replay_buffer(schema, [_episode(6, 0), _episode(5, 1)], image_frames_per_shard=4,
                                   image_codec=codec, progress=False)
    copied = ReplayBuffer.copy_from_store(tmp_path / "w.zarr", store=MemoryStore())
    assert copied.get_compressors()["img"] == codec
    rb.save_to_path(tmp_path / "s.zarr")
    saved = ReplayBuffer.create_from_path(tmp_path / "s.zarr")
    assert saved.get_compressors()["img"] == codec and saved.store.shards("data", "img") == (4, 8, 8, 3)
    copied.set_chunks({"pos": (8, 2)})
    assert copied.get_compressors()["img"] == codec
    lossless = WebPCodec(level=99, lossless=True)
    before = copied.get_episode(1)["img"]
    copied.set_compressors({"img": lossless})
    assert copied.get_compressors()["img"] == lossless
    np.testing.assert_array_equal(copied.get_episode(1)["img"], before)  # re-encoding lossless keeps bits
    arr = rechunk_recompress_array(zarr.open_group(tmp_path / "s.zarr", mode="r+")["data"], "pos", chunk_length=3)
    assert arr.chunks == (3, 2)
    assert ReplayBuffer.create_from_path(tmp_path / "s.zarr").get_compressors()["img"] == codec
