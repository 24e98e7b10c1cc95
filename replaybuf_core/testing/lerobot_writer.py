"""Write small LeRobot datasets (v2.1 or v3.0 layout) with pyarrow and PyAV, for tests and benchmarks.

Follows the layouts LeRobot's writer produces (see :mod:`replaybuf_core.formats.lerobot.layout`),
and can build the quirks real datasets have (a camera with no files, a missing video, null video
indices, row timestamps offset from the video, depth videos, PNG ``image`` features, B-frames).
Frames are a deterministic function of (camera, episode, frame) — :func:`frame_pixels` — so a test
can tell frames apart; what a test expects must still come from decoding the written mp4 files.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np


@dataclass
class Camera:
    """One camera: ``height`` × ``width``; ``codec`` (PyAV encoder name: libx264, mpeg4, libsvtav1...),
    ``bframes`` (libx264: B-frames), ``gop`` (keyframe interval); ``depth``: 12-bit gray (ffv1);
    ``pix_fmt`` of a colour camera (``yuv420p10le``: 10-bit video; with ``libx265``: 10-bit HEVC);
    ``options``: more encoder options (e.g. libsvtav1's ``{"svtav1-params": "irefresh-type=1"}``: open
    GOPs); ``rotation``: degrees (counter-clockwise) the files' display matrix asks players to rotate
    the frames by (PyAV's ``VideoStream.set_display_rotation``; 0: no display matrix)."""

    height: int
    width: int
    codec: str = "libx264"
    bframes: int = 0
    gop: int = 10
    depth: bool = False
    pix_fmt: str = "yuv420p"
    options: dict[str, str] = field(default_factory=dict)
    rotation: int = 0


@dataclass
class Spec:
    """A dataset to write: ``lengths`` of its episodes, ``fps``, ``cameras`` (key → Camera),
    ``image_keys`` (key → (H, W): PNG bytes in the parquet), ``state_dim``; ``episodes_per_file``
    (v3); quirks: ``timestamp_offset_s`` added to every row's timestamp, ``missing_videos`` ((camera,
    episode) pairs whose file is not written — v2 — or whose indices are null — v3),
    ``declared_only`` (cameras in info.json with no file at all)."""

    lengths: list[int]
    fps: int = 10
    cameras: dict[str, Camera] = field(default_factory=dict)
    image_keys: dict[str, tuple[int, int]] = field(default_factory=dict)
    state_dim: int = 3
    episodes_per_file: int = 2
    timestamp_offset_s: float = 0.0
    missing_videos: set[tuple[str, int]] = field(default_factory=set)
    declared_only: list[str] = field(default_factory=list)


def frame_pixels(camera_index: int, episode: int, frame: int, height: int, width: int, depth: bool = False) -> np.ndarray:
    """A smooth, distinct frame: ``(H, W, 3)`` uint8, or for depth ``(H, W)`` uint16 (12-bit)."""
    y, x = np.mgrid[0:height, 0:width]
    if depth:
        return ((x * 16 + y * 8 + frame * 37 + episode * 301 + camera_index * 5) % 4096).astype(np.uint16)
    r = (x * 4 + frame * 9 + camera_index * 40) % 256
    g = (y * 4 + episode * 50) % 256
    b = ((x + y) * 2 + frame * 3) % 256
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


def _encode(path: Path, frames: list[np.ndarray], fps: int, cam: Camera) -> None:
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="mp4") as c:
        if cam.depth:
            s = c.add_stream("ffv1", rate=fps)
            s.pix_fmt = "gray12le"
        else:
            s = c.add_stream(cam.codec, rate=fps)
            s.pix_fmt = cam.pix_fmt
            if cam.codec == "libx264":
                s.options = {"x264-params": f"keyint={cam.gop}:min-keyint={cam.gop}:bframes={cam.bframes}",
                             "preset": "ultrafast" if not cam.bframes else "fast"}
            elif cam.codec == "libx265":
                s.options = {"g": str(cam.gop), "x265-params": "log-level=error", **cam.options}
            else:
                s.options = {"g": str(cam.gop), **cam.options}
        s.width, s.height = cam.width, cam.height
        if cam.rotation:
            s.set_display_rotation(cam.rotation)
        for i, a in enumerate(frames):
            f = av.VideoFrame.from_ndarray(a, format="gray12le" if cam.depth else "rgb24")
            f.pts, f.time_base = i, Fraction(1, fps)
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def _png(a: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


def _features(spec: Spec) -> dict:
    feats: dict = {
        "observation.state": {"dtype": "float32", "shape": [spec.state_dim], "names": None},
        "action": {"dtype": "float32", "shape": [spec.state_dim], "names": None},
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    for key, (h, w) in spec.image_keys.items():
        feats[key] = {"dtype": "image", "shape": [h, w, 3], "names": ["height", "width", "channel"]}
    for key, cam in list(spec.cameras.items()) + [(k, Camera(8, 8)) for k in spec.declared_only]:
        feats[key] = {"dtype": "video", "shape": [cam.height, cam.width, 1 if cam.depth else 3],
                      "names": ["height", "width", "channel"],
                      "info": {"video.height": cam.height, "video.width": cam.width,
                               "video.codec": "ffv1" if cam.depth else cam.codec.replace("lib", ""),
                               "video.pix_fmt": "gray12le" if cam.depth else cam.pix_fmt,
                               "video.is_depth_map": cam.depth, "video.fps": spec.fps, "has_audio": False}}
    return feats


def _rows(spec: Spec, ep: int, first_index: int) -> dict[str, list]:
    n = spec.lengths[ep]
    rng = np.random.default_rng(1000 + ep)
    state = rng.standard_normal((n, spec.state_dim)).astype(np.float32)
    rows = {
        "observation.state": list(state),
        "action": list(rng.standard_normal((n, spec.state_dim)).astype(np.float32)),
        "next.reward": rng.random(n).astype(np.float32),
        "timestamp": (np.arange(n) / spec.fps + spec.timestamp_offset_s).astype(np.float32),
        "frame_index": np.arange(n, dtype=np.int64),
        "episode_index": np.full(n, ep, dtype=np.int64),
        "index": np.arange(first_index, first_index + n, dtype=np.int64),
        "task_index": np.full(n, ep % 2, dtype=np.int64),
    }
    for ci, (key, (h, w)) in enumerate(spec.image_keys.items()):
        rows[key] = [{"bytes": _png(frame_pixels(50 + ci, ep, i, h, w)), "path": None} for i in range(n)]
    return rows


def _table(rows: dict[str, list]):
    import pyarrow as pa

    cols = {}
    for k, v in rows.items():
        if k in ("observation.state", "action"):
            cols[k] = pa.array([list(map(float, r)) for r in v], type=pa.list_(pa.float32()))
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            cols[k] = pa.array(v, type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
        else:
            cols[k] = pa.array(v)
    return pa.table(cols)


TASKS = ["pick the cube", "push the block"]


def write_dataset(root: str | Path, spec: Spec, version: str = "v2.1") -> Path:
    """Write ``spec`` as a LeRobot dataset of ``version`` ("v2.1" or "v3.0") at ``root``; returns it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(root)
    (root / "meta").mkdir(parents=True, exist_ok=True)
    n_ep = len(spec.lengths)
    starts = np.concatenate([[0], np.cumsum(spec.lengths)]).astype(int)
    info = {"codebase_version": version, "robot_type": "synthetic", "total_episodes": n_ep,
            "total_frames": int(starts[-1]), "total_tasks": len(TASKS), "fps": spec.fps, "splits": {"train": f"0:{n_ep}"},
            "features": _features(spec)}
    cams = list(spec.cameras.items())
    frames = {(key, ep): [frame_pixels(ci, ep, i, cam.height, cam.width, cam.depth) for i in range(spec.lengths[ep])]
              for ci, (key, cam) in enumerate(cams) for ep in range(n_ep)}
    if version == "v2.1":
        info.update(chunks_size=1000, data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
                    video_path="videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")
        with open(root / "meta" / "episodes.jsonl", "w") as f:
            for ep in range(n_ep):
                f.write(json.dumps({"episode_index": ep, "tasks": [TASKS[ep % 2]], "length": spec.lengths[ep]}) + "\n")
        with open(root / "meta" / "tasks.jsonl", "w") as f:
            for i, t in enumerate(TASKS):
                f.write(json.dumps({"task_index": i, "task": t}) + "\n")
        with open(root / "meta" / "episodes_stats.jsonl", "w") as f:
            for ep in range(n_ep):
                f.write(json.dumps({"episode_index": ep, "stats": {"action": {"count": [spec.lengths[ep]]}}}) + "\n")
        for ep in range(n_ep):
            p = root / f"data/chunk-000/episode_{ep:06d}.parquet"
            p.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(_table(_rows(spec, ep, int(starts[ep]))), p)
            for key, cam in cams:
                if (key, ep) not in spec.missing_videos:
                    _encode(root / f"videos/chunk-000/{key}/episode_{ep:06d}.mp4", frames[(key, ep)], spec.fps, cam)
    elif version == "v3.0":
        info.update(chunks_size=2, data_files_size_in_mb=100, video_files_size_in_mb=500,
                    data_path="data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                    video_path="videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4")
        per = max(1, spec.episodes_per_file)
        records = []
        for ep in range(n_ep):
            f_i = ep // per
            rec = {"episode_index": ep, "tasks": [TASKS[ep % 2]], "length": spec.lengths[ep],
                   "data/chunk_index": f_i // 2, "data/file_index": f_i % 2,
                   "dataset_from_index": int(starts[ep]), "dataset_to_index": int(starts[ep + 1])}
            first_of_file = f_i * per
            for key, _ in cams:
                t0 = float(sum(spec.lengths[first_of_file:ep])) / spec.fps
                null = (key, ep) in spec.missing_videos
                rec[f"videos/{key}/chunk_index"] = None if null else f_i // 2
                rec[f"videos/{key}/file_index"] = None if null else f_i % 2
                rec[f"videos/{key}/from_timestamp"] = None if null else t0
                rec[f"videos/{key}/to_timestamp"] = None if null else t0 + spec.lengths[ep] / spec.fps
            records.append(rec)
        for f_i in range(0, (n_ep + per - 1) // per):
            eps = list(range(f_i * per, min(n_ep, (f_i + 1) * per)))
            tables = [_table(_rows(spec, ep, int(starts[ep]))) for ep in eps]
            p = root / f"data/chunk-{f_i // 2:03d}/file-{f_i % 2:03d}.parquet"
            p.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.concat_tables(tables), p)
            for key, cam in cams:
                _encode(root / f"videos/{key}/chunk-{f_i // 2:03d}/file-{f_i % 2:03d}.mp4",
                        [fr for ep in eps for fr in frames[(key, ep)]], spec.fps, cam)
        (root / "meta/episodes/chunk-000").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(records), root / "meta/episodes/chunk-000/file-000.parquet")
        pq.write_table(pa.table({"task_index": list(range(len(TASKS))), "__index_level_0__": TASKS}),
                       root / "meta/tasks.parquet")
    else:
        raise ValueError(f"version must be 'v2.1' or 'v3.0', got {version!r}")
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    (root / "meta" / "stats.json").write_text(json.dumps({"action": {"mean": [0.0] * spec.state_dim}}))
    return root
