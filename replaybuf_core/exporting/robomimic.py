"""The ``robomimic`` export format: a robomimic HDF5 file.

Layout (robomimic's ``docs/datasets/overview.md``): group ``data`` with attributes ``total`` (steps)
and ``env_args`` (a JSON string); one group ``data/demo_N`` an episode with attribute
``num_samples`` (its steps) holding ``actions`` and the other per-step datasets (``obs/<k>``,
``next_obs/<k>``, ``rewards``, ``dones``, ``states``...); ``mask/<filter>`` datasets listing demo
names (bytes) — robomimic's filter keys.

Where things come from: each key goes to the HDF5 path a robomimic import recorded for it (the data
attribute ``key_attrs[key].source_path``), else to its exported name with ``.`` read as ``/``
(``obs.agentview_image`` → ``obs/agentview_image``); ``--rename action=actions`` maps other stores'
names.  Demo names and attributes (``success``...) are the ones an import kept in
``meta/episode_attrs`` when they are ``demo_N`` names, unique among the exported episodes, else
``demo_<j>`` in export order; ``num_samples`` is always the exported length.  ``meta/episode.<path>``
arrays (one row an episode: robomimic's ``initial_state``...) go back to ``demo_N/<path>``;
``meta/mask.<filter>`` (bool an episode) to ``mask/<filter>``; ``env_args`` is the ``env_args``
option, else the source's.  Datasets of 256 KiB and more (camera frames) are gzip-compressed (level 4, readable by any HDF5
reader); smaller ones are stored plain, as robomimic's own files are.

Verification reopens the file with h5py and compares every dataset with the store bit for bit,
``num_samples``, ``total`` and the masks.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core.export_format import ExportFormat, ExportPlan

__all__ = ["RobomimicExport"]

DEMO = re.compile(r"^demo_(\d+)$")
#: datasets of at least this many bytes (camera frames) are gzip-compressed; smaller ones are stored
#: plain, as robomimic's own files are (chunking overhead outweighs the saving)
GZIP_FROM = 256 * 1024


def _h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover - the hdf5 extra installs it
        raise ImportError("the robomimic export writes HDF5 with h5py: pip install 'replaybuf[hdf5]'") from None
    return h5py


class RobomimicExport(ExportFormat):
    """``robomimic``: ``data/demo_N/{actions, obs/*, ...}`` in one HDF5 file (see the module docstring).

    Option ``env_args``: the ``data`` group's ``env_args`` (a JSON string or a dict); default the
    source's (a robomimic import keeps it), else none (robomimic's training scripts need one).
    """

    name = "robomimic"
    description = "robomimic HDF5 (data/demo_N with actions, obs/..., num_samples; mask/ filter keys)"
    requires = "hdf5"

    def add_arguments(self, group) -> list[str]:
        group.add_argument("--env-args", dest="env_args", default=None, metavar="JSON",
                           help="robomimic: the data group's env_args (default: the source's)")
        return ["env_args"]

    # ------------------------------------------------------------------------------ the plan
    def _paths(self, plan: ExportPlan) -> dict[str, str]:
        """store key → HDF5 path inside each demo group."""
        kept = plan.data_attrs().get("key_attrs") or {}
        out = {}
        for key, name in plan.names.items():
            src = (kept.get(key) or {}).get("source_path") if name == key else None
            out[key] = str(src) if src else name.replace(".", "/")
        return out

    def _demo_names(self, plan: ExportPlan) -> list[str]:
        names = [self._episode_attrs(plan, i).get("name") for i in plan.episodes]
        if all(isinstance(n, str) and DEMO.match(n) for n in names) and len(set(names)) == len(names):
            return list(names)
        return [f"demo_{j}" for j in range(len(plan.episodes))]

    def _episode_attrs(self, plan: ExportPlan, i: int) -> dict[str, Any]:
        if not plan.rb.store.has_array("meta", "episode_attrs"):
            return {}
        raw = plan.rb.store.read("meta", "episode_attrs", i, i + 1)[0]
        try:
            value = json.loads(raw) if isinstance(raw, (str, bytes)) else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def _per_episode(self, plan: ExportPlan, prefix: str) -> list[str]:
        store = plan.rb.store
        return [m for m in store.list_arrays("meta")
                if m.startswith(prefix) and store.shape("meta", m)[:1] == (plan.rb.n_episodes,)]

    def _env_args(self, plan: ExportPlan) -> str | None:
        value = plan.options.get("env_args")
        if value is None:
            value = ((plan.data_attrs().get("source_attrs") or {}).get("data") or {}).get("env_args")
        if value is None:
            return None
        if isinstance(value, str):
            try:
                json.loads(value)
            except ValueError:
                raise ValueError(f"env_args must be JSON (robomimic reads it with json.loads): {value[:80]!r}") from None
            return value
        return json.dumps(value)

    def check(self, plan: ExportPlan) -> list[str]:
        paths = self._paths(plan)
        if "actions" not in paths.values():
            raise ValueError("robomimic export: no key goes to 'actions' (robomimic's datasets need one): rename "
                             "the action key, e.g. --rename action=actions")
        for key, p in paths.items():
            if not p or p.startswith("/") or "" in p.split("/"):
                raise ValueError(f"robomimic export: {p!r} (key {key!r}) is not an HDF5 path")
            if plan.step_spec(key)[1].kind not in "biuf":
                raise ValueError(f"robomimic export: key {key!r} holds {plan.step_spec(key)[1]} values; leave it out "
                                 f"with --skip-key {key}")
            clash = [q for q in paths.values() if q.startswith(p + "/")]
            if clash:
                raise ValueError(f"robomimic export: key {key!r} goes to {p!r}, a group of {clash[0]!r}")
        self._env_args(plan)
        notes = []
        if self._env_args(plan) is None:
            notes.append("no env_args (the source kept none): robomimic's training scripts need one (--env-args JSON)")
        if self._demo_names(plan) != [self._episode_attrs(plan, i).get("name") for i in plan.episodes]:
            notes.append("demos are named demo_0.. in export order (the store kept no unique demo_N names)")
        return notes

    # ------------------------------------------------------------------------------ writing
    def write(self, plan: ExportPlan, path: Path, progress) -> list[str]:
        h5py = _h5py()
        paths, demos = self._paths(plan), self._demo_names(plan)
        per_episode = self._per_episode(plan, "episode.")
        with h5py.File(os.fspath(path), "w") as f:
            data = f.create_group("data")
            data.attrs["total"] = np.int64(plan.n_steps)
            env_args = self._env_args(plan)
            if env_args is not None:
                data.attrs["env_args"] = env_args
            for j, i in enumerate(plan.episodes):
                g = data.create_group(demos[j])
                for k, v in (self._episode_attrs(plan, i).get("attrs") or {}).items():
                    if k != "num_samples" and isinstance(v, (bool, int, float, str)):
                        g.attrs[k] = v
                g.attrs["num_samples"] = np.int64(plan.lengths[j])
                for key, p in paths.items():
                    block = plan.read(key, j)
                    g.create_dataset(p, data=block, compression="gzip" if block.nbytes >= GZIP_FROM else None)
                    progress(len(block))
                for m in per_episode:
                    g.create_dataset(m[len("episode."):].replace(".", "/"), data=plan.rb.store.read("meta", m, i, i + 1)[0])
            masks = self._per_episode(plan, "mask.")
            for m in masks:
                flags = plan.rb.store.read("meta", m, 0, plan.rb.n_episodes)[plan.episodes]
                f.create_dataset(f"mask/{m[len('mask.'):]}",
                                 data=np.array([d.encode() for d, on in zip(demos, flags) if on], dtype="S"))
        return [f"{len(per_episode)} per-episode meta arrays as demo datasets, {len(masks)} masks"] \
            if per_episode or masks else []

    def verify(self, plan: ExportPlan, path: Path) -> list[str]:
        h5py = _h5py()
        paths, demos = self._paths(plan), self._demo_names(plan)
        with h5py.File(os.fspath(path), "r") as f:
            if int(f["data"].attrs["total"]) != plan.n_steps:
                raise ValueError(f"{path}: data.attrs['total'] read back is not {plan.n_steps}")
            for j, i in enumerate(plan.episodes):
                g = f["data"][demos[j]]
                if int(g.attrs["num_samples"]) != plan.lengths[j]:
                    raise ValueError(f"{path}: data/{demos[j]} num_samples differs from episode {i}'s length")
                for key, p in paths.items():
                    got, expect = g[p][()], plan.read(key, j)
                    if got.dtype != expect.dtype or got.shape != expect.shape or got.tobytes() != expect.tobytes():
                        rows = (got != expect).reshape(len(expect), -1).any(axis=1) \
                            if got.shape == expect.shape else np.ones(1, bool)
                        raise ValueError(f"{path}: data/{demos[j]}/{p} differs from store key {key!r}, episode {i}, "
                                         f"row {int(np.flatnonzero(rows)[0])}")
            for m in self._per_episode(plan, "mask."):
                flags = plan.rb.store.read("meta", m, 0, plan.rb.n_episodes)[plan.episodes]
                got = [d.decode() for d in f[f"mask/{m[len('mask.'):]}"][()]]
                if got != [d for d, on in zip(demos, flags) if on]:
                    raise ValueError(f"{path}: mask/{m[len('mask.'):]} read back differs from meta/{m}")
        return [(f"robomimic: {len(plan.episodes)} demos x {len(paths)} datasets read back with h5py, equal to the store "
                 "bit for bit (dtypes included); num_samples, total and masks checked")]

    def recognises(self, path) -> bool:
        try:
            h5py = _h5py()
            with h5py.File(os.fspath(path), "r") as f:
                return "data" in f and any(DEMO.match(n) for n in f["data"].keys())
        except Exception:  # noqa: BLE001 - not an HDF5 file, or not robomimic's
            return False
