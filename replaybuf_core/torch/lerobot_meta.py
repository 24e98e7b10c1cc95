"""LeRobot's dataset metadata (``LeRobotDatasetMetadata``, LeRobot 0.6.1's public attributes) read
from a replaybuf store: what an import kept of ``info.json``, ``tasks`` and ``stats.json``, and the
store's own bookkeeping where it has none.  See :class:`LeRobotMeta`."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from replaybuf_core.torch.datasets import image_keys_of

__all__ = ["LeRobotMeta", "EpisodeTable"]


def _store_episode_numbers(buffer: Any) -> np.ndarray:
    """LeRobot's episode_index of each store episode: the import's record, else 0..E-1 — also when the
    record repeats a number (a merge of two imports: each numbered its episodes from 0), so every
    episode keeps a number of its own (see :func:`renumbered`)."""
    store, n = buffer.store, int(buffer.n_episodes)
    if store.has_array("meta", "source_episode_index"):
        numbers = np.asarray(store.read("meta", "source_episode_index", 0, n), dtype=np.int64)
        if np.unique(numbers).size == numbers.size:
            return numbers
    return np.arange(n, dtype=np.int64)


def renumbered(buffer: Any) -> bool:
    """True when the store's own ``episode_index`` / ``index`` columns cannot number its frames (its
    source episode numbers repeat: a merge), so samples get the store's numbering instead."""
    store, n = buffer.store, int(buffer.n_episodes)
    if not store.has_array("meta", "source_episode_index"):
        return False
    numbers = np.asarray(store.read("meta", "source_episode_index", 0, n))
    return np.unique(numbers).size != numbers.size


def edited_since_import(buffer: Any) -> bool:
    """True once an edit (delete, keep, trim, drop, pop) was committed to the store (its commit
    record's generation is past 0): the stored ``index`` / ``frame_index`` / ``timestamp`` columns
    of an imported LeRobot dataset then no longer number its frames from each episode's start."""
    from replaybuf_core.store.commit import read_generation

    return read_generation(buffer.store) > 0


def episode_first_timestamps(buffer: Any) -> np.ndarray | None:
    """The stored ``timestamp`` of each store episode's first frame (float64, (n_episodes,)), None
    when the store has no ``timestamp`` key: the origin an edited episode's times are counted from."""
    if "timestamp" not in buffer:
        return None
    ends = np.asarray(buffer.episode_ends[: buffer.n_episodes], dtype=np.int64)
    starts = np.r_[0, ends[:-1]] if ends.size else ends
    return np.asarray(buffer.read_rows("timestamp", starts), dtype=np.float64).reshape(ends.size, -1)[:, 0]


def _episode_tasks(buffer: Any) -> list[list[str]] | None:
    """Each store episode's task texts, from the import's ``meta/episode_attrs``; None without it."""
    store, n = buffer.store, int(buffer.n_episodes)
    if not store.has_array("meta", "episode_attrs"):
        return None
    import json

    return [[str(t) for t in (json.loads(str(text) or "{}").get("tasks") or [])]
            for text in store.read("meta", "episode_attrs", 0, n)]


class EpisodeTable:
    """LeRobot v3's ``meta.episodes``, read-only: ``table["dataset_from_index"]`` gives a column
    (list, one entry per store episode), ``table[i]`` a row (dict).  Columns: ``episode_index``
    (LeRobot's), ``length``, ``dataset_from_index`` / ``dataset_to_index`` (the episode's steps in
    the store: LeRobot's global ``index`` range when the whole dataset was imported), ``tasks``.
    """

    def __init__(self, columns: dict[str, list]):
        self._columns = columns
        self.column_names = list(columns)

    def __len__(self) -> int:
        return len(self._columns["episode_index"])

    def __getitem__(self, item):
        if isinstance(item, str):
            if item not in self._columns:
                raise KeyError(f"meta.episodes has no column {item!r} (columns: {self.column_names})")
            return self._columns[item]
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
            raise TypeError(f"meta.episodes rows are numbered by int, got {type(item).__name__}")
        n = len(self)
        if not -n <= item < n:
            raise IndexError(f"episode row {item} out of range for {n} episodes")
        return {k: v[item] for k, v in self._columns.items()}

    def __repr__(self) -> str:
        return f"EpisodeTable(n_episodes={len(self)}, columns={self.column_names})"


