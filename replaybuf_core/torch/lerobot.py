"""A LeRobot-compatible dataset: LeRobot's sample dict and ``meta`` from a replaybuf store.

Training code written against LeRobot's ``LeRobotDataset`` (``lerobot/datasets/lerobot_dataset.py``,
LeRobot 0.4) reads ``dataset[i]``, ``dataset.meta.stats`` / ``.features`` / ``.fps`` /
``.camera_keys``, ``num_frames`` and ``num_episodes``; :class:`LeRobotDataset` gives the same from a
store (best one written by ``replaybuf import lerobot``, which keeps LeRobot's key names, tasks,
features and stats), reading exact stored frames instead of decoding video per sample.

Sample ``i`` (``i`` counts the frames of the chosen episodes, in order), as LeRobot builds it:

* every data key at frame ``i`` — or, for a key of ``delta_timestamps``, at the frames ``i + d``
  stacked on a new axis 0, clamped to the episode, with ``"<key>_is_pad"`` (n,) bool;
* camera keys (features of dtype ``video`` / ``image``, else uint8 (H, W, C) keys) as float32
  (C, H, W) — (n, C, H, W) when stacked — in [0, 1], then ``image_transforms`` applied to each;
* ``index``, ``episode_index``, ``frame_index`` (int64), ``timestamp`` (float32) and
  ``task_index`` as stored; when a store lacks them, computed from its bookkeeping (episode
  numbers from ``meta/source_episode_index`` when the store was imported, ``timestamp =
  frame_index / fps``);
* ``task``: the text of ``task_index`` (or the episode's first task, or ``""``).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np
import torch

from replaybuf_core.sampling.window_sampler import WindowSampler, delta_timestamps_to_steps
from replaybuf_core.torch.batch import Batch, convert_images, to_torch
from replaybuf_core.torch.datasets import _BatchedDataset, image_keys_of

__all__ = ["LeRobotDataset", "LeRobotMeta", "EpisodeTable"]

_BOOKKEEPING = ("index", "episode_index", "frame_index", "timestamp", "task_index")


def _episode_list(episodes: Any) -> list[int]:
    """LeRobot's ``episodes`` argument checked: a sequence of distinct ints."""
    if isinstance(episodes, (str, bytes)) or not hasattr(episodes, "__iter__"):
        raise TypeError(f"episodes must be a list of episode indices, got {type(episodes).__name__} {episodes!r}")
    out = []
    for e in episodes:
        if isinstance(e, (bool, np.bool_)) or not isinstance(e, (int, np.integer)):
            raise TypeError(f"episodes must hold ints, got {type(e).__name__} {e!r}")
        out.append(int(e))
    twice = sorted({e for e in out if out.count(e) > 1})
    if twice:
        raise ValueError(f"episodes lists {twice} more than once")
    return out


def _store_episode_numbers(buffer: Any) -> np.ndarray:
    """LeRobot's episode_index of each store episode: the import's record, else 0..E-1."""
    store, n = buffer.store, int(buffer.n_episodes)
    if store.has_array("meta", "source_episode_index"):
        return np.asarray(store.read("meta", "source_episode_index", 0, n), dtype=np.int64)
    return np.arange(n, dtype=np.int64)


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


class LeRobotMeta:
    """What training code reads of LeRobot's ``LeRobotDatasetMetadata``.

    Attributes:
        fps: frames per second (float; the store's ``fps`` attribute).
        features: ``{key: {"dtype", "shape", "names"}}`` — LeRobot's own when imported, else built
            from the store (uint8 (H, W, C) keys as ``"image"``).
        tasks: ``{task_index: text}``.
        episodes: :class:`EpisodeTable`, LeRobot v3's per-episode table.
        robot_type, info: from the imported ``info.json`` (None / {} otherwise).
        camera_keys, video_keys, image_keys: feature keys of dtype video+image / video / image.
        total_frames, total_episodes: of the whole store.
        stats: ``{key: {"min", "max", "mean", "std", "count", ...}}`` as NumPy arrays — LeRobot's
            ``stats.json`` when imported, else computed once on first access
            (:meth:`ReplayBuffer.get_stats`: the statistics stored with the store, brought up to date).
    """

    def __init__(self, buffer: Any, fps: float | None, stats_from: Callable[[], dict]):
        attrs = buffer.store.get_attrs("data")
        source = attrs.get("source_attrs") or {}
        stored = float(attrs["fps"]) if attrs.get("fps") else None
        if fps is not None and stored is not None and float(fps) != stored:
            raise ValueError(f"fps={fps} differs from the store's own fps {stored:g} (its 'fps' attribute): the "
                             "store's frame rate is what its timestamps mean; leave fps= out (it is for stores "
                             "without one)")
        self.fps = stored if stored is not None else (float(fps) if fps is not None else None)
        self.robot_type = source.get("robot_type")
        self.info = dict(source.get("info") or {})
        self.tasks = {int(k): str(v) for k, v in (source.get("tasks") or {}).items()}
        key_attrs = attrs.get("key_attrs") or {}
        self.features: dict[str, dict] = {}
        frames = set(image_keys_of(buffer, buffer.keys()))
        for key in buffer.keys():
            arr = buffer[key]
            if key in key_attrs and "dtype" in key_attrs[key]:
                self.features[key] = dict(key_attrs[key])
            elif key in frames:
                self.features[key] = {"dtype": "image", "shape": list(arr.shape[1:]),
                                      "names": ["height", "width", "channel"]}
            else:
                kind = np.dtype(arr.dtype).kind
                dtype = "string" if kind in "OTUS" else str(np.dtype(arr.dtype))
                self.features[key] = {"dtype": dtype, "shape": list(arr.shape[1:]) or [1], "names": None}
        self.video_keys = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        self.image_keys = [k for k, f in self.features.items() if f.get("dtype") == "image"]
        self.camera_keys = self.video_keys + self.image_keys
        self.total_frames = int(buffer.n_steps)
        self.total_episodes = int(buffer.n_episodes)
        imported = source.get("stats")
        self._stats = ({k: {s: np.asarray(v) for s, v in d.items()} for k, d in imported.items()}
                       if imported else None)
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

    def __repr__(self) -> str:
        return (f"LeRobotMeta(fps={self.fps}, total_episodes={self.total_episodes}, "
                f"total_frames={self.total_frames}, features={list(self.features)})")


