"""Versions of a store: every commit is one, with a time, a message and the command; a version can be
named (tagged), compared, read and restored.

**What a version is.**  The store's content at a commit: the data rows and ``meta/episode_ends``,
with the per-episode meta arrays.  The log is the ``meta`` attribute :data:`VERSIONS`: a list of
records ``{"id", "time", "kind", "message", "command", "n_episodes", "n_steps"}``, oldest first, ids
counting up from 0; :data:`TAGS` maps names to ids.  The current content is always the last version,
stored as today's layout (plain zarr-python and diffusion_policy read it as ever).

**How older versions are kept: reverse deltas.**  Appends never change committed rows, so the version
before an append is a prefix of the one after it (its ``n_steps`` rows, ``n_episodes`` episodes).  An
edit (delete, keep, trim, restore) changes rows from its first changed row on: it backs those rows up
before rewriting them (:mod:`.editing`), stored as they were (frame chunks byte for byte:
:mod:`.row_moves`), and that backup, instead of being deleted when the edit commits, becomes the
*undo* of the version before the edit: ``record["undo"] = {"prefix", "starts", "meta"}`` — per data
key its first backed-up row and the arrays ``data/<prefix><key>`` holding the old rows from there on,
and the whole per-episode meta arrays ``meta/<prefix><name>``.  Versions share every row before an
edit's first change (nothing is copied for them); an edit costs, in space, the old rows it rewrote.

Reading version ``i`` (:mod:`.version_view`) walks the versions after it: a row at or past an undo's
start is that undo's; one before it is the next version's; past the last version, the current
arrays'.  Restoring (:func:`restore_plan`) is an edit whose new rows are version ``i``'s, so it is a
version too (the state before it stays reachable).  :func:`gc` deletes the undos of old versions
(they can no longer be read or restored) unless a reader holds one (:mod:`.version_readers`).

Appends never change committed rows, video included: an append after a partial GOP joins the new
frames to the stored chunk as a segment of their own (:mod:`replaybuf_zarr.row_splice`); dropping the
last episode of a store that keeps versions is an edit.

Appends are recorded as one version per writable session that added episodes (at ``close``, or
before an edit, a tag or a restore), not one per episode: a recording of 1,000 episodes is one
version.  A store made by a copy (``save_to_path``, ``replaybuf copy``; kind ``copy``), a merge (``merge``)
or ``synth`` (``append``) records its content as version 0 under the command that made it.  A store
written before versions existed gets its first record when it is first edited.
"""

from __future__ import annotations

import datetime as _dt
import shlex
import sys
from typing import Any

import numpy as np

from replaybuf_core.protocol import StorageBackend

__all__ = ["APPEND_KINDS", "DELTA_PREFIX", "RECORD_FIELDS", "TAGS", "VERSIONS", "GcReport", "VersionNotFoundError", "delete_unread_undos", "find", "gc", "require_kept",
           "keeps_versions", "late_reader_undos",
           "log", "note_appends", "public_record", "record", "tag", "tags", "untag"]

#: ``meta`` attribute: the list of version records (see the module docstring)
VERSIONS = "replaybuf_versions"
#: ``meta`` attribute: tag name -> version id
TAGS = "replaybuf_tags"
#: prefix of the arrays holding a version's undo (reserved: never a key): ``_temp_ver.<id>.<name>``
DELTA_PREFIX = "_temp_ver."


class VersionNotFoundError(KeyError):
    """A version or tag that the store does not have; the message names the known ones."""

    def __str__(self) -> str:  # KeyError quotes its message
        return str(self.args[0]) if self.args else ""


def delta_prefix(version_id: int) -> str:
    """The array name prefix of version ``version_id``'s undo."""
    return f"{DELTA_PREFIX}{int(version_id)}."


def late_reader_undos(holds: Any, ids: Any) -> Any:
    """A predicate on undo array names (the versions group): True for an undo a live reader may read
    though the log no longer names its version — a reader that took its hold while a :func:`gc` cut
    the log reads the undos that gc kept for it, of its version and of every newer one, until it
    closes.  ``holds``: version id -> readers (:func:`~.version_readers.held_store`); ``ids``: the
    version ids of the log."""
    ids = {int(i) for i in ids}
    gone = [int(v) for v in holds if int(v) not in ids]
    floor = min(gone) if gone else None

    def kept(name: str) -> bool:
        owner = _undo_owner(name)
        return floor is not None and owner is not None and owner not in ids and owner >= floor

    return kept


