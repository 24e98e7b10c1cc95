"""A LeRobot dataset (v2.0, v2.1, v3.0) as an import :class:`~replaybuf_core.source.Source`.

Keys: every parquet row column under its LeRobot name (``observation.state``, ``action``,
``next.reward``, ``timestamp``, ``frame_index``, ``episode_index``, ``index``, ``task_index``...), in
its arrow type, plus one key per camera (``video`` features: ``(H, W, 3)`` uint8 frames; depth maps:
``(H, W, 1)`` uint16) and per ``image`` feature (PNG bytes in the parquet, decoded exactly).
Attributes: ``codebase_version``, ``robot_type``, ``fps``, the whole ``info.json``, the tasks and
``stats.json``; per episode its LeRobot ``episode_index``, ``tasks``, statistics and files.

How frames are matched to rows: :mod:`.video`.  What is refused or needs an option (each named in
the message): files missing or not where the path templates say (``find_moved_files``), some
episodes' videos missing or with null video indices (``skip_episodes_without_video``, or
``skip_cameras``), row timestamps offset from the video (``align_video_start``), a camera declared in
``info.json`` with no video file for any episode (``skip_cameras``: a declared camera is never
dropped unasked).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core.layout.frame_choice import FrameChoice
from replaybuf_core.source import KeySpec, Source

from .columns import arrow_numpy, arrow_step, column_array, declares_shape, decode_image
from .layout import (
    Locator,
    read_info,
    read_parquet,
    read_stats,
    read_tasks,
    read_v2_episodes,
    read_v3_episodes,
    require_pyarrow,
)
from .camera_notes import camera_notes
from .passthrough import MODES, PassThrough, probe
from .video import VideoFacts, VideoReader, probe_video, require_av

#: Video codecs that store frames exactly (no "lossy when recorded" note).
LOSSLESS_VIDEO_CODECS = frozenset({"ffv1", "png", "rawvideo", "huffyuv", "ffvhuff", "utvideo", "qtrle"})
#: LeRobot's default tolerance (s) between a frame's time and its row's time.
DEFAULT_TOLERANCE_S = 1e-4


class LeRobotSource(Source):
    """An opened LeRobot dataset (see the module docstring).

    Args:
        path: the dataset's root directory (holding ``meta/info.json``).
        tolerance_s: how far (s) a frame may sit from its row's time (default 1e-4, LeRobot's).
        align_video_start: give each episode's first row the episode's first frame (time 0 of its
            v2 video, ``from_timestamp`` in v3) and check the other rows relative to it — for
            datasets whose row timestamps do not start at the video's (GR00T's start at 0.05 s).
        skip_cameras: camera keys to leave out (their videos are not opened).
        skip_episodes_without_video: leave out episodes with a camera's video missing (reported)
            instead of refusing the dataset.
        find_moved_files: use the one file of the expected name elsewhere in the dataset when a file
            is not where ``data_path`` / ``video_path`` say (each move is noted).
        video: ``"reencode"`` (the default: frames decoded and stored with the ``frames=`` codec) or
            ``"passthrough"``: each camera whose videos allow it keeps the mp4's packets, bit-exact to
            PyAV's decode (:mod:`.passthrough` says when; ``frame_handling`` says which camera went
            through and why the others were re-encoded).  Opt-in: a pass-through store needs PyAV to be
            read and decodes a chunk of GOPs for any frame (like ``frames="video"``), while the default
            stores read frame by frame with no video decoder.

    Raises:
        FileNotFoundError: no ``meta/info.json`` (or episode metadata).
        ValueError: an unknown ``codebase_version``, malformed metadata, missing files (all named,
            with the option that would help), an unknown camera in ``skip_cameras``, an unknown
            ``video``; with ``video="passthrough"``, an mp4 that cannot be opened or demuxed (naming
            the episodes, camera and file).
        ImportError: pyarrow or PyAV missing (``pip install 'replaybuf[lerobot]'``).
    """

    format_name = "lerobot"

    def __init__(self, path: str | os.PathLike, *, tolerance_s: float = DEFAULT_TOLERANCE_S,
                 align_video_start: bool = False, skip_cameras: tuple[str, ...] | list[str] = (),
                 skip_episodes_without_video: bool = False, find_moved_files: bool = False,
                 video: str = "reencode"):
        if video not in MODES:
            raise ValueError(f"video must be one of {MODES}, got {video!r}")
        root = Path(os.path.expanduser(os.fspath(path))).resolve()
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such directory")
        super().__init__(root)
        if isinstance(tolerance_s, bool) or not isinstance(tolerance_s, (int, float)):
            raise TypeError(f"tolerance_s must be a number of seconds, got {tolerance_s!r}")
        if not (math.isfinite(tolerance_s) and tolerance_s >= 0):
            raise ValueError(f"tolerance_s must be a finite number of seconds >= 0, got {tolerance_s!r}")
        if isinstance(skip_cameras, str) or not all(isinstance(c, str) for c in skip_cameras):
            raise TypeError(f"skip_cameras must be a list of camera keys, got {skip_cameras!r}")
        self.tol = float(tolerance_s)
        self.align = bool(align_video_start)
        pq = require_pyarrow()
        self._pq = pq
        info = read_info(root)
        self.info = info
        self.version = info["codebase_version"]
        features: dict[str, dict] = info["features"]
        fps = info["fps"]
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not (math.isfinite(fps) and fps > 0):
            raise ValueError(f"{root / 'meta/info.json'}: fps must be a positive number, got {fps!r}")
        if self.tol >= 0.5 / fps:
            raise ValueError(f"tolerance_s={self.tol} s is not below half a frame period ({0.5 / fps:.6g} s at {fps} "
                             "fps): a frame could then be matched to its neighbour's row")
        cameras = [k for k, f in features.items() if f.get("dtype") == "video"]
        unknown = sorted(set(skip_cameras) - set(cameras))
        if unknown:
            raise ValueError(f"skip_cameras: {unknown} are not cameras of {root}; its cameras are {cameras}")
        if cameras:
            require_av()
        cams = [c for c in cameras if c not in skip_cameras]
        loc = Locator(root, find_moved_files)
        read = read_v2_episodes if self.version.startswith("v2") else read_v3_episodes
        episodes, problems = read(root, info, cams, loc)
        if problems:
            more = f" (and {len(problems) - 1} more episode(s) like it)" if len(problems) > 1 else ""
            raise ValueError(f"{root}: {problems[0]}{more}")
        for cam in cams:  # never drop a declared camera unasked (a dataset that keeps its videos elsewhere)
            if episodes and all(ep.videos[cam] is None for ep in episodes):
                why = episodes[0].extra.get("video_problems", {}).get(cam, "no file")
                searched = ("; find_moved_files searched the whole dataset folder for it" if loc.find_moved else
                            "; find_moved_files=True (CLI: --find-moved-files) searches the whole dataset folder")
                raise ValueError(f"{root}: camera {cam} is declared in meta/info.json but no episode has a video "
                                 f"file for it (episode {episodes[0].index}: {why}){searched}; pass "
                                 f"skip_cameras=[{cam!r}] (CLI: --skip-camera {cam}) to import without it")
        for cam in skip_cameras:
            self.notes.append(f"camera {cam} left out (skip_cameras)")
        for pos, ep in enumerate(episodes):  # a missing video makes its episode unavailable
            why = [f"camera {cam}: {ep.extra['video_problems'][cam]}" for cam in cams if ep.videos.get(cam) is None]
            if why:
                self.unavailable[pos] = "; ".join(why)
        self.skip_unavailable = bool(skip_episodes_without_video)
        self.unavailable_hint = ("Pass skip_episodes_without_video=True (CLI: --skip-episodes-without-video) to "
                                 "import the other episodes, or skip_cameras=[...] (CLI: --skip-camera KEY) to "
                                 "leave a camera out")
        self._episodes = episodes
        total = info.get("total_episodes")
        if isinstance(total, int) and total != len(episodes):
            raise ValueError(f"{root}: meta/info.json says total_episodes {total}, but the episode metadata lists "
                             f"{len(episodes)} (a missing meta/episodes file or episodes.jsonl line?)")
        if loc.moved:
            self.notes.append(f"{len(loc.moved)} file(s) were not where meta/info.json's path templates say and "
                              f"were found by name (find_moved_files), e.g. {loc.moved[0][1]} for {loc.moved[0][0]}")
        self._cameras = cams
        self.episode_lengths = np.array([ep.length for ep in self._episodes], dtype=np.int64)
        self.fps = float(info["fps"])
        self._depth = {c: bool(_video_info(features[c]).get("video.is_depth_map", False)) for c in cams}
        self._facts: dict[str, set[VideoFacts]] = {c: set() for c in cams}
        for cam in cams:  # each camera's first file now (codec, bit depth, rotation); the others as read
            first = next((ep.videos[cam][0] for ep in episodes if ep.videos.get(cam) is not None), None)
            self._add_facts(cam, [probe_video(first)] if first else [])
        self._images: list[str] = []
        self._columns: list[str] = []
        self._shape_origin: dict[str, str] = {}  # column → where its step shape came from (for messages)
        self._table_file: str | None = None
        self._table = None
        self._readers: dict[str, VideoReader] = {}
        self._build_keys(features, cams)
        self._passthrough: dict[str, PassThrough] = {}
        if video == "passthrough":
            self._probe_cameras(cams)
        self.tasks = read_tasks(root, self.version)
        self.attrs = {"codebase_version": self.version, "robot_type": info.get("robot_type"), "fps": self.fps,
                      "tasks": {str(k): v for k, v in sorted(self.tasks.items())}, "stats": read_stats(root),
                      "info": info, "moved_files": [list(m) for m in loc.moved]}
        # the codecs the files hold (info.json's video.codec only when a file could not be probed)
        codec = {c: sorted({f.codec for f in self._facts[c]}) or [str(_video_info(features[c]).get("video.codec", "?"))]
                 for c in cams}
        lossy = [c for c in cams if set(codec[c]) - LOSSLESS_VIDEO_CODECS]
        codecs = sorted({n for c in lossy for n in codec[c] if n not in LOSSLESS_VIDEO_CODECS})
        if lossy and video == "passthrough":
            self.notes.append(f"the video frames of {', '.join(lossy)} were lossy when recorded ({', '.join(codecs)} "
                              "in mp4); a camera passed through keeps the mp4's own packets (its reads decode to "
                              "PyAV's rgb24, bit for bit); a camera that does not go through is stored as that decode "
                              "with the frames= codec (see its line)")
        elif lossy:
            self.notes.append(f"the video frames of {', '.join(lossy)} were lossy when recorded ({', '.join(codecs)} "
                              "in mp4); what is imported is their decode by PyAV (rgb24; depth as uint16), and "
                              "the store keeps those decoded pixels exactly unless a lossy frame codec is asked for (frames=)")

    def _probe_cameras(self, cams: list[str]) -> None:
        """Decide, camera by camera, whether its packets go through (:func:`.passthrough.probe`)."""
        for cam in cams:
            if self._depth[cam]:
                self.frame_handling[cam] = "re-encoded: a depth video (stored as uint16 with Blosc)"
                continue
            files: dict[str, list[int]] = {}
            for ep in self._episodes:
                if ep.videos.get(cam) is not None:
                    files.setdefault(ep.videos[cam][0], []).append(ep.index)
            found = probe(cam, files)
            if isinstance(found, PassThrough):
                self._passthrough[cam] = found
                self.frame_handling[cam] = found.describe()
            else:
                self.frame_handling[cam] = f"re-encoded with the frames= codec: {found}"

    def decline_frame_choice(self, key: str, reason: str) -> None:
        """Camera ``key`` goes through no more (its stored packets failed the import's check): its
        videos are read again without keeping their packets, and ``frame_handling`` says why."""
        self._passthrough.pop(key, None)
        reader = self._readers.pop(key, None)
        if reader is not None:
            reader.close()
        super().decline_frame_choice(key, reason)

    def frame_choices(self, choices: dict[str, Any]) -> dict[str, Any]:
        """``choices`` with every camera that goes through stored as its packets (a pass-through
        ``FrameChoice``: the source's bitstream, its chunk of whole GOPs)."""
        out = dict(choices)
        for cam, how in self._passthrough.items():
            if cam in out:
                out[cam] = FrameChoice("video", bitstream=how.bitstream, gop=how.chunk, passthrough=True)
        return out

    # ------------------------------------------------------------------------------------ keys
    def _build_keys(self, features: dict[str, dict], cams: list[str]) -> None:
        if not self._episodes:
            return
        schema = self._pq.read_schema(self._episodes[0].data_file)
        names = [n for n in schema.names if not n.startswith("__index_level_")]
        declared = [k for k, f in features.items() if f.get("dtype") != "video"]
        absent = [k for k in declared if k not in names]
        if absent:
            raise ValueError(f"{self._episodes[0].data_file}: meta/info.json declares feature(s) {absent}, which this "
                             "data file lacks (a feature of dtype other than 'video' is a parquet column)")
        order = [k for k in features if k in names] + [n for n in names if n not in features]
        for name in order:
            feat = features.get(name, {})
            where = self._episodes[0].data_file
            try:
                dtype, shape, image = arrow_step(schema.field(name).type, feat.get("shape"))
            except ValueError as exc:
                raise ValueError(f"{where}: column {name!r}: {exc}") from None
            if image:
                first = decode_image(self._read_rows(self._episodes[0], [name])[name][0], name, where)
                kind = "frames" if first.dtype == np.uint8 else "depth"
                self.keys[name] = KeySpec(first.dtype, first.shape, kind, dict(feat))
                self._images.append(name)
            else:
                kind = "strings" if dtype == object else "numbers"
                self.keys[name] = KeySpec(dtype, shape, kind, dict(feat))
                self._columns.append(name)
                self._shape_origin[name] = (f"meta/info.json declares shape {feat.get('shape')}"
                                            if declares_shape(schema.field(name).type) else
                                            f"the first data file ({where}) holds {shape}")
        for cam in cams:
            feat = features[cam]
            shape = _frame_shape(feat, self._depth[cam])
            dtype = np.uint16 if self._depth[cam] else np.uint8
            self.keys[cam] = KeySpec(dtype, shape, "depth" if self._depth[cam] else "frames", dict(feat))
        if cams and "timestamp" not in self._columns:
            raise ValueError(f"{self._episodes[0].data_file}: no 'timestamp' column, so frames cannot be matched "
                             "to rows")

    # ------------------------------------------------------------------------------------ rows
    def _file_table(self, path: str):
        if self._table_file != path:
            try:
                self._table = read_parquet(path)
            except Exception as exc:
                raise ValueError(f"{path}: cannot read the parquet file ({exc})") from exc
            self._table_file = path
        return self._table

    def _read_rows(self, ep, names: list[str]) -> dict[str, np.ndarray]:
        table = self._file_table(ep.data_file)
        where = f"{ep.data_file} (episode {ep.index})"
        first_file_row = 0  # the file's row of the episode's first row (v3 files hold many episodes)
        if self.version.startswith("v3") and "episode_index" not in table.column_names:
            if "index" not in table.column_names or ep.rows is None:
                raise ValueError(f"{where}: no episode_index (nor index) column: a v3 file holds many episodes, "
                                 "and their rows are found by it")
            ids = arrow_numpy(table["index"])
            rows = np.flatnonzero((ids >= ep.rows[0]) & (ids < ep.rows[1]))
            first_file_row = int(rows[0]) if len(rows) else 0
            table = table.take(rows)
        elif "episode_index" in table.column_names:
            ids = arrow_numpy(table["episode_index"])
            if self.version.startswith("v3"):  # many episodes per file
                rows = np.flatnonzero(ids == ep.index)
                if len(rows) and rows[-1] - rows[0] + 1 != len(rows):
                    raise ValueError(f"{where}: the episode's rows are not contiguous")
                first_file_row = int(rows[0]) if len(rows) else 0
                table = table.slice(first_file_row, len(rows))
            elif len(ids) and (ids != ep.index).any():
                other = int(ids[np.flatnonzero(ids != ep.index)[0]])
                raise ValueError(f"{where}: the file holds rows of episode {other} (column episode_index)")
        if table.num_rows != ep.length:
            raise ValueError(f"{where}: {table.num_rows} rows, but the episode metadata says length {ep.length}")
        missing = [n for n in names if n not in table.column_names]
        if missing:
            raise ValueError(f"{where}: no column(s) {missing} (the first data file has them)")
        out = {n: column_array(table[n], n, where) for n in names}
        for n in names:
            spec = self.keys.get(n)
            if spec is None or n not in self._columns:
                continue
            if out[n].shape[1:] != spec.shape:  # (every row of the episode alike: column_array checked)
                raise ValueError(f"{ep.data_file}: column {n!r} holds steps of shape {out[n].shape[1:]} in episode "
                                 f"{ep.index} (its row 0 on, row {first_file_row} of the file), but "
                                 f"{self._shape_origin[n]} for it")
            if out[n].dtype != spec.dtype:
                raise ValueError(f"{where}: column {n!r} is {out[n].dtype} here, {spec.dtype} in the first data "
                                 f"file ({self._episodes[0].data_file})")
        return out

    # ------------------------------------------------------------------------------------ frames
    def _reader(self, cam: str, path: str) -> VideoReader:
        r = self._readers.get(cam)
        if r is None or r.path != path:
            if r is not None:
                r.close()
            r = self._readers[cam] = VideoReader(path, cam, self._depth[cam], self.tol, cam in self._passthrough)
        return r

    def _query_times(self, ep, cam: str, reader: VideoReader, ts: np.ndarray) -> tuple[np.ndarray, str]:
        base = ep.videos[cam][1]
        if not np.isfinite(ts).all():
            r = int(np.flatnonzero(~np.isfinite(ts))[0])
            raise ValueError(f"episode {ep.index}: row {r}'s timestamp is {float(ts[r])!r} in {ep.data_file}")
        bad = np.flatnonzero(np.diff(ts) <= 0)
        if len(bad):
            r = int(bad[0]) + 1
            raise ValueError(f"episode {ep.index}: timestamps do not increase at row {r} ({float(ts[r - 1])!r} s "
                             f"then {float(ts[r])!r} s) in {ep.data_file}")
        if self.align:
            start = base if self.version.startswith("v3") else (reader.first_frame_time() or 0.0)
            return start + (ts - ts[0]), ""
        hint = ""
        if abs(ts[0]) > self.tol:
            hint = (f". The episode's first row is at {float(ts[0])!r} s, not 0: if its timestamps are offset from the "
                    "video (the GR00T samples start at 0.05 s), pass align_video_start=True (CLI: "
                    "--align-video-start) to give the first row the episode's first frame")
        return base + ts, hint

    # ------------------------------------------------------------------------------------ the Source API
    def iter_parts(self, index: int, keys: list[str], max_rows: int) -> Iterator[dict[str, np.ndarray]]:
        if not 0 <= index < len(self._episodes):
            raise IndexError(f"episode {index} out of range: {self.path} has {len(self._episodes)} episodes")
        return self._rows(index, keys, 0, self._episodes[index].length, max_rows)

    def read_rows(self, index: int, keys: list[str], start: int, stop: int) -> dict[str, np.ndarray]:
        """Steps ``[start, stop)`` of episode ``index``: the parquet rows sliced, the frames decoded
        from the keyframe at or before row ``start``'s frame (a seek), not from the episode's start.

        Raises IndexError for a bad episode or range; what :meth:`iter_parts` raises."""
        if not 0 <= index < len(self._episodes):
            raise IndexError(f"episode {index} out of range: {self.path} has {len(self._episodes)} episodes")
        n = self._episodes[index].length
        if not 0 <= start <= stop <= n:
            raise IndexError(f"episode {index}: rows [{start}, {stop}) are not within its {n} rows")
        parts = list(self._rows(index, keys, start, stop, max(1, stop - start)))
        return parts[0] if len(parts) == 1 else {k: np.zeros((0,) + self.keys[k].shape, self.keys[k].dtype)
                                                 for k in keys}

    def _rows(self, index: int, keys: list[str], first: int, stop: int, max_rows: int
              ) -> Iterator[dict[str, np.ndarray]]:
        """Rows ``[first, stop)`` of episode ``index`` in parts of at most ``max_rows``; the videos are
        asked for those rows' frames only."""
        ep = self._episodes[index]
        cams = [k for k in keys if k in self._cameras]
        need = [k for k in keys if k in self._columns or k in self._images]
        rows = self._read_rows(ep, list(dict.fromkeys(need + (["timestamp"] if cams else []))))
        max_rows = max(1, int(max_rows))
        gens = {}
        for cam in cams:
            reader = self._reader(cam, ep.videos[cam][0])
            times, hint = self._query_times(ep, cam, reader, rows["timestamp"].astype(np.float64))
            gens[cam] = reader.frames(times[first:stop], ep.index, max_rows, hint, first_row=first,
                                      previous=float(times[first - 1]) if first else None)
        for start in range(first, stop, max_rows):
            end = min(stop, start + max_rows)
            self._take_notes([self._readers[c] for c in gens])
            part = {k: rows[k][start:end] for k in keys if k in self._columns}
            for k in keys:
                if k in self._images:
                    where = f"{ep.data_file} (episode {ep.index}, row {start})"
                    part[k] = np.stack([decode_image(b, k, where) for b in rows[k][start:end]])
            for cam, gen in gens.items():
                block = next(gen, None)
                if block is None or len(block) != end - start:  # pragma: no cover - frames() raises first
                    raise ValueError(f"episode {ep.index}, camera {cam}: the video gave too few frames")
                want = self.keys[cam].shape
                if block.shape[1:] != want:
                    raise ValueError(f"episode {ep.index}, camera {cam}: {ep.videos[cam][0]} holds frames of "
                                     f"{block.shape[1:]}, meta/info.json declares {want}")
                part[cam] = block
            self._take_notes([self._readers[c] for c in gens])
            yield part

    def _take_notes(self, readers: list[VideoReader]) -> None:
        """What the video readers' files hold (codec, bit depth, rotation) into their cameras' notes."""
        for reader in readers:
            if reader.facts is not None and reader.facts not in self._facts[reader.camera]:
                self._add_facts(reader.camera, [reader.facts])

    def _add_facts(self, cam: str, facts: list[VideoFacts | None]) -> None:
        """Add a camera's files' facts and say in ``key_notes[cam]`` what they mean (:mod:`.camera_notes`)."""
        self._facts[cam].update(f for f in facts if f is not None)
        declared = _video_info(self.info["features"][cam]).get("video.codec")
        for note in camera_notes(str(declared) if declared else None, self._facts[cam], self._depth[cam]):
            self.note_key(cam, note)

    def read_episode(self, index: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        keys = list(keys or self.keys)
        parts = list(self.iter_parts(index, keys, 1 << 30))
        return {k: np.concatenate([p[k] for p in parts]) for k in keys}

    def frame_bytes(self, key: str, indices: list[int] | None = None) -> float | None:
        """Bytes a frame of camera ``key`` takes in the dataset's video files, for the episodes
        ``indices`` (None: all): the files holding them (each counted once) over the frames of every
        episode in those files — exactly the chosen episodes' in v2 (a file an episode), the average
        of the files they share in v3 (a file holds several episodes)."""
        if key not in self._cameras:
            return None
        chosen = self._episodes if indices is None else [self._episodes[i] for i in indices]
        files = {ep.videos[key][0] for ep in chosen if ep.videos.get(key) is not None}
        frames = sum(int(ep.length) for ep in self._episodes
                     if ep.videos.get(key) is not None and ep.videos[key][0] in files)
        if not files or not frames:
            return None
        return sum(os.path.getsize(f) for f in files) / frames

    def episode_id(self, index: int) -> int:
        return self._episodes[index].index

    def episode_attrs(self, index: int) -> dict[str, Any]:
        ep = self._episodes[index]
        files: dict[str, Any] = {"data": os.path.relpath(ep.data_file, self.path)}
        for cam in self._cameras:
            path, start = ep.videos[cam]
            files[cam] = {"path": os.path.relpath(path, self.path), "from_timestamp": start}
        out = {"episode_index": ep.index, "length": ep.length, "tasks": ep.tasks, "files": files}
        if ep.rows is not None:
            out["dataset_from_index"], out["dataset_to_index"] = ep.rows
        if ep.stats:
            out["stats"] = ep.stats
        return out

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()
        self._table = None


def _video_info(feature: dict) -> dict:
    return feature.get("info") or feature.get("video_info") or {}


def _frame_shape(feature: dict, depth: bool) -> tuple[int, ...]:
    """``(H, W, C)`` of a video feature from its ``shape`` and ``names`` (channels first or last)."""
    shape = [int(s) for s in feature.get("shape", ())]
    names = [str(n).lower() for n in (feature.get("names") or [])]
    if len(shape) == 3 and len(names) == 3 and names[0].startswith("channel"):
        shape = [shape[1], shape[2], shape[0]]
    if len(shape) == 2:
        shape = shape + [1]
    if len(shape) != 3:
        raise ValueError(f"a video feature's shape {feature.get('shape')} is not (height, width, channels)")
    return (shape[0], shape[1], 1) if depth else (shape[0], shape[1], 3)
