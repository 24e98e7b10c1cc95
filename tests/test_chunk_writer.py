"""The fast chunk writer stores objects zarr-python reads back exactly; it declines what it can't do."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore, MemoryStore

from replaybuf_core import ReplayBuffer
from replaybuf_zarr.chunk_writer import make_writer
from replaybuf_zarr.codecs import WebPCodec

from test_chunk_reader import COMPRESSORS, NUMERIC_DTYPES


@st.composite
def layouts(draw):
    image = draw(st.booleans())
    n = draw(st.integers(1, 40))
    if image:
        h, w = draw(st.integers(1, 10)), draw(st.integers(1, 10))
        c = draw(st.sampled_from([None, 1, 3, 4]))
        shape = (n, h, w) if c is None else (n, h, w, c)
        chunks = (1,) + shape[1:]
        dtype = np.dtype("u1")
        kwargs = {"serializer": WebPCodec(level=90, lossless=True), "compressors": None}
    else:
        shape = (n,) + tuple(draw(st.lists(st.integers(1, 5), max_size=2)))
        chunks = (draw(st.integers(1, n + 1)),) + shape[1:]
        dtype = np.dtype(draw(st.sampled_from(NUMERIC_DTYPES)))
        endian = "big" if dtype.byteorder == ">" else "little"
        kwargs = {"compressors": draw(st.sampled_from(COMPRESSORS)),
                  "serializer": zarr.codecs.BytesCodec(endian=endian if dtype.itemsize > 1 else None)}
    shards = (chunks[0] * draw(st.integers(1, 4)),) + chunks[1:] if draw(st.booleans()) else None
    return shape, chunks, shards, dtype, kwargs


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts(), seed=st.integers(0, 2**16), local=st.booleans())
def test_written_objects_read_back_through_zarr(tmp_path_factory, layout, seed, local):
    shape, chunks, shards, dtype, kwargs = layout
    path = tmp_path_factory.mktemp("w")
    store = LocalStore(path) if local else MemoryStore()
    arr = zarr.create_array(store, name="a", shape=shape, chunks=chunks, shards=shards, dtype=dtype,
                            fill_value=0, **kwargs)
    data = (np.random.default_rng(seed).random(shape) * 250).astype(dtype)
    writer = make_writer(arr)
    assert writer is not None
    L = writer.object_len
    # whole objects, block by block, the last one ending at the array's end
    for start in range(0, shape[0], L * 2):
        assert writer.write(start, data[start: start + L * 2])
    again = zarr.open_array(store, path="a", mode="r") if local else arr
    np.testing.assert_array_equal(again[:], data)
    # a write not covering whole objects is declined and changes nothing
    if L > 1 and shape[0] > 1:
        assert not writer.write(1, data[1:2])
        np.testing.assert_array_equal(again[:], data)


def test_unsupported_layouts_are_declined():
    store = MemoryStore()
    split_inner = zarr.create_array(store, name="s", shape=(4, 6), chunks=(2, 3), dtype="f4")
    strings = zarr.create_array(store, name="t", shape=(4,), chunks=(2,), dtype=str)
    assert make_writer(split_inner) is None and make_writer(strings) is None


@pytest.mark.parametrize("shards", [None, (8, 6, 6, 3)])
def test_buffer_writer_path_uses_it_and_stays_exact(tmp_path, shards):
    rng = np.random.default_rng(1)
    g = zarr.open_group(LocalStore(tmp_path / "b.zarr"), mode="w")
    g.require_group("meta")
    d = g.require_group("data")
    d.create_array("img", shape=(0, 6, 6, 3), chunks=(1, 6, 6, 3), shards=shards, dtype="u1",
                   serializer=WebPCodec(level=90, lossless=True), compressors=None)
    rb = ReplayBuffer.create_empty_zarr(root=g)
    eps = [{"img": rng.integers(0, 255, (n, 6, 6, 3), dtype=np.uint8)} for n in (5, 9, 3, 11)]
    with rb.writer() as w:
        for ep in eps:
            w.add_episode(ep)
    fresh = zarr.open_group(tmp_path / "b.zarr", mode="r")
    np.testing.assert_array_equal(fresh["data/img"][:], np.concatenate([e["img"] for e in eps]))


def test_linking_an_object_onto_a_name_of_the_same_file_leaves_no_second_name(tmp_path):
    """rename(2) of two names of one file does nothing and succeeds, so a link made through a
    temporary name onto an object that already is that file kept the temporary name for ever (a
    roll-back links back every shard its edit had not rewritten yet: break-it trial of session 9)."""
    import os

    a = zarr.create_array(str(tmp_path / "a"), shape=(8, 4), chunks=(4, 4), dtype="u1", zarr_format=3)
    b = zarr.create_array(str(tmp_path / "b"), shape=(8, 4), chunks=(4, 4), dtype="u1", zarr_format=3)
    a[:] = np.arange(32, dtype="u1").reshape(8, 4)
    b[4:] = 7  # object 1 of b: a file of its own
    wa, wb = make_writer(a), make_writer(b)
    for _ in range(3):  # the first makes the name, the next find it is that file already
        assert wb.link_object(wa, 0, 0)
    assert wb.link_object(wa, 1, 1)  # over another file: through a temporary name
    names = sorted(os.path.relpath(os.path.join(d, f), tmp_path / "b") for d, _, fs in os.walk(tmp_path / "b")
                   for f in fs)
    assert names == ["c/0/0", "c/1/0", "zarr.json"]
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "b"))[:], a[:])
