"""The fast chunk reader returns exactly what zarr-python returns, and falls back where it must."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

from replaybuf_core import ReplayBuffer
from replaybuf_zarr.backend import ZarrBackend
from replaybuf_zarr.chunk_cache import ChunkCache
from replaybuf_zarr.chunk_reader import make_reader
from replaybuf_zarr.codecs import WebPCodec

NUMERIC_DTYPES = ["u1", "i2", "<i4", ">i4", "i8", "f2", "<f4", ">f8", "?"]
COMPRESSORS = [
    None,
    zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle"),
    zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle"),
    zarr.codecs.BloscCodec(cname="zlib", clevel=1, shuffle="shuffle"),
    zarr.codecs.ZstdCodec(level=1),
    zarr.codecs.GzipCodec(level=2),
]


@st.composite
def layouts(draw):
    """A random array layout: shape, chunks, optional shards, dtype, codecs, how much is written."""
    image = draw(st.booleans())
    n = draw(st.integers(1, 40))
    if image:
        h, w = draw(st.integers(1, 12)), draw(st.integers(1, 12))
        c = draw(st.sampled_from([None, 1, 3, 4]))
        shape = (n, h, w) if c is None else (n, h, w, c)
        chunks = (1,) + shape[1:]
        dtype = np.dtype("u1")
        kwargs = {"serializer": WebPCodec(level=draw(st.integers(0, 100)), lossless=draw(st.booleans())),
                  "compressors": None}
    else:
        inner = tuple(draw(st.lists(st.integers(1, 5), max_size=2)))
        shape = (n,) + inner
        chunks = tuple(draw(st.integers(1, s + 1)) for s in shape)
        dtype = np.dtype(draw(st.sampled_from(NUMERIC_DTYPES)))
        endian = "big" if dtype.byteorder == ">" else "little"
        kwargs = {"compressors": draw(st.sampled_from(COMPRESSORS)),
                  "serializer": zarr.codecs.BytesCodec(endian=endian if dtype.itemsize > 1 else None)}
    shards = None
    if draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    written = draw(st.integers(0, n))
    fill = draw(st.sampled_from([0, 1]))
    return shape, chunks, shards, dtype, kwargs, written, fill


def _make(store, layout, seed):
    shape, chunks, shards, dtype, kwargs, written, fill = layout
    arr = zarr.create_array(store, name="a", shape=shape, chunks=chunks, shards=shards,
                            dtype=dtype, fill_value=fill, **kwargs)
    rng = np.random.default_rng(seed)
    if written:
        data = (rng.random((written,) + shape[1:]) * 250).astype(dtype)
        arr[:written] = data
    return arr


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts(), seed=st.integers(0, 2**16), ranges=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)),
                                                                     min_size=1, max_size=6),
       local=st.booleans())
def test_reader_matches_zarr(tmp_path_factory, layout, seed, ranges, local):
    store = LocalStore(tmp_path_factory.mktemp("r")) if local else MemoryStore()
    arr = _make(store, layout, seed)
    reader = make_reader(arr, ChunkCache(1 << 20), 0)
    assert reader is not None, "every layout drawn here is one the reader knows"
    n = arr.shape[0]
    spans = [tuple(sorted((int(a * n), int(b * n)))) for a, b in ranges]
    for start, stop in spans:
        got, want = reader.read(start, stop), arr[start:stop]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    batched = reader.read_ranges([s for s, _ in spans], [e for _, e in spans])
    for (start, stop), got in zip(spans, batched):
        np.testing.assert_array_equal(got, arr[start:stop])
    rows = np.random.default_rng(seed).integers(0, n, size=(3, 4))
    out = np.empty((3, 6) + arr.shape[1:], dtype=arr.dtype)[:, 1:5]  # a strided view
    reader.read_rows(rows, out)
    np.testing.assert_array_equal(out, arr[:][rows])


def test_unknown_layouts_fall_back_to_zarr():
    store = MemoryStore()
    strings = zarr.create_array(store, name="s", shape=(4,), chunks=(2,), dtype=str)
    transposed = zarr.create_array(store, name="t", shape=(4, 3), chunks=(2, 3), dtype="f4",
                                   filters=[zarr.codecs.TransposeCodec(order=(1, 0))])
    for arr in (strings, transposed):
        assert make_reader(arr, ChunkCache(), 0) is None
    g = zarr.open_group(store, mode="a")
    d = g.require_group("data")
    d.create_array("t", shape=(4, 3), chunks=(2, 3), dtype="f4", filters=[zarr.codecs.TransposeCodec(order=(1, 0))])
    d["t"][:] = np.arange(12, dtype="f4").reshape(4, 3)
    backend = ZarrBackend(g)
    np.testing.assert_array_equal(backend.read("data", "t", 1, 3), np.arange(12, dtype="f4").reshape(4, 3)[1:3])


def test_cache_is_bounded_and_hit():
    cache = ChunkCache(max_bytes=3 * 800)
    arr = zarr.create_array(MemoryStore(), name="a", shape=(100, 10), chunks=(10, 10), dtype="f8")
    arr[:] = np.arange(1000, dtype="f8").reshape(100, 10)
    reader = make_reader(arr, cache, 0)
    reader.read(0, 100)
    assert cache.nbytes <= 3 * 800 and len(cache) == 3
    hits = cache.hits
    reader.read(95, 100)  # the last chunk is cached
    assert cache.hits == hits + 1
    with pytest.raises(ValueError):
        cache.max_bytes = -1


def test_writes_invalidate_the_reader():
    rb = ReplayBuffer.create_empty_zarr()
    rb.add_episode({"x": np.zeros((5, 2), "f4")}, chunks={"x": (8, 2)})
    assert np.all(rb.read_ranges("x", [0], [5])[0] == 0)
    rb.add_episode({"x": np.ones((5, 2), "f4")})  # rewrites the chunk the reader cached
    got = rb.read_ranges("x", [0, 5], [5, 10])
    np.testing.assert_array_equal(got[1], np.ones((5, 2), "f4"))
    rb.drop_episode()
    rb.add_episode({"x": np.full((5, 2), 7, "f4")})
    np.testing.assert_array_equal(rb.read_ranges("x", [5], [10])[0], np.full((5, 2), 7, "f4"))


def test_pin_and_cache_size_via_buffer(tmp_path):
    rb = ReplayBuffer.create_empty("zarr", store=LocalStore(tmp_path / "b.zarr"))
    rb.add_episode({"x": np.arange(30, dtype="f4").reshape(15, 2)})
    rb.cache_bytes = 1 << 20
    assert rb.cache_bytes == 1 << 20
    rb.warm(["x"])
    for f in (tmp_path / "b.zarr" / "data" / "x" / "c").rglob("*"):
        if f.is_file():
            f.unlink()  # pinned data no longer needs the store
    np.testing.assert_array_equal(rb.read_ranges("x", [3], [9])[0], np.arange(30, dtype="f4").reshape(15, 2)[3:9])


def test_truncated_blosc_chunk_is_an_error_naming_the_chunk(tmp_path):
    from replaybuf_core.errors import CorruptStoreError

    arr = zarr.create_array(LocalStore(tmp_path), name="a", shape=(20, 4), chunks=(10, 4), dtype="f4",
                            compressors=zarr.codecs.BloscCodec(cname="lz4"))
    arr[:] = np.arange(80, dtype="f4").reshape(20, 4)
    chunk = tmp_path / "a" / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-5])
    reader = make_reader(arr, ChunkCache(), 0)
    np.testing.assert_array_equal(reader.read(0, 10), np.arange(40, dtype="f4").reshape(10, 4))
    with pytest.raises(CorruptStoreError, match=r"a: chunk \(1, 0\) \(rows 10\.\.19\)"):
        reader.read(5, 15)


@pytest.mark.parametrize("backend", ["numpy", "zarr"])
def test_buffer_read_rows(backend):
    rb = ReplayBuffer.create_empty(backend)
    x = np.arange(60, dtype="f4").reshape(30, 2)
    rb.add_episode({"x": x}, chunks={"x": (7, 2)})
    rows = np.array([[0, 29, 3], [7, 7, 14]])
    np.testing.assert_array_equal(rb.read_rows("x", rows), x[rows])
    with pytest.raises(IndexError, match="row 30"):
        rb.read_rows("x", [30])
    with pytest.raises(KeyError):
        rb.read_rows("nope", [0])
    with pytest.raises(ValueError, match="out has shape"):
        rb.read_rows("x", [0, 1], out=np.empty((3, 2), "f4"))


@pytest.mark.parametrize("damage", ["truncate", "empty", "flip_index_byte"])
def test_a_damaged_shard_is_an_error_naming_the_array_and_shard(tmp_path, damage):
    """A shard cut short, emptied, or with a flipped index byte raises CorruptStoreError (the index's
    crc32c and bounds are checked); other shards still read; a missing shard reads as fill values."""
    from replaybuf_core.errors import CorruptStoreError
    from replaybuf_zarr.codecs import WebPCodec

    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    frames = np.random.default_rng(0).integers(0, 255, (12, 8, 8, 3), dtype=np.uint8)
    a = g.create_array("img", shape=frames.shape, chunks=(1, 8, 8, 3), shards=(4, 8, 8, 3), dtype="uint8",
                       serializer=WebPCodec(level=90, lossless=True), compressors=None)
    a[:] = frames
    shard = tmp_path / "s.zarr" / "img" / "c" / "1" / "0" / "0" / "0"
    raw = shard.read_bytes()
    if damage == "truncate":
        shard.write_bytes(raw[: len(raw) // 2])
    elif damage == "empty":
        shard.write_bytes(b"")
    else:
        shard.write_bytes(raw[:-10] + bytes([raw[-10] ^ 0xFF]) + raw[-9:])
    arr = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["img"]
    reader = make_reader(arr, ChunkCache(0), 0)
    with pytest.raises(CorruptStoreError, match=r"img: shard \(1, 0, 0, 0\)"):
        reader.read(4, 8)
    np.testing.assert_array_equal(reader.read(0, 4), frames[:4])  # the other shards are fine
    np.testing.assert_array_equal(reader.read(8, 12), frames[8:])
    (tmp_path / "s.zarr" / "img" / "c" / "2" / "0" / "0" / "0").unlink()  # missing: fill values
    np.testing.assert_array_equal(make_reader(arr, ChunkCache(0), 1).read(8, 12), np.zeros((4, 8, 8, 3), np.uint8))
