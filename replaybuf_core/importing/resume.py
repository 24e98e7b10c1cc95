"""Continuing a stopped import where it stopped (issue 51, item 4): killed, or interrupted (Ctrl-C,
SIGTERM: an import on a Dask cluster keeps its build then).

An import on a Dask cluster into a local path builds its store beside the destination
(:func:`~replaybuf_core.store.replace.build_beside`) and commits ``meta/episode_ends`` prefixes as
its spans complete: the committed prefix holds episodes all of whose rows, in every key, were
written *and* read back and checked by their tasks.  Beside the store's arrays the build keeps a
small file, :data:`PROGRESS_FILE`, holding

* ``plan``: the digest of everything that decides the stored bytes (:func:`plan_digest`: the
  format and its options, the source path and a fingerprint of its files, the chosen episodes, the
  keys, the frame codecs, ``keep_dtype``, the shard size, the backend, replaybuf's version, and the
  conversions found so far);
* ``episodes``: the committed episodes the checks below cover (written before each commit, so it is
  never fewer than the committed ones), and the checks' findings over them: the problems, the first
  differing episode of each key, and the lossy keys' squared errors (sum, values, worst episode).

Rerunning the same import (``resume=True``, the default; CLI without ``--restart``) offers every
leftover build of a dead process to :func:`adopter`: one whose ``plan`` equals the new plan's is
renamed to the new build (atomically: two reruns never share one) and continued — only the spans
holding rows past its committed prefix run again; the others are neither read nor written.  Any
other build is removed, with a log line saying why it was not continued.  The file is deleted once
the import is verified, before the swap: the store is the serial import's, file for file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger(__name__)

__all__ = ["PROGRESS_FILE", "Progress", "plan_digest", "source_fingerprint", "adopter", "read_progress",
           "write_progress", "forget_progress"]

#: The file in a build that lets a later run continue it (JSON; see the module docstring).
PROGRESS_FILE = ".replaybuf-import-progress.json"


@dataclass
class Progress:
    """What a build's :data:`PROGRESS_FILE` says: its ``plan`` digest; ``episodes``, the committed
    episodes its checks cover; ``problems``; ``first_bad`` (key → first differing episode); ``sse``
    (lossy key → ``[sum of squared errors, values, worst episode's PSNR in dB]``)."""

    plan: str
    episodes: int = 0
    problems: list[str] = field(default_factory=list)
    first_bad: dict[str, int] = field(default_factory=dict)
    sse: dict[str, list[float]] = field(default_factory=dict)


def source_fingerprint(path: str | os.PathLike) -> list[tuple[str, int, int]]:
    """``(relative path, size in bytes, modification time in ns)`` of every file under ``path`` (or of
    ``path`` itself, a file), sorted: a source file rewritten, added or removed changes it."""
    root = Path(os.fspath(path))
    if root.is_file():
        st = root.stat()
        return [(root.name, st.st_size, st.st_mtime_ns)]
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((p.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns))
    return sorted(out)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("replaybuf")
    except PackageNotFoundError:
        return "unknown"


def plan_digest(source: Any, keys: list[str], indices: list[int], settings: dict[str, Any],
                kept: dict[str, str]) -> str:
    """The SHA-256 (hex) of what decides an import's stored bytes (see the module docstring):
    ``settings`` as :func:`~replaybuf_core.importing.pipeline.import_source` makes them."""
    fmt, path, options = getattr(source, "open_args", None) or (source.format_name, os.fspath(source.path), {})
    doc = {
        "format": fmt, "options": options, "source": os.path.abspath(os.fspath(path)),
        "files": source_fingerprint(source.path), "episodes": [int(i) for i in indices],
        "keys": {k: [source.keys[k].dtype.str, list(source.keys[k].shape), source.keys[k].kind] for k in keys},
        "frames": {k: str(c) for k, c in sorted(settings["frames"].items())},
        "keep_dtype": settings["keep_dtype"], "lossy_quality": settings["lossy_quality"],
        "frames_per_shard": settings["frames_per_shard"], "backend": settings["backend"],
        "kept": dict(sorted(kept.items())), "replaybuf": _version(),
    }
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def read_progress(build: str | os.PathLike) -> Progress | None:
    """The :class:`Progress` in ``build``, or None when it has none (or an unreadable one)."""
    try:
        with open(Path(os.fspath(build)) / PROGRESS_FILE, encoding="utf-8") as f:
            doc = json.load(f)
        return Progress(str(doc["plan"]), int(doc["episodes"]), list(doc["problems"]),
                        {str(k): int(v) for k, v in doc["first_bad"].items()},
                        {str(k): [float(x) for x in v] for k, v in doc["sse"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_progress(build: str | os.PathLike, progress: Progress) -> None:
    """Write ``progress`` into ``build`` whole or not at all (a temporary file renamed over it, synced:
    a kill mid-write leaves the previous one)."""
    target = Path(os.fspath(build)) / PROGRESS_FILE
    tmp = target.with_name(f"{PROGRESS_FILE}.{os.getpid()}.tmp")
    doc = {"plan": progress.plan, "episodes": progress.episodes, "problems": progress.problems,
           "first_bad": progress.first_bad, "sse": progress.sse}
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def forget_progress(build: str | os.PathLike) -> None:
    """Delete ``build``'s progress file (the import is verified: nothing is left to continue)."""
    try:
        os.unlink(Path(os.fspath(build)) / PROGRESS_FILE)
    except FileNotFoundError:
        pass


def adopter(plan: str | None, why_not: str | None = None) -> Callable[[Path], bool]:
    """What :func:`~replaybuf_core.store.replace.build_beside` asks of each dead process's build:
    True when it can be continued — its progress file names ``plan`` and covers at least one
    committed episode.  Otherwise False (the build is removed), logged with the reason when the build
    was one an import could have continued; ``why_not`` is that reason when this import cannot
    continue any (``plan`` None: ``--restart``, or not on a Dask cluster)."""

    def adopt(build: Path) -> bool:
        found = read_progress(build)
        if found is None:
            return False
        if plan is None:
            logger.warning("%s: not continued (%s); removing it and starting over", build, why_not)
            return False
        if found.plan != plan:
            logger.warning("%s: not continued: it was made by an import of another plan (other options, episodes, "
                           "source files or replaybuf version); removing it and starting over", build)
            return False
        if found.episodes <= 0:
            logger.info("%s: no episode was committed there; starting over", build)
            return False
        logger.warning("%s: continuing the import stopped there (%d episodes committed)", build, found.episodes)
        return True

    return adopt
