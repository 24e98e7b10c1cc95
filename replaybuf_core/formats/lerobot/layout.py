"""The layout of a LeRobot dataset on disk: ``meta/info.json``, the episode table, tasks, statistics,
and where each episode's rows and videos are.

Versions (``info.json``'s ``codebase_version``), as LeRobot writes them:

* **v2.0 / v2.1**: one parquet file per episode at ``data_path`` (a ``str.format`` template with
  ``episode_chunk`` = episode // ``chunks_size`` and ``episode_index``), one mp4 per camera per
  episode at ``video_path`` (plus ``video_key``); episodes in ``meta/episodes.jsonl`` (``episode_index``,
  ``tasks``, ``length``), tasks in ``meta/tasks.jsonl``, statistics in ``meta/stats.json`` (v2.0) or
  per episode in ``meta/episodes_stats.jsonl`` (v2.1).  An episode's video starts at time 0.
* **v3.0**: many episodes per parquet and mp4 file; ``meta/episodes/chunk-*/file-*.parquet`` gives
  each episode's ``data/chunk_index``, ``data/file_index``, ``dataset_from_index`` /
  ``dataset_to_index`` (global row indices) and, per camera, ``videos/<key>/chunk_index``,
  ``file_index``, ``from_timestamp``, ``to_timestamp``, plus ``stats/<key>/<stat>`` columns; tasks in
  ``meta/tasks.parquet`` (the task strings are its pandas index); statistics in ``meta/stats.json``.
  Templates use ``chunk_index`` and ``file_index``.

Files not where the template says (the GR00T sample's ``data_path`` uses ``episode_index`` for the
chunk folder) are an error naming the expected path and any file of that name found elsewhere; with
``find_moved_files`` that one file is used and the move noted.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPPORTED_VERSIONS = ("v2.0", "v2.1", "v3.0")


def require(module: str, what: str):
    """Import ``module`` (a reader of the ``lerobot`` extra), or raise ImportError saying what
    needs it and how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise ImportError(f"{what} needs {module.split('.')[0]}: pip install 'replaybuf[lerobot]' "
                          "(or pip install pyarrow av)") from exc


def require_pyarrow():
    """``pyarrow.parquet``, or ImportError naming the extra that installs it."""
    return require("pyarrow.parquet", "reading LeRobot datasets")


def read_parquet(path: str | os.PathLike):
    """The ``pyarrow.Table`` of one parquet file (every column).  ``pq.ParquetFile``, not
    ``pq.read_table``: that one goes through ``pyarrow.dataset``, whose import pulls in pandas (about
    0.3 s of an import's start).  Raises what pyarrow raises for an unreadable file."""
    with require_pyarrow().ParquetFile(path) as f:
        return f.read()


def read_info(root: Path) -> dict[str, Any]:
    """``meta/info.json`` of the dataset at ``root``.

    Raises:
        FileNotFoundError: no ``meta/info.json``.
        ValueError: not JSON, or a ``codebase_version`` this reader does not know (named).
    """
    path = root / "meta" / "info.json"
    if not path.is_file():
        raise FileNotFoundError(f"{root} is not a LeRobot dataset: no meta/info.json")
    try:
        info = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(info, dict):
        raise ValueError(f"{path}: expected a JSON object, found {type(info).__name__}")
    version = info.get("codebase_version")
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"{path}: codebase_version {version!r} is not one this importer reads "
                         f"({', '.join(SUPPORTED_VERSIONS)}); LeRobot's own converters bring older datasets "
                         "to v2.1 or v3.0")
    for k in ("fps", "features", "data_path"):
        if k not in info:
            raise ValueError(f"{path}: no {k!r} entry")
    if not isinstance(info["features"], dict) or not all(isinstance(f, dict) for f in info["features"].values()):
        raise ValueError(f"{path}: 'features' must map each key to an object (its dtype, shape, names)")
    return info


def _jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{path}, line {n}: not valid JSON ({exc})") from exc
    return out


