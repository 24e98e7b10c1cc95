"""The fast paths read an array's layout from its metadata document (Zarr v3 / v2 specs), and what
they do not understand falls back to zarr-python instead of failing."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore, MemoryStore

from replaybuf_core.errors import CorruptStoreError
from replaybuf_zarr import zarr_compat
from replaybuf_zarr.chunk_cache import ChunkCache
from replaybuf_zarr.chunk_reader import make_reader
from replaybuf_zarr.chunk_writer import make_writer
from replaybuf_zarr.layout import array_document, chunk_layout, object_keys


def _listed(store, prefix: str) -> set[str]:
    async def collect():
        return [k async for k in store.list_prefix(prefix)]

    return set(zarr_compat.sync(collect()))


@pytest.mark.parametrize("encoding", [{"name": "default", "separator": "/"}, {"name": "default", "separator": "."},
                                      {"name": "v2", "separator": "."}, {"name": "v2", "separator": "/"}])
def test_chunk_keys_are_the_keys_zarr_writes(encoding):
    """Every key the layout names is a key zarr-python itself stored (the store's own listing)."""
    store = MemoryStore()
    arr = zarr.create_array(store, name="g/a", shape=(7, 5), chunks=(2, 3), dtype="i4",
                            chunk_key_encoding=encoding, fill_value=-1)
    arr[:] = np.arange(35, dtype="i4").reshape(7, 5)
    keys = object_keys(arr)
    named = {keys((i, j)) for i in range(4) for j in range(2)}
    stored = _listed(store, "g/a/") - {"g/a/zarr.json"}
    assert named == stored
    reader = make_reader(arr, ChunkCache(1 << 20), 0)
    assert reader is not None
    np.testing.assert_array_equal(reader.read(0, 7), arr[:])


def test_v2_keys_and_reader(tmp_path):
    arr = zarr.create_array(LocalStore(tmp_path), name="a", shape=(9, 2), chunks=(4, 2), dtype=">f8",
                            zarr_format=2, compressors=None)
    arr[:] = np.arange(18, dtype="f8").reshape(9, 2)
    doc = json.loads((tmp_path / "a" / ".zarray").read_text())  # the document, read another way
    assert array_document(arr) == doc
    layout = chunk_layout(arr)
    assert layout.zarr_format == 2 and layout.chunk_shape == (4, 2)
    assert {layout.keys((i, 0)) for i in range(3)} == {f"a/{i}.0" for i in range(3)}
    reader = make_reader(arr, ChunkCache(1 << 20), 0)
    np.testing.assert_array_equal(reader.read(2, 9), arr[2:9])
    assert make_writer(arr) is None  # the writer is zarr v3 only: zarr-python writes v2


def test_layout_comes_from_zarr_json(tmp_path):
    """Shard and codec settings match what the zarr.json file on disk says."""
    arr = zarr.create_array(LocalStore(tmp_path), name="img", shape=(10, 4, 4, 3), chunks=(1, 4, 4, 3),
                            shards=(5, 4, 4, 3), dtype="u1",
                            compressors=zarr.codecs.BloscCodec(cname="lz4", shuffle="bitshuffle"))
    doc = json.loads((tmp_path / "img" / "zarr.json").read_text())
    conf = doc["codecs"][0]["configuration"]
    layout = chunk_layout(arr)
    assert layout.chunk_shape == tuple(conf["chunk_shape"])
    assert layout.shard.shape == tuple(doc["chunk_grid"]["configuration"]["chunk_shape"])
    assert [c["name"] for c in layout.codecs] == [c["name"] for c in conf["codecs"]]
    assert layout.shard.crc == any(c["name"] == "crc32c" for c in conf["index_codecs"])
    assert layout.shard.at_end == (conf.get("index_location", "end") == "end")


def test_array_to_array_codec_falls_back_to_zarr(tmp_path):
    """A transpose filter is not something the fast paths do: no reader/writer, reads still right."""
    from replaybuf_core import ReplayBuffer

    store = LocalStore(tmp_path)
    root = zarr.open_group(store, mode="w")
    root.create_group("meta").create_array("episode_ends", data=np.array([3, 6], dtype="i8"))
    arr = root.create_group("data").create_array("x", shape=(6, 2, 3), chunks=(2, 2, 3), dtype="f4",
                                                filters=[zarr.codecs.TransposeCodec(order=(0, 2, 1))])
    values = np.arange(36, dtype="f4").reshape(6, 2, 3)
    arr[:] = values
    assert make_reader(arr, ChunkCache(1 << 20), 0) is None
    assert make_writer(arr) is None
    rb = ReplayBuffer.create_from_path(str(tmp_path))
    np.testing.assert_array_equal(rb.get_episode(1)["x"], values[3:])


def test_unknown_compressor_falls_back_to_zarr():
    from zarr.codecs.numcodecs import Zlib

    store = MemoryStore()
    with warnings.catch_warnings():  # some zarr versions warn that Zlib is no v3 spec codec
        warnings.simplefilter("ignore")
        arr = zarr.create_array(store, name="a", shape=(8,), chunks=(4,), dtype="i2",
                                compressors=[Zlib(level=1)])
    arr[:] = np.arange(8, dtype="i2")
    assert chunk_layout(arr) is not None  # the layout is understood ...
    assert make_reader(arr, ChunkCache(1 << 20), 0) is None  # ... the codec is not: zarr-python reads


def test_crc32c_compressor_is_checked(tmp_path):
    arr = zarr.create_array(LocalStore(tmp_path), name="a", shape=(4,), chunks=(4,), dtype="i4",
                            compressors=[zarr.codecs.Crc32cCodec()])
    arr[:] = np.arange(4, dtype="i4")
    reader = make_reader(arr, ChunkCache(0), 0)
    np.testing.assert_array_equal(reader.read(0, 4), np.arange(4))
    chunk = tmp_path / "a" / "c" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[0] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.raises(CorruptStoreError, match="crc32c"):
        make_reader(arr, ChunkCache(0), 1).read(0, 4)


def test_writer_output_reads_back_through_zarr(tmp_path):
    """Blosc/Zstd/Gzip/crc32c chains encoded from their names decode with zarr-python."""
    chains = [[zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")],
              [zarr.codecs.ZstdCodec(level=3, checksum=True)], [zarr.codecs.GzipCodec(level=1)],
              [zarr.codecs.BloscCodec(cname="lz4"), zarr.codecs.Crc32cCodec()]]
    values = np.random.default_rng(0).normal(size=(12, 3)).astype("<f8")
    for i, comps in enumerate(chains):
        arr = zarr.create_array(LocalStore(tmp_path / str(i)), name="a", shape=(12, 3), chunks=(4, 3),
                                dtype="f8", compressors=comps)
        writer = make_writer(arr)
        assert writer is not None and writer.write(0, values)
        np.testing.assert_array_equal(zarr.open_array(LocalStore(tmp_path / str(i)), path="a")[:], values)


def test_compat_helpers_work_on_this_zarr():
    store = MemoryStore()
    zarr_compat.store_set(store, "k", b"abc")
    assert zarr_compat.store_get(store, "k") == b"abc"
    assert zarr_compat.store_get(store, "missing") is None
    assert zarr_compat.memory_store_dict(store) is not None and "k" in zarr_compat.memory_store_dict(store)
    assert zarr_compat.buffer_prototype().buffer.from_bytes(b"xy").to_bytes() == b"xy"