class LeRobotDataset(_BatchedDataset):
    """A drop-in for LeRobot's ``LeRobotDataset`` reading a replaybuf store (see the module docstring
    for the sample dict).

    ``DataLoader(ds, batch_size=..., collate_fn=collate)`` reads each batch with one
    ``sample_batch``; LeRobot's own training loop (torch's ``default_collate``) works too, at the
    cost of one copy per batch.

    Args:
        repo_id: the store's path when ``root`` is not given (no hub: nothing is downloaded); else
            kept as the dataset's name.
        root: the store's path.
        episodes: LeRobot episode indices to keep (the ``episode_index`` of an imported dataset,
            store episode numbers otherwise); None keeps all.
        image_transforms: callable applied to each camera key's float (C, H, W) / (n, C, H, W)
            tensor of every sample (e.g. torchvision v2 transforms), as LeRobot does.
        delta_timestamps: ``{key: [seconds, ...]}`` relative to the sample's frame.
        tolerance_s: how far a delta may be from a multiple of ``1 / fps``, seconds.
        revision, force_cache_sync, download_videos, video_backend: LeRobot's hub and video-decoding
            options, accepted so LeRobot training scripts run unchanged, and unused (the store is
            local and holds decoded frames).
        fps: the store's frame rate when it has no ``fps`` attribute (ValueError when it has another).

    Raises:
        TypeError: neither ``repo_id`` nor ``root``.
        ValueError: an unknown episode, a key of ``delta_timestamps`` not in the store, a delta not a
            multiple of ``1 / fps``, no fps known while ``delta_timestamps`` is given.
        Errors of ``ReplayBuffer.create_from_path`` for a missing or damaged store.
    """

    def __init__(self, repo_id: str | os.PathLike | None = None, root: str | os.PathLike | None = None,
                 episodes: Sequence[int] | None = None, image_transforms: Callable | None = None,
                 delta_timestamps: dict[str, Sequence[float]] | None = None, tolerance_s: float = 1e-4,
                 revision: str | None = None, force_cache_sync: bool = False, download_videos: bool = True,
                 video_backend: str | None = None, *, fps: float | None = None):
        path = root if root is not None else repo_id
        if path is None:
            raise TypeError("LeRobotDataset needs the store's path: repo_id=PATH or root=PATH")
        super().__init__(path, image_keys=None, channels_first=True, float_images=True)
        self.repo_id = str(repo_id if repo_id is not None else root)
        self.root = os.fspath(path)
        self.image_transforms = image_transforms
        self.delta_timestamps = None if delta_timestamps is None else dict(delta_timestamps)
        self.tolerance_s = tolerance_s
        self.episodes = None if episodes is None else _episode_list(episodes)
        buffer = self._open_buffer()
        try:
            self.meta = LeRobotMeta(buffer, fps, self._compute_stats)
            numbers = _store_episode_numbers(buffer)
            self._episode_numbers = numbers
            self._episode_mask = None
            if self.episodes is not None:
                unknown = sorted(set(self.episodes) - set(numbers.tolist()))
                if unknown:
                    have = (f"its episode_index values run {numbers.min()}..{numbers.max()}" if numbers.size
                            else "it has no episodes")
                    raise ValueError(f"episodes {unknown[:10]} are not in {self.root} ({have})")
                self._episode_mask = np.isin(numbers, self.episodes)
            self.delta_indices: dict[str, list[int]] | None = None
            if self.delta_timestamps is not None:
                missing = [k for k in self.delta_timestamps if k not in buffer]
                if missing:
                    raise ValueError(f"delta_timestamps keys {missing} are not in {self.root} "
                                     f"(keys: {list(buffer.keys())})")
                if self.meta.fps is None:
                    raise ValueError(f"delta_timestamps needs the fps: {self.root} has no 'fps' attribute, pass fps=")
                steps = delta_timestamps_to_steps(self.delta_timestamps, self.meta.fps, tolerance_s)
                self.delta_indices = {k: v.tolist() for k, v in steps.items()}
            if "timestamp" not in buffer and self.meta.fps is None:
                raise ValueError(f"{self.root} has neither a 'timestamp' key nor an 'fps' attribute: pass fps= "
                                 "(its frame rate) so samples get LeRobot's timestamp = frame_index / fps")
            ep_tasks = _episode_tasks(buffer)
            self._tasks_by_episode = None if ep_tasks is None else [t[0] if t else "" for t in ep_tasks]
            self.image_keys = [k for k in self.meta.camera_keys if k in buffer] or image_keys_of(buffer, buffer.keys())
            sampler = self._build(buffer, None)
            self._len, self._window_index = len(sampler), sampler.window_index
        finally:
            buffer.close()

    def _build(self, buffer: Any, window_index: Any) -> WindowSampler:
        return WindowSampler(buffer, self.delta_indices or {}, keys=list(buffer.keys()),
                             episode_mask=self._episode_mask, window_index=window_index, dtypes="stored")

    def _compute_stats(self) -> dict:
        return self.sampler.buffer.get_stats()

    # ------------------------------------------------------------------ LeRobot's properties
    @property
    def fps(self) -> float | None:
        """Frames per second."""
        return self.meta.fps

    @property
    def features(self) -> dict[str, dict]:
        """LeRobot's feature table ``{key: {"dtype", "shape", "names"}}`` (see :class:`LeRobotMeta`)."""
        return self.meta.features

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """Normalisation statistics (see :attr:`LeRobotMeta.stats`)."""
        return self.meta.stats

    @property
    def episode_data_index(self) -> dict[str, torch.Tensor]:
        """LeRobot v2's ``{"from": ..., "to": ...}``: int64 tensors (chosen episodes,) of each chosen
        episode's first and one-past-last sample number in this dataset."""
        counts = torch.from_numpy(self._window_index.window_counts[self._window_index.window_counts > 0])
        to = torch.cumsum(counts, 0)
        return {"from": to - counts, "to": to}

    @property
    def num_frames(self) -> int:
        """Frames of the chosen episodes."""
        return len(self)

    @property
    def num_episodes(self) -> int:
        """Episodes chosen."""
        return len(self.episodes) if self.episodes is not None else self.meta.total_episodes

    # ------------------------------------------------------------------ samples
    def _samples(self, idx: np.ndarray) -> dict[str, Any]:
        sampler = self.sampler
        arrays = sampler.sample_batch(idx)
        where = sampler.locate(idx)
        if "index" not in arrays:
            arrays["index"] = where["index"]
        if "episode_index" not in arrays:
            arrays["episode_index"] = self._episode_numbers[where["episode_index"]]
        if "frame_index" not in arrays:
            arrays["frame_index"] = where["frame_index"]
        if "timestamp" not in arrays:
            arrays["timestamp"] = (where["frame_index"] / self.meta.fps).astype(np.float32)
        convert_images(arrays, self.image_keys, channels_first=True, to_float=True)
        if "task_index" in arrays and self.meta.tasks:
            task_index = arrays["task_index"]
            if task_index.ndim > 1:  # stacked by delta_timestamps: the task is the anchor frame's
                task_index = sampler.buffer.read_rows("task_index", where["index"])
            task = [self.meta.tasks.get(int(t), "") for t in np.ravel(task_index)]
        elif self._tasks_by_episode is not None:
            task = [self._tasks_by_episode[e] for e in where["episode_index"]]
        else:
            task = [""] * len(idx)
        data = to_torch(arrays)
        if self.image_transforms is not None:
            for cam in self.image_keys:
                data[cam] = torch.stack([self.image_transforms(x) for x in data[cam]])
        data["task"] = task
        return data

    def __getitem__(self, idx: int) -> dict[str, Any]:
        """Sample ``idx`` (see the module docstring); IndexError out of range."""
        if isinstance(idx, (bool, np.bool_)) or not isinstance(idx, (int, np.integer)):
            raise TypeError(f"sample index must be an int, got {type(idx).__name__}")
        return Batch(self._samples(np.asarray([idx])), 1)[0]

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        """Samples ``indices`` from one ``sample_batch``, as a :class:`Batch`."""
        idx = self.sampler.window_index.normalize(list(indices))
        return Batch(self._samples(idx), len(idx))

    def __repr__(self) -> str:
        return (f"LeRobotDataset({self.root!r}, episodes={self.num_episodes}, frames={self.num_frames}, "
                f"delta_timestamps={self.delta_timestamps})")
