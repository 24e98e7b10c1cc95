"""Reads of some frames of a video chunk decode only the GOPs holding them, up to the last frame
wanted (issue 48: a window's frames of a pass-through chunk cost 2–3 decodes, not the chunk's 8).

Expected frames: the same rows read through zarr-python, which decodes whole chunks with the codec's
``decode_frame`` (the path this must equal), never through the chunk reader's row decoding.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer

av = pytest.importorskip("av")
pytest.importorskip("pyarrow.parquet")

from replaybuf_core.importing import import_dataset  # noqa: E402
from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset  # noqa: E402

CAM = "observation.images.front"


@pytest.fixture(scope="module", params=["passthrough", "video:h264:20:g8"])
def store(request, tmp_path_factory):
    """A pass-through store (source GOPs of 2 frames: chunks of 8 frames hold several segments, from
    two files where an episode ends inside a chunk) and a re-encoded one (one GOP a chunk)."""
    d = tmp_path_factory.mktemp("partial")
    spec = Spec([13, 22, 9], fps=10, cameras={CAM: Camera(48, 64, codec="libx264", gop=2)}, episodes_per_file=1)
    root = write_dataset(d / "ds", spec, "v2.1")
    options = {"video": "passthrough"} if request.param == "passthrough" else {}
    frames = None if request.param == "passthrough" else request.param
    import_dataset(root, d / "s.zarr", "lerobot", format_options=options, progress=False,
                   **({"frames": frames} if frames else {}))
    whole = zarr.open_group(str(d / "s.zarr"), mode="r")["data"][CAM][:]
    return d / "s.zarr", whole


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_rows_of_video_chunks_equal_whole_chunk_decodes(store, data):
    path, whole = store
    n = len(whole)
    rows = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=12)), dtype=np.int64)
    rb = ReplayBuffer.create_from_path(path)
    rb.store.cache_bytes = 0  # nothing cached: every read decodes
    got = rb.read_rows(CAM, rows.reshape(-1, 1) if data.draw(st.booleans()) else rows)
    np.testing.assert_array_equal(got.reshape((len(rows),) + whole.shape[1:]), whole[rows])


def test_a_single_frame_never_decodes_its_whole_chunk(store, monkeypatch):
    from replaybuf_zarr.codecs import video

    path, whole = store
    calls = []
    real = video.decode_segment
    monkeypatch.setattr(video.VideoCodec, "decode_frame", lambda *a: pytest.fail("a whole chunk was decoded"))
    monkeypatch.setattr(video, "decode_segment", lambda *a: calls.append(a[3]) or real(*a))
    rb = ReplayBuffer.create_from_path(path)
    rb.store.cache_bytes = 0
    for r in (0, 5, 9, 17, len(whole) - 1):
        calls.clear()
        np.testing.assert_array_equal(rb.read_rows(CAM, np.array([r])), whole[[r]])
        assert calls and all(k is not None and len(k) == 1 for k in calls), calls


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_frames_decoded_on_the_pool_land_at_the_places_named(store, data):
    """``read_rows(at=)`` with every chunk on the codec pool (each decoding thread copies its own
    chunk's frames into place), some of them whole and cached: each frame at its place, equal to the
    whole-chunk decode; the rows of ``out`` not named keep what they held."""
    from replaybuf_zarr import chunk_reader, row_gather

    path, whole = store
    n = len(whole)
    rows = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=16)), dtype=np.int64)
    if data.draw(st.booleans()):  # a whole chunk wanted: decoded whole, then cached
        rows = np.concatenate([rows, np.arange(8, 16)])
    m = len(rows) + data.draw(st.integers(0, 4))
    at = np.random.default_rng(data.draw(st.integers(0, 99))).permutation(m)[:len(rows)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(chunk_reader, "PARALLEL_MIN", 1)
        mp.setattr(row_gather, "_CPUS", 2)
        rb = ReplayBuffer.create_from_path(path)
        if data.draw(st.booleans()):
            rb.store.cache_bytes = 0
        else:
            rb.read_rows(CAM, rows)  # whole chunks among them are cached now
        out = np.full((m,) + whole.shape[1:], 77, np.uint8)
        rb.read_rows(CAM, rows, out=out, at=at)
    np.testing.assert_array_equal(out[at], whole[rows])
    assert (np.delete(out, at, axis=0) == 77).all()