#: LeRobotDatasetMetadata members that write to a LeRobot dataset or reach its files and hub: a
#: replaybuf store holds neither parquet nor mp4 files, and this dataset only reads
UNSUPPORTED = {
    "save_episode_tasks": "it writes LeRobot's tasks file", "save_episode": "it writes a LeRobot episode",
    "add_task": "it writes LeRobot's tasks file", "pull_from_repo": "there is no hub: the store is local",
    "push_to_hub": "there is no hub: the store is local", "url_root": "there is no hub: the store is local",
    "get_data_file_path": "the store holds no parquet files", "get_video_file_path": "the store holds no mp4 files",
    "get_audio_file_path": "the store holds no audio files", "update_video_info": "it writes info.json",
    "update_chunk_settings": "it writes info.json", "finalize": "it closes LeRobot's writers",
    "create": "it creates a LeRobot dataset (replaybuf: ReplayBuffer.create_empty, then export)",
    "writer": "it is LeRobot's parquet writer",
}


class LeRobotMeta:
    """What training code reads of LeRobot's ``LeRobotDatasetMetadata`` (LeRobot 0.6.1).

    Attributes:
        repo_id, root: the dataset's name and the store's path (``pathlib.Path``).
        fps: frames per second — an int when whole, as LeRobot's ``info["fps"]`` (the store's ``fps``).
        features: ``{key: {"dtype", "shape", "names", ...}}`` in ``info.json`` order, shapes as
            tuples (what LeRobot's ``load_info`` makes of them) — LeRobot's own when imported (keys
            the store lacks left out), else built from the store (uint8 (H, W, C) keys as ``"image"``);
            keys not in ``info.json`` follow in the store's order.
        shapes, names: ``{key: tuple}`` / ``{key: names}`` of :attr:`features`.
        tasks: LeRobot v3's table — a ``pandas.DataFrame`` indexed by task text with a ``task_index``
            column when pandas is installed, else ``{task_index: text}``; :meth:`get_task_index`.
        total_tasks: the number of tasks; chunks_size, data_path, video_path: ``info.json``'s
            (1000 / None / None without one: the store has no LeRobot files).
        episodes: :class:`EpisodeTable`, LeRobot v3's per-episode table.
        robot_type, info: from the imported ``info.json`` (None / one built from the store otherwise).
        camera_keys, video_keys, image_keys: feature keys of dtype video+image / video / image.
        total_frames, total_episodes: of the whole store.
        stats: ``{key: {"min", "max", "mean", "std", "count", ...}}`` as NumPy arrays — LeRobot's
            ``stats.json`` when imported and still about the store's frames (its ``count`` equals
            them; edits and merges drop it: :mod:`replaybuf_core.store.source_records`), else
            computed once on first access
            (:meth:`ReplayBuffer.get_stats`: the statistics stored with the store, brought up to date).

    LeRobot's writing and hub members (``save_episode``, ``pull_from_repo``, ``get_video_file_path``
    ...: :data:`UNSUPPORTED`) raise NotImplementedError naming themselves and why.
    """

    def __init__(self, buffer: Any, fps: float | None, stats_from: Callable[[], dict],
                 repo_id: str | None = None, root: Any = None):
        from pathlib import Path

        attrs = buffer.store.get_attrs("data")
        source = attrs.get("source_attrs") or {}
        stored = float(attrs["fps"]) if attrs.get("fps") else None
        if fps is not None and stored is not None and float(fps) != stored:
            raise ValueError(f"fps={fps} differs from the store's own fps {stored:g} (its 'fps' attribute): the "
                             "store's frame rate is what its timestamps mean; leave fps= out (it is for stores "
                             "without one)")
        rate = stored if stored is not None else (float(fps) if fps is not None else None)
        self.fps = int(rate) if rate is not None and float(rate).is_integer() else rate
        self.repo_id = repo_id
        self.root = Path(root) if root is not None else None
        self.robot_type = source.get("robot_type")
        imported_info = dict(source.get("info") or {})
        self._task_text = {int(k): str(v) for k, v in (source.get("tasks") or {}).items()}
        self.features = _features(buffer, attrs.get("key_attrs") or {}, imported_info.get("features") or {})
        self.video_keys = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        self.image_keys = [k for k, f in self.features.items() if f.get("dtype") == "image"]
        self.camera_keys = [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]
        self.total_frames = int(buffer.n_steps)
        self.total_episodes = int(buffer.n_episodes)
        self.info = dict(imported_info) if imported_info else {
            "codebase_version": None, "robot_type": None, "fps": self.fps, "chunks_size": 1000,
            "data_path": None, "video_path": None, "total_episodes": self.total_episodes,
            "total_frames": self.total_frames, "total_tasks": len(self._task_text)}
        self.info.update({"features": self.features, "total_episodes": self.total_episodes,  # what the store holds
                          "total_frames": self.total_frames, "total_tasks": len(self._task_text)})
        self.tasks = _tasks_table(self._task_text)
        imported = source.get("stats")
        self._stats = ({k: {s: np.asarray(v) for s, v in d.items()} for k, d in imported.items()}
                       if imported else None)
        counts = {int(np.asarray(d["count"]).ravel()[0]) for d in (self._stats or {}).values()
                  if isinstance(d, dict) and "count" in d and np.asarray(d["count"]).size}
        if counts and counts != {self.total_frames}:  # steps appended or removed since: not these frames' stats
            self._stats = None
        if imported_info.get("total_frames") not in (None, self.total_frames):  # a subset import, or edited since
            self._stats = None
        self._stats_from = stats_from
        ends = np.asarray(buffer.episode_ends[:], dtype=np.int64)
        starts = np.concatenate([[0], ends[:-1]]).astype(np.int64) if ends.size else ends
        tasks = _episode_tasks(buffer) or [[] for _ in range(ends.size)]
        self.episodes = EpisodeTable({"episode_index": _store_episode_numbers(buffer).tolist(),
                                      "length": (ends - starts).tolist(), "dataset_from_index": starts.tolist(),
                                      "dataset_to_index": ends.tolist(), "tasks": tasks})

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """``{key: {stat: ndarray}}``: the imported ``stats.json``, else computed once on first use."""
        if self._stats is None:
            self._stats = self._stats_from()
        return self._stats

    @property
    def shapes(self) -> dict[str, tuple]:
        return {k: tuple(f["shape"]) for k, f in self.features.items()}

    @property
    def names(self) -> dict[str, Any]:
        return {k: f.get("names") for k, f in self.features.items()}

    @property
    def total_tasks(self) -> int:
        return len(self._task_text)

    @property
    def chunks_size(self) -> int:
        return int(self.info.get("chunks_size") or 1000)

    @property
    def data_path(self) -> str | None:
        return self.info.get("data_path")

    @property
    def video_path(self) -> str | None:
        return self.info.get("video_path")

    def get_task_index(self, task: str) -> int | None:
        """The ``task_index`` of the task text ``task``, None when the dataset has no such task."""
        for index, text in self._task_text.items():
            if text == task:
                return index
        return None

    def task_text(self, task_index: int) -> str:
        """The text of ``task_index`` ("" when unknown)."""
        return self._task_text.get(int(task_index), "")

    def __getattr__(self, name: str) -> Any:
        if name in UNSUPPORTED:
            raise NotImplementedError(f"LeRobotDatasetMetadata.{name} is not supported by replaybuf's LeRobotDataset: "
                                      f"{UNSUPPORTED[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        return (f"LeRobotMeta(fps={self.fps}, total_episodes={self.total_episodes}, "
                f"total_frames={self.total_frames}, features={list(self.features)})")


def _features(buffer: Any, key_attrs: dict, info_features: dict) -> dict[str, dict]:
    """The feature table: ``info.json`` order first (keys the store holds), then the store's other keys."""
    frames = set(image_keys_of(buffer, buffer.keys()))
    keys = [k for k in info_features if k in buffer] + [k for k in buffer.keys() if k not in info_features]
    out: dict[str, dict] = {}
    for key in keys:
        arr = buffer[key]
        if key in key_attrs and "dtype" in key_attrs[key]:
            feature = dict(key_attrs[key])
        elif key in info_features and "dtype" in info_features[key]:
            feature = dict(info_features[key])
        elif key in frames:
            feature = {"dtype": "image", "shape": arr.shape[1:], "names": ["height", "width", "channel"]}
        else:
            kind = np.dtype(arr.dtype).kind
            dtype = "string" if kind in "OTUS" else str(np.dtype(arr.dtype))
            feature = {"dtype": dtype, "shape": arr.shape[1:] or (1,), "names": None}
        feature["shape"] = tuple(int(x) for x in feature.get("shape") or ())
        out[key] = feature
    return out


def _tasks_table(task_text: dict[int, str]) -> Any:
    """LeRobot v3's tasks table (a DataFrame indexed by text, column ``task_index``), or the dict
    ``{task_index: text}`` without pandas."""
    try:
        import pandas as pd
    except ImportError:
        return dict(task_text)
    order = sorted(task_text)
    return pd.DataFrame({"task_index": order}, index=pd.Index([task_text[i] for i in order], name="task"))