def _undo_owner(name: str) -> int | None:
    """The version id whose undo array ``name`` (in the versions group) is, from its prefix
    (:func:`delta_prefix`); None for a name of another form."""
    if not name.startswith(DELTA_PREFIX):
        return None
    head = name[len(DELTA_PREFIX):].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def log(store: StorageBackend) -> list[dict]:
    """The version records of ``store``, oldest first (empty for a store without versions)."""
    rec = store.get_attrs("meta").get(VERSIONS)
    return [dict(r) for r in rec] if isinstance(rec, list) else []


#: the fields of a version record that are the public record (:func:`public_record`); the others
#: (``undo``: where its older rows are kept) are the store's bookkeeping
RECORD_FIELDS = ("id", "time", "kind", "message", "command", "n_episodes", "n_steps")


def public_record(rec: dict) -> dict:
    """The documented fields of version record ``rec`` (:data:`RECORD_FIELDS`), without the store's
    bookkeeping (``undo``)."""
    return {k: rec[k] for k in RECORD_FIELDS if k in rec}


def tags(store: StorageBackend) -> dict[str, int]:
    """Tag name -> version id."""
    rec = store.get_attrs("meta").get(TAGS)
    return {str(k): int(v) for k, v in rec.items()} if isinstance(rec, dict) else {}


def command_line() -> str:
    """The command that runs this process: ``replaybuf edit ...`` for the CLI, else the Python
    program and its arguments."""
    argv = list(sys.argv) or ["python"]
    name = argv[0].rsplit("/", 1)[-1]
    if name in ("replaybuf", "__main__.py") or name.endswith("replaybuf"):
        argv[0] = "replaybuf"
    elif name == "-c":  # python -c CODE: the code itself is not in argv
        return " ".join(["python", "-c", "..."] + [shlex.quote(a) for a in argv[1:]])
    return " ".join(shlex.quote(a) for a in argv)


def record(versions: list[dict], kind: str, message: str, n_episodes: int, n_steps: int,
           command: str | None = None) -> dict:
    """Append a new version record to ``versions`` (in place) and return it; the caller stores the
    list (:data:`VERSIONS`) in the same ``set_attrs`` as the commit it records, or after it."""
    rec = {"id": (int(versions[-1]["id"]) + 1) if versions else 0,
           "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "kind": kind, "message": message, "command": command_line() if command is None else command,
           "n_episodes": int(n_episodes), "n_steps": int(n_steps)}
    versions.append(rec)
    return rec


def note_appends(store: StorageBackend, n_episodes: int, n_steps: int, message: str | None = None,
                 force: bool = False, kind: str = "append") -> list[dict]:
    """Record the appends committed since the last version (one version of ``kind``: ``append``, or
    ``copy`` / ``merge`` for what those commands made), when the store's committed content
    (``n_episodes``, ``n_steps``) is not the last version's; with ``force`` also a store without
    versions gets its first record.  Returns the log as stored."""
    versions = log(store)
    last = versions[-1] if versions else None
    if last is not None and (int(last["n_episodes"]), int(last["n_steps"])) == (int(n_episodes), int(n_steps)):
        return versions
    if last is None and not force and not n_episodes:
        return versions
    if last is None:
        msg = message or f"{n_episodes} episodes, {n_steps} steps"
    else:
        added = int(n_episodes) - int(last["n_episodes"])
        msg = message or f"{added:+d} episodes ({n_episodes} episodes, {n_steps} steps)"
    record(versions, kind, msg, n_episodes, n_steps)
    store.set_attrs("meta", {VERSIONS: versions})
    return versions


def keeps_versions(store: StorageBackend) -> bool:
    """True when ``store`` keeps older versions (a backend with the versions group, and a log): what
    changes committed rows must then go through an edit (:mod:`.editing`), which keeps them."""
    from replaybuf_core.protocol import CAP_VERSIONS

    return CAP_VERSIONS in store.capabilities and bool(log(store))


