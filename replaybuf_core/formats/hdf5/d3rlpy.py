"""The ``d3rlpy`` import format: dataset files of d3rlpy's ``MDPDataset.dump`` / ``ReplayBuffer.dump``.

Two layouts (d3rlpy's ``dataset/io.py``):

* **v1** (d3rlpy < 2, and D4RL-style files): flat datasets ``observations``, ``actions``,
  ``rewards``, ``terminals``, optional ``episode_terminals`` (D4RL: ``timeouts``), ``discrete_action``;
  every dataset of ``N`` rows (groups such as D4RL's ``infos/qpos`` flattened to ``infos.qpos``) is
  a key, scalars go to the attributes, anything else is refused.  Episodes are split as d3rlpy's
  ``load_v1`` splits them: an episode ends at every step whose ``terminals`` or
  ``episode_terminals`` (or ``timeouts``) flag is set.
  The steps after the last flag, which d3rlpy drops, are left out too — and reported (count and
  rows), never silently.
* **v2** (``version`` "2.x"): ``columns`` (names), ``num_episodes``, and per episode ``<column>_<i>``
  datasets, or ``<column>_<i>_<j>`` for tuple observations (imported as keys ``<column>.<j>``).
  Per-episode scalars (``terminated``) go to ``meta/episode.<column>``.

Every dataset is read as stored (dtype and byte order); scalars such as ``version`` and
``discrete_action`` go to the attributes.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from replaybuf_core.source import FormatEntrypoint, KeySpec, Source

from .common import attrs_of, datasets, is_hdf5, jsonable, key_of, member_names, open_file, read
from .episodes import _kind


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class D3rlpySource(Source):
    """A d3rlpy dataset file (see the module docstring).

    Raises:
        FileNotFoundError, ValueError (neither layout; datasets of different lengths, a missing
        ``<column>_<i>``, named), ImportError (h5py).
    """

    format_name = "d3rlpy"

    def __init__(self, path):
        super().__init__(os.path.abspath(os.path.expanduser(os.fspath(path))))
        self.file = f = open_file(self.path)
        self.attrs = {"file": attrs_of(f)}
        if "columns" in f and "num_episodes" in f:
            self._init_v2(f)
        elif "observations" in f and "actions" in f:
            self._init_v1(f)
        else:
            f.close()
            raise ValueError(f"{self.path}: not a d3rlpy dataset (neither columns/num_episodes nor "
                             "observations/actions)")

    # ------------------------------------------------------------------------------------ v1
    def _init_v1(self, f) -> None:
        self.layout = "v1"
        if "terminals" not in f:
            raise ValueError(f"{self.path}: a d3rlpy v1 file needs a 'terminals' dataset (episodes end at its flags)")
        n = f["observations"].shape[0]
        steps = {}
        for path, ds in datasets(f).items():
            if ds.shape is None:
                raise ValueError(f"{self.path}: dataset {path} has no data (a null dataspace)")
            if ds.shape and ds.shape[0] == n:
                steps[path] = ds
            elif ds.shape == ():
                self.attrs[path] = jsonable(ds[()])
            else:
                raise ValueError(f"{self.path}: dataset {path} has shape {ds.shape}, neither {n} rows (a step "
                                 "dataset) nor a scalar")
        flags = self._flags("terminals", read(f["terminals"], self.path), n)
        for name in ("episode_terminals", "timeouts"):  # d3rlpy's, and D4RL's time limits
            if name in steps:
                flags = flags | self._flags(name, read(steps[name], self.path), n)
        ends = np.flatnonzero(flags) + 1
        self._v1 = {key_of(p): read(ds, self.path) for p, ds in steps.items()}
        self._starts = np.concatenate([[0], ends[:-1]]).astype(np.int64) if len(ends) else np.zeros(0, np.int64)
        self.episode_lengths = (ends - self._starts).astype(np.int64)
        rest = n - (int(ends[-1]) if len(ends) else 0)
        if rest:
            first = int(ends[-1]) if len(ends) else 0
            self.notes.append(f"the last {rest} step(s) (rows {first}..{n - 1}) follow the last terminal flag: "
                              "d3rlpy drops them, and so does this import")
            self.skipped.append({"episode": "after the last flag", "reason": f"{rest} steps (rows {first}..{n - 1}) "
                                 "with no terminal flag"})
        for (p, _), (k, a) in zip(steps.items(), self._v1.items()):
            self.keys[k] = KeySpec(a.dtype, a.shape[1:], _kind(a.dtype, a.shape[1:]), {"source_path": p})
        self.attrs["layout"] = "v1"

    # ------------------------------------------------------------------------------------ v2
    def _flags(self, name: str, values: np.ndarray, n: int) -> np.ndarray:
        """Episode-end flags of dataset ``name`` (its first column): any value other than 0 ends an
        episode; a NaN or infinite flag is refused by row (``astype(bool)`` would read NaN as an end)."""
        col = np.asarray(values).reshape(n, -1)[:, 0]
        if col.dtype.kind in "fc":
            bad = np.flatnonzero(~np.isfinite(col))
            if bad.size:
                raise ValueError(f"{self.path}: dataset {name} holds {col[bad[0]]} at row {int(bad[0])} "
                                 f"({bad.size} such rows): an episode-end flag must be 0 or 1")
        return col != 0

    def _init_v2(self, f) -> None:
        self.layout = "v2"
        columns = [_text(c) for c in f["columns"][()]]
        n_ep = int(f["num_episodes"][()])
        self.attrs.update(layout="v2", version=_text(f["version"][()]) if "version" in f else None,
                          columns=columns)
        self._v2: list[dict[str, str]] = []  # per episode: key -> dataset name
        lengths, scalars = [], {}
        for i in range(n_ep):
            names: dict[str, str] = {}
            for c in columns:
                if f"{c}_{i}" in f:
                    names[c] = f"{c}_{i}"
                else:
                    j = 0
                    while f"{c}_{i}_{j}" in f:
                        names[f"{c}.{j}"] = f"{c}_{i}_{j}"
                        j += 1
                    if j == 0:
                        raise ValueError(f"{self.path}: episode {i} has no dataset {c}_{i} (nor {c}_{i}_0)")
            self._v2.append(names)
            step = {k: f[d] for k, d in names.items() if f[d].shape}
            t = {k: ds.shape[0] for k, ds in step.items()}
            if len(set(t.values())) > 1:
                raise ValueError(f"{self.path}: episode {i}'s datasets differ in length: "
                                 + ", ".join(f"{names[k]} {n}" for k, n in t.items()))
            lengths.append(next(iter(t.values()), 0))
            for k in names:
                if f[names[k]].shape == ():
                    scalars.setdefault(k, set()).add(i)
        past = [d for c in columns for d in (f"{c}_{n_ep}", f"{c}_{n_ep}_0") if d in f]
        if past:
            raise ValueError(f"{self.path}: num_episodes is {n_ep} but dataset {past[0]} holds an episode past it "
                             "(num_episodes too small: importing would drop episodes)")
        self.episode_lengths = np.array(lengths, dtype=np.int64)
        self._scalars = sorted(scalars)
        first = self._v2[0] if self._v2 else {}
        for k, d in first.items():
            if k in scalars:
                continue
            ds = f[d]
            for i, names in enumerate(self._v2):
                other = f[names[k]]
                if other.dtype != ds.dtype or other.shape[1:] != ds.shape[1:]:
                    raise ValueError(f"{self.path}: {names[k]} is {other.dtype} {other.shape[1:]} per step, "
                                     f"{d} is {ds.dtype} {ds.shape[1:]}")
            self.keys[k] = KeySpec(ds.dtype, ds.shape[1:], _kind(ds.dtype, tuple(ds.shape[1:])), {"source_path": d})

    # ------------------------------------------------------------------------------------ reading
    def read_episode(self, index: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        if not 0 <= index < self.n_episodes:
            raise IndexError(f"episode {index} out of range: {self.path} has {self.n_episodes} episodes")
        keys = list(keys or self.keys)
        if self.layout == "v1":
            s = int(self._starts[index])
            e = s + int(self.episode_lengths[index])
            return {k: self._v1[k][s:e] for k in keys}
        return {k: read(self.file[self._v2[index][k]], self.path) for k in keys}

    def episode_meta(self, indices: list[int]) -> dict[str, np.ndarray]:
        if self.layout != "v2":
            return {}
        return {f"episode.{k}": np.stack([np.asarray(read(self.file[self._v2[i][k]], self.path)) for i in indices])
                for k in self._scalars}

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class D3rlpyFormat(FormatEntrypoint):
    """``d3rlpy``: an HDF5 file of d3rlpy's v1 or v2 dataset layout."""

    name = "d3rlpy"
    description = "d3rlpy dataset file (v1: observations/actions/terminals; v2: columns + <column>_<i>)"
    requires = "hdf5"

    def might_open(self, path) -> bool:
        return is_hdf5(path)

    def guess_can_open(self, path) -> bool:
        keys = set(member_names(path) or ())
        return {"columns", "num_episodes"} <= keys or ({"observations", "actions", "terminals"} <= keys
                                                       and not any(re.match(r"^(demo|traj|episode)_\d+$", k)
                                                                   for k in keys))

    def open(self, path, **options: Any) -> D3rlpySource:
        if options:
            raise TypeError(f"the d3rlpy format takes no options, got {sorted(options)}")
        return D3rlpySource(path)
