"""The LeRobot format on small datasets the tests write themselves (pyarrow + PyAV): v2.1 and v3.0,
depth videos, PNG image features, B-frames, and the quirks of real datasets.

Expected frames come from decoding the written mp4 files whole with PyAV (no seeking, no time
matching); expected rows from reading the parquet files with pyarrow.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from replaybuf_core import ReplayBuffer
from replaybuf_core.importing import import_dataset

av = pytest.importorskip("av")
pq = pytest.importorskip("pyarrow.parquet")

from replaybuf_core.testing.lerobot_writer import Camera, Spec, write_dataset  # noqa: E402

CAMS = {"cam.rgb": Camera(48, 64, bframes=2, gop=6), "cam.depth": Camera(24, 32, depth=True)}


def decode_whole(path, depth=False) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        if depth:
            return [f.to_ndarray()[..., None] for f in c.decode(c.streams.video[0])]
        return [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "replaybuf_core.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module", params=["v2.1", "v3.0"])
def dataset(request, tmp_path_factory):
    spec = Spec([9, 4, 13, 6], fps=10, cameras=CAMS, image_keys={"observation.image": (16, 20)}, episodes_per_file=3)
    return request.param, spec, write_dataset(tmp_path_factory.mktemp(request.param) / "ds", spec, request.param)


def test_every_key_is_imported_exactly(dataset, tmp_path):
    version, spec, root = dataset
    report = import_dataset(root, tmp_path / "out.zarr", progress=False)
    assert report.ok, report.summary()
    rb = ReplayBuffer.create_from_path(tmp_path / "out.zarr")
    assert list(np.diff(rb.episode_ends, prepend=0)) == spec.lengths
    import pyarrow as pa

    table = pa.concat_tables([pq.read_table(p) for p in sorted((root / "data").glob("*/*.parquet"))]).sort_by("index")
    np.testing.assert_array_equal(rb["observation.state"][:], np.stack(table["observation.state"].to_pylist()))
    assert rb["observation.state"].dtype == np.float32
    for name in ("timestamp", "frame_index", "episode_index", "index", "task_index", "next.reward"):
        np.testing.assert_array_equal(rb[name][:], table[name].to_numpy(), err_msg=name)
    # PNG image cells, decoded here with Pillow from the parquet bytes
    from io import BytesIO

    from PIL import Image

    want = np.stack([np.asarray(Image.open(BytesIO(c["bytes"]))) for c in table["observation.image"].to_pylist()])
    assert np.array_equal(rb["observation.image"][:], want)
    # frames: each mp4 decoded whole, in order
    for key, cam in CAMS.items():
        paths = sorted((root / "videos" / key).glob("chunk-*/file-*.mp4")) if version == "v3.0" else \
            [root / f"videos/chunk-000/{key}/episode_{ep:06d}.mp4" for ep in range(len(spec.lengths))]
        want = np.stack([f for p in paths for f in decode_whole(p, cam.depth)])
        got = rb[key][:]
        assert got.dtype == (np.uint16 if cam.depth else np.uint8)
        assert np.array_equal(got, want), key
    assert rb.store.dtype("data", "cam.depth") == np.uint16
    assert "webp" not in str(rb.get_compressors()["cam.depth"]).lower()  # depth: never a frame codec
    assert "webp" in str(rb.get_compressors()["cam.rgb"]).lower()
    lossy_note = next(n for n in report.notes if "lossy when recorded" in n)
    assert "cam.rgb" in lossy_note and "cam.depth" not in lossy_note  # ffv1 depth is stored losslessly


def test_episode_selection_and_skipped_keys(dataset, tmp_path):
    _, spec, root = dataset
    report = import_dataset(root, tmp_path / "o.zarr", progress=False, episodes="1:3", skip_keys=["cam.depth"])
    assert report.ok
    rb = ReplayBuffer.create_from_path(tmp_path / "o.zarr")
    assert list(np.diff(rb.episode_ends, prepend=0)) == spec.lengths[1:3]
    assert "cam.depth" not in rb.keys()
    np.testing.assert_array_equal(rb.store.read("meta", "source_episode_index", 0, 2), [1, 2])
    np.testing.assert_array_equal(rb["episode_index"][:], np.repeat([1, 2], spec.lengths[1:3]))
    assert rb.store.get_attrs("data")["import"]["episodes"] == "1:3"
    with pytest.raises(ValueError, match="index 7 is out of range; the source has 4 episodes"):
        import_dataset(root, tmp_path / "p.zarr", progress=False, episodes="0,7")
    with pytest.raises(ValueError, match=r"skip_keys: \['nope'\] not in the source"):
        import_dataset(root, tmp_path / "p.zarr", progress=False, skip_keys=["nope"])
    assert not (tmp_path / "p.zarr").exists()


def test_long_episodes_stream_in_parts(dataset, tmp_path, monkeypatch):
    from replaybuf_core.importing import pipeline

    _, spec, root = dataset
    monkeypatch.setattr(pipeline, "PART_BYTES", 4000)  # a few steps a part
    report = import_dataset(root, tmp_path / "o.zarr", progress=False)
    assert report.ok
    ref = tmp_path / "ref.zarr"
    monkeypatch.undo()
    assert import_dataset(root, ref, progress=False).ok
    a, b = ReplayBuffer.create_from_path(tmp_path / "o.zarr"), ReplayBuffer.create_from_path(ref)
    for key in a.keys():
        assert np.array_equal(a[key][:], b[key][:]), key


def test_parts_are_bounded(dataset):
    from replaybuf_core.formats.lerobot.source import LeRobotSource

    _, spec, root = dataset
    with LeRobotSource(root) as src:
        parts = list(src.iter_parts(2, list(src.keys), 5))
    assert [len(p["cam.rgb"]) for p in parts] == [5, 5, 3]
    assert all(len(v) == len(p["cam.rgb"]) for p in parts for v in p.values())


def test_timestamps_offset_from_the_video(tmp_path):
    spec = Spec([8, 5], fps=10, cameras={"cam": Camera(16, 16)}, timestamp_offset_s=0.1)
    root = write_dataset(tmp_path / "ds", spec, "v2.1")
    with pytest.raises(ValueError, match=r"episode 0, camera cam, row 7: .* ends .*first row is at 0\.1.*"
                                         r"align_video_start"):
        import_dataset(root, tmp_path / "o.zarr", progress=False)
    assert not (tmp_path / "o.zarr").exists()
    report = import_dataset(root, tmp_path / "o.zarr", progress=False, format_options={"align_video_start": True})
    assert report.ok
    want = np.stack(decode_whole(root / "videos/chunk-000/cam/episode_000000.mp4"))
    assert np.array_equal(ReplayBuffer.create_from_path(tmp_path / "o.zarr")["cam"][:8], want)


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_ten_bit_video_and_a_display_rotation_are_said_not_dropped_silently(tmp_path, version):
    """A 10-bit camera is stored as 8-bit RGB — as PyAV's rgb24 decode gives it (compared) — and the
    report says so; a rotation the file asks players for is said too (PyAV's VideoFrame.rotation)."""
    from types import SimpleNamespace

    from replaybuf_core.formats.lerobot.video import VideoReader

    spec = Spec([6, 4], fps=10, cameras={"cam": Camera(16, 16, pix_fmt="yuv420p10le")})
    root = write_dataset(tmp_path / "ds", spec, version)
    report = import_dataset(root, tmp_path / "o.zarr", progress=False)
    assert report.ok, report.summary()
    assert [n for n in report.notes if "10-bit video (yuv420p10le)" in n and "low 2 bits" in n], report.notes
    assert "10-bit video" in report.summary()
    video = next(iter(sorted(root.glob("videos/**/*.mp4"))))
    with ReplayBuffer.create_from_path(tmp_path / "o.zarr") as rb:
        np.testing.assert_array_equal(rb["cam"][:6], np.stack(decode_whole(video)[:6]))
    reader = VideoReader(str(video), "cam", False, 1e-4)
    try:
        reader._note_rotation(SimpleNamespace(rotation=0))
        reader._note_rotation(SimpleNamespace(rotation=-90.0))
        assert [n for n in reader.notes if "rotate" in n] == [
            f"camera cam: {video} asks players to rotate its frames by -90 degrees (display matrix); the frames "
            "are stored as coded, not rotated"]
    finally:
        reader.close()
    plain = write_dataset(tmp_path / "plain", Spec([3], fps=10, cameras={"cam": Camera(16, 16)}), version)
    assert not [n for n in import_dataset(plain, tmp_path / "p.zarr", progress=False).notes if "bit video" in n]


def test_frames_too_far_from_their_rows_are_refused(tmp_path):
    spec = Spec([6], fps=10, cameras={"cam": Camera(16, 16)})
    root = write_dataset(tmp_path / "ds", spec, "v2.1")
    p = root / "data/chunk-000/episode_000000.parquet"
    t = pq.read_table(p)
    import pyarrow as pa

    ts = t["timestamp"].to_numpy().copy()
    ts[3] += 0.003  # 3 ms off: more than LeRobot's 1e-4 s tolerance
    pq.write_table(t.set_column(t.schema.get_field_index("timestamp"), "timestamp", pa.array(ts)), p)
    with pytest.raises(ValueError, match=r"episode 0, camera cam, row 3: its frame in .* is at 0\.3 s, -0\.003 s "
                                         r"from the row's time 0\.303.* s \(tolerance 0\.0001 s\)"):
        import_dataset(root, tmp_path / "o.zarr", progress=False)
    # within a looser tolerance, the same rows import, each with its own frame
    report = import_dataset(root, tmp_path / "o.zarr", progress=False, format_options={"tolerance_s": 0.005})
    assert report.ok
    assert np.array_equal(ReplayBuffer.create_from_path(tmp_path / "o.zarr")["cam"][:],
                          np.stack(decode_whole(root / "videos/chunk-000/cam/episode_000000.mp4")))
    # a row missing (its frame is an extra one between two rows) is named too
    ts2 = np.delete(t["timestamp"].to_numpy(), 2)
    t2 = t.slice(0, 5).set_column(t.schema.get_field_index("timestamp"), "timestamp", pa.array(ts2))
    pq.write_table(t2, p)
    ep = root / "meta/episodes.jsonl"
    ep.write_text(json.dumps({"episode_index": 0, "tasks": ["x"], "length": 5}) + "\n")
    with pytest.raises(ValueError, match=r"row 2: an extra frame at 0\.2 s sits between rows 1 \(0\.1.* s\) and "
                                         r"2 \(0\.3.* s\)"):
        import_dataset(root, tmp_path / "x.zarr", progress=False)


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_missing_videos_are_named_or_skipped(tmp_path, version):
    spec = Spec([5, 6, 7], fps=10, cameras={"cam": Camera(16, 16)}, missing_videos={("cam", 1)}, episodes_per_file=1)
    root = write_dataset(tmp_path / "ds", spec, version)
    why = "is missing" if version == "v2.1" else "video indices are null"
    with pytest.raises(ValueError, match=rf"1 chosen episode\(s\) cannot be imported, episode\(s\) \[1\]; e.g. "
                                         rf"episode 1: camera cam: .*{why}.*skip_episodes_without_video"):
        import_dataset(root, tmp_path / "o.zarr", progress=False)
    # episodes chosen around the missing one need no option; positions stay the source's
    report = import_dataset(root, tmp_path / "sel.zarr", progress=False, episodes="2")
    assert report.ok
    np.testing.assert_array_equal(np.unique(ReplayBuffer.create_from_path(tmp_path / "sel.zarr")["episode_index"][:]), [2])
    report = import_dataset(root, tmp_path / "sel2.zarr", progress=False, episodes="1:3",
                            format_options={"skip_episodes_without_video": True})
    assert report.ok and [s["episode"] for s in report.skipped_episodes] == [1]
    np.testing.assert_array_equal(ReplayBuffer.create_from_path(tmp_path / "sel2.zarr").store.read(
        "meta", "source_episode_index", 0, 1), [2])
    report = import_dataset(root, tmp_path / "o.zarr", progress=False,
                            format_options={"skip_episodes_without_video": True})
    assert report.ok
    assert [s["episode"] for s in report.skipped_episodes] == [1]
    assert "skipped 1 source episode(s)" in report.summary()
    rb = ReplayBuffer.create_from_path(tmp_path / "o.zarr")
    np.testing.assert_array_equal(rb.store.read("meta", "source_episode_index", 0, 2), [0, 2])
    np.testing.assert_array_equal(np.unique(rb["episode_index"][:]), [0, 2])
    assert rb.store.get_attrs("data")["import"]["skipped_episodes"][0]["episode"] == 1
    # or leave the camera out
    report = import_dataset(root, tmp_path / "p.zarr", progress=False, format_options={"skip_cameras": ["cam"]})
    assert report.ok and "cam" not in ReplayBuffer.create_from_path(tmp_path / "p.zarr").keys()


def test_a_declared_camera_without_files_is_refused_by_name_unless_skipped(tmp_path):
    """A declared camera is never dropped unasked: the error names it and where it looked."""
    spec = Spec([5], fps=10, cameras={"cam": Camera(16, 16)}, declared_only=["ghost"])
    root = write_dataset(tmp_path / "ds", spec, "v2.1")
    with pytest.raises(ValueError, match=r"camera ghost is declared in meta/info.json but no episode has a video "
                                         r"file for it \(episode 0: .*videos/chunk-000/ghost/episode_000000.mp4 is "
                                         r"missing\).*skip-camera ghost"):
        import_dataset(root, tmp_path / "o.zarr", progress=False)
    assert not (tmp_path / "o.zarr").exists()
    r = run_cli("import", "lerobot", root, tmp_path / "o.zarr", "--no-progress")
    assert r.returncode == 2 and "--skip-camera ghost" in r.stderr and not (tmp_path / "o.zarr").exists()
    report = import_dataset(root, tmp_path / "o.zarr", progress=False, format_options={"skip_cameras": ["ghost"]})
    assert report.ok and "camera ghost left out (skip_cameras)" in report.summary()
    keys = ReplayBuffer.create_from_path(tmp_path / "o.zarr").keys()
    assert "ghost" not in keys and "cam" in keys


def test_videos_kept_outside_the_template_folder_are_found_by_find_moved_files(tmp_path):
    """A dataset that keeps its videos under video/ instead of videos/ (a held-back trial's dataset):
    refused by name, then found anywhere in the dataset folder with find_moved_files."""
    spec = Spec([4, 6], fps=10, cameras={"cam": Camera(16, 16)})
    root = write_dataset(tmp_path / "ds", spec, "v2.1")
    (root / "videos").rename(root / "video")
    with pytest.raises(ValueError, match=r"camera cam is declared.*episode_000000.mp4 is missing, but "
                                         r".*video/chunk-000/cam/episode_000000.mp4 has its name.*find_moved_files"):
        import_dataset(root, tmp_path / "o.zarr", progress=False)
    report = import_dataset(root, tmp_path / "o.zarr", progress=False, format_options={"find_moved_files": True})
    assert report.ok and "found by name (find_moved_files)" in report.summary()
    rb = ReplayBuffer.create_from_path(tmp_path / "o.zarr")
    assert rb["cam"].shape == (10, 16, 16, 3)


def test_a_failing_import_leaves_nothing(tmp_path, monkeypatch):
    from replaybuf_core.formats.lerobot import video

    spec = Spec([30, 30, 30], fps=10, cameras={"cam": Camera(16, 16)})
    root = write_dataset(tmp_path / "ds", spec, "v3.0")
    real = video.VideoReader.frames
    calls = {"n": 0}

    def failing(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(5, "Input/output error")
        return real(self, *a, **k)

    monkeypatch.setattr(video.VideoReader, "frames", failing)
    (tmp_path / "out").mkdir()
    with pytest.raises(OSError, match="Input/output error"):
        import_dataset(root, tmp_path / "out" / "o.zarr", progress=False)
    assert calls["n"] == 2
    assert list((tmp_path / "out").iterdir()) == []


def test_cli_guesses_the_format_and_names_what_it_cannot_open(tmp_path):
    spec = Spec([4, 3], fps=10, cameras={"cam": Camera(16, 16)})
    root = write_dataset(tmp_path / "ds", spec, "v3.0")
    r = run_cli("import", root, tmp_path / "a.zarr", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "(lerobot)" in r.stdout and "verification: OK" in r.stdout
    r = run_cli("import", "lerobot", root, tmp_path / "b.zarr", "--no-progress", "--skip-camera", "cam")
    assert r.returncode == 0, r.stderr
    r = run_cli("import", "diffusion-policy", root, tmp_path / "c.zarr", "--skip-camera", "cam")
    assert r.returncode == 2 and "--skip-camera is an option of the lerobot format, not of diffusion-policy" in r.stderr
    (tmp_path / "junk").mkdir()
    r = run_cli("import", tmp_path / "junk", tmp_path / "d.zarr")
    assert r.returncode == 2
    assert "no installed import format recognises it" in r.stderr and "lerobot" in r.stderr
    assert "diffusion-policy" in r.stderr
    r = run_cli("import", "nosuch", root, tmp_path / "d.zarr")
    assert r.returncode == 2 and "no replaybuf import format named 'nosuch'" in r.stderr
    r = run_cli("import", root, tmp_path / "a.zarr")
    assert r.returncode == 2 and "already exists" in r.stderr
    r = run_cli("formats")
    assert r.returncode == 0 and "lerobot" in r.stdout and "diffusion-policy" in r.stdout
    assert not (tmp_path / "c.zarr").exists() and not (tmp_path / "d.zarr").exists()


def test_sigterm_mid_import_leaves_nothing(tmp_path):
    import os
    import signal
    import time

    spec = Spec([100] * 6, fps=10, cameras={"cam": Camera(128, 160)}, episodes_per_file=3)
    root = write_dataset(tmp_path / "ds", spec, "v3.0")
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.Popen([sys.executable, "-m", "replaybuf_core.cli", "import", str(root), str(out / "o.zarr"),
                          "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any((out / n / "data").exists() for n in os.listdir(out)):
        time.sleep(0.02)  # the build beside o.zarr has begun
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "terminated (SIGTERM)" in err
    assert list(out.iterdir()) == []


def test_bad_settings_and_damaged_metadata_are_refused(tmp_path):
    spec = Spec([6, 5], fps=10, cameras={"cam": Camera(16, 16)})
    root = write_dataset(tmp_path / "ds", spec, "v3.0")
    with pytest.raises(ValueError, match=r"tolerance_s=0.05 s is not below half a frame period \(0.05 s at 10 fps\)"):
        import_dataset(root, tmp_path / "o.zarr", progress=False, format_options={"tolerance_s": 0.05})
    with pytest.raises(ValueError, match="finite"):
        import_dataset(root, tmp_path / "o.zarr", progress=False, format_options={"tolerance_s": float("inf")})
    with pytest.raises(TypeError, match="skip_cameras must be a list"):
        import_dataset(root, tmp_path / "o.zarr", progress=False, format_options={"skip_cameras": "cam"})
    with pytest.raises(ValueError, match="chooses no episode"):
        import_dataset(root, tmp_path / "o.zarr", progress=False, episodes="5:2")
    # the source inside the destination: replacing it would delete the source
    assert import_dataset(root, tmp_path / "outer.zarr", progress=False).ok
    import shutil

    shutil.copytree(root, tmp_path / "outer.zarr" / "ds")
    with pytest.raises(ValueError, match="is inside the destination"):
        import_dataset(tmp_path / "outer.zarr" / "ds", tmp_path / "outer.zarr", progress=False, overwrite=True)
    assert (tmp_path / "outer.zarr" / "ds" / "meta" / "info.json").is_file()
    # a declared feature missing from the parquet, a missing episode-metadata line, a NaN timestamp
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["observation.extra"] = {"dtype": "float32", "shape": [2]}
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match=r"declares feature\(s\) \['observation.extra'\], which this data file lacks"):
        import_dataset(root, tmp_path / "p.zarr", progress=False)
    del info["features"]["observation.extra"]
    info["total_episodes"] = 3
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="total_episodes 3, but the episode metadata lists 2"):
        import_dataset(root, tmp_path / "p.zarr", progress=False)
    info["total_episodes"] = 2
    (root / "meta/info.json").write_text(json.dumps(info))
    import pyarrow as pa

    p = root / "data/chunk-000/file-000.parquet"
    t = pq.read_table(p)
    ts = t["timestamp"].to_numpy().copy()
    ts[3] = np.nan
    pq.write_table(t.set_column(t.schema.get_field_index("timestamp"), "timestamp", pa.array(ts)), p)
    with pytest.raises(ValueError, match="episode 0: row 3's timestamp is nan"):
        import_dataset(root, tmp_path / "p.zarr", progress=False)
    assert not (tmp_path / "p.zarr").exists()


def test_lossy_quality_needs_an_image_codec(tmp_path):
    pytest.importorskip("replaybuf_hdf5")
    spec = Spec([4], fps=10, cameras={"cam": Camera(16, 16)})
    root = write_dataset(tmp_path / "ds", spec, "v2.1")
    with pytest.raises(ValueError, match="has no image codec and stores frames exactly; cam=webp:50 is lossy"):
        import_dataset(root, tmp_path / "o.h5", progress=False, backend="hdf5", lossy_quality=50)
    assert list(tmp_path.iterdir()) == [tmp_path / "ds"]
    with pytest.raises(ValueError, match="keeps its stores in memory"):
        import_dataset(root, tmp_path / "o", progress=False, backend="numpy")


def test_a_replaybuf_store_imports_again_keeping_its_records(tmp_path):
    spec = Spec([4, 3, 5], fps=10, cameras={"cam": Camera(16, 16)})
    root = write_dataset(tmp_path / "ds", spec, "v2.1")
    assert import_dataset(root, tmp_path / "a.zarr", progress=False, episodes="1:").ok
    report = import_dataset(tmp_path / "a.zarr", tmp_path / "b.zarr", progress=False, episodes="1")
    assert report.ok and report.format == "diffusion-policy"
    rb = ReplayBuffer.create_from_path(tmp_path / "b.zarr")
    np.testing.assert_array_equal(rb.store.read("meta", "source.source_episode_index", 0, 1), [2])
    assert json.loads(rb.store.read("meta", "source.episode_attrs", 0, 1)[0])["episode_index"] == 2


def test_episode_records_without_a_length_or_listed_twice_are_refused_by_name(tmp_path):
    """A raw KeyError ('error: length') and an episode imported twice, before: now named, nothing written."""
    spec = Spec([4, 5], fps=10, cameras={"cam": Camera(16, 16)})
    root = write_dataset(tmp_path / "ds", spec, "v2.1")
    listing = root / "meta" / "episodes.jsonl"
    lines = listing.read_text().splitlines()
    listing.write_text("\n".join([lines[0], lines[0], *lines[1:]]) + "\n")  # episode 0 twice
    with pytest.raises(ValueError, match=r"episodes.jsonl: episode 0 is listed twice \(records 0 and 1\)"):
        import_dataset(root, tmp_path / "o.zarr", progress=False)
    no_length = [json.loads(line) for line in lines]
    del no_length[1]["length"]
    listing.write_text("\n".join(json.dumps(r) for r in no_length) + "\n")
    r = run_cli("import", "lerobot", root, tmp_path / "o.zarr", "--no-progress")
    assert r.returncode == 2 and "episode record 1" in r.stderr and "has length missing" in r.stderr, r.stderr
    assert not (tmp_path / "o.zarr").exists()