def find(store: StorageBackend, version: Any, versions: list[dict] | None = None) -> int:
    """The index in :func:`log` of ``version``: a tag name, a version id (int or its digits), or a
    negative int counting from the newest (-1: the current version).  ``versions``: the log to look
    in (one the caller read, so that the index is one into that very list: ``gc`` may shorten the
    store's log at any time), else the store's log now.

    Raises VersionNotFoundError naming the known versions and tags."""
    versions = log(store) if versions is None else versions
    ids = [int(v["id"]) for v in versions]
    names = tags(store)
    if isinstance(version, str) and version in names:
        version = names[version]
    elif isinstance(version, str) and version.lstrip("-").isdigit():
        version = int(version)
    if isinstance(version, (int, np.integer)) and not isinstance(version, bool):
        v = int(version)
        if v < 0 and -v <= len(ids):
            return len(ids) + v
        if v in ids:
            return ids.index(v)
    known = f"versions {ids[0]}..{ids[-1]}" if ids else "no versions"
    raise VersionNotFoundError(f"the store has no version {version!r}: it has {known}"
                               + (f" and tags {sorted(names)}" if names else " and no tags")
                               + (" (gc may have dropped older ones)" if ids and ids[0] else ""))


#: kinds of version that only add rows after the version before them (it is their prefix: no undo needed)
APPEND_KINDS = frozenset({"append", "copy", "merge"})


def require_kept(versions: list[dict], index: int) -> None:
    """Check that version ``versions[index]`` can be read or restored: every edit after it kept the
    rows it changed (an ``undo``).  A backend without a versions group (zarr v2 stores, HDF5) logs
    its edits but keeps no undo, so the versions before an edit are gone from it.

    Raises VersionNotFoundError naming the version and the edit that did not keep it."""
    for j in range(int(index), len(versions) - 1):
        after = versions[j + 1]
        if after.get("kind") not in APPEND_KINDS and not isinstance(versions[j].get("undo"), dict):
            raise VersionNotFoundError(
                f"version {versions[index]['id']} cannot be read or restored: the {after.get('kind')} that made "
                f"version {after['id']} kept no copy of the rows it changed (this store's backend keeps no "
                f"older versions: a zarr v2 store or HDF5; `replaybuf log` still lists them)")


def tag(store: StorageBackend, name: str, version: Any = -1) -> int:
    """Name version ``version`` (default the current one) ``name`` (replacing what the name pointed
    at); returns its id.  Raises ValueError for an empty name or one made of digits (ids are),
    VersionNotFoundError for an unknown version."""
    if not isinstance(name, str) or not name.strip() or name.lstrip("-").isdigit():
        raise ValueError(f"a tag name must be a non-empty string that is not a number, got {name!r}")
    vid = int(log(store)[find(store, version)]["id"])
    store.set_attrs("meta", {TAGS: {**tags(store), name: vid}})
    return vid


def untag(store: StorageBackend, name: str) -> int:
    """Remove the tag ``name`` (the version stays, until a :func:`gc` drops it); returns the id it
    named.  Raises VersionNotFoundError naming the known tags."""
    names = tags(store)
    if name not in names:
        raise VersionNotFoundError(f"no tag {name!r}; " + (f"the tags are {sorted(names)}" if names else "the store has no tags"))
    vid = names.pop(name)
    store.set_attrs("meta", {TAGS: names})
    return vid


class GcReport:
    """What :func:`gc` did: ``dropped`` version ids (their undos deleted, their records gone),
    ``kept`` ids, ``held`` id -> the live readers that kept versions from being dropped (pids; on
    object storage ``"host H pid P"``), ``tagged`` id -> the tags that kept versions from being
    dropped, ``arrays`` deleted."""

    def __init__(self) -> None:
        self.dropped: list[int] = []
        self.kept: list[int] = []
        self.held: dict[int, list] = {}
        self.tagged: dict[int, list[str]] = {}
        self.arrays: list[str] = []

    def lines(self) -> list[str]:
        out = [f"dropped {len(self.dropped)} version(s)" + (f" ({self.dropped[0]}..{self.dropped[-1]})" if self.dropped else "")
               + f", kept {len(self.kept)}" + (f" ({self.kept[0]}..{self.kept[-1]})" if self.kept else ""),
               f"deleted {len(self.arrays)} undo array(s)"]
        for vid, pids in sorted(self.held.items()):
            who = (f"process(es) {pids}" if all(isinstance(p, int) for p in pids) else
                   f"reader(s) {'; '.join(map(str, pids))}")
            out.append(f"version {vid} is read by {who}: it and every newer version were kept (deferred)")
        for vid, names in sorted(self.tagged.items()):
            out.append(f"version {vid} is tagged {', '.join(map(repr, names))}: it and every newer version were kept "
                       f"(`replaybuf tag PATH NAME --delete` lets gc drop it)")
        return out


