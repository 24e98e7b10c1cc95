"""``LeRobotSource.read_rows``: rows from the middle of an episode, as a Dask import's span asks for
them, decode from the keyframe before the first row (a seek), not from the episode's start.

Expected values come from other paths: the frames' own barcodes and the parquet rows read with
pyarrow (v3 fixture), the mp4 decoded whole with PyAV and its keyframes found by demuxing (GR00T).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybuf_core import registry
from replaybuf_core.formats.lerobot.video import VideoReader
from shared_data import LEROBOT_V2_GR00T, LEROBOT_V3_2CAM, requires_gr00t, requires_v3_2cam

av = pytest.importorskip("av")
pq = pytest.importorskip("pyarrow.parquet")

FRONT, WRIST = "observation.images.front", "observation.images.wrist"


def barcode(frame: np.ndarray, row: int) -> int:
    """The 8-bit number drawn in row ``row`` of a v3 fixture frame (8 cells, MSB first)."""
    w = frame.shape[1] // 8
    return int("".join("1" if frame[row, i * w + w // 2, 0] > 127 else "0" for i in range(8)), 2)


@pytest.fixture(scope="module")
def v3():
    if not LEROBOT_V3_2CAM.is_dir():
        pytest.skip("v3 fixture not found")
    source = registry.get_format("lerobot").open(LEROBOT_V3_2CAM)
    tables = [pq.read_table(f) for f in sorted((LEROBOT_V3_2CAM / "data").glob("*/*.parquet"))]
    rows = {k: np.concatenate([np.asarray(t[k].to_pylist()) for t in tables]) for k in ("episode_index", "action")}
    yield source, rows
    source.close()


@requires_v3_2cam
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_rows_from_anywhere_in_any_order_are_the_episodes_rows(v3, data):
    """One source for every example, so the readers' positions carry over from read to read (the
    reuse of a decoder positioned just before, and the seeks back and forward)."""
    source, rows = v3
    for _ in range(data.draw(st.integers(1, 4))):
        ep = data.draw(st.integers(0, source.n_episodes - 1))
        n = int(source.episode_lengths[ep])
        a = data.draw(st.integers(0, n))
        b = data.draw(st.integers(a, n))
        got = source.read_rows(ep, [FRONT, WRIST, "action"], a, b)
        want_action = rows["action"][rows["episode_index"] == ep][a:b]
        assert got["action"].shape == (b - a, 7)
        np.testing.assert_array_equal(got["action"], want_action)
        for cam in (FRONT, WRIST):
            frames = got[cam]
            assert frames.shape[0] == b - a
            h = frames.shape[1]
            assert [barcode(f, h - 3) for f in frames] == list(range(a, b)), (cam, ep, a, b)
            assert {barcode(f, h - 7) for f in frames} <= {ep}


def _keyframe_indices(path) -> list[int]:
    with av.open(str(path)) as c:
        packets = [(p.pts, p.is_keyframe) for p in c.demux(c.streams.video[0]) if p.pts is not None]
    order = sorted(pts for pts, _ in packets)
    return [order.index(pts) for pts, key in packets if key]


@requires_gr00t
def test_a_read_from_mid_episode_decodes_from_the_keyframe_before_it(monkeypatch):
    video = LEROBOT_V2_GR00T / "videos/chunk-000/observation.images.ego_view/episode_000000.mp4"
    with av.open(str(video)) as c:
        want = [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
    keyframes = _keyframe_indices(video)
    start, stop = 300, 310
    first_decoded = max(k for k in keyframes if k <= start)
    assert first_decoded > 0  # else this file cannot tell a seek from a decode from the start
    decoded = []
    original = VideoReader._next

    def counting(self, episode, row):
        frame = original(self, episode, row)
        decoded.append(frame)
        return frame

    monkeypatch.setattr(VideoReader, "_next", counting)
    source = registry.get_format("lerobot").open(LEROBOT_V2_GR00T, align_video_start=True, find_moved_files=True,
                                                 skip_cameras=["observation.images.egoview"])  # declared, no video
    try:
        got = source.read_rows(0, ["observation.images.ego_view", "action"], start, stop)
    finally:
        source.close()
    assert np.array_equal(got["observation.images.ego_view"], np.stack(want[start:stop]))
    assert len(decoded) == stop - first_decoded  # not the `start` frames before it
    table = pq.read_table(LEROBOT_V2_GR00T / "data/chunk-000/episode_000000.parquet")
    np.testing.assert_array_equal(got["action"], np.stack(table["action"].to_pylist())[start:stop])


def test_an_extra_frame_just_before_a_mid_episode_read_is_named(tmp_path):
    """A read starting at row 2 of an episode whose video holds a frame between rows 1 and 2 names
    it, as a whole read of the episode does (a span boundary must not hide it)."""
    import pyarrow as pa

    from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset

    root = write_dataset(tmp_path / "ds", Spec([6], fps=10, cameras={"cam": Camera(16, 16)}), "v2.1")
    p = root / "data/chunk-000/episode_000000.parquet"
    t = pq.read_table(p)
    ts = np.delete(t["timestamp"].to_numpy(), 2)  # row 2 removed: frame 0.2 s belongs to no row
    pq.write_table(t.slice(0, 5).set_column(t.schema.get_field_index("timestamp"), "timestamp", pa.array(ts)), p)
    (root / "meta/episodes.jsonl").write_text(json.dumps({"episode_index": 0, "tasks": ["x"], "length": 5}) + "\n")
    source = registry.get_format("lerobot").open(root)
    try:
        assert source.read_rows(0, ["cam"], 0, 2)["cam"].shape == (2, 16, 16, 3)
        with pytest.raises(ValueError, match=r"row 2: an extra frame at 0\.2 s sits between rows 1 \(0\.1.* s\) "
                                             r"and 2 \(0\.3.* s\)"):
            source.read_rows(0, ["cam"], 2, 5)
        with pytest.raises(IndexError, match=r"episode 0: rows \[3, 9\) are not within its 5 rows"):
            source.read_rows(0, ["cam"], 3, 9)
    finally:
        source.close()
