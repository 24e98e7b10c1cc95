"""The index of an RLDS shard — where each record (episode) is, its steps, what is wrong with it, its
episode-level values and tasks, and where each per-step feature's bytes lie in the file — and a cache
of it on disk, so that a shard is read and checked once: a Dask worker opening the dataset again, or
an import started again after it was stopped, finds the shards already indexed (resumable per shard)
instead of reading every byte of the dataset once more.

A cache entry is one JSON file per shard under :func:`cache_dir` (``$REPLAYBUF_CACHE`` or
``$XDG_CACHE_HOME/replaybuf``, else ``~/.cache/replaybuf``; ``rlds-index/``), named by a digest of the
shard's absolute path, size and modification time and of ``features.json``: a shard that changed is
indexed again.  Entries are written whole (a temporary file renamed into place); an unreadable entry
is ignored and rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["EpisodeEntry", "cache_dir", "load", "save", "VERSION"]

#: Bumped when the entries' content changes.
VERSION = 1


@dataclass
class EpisodeEntry:
    """One record: its shard (index into the source's shard list), record number, data ``offset`` and
    ``length`` in the file (decompressed stream for gzip), steps, episode-level ``values`` (path →
    JSON value), ``tasks``, its cameras' encoded bytes ``cam_bytes`` (key → bytes), ``spans`` (per-step
    feature path → ``(offset in the file, length)`` of its serialized ``tf.train.Feature``, absent when
    it has no single span; the source keeps them as one ``(features, 2)`` int64 array, ``-1`` for
    none); ``problem`` when it cannot be imported."""

    shard: int
    number: int
    offset: int = 0
    length: int = 0
    steps: int = 0
    problem: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)
    cam_bytes: dict[str, int] = field(default_factory=dict)
    spans: Any = field(default_factory=dict)


def cache_dir() -> Path:
    """Where the shard indexes are kept (see the module docstring)."""
    base = os.environ.get("REPLAYBUF_CACHE")
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "replaybuf")
    return Path(base) / "rlds-index"


def _entry_path(directory: Path, shard: Path, features_digest: str) -> Path | None:
    try:
        st = shard.stat()
    except OSError:
        return None
    key = f"{VERSION}\0{shard.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{features_digest}"
    return directory / (hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest() + ".json")


def load(directory: Path | None, shard: Path, index: int, features_digest: str) -> list[EpisodeEntry] | None:
    """The cached entries of ``shard`` (numbered ``index`` in its split), or None when there are none
    (or ``directory`` is None: no cache)."""
    if directory is None:
        return None
    path = _entry_path(directory, shard, features_digest)
    if path is None or not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        return [EpisodeEntry(**{**e, "shard": index, "spans": {k: tuple(v) for k, v in e["spans"].items()}})
                for e in doc["records"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None


def save(directory: Path | None, shard: Path, entries: list[EpisodeEntry], features_digest: str) -> None:
    """Keep ``shard``'s entries (nothing when ``directory`` is None; a cache that cannot be written is
    skipped: it only saves time)."""
    if directory is None:
        return
    path = _entry_path(directory, shard, features_digest)
    if path is None:
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        doc = {"version": VERSION, "shard": os.fspath(shard), "records": [_jsonable(asdict(e)) for e in entries]}
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except OSError:
        return


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
