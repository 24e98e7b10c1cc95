"""Moving rows of camera frames as stored bytes (:mod:`replaybuf_zarr.row_splice`): a video chunk
re-cut from its packets decodes to exactly the frames it was cut from; one-frame codecs move whole
chunks; what cannot be moved so says False and writes nothing.

Expected frames come from decoding the source chunks whole (``decode_frame``) and slicing NumPy
arrays, never from the splice.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybuf_zarr.codecs.video_chunk import BLANK_CODEC, MAX_SEGMENTS, Segment, pack_chunk, splice, unpack_chunk

av = pytest.importorskip("av")

from replaybuf_zarr.codecs.video import VideoCodec  # noqa: E402  (needs PyAV)

H, W = 32, 48


def _frames(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:H, 0:W]
    out = [np.stack([(x * 5 + 9 * i) % 256, (y * 7 + 3 * i) % 256, (x + y + 20 * i) % 256], -1) for i in range(n)]
    return np.clip(np.stack(out) + rng.integers(0, 30, (n, H, W, 3)), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def chunks():
    """Three chunks of 8 frames, x264 with B-frames (preset medium): their bytes and decoded frames."""
    codec = VideoCodec(gop=8, tune="")
    data = [codec.encode_frame(_frames(8, seed)) for seed in range(3)]
    return codec, data, [codec.decode_frame(d, (8, H, W, 3)) for d in data]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 7), st.integers(1, 8)), min_size=1, max_size=4))
def test_a_recut_video_chunk_decodes_to_the_frames_it_was_cut_from(chunks, cuts):
    codec, data, decoded = chunks
    pieces, want, n = [], [], 0
    for c, lo, length in cuts:
        hi = min(8, lo + length, lo + 8 - n)
        if hi <= lo:
            continue
        pieces.append((data[c], lo, hi))
        want.append(decoded[c][lo:hi])
        n += hi - lo
    if not pieces:
        return
    out = codec.splice_chunk(pieces, 8)
    expect = np.concatenate(want + [np.zeros((8 - n, H, W, 3), np.uint8)])  # black padding past the pieces
    np.testing.assert_array_equal(codec.decode_frame(out, (8, H, W, 3)), expect)
    rows = sorted({0, n - 1, 7})
    np.testing.assert_array_equal(codec.decode_rows(out, (8, H, W, 3), rows), expect[rows])
    # each segment keeps the packets it was cut from: no frame was encoded
    packets = {p for d in data for s in unpack_chunk(d) for p in s.packets}
    assert all(p in packets for s in unpack_chunk(out) if s.codec != BLANK_CODEC for p in s.packets)


def test_pieces_continuing_one_segment_are_joined(chunks):
    codec, data, decoded = chunks
    segs = unpack_chunk(codec.splice_chunk([(data[0], 0, 3), (data[0], 3, 8)], 8))
    assert [(s.skip, s.take) for s in segs] == [(0, 8)]
    assert codec.splice_chunk([(data[0], 0, 8)], 8) == data[0]  # a whole chunk is its own bytes


def test_more_segments_than_a_chunk_holds_is_none():
    a = Segment("h264", b"", 0, 1, (b"a",))
    b = Segment("h264", b"", 0, 1, (b"b",))
    pieces = [([a], 0, 1) if i % 2 else ([b], 0, 1) for i in range(MAX_SEGMENTS + 1)]
    assert splice(pieces, MAX_SEGMENTS + 1) is None
    assert len(splice(pieces[:MAX_SEGMENTS], MAX_SEGMENTS)) == MAX_SEGMENTS
    with pytest.raises(ValueError, match="hold 3 frames, a chunk holds 2"):
        splice([([a], 0, 1)] * 3, 2)
    assert pack_chunk(splice([([a], 0, 1)], 3))  # padded with one blank segment of 2 frames
    assert [(s.codec, s.take) for s in splice([([a], 0, 1)], 3)] == [("h264", 1), (BLANK_CODEC, 2)]


def test_one_frame_codecs_move_whole_chunks_only():
    from replaybuf_zarr.codecs import JpegCodec

    codec = JpegCodec()
    assert codec.splice_chunk([(b"jpeg-bytes", 0, 1)], 1) == b"jpeg-bytes"
    assert codec.splice_chunk([(b"x", 0, 1), (b"y", 0, 1)], 2) is None


def _backend(tmp_path, codec, n, shards=None, seed=0):
    from replaybuf_zarr.backend import ZarrBackend

    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="a")
    data = root.require_group("data")
    root.require_group("meta")
    frames = _frames(n, seed)
    g = codec.frames_per_chunk
    data.create_array("src", shape=frames.shape, dtype=np.uint8, chunks=(g, H, W, 3), shards=shards,
                      serializer=codec, compressors=None)[:] = frames
    data.create_array("dst", shape=(0, H, W, 3), dtype=np.uint8, chunks=(g, H, W, 3), shards=shards,
                      serializer=codec, compressors=None)
    return ZarrBackend(root), frames


@pytest.mark.parametrize("shards", [None, (16, H, W, 3)])
def test_splice_rows_moves_video_rows_and_ends_the_array_there(tmp_path, shards):
    b, frames = _backend(tmp_path, VideoCodec(gop=4), 30, shards=tuple(shards) if shards else None)
    ref = np.asarray(b.read("data", "src", 0, 30))  # the stored frames, decoded
    assert b.can_splice("data", "dst")
    assert b.splice_rows("data", "dst", 0, [("src", 3, 9), ("src", 20, 27)])
    assert b.shape("data", "dst")[0] == 13
    np.testing.assert_array_equal(zarr.open_group(str(tmp_path / "s.zarr"))["data/dst"][:],
                                  np.concatenate([ref[3:9], ref[20:27]]))
    # from row 8 on (rows before it in its shard keep their bytes), shorter: the array ends at 10
    assert b.splice_rows("data", "dst", 8, [("src", 0, 2)])
    np.testing.assert_array_equal(zarr.open_group(str(tmp_path / "s.zarr"))["data/dst"][:],
                                  np.concatenate([ref[3:9], ref[20:22], ref[0:2]]))


def test_what_cannot_be_spliced_says_false_and_writes_nothing(tmp_path):
    from replaybuf_zarr.codecs import JpegCodec

    b, _ = _backend(tmp_path, VideoCodec(gop=4), 12)
    assert b.splice_rows("data", "dst", 0, [("src", 0, 4)])
    before = zarr.open_group(str(tmp_path / "s.zarr"))["data/dst"][:]
    assert not b.splice_rows("data", "dst", 2, [("src", 0, 4)])  # off the chunk grid
    assert not b.splice_rows("data", "dst", 0, [("dst", 0, 2)])  # from itself
    b.native_group("data").create_array("jpeg", shape=(12, H, W, 3), dtype=np.uint8, chunks=(1, H, W, 3),
                                        serializer=JpegCodec(), compressors=None)
    assert not b.splice_rows("data", "dst", 0, [("jpeg", 0, 4)])  # other codecs
    np.testing.assert_array_equal(zarr.open_group(str(tmp_path / "s.zarr"))["data/dst"][:], before)
    b.native_group("data").create_array("num", shape=(12, 3), dtype=np.float32, chunks=(4, 3))
    assert not b.can_splice("data", "num")


def test_an_append_after_a_partial_gop_keeps_the_stored_frames(tmp_path):
    """A writer session ends mid-GOP (6 frames in GOPs of 4); the next session's appends — one
    add_episode at a time, and through a writer — leave the frames already stored bit for bit (was:
    the partial GOP decoded and encoded again, ~20 levels off)."""
    from replaybuf_core import ReplayBuffer

    seeds = iter(range(100))

    def ep(n):
        return {"img": _frames(n, next(seeds)), "x": np.arange(n, dtype=np.float32)}

    path = tmp_path / "v.zarr"
    rb = ReplayBuffer.create_empty("zarr", str(path))
    with rb.writer(frames="img=video:g4") as w:
        w.add_episode(ep(6))
    rb.close()
    first = zarr.open_group(str(path), mode="r")["data/img"][:]
    with ReplayBuffer(str(path)) as rb:
        new = ep(3)
        rb.add_episode(new)
        rb.add_episode(ep(1))
        with rb.writer() as w:
            w.add_episode(ep(5))
    now = zarr.open_group(str(path), mode="r")["data/img"][:]
    assert now.shape[0] == 15
    np.testing.assert_array_equal(now[:6], first)
    # the appended frames went through the codec once (lossy), like any appended frames
    assert np.abs(now[6:9].astype(int) - new["img"]).mean() < 8
    with ReplayBuffer(str(path)) as rb:  # a write into the middle of a chunk is not an append: as before
        rb.store.write("data", "img", 5, now[5:6])
    assert zarr.open_group(str(path), mode="r")["data/img"][6:8].shape == (2, H, W, 3)


@pytest.mark.parametrize("shards", [None, (16, H, W, 3)])
def test_a_shrink_keeps_the_frames_before_the_new_end_and_a_grow_brings_none_back(tmp_path, shards):
    """Shrinking a video array to a row inside a chunk (recovery dropping an interrupted append does)
    leaves the chunk's frames before it bit for bit (was: the tail overwritten with the fill value
    through zarr-python, which decoded and encoded the whole chunk: its kept frames ~20 levels off);
    the dropped rows never come back on a later grow."""
    b, _ = _backend(tmp_path, VideoCodec(gop=4), 30, shards=tuple(shards) if shards else None)
    before = zarr.open_group(str(tmp_path / "s.zarr"))["data/src"][:]
    for n in (27, 22, 13):  # inside a chunk, in the first chunk of a shard and not
        b.resize("data", "src", n)
        np.testing.assert_array_equal(zarr.open_group(str(tmp_path / "s.zarr"))["data/src"][:], before[:n])
    b.resize("data", "src", 30)
    grown = zarr.open_group(str(tmp_path / "s.zarr"))["data/src"][13:]
    assert not grown.any()  # black padding and fill: none of the old frames


def test_recovery_from_an_interrupted_video_append_keeps_the_committed_frames(tmp_path):
    """A process killed inside an append to a video key (the new frames written into the stored
    partial GOP, no commit): the writable open that drops them leaves the committed frames (and so
    every version) bit for bit (a break-it trial: the committed frames of that GOP changed by up to
    17 levels, and ``version=0`` read other pixels than before the kill)."""
    from replaybuf_core import ReplayBuffer

    path = tmp_path / "v.zarr"
    rb = ReplayBuffer.create_empty("zarr", str(path))
    with rb.writer(frames="img=video:g4") as w:
        w.add_episode({"img": _frames(6, 0), "x": np.arange(6, dtype=np.float32)})
    rb.close()
    committed = zarr.open_group(str(path), mode="r")["data/img"][:]
    with ReplayBuffer(str(path)) as rb:  # what the killed append left: rows written, nothing committed
        for key, values in {"img": _frames(5, 1), "x": np.arange(5, dtype=np.float32)}.items():
            rb.store.resize("data", key, 11)
            rb.store.write("data", key, 6, values)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the recovery warning)
        with ReplayBuffer(str(path)) as rb:
            assert rb.n_steps == 6 and rb.recovery.extra_rows
    np.testing.assert_array_equal(zarr.open_group(str(path), mode="r")["data/img"][:], committed)
    with ReplayBuffer(str(path), version=0) as rb:
        np.testing.assert_array_equal(np.asarray(rb["img"][:]), committed)


@pytest.mark.parametrize("fail_at", [0, 2])
def test_a_failed_background_store_is_raised_after_every_other_store_ended(tmp_path, monkeypatch, fail_at):
    """Stores of spliced objects run on the codec pool while the next ones are spliced: the first
    failure is raised by ``splice_rows`` (not lost, not returned as False), and it returns only
    after every store it started has ended (none still writing behind the caller's back)."""
    import threading
    import time

    from replaybuf_zarr.chunk_writer import ChunkWriter

    b, _ = _backend(tmp_path, VideoCodec(gop=4), 40, shards=(8, H, W, 3))
    calls, running, real = [], [], ChunkWriter._store_objects
    lock = threading.Lock()

    def store(self, first, encoded):
        with lock:
            n = len(calls)
            calls.append(first)
            running.append(1)
        try:
            time.sleep(0.05)
            if n == fail_at:
                raise OSError(28, "No space left on device")
            return real(self, first, encoded)
        finally:
            with lock:
                running.pop()

    monkeypatch.setattr(ChunkWriter, "_store_objects", store)
    with pytest.raises(OSError, match="No space left"):
        b.splice_rows("data", "dst", 0, [("src", 1, 39)])  # off the GOP grid: 5 spliced shards, none linked
    assert not running and len(calls) > fail_at + 1


def test_an_undo_array_stores_its_objects_flat_and_reads_back_through_zarr_python(tmp_path):
    """An edit's undo arrays (the versions group) use the default chunk key encoding with separator
    ``.`` (``c.3.0.0.0`` in the array's directory: no three directories a shard to create), and plain
    zarr-python reads every older version's rows from them as they were."""
    from replaybuf_core import ReplayBuffer

    n, G = 6, 4
    frames = _frames(n * 10, 3)
    path = tmp_path / "v.zarr"
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        for e in range(n):
            rb.add_episode({"camera": frames[e * 10:(e + 1) * 10], "x": np.arange(10, dtype=np.float32) + e},
                           frames=f"camera=video:g{G}")
    with ReplayBuffer(str(path)) as rb:
        before = np.asarray(rb["camera"][:])
        rb.delete_episodes([1])
    undos = [p for p in (path / "versions").iterdir() if (p / "zarr.json").is_file()]
    assert undos
    for undo in undos:
        assert not [p for p in undo.iterdir() if p.is_dir()], undo
        assert zarr.open_array(str(undo)).metadata.chunk_key_encoding.separator == "."
    cam = [u for u in undos if zarr.open_array(str(u)).ndim == 4]
    assert cam  # the camera's backup is an undo array of frames
    old = zarr.open_array(str(cam[0]))[:]
    # the backup holds the old rows from a shard boundary on: they are the old frames, as stored
    np.testing.assert_array_equal(old, before[len(before) - len(old):])


def test_a_rolled_back_edit_leaves_no_temporary_names_in_the_array(tmp_path, monkeypatch):
    """An edit that fails part of the way through its rewrite is rolled back by linking the backup's
    shards back, most of them onto names that already are those files: the array is as before and
    holds no ``.tmp-*`` name (they kept old shards' bytes on disk for ever)."""
    import os

    from replaybuf_core import ReplayBuffer
    from replaybuf_zarr.chunk_writer import ChunkWriter

    path = tmp_path / "v.zarr"
    frames = _frames(60, 5)
    with ReplayBuffer.create_empty("zarr", str(path)) as rb:
        with rb.writer(frames="camera=video:g4", frames_per_shard=8) as w:
            for e in range(6):
                w.add_episode({"camera": frames[e * 10:(e + 1) * 10], "x": np.zeros(10, np.float32)})
    with ReplayBuffer(str(path)) as rb:
        before = np.asarray(rb["camera"][:])
    real, calls = ChunkWriter._put, []

    def put(self, key, data):
        if key.startswith("data/camera/"):
            calls.append(key)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
        return real(self, key, data)

    monkeypatch.setattr(ChunkWriter, "_put", put)
    with ReplayBuffer(str(path)) as rb:
        with pytest.raises(OSError, match="No space left"):
            rb.delete_episodes([0])
    monkeypatch.undo()
    assert len(calls) >= 3
    with ReplayBuffer(str(path), read_only=True) as rb:
        np.testing.assert_array_equal(np.asarray(rb["camera"][:]), before)
    left = [f for d, _, fs in os.walk(path / "data") for f in fs if f.startswith(".tmp-")]
    assert not left
