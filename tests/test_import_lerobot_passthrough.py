"""Pass-through import of LeRobot video (issue 30 item 2): ``video="passthrough"`` keeps the mp4s'
packets.  Every expected value comes from PyAV reading the source mp4 files here (a whole decode, a
demux), never from the import."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.errors import CorruptStoreError
from replaybuf_core.importing import import_dataset

av = pytest.importorskip("av")
pytest.importorskip("pyarrow.parquet")

from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset  # noqa: E402

AV1, H264 = "observation.images.front", "observation.images.wrist"


def videos(root, cam):
    """The camera's mp4 files in dataset order (v3: chunk, then file index; v2: episode)."""
    return sorted((root / "videos").rglob(f"*{cam}*/**/*.mp4")) or sorted(
        p for p in (root / "videos").rglob("*.mp4") if cam in p.parts)


def decode_all(paths) -> np.ndarray:
    out = []
    for p in paths:
        with av.open(str(p)) as c:
            out += [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
    return np.stack(out)


def packets_of(paths) -> list[bytes]:
    out = []
    for p in paths:
        with av.open(str(p)) as c:
            out += [bytes(q) for q in c.demux(c.streams.video[0]) if q.size]
    return out


@pytest.fixture(scope="module")
def g2(tmp_path_factory):
    """A v3 dataset of two g=2 cameras (AV1, H.264); episodes of 7, 12 and 5 frames, two a file, so
    episodes start off the chunk grid and off their file's start."""
    spec = Spec([7, 12, 5], fps=10, cameras={AV1: Camera(48, 64, codec="libsvtav1", gop=2),
                                             H264: Camera(32, 48, codec="libx264", gop=2)}, episodes_per_file=2)
    return write_dataset(tmp_path_factory.mktemp("g2") / "ds", spec, "v3.0")


def test_passthrough_stores_the_source_packets_bit_exact_to_pyav(g2, tmp_path, monkeypatch):
    from replaybuf_zarr.codecs import video

    written = []
    real_pack = video.pack_chunk
    monkeypatch.setattr(video, "pack_chunk", lambda segs: written.append(list(segs)) or real_pack(segs))
    report = import_dataset(g2, tmp_path / "p.zarr", "lerobot", format_options={"video": "passthrough"},
                            progress=False)
    assert report.ok, report.summary()
    rb = ReplayBuffer.create_from_path(tmp_path / "p.zarr")
    for cam, bitstream in ((AV1, "av1"), (H264, "h264")):
        paths = videos(g2, cam)
        np.testing.assert_array_equal(rb[cam][:], decode_all(paths))  # the independent decode, bit for bit
        assert report.frame_handling[cam].startswith(f"passed through: the source's {bitstream} packets")
        assert report.keys[cam].codec.startswith(f"replaybuf.video(codec={bitstream}")
        assert rb.get_chunks()[cam][0] == 32  # whole g=2 GOPs, at least 32 frames
        assert report.keys[cam].bytes_per_frame <= 1.5 * report.keys[cam].source_bytes_per_frame
        source = set(packets_of(paths))
        segs = [s for chunk in written for s in chunk if s.codec == bitstream]
        assert segs and all(p in source for s in segs for p in s.packets)  # the source's packets, not re-encoded
    assert "video: observation.images.front: passed through" in report.summary()
    stored, fresh = rb.get_stats(), rb.get_stats(recompute=True)  # frames' statistics from the import's check
    assert stored.keys() == fresh.keys()
    for key in stored:
        for name in stored[key]:
            np.testing.assert_array_equal(stored[key][name], fresh[key][name], err_msg=f"{key} {name}")
    rb.close()


def test_fallbacks_are_reencoded_and_reported_with_the_reason(tmp_path):
    spec = Spec([40, 36], fps=10, cameras={
        "cam.ok": Camera(32, 32, codec="libsvtav1", gop=2),
        "cam.bframes": Camera(32, 32, codec="libx264", gop=8, bframes=2),
        "cam.longgop": Camera(32, 32, codec="libx264", gop=36),
        "cam.tenbit": Camera(32, 32, codec="libx264", gop=2, pix_fmt="yuv420p10le"),
        "cam.mpeg4": Camera(32, 32, codec="mpeg4", gop=2)}, episodes_per_file=2)
    root = write_dataset(tmp_path / "ds", spec, "v3.0")
    report = import_dataset(root, tmp_path / "p.zarr", "lerobot", format_options={"video": "passthrough"},
                            frames="exact", progress=False)
    assert report.ok, report.summary()
    how = report.frame_handling
    assert how["cam.ok"].startswith("passed through")
    assert "re-encoded" in how["cam.bframes"] and "reordered frames (B-frames)" in how["cam.bframes"]
    assert "re-encoded" in how["cam.longgop"] and "GOPs longer than 32 frames" in how["cam.longgop"]
    assert "re-encoded" in how["cam.tenbit"] and "pixel format yuv420p10le" in how["cam.tenbit"]
    assert "re-encoded" in how["cam.mpeg4"] and "mpeg4 video" in how["cam.mpeg4"]
    summary = report.summary()
    for cam in how:
        assert f"video: {cam}: " in summary
    rb = ReplayBuffer.create_from_path(tmp_path / "p.zarr")
    for cam in ("cam.bframes", "cam.longgop", "cam.tenbit", "cam.mpeg4"):  # the chosen frame codec, exact
        assert report.keys[cam].codec.startswith("replaybuf.webp")
        np.testing.assert_array_equal(rb[cam][:], decode_all(videos(root, cam)))
    np.testing.assert_array_equal(rb["cam.ok"][:], decode_all(videos(root, "cam.ok")))
    rb.close()
    # the default re-encodes every camera and says nothing about pass-through
    plain = import_dataset(root, tmp_path / "r.zarr", "lerobot", progress=False)
    assert plain.ok and plain.frame_handling == {} and plain.keys["cam.ok"].codec.startswith("replaybuf.webp")


def test_a_corrupt_packet_in_a_stored_chunk_is_a_corrupt_store_error(g2, tmp_path):
    report = import_dataset(g2, tmp_path / "p.zarr", "lerobot", format_options={"video": "passthrough"},
                            progress=False)
    assert report.ok
    keyframe = packets_of(videos(g2, H264))[0]
    shard = next((tmp_path / "p.zarr/data" / H264).rglob("c/0/0/0/0"))
    raw = shard.read_bytes()
    at = raw.find(keyframe)
    assert at > 0
    shard.write_bytes(raw[:at] + bytes(len(keyframe)) + raw[at + len(keyframe):])  # the first packet zeroed
    with ReplayBuffer.create_from_path(tmp_path / "p.zarr") as rb:
        rb.store.cache_bytes = 0
        with pytest.raises(CorruptStoreError, match=rf"{H264}.*rows 0\.\.31"):
            rb[H264][0:4]
        with pytest.raises(CorruptStoreError, match=rf"{H264}.*rows 0\.\.31"):
            rb.read_rows(H264, np.arange(0, 2))  # the damaged GOP, decoded alone
        # the chunk's other GOPs decode on their own: rows of them still read
        np.testing.assert_array_equal(rb.read_rows(H264, np.arange(8, 16)), decode_all(videos(g2, H264))[8:16])


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_a_truncated_source_mp4_names_episode_and_camera_and_leaves_nothing(tmp_path, version):
    spec = Spec([6, 8, 6], fps=10, cameras={H264: Camera(32, 32, codec="libx264", gop=2)}, episodes_per_file=2)
    root = write_dataset(tmp_path / "ds", spec, version)
    path = videos(root, H264)[1]  # v2.1: episode 1's file; v3.0: the file of episode 2
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    (tmp_path / "out").mkdir()
    episode = "1" if version == "v2.1" else "2"
    with pytest.raises(ValueError, match=rf"episode\(s\) {episode}, camera {H264}: .*truncated or damaged"):
        import_dataset(root, tmp_path / "out" / "o.zarr", "lerobot", format_options={"video": "passthrough"},
                       progress=False)
    assert list((tmp_path / "out").iterdir()) == []


def test_passthrough_refuses_a_backend_without_a_video_codec_and_bad_values(g2, tmp_path):
    pytest.importorskip("replaybuf_hdf5")
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match="video passthrough .* no video frame codec"):
        import_dataset(g2, tmp_path / "out" / "o.h5", "lerobot", format_options={"video": "passthrough"},
                       backend="hdf5", progress=False)
    assert list((tmp_path / "out").iterdir()) == []
    with pytest.raises(ValueError, match="video must be one of"):
        import_dataset(g2, tmp_path / "out" / "o.zarr", "lerobot", format_options={"video": "copy"}, progress=False)
    shutil.rmtree(tmp_path / "out")


