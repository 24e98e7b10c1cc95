"""The ``minari`` import format: Farama Minari datasets (``data/main_data.hdf5`` + ``data/metadata.json``).

Layout (Minari's ``HDF5`` data format): one ``episode_N`` group per episode (attributes ``id``,
``seed``, ``total_steps``, ``options/...``) with ``observations`` of ``T + 1`` rows (a group for
Dict spaces, ``_index_i`` members for Tuple spaces), ``actions``, ``rewards``, ``terminations``,
``truncations`` of ``T`` rows and ``infos/*`` of ``T + 1`` rows; text as variable-length strings.
The ``T + 1``-th rows go to ``meta/final.<key>`` (see :mod:`.episodes`); ``metadata.json``, with its
JSON-encoded ``env_spec``, ``action_space`` and ``observation_space`` parsed, to the attributes.
Since Minari 0.5.3 image observations may be JPEG bytes: they are decoded (the report says so).
Episodes are imported by number (``episode_10`` after ``episode_9``).

``path`` is the dataset directory (holding ``data/``), its ``data`` directory, or ``main_data.hdf5``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from replaybuf_core.source import FormatEntrypoint

from .common import attrs_of, datasets, maybe_json, natural_key
from .episodes import EpisodeGroupsSource, add_missing_keys_argument

EPISODE = re.compile(r"^episode_(\d+)$")


def _files(path) -> tuple[Path, Path]:
    p = Path(os.path.expanduser(os.fspath(path)))
    if p.is_file():
        return p, p.parent / "metadata.json"
    data = p / "data" if (p / "data" / "main_data.hdf5").is_file() else p
    return data / "main_data.hdf5", data / "metadata.json"


class MinariSource(EpisodeGroupsSource):
    """A Minari dataset (see the module docstring).

    Raises:
        FileNotFoundError (no ``main_data.hdf5``), ValueError (no ``episode_N`` groups; an episode
        whose ``observations`` are not ``T + 1`` rows), ImportError (h5py).
    """

    format_name = "minari"

    def __init__(self, path, *, missing_keys: str = "error"):
        h5, meta = _files(path)
        if not h5.is_file():
            raise FileNotFoundError(f"{path}: no Minari data (expected data/main_data.hdf5)")
        super().__init__(Path(path).expanduser(), missing_keys)
        f = self._open(os.fspath(h5))
        names = sorted((n for n in f.keys() if EPISODE.match(n)), key=natural_key)
        if not names:
            raise ValueError(f"{h5}: no episode_N groups")
        episodes = []
        for n in names:
            g = f[n]
            if "actions" not in g:
                raise ValueError(f"{h5}: {n} has no actions")
            t = int(g["actions"].shape[0])
            obs = g.get("observations")
            members = {"observations": obs} if obs is not None and hasattr(obs, "shape") else \
                {f"observations/{p}": ds for p, ds in (datasets(obs).items() if obs is not None else ())}
            for p, ds in members.items():
                if not ds.shape or ds.shape[0] != t + 1:
                    raise ValueError(f"{h5}: {n}/{p} has {ds.shape[0] if ds.shape else 0} rows for {t} actions "
                                     "(Minari stores T + 1 observations)")
            episodes.append((n, g, t))
        self._scan(episodes)
        metadata = None
        if meta.is_file():
            try:
                metadata = json.loads(meta.read_text())
            except (ValueError, UnicodeDecodeError) as exc:
                raise ValueError(f"{meta}: not valid JSON ({exc})") from exc
            if not isinstance(metadata, dict):
                raise ValueError(f"{meta}: expected a JSON object, found {type(metadata).__name__}")
        if metadata is None:
            self.notes.append(f"{meta} is missing: no dataset metadata kept")
        else:
            metadata = {k: maybe_json(v) for k, v in metadata.items()}
        self.attrs = {"metadata": metadata, "file": attrs_of(f)}
        self.fps = None

    def episode_id(self, index: int) -> int:
        return int(EPISODE.match(self._episodes[index][0]).group(1))


class MinariFormat(FormatEntrypoint):
    """``minari``: a directory with ``data/main_data.hdf5`` (and ``data/metadata.json``)."""

    name = "minari"
    description = "Farama Minari dataset (data/main_data.hdf5 + metadata.json; episode_N groups)"
    requires = "hdf5"

    def might_open(self, path) -> bool:
        return self.guess_can_open(path)  # the file name says it: no reader needed

    def guess_can_open(self, path) -> bool:
        h5, _ = _files(path)
        return h5.is_file() and h5.name == "main_data.hdf5"

    def open(self, path, **options: Any) -> MinariSource:
        return MinariSource(path, **options)

    def add_arguments(self, group) -> list[str]:
        return [add_missing_keys_argument(group)]
