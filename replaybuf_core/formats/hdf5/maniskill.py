"""The ``maniskill`` import format: ManiSkill trajectory files (``*.h5`` with a ``*.json`` sidecar).

Layout (ManiSkill's ``RecordEpisode``): ``traj_N`` groups with ``actions``, ``terminated``,
``truncated``, ``success``, ``fail``, ``rewards`` of ``T`` rows and ``obs`` (or nested ``obs/...``)
and ``env_states/...`` of ``T + 1`` rows (the last rows go to ``meta/final.<key>``, see
:mod:`.episodes`).  The JSON sidecar holds ``env_info`` and one entry per episode (``episode_id``,
``episode_seed``, ``reset_kwargs``, ``control_mode``, ``elapsed_steps``...): each entry is matched to
its group by ``episode_id`` (``traj_<episode_id>``), not by position, and kept in the episode's
``meta/episode_attrs``.  uint16 depth stays uint16 (Blosc, never WebP).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from replaybuf_core.source import FormatEntrypoint

from .common import attrs_of, is_hdf5, member_names, natural_key
from .episodes import EpisodeGroupsSource, add_missing_keys_argument

TRAJ = re.compile(r"^traj_(\d+)$")


class ManiSkillSource(EpisodeGroupsSource):
    """A ManiSkill trajectory file (see the module docstring).

    A sidecar ``elapsed_steps`` other than the trajectory's number of actions is noted (the
    trajectory's rows are imported; the entry is kept as written).

    Raises:
        FileNotFoundError, ValueError (no ``traj_N`` groups; a sidecar entry naming a trajectory
        the file lacks, or a trajectory with no entry, named), ImportError (h5py).
    """

    format_name = "maniskill"

    def __init__(self, path, *, missing_keys: str = "error"):
        super().__init__(path, missing_keys)
        f = self._open()
        names = sorted((n for n in f.keys() if TRAJ.match(n)), key=natural_key)
        if not names:
            raise ValueError(f"{self.path}: no traj_N groups")
        sidecar = Path(self.path).with_suffix(".json")
        self._entries: dict[int, dict] = {}
        if sidecar.is_file():
            try:
                info = json.loads(sidecar.read_text())
            except ValueError as exc:
                raise ValueError(f"{sidecar}: not valid JSON ({exc})") from exc
            if not isinstance(info, dict) or not isinstance(info.get("episodes", []), list):
                raise ValueError(f"{sidecar}: expected a JSON object with an 'episodes' list")
            for e in info.get("episodes", []):
                if not isinstance(e, dict) or isinstance(e.get("episode_id"), bool) or \
                        not isinstance(e.get("episode_id"), int):
                    raise ValueError(f"{sidecar}: an episode entry has no integer episode_id: {str(e)[:120]}")
                if e["episode_id"] in self._entries:
                    raise ValueError(f"{sidecar}: episode_id {e['episode_id']} has two entries")
                self._entries[e["episode_id"]] = e
            ids = {int(TRAJ.match(n).group(1)) for n in names}
            extra = sorted(set(self._entries) - ids)
            if extra:
                raise ValueError(f"{sidecar}: episode_id(s) {extra[:10]} have no traj_N group in {self.path}")
            lacking = sorted(ids - set(self._entries))
            if lacking:
                self.notes.append(f"trajectories {lacking[:10]} have no entry in {sidecar.name}")
            self.attrs = {"env_info": info.get("env_info"), "file": attrs_of(f),
                          **{k: v for k, v in info.items() if k not in ("episodes", "env_info")}}
        else:
            self.notes.append(f"{sidecar.name} is missing: no env_info or per-episode seeds kept")
            self.attrs = {"file": attrs_of(f)}
        episodes = []
        for n in names:
            g = f[n]
            if "actions" not in g:
                raise ValueError(f"{self.path}: {n} has no actions")
            episodes.append((n, g, int(g["actions"].shape[0])))
        self._note_elapsed_steps(episodes, sidecar)
        self._scan(episodes)

    def _note_elapsed_steps(self, episodes: list, sidecar: Path) -> None:
        """Note the trajectories whose sidecar ``elapsed_steps`` is not their number of actions (the
        rows imported are the trajectory's own; the entry is kept as written)."""
        off = [(n, e["elapsed_steps"], t) for n, _, t in episodes
               for e in [self._entries.get(int(TRAJ.match(n).group(1))) or {}]
               if isinstance(e.get("elapsed_steps"), int) and not isinstance(e.get("elapsed_steps"), bool)
               and e["elapsed_steps"] != t]
        if off:
            shown = ", ".join(f"{n}: elapsed_steps {k}, {t} actions" for n, k, t in off[:5])
            more = f" and {len(off) - 5} more" if len(off) > 5 else ""
            self.notes.append(f"{sidecar.name}: elapsed_steps disagrees with the trajectory's actions in {len(off)} of "
                              f"{len(episodes)} trajectories ({shown}{more}); imported as the trajectories hold them (their "
                              "actions' rows), the sidecar entries kept as written in meta/episode_attrs — is the "
                              "sidecar this file's?")

    def episode_id(self, index: int) -> int:
        return int(TRAJ.match(self._episodes[index][0]).group(1))

    def episode_attrs(self, index: int) -> dict[str, Any]:
        out = super().episode_attrs(index)
        entry = self._entries.get(self.episode_id(index))
        if entry is not None:
            out["episode"] = entry
        return out


class ManiSkillFormat(FormatEntrypoint):
    """``maniskill``: an HDF5 file with ``traj_N`` groups (and a JSON sidecar)."""

    name = "maniskill"
    description = "ManiSkill trajectories (.h5 with traj_N groups + .json sidecar)"
    requires = "hdf5"

    def might_open(self, path) -> bool:
        return is_hdf5(path)

    def guess_can_open(self, path) -> bool:
        return any(TRAJ.match(n) for n in member_names(path) or ())

    def open(self, path, **options: Any) -> ManiSkillSource:
        return ManiSkillSource(path, **options)

    def add_arguments(self, group) -> list[str]:
        return [add_missing_keys_argument(group)]
