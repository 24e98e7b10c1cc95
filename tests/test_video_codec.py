"""The video-chunk frame codec (``replaybuf.video``, ``--frames video``): each chunk of G frames one
closed H.264 / AV1 GOP that plain zarr-python reads and any FFmpeg decoder decodes.

Expected pixels come from an independent path: the chunk files read from disk, their byte layout
parsed here with ``struct`` (not by :mod:`replaybuf_zarr.codecs.video_chunk`), and the packets decoded
by FFmpeg's own H.264 demuxer (an Annex-B ``.h264`` file) or a bare PyAV decoder — and the source
frames themselves for the PSNR floors.  Natural frames: the GR00T sample's h264 video.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore

from replaybuf_core import ReplayBuffer, SequenceSampler
from replaybuf_core.errors import CorruptStoreError
from replaybuf_core.layout.frame_choice import FrameChoice, choose_frames, parse_frame_choice
from replaybuf_zarr.codecs import FRAME_CODECS
from replaybuf_zarr.codecs.video import VideoCodec
from replaybuf_zarr.codecs.video_chunk import Segment, pack_chunk, unpack_chunk

from shared_data import LEROBOT_V2_GR00T

av = pytest.importorskip("av")

GR00T_VIDEO = (LEROBOT_V2_GR00T / "videos/chunk-000/observation.images.ego_view" / "episode_000000.mp4")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0 ** 2 / mse))


@pytest.fixture(scope="module")
def natural() -> np.ndarray:
    """24 consecutive natural 256x256 RGB frames (the GR00T sample's h264 decode, from frame 40)."""
    if not GR00T_VIDEO.exists():
        pytest.skip(f"{GR00T_VIDEO} not available")
    with av.open(str(GR00T_VIDEO)) as c:
        frames = [f.to_ndarray(format="rgb24") for _, f in zip(range(64), c.decode(video=0))]
    return np.stack(frames[40:64])


def parse_chunk(data: bytes) -> list[tuple[str, int, int, list[bytes]]]:
    """The chunk layout of the codec's docstring, parsed independently: (codec, skip, take, packets)."""
    assert data[:4] == b"RBVC" and data[4] == 1
    pos, out = 6, []
    for _ in range(data[5]):
        n = data[pos]
        codec = data[pos + 1:pos + 1 + n].decode()
        pos += 1 + n
        (n_extra,) = struct.unpack_from("<I", data, pos)
        pos += 4 + n_extra
        skip, take, n_packets = struct.unpack_from("<HHI", data, pos)
        pos += 8
        sizes = struct.unpack_from(f"<{n_packets}I", data, pos)
        pos += 4 * n_packets
        packets = []
        for s in sizes:
            packets.append(data[pos:pos + s])
            pos += s
        out.append((codec, skip, take, packets))
    assert pos == len(data)
    return out


def _array(path, frames, codec, shards=None):
    a = zarr.create_array(LocalStore(path), name="img", shape=frames.shape, chunks=(codec.gop,) + frames.shape[1:],
                          shards=shards, dtype="uint8", serializer=codec, compressors=None)
    a[:] = frames
    return zarr.open_array(LocalStore(path), path="img", mode="r")


def test_h264_chunks_are_closed_gops_ffmpegs_demuxer_decodes(tmp_path, natural):
    frames = natural[:20]  # 2 full chunks of 8 and one padded with black frames
    got = _array(tmp_path / "s.zarr", frames, VideoCodec())[:]
    assert got.shape == frames.shape and got.dtype == np.uint8
    assert psnr(got, frames) >= 36.0
    for i in range(3):
        (codec, skip, take, packets), = parse_chunk((tmp_path / f"s.zarr/img/c/{i}/0/0/0").read_bytes())
        assert (codec, skip, take) == ("h264", 0, 8)
        raw = tmp_path / f"chunk{i}.h264"
        raw.write_bytes(b"".join(packets))  # Annex-B: SPS/PPS in band, the chunk alone is a stream
        with av.open(str(raw), format="h264") as c:
            ref = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
        assert len(ref) == 8
        np.testing.assert_array_equal(got[i * 8:i * 8 + 8], ref[:len(got[i * 8:i * 8 + 8])])
    meta = json.loads((tmp_path / "s.zarr/img/zarr.json").read_text())
    assert meta["codecs"][0] == {"name": "replaybuf.video", "configuration": {
        "codec": "h264", "crf": 18, "gop": 8, "preset": "medium", "tune": "fastdecode", "pix_fmt": "yuv420p"}}


@pytest.mark.parametrize("codec, floor", [(VideoCodec(codec="av1", gop=4), 35.0),
                                          (VideoCodec(gop=6, crf=23, pix_fmt="yuv444p"), 35.0)])
def test_av1_and_444_chunks_decode_with_a_bare_decoder_and_meet_psnr(tmp_path, natural, codec, floor):
    frames = natural[:12]
    got = _array(tmp_path / "s.zarr", frames, codec, shards=(12,) + frames.shape[1:])[:]
    assert psnr(got, frames) >= floor
    # one chunk's packets through a bare PyAV decoder (dav1d for AV1: FFmpeg's own av1 needs hardware)
    encoded = codec.encode_frame(frames[:codec.gop])
    (name, skip, take, packets), = parse_chunk(encoded)
    ctx = av.CodecContext.create({"av1": "libdav1d"}.get(name, name), "r")
    ref = [f.to_ndarray(format="rgb24") for p in packets for f in ctx.decode(av.Packet(p))]
    ref += [f.to_ndarray(format="rgb24") for f in ctx.decode(None)]
    np.testing.assert_array_equal(codec.decode_frame(encoded, (codec.gop,) + frames.shape[1:]), np.stack(ref))


def test_a_store_records_samples_and_converts_video_frames(tmp_path, natural):
    store = tmp_path / "rec.zarr"
    rb = ReplayBuffer.create_empty("zarr", store)
    lengths = [5, 11, 8]  # episodes that do not line up with the GOPs of 8
    starts = np.cumsum([0] + lengths)
    rng = np.random.default_rng(0)
    action = rng.random((sum(lengths), 2)).astype(np.float32)
    with rb.writer(frames="front=video") as w:
        for a, b in zip(starts[:-1], starts[1:]):
            w.add_episode({"front": natural[a:b], "action": action[a:b]})
    assert rb.get_chunks()["front"] == (8, 256, 256, 3) and rb.store.shards("data", "front")[0] % 8 == 0
    plain = zarr.open_group(store, mode="r")["data/front"][:]  # zarr-python's own read path
    assert psnr(plain, natural[:24]) >= 36.0
    np.testing.assert_array_equal(rb["front"][3:21], plain[3:21])  # rb[key][a:b]: the fast reader
    s = SequenceSampler(rb, sequence_length=4, pad_before=1, pad_after=1, keys=["front", "action"])
    batch = s.sample_batch(list(range(len(s))))
    for i in range(len(s)):
        buf_start, buf_end, seq_start, seq_end = s.indices[i]
        np.testing.assert_array_equal(batch["front"][i][seq_start:seq_end], plain[buf_start:buf_end])
        np.testing.assert_array_equal(batch["action"][i][seq_start:seq_end], action[buf_start:buf_end])
    # an append into the padded tail chunk: zarr re-encodes that chunk (a second generation for its frames)
    rb.add_episode({"front": natural[:3], "action": action[:3]})
    assert psnr(rb["front"][24:27], natural[:3]) >= 36.0
    assert psnr(rb["front"][:24], plain) >= 38.0
    # the training copy ↔ the archive copy, both ways, in place
    before = rb["front"][:]
    assert rb.set_frames("exact") == {"front": "jpegxl:1"}
    assert rb.get_chunks()["front"] == (1, 256, 256, 3)
    np.testing.assert_array_equal(rb["front"][:], before)  # lossless from here on: the video's pixels
    assert rb.set_frames("video:av1:g4") == {"front": "video:av1:30:g4"}
    assert rb.get_chunks()["front"] == (4, 256, 256, 3)
    assert rb.get_compressors()["front"] == VideoCodec(codec="av1", gop=4)
    assert psnr(rb["front"][:], before) >= 34.0
    np.testing.assert_array_equal(rb["action"][:27], np.concatenate([action[:24], action[:3]]))


def test_a_damaged_chunk_is_an_error_naming_the_key_and_rows(tmp_path, natural):
    from replaybuf_zarr.chunk_cache import ChunkCache
    from replaybuf_zarr.chunk_reader import make_reader

    frames = natural[:24]
    arr = _array(tmp_path / "s.zarr", frames, VideoCodec())
    good = arr[:]
    path = tmp_path / "s.zarr/img/c/1/0/0/0"
    raw = path.read_bytes()
    for damaged, why in [(raw[:len(raw) // 2], "truncated"), (b"XXXX" + raw[4:], "not a replaybuf video chunk"),
                         (pack_chunk([Segment("h264", b"", 0, 7, tuple(parse_chunk(raw)[0][3][:7]))]), "7 frames")]:
        path.write_bytes(damaged)
        reader = make_reader(arr, ChunkCache(0), 0)
        with pytest.raises(CorruptStoreError, match=rf"img: chunk \(1, 0, 0, 0\) \(rows 8\.\.15\).*{why}"):
            reader.read(6, 12)
        np.testing.assert_array_equal(reader.read(0, 8), good[:8])  # the other chunks still read
        np.testing.assert_array_equal(reader.read(16, 24), good[16:])
        with pytest.raises(ValueError, match=why):  # and zarr-python says why too
            zarr.open_array(LocalStore(tmp_path / "s.zarr"), path="img", mode="r")[8:9]


def test_frames_video_cannot_take_is_refused_by_name():
    cams = {"gray": ((4, 16, 16, 1), np.uint8), "rgba": ((4, 16, 16, 4), np.uint8),
            "odd": ((4, 15, 16, 3), np.uint8), "ok": ((4, 16, 16, 3), np.uint8)}
    for key, msg in (("gray", "1 channel"), ("rgba", "4 channel"), ("odd", "even sides")):
        with pytest.raises(ValueError, match=rf"'{key}'.*{msg}"):
            choose_frames({key: "video"}, cams)
    assert choose_frames({"ok": "video"}, cams, named_only=True) == {"ok": parse_frame_choice("video")}
    with pytest.raises(ValueError, match="crf must be in 0..51"):
        VideoCodec(crf=52)
    with pytest.raises(ValueError, match="tune is an x264 setting"):
        VideoCodec(codec="av1", tune="film")
    with pytest.raises(ValueError, match="pix_fmt for av1"):
        VideoCodec(codec="av1", pix_fmt="yuv444p")
    with pytest.raises(ValueError, match=r"stores 8 frames per chunk \(its GOP\)"):
        zarr.create_array(zarr.storage.MemoryStore(), shape=(16, 16, 16, 3), chunks=(1, 16, 16, 3), dtype="uint8",
                          serializer=VideoCodec(), compressors=None)
    with pytest.raises(ValueError, match="supports 3 \\(RGB\\) channels"):
        zarr.create_array(zarr.storage.MemoryStore(), shape=(16, 16, 16), chunks=(8, 16, 16), dtype="uint8",
                          serializer=VideoCodec(), compressors=None)
    with pytest.raises(ValueError, match="even frame sides"):
        zarr.create_array(zarr.storage.MemoryStore(), shape=(16, 16, 15, 3), chunks=(8, 16, 15, 3), dtype="uint8",
                          serializer=VideoCodec(), compressors=None)
    assert FRAME_CODECS["replaybuf.video"] is VideoCodec
    c = VideoCodec(codec="av1", crf=40, gop=16)
    assert VideoCodec.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_the_video_grammar():
    assert parse_frame_choice("video") == FrameChoice("video", 18, bitstream="h264", gop=8)
    assert parse_frame_choice("VIDEO:av1") == FrameChoice("video", 30, bitstream="av1", gop=8)
    assert parse_frame_choice("video:g16:24") == FrameChoice("video", 24, bitstream="h264", gop=16)
    assert not parse_frame_choice("video").lossless
    for text in ("video", "video:av1:40:g2", "video:h264:0:g1"):
        c = parse_frame_choice(text)
        assert parse_frame_choice(str(c)) == c
    for bad, msg in (("video:av1:0", "crf must be in 1..63"), ("video:h264:52", "in 0..51"),
                     ("video:g0", "in 1..1024"), ("video:hevc", "'hevc' is not h264"),
                     ("video:h264:av1", "given twice")):
        with pytest.raises(ValueError, match=msg):
            parse_frame_choice(bad)


def test_an_import_stores_a_camera_as_video_and_reports_its_psnr(tmp_path, capsys):
    from replaybuf_core.cli import main
    from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset

    root = write_dataset(tmp_path / "ds", Spec([12, 9], fps=10, cameras={"front": Camera(32, 48)}), "v2.1")
    assert main(["import", str(root), str(tmp_path / "o.zarr"), "--no-progress", "--frames", "video:g4"]) == 0
    out = capsys.readouterr().out
    assert "replaybuf.video(codec=h264, crf=18, gop=4" in out and "PSNR" in out
    rb = ReplayBuffer.create_from_path(tmp_path / "o.zarr")
    assert rb.get_chunks()["front"] == (4, 32, 48, 3)
    mp4 = sorted((root / "videos").rglob("*.mp4"))[0]
    with av.open(str(mp4)) as c:
        first = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    assert psnr(rb["front"][:12], first) >= 30.0


segments = st.builds(
    Segment, st.sampled_from(["h264", "av1", "hevc"]), st.binary(max_size=8), st.integers(0, 65535),
    st.integers(0, 65535), st.lists(st.binary(max_size=20), max_size=5).map(tuple))


@given(st.lists(segments, min_size=1, max_size=4), st.data())
@settings(max_examples=60, deadline=None)
def test_chunk_layout_round_trips_and_any_truncation_is_refused(segs, data):
    packed = pack_chunk(segs)
    assert unpack_chunk(packed) == segs
    assert [(c, s, t, p) for c, s, t, p in parse_chunk(packed)] == [(s.codec, s.skip, s.take, list(s.packets))
                                                                    for s in segs]
    cut = data.draw(st.integers(0, len(packed) - 1))
    with pytest.raises(ValueError):
        unpack_chunk(packed[:cut])
    with pytest.raises(ValueError, match="after its last segment"):
        unpack_chunk(packed + b"\0")


def test_a_sharded_video_store_reads_in_a_process_that_never_imports_replaybuf(tmp_path, natural):
    import subprocess
    import sys

    here = _array(tmp_path / "s.zarr", natural[:16], VideoCodec(), shards=(16, 256, 256, 3))[:]
    code = ("import sys, zarr, numpy as np\n"
            "assert not any(m.startswith('replaybuf') for m in sys.modules)\n"
            "a = zarr.open_array(sys.argv[1], mode='r'); np.save(sys.argv[2], a[:])\n"
            "print(type(a.serializer).__module__)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.zarr/img"), str(tmp_path / "x.npy")],
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["replaybuf_zarr.codecs.video"]  # found through the zarr.codecs entry point
    np.testing.assert_array_equal(np.load(tmp_path / "x.npy"), here)
