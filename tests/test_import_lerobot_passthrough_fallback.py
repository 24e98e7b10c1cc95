"""Pass-through cameras that cannot keep their packets fall back to re-encoding, with the reason in the
report (issue 30): AV1 open GOPs found before anything is written (from the bitstream's frame
headers), and — whatever the cause — a camera whose stored packets fail the bit-for-bit check.
Expected frames come from PyAV decoding the source mp4 files here, and the source's open GOP from
PyAV's own view of its frames (intra frames that are not key frames)."""

from __future__ import annotations

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.importing import import_dataset

av = pytest.importorskip("av")
pytest.importorskip("pyarrow.parquet")

from replaybuf_core.formats.lerobot.keyframes import av1_sync_problem  # noqa: E402
from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset  # noqa: E402
from test_import_lerobot_passthrough import decode_all, videos  # noqa: E402  (PyAV's whole decode)

AV1, H264 = "observation.images.front", "observation.images.wrist"
OPEN_GOP = {"svtav1-params": "irefresh-type=1"}  # libsvtav1: intra-only frames as random-access points


def intra_not_key(path) -> list[int]:
    """Frames PyAV decodes as intra pictures that are not key frames (an open GOP's entry points)."""
    with av.open(str(path)) as c:
        return [i for i, f in enumerate(c.decode(c.streams.video[0]))
                if f.pict_type == av.video.frame.PictureType.I and not f.key_frame]


def demux(path) -> tuple[list[tuple[bytes, bool]], bytes]:
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return [(bytes(p), p.is_keyframe) for p in c.demux(s) if p.size], bytes(s.codec_context.extradata or b"")


def test_an_av1_open_gop_is_found_before_writing_and_reencoded_with_the_reason(tmp_path):
    spec = Spec([20, 21], fps=10, cameras={AV1: Camera(48, 64, codec="libsvtav1", gop=8, options=OPEN_GOP),
                                           H264: Camera(32, 48, codec="libx264", gop=2)}, episodes_per_file=2)
    root = write_dataset(tmp_path / "ds", spec, "v3.0")
    assert intra_not_key(videos(root, AV1)[0])  # the source really has an open GOP
    report = import_dataset(root, tmp_path / "p.zarr", "lerobot", format_options={"video": "passthrough"},
                            progress=False)
    assert report.ok, report.summary()
    how = report.frame_handling[AV1]
    assert how.startswith("re-encoded with the frames= codec: ") and "open GOPs" in how and "intra-only" in how
    assert report.restarts == []  # found before anything was written, not by the check
    assert report.frame_handling[H264].startswith("passed through")  # the other camera still goes through
    assert not report.keys[AV1].codec.startswith("replaybuf.video")
    assert report.keys[H264].codec.startswith("replaybuf.video")
    with ReplayBuffer.create_from_path(tmp_path / "p.zarr") as rb:
        np.testing.assert_array_equal(rb[AV1][:], decode_all(videos(root, AV1)))
        np.testing.assert_array_equal(rb[H264][:], decode_all(videos(root, H264)))


def test_av1_random_access_points_are_read_from_the_first_frame_header(tmp_path):
    spec = Spec([24], fps=10, cameras={"closed": Camera(48, 64, codec="libsvtav1", gop=8),
                                       "open": Camera(48, 64, codec="libsvtav1", gop=8, options=OPEN_GOP)})
    root = write_dataset(tmp_path / "ds", spec, "v3.0")
    closed, extradata = demux(videos(root, "closed")[0])
    keys = [p for p, key in closed if key]
    assert len(keys) == 3 and all(av1_sync_problem(p, extradata) is None for p in keys)  # agrees with FFmpeg
    # a unit whose first frame is a hidden inter frame, ahead of a key frame: not a random-access point
    assert "INTER_FRAME" in av1_sync_problem(closed[1][0] + keys[1], extradata)
    opened, extradata = demux(videos(root, "open")[0])
    assert intra_not_key(videos(root, "open")[0])
    problems = [av1_sync_problem(p, extradata) for p, _ in opened]
    assert any(w and "of type INTRA_ONLY_FRAME" in w for w in problems)
    shows = [p for p, _ in opened if len(p) <= 4]  # a frame header OBU of one byte: show_existing_frame
    assert shows and all("show_existing_frame" in av1_sync_problem(p, extradata) for p in shows)
    # a frame header OBU (type 3, with a size) of a KEY_FRAME with show_frame 0: a forward key frame
    assert "hidden" in av1_sync_problem(bytes([3 << 3 | 2, 1, 0b0000_0000]), extradata)
    assert "no sequence header" in av1_sync_problem(bytes([3 << 3 | 2, 1, 0b0001_0000]))
    assert "do not parse" in av1_sync_problem(bytes([3 << 3 | 2, 9, 0]), extradata)


@pytest.mark.parametrize("damage", ["keyframe dropped", "another GOP's packets"])
def test_a_passthrough_camera_failing_the_check_is_reencoded_not_a_failed_import(tmp_path, monkeypatch, damage):
    """Whatever makes a pass-through camera's stored chunks differ from the source (here: the hand-over
    damaged on purpose, AV1 only), the import starts again with it re-encoded and says why."""
    from replaybuf_core.layout import video_packets

    spec = Spec([13, 14], fps=10, cameras={AV1: Camera(48, 64, codec="libsvtav1", gop=2),
                                           H264: Camera(32, 48, codec="libx264", gop=2)}, episodes_per_file=2)
    root = write_dataset(tmp_path / "ds", spec, "v3.0")
    real = video_packets.claim
    damaged = []

    def claim(chunk):
        segments = real(chunk)
        if segments and segments[0][0] == "av1" and len(segments) > 1:
            codec, extradata, skip, take, packets = segments[1]
            if damage == "keyframe dropped" and len(packets) > 1:
                packets = packets[1:]
            elif damage == "another GOP's packets":
                packets = segments[0][4][:len(packets)] if len(segments[0][4]) >= len(packets) else packets
            segments = [segments[0], (codec, extradata, skip, take, packets)] + list(segments[2:])
            damaged.append(True)
        return segments

    monkeypatch.setattr(video_packets, "claim", claim)
    report = import_dataset(root, tmp_path / "p.zarr", "lerobot", format_options={"video": "passthrough"},
                            progress=False)
    assert damaged and report.ok, report.summary()
    how = report.frame_handling[AV1]
    assert how.startswith(f"re-encoded with the frames= codec: the pass-through check failed (data/{AV1}: episode 0: rows")
    assert ("do not read back" if damage == "keyframe dropped" else "differ from the source (first: row") in how
    assert len(report.restarts) == 1 and report.restarts[0].startswith(f"data/{AV1}: episode 0")
    assert not report.keys[AV1].codec.startswith("replaybuf.video")
    assert report.frame_handling[H264].startswith("passed through")
    with ReplayBuffer.create_from_path(tmp_path / "p.zarr") as rb:
        np.testing.assert_array_equal(rb[AV1][:], decode_all(videos(root, AV1)))
        np.testing.assert_array_equal(rb[H264][:], decode_all(videos(root, H264)))