@dataclass
class Episode:
    """One episode of the dataset: its LeRobot ``index``, ``length``, ``tasks``, per-episode
    ``stats``; where its rows are (``data_file``, and in v3 the global row range ``rows``); and per
    camera ``videos[key] = (file, from_timestamp)`` (None when its video is missing)."""

    index: int
    length: int
    tasks: list[str] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    data_file: str | None = None
    rows: tuple[int, int] | None = None
    videos: dict[str, tuple[str, float] | None] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class Locator:
    """Resolves template paths under ``root``; remembers files found elsewhere (``find_moved_files``)."""

    def __init__(self, root: Path, find_moved_files: bool):
        self.root = root
        self.find_moved = find_moved_files
        self.moved: list[tuple[str, str]] = []  # (expected, used)
        self._by_name: dict[str, list[str]] | None = None

    def _index(self) -> dict[str, list[str]]:
        if self._by_name is None:
            self._by_name = defaultdict(list)
            for d, _, files in os.walk(self.root):
                for f in files:
                    self._by_name[f].append(os.path.join(d, f))
        return self._by_name

    def resolve(self, rel: str, must_contain: str | None = None) -> tuple[str | None, str | None]:
        """``(path, problem)``: the file at ``root/rel``, or the one file of that name anywhere else in the
        dataset folder but ``meta/`` (its path containing the folder ``must_contain``, e.g. the camera
        key) when allowed."""
        path = self.root / rel
        if path.is_file():
            return os.fspath(path), None
        meta = self.root / "meta"  # anywhere in the dataset folder (videos/, video/, ...), never a meta/ file
        found = [p for p in self._index().get(path.name, ())
                 if not Path(p).is_relative_to(meta) and (must_contain is None or must_contain in Path(p).parts)]
        if len(found) == 1:
            if self.find_moved:
                self.moved.append((os.fspath(path), found[0]))
                return found[0], None
            return None, (f"{path} is missing, but {found[0]} has its name: the dataset's path template "
                          "does not match its files; pass find_moved_files=True (CLI: --find-moved-files) "
                          "to use it")
        if found:
            return None, f"{path} is missing ({len(found)} files elsewhere have its name: {found[:3]})"
        return None, f"{path} is missing"


def _template(info: dict, key: str) -> str:
    t = info.get(key)
    if not isinstance(t, str):
        raise ValueError(f"meta/info.json: {key!r} is not a path template ({t!r})")
    return t


def _format(template: str, where: str, **fields: Any) -> str:
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"meta/info.json: cannot fill {where} {template!r} with {sorted(fields)}: {exc}") from exc


def _checked_records(where: Path, records: list[dict]) -> list[tuple[int, int, dict]]:
    """``(episode_index, length, record)`` of every episode record of ``where`` (``episodes.jsonl`` or
    ``meta/episodes``), in index order.

    Raises:
        ValueError: a record without a whole ``episode_index`` >= 0 or ``length`` >= 1 (naming the
            record and the field), or two records of one episode index (a duplicated line).
    """
    out, seen = [], {}
    for n, r in enumerate(records):
        values = []
        for field, low in (("episode_index", 0), ("length", 1)):
            v = r.get(field) if isinstance(r, dict) else None
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                shown = "missing" if v is None else repr(v)
                raise ValueError(f"{where}: episode record {n} ({str(r)[:80]}) has {field} {shown}; every episode "
                                 f"needs a whole {field} >= {low}")
            values.append(v)
        i, length = values
        if i in seen:
            raise ValueError(f"{where}: episode {i} is listed twice (records {seen[i]} and {n}); a dataset lists "
                             "each episode once")
        seen[i] = n
        out.append((i, length, r))
    return sorted(out, key=lambda t: t[0])


