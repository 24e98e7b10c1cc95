"""The peer harness (benchmarks/peer): LeRobot 0.6.1 run in its own venv, the codec copies, CPU counting."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from benchmarks import peer
from benchmarks.peer import cpu_clock, lerobot_reader
from shared_data import SHARED_DATA

av = pytest.importorskip("av")

G1 = SHARED_DATA / "lerobot_v21_g1_20ep"
CAM = "observation.images.cam_high"


# --- the runner -------------------------------------------------------------------------------------

def _fake_venv(root: Path, script: str, with_lerobot: bool = True) -> Path:
    """A folder shaped like the LeRobot venv whose bin/python is ``script`` (a shell script)."""
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text("#!/bin/sh\n" + script)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    if with_lerobot:
        (root / "lib" / "python3.12" / "site-packages" / "lerobot-0.6.1.dist-info").mkdir(parents=True)
    return root


def test_without_the_venv_the_runner_returns_none_and_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LEROBOT_VENV", str(tmp_path / "absent"))
    assert peer.run_lerobot(G1, CAM, 0, 1, 0) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"no venv at {tmp_path / 'absent'}" in err[0] and "make_lerobot_venv.sh" in err[0]

    monkeypatch.setenv("LEROBOT_VENV", str(_fake_venv(tmp_path / "bare", "exit 0", with_lerobot=False)))
    assert peer.run_lerobot(G1, CAM, 0, 1, 0) is None
    assert "has no lerobot 0.6.1" in capsys.readouterr().err


def test_the_runner_passes_the_arguments_and_returns_the_json_line(tmp_path, monkeypatch):
    # the fake reader echoes its arguments as JSON after some chatter, as LeRobot's progress bars would
    script = textwrap.dedent("""\
        echo "Generating train split: 100%"
        printf '{"argv": "%s", "offline": "%s"}\\n' "$*" "$HF_HUB_OFFLINE"
        echo "a warning" >&2
        """)
    monkeypatch.setenv("LEROBOT_VENV", str(_fake_venv(tmp_path / "venv", script)))
    got = peer.run_lerobot("/data/x", "cam.key", 2, 7, 3, backend="pyav", convert_dir="/tmp/v30", torch_threads=1)
    argv = got["argv"].split()
    assert argv[0] == str(peer.READER) and argv[1] == "/data/x"
    assert dict(zip(argv[2::2], argv[3::2])) == {"--camera": "cam.key", "--workers": "2", "--batches": "7",
                                                  "--seed": "3", "--backend": "pyav", "--warmup": "2",
                                                  "--batch-size": "64", "--convert-dir": "/tmp/v30",
                                                  "--torch-threads": "1"}
    assert got["offline"] == "1"


@pytest.mark.parametrize("bad", [["--workers", "-1"], ["--batches", "0"], ["--warmup", "0"], ["--torch-threads", "0"],
                                 ["--backend", "decord"]])
def test_the_reader_refuses_bad_arguments_before_loading_anything(bad):
    with pytest.raises(SystemExit) as e:
        lerobot_reader.parse_args(["/data/x", "--camera", "cam", *bad])
    assert e.value.code == 2


def test_a_failing_reader_raises_with_its_last_words(tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_VENV", str(_fake_venv(tmp_path / "venv", "echo 'no feature cam' >&2\nexit 3\n")))
    with pytest.raises(RuntimeError, match=r"exit 3[\s\S]*no feature cam"):
        peer.run_lerobot("/data/x", "cam", 0, 1, 0)


# --- CPU counting of live workers ------------------------------------------------------------------

def test_the_cpu_window_counts_a_live_childs_cpu_as_the_child_itself_reports_it():
    child = textwrap.dedent("""\
        import sys, time
        print(time.process_time(), flush=True)
        sys.stdin.readline()
        t0 = time.process_time()
        while time.process_time() - t0 < 0.4:
            pass
        print(time.process_time(), flush=True)
        sys.stdin.readline()
        """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready = float(proc.stdout.readline())
        a = cpu_clock.cpu_snapshot()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        done = float(proc.stdout.readline())
        b = cpu_clock.cpu_snapshot()
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert proc.pid in a["children"] and proc.pid in b["children"]
    tick = os.sysconf("SC_CLK_TCK")
    (u0, s0), (u1, s1) = a["children"][proc.pid], b["children"][proc.pid]
    assert abs((u1 + s1 - u0 - s0) / tick - (done - ready)) <= 0.05  # clock ticks of 10 ms, a little start-up
    user, system = cpu_clock.cpu_between(a, b)
    assert user + system >= done - ready - 0.05  # the window holds the child's work (and this process's)


# --- the codec copies ------------------------------------------------------------------------------

def _tiny_v21(root: Path, lengths=(10, 7), size=(48, 64), fps=10) -> list[np.ndarray]:
    """A LeRobot v2.1-shaped folder with one H.264 camera (textured, moving frames); returns the frames
    of each episode as the source decodes them (RGB)."""
    rng = np.random.default_rng(0)
    texture = (rng.random((size[0] * 2, size[1] * 2, 3)) * 255).astype(np.uint8)
    (root / "meta").mkdir(parents=True)
    (root / "data" / "chunk-000").mkdir(parents=True)
    info = {"codebase_version": "v2.1", "fps": fps, "total_episodes": len(lengths),
            "features": {CAM: {"dtype": "video", "shape": [*size, 3],
                               "info": {"video.codec": "h264", "video.pix_fmt": "yuv420p", "video.fps": fps}},
                         "action": {"dtype": "float32", "shape": [2]}}}
    (root / "meta" / "info.json").write_text(json.dumps(info))
    (root / "meta" / "episodes.jsonl").write_text("".join(json.dumps({"episode_index": e, "length": n}) + "\n"
                                                          for e, n in enumerate(lengths)))
    (root / "data" / "chunk-000" / "episode_000000.parquet").write_bytes(b"not read by the transcoder")
    decoded = []
    for e, n in enumerate(lengths):
        path = root / "videos" / "chunk-000" / CAM / f"episode_{e:06d}.mp4"
        path.parent.mkdir(parents=True, exist_ok=True)
        with av.open(str(path), "w") as out:
            s = out.add_stream("libx264", rate=fps, options={"g": "2", "crf": "20"})
            s.pix_fmt, s.height, s.width = "yuv420p", *size
            for i in range(n):
                f = av.VideoFrame.from_ndarray(np.ascontiguousarray(texture[i:i + size[0], 2 * i:2 * i + size[1]]),
                                               format="rgb24")
                f.pts = i
                for p in s.encode(f):
                    out.mux(p)
            for p in s.encode():
                out.mux(p)
        with av.open(str(path)) as c:
            decoded.append(np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)]))
    return decoded


@pytest.mark.parametrize("codec, canonical", [("mpeg4", "mpeg4"), ("h264", "h264")])
def test_a_copy_has_the_source_frames_in_the_new_codec_and_says_so(tmp_path, codec, canonical):
    from benchmarks.peer.transcode import transcode

    src = tmp_path / "src"
    source_frames = _tiny_v21(src)
    dest = tmp_path / f"copy_{codec}"
    report = transcode(src, dest, codec, progress=False)
    info = json.loads((dest / "meta" / "info.json").read_text())
    cam_info = info["features"][CAM]["info"]
    assert cam_info["video.codec"] == canonical and cam_info["video.pix_fmt"] == "yuv420p"
    assert cam_info["video.g"] == (2 if codec == "h264" else 12)
    sq, n = 0.0, 0
    for e, frames in enumerate(source_frames):
        with av.open(str(dest / "videos" / "chunk-000" / CAM / f"episode_{e:06d}.mp4")) as c:
            s = c.streams.video[0]
            assert s.codec_context.name == canonical
            got = [(f.to_ndarray(format="rgb24"), float(f.time)) for f in c.decode(s)]
        assert len(got) == len(frames)
        assert [t for _, t in got] == pytest.approx([i / 10 for i in range(len(frames))], abs=1e-6)
        sq += sum(float(np.sum((a.astype(np.int64) - b) ** 2)) for a, (b, _) in zip(frames, got))
        n += frames.size
    psnr = 10 * np.log10(255.0 ** 2 * n / sq)
    assert psnr > 25 and report["psnr_db"] == pytest.approx(psnr, abs=1e-6)
    mp4s = sorted(dest.glob("videos/*/*/*.mp4"))
    assert report["frames"] == 17 and report["bytes"] == sum(p.stat().st_size for p in mp4s)
    # everything but the videos and info.json is the source's, byte for byte
    for f in src.rglob("*"):
        if f.is_file() and f.suffix != ".mp4" and f.name != "info.json":
            assert (dest / f.relative_to(src)).read_bytes() == f.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy_" + codec, "src"]  # no temporary left


def test_bad_input_is_refused_and_a_failed_copy_leaves_nothing(tmp_path, monkeypatch):
    from benchmarks.peer import transcode as tc

    src = tmp_path / "src"
    _tiny_v21(src)
    with pytest.raises(ValueError, match="codec 'vp9'"):
        tc.transcode(src, tmp_path / "x", "vp9", progress=False)
    with pytest.raises(ValueError, match="no meta/info.json"):
        tc.transcode(tmp_path / "nowhere", tmp_path / "x", "h264", progress=False)
    (tmp_path / "exists").mkdir()
    (tmp_path / "exists" / "keep").write_text("mine")
    with pytest.raises(ValueError, match="exists"):
        tc.transcode(src, tmp_path / "exists", "h264", progress=False)
    assert (tmp_path / "exists" / "keep").read_text() == "mine"
    v3 = tmp_path / "v3"
    (v3 / "meta").mkdir(parents=True)
    (v3 / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v3.0", "features": {}}))
    with pytest.raises(ValueError, match="only v2.x"):
        tc.transcode(v3, tmp_path / "x", "h264", progress=False)

    real_encode, calls = tc._encode, []

    def encode_then_fail(frames, path, *args):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        real_encode(frames, path, *args)

    monkeypatch.setattr(tc, "_encode", encode_then_fail)
    with pytest.raises(OSError, match="disk full"):
        tc.transcode(src, tmp_path / "x", "mpeg4", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists", "src", "v3"]


# --- LeRobot 0.6.1 itself (needs the venv; slow) ---------------------------------------------------

@pytest.mark.skipif(peer.lerobot_missing() is not None, reason=str(peer.lerobot_missing()))
@pytest.mark.skipif(not G1.is_dir(), reason=f"G1 data not found at {G1}")
def test_lerobot_reads_an_mpeg4_copy_of_two_g1_episodes(tmp_path):
    from benchmarks.peer.transcode import transcode

    sub = tmp_path / "g1_2ep"
    for rel in ("meta/tasks.jsonl", "data/chunk-000/episode_000000.parquet", "data/chunk-000/episode_000001.parquet",
                f"videos/chunk-000/{CAM}/episode_000000.mp4", f"videos/chunk-000/{CAM}/episode_000001.mp4"):
        (sub / rel).parent.mkdir(parents=True, exist_ok=True)
        (sub / rel).write_bytes((G1 / rel).read_bytes())
    for name in ("episodes.jsonl", "episodes_stats.jsonl"):
        (sub / "meta" / name).write_text("".join((G1 / "meta" / name).read_text().splitlines(keepends=True)[:2]))
    lengths = [json.loads(ln)["length"] for ln in (sub / "meta" / "episodes.jsonl").read_text().splitlines()]
    info = json.loads((G1 / "meta" / "info.json").read_text())
    info.update(total_episodes=2, total_frames=sum(lengths), total_videos=2, splits={"train": "0:2"})
    (sub / "meta" / "info.json").write_text(json.dumps(info))
    transcode(sub, tmp_path / "g1_2ep_mpeg4", "mpeg4", progress=False)

    got = peer.run_lerobot(tmp_path / "g1_2ep_mpeg4", CAM, 0, 2, 0, warmup=1, convert_dir=tmp_path / "v30")
    assert got["lerobot"] == "0.6.1" and got["source_codec"] == "mpeg4" and got["converted_from"] == "v2.1"
    assert got["dataset_samples"] == sum(lengths) and got["samples"] == 128
    assert got["sample"] == {"image": [2, 3, 480, 640], "image_dtype": "float32", "action": [16, 26], "state": [26]}
    assert Path(got["loaded_root"]).parent == tmp_path / "v30"
    assert got["cpu_ms_per_sample"] > 0 and got["samples_per_s"] > 0 and got["first_batch_s"] > 0
