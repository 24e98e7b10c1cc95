"""``replaybuf verify`` as a function: every problem of a store, named, without trusting it.

The store is opened with :func:`replaybuf_core.registry.open_backend` (read-only), not through
:class:`ReplayBuffer`, whose constructor rejects what this module must report (a decreasing
``episode_ends``, a short array).  Checks, in order:

* ``data`` / ``meta`` groups and ``meta/episode_ends`` exist; ``episode_ends`` is 1-D, integer,
  non-negative and non-decreasing (each violation names the episode and both values);
* every data array has exactly ``episode_ends[-1]`` rows (fewer: an error; more: a note — the trace of
  an interrupted append, hidden on read-only opens and trimmed on writable ones);
* what looks like an interrupted write but is damage (:mod:`replaybuf_core.store.recovery`: ends that
  disagree with the commit record, all fill values beside data, zero-length episodes beside rows to
  trim) is an error: recovery refuses it, and so does verification;
* the backend's own checks of stored objects, when it has the optional ``check_chunks`` method (zarr:
  chunk/shard files missing from the store; for data arrays only those holding committed rows);
* every array (data and meta) decodes: it is read block by block, one stored object (shard, else chunk)
  along axis 0 at a time, and a failing block is named by key, chunk index and row range;
* NaN / inf in float data: a note (legal values, often a recording bug), with counts and the first row
  and episode;
* the stored statistics (:mod:`replaybuf_core.store.stored_stats`): an entry whose arrays fail their hash,
  or that disagrees with a recomputation from the episodes it covers, is an error; a stale one (the
  episodes changed since) is a note;
* what it cannot check: arrays stored without a compressor or checksum (zeroed bytes decode as
  zeros), a note naming them.

Levels: ``"error"`` fails verification, ``"note"`` does not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from replaybuf_core import registry
from replaybuf_core.layout.chunks import row_bytes
from replaybuf_core.layout.keys import TMP_KEY
from replaybuf_core.protocol import CAP_CHUNKS, CAP_CODECS, CAP_SHARDS
from replaybuf_core.store.commit import EPISODE_ENDS, read_commit_record
from replaybuf_core.store.editing import STATS_PREFIX, STATS_RECORD
from replaybuf_core.store.progress import progress_bar

#: per array, at most this many undecodable blocks are listed, then a count of the rest
MAX_BLOCK_PROBLEMS = 10
#: blocks are at least this many bytes (several chunks per read when chunks are tiny)
MIN_BLOCK_BYTES = 8 * 2**20


@dataclass(frozen=True)
class Problem:
    """One finding: ``level`` is ``"error"`` or ``"note"``; ``where`` is ``"group/key"`` or ``""``."""

    level: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.level.upper()}: {self.message}"


def _rows_per_block(store: Any, group: str, name: str, per_row: int) -> int:
    obj = None
    if CAP_SHARDS in store.capabilities:
        sh = store.shards(group, name)
        obj = sh[0] if sh else None
    if obj is None and CAP_CHUNKS in store.capabilities:
        ck = store.chunks(group, name)
        obj = ck[0] if ck else None
    obj = max(1, int(obj or 1))
    per = max(1, MIN_BLOCK_BYTES // max(per_row, 1) // obj)
    return obj * per


def import_incomplete(data_attrs: Any) -> bool:
    """Whether a store's ``data`` attributes say an import into it stopped before it was verified
    (``import.complete`` is false: an import straight into a bucket that failed or was killed)."""
    record = data_attrs.get("import") if isinstance(data_attrs, dict) else None
    return isinstance(record, dict) and record.get("complete") is False


def verify_store(path_or_store: Any, backend: str | None = None, progress: bool = False) -> list[Problem]:
    """Check the store at ``path_or_store`` (a path, a native root or a StorageBackend); never
    modifies it.  Returns every :class:`Problem` found (empty: clean).  ``progress``: a tqdm bar on
    stderr over the bytes of the arrays decoded (:mod:`replaybuf_core.store.progress`).

    Raises:
        FileNotFoundError / BackendNotFoundError (ValueError): nothing at the path, or no backend
            can open it (nothing to verify).
    """
    obj = os.path.expanduser(os.fspath(path_or_store)) if isinstance(path_or_store, (str, os.PathLike)) \
        else path_or_store
    store = registry.open_backend(obj, backend=backend, read_only=True)
    if hasattr(store, "cache_bytes"):
        store.cache_bytes = 0  # one pass over each array
    problems: list[Problem] = []

    def err(where: str, msg: str) -> None:
        problems.append(Problem("error", where, msg))

    def note(where: str, msg: str) -> None:
        problems.append(Problem("note", where, msg))

    for group in ("data", "meta"):
        if not store.has_group(group):
            err(group, f"the store has no {group!r} group")
    if problems:
        return problems
    ends = None
    if not store.has_array("meta", EPISODE_ENDS):
        err("meta/episode_ends", "meta/episode_ends is missing")
    else:
        shape, dtype = store.shape("meta", EPISODE_ENDS), np.dtype(store.dtype("meta", EPISODE_ENDS))
        if len(shape) != 1:
            err("meta/episode_ends", f"meta/episode_ends must be 1-D, has shape {tuple(shape)}")
        elif dtype.kind not in "iu":
            err("meta/episode_ends", f"meta/episode_ends must hold integers, has dtype {dtype}")
        else:
            try:
                ends = np.asarray(store.read("meta", EPISODE_ENDS, 0, shape[0])).astype(np.int64)
            except Exception as exc:  # noqa: BLE001 - report, do not crash
                err("meta/episode_ends", f"meta/episode_ends does not decode: {type(exc).__name__}: {exc}")
            if ends is not None:
                from replaybuf_core.store.recovery import unfinished_commits

                k = unfinished_commits(store, ends)
                if k:
                    note("meta/episode_ends", f"meta/episode_ends ends in {k} fill value(s) (-1) of an interrupted "
                                              "commit: hidden on read-only opens, dropped on writable ones "
                                              "(replaybuf verify --repair)")
                    ends = ends[: ends.size - k]
                neg = np.flatnonzero(ends < 0)
                if neg.size:
                    i = int(neg[0])
                    err("meta/episode_ends", f"meta/episode_ends[{i}] is {ends[i]}, negative "
                                             f"({neg.size} negative value(s))")
                drops = np.flatnonzero(np.diff(ends) < 0) + 1
                for i in drops[:MAX_BLOCK_PROBLEMS]:
                    err("meta/episode_ends", f"meta/episode_ends decreases at episode {i}: "
                                             f"episode_ends[{i - 1}]={ends[i - 1]} > episode_ends[{i}]={ends[i]}")
                if drops.size > MAX_BLOCK_PROBLEMS:
                    err("meta/episode_ends", f"meta/episode_ends decreases {drops.size - MAX_BLOCK_PROBLEMS} "
                                             "more times")
                zero = np.flatnonzero(np.diff(np.concatenate([[0], ends])) == 0)
                if zero.size:
                    note("meta/episode_ends", f"{zero.size} zero-length episode(s), first: episode {int(zero[0])}")
    n_steps = int(ends[-1]) if ends is not None and ends.size else 0
    if import_incomplete(store.get_attrs("data")):
        n = 0 if ends is None else int(ends.size)
        err("data", f"the import into this store did not finish (data attribute import.complete is false): it holds "
                    f"the {n} episode(s) committed before it stopped, not the source; delete it and import again")
    damaged = False
    if ends is not None and not any(p.level == "error" for p in problems):
        # what recovery would refuse to repair (damage that looks like an interrupted write)
        from replaybuf_core.errors import CorruptStoreError
        from replaybuf_core.store.recovery import recover

        from replaybuf_core.store.editing import InterruptedEditError

        try:
            recover(store, apply=False)
        except InterruptedEditError as exc:  # rows are mid-move: the checks below would call the edit damage
            err("meta", str(exc))
            return problems
        except CorruptStoreError as exc:
            err("meta/episode_ends", str(exc))
            damaged = True
    checker = getattr(store, "check_chunks", None)
    bar = progress_bar("verifying", sum(_array_bytes(store, group, name) for group in ("data", "meta")
                                    for name in store.list_arrays(group)), progress)
    for group in ("data", "meta"):
        for name in store.list_arrays(group):
            where = f"{group}/{name}"
            if group == "data" and name.startswith(TMP_KEY + "."):  # a half-written copy, never read as data
                note(where, f"{where} is the new array of an interrupted rechunk of {name[len(TMP_KEY) + 1:]!r}: it "
                            "holds no committed data; `replaybuf verify --repair` or the next writable open "
                            "removes it")
                bar.update(_array_bytes(store, group, name))
                continue
            shape = tuple(store.shape(group, name))
            if group == "data" and ends is not None:
                rows = shape[0] if shape else 0
                if rows < n_steps:
                    err(where, f"{where} has {rows} rows but meta/episode_ends[-1] is {n_steps}")
                elif rows > n_steps:
                    note(where, f"{where} has {rows - n_steps} rows past meta/episode_ends[-1]={n_steps} "
                                "(an interrupted append: hidden on read-only opens, trimmed on writable ones)")
            checked_by_record = ((group, name) == ("meta", EPISODE_ENDS) and read_commit_record(store) is not None) \
                or (group == "meta" and name.startswith(STATS_PREFIX))  # hashed in meta/replaybuf_stats
            if (CAP_CODECS in store.capabilities and shape and shape[0] and store.codec(group, name) is None
                    and not checked_by_record):
                note(where, f"{where} is stored without a compressor or checksum: damage to its bytes (a "
                            "zeroed or overwritten chunk) reads back as plausible values, so verify cannot "
                            "detect it there")
            if callable(checker):
                committed = n_steps if group == "data" and ends is not None else None
                if group == "meta" and name.startswith(STATS_PREFIX):
                    committed = _stats_rows_in_use(store, name)
                try:
                    found = checker(group, name, rows=committed)
                except TypeError:  # a third-party backend without the ``rows`` argument
                    found = checker(group, name)
                for msg in found:
                    err(where, msg)
            _scan(store, group, name, shape, ends, err, note, bar)
    bar.close()
    if not any(p.level == "error" for p in problems):
        _check_stats(store, err, note)
    if damaged:  # nothing is trimmed or dropped on a damaged store: say so instead of the usual notes
        problems[:] = [p for p in problems if not (p.level == "note" and "interrupted" in p.message)]
        note("meta/episode_ends", "rows past episode_ends[-1] and trailing fill values are kept as they are: "
                                  "recovery does not repair damage (writable opens and --repair refuse it)")
    return problems


def _array_bytes(store, group: str, name: str) -> int:
    """Decoded bytes of ``group/name`` (what verifying it reads)."""
    shape = tuple(store.shape(group, name))
    return row_bytes(shape, store.dtype(group, name)) * shape[0] if shape else 0


def _stats_rows_in_use(store, name: str) -> int | None:
    """Rows in use of the stored-statistics array ``meta/<name>`` (``_stats.<key>.<part>``): its arrays
    grow geometrically, and the rows past those in use were never written (zarr leaves their chunks
    out); None when the record does not name the array (all its rows are then checked)."""
    key, _, part = name[len(STATS_PREFIX):].rpartition(".")
    try:
        rows = store.get_attrs("meta")[STATS_RECORD]["keys"][key]["rows"][part]
    except (KeyError, TypeError):
        return None
    return int(rows) if isinstance(rows, int) and not isinstance(rows, bool) else None


def _check_stats(store, err, note) -> None:
    """The stored statistics (:func:`replaybuf_core.store.stored_stats.check_stored_stats`), on a sound store."""
    from replaybuf_core.store.buffer import ReplayBuffer
    from replaybuf_core.store.stored_stats import check_stored_stats

    try:
        buffer = ReplayBuffer(store, read_only=True)
        found = check_stored_stats(buffer)
    except Exception as exc:  # noqa: BLE001 - report, do not crash
        err("meta", f"the stored statistics cannot be checked: {type(exc).__name__}: {exc}")
        return
    for level, where, msg in found:
        (err if level == "error" else note)(where, msg)


def _scan(store, group, name, shape, ends, err, note, bar) -> None:
    """Read the array block by block: report blocks that fail to decode and non-finite floats; tell
    ``bar`` the bytes of each block read."""
    where = f"{group}/{name}"
    if len(shape) == 0:
        try:
            store.get_array(group, name)[()]
        except Exception as exc:  # noqa: BLE001
            err(where, f"{where} (a scalar) does not decode: {type(exc).__name__}: {exc}")
        return
    per_row = row_bytes(shape, store.dtype(group, name))
    step = _rows_per_block(store, group, name, per_row)
    obj = step
    if CAP_SHARDS in store.capabilities and store.shards(group, name):
        obj, kind = store.shards(group, name)[0], "shard"
    elif CAP_CHUNKS in store.capabilities and store.chunks(group, name):
        obj, kind = store.chunks(group, name)[0], "chunk"
    else:
        kind = "block"
    bad = 0
    n_nan = n_inf = 0
    first_nonfinite = None
    n = shape[0]
    for start in range(0, n, step):
        stop = min(n, start + step)
        bar.update((stop - start) * per_row)
        try:
            block = store.read(group, name, start, stop)
        except Exception:  # noqa: BLE001 - narrow down to the failing object(s)
            for a in range(start, stop, obj):
                b = min(stop, a + obj)
                try:
                    block_part = store.read(group, name, a, b)
                except Exception as exc:  # noqa: BLE001
                    bad += 1
                    if bad <= MAX_BLOCK_PROBLEMS:
                        err(where, f"{where}: {kind} {a // obj} (rows [{a}, {b})) does not decode: "
                                   f"{type(exc).__name__}: {exc}")
                    continue
                n_nan, n_inf, first_nonfinite = _count_nonfinite(block_part, a, n_nan, n_inf, first_nonfinite)
            continue
        n_nan, n_inf, first_nonfinite = _count_nonfinite(block, start, n_nan, n_inf, first_nonfinite)
    if bad > MAX_BLOCK_PROBLEMS:
        err(where, f"{where}: {bad - MAX_BLOCK_PROBLEMS} more {kind}s do not decode")
    if n_nan or n_inf:
        at = f"first at row {first_nonfinite}"
        if group == "data" and ends is not None and ends.size:
            at += f" (episode {int(np.searchsorted(ends, first_nonfinite, side='right'))})"
        note(where, f"{where} holds {n_nan} NaN and {n_inf} inf value(s), {at}")


def _count_nonfinite(block, start, n_nan, n_inf, first):
    block = np.asarray(block)
    if block.dtype.kind not in "fc":
        return n_nan, n_inf, first
    finite = np.isfinite(block)
    if finite.all():
        return n_nan, n_inf, first
    nan = np.isnan(block)
    n_nan += int(nan.sum())
    n_inf += int((~finite & ~nan).sum())
    if first is None:
        first = start + int(np.flatnonzero(~finite.reshape(len(block), -1).all(axis=1))[0])
    return n_nan, n_inf, first
