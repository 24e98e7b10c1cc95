"""The ``lerobot`` export format: a LeRobot v3.0 dataset directory.

Layout (LeRobot v3.0, https://huggingface.co/docs/lerobot/lerobot-dataset-v3, as LeRobot 0.4's
``LeRobotDataset`` writes it — the fixture ``lerobot_v3_synthetic_2cam`` in ``../shared/data``)::

    meta/info.json                       codebase_version "v3.0", fps, robot_type, totals, features,
                                         chunks_size, data/video_files_size_in_mb, data_path, video_path
    meta/tasks.parquet                   task_index + the task texts as the pandas index
    meta/episodes/chunk-000/file-000.parquet   one row an episode: episode_index, tasks, length,
                                         data/chunk_index, data/file_index, dataset_from/to_index,
                                         videos/<camera>/{chunk_index, file_index, from/to_timestamp},
                                         stats/<feature>/{min, max, mean, std, count, q01..q99}
    meta/stats.json                      the dataset's statistics (:mod:`.stats`)
    data/chunk-CCC/file-FFF.parquet      the rows of whole episodes, about data_files_size_in_mb each
    videos/<camera>/chunk-CCC/file-FFF.mp4   whole episodes' frames, about video_files_size_in_mb each

Episodes are numbered 0.. in export order; ``index`` counts rows over the dataset, ``frame_index``
within the episode, ``timestamp`` is ``frame_index / fps`` (what LeRobot's video decoding needs);
``task_index`` and the task texts come from a LeRobot import (the store's ``task_index`` key and its
source's tasks), else from the ``task`` option (every frame).  Camera keys (uint8 RGB) become mp4s
encoded as LeRobot does (:mod:`.video`): each camera in the codec its source used when that was AV1
or H.264, else ``video_codec`` (default AV1).  Other keys become parquet columns with the store's
dtypes; a LeRobot import's feature ``names`` are kept.

Verification reads every parquet file back with pyarrow and compares each column with the store bit
for bit (the bookkeeping columns with the values they must hold), decodes every mp4 with PyAV,
checks its frame count and timestamps against ``meta/episodes`` and measures each camera's PSNR
against the stored frames (lossy video: refused below ``min_psnr``, 30 dB by default).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core.export_format import ExportFormat, ExportPlan

from . import stats as lr_stats
from .features import BOOKKEEPING, Column, arrow_column, bookkeeping_features, column_values, plan_columns, png_column
from .video import CODECS, DEFAULT_CRF, VideoFile, decode_frames

__all__ = ["LeRobotExport"]

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
CHUNKS_SIZE = 1000
READ_FRAMES = 64  # camera frames read from the store at a time


def _pa():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("the LeRobot export writes parquet with pyarrow: pip install 'replaybuf[lerobot]'") from None
    return pa, pq


class _Files:
    """chunk/file indices of one kind of file, advanced as LeRobot does (``chunks_size`` files a
    chunk folder)."""

    def __init__(self):
        self.chunk, self.file = 0, 0

    def advance(self) -> None:
        self.file += 1
        if self.file >= CHUNKS_SIZE:
            self.chunk, self.file = self.chunk + 1, 0


class LeRobotExport(ExportFormat):
    """``lerobot``: a LeRobot v3.0 dataset (see the module docstring).

    Options: ``task`` (the task text of every frame when the store has no LeRobot tasks), ``fps``
    (when the store has none), ``robot_type``, ``video_codec`` (``"av1"`` or ``"h264"`` for cameras
    whose source was neither), ``crf`` (default 30 for AV1, 23 for H.264), ``min_psnr`` (dB, 30),
    ``data_files_size_in_mb`` (100), ``video_files_size_in_mb`` (500), ``images`` (cameras as PNG
    ``image`` features in the parquet instead of videos: lossless, larger).
    """

    name = "lerobot"
    description = "LeRobot v3.0 dataset (parquet + AV1/H.264 mp4 per camera, meta/ info, tasks, episodes, stats)"
    requires = "lerobot"

    def add_arguments(self, group) -> list[str]:
        group.add_argument("--task", default=None, metavar="TEXT",
                           help="lerobot: the task of every frame (stores without LeRobot tasks)")
        group.add_argument("--fps", type=float, default=None, help="lerobot: frames a second (stores without one)")
        group.add_argument("--robot-type", dest="robot_type", default=None, help="lerobot: info.json's robot_type")
        group.add_argument("--video-codec", dest="video_codec", choices=sorted(CODECS), default=None,
                           help="lerobot: codec of cameras whose source was not AV1/H.264 (default av1)")
        group.add_argument("--crf", type=int, default=None, help="lerobot: video CRF (default 30 for av1, 23 for h264)")
        group.add_argument("--min-psnr", dest="min_psnr", type=float, default=None,
                           help="lerobot: refuse the export when a camera's video decodes below this PSNR (dB, 30)")
        group.add_argument("--lerobot-images", dest="images", action="store_true", default=None,
                           help="lerobot: cameras as PNG image features in the parquet (lossless) instead of mp4")
        return ["task", "fps", "robot_type", "video_codec", "crf", "min_psnr", "images"]

    # ------------------------------------------------------------------------------ the plan
    def _source(self, plan: ExportPlan) -> dict[str, Any]:
        attrs = plan.data_attrs()
        if (attrs.get("import") or {}).get("format") != "lerobot":
            return {}
        return attrs.get("source_attrs") or {}

    def _fps(self, plan: ExportPlan) -> float:
        """The frame rate: ``fps=`` (``--fps``) when given, else the store's ``fps`` data attribute.

        Raises ValueError: neither given; a value that is not a finite number above 0 (said with the
        value and where it came from: LeRobot's timestamps are ``frame_index / fps``)."""
        given = plan.options.get("fps")
        if given is None:
            given = plan.data_attrs().get("fps")
            if given is None:
                raise ValueError("LeRobot export: the store records no fps (LeRobot needs one): pass --fps N")
            where, fix = "the store's recorded fps (data attribute 'fps')", ": pass --fps N"
        else:
            where, fix = "--fps (fps=)", ""
        try:
            fps = float(given) if not isinstance(given, (bool, np.bool_)) else math.nan
        except (TypeError, ValueError):
            fps = math.nan
        if not (math.isfinite(fps) and fps > 0):
            raise ValueError(f"LeRobot export: {where} is {given!r}, not a frame rate: LeRobot's timestamps are "
                             f"frame_index / fps, so fps must be a finite number of frames a second above 0{fix}")
        return fps

    def _codec_for(self, plan: ExportPlan):
        kept = plan.data_attrs().get("key_attrs") or {}
        fallback = plan.options.get("video_codec") or "av1"
        if fallback not in CODECS:
            raise ValueError(f"video_codec must be one of {sorted(CODECS)}, got {fallback!r}")

        def codec_for(key: str) -> str:
            source = ((kept.get(key) or {}).get("info") or {}).get("video.codec") if isinstance(kept.get(key), dict) else None
            return source if source in CODECS and plan.names[key] == key else fallback
        return codec_for

    def _tasks(self, plan: ExportPlan) -> tuple[dict[int, str], str | None]:
        """(task_index → text, the store key holding per-frame task_index or None)."""
        if plan.options.get("task") is not None:
            return {0: str(plan.options["task"])}, None
        texts = {int(k): str(v) for k, v in (self._source(plan).get("tasks") or {}).items()}
        if texts and "task_index" in plan.rb.keys():
            return texts, "task_index"
        raise ValueError("LeRobot export: the store has no LeRobot tasks (task_index and the source's task texts); "
                         "LeRobot needs a task for every frame: pass --task TEXT")

    def _layout(self, plan: ExportPlan) -> tuple[float, list[Column], dict[int, str], str | None]:
        fps = self._fps(plan)
        columns = plan_columns(plan, fps, self._codec_for(plan), images=bool(plan.options.get("images")))
        return (fps, columns, *self._tasks(plan))

    def check(self, plan: ExportPlan) -> list[str]:
        _pa()
        fps, columns, tasks, task_key = self._layout(plan)
        crf = plan.options.get("crf")
        if crf is not None and not 0 <= int(crf) <= 63:
            raise ValueError(f"crf must be in 0..63, got {crf}")
        if task_key is not None:
            for j in range(len(plan.episodes)):
                unknown = sorted(set(np.unique(plan.read(task_key, j)).tolist()) - set(tasks))
                if unknown:
                    raise ValueError(f"LeRobot export: episode {plan.episodes[j]} has task_index {unknown[0]}, "
                                     f"which the source's tasks do not name ({sorted(tasks)})")
        notes = []
        rewritten = self._rewritten(plan, fps, task_key)
        same = [k for k, differs in rewritten.items() if not differs]
        if same:
            notes.append(f"{', '.join(same)}: the store's values are the ones LeRobot's definition gives (written so)")
        changed = [k for k, differs in rewritten.items() if differs]
        if changed:
            notes.append(f"{', '.join(changed)}: the store's values differ from LeRobot's definition (after trims, merges "
                         "or a subset of episodes): written as LeRobot defines them (timestamp = frame_index / fps, index "
                         "over the exported rows, episodes numbered 0.. in export order)")
        floats = [c.key for c in columns if c.camera and plan.step_spec(c.key)[1] != np.uint8]
        if floats:
            notes.append(f"{', '.join(floats)}: read as {plan.step_spec(floats[0])[1]} but stored uint8; written as "
                         "uint8 frames")
        ones = [c.key for c in columns if c.kind == "value" and c.shape == (1,)]
        if ones:
            notes.append(f"{', '.join(ones)}: steps of shape (1,) are LeRobot shape-[1] features, plain parquet columns "
                         "(an import of the export reads them as scalars)")
        if not any(c.video for c in columns):
            notes.append("no videos/: " + ("cameras as PNG images in the parquet" if any(c.camera for c in columns)
                                           else "no camera keys"))
        return notes

    # ------------------------------------------------------------------------------ writing
    def write(self, plan: ExportPlan, path: Path, progress) -> list[str]:
        pa, pq = _pa()
        fps, columns, tasks, task_key = self._layout(plan)
        data_mb = float(plan.options.get("data_files_size_in_mb") or 100)
        video_mb = float(plan.options.get("video_files_size_in_mb") or 500)
        cams = [c for c in columns if c.video]
        data_files, video_files = _Files(), {c.key: _Files() for c in cams}
        open_videos: dict[str, VideoFile] = {}
        pending: list[Any] = []
        pending_bytes, index = 0, 0
        records, all_stats = [], {c.name: [] for c in columns}
        all_stats.update({n: [] for n in BOOKKEEPING})

        def flush_data():
            nonlocal pending, pending_bytes
            if pending:
                p = path / DATA_PATH.format(chunk_index=data_files.chunk, file_index=data_files.file)
                p.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(pa.concat_tables(pending), p)
                data_files.advance()
                pending, pending_bytes = [], 0

        try:
            for j in range(len(plan.episodes)):
                a, b = plan.span(j)
                t = b - a
                if pending and pending_bytes >= data_mb * 1e6:
                    flush_data()
                ep_stats: dict[str, dict] = {}
                cols: dict[str, Any] = {}
                for c in columns:
                    if c.kind == "value":
                        v = plan.read(c.key, j)
                        cols[c.name] = arrow_column(v)
                        ep_stats[c.name] = lr_stats.episode_stats(v, camera=False)
                        progress(t)
                    elif c.kind == "image":
                        cols[c.name], ep_stats[c.name] = self._png_episode(plan, c, a, b, progress)
                book = self._bookkeeping(plan, j, t, index, fps, task_key)
                for n, v in book.items():
                    cols[n] = pa.array(v)
                    ep_stats[n] = lr_stats.episode_stats(v, camera=False)
                table = pa.table(cols)
                rec: dict[str, Any] = {"episode_index": j, "tasks": [tasks[k] for k in dict.fromkeys(book["task_index"].tolist())],
                                       "length": t, "data/chunk_index": data_files.chunk, "data/file_index": data_files.file,
                                       "dataset_from_index": index, "dataset_to_index": index + t}
                pending.append(table)
                pending_bytes += table.nbytes
                for c in cams:
                    vf = open_videos.get(c.key)
                    if vf is not None and vf.bytes >= video_mb * 1e6:
                        vf.close()
                        video_files[c.key].advance()
                        vf = None
                    if vf is None:
                        codec = c.feature["info"]["video.codec"]
                        crf = plan.options.get("crf")
                        vf = open_videos[c.key] = VideoFile(
                            path / VIDEO_PATH.format(video_key=c.name, chunk_index=video_files[c.key].chunk,
                                                     file_index=video_files[c.key].file),
                            codec, DEFAULT_CRF[codec] if crf is None else int(crf), fps, c.shape[0], c.shape[1])
                    rec[f"videos/{c.name}/chunk_index"] = video_files[c.key].chunk
                    rec[f"videos/{c.name}/file_index"] = video_files[c.key].file
                    rec[f"videos/{c.name}/from_timestamp"] = vf.frames / fps
                    sample, sampled = lr_stats.frame_sample(t), []
                    for s in range(a, b, READ_FRAMES):
                        frames = plan.rb.store.read("data", c.key, s, min(b, s + READ_FRAMES))
                        vf.append(frames)
                        hit = sample[(sample >= s - a) & (sample < s - a + len(frames))] - (s - a)
                        sampled.append(np.asarray(frames)[hit])
                        progress(len(frames))
                    rec[f"videos/{c.name}/to_timestamp"] = vf.frames / fps
                    ep_stats[c.name] = lr_stats.episode_stats(np.concatenate(sampled), camera=True)
                for n, s in ep_stats.items():
                    all_stats[n].append(s)
                    for stat, v in s.items():
                        rec[f"stats/{n}/{stat}"] = v.tolist()
                rec["meta/episodes/chunk_index"], rec["meta/episodes/file_index"] = 0, 0
                records.append(rec)
                index += t
            flush_data()
        finally:
            for vf in open_videos.values():
                vf.close()
        self._write_meta(plan, path, fps, columns, tasks, records, all_stats, data_mb, video_mb)
        return [f"{len(cams)} camera(s) as video ({', '.join(sorted({c.feature['info']['video.codec'] for c in cams}))}, "
                f"GOP 2), {data_files.chunk * CHUNKS_SIZE + data_files.file} data file(s)"] if cams else []

    def _png_episode(self, plan: ExportPlan, c: Column, a: int, b: int, progress):
        """The PNG column and the statistics of rows ``a:b`` of camera ``c``."""
        pa, _ = _pa()
        sample, sampled, parts = lr_stats.frame_sample(b - a), [], []
        for s in range(a, b, READ_FRAMES):
            frames = np.asarray(plan.rb.store.read("data", c.key, s, min(b, s + READ_FRAMES)))
            parts.append(png_column(frames))
            sampled.append(frames[sample[(sample >= s - a) & (sample < s - a + len(frames))] - (s - a)])
            progress(len(frames))
        return pa.concat_arrays(parts), lr_stats.episode_stats(np.concatenate(sampled), camera=True)

    def _rewritten(self, plan: ExportPlan, fps: float, task_key: str | None) -> dict[str, bool]:
        """The store's own bookkeeping keys (but the task key) → whether they differ from what the
        export writes (timestamps within 0.1 ms)."""
        keys = [k for k in plan.names if k in BOOKKEEPING and k != task_key]
        differs = dict.fromkeys(keys, False)
        index = 0
        for j in range(len(plan.episodes)):
            t = int(plan.lengths[j])
            want = self._bookkeeping(plan, j, t, index, fps, task_key)
            index += t
            for k in keys:
                got = plan.read(k, j).reshape(t)
                if k == "timestamp":
                    differs[k] |= not np.allclose(got.astype(np.float64), want[k], rtol=0, atol=1e-4)
                else:
                    differs[k] |= not np.array_equal(got, want[k])
        return differs

    def _bookkeeping(self, plan: ExportPlan, j: int, t: int, index: int, fps: float, task_key: str | None
                     ) -> dict[str, np.ndarray]:
        frame = np.arange(t, dtype=np.int64)
        task = plan.read(task_key, j).astype(np.int64).reshape(t) if task_key else np.zeros(t, dtype=np.int64)
        return {"timestamp": (frame / fps).astype(np.float32), "frame_index": frame,
                "episode_index": np.full(t, j, dtype=np.int64), "index": np.arange(index, index + t, dtype=np.int64),
                "task_index": task}

    def _write_meta(self, plan, path: Path, fps, columns, tasks, records, all_stats, data_mb, video_mb) -> None:
        pa, pq = _pa()
        meta = path / "meta"
        (meta / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(records), meta / "episodes" / "chunk-000" / "file-000.parquet")
        order = sorted(tasks)
        table = pa.table({"task_index": pa.array(order, pa.int64()), "__index_level_0__": [tasks[i] for i in order]})
        pandas = {"index_columns": ["__index_level_0__"],  # the pandas index: LeRobot reads tasks with pandas
                  "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                                      "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
                  "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                               "numpy_type": "int64", "metadata": None},
                              {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
                               "numpy_type": "object", "metadata": None}],
                  "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.0.0"}
        pq.write_table(table.replace_schema_metadata({"pandas": json.dumps(pandas)}), meta / "tasks.parquet")
        features = {c.name: c.feature for c in columns}
        features.update(bookkeeping_features())
        n = len(records)
        source = self._source(plan)
        info = {"codebase_version": "v3.0", "robot_type": plan.options.get("robot_type") or source.get("robot_type"),
                "total_episodes": n, "total_frames": plan.n_steps, "total_tasks": len(tasks),
                "chunks_size": CHUNKS_SIZE, "data_files_size_in_mb": data_mb, "video_files_size_in_mb": video_mb,
                "fps": int(fps) if float(fps).is_integer() else fps, "splits": {"train": f"0:{n}"},
                "data_path": DATA_PATH, "video_path": VIDEO_PATH if any(c.video for c in columns) else None,
                "features": features}
        (meta / "info.json").write_text(json.dumps(info, indent=4))
        stats = {name: {k: v.tolist() for k, v in lr_stats.aggregate(s).items()} for name, s in all_stats.items()}
        (meta / "stats.json").write_text(json.dumps(stats, indent=4))

    # ------------------------------------------------------------------------------ verification
    def verify(self, plan: ExportPlan, path: Path) -> list[str]:
        _, pq = _pa()
        fps, columns, _, task_key = self._layout(plan)
        info = json.loads((path / "meta" / "info.json").read_text())
        episodes = pq.read_table(path / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
        if len(episodes) != len(plan.episodes) or info["total_frames"] != plan.n_steps:
            raise ValueError(f"{path}: meta/ read back holds {len(episodes)} episodes / {info['total_frames']} frames, "
                             f"expected {len(plan.episodes)} / {plan.n_steps}")
        tables: dict[tuple[int, int], Any] = {}
        offsets: dict[tuple[int, int], int] = {}
        for j, rec in enumerate(episodes):
            where = (rec["data/chunk_index"], rec["data/file_index"])
            if where not in tables:
                tables[where] = pq.read_table(path / DATA_PATH.format(chunk_index=where[0], file_index=where[1]))
                offsets[where] = rec["dataset_from_index"]
            rows = tables[where].slice(rec["dataset_from_index"] - offsets[where], rec["length"])
            expected = {c.name: plan.read(c.key, j) for c in columns if c.kind == "value"}
            expected.update(self._bookkeeping(plan, j, rec["length"], rec["dataset_from_index"], fps, task_key))
            for c in (c for c in columns if c.kind == "image"):
                self._verify_pngs(plan, path, c, j, rows.column(c.name))
            for name, want in expected.items():
                got = column_values(rows.column(name), want.shape[1:], want.dtype)
                if got.tobytes() != np.ascontiguousarray(want).tobytes():
                    bad = int(np.flatnonzero((got != want).reshape(len(want), -1).any(axis=1))[0])
                    raise ValueError(f"{path}: column {name!r} of episode {j} (store episode {plan.episodes[j]}) row "
                                     f"{bad} differs from the store")
        pngs = [c.name for c in columns if c.kind == "image"]
        compared = [(f"lerobot: {len(tables)} parquet file(s) read back with pyarrow, every column equal to the store "
                     "bit for bit" + (f" (the PNGs of {', '.join(pngs)} decoded by imagecodecs)" if pngs else ""))]
        min_psnr = float(plan.options.get("min_psnr") or 30.0)
        for c in (c for c in columns if c.video):
            compared.append(self._verify_camera(plan, path, c, episodes, fps, min_psnr))
        return compared

    def _verify_pngs(self, plan: ExportPlan, path: Path, c: Column, j: int, column) -> None:
        """Decode episode ``j``'s PNGs of camera ``c`` with imagecodecs (not the Pillow that wrote
        them) and compare them with the stored frames bit for bit."""
        import imagecodecs

        a, b = plan.span(j)
        cells = column.combine_chunks().field("bytes").to_pylist()
        for s in range(a, b, READ_FRAMES):
            block = np.asarray(plan.rb.store.read("data", c.key, s, min(b, s + READ_FRAMES)))
            for n, want in enumerate(block):
                got = imagecodecs.png_decode(cells[s - a + n])
                if got.shape != want.shape or not np.array_equal(got, want):
                    raise ValueError(f"{path}: image {c.name!r}, episode {j} frame {s - a + n} does not decode to the "
                                     "stored frame")

    def _verify_camera(self, plan, path: Path, c: Column, episodes, fps: float, min_psnr: float) -> str:
        from replaybuf_core.importing.check import psnr_db

        by_file: dict[tuple[int, int], list[int]] = {}
        for j, rec in enumerate(episodes):
            by_file.setdefault((rec[f"videos/{c.name}/chunk_index"], rec[f"videos/{c.name}/file_index"]), []).append(j)
        sse_all, count_all, worst = 0.0, 0, math.inf
        for (chunk, file), eps in by_file.items():
            mp4 = path / VIDEO_PATH.format(video_key=c.name, chunk_index=chunk, file_index=file)
            decoded = decode_frames(mp4)
            for j in eps:
                rec, (a, b) = episodes[j], plan.span(j)
                sse = 0.0
                for s in range(a, b, READ_FRAMES):
                    block = np.asarray(plan.rb.store.read("data", c.key, s, min(b, s + READ_FRAMES)))
                    for n, want in enumerate(block):
                        k = s - a + n
                        try:
                            ts, got = next(decoded)
                        except StopIteration:
                            raise ValueError(f"{mp4}: camera {c.name!r} ends before episode {j}'s frame {k}") from None
                        if abs(ts - (rec[f"videos/{c.name}/from_timestamp"] + k / fps)) > 1e-4:
                            raise ValueError(f"{mp4}: camera {c.name!r}, episode {j} frame {k} is at {ts:.6f} s, not "
                                             f"from_timestamp + {k}/fps")
                        sse += float(np.sum((got.astype(np.int64) - want) ** 2))
                db = psnr_db(sse, (b - a) * int(np.prod(c.shape)))
                worst = min(worst, db)
                if db < min_psnr:
                    raise ValueError(f"{mp4}: camera {c.name!r}, episode {j} decodes at {db:.1f} dB, below min_psnr "
                                     f"{min_psnr} (raise --crf's quality: a lower --crf)")
                sse_all, count_all = sse_all + sse, count_all + (b - a) * int(np.prod(c.shape))
            if next(decoded, None) is not None:
                raise ValueError(f"{mp4}: camera {c.name!r} holds more frames than its episodes")
        plan.psnr[c.name] = psnr_db(sse_all, count_all)
        return (f"{c.name}: {len(by_file)} mp4(s) decoded with PyAV, every frame at its timestamp, "
                f"{psnr_db(sse_all, count_all):.1f} dB against the store (worst episode {worst:.1f} dB)")

    def recognises(self, path) -> bool:
        try:
            info = json.loads((Path(path) / "meta" / "info.json").read_text())
            return str(info.get("codebase_version", "")).startswith("v")
        except Exception:  # noqa: BLE001 - not a LeRobot dataset
            return False