def gc(store: StorageBackend, keep: int | None = None, older_than: Any = None, store_dir: Any = None) -> GcReport:
    """Drop old versions: every version but the newest ``keep`` ones, or every one committed more than
    ``older_than`` (a ``datetime.timedelta``) ago — the current version always stays — and delete
    their undos, freeing what only they held.  A version a live reader holds (:mod:`.version_readers`:
    a lock file when ``store_dir`` is the store's local directory, else the backend's holds, e.g. on
    object storage) is never dropped, nor any newer one (their undos are what it reads): the drop is
    deferred and the report says by whom.  A tagged version is kept likewise, with every newer one
    (a tag pins what a training run read: git keeps tagged commits, and Apache Iceberg's
    ``expire_snapshots`` keeps snapshots a tag references); :func:`untag` it first.

    Crash-safe: the shortened log is written first (one attribute write), then the undo arrays go;
    a kill between leaves arrays no version names, deleted by the next ``gc`` or edit.

    Raises ValueError: neither or both of ``keep`` / ``older_than``, ``keep`` below 1.
    """
    from replaybuf_core.protocol import CAP_VERSIONS, VERSIONS_GROUP

    from .version_readers import held_store

    if (keep is None) == (older_than is None):
        raise ValueError("gc: give exactly one of keep (a number of versions) or older_than (a timedelta)")
    if keep is not None and (isinstance(keep, bool) or int(keep) < 1):
        raise ValueError(f"gc: keep must be at least 1 (the current version always stays), got {keep!r}")
    versions = log(store)
    rep = GcReport()
    if keep is not None:
        cut = max(0, len(versions) - int(keep))
    else:
        limit = _dt.datetime.now(_dt.timezone.utc) - older_than
        cut = 0
        while cut < len(versions) - 1 and _dt.datetime.fromisoformat(versions[cut]["time"]) < limit:
            cut += 1
    holds = held_store(store, store_dir)
    index = {int(v["id"]): i for i, v in enumerate(versions)}
    readers = {vid: pids for vid, pids in holds.items() if vid in index and index[vid] < cut}
    if readers:
        rep.held = readers
    for name, vid in sorted(tags(store).items()):
        if vid in index and index[vid] < cut:
            rep.tagged.setdefault(vid, []).append(name)
    if readers or rep.tagged:
        cut = min(index[vid] for vid in [*readers, *rep.tagged])
    dropped, left = versions[:cut], versions[cut:]
    rep.dropped = [int(v["id"]) for v in dropped]
    rep.kept = [int(v["id"]) for v in left]
    if dropped:
        store.set_attrs("meta", {VERSIONS: left})
    if CAP_VERSIONS not in store.capabilities or not store.has_group(VERSIONS_GROUP):
        return rep
    # a reader that took its hold before the log was cut reads its version's undo and every newer one
    holds = held_store(store, store_dir)
    late = [index[vid] for vid in holds if vid in set(rep.dropped)]
    still = dropped[min(late):] if late else []
    # ... and what an earlier gc kept for one
    rep.arrays = delete_unread_undos(store, still + left, lambda: holds, index)
    return rep


def delete_unread_undos(store: StorageBackend, named: list[dict], holds: Any, ids: Any) -> list[str]:
    """Delete the arrays of the versions group that are the undo of no version in ``named`` (version
    records) and that no live reader reads (:func:`late_reader_undos`); returns their names.  ``holds``:
    a callable giving version id -> readers (:func:`~.version_readers.held_store`), called only when
    some array is no named version's (a listing on object storage); ``ids``: the version ids of the
    log the holds are judged against."""
    from replaybuf_core.protocol import VERSIONS_GROUP

    prefixes = tuple(v["undo"][p] for v in named if isinstance(v.get("undo"), dict) for p in ("prefix", "meta_prefix"))
    nobodys = [n for n in store.list_arrays(VERSIONS_GROUP) if not (prefixes and n.startswith(prefixes))]
    if not nobodys:
        return []
    read = late_reader_undos(holds(), ids)
    gone = [n for n in nobodys if not read(n)]
    for name in gone:
        store.delete_array(VERSIONS_GROUP, name)
    return gone
