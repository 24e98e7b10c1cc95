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
  frame_index / fps``).  Once the store was edited (a delete, keep, trim, drop or pop: its commit
  generation is past 0), ``index`` is the store's row and ``frame_index`` the frame's place in its
  episode (LeRobot's numbering of the edited dataset), and ``timestamp`` counts from the episode's
  first kept frame — the stored columns would still count the frames that are gone;
* ``task``: the text of ``task_index`` (or the episode's first task, or ``""``).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np
import torch

from replaybuf_core.sampling.window_sampler import WindowSampler, delta_timestamps_to_steps
from replaybuf_core.torch.batch import Batch, to_torch
from replaybuf_core.torch.images import sample_converted
from replaybuf_core.torch.datasets import _BatchedDataset, image_keys_of
from replaybuf_core.torch.lerobot_meta import (EpisodeTable, LeRobotMeta, _episode_tasks, _store_episode_numbers,
                                               edited_since_import, episode_first_timestamps, renumbered)

__all__ = ["LeRobotDataset", "LeRobotMeta", "EpisodeTable"]

_BOOKKEEPING = ("index", "episode_index", "frame_index", "timestamp", "task_index")

#: LeRobotDataset members that record into a LeRobot dataset or reach its hub
_UNSUPPORTED = {
    "add_frame": "it records into a LeRobot dataset (replaybuf: ReplayBuffer.writer())",
    "save_episode": "it records into a LeRobot dataset (replaybuf: ReplayBuffer.writer())",
    "clear_episode_buffer": "it records into a LeRobot dataset", "finalize": "it closes LeRobot's writers",
    "create": "it creates a LeRobot dataset (replaybuf: ReplayBuffer.create_empty)",
    "push_to_hub": "there is no hub: the store is local", "pull_from_repo": "there is no hub: the store is local",
    "start_image_writer": "it records into a LeRobot dataset", "stop_image_writer": "it records into a LeRobot dataset",
    "encode_episode_videos": "the store holds frames, not LeRobot's videos",
    "episode_filter": "not in this version: pass episodes=[...]",
}


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
        resize, crop: camera frames at reduced resolution, made smaller where it is cheapest (not a
            LeRobot argument: :class:`~replaybuf_core.sampling.WindowSampler`'s ``resize``/``crop``).

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
                 video_backend: str | None = None, return_uint8: bool = False, *, fps: float | None = None,
                 resize: Any = None, crop: Any = None):
        path = root if root is not None else repo_id
        if path is None:
            raise TypeError("LeRobotDataset needs the store's path: repo_id=PATH or root=PATH")
        super().__init__(path, image_keys=None, channels_first=True, float_images=not return_uint8)
        self.return_uint8 = bool(return_uint8)
        self.resize, self.crop = resize, crop
        self.repo_id = str(repo_id if repo_id is not None else root)
        self.root = os.fspath(path)
        self.image_transforms = image_transforms
        self.delta_timestamps = None if delta_timestamps is None else dict(delta_timestamps)
        self.tolerance_s = tolerance_s
        self.episodes = None if episodes is None else _episode_list(episodes)
        buffer = self._open_buffer()
        try:
            self.meta = LeRobotMeta(buffer, fps, self._compute_stats, repo_id=self.repo_id, root=self.root)
            numbers = _store_episode_numbers(buffer)
            self._episode_numbers = numbers
            self._renumbered = renumbered(buffer)  # a merge: the stored episode_index/index columns repeat
            # an edit: the stored index/frame_index/timestamp columns count deleted or trimmed frames
            self._edited = edited_since_import(buffer)
            self._first_timestamps = episode_first_timestamps(buffer) if self._edited else None
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
            for key, fr in sampler.resize.items():  # features give the shapes samples have (C, H, W)
                feature = self.meta.features.get(key)
                if feature is not None and len(feature.get("shape", ())) == 3:
                    shape = tuple(feature["shape"])
                    chw = shape[0] in (1, 3, 4) and shape[-1] not in (1, 3, 4)
                    feature["shape"] = (shape[0], fr.height, fr.width) if chw else (fr.height, fr.width, shape[2])
        finally:
            buffer.close()

    def _build(self, buffer: Any, window_index: Any) -> WindowSampler:
        keys = [k for k in self.meta.features if k in buffer]  # info.json's order, as LeRobot's samples
        return WindowSampler(buffer, self.delta_indices or {}, keys=keys, episode_mask=self._episode_mask,
                             window_index=window_index, dtypes="stored", resize=self.resize, crop=self.crop)

    def _compute_stats(self) -> dict:
        return self.sampler.buffer.get_stats()

    # ------------------------------------------------------------------ LeRobot's properties
    @property
    def fps(self) -> int | float | None:
        """Frames per second (an int when whole, as LeRobot's)."""
        return self.meta.fps

    @property
    def camera_keys(self) -> list[str]:
        return self.meta.camera_keys

    @property
    def video_frame_keys(self) -> list[str]:
        return self.meta.video_keys

    def set_image_transforms(self, image_transforms: Callable | None) -> None:
        """Replace the transform applied to each camera tensor of every sample (None: none).
        Raises TypeError for something not callable."""
        if image_transforms is not None and not callable(image_transforms):
            raise TypeError(f"image_transforms must be callable or None, got {type(image_transforms).__name__}")
        self.image_transforms = image_transforms

    def clear_image_transforms(self) -> None:
        """Remove the image transform."""
        self.image_transforms = None

    def get_raw_item(self, idx: int) -> dict[str, Any]:
        """Frame ``idx`` of this dataset as stored: every key at that one frame (no
        ``delta_timestamps``, no conversion or transform of camera frames: uint8 (H, W, C)), as
        tensors (strings as they are) — LeRobot's raw row (``hf_dataset[idx]``), with the frames.

        Raises IndexError out of range, TypeError for a non-int."""
        if isinstance(idx, (bool, np.bool_)) or not isinstance(idx, (int, np.integer)):
            raise TypeError(f"sample index must be an int, got {type(idx).__name__}")
        where = self.sampler.locate(self.sampler.window_index.normalize([idx]))
        row = int(where["index"][0])
        buffer = self.sampler.buffer
        return to_torch({k: buffer.read_rows(k, [row], dtypes="stored")[0] for k in self.meta.features})

    def select_columns(self, column_names: str | Sequence[str]) -> dict[str, torch.Tensor]:
        """Whole columns of the chosen episodes: ``{key: tensor (num_frames, ...)}`` for each name
        (LeRobot returns a ``datasets.Dataset`` of them; here the arrays themselves — e.g. all actions
        for a replay).  Raises KeyError naming an unknown column."""
        names = [column_names] if isinstance(column_names, str) else list(column_names)
        unknown = [n for n in names if n not in self.meta.features]
        if unknown:
            raise KeyError(f"select_columns: {unknown} are not columns of {self.root} (columns: {list(self.meta.features)})")
        rows = self.sampler.locate(np.arange(len(self)))["index"]
        buffer = self.sampler.buffer
        return to_torch({n: buffer.read_rows(n, rows, dtypes="stored") for n in names})

    @property
    def hf_dataset(self) -> Any:
        """LeRobot's ``hf_dataset``: the non-camera columns of the chosen episodes as a Hugging Face
        ``datasets.Dataset`` (built on first use, in memory).  Raises ImportError naming the
        ``datasets`` package when it is not installed."""
        if getattr(self, "_hf_dataset", None) is None:
            try:
                import datasets
            except ImportError as exc:
                raise ImportError("LeRobotDataset.hf_dataset needs the Hugging Face 'datasets' package "
                                  "(pip install datasets); select_columns and get_raw_item work without it") from exc
            columns = [k for k in self.meta.features if k not in self.meta.camera_keys]
            data = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in self.select_columns(columns).items()}
            self._hf_dataset = datasets.Dataset.from_dict({k: list(v) for k, v in data.items()})
        return self._hf_dataset

    def __getattr__(self, name: str) -> Any:
        if name in _UNSUPPORTED:
            raise NotImplementedError(f"LeRobotDataset.{name} is not supported by replaybuf's LeRobotDataset: "
                                      f"{_UNSUPPORTED[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
        arrays = sample_converted(sampler, idx, self.image_keys, channels_first=True, to_float=not self.return_uint8,
                                  shared=torch.utils.data.get_worker_info() is not None)  # a worker's batch: shared memory
        where = sampler.locate(idx)
        renumber = getattr(self, "_renumbered", False)
        edited = getattr(self, "_edited", False)
        if "index" not in arrays or renumber or edited:
            arrays["index"] = where["index"]
        if "episode_index" not in arrays or renumber:
            arrays["episode_index"] = self._episode_numbers[where["episode_index"]]
        if "frame_index" not in arrays or edited:
            arrays["frame_index"] = where["frame_index"]
        if "timestamp" not in arrays:
            arrays["timestamp"] = (where["frame_index"] / self.meta.fps).astype(np.float32)
        elif edited and self._first_timestamps is not None:  # counted from the episode's first kept frame
            ts = np.asarray(arrays["timestamp"], dtype=np.float64)
            origin = self._first_timestamps[where["episode_index"]]
            arrays["timestamp"] = (ts - origin.reshape(origin.shape + (1,) * (ts.ndim - 1))).astype(np.float32)
        if "task_index" in arrays and self.meta.total_tasks:
            task_index = arrays["task_index"]
            if task_index.ndim > 1:  # stacked by delta_timestamps: the task is the anchor frame's
                task_index = sampler.buffer.read_rows("task_index", where["index"])
            task = [self.meta.task_text(t) for t in np.ravel(task_index)]
        elif self._tasks_by_episode is not None:
            task = [self._tasks_by_episode[e] for e in where["episode_index"]]
        else:
            task = [""] * len(idx)
        first = [k for k in self.meta.features if k in arrays] + [k for k in _BOOKKEEPING if k in arrays]
        arrays = {**{k: arrays[k] for k in first}, **arrays}  # LeRobot's order: the features, then the pads
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
        return {k: v[0] if isinstance(v, (torch.Tensor, np.ndarray, list)) else v
                for k, v in self._samples(np.asarray([idx])).items()}  # plain tensors (no batch rows)

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        """Samples ``indices`` from one ``sample_batch``, as a :class:`Batch`."""
        idx = self.sampler.window_index.normalize(list(indices))
        return Batch(self._samples(idx), len(idx))

    def __repr__(self) -> str:
        return (f"LeRobotDataset({self.root!r}, episodes={self.num_episodes}, frames={self.num_frames}, "
                f"delta_timestamps={self.delta_timestamps})")
