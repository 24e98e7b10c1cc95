"""The ``robomimic`` import format: robomimic HDF5 datasets (and the files Isaac Lab, MimicGen and
robosuite tools write in its layout).

Layout (robomimic's ``docs/datasets/overview``): ``data`` group with attributes ``total`` and
``env_args`` (JSON); ``data/demo_N`` groups with attribute ``num_samples`` (and ``model_file``,
``success``...) holding ``actions``, ``rewards``, ``dones``, ``states`` (or nested ``states/...``),
``obs/<k>``, ``next_obs/<k>``, optional ``actions_abs``, ``action_dict/<k>``; root ``mask/<filter>``
datasets list demo names (bytes) — robomimic's filter keys (``train``, ``valid``, ...); a demo named
twice in one is noted (the mask marks it once).

Demos are imported in robomimic's order, by number (``demo_10`` after ``demo_9``; gaps are fine);
each episode's source name is in ``meta/episode_attrs``.  Filter keys become boolean per-episode
masks ``meta/mask.<filter>``, usable as the sampler's ``episode_mask``.  ``next_obs`` is kept by
default; ``drop_next_obs=True`` drops it after checking, episode by episode, that ``next_obs[t]``
equals ``obs[t + 1]`` bit for bit for every ``t < T - 1`` (a mismatch is an error naming the key,
episode and row).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from replaybuf_core.source import FormatEntrypoint

from .common import attrs_of, is_hdf5, maybe_json, member_names, natural_key, read
from .episodes import EpisodeGroupsSource, add_missing_keys_argument

DEMO = re.compile(r"^demo_(\d+)$")


class RobomimicSource(EpisodeGroupsSource):
    """A robomimic HDF5 file (see the module docstring).

    Args:
        path: the ``.hdf5`` file.
        drop_next_obs: leave ``next_obs/*`` out after checking it equals ``obs`` shifted by one.
        missing_keys: ``"error"`` (default) or ``"drop"`` keys that only some demos hold.

    Raises:
        FileNotFoundError, ValueError (not robomimic: no ``data`` group or no ``demo_N``; two demos of
            one number such as ``demo_1`` and ``demo_01``; a demo
        without ``actions`` or ``num_samples``; a mask naming a missing demo), ImportError (h5py).
    """

    format_name = "robomimic"

    def __init__(self, path, *, drop_next_obs: bool = False, missing_keys: str = "error"):
        super().__init__(path, missing_keys)
        f = self._open()
        if "data" not in f or not hasattr(f["data"], "keys"):
            raise ValueError(f"{self.path}: not a robomimic file (no 'data' group)")
        data = f["data"]
        names = sorted((n for n in data.keys() if DEMO.match(n)), key=natural_key)
        if not names:
            raise ValueError(f"{self.path}: no data/demo_N groups")
        by_number: dict[int, str] = {}
        for n in names:  # demo_1 and demo_01 would both be demo 1: their order (and masks) ambiguous
            k = int(DEMO.match(n).group(1))
            if k in by_number:
                raise ValueError(f"{self.path}: data/{by_number[k]} and data/{n} are both demo number {k}; "
                                 "rename one (robomimic orders and masks demos by that number)")
            by_number[k] = n
        others = [n for n in data.keys() if not DEMO.match(n)]
        if others:
            self.notes.append(f"data/ also holds {others[:5]}, which are not demo_N groups; left out")
        episodes = []
        for n in names:
            g = data[n]
            if "num_samples" in g.attrs:
                t = int(g.attrs["num_samples"])
            elif "actions" in g:
                t = int(g["actions"].shape[0])
            else:
                raise ValueError(f"{self.path}: data/{n} has neither a num_samples attribute nor actions")
            episodes.append((n, g, t))
        self._scan(episodes, allow_final=False)
        self.drop_next_obs = bool(drop_next_obs)
        self._next_pairs = {}
        if self.drop_next_obs:
            for key in [k for k in self.keys if k.startswith("next_obs.")]:
                obs = "obs." + key[len("next_obs."):]
                if obs not in self.keys:
                    raise ValueError(f"{self.path}: drop_next_obs: {key} has no {obs} to be checked against")
                self._next_pairs[key] = obs
                del self.keys[key]
            if self._next_pairs:
                self.notes.append(f"next_obs left out (drop_next_obs): {', '.join(self._next_pairs)} equal obs shifted "
                                  "by one step in every demo (checked); the row after each demo's last step is "
                                  "kept in meta/final.next_obs.*")
        self.attrs = {"data": {k: maybe_json(v) for k, v in attrs_of(data).items()}, "file": attrs_of(f)}
        self._masks = {}
        if "mask" in f:
            position = {n: i for i, n in enumerate(names)}
            for filt, ds in f["mask"].items():
                if not hasattr(ds, "dtype"):
                    raise ValueError(f"{self.path}: mask/{filt} is a group; filter keys are datasets of demo names")
                demos = [d.decode() if isinstance(d, bytes) else str(d) for d in read(ds, f"{self.path}: mask/{filt}")]
                unknown = [d for d in demos if d not in position]
                if unknown:
                    raise ValueError(f"{self.path}: mask/{filt} names demos that do not exist: {unknown[:5]}")
                twice = sorted((d for d, k in Counter(demos).items() if k > 1), key=natural_key)
                if twice:
                    self.notes.append(f"mask/{filt} names {twice[:5]}{' ...' if len(twice) > 5 else ''} more than once "
                                      f"({len(demos)} entries, {len(set(demos))} demos): robomimic's loader lists such a "
                                      f"demo once per entry; meta/mask.{filt} (one bool a demo) marks it once")
                m = np.zeros(len(names), dtype=bool)
                m[[position[d] for d in demos]] = True
                self._masks[filt] = m
            self.attrs["masks"] = {k: int(v.sum()) for k, v in self._masks.items()}

    def iter_parts(self, index: int, keys: list[str], max_rows: int) -> Iterator[dict[str, np.ndarray]]:
        episode = self.read_episode(index, keys)
        if self._next_pairs:
            self._check_next_obs(index)
        n = int(self.episode_lengths[index])
        for start in range(0, n, max(1, int(max_rows))):
            yield {k: v[start:start + max_rows] for k, v in episode.items()}

    def _check_next_obs(self, index: int) -> None:
        name, group, t = self._episodes[index]
        for nxt, obs in self._next_pairs.items():
            a = read(group[self._paths[nxt][1]], f"{self.path}: {name}")
            b = self._read_key(index, obs)
            if t > 1:
                x, y = a[:t - 1], b[1:t]
                if x.dtype == object or y.dtype == object:
                    same = np.array([np.array_equal(u, v) for u, v in zip(x, y)], dtype=bool)
                else:
                    same = (np.ascontiguousarray(x).view(np.uint8).reshape(t - 1, -1) ==
                            np.ascontiguousarray(y).view(np.uint8).reshape(t - 1, -1)).all(axis=1)
                if not same.all():
                    row = int(np.flatnonzero(~same)[0])
                    raise ValueError(f"{self.path}: drop_next_obs: {name}: next_obs/{nxt[len('next_obs.'):]} row {row} "
                                     f"differs from obs row {row + 1}: it is not obs shifted by one; import without "
                                     "drop_next_obs (--drop-next-obs) to keep it")

    def episode_meta(self, indices: list[int]) -> dict[str, np.ndarray]:
        out = super().episode_meta(indices)
        for nxt in self._next_pairs:  # the observation after each demo's last step
            rows = [self._episodes[i][1][self._paths[nxt][1]][self._episodes[i][2] - 1] for i in indices]
            out[f"final.{nxt}"] = np.stack(rows) if rows and not isinstance(rows[0], (bytes, str)) else \
                np.array([r.decode() if isinstance(r, bytes) else r for r in rows], dtype=object)
        for filt, m in self._masks.items():
            out[f"mask.{filt}"] = m[list(indices)]
        return out

    def episode_id(self, index: int) -> int:
        return int(DEMO.match(self._episodes[index][0]).group(1))


class RobomimicFormat(FormatEntrypoint):
    """``robomimic``: an HDF5 file with ``data/demo_N`` groups."""

    name = "robomimic"
    description = "robomimic HDF5 (data/demo_N groups; obs/, next_obs/, states, mask/ filter keys)"
    requires = "hdf5"

    def might_open(self, path) -> bool:
        return is_hdf5(path)

    def guess_can_open(self, path) -> bool:
        names = member_names(path, "data")
        return bool(names) and any(DEMO.match(n) for n in names)

    def open(self, path, **options: Any) -> RobomimicSource:
        return RobomimicSource(path, **options)

    def add_arguments(self, group) -> list[str]:
        group.add_argument("--drop-next-obs", dest="drop_next_obs", action="store_true", default=None,
                           help="robomimic: leave next_obs out after checking it equals obs shifted by one")
        return ["drop_next_obs", add_missing_keys_argument(group)]
