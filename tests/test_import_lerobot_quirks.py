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


def _probed(path):
    """(canonical codec, pix_fmt, rotation of the first frame) of a video file, read with PyAV here."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return s.codec_context.codec.canonical_name, s.codec_context.pix_fmt, next(c.decode(s)).rotation


def _under(summary: str, key: str) -> list[str]:
    """The report lines under ``key``'s line, up to the next key's (indented past the key column)."""
    lines = summary.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == [key])
    out = []
    for line in lines[at + 1:]:
        if not line.startswith("   ") or line.split()[0] in ("meta:",):
            break
        out.append(line.strip())
    return out


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_what_the_stored_frames_leave_out_is_said_once_under_each_camera(tmp_path, capsys, version):
    """10-bit HEVC (libx265, yuv420p10le) is stored as PyAV's 8-bit rgb24 decode (compared) and a display
    rotation is not applied: each is said once under its camera in the report — not once a file — and
    kept in the store's import record; an MPEG-4 Part 2 camera that info.json calls h264 is named by the
    codec its files hold (read here with PyAV), in the camera's note and the lossy-video note."""
    from replaybuf_core.cli import main

    spec = Spec([4, 3, 5], fps=10, episodes_per_file=2, cameras={
        "cam.hevc": Camera(16, 16, codec="libx265", pix_fmt="yuv420p10le"),
        "cam.rot": Camera(16, 32, rotation=90), "cam.m4": Camera(16, 16, codec="mpeg4")})
    root = write_dataset(tmp_path / "ds", spec, version)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["cam.m4"]["info"]["video.codec"] = "h264"  # what the dataset declared
    (root / "meta/info.json").write_text(json.dumps(info))
    files = {cam: sorted(f for f in root.glob("videos/**/*.mp4") if cam in f.parts) for cam in spec.cameras}
    assert {_probed(f) for f in files["cam.hevc"]} == {("hevc", "yuv420p10le", 0)}  # the fixtures are what they say
    assert {_probed(f)[2] for f in files["cam.rot"]} == {90}
    assert {_probed(f)[0] for f in files["cam.m4"]} == {"mpeg4"}
    assert main(["import", str(root), str(tmp_path / "o.zarr"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert _under(out, "cam.hevc")[1:] == [
        "note: 10-bit video (yuv420p10le): its frames are stored as 8-bit RGB (PyAV's rgb24, as LeRobot's decoders "
        "give them too), the low 2 bits of each sample dropped"], out
    assert _under(out, "cam.rot")[1:] == [
        "note: its video asks players to rotate the frames by 90 degrees (display matrix); they are stored as coded, "
        "not rotated"], out
    assert _under(out, "cam.m4")[1:] == ["note: its video is mpeg4 (MPEG-4 part 2), not h264 as meta/info.json says"]
    assert "were lossy when recorded (h264, hevc, mpeg4 in mp4)" in out
    assert out.count("10-bit") == 1 and out.count("rotate the frames") == 1
    with ReplayBuffer.create_from_path(tmp_path / "o.zarr") as rb:
        want = np.concatenate([np.stack(decode_whole(f)) for f in files["cam.hevc"]])
        np.testing.assert_array_equal(rb["cam.hevc"][:], want)
        recorded = rb.store.get_attrs("data")["import"]["key_notes"]
    assert sorted(recorded) == ["cam.hevc", "cam.m4", "cam.rot"] and "10-bit" in recorded["cam.hevc"][0]
    plain = write_dataset(tmp_path / "plain", Spec([3], fps=10, cameras={"cam": Camera(16, 16)}), version)
    assert main(["import", str(plain), str(tmp_path / "p.zarr"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert _under(out, "cam")[1:] == [] and "(h264 in mp4)" in out


def test_a_rotation_only_a_later_file_holds_is_said_from_dask_workers_too(tmp_path, client):
    """The notes of files read on Dask workers reach the report: episode 2's file alone is rotated (the
    client probes only each camera's first file)."""
    import shutil

    spec = Spec([3, 4, 3], fps=10, cameras={"cam": Camera(16, 16)})
    root = write_dataset(tmp_path / "ds", spec, "v2.1")
    turned = write_dataset(tmp_path / "turned", Spec([3, 4, 3], fps=10, cameras={"cam": Camera(16, 16, rotation=-90)}),
                           "v2.1")
    name = "videos/chunk-000/cam/episode_000002.mp4"
    shutil.copyfile(turned / name, root / name)
    assert [_probed(f)[2] for f in sorted(root.glob("videos/**/*.mp4"))] == [0, 0, -90]
    for how in ({}, {"client": client}):
        dst = tmp_path / f"o{len(how)}.zarr"
        report = import_dataset(root, dst, "lerobot", progress=False, **how)
        assert report.ok, report.summary()
        assert report.keys["cam"].source_notes == [
            "its video asks players to rotate the frames by -90 degrees (display matrix); they are stored as coded, "
            "not rotated"], how


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


def _set_column(path, name, rows, type_):
    import pyarrow as pa

    t = pq.read_table(path)
    pq.write_table(t.set_column(t.schema.get_field_index(name), name, pa.array(rows, type=type_)), path)


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_a_list_column_of_another_length_names_info_json_and_the_episode(tmp_path, capsys, version):
    """A variable-length list column takes its step shape from meta/info.json: a file whose rows hold
    another length is named with the episode and its first row in the file, and the declared shape is
    said to be info.json's — never "the first data file's" (which may itself disagree). A fixed-size
    list carries its own length: a later file differing from it names the first data file. Nothing is
    written either way."""
    import pyarrow as pa

    from replaybuf_core.cli import main

    spec = Spec([3, 4], fps=10, episodes_per_file=2)
    root = write_dataset(tmp_path / "ds", spec, version)
    files = sorted(root.glob("data/**/*.parquet"))
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["observation.state"]["shape"] = [4]  # the files hold 3 values a step
    (root / "meta/info.json").write_text(json.dumps(info))
    assert main(["import", str(root), str(tmp_path / "o.zarr"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert (f"{files[0]}: column 'observation.state' holds steps of shape (3,) in episode 0 (its row 0 on, row 0 "
            "of the file), but meta/info.json declares shape [4] for it") in err, err
    assert "first data file" not in err
    info["features"]["observation.state"]["shape"] = [3]
    (root / "meta/info.json").write_text(json.dumps(info))
    # episode 1's rows hold 5 values: in v3 the file's rows 3.. (after episode 0's), in v2 its own file
    last = files[-1]
    t = pq.read_table(last)
    ep = t["episode_index"].to_numpy()
    rows = [[0.5] * (5 if e == 1 else 3) for e in ep]
    _set_column(last, "observation.state", rows, pa.list_(pa.float32()))
    first_row = int(np.flatnonzero(ep == 1)[0])
    assert main(["import", str(root), str(tmp_path / "o.zarr"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert (f"{last}: column 'observation.state' holds steps of shape (5,) in episode 1 (its row 0 on, row "
            f"{first_row} of the file), but meta/info.json declares shape [3] for it") in err, err
    # fixed-size lists (v2: a file an episode): the shape is the first data file's own
    if version == "v2.1":
        for f, n in ((files[0], 3), (last, 5)):
            _set_column(f, "observation.state", [[0.5] * n] * pq.read_table(f).num_rows, pa.list_(pa.float32(), n))
        assert main(["import", str(root), str(tmp_path / "o.zarr"), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert (f"{last}: column 'observation.state' holds steps of shape (5,) in episode 1 (its row 0 on, row 0 "
                f"of the file), but the first data file ({files[0]}) holds (3,) for it") in err, err
    assert not (tmp_path / "o.zarr").exists()


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_the_frame_size_ratio_is_of_the_imported_episodes_files(tmp_path, capsys, version):
    """``--episodes`` 1: "N× the source's" compares with the bytes a frame of the files holding the
    imported episodes (their sizes on disk over the frames of the episodes in them; v2: episode 1's
    file alone), not with every file's; an MPEG-4 Part 2 camera declared h264 is named mpeg4."""
    import re

    from replaybuf_core.cli import main

    spec = Spec([3, 20, 4], fps=10, episodes_per_file=2, cameras={"cam": Camera(16, 16, codec="mpeg4")})
    root = write_dataset(tmp_path / "ds", spec, version)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"]["cam"]["info"]["video.codec"] = "h264"
    (root / "meta/info.json").write_text(json.dumps(info))
    files = sorted(root.glob("videos/**/*.mp4"))
    if version == "v2.1":  # a file an episode
        want = files[1].stat().st_size / 20
    else:  # episodes 0 and 1 share file-000
        want = files[0].stat().st_size / (3 + 20)
    whole = sum(f.stat().st_size for f in files) / sum(spec.lengths)
    assert abs(want - whole) > 0.05 * want  # (the two readings differ here)
    assert main(["import", str(root), str(tmp_path / "o.zarr"), "--episodes", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    stored, ratio, source = re.search(r"frames: (\S+ \S+) a frame, (\S+)x the source's (\S+ \S+)", out).groups()
    shown = f"{want / 1e3:.1f} KB" if want >= 1e3 else f"{want:.0f} B"
    assert source == shown, (source, shown, out)
    with ReplayBuffer.create_from_path(tmp_path / "o.zarr") as rb:
        per_frame = rb.store.stored_bytes("data", "cam") / rb.n_steps
    assert ratio == f"{per_frame / want:.1f}"
    assert "were lossy when recorded (mpeg4 in mp4)" in out and "h264 in mp4" not in out
    assert "its video is mpeg4 (MPEG-4 part 2), not h264 as meta/info.json says" in out