def read_v2_episodes(root: Path, info: dict, cameras: list[str], loc: Locator) -> tuple[list[Episode], list[str]]:
    """The episodes of a v2.0/v2.1 dataset and the problems with their files."""
    meta = root / "meta"
    if not (meta / "episodes.jsonl").is_file():
        raise FileNotFoundError(f"{meta / 'episodes.jsonl'}: missing (a v2 dataset lists its episodes there)")
    rows = _jsonl(meta / "episodes.jsonl")
    stats = {}
    if (meta / "episodes_stats.jsonl").is_file():
        stats = {int(r["episode_index"]): r.get("stats") for r in _jsonl(meta / "episodes_stats.jsonl")}
    chunks_size = int(info.get("chunks_size") or 1000)
    data_t = _template(info, "data_path")
    video_t = _template(info, "video_path") if cameras else ""
    episodes, problems = [], []
    for i, length, r in _checked_records(meta / "episodes.jsonl", rows):
        ep = Episode(i, length, list(r.get("tasks") or []), stats.get(i))
        fields = {"episode_chunk": i // chunks_size, "episode_index": i}
        ep.data_file, problem = loc.resolve(_format(data_t, "data_path", **fields))
        if problem:
            problems.append(f"episode {i}: data file {problem}")
        for cam in cameras:
            path, problem = loc.resolve(_format(video_t, "video_path", video_key=cam, **fields), must_contain=cam)
            ep.videos[cam] = (path, 0.0) if path else None
            if problem:
                ep.extra.setdefault("video_problems", {})[cam] = problem
        episodes.append(ep)
    return episodes, problems


def read_v3_episodes(root: Path, info: dict, cameras: list[str], loc: Locator) -> tuple[list[Episode], list[str]]:
    """The episodes of a v3.0 dataset (``meta/episodes/*/*.parquet``) and the problems with their files."""
    require_pyarrow()
    files = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    if not files:
        raise FileNotFoundError(f"{root / 'meta' / 'episodes'}: no episode metadata parquet files (v3.0 lists "
                                "its episodes in meta/episodes/chunk-*/file-*.parquet)")
    data_t = _template(info, "data_path")
    video_t = _template(info, "video_path") if cameras else ""
    records: list[dict] = []
    for f in files:
        try:
            records.extend(read_parquet(f).to_pylist())
        except Exception as exc:
            raise ValueError(f"{f}: cannot read the episode metadata ({exc})") from exc
    episodes, problems = [], []
    for i, length, r in _checked_records(root / "meta" / "episodes", records):
        stats = {}
        for k, v in r.items():
            if k.startswith("stats/"):
                feat, _, stat = k[len("stats/"):].rpartition("/")
                stats.setdefault(feat, {})[stat] = v
        ep = Episode(i, length, list(r.get("tasks") or []), stats or None)
        try:
            ep.rows = (int(r["dataset_from_index"]), int(r["dataset_to_index"]))
            fields = {"chunk_index": int(r["data/chunk_index"]), "file_index": int(r["data/file_index"])}
        except (KeyError, TypeError) as exc:
            raise ValueError(f"meta/episodes: episode {i} lacks its data location ({exc})") from None
        ep.data_file, problem = loc.resolve(_format(data_t, "data_path", **fields))
        if problem:
            problems.append(f"episode {i}: data file {problem}")
        for cam in cameras:
            c, fi = r.get(f"videos/{cam}/chunk_index"), r.get(f"videos/{cam}/file_index")
            start = r.get(f"videos/{cam}/from_timestamp")
            if c is None or fi is None or start is None:
                ep.videos[cam] = None
                ep.extra.setdefault("video_problems", {})[cam] = "its video indices are null in meta/episodes"
                continue
            path, problem = loc.resolve(_format(video_t, "video_path", video_key=cam, chunk_index=int(c),
                                                file_index=int(fi)), must_contain=cam)
            ep.videos[cam] = (path, float(start)) if path else None
            if problem:
                ep.extra.setdefault("video_problems", {})[cam] = problem
        episodes.append(ep)
    return episodes, problems


def read_tasks(root: Path, version: str) -> dict[int, str]:
    """task_index → task text (v2: ``meta/tasks.jsonl``; v3: ``meta/tasks.parquet``); {} when absent."""
    meta = root / "meta"
    if version.startswith("v2"):
        if not (meta / "tasks.jsonl").is_file():
            return {}
        return {int(r["task_index"]): str(r["task"]) for r in _jsonl(meta / "tasks.jsonl")}
    if not (meta / "tasks.parquet").is_file():
        return {}
    t = read_parquet(meta / "tasks.parquet").to_pydict()
    texts = t.get("task") or t.get("__index_level_0__")
    if texts is None or "task_index" not in t:
        raise ValueError(f"{meta / 'tasks.parquet'}: expected columns task_index and task (or the pandas "
                         f"index), found {sorted(t)}")
    return {int(i): str(s) for i, s in zip(t["task_index"], texts)}


def read_stats(root: Path) -> dict[str, Any] | None:
    """``meta/stats.json`` (dataset statistics), or None."""
    path = root / "meta" / "stats.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