def test_the_packet_hand_over_is_by_content_and_only_within_a_session():
    from replaybuf_core.layout import video_packets as vp

    a, b = np.full((4, 6, 3), 7, np.uint8), np.full((4, 6, 3), 9, np.uint8)
    gop = vp.GopPackets("h264", b"x", [b"k", b"p1", b"p2"])
    vp.register(a, vp.PacketRecord(gop, 0))  # no session: nothing kept
    assert vp.registered_frames() == 0 and vp.claim(np.stack([a])) is None
    with vp.session():
        vp.register(a, vp.PacketRecord(gop, 1))
        vp.register(b, vp.PacketRecord(gop, 2))
        vp.register(a, vp.PacketRecord(gop, 0))  # an identical frame: either record is an encoding of it
        chunk = np.stack([a, b, np.zeros_like(a), np.zeros_like(a)])  # zarr's padding past the end
        segs = vp.claim(chunk)
        assert segs[-1] == (vp.BLANK, b"", 0, 2, ())
        assert [s[2:4] for s in segs[:-1]] in ([(1, 2)], [(0, 1), (2, 1)])
        assert vp.claim(chunk) == segs  # a chunk written again (an episode ended inside it) finds them again
        assert vp.claim(np.stack([a, np.full_like(a, 1)])) is None  # a frame no source decoded: encoded afresh
    assert vp.registered_frames() == 0


def test_cli_video_passthrough(g2, tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "replaybuf_core.cli", "import", "lerobot", str(g2),
                        str(tmp_path / "c.zarr"), "--video", "passthrough", "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"video: {H264}: passed through" in r.stdout and "verification: OK" in r.stdout
