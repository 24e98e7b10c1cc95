"""What the viewer's routes answer from: one read-only :class:`~replaybuf_core.store.buffer.ReplayBuffer`
(followed when other processes commit), its :class:`~.catalog.EpisodeCatalog`, and the checks of
everything a URL or a request body names.  No web framework here: :mod:`.app` maps routes onto
:class:`Viewer`'s methods and :class:`HTTPProblem` onto a status and a message.

A store deleted (or moved) while it is shown answers 410 with the reason, never values the reads
invent: zarr reads a chunk that is not there as its fill value, so a frame that comes back all one
value is checked against the store before it is served (:meth:`Viewer.frame`)."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import numpy as np

from replaybuf_core.errors import CorruptStoreError, ReadOnlyError, StoreLockedError
from replaybuf_core.inspection.summary import jsonable
from replaybuf_core.inspection.view import image_keys
from replaybuf_core.store.buffer import ReplayBuffer
from replaybuf_core.store.commit import COMMIT_RECORD, read_generation

from .catalog import MASK_PREFIX, EpisodeCatalog
from .frames import FORMATS, display_range, encode_frame
from .marking import StoreChangedError, check_episodes, check_mask_name, edit_commands, save_mask, store_state
from .series import component_names

#: the read-only buffer's chunk cache: scrubbing back and forth decodes each chunk once
CACHE_BYTES = 256 << 20
#: how often (s, at most) the list, summary and episode pages look for commits by other processes
REFRESH_SECONDS = 2.0
#: an index in a URL: decimal digits, an optional minus (``int()`` would also take ``1_0`` and `` 1``)
_INDEX = re.compile(r"-?[0-9]{1,18}")


class HTTPProblem(Exception):
    """An error the page shows: ``status`` (4xx) and a message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _uniform(values: np.ndarray) -> bool:
    """True when every element of ``values`` is the same (a chunk that is not stored reads so)."""
    flat = values.reshape(-1)
    if flat.size == 0 or (flat == flat[0]).all():
        return True
    return flat.dtype.kind == "f" and bool(np.isnan(flat).all())


def parse_index(raw: str, what: str) -> int:
    """``raw`` as an index (:data:`_INDEX`); HTTPProblem 404 naming ``what`` otherwise."""
    if not isinstance(raw, str) or not _INDEX.fullmatch(raw):
        raise HTTPProblem(404, f"{what} {raw!r} is not an index (decimal digits, as in /{what}s/3)")
    return int(raw)


class Viewer:
    """The state behind the routes: the read-only buffer, its :class:`EpisodeCatalog`, a lock that
    serialises reads (the page asks for frames, series and pages at once), and the statistics,
    computed once per store state on a buffer of their own (the list and the player stay served
    meanwhile)."""

    def __init__(self, path: Any, writable: bool = False, storage_options: dict | None = None):
        self.path = path
        self.writable = bool(writable)
        self.storage_options = storage_options
        self.lock = threading.RLock()
        self._stats_lock = threading.Lock()
        self._stats: dict[str, dict] = {}  # by store state
        self._ranges: dict[str, tuple[float, float] | None] = {}
        self._gone: str | None = None  # why the store cannot be opened now (410), None while it can
        self._open(self._read_only())
        self._checked = time.monotonic()

    def _read_only(self) -> ReplayBuffer:
        if self.storage_options:
            return ReplayBuffer(self.path, read_only=True, storage_options=self.storage_options)
        return ReplayBuffer.create_from_path(self.path)

    def _open(self, rb: ReplayBuffer) -> None:
        rb.cache_bytes = CACHE_BYTES
        self.rb = rb
        self.generation = read_generation(rb.store)
        self.state = store_state(rb)  # what the page sends back with a save (:func:`.marking.store_state`)
        self._record = self._commit_record(rb)
        self.catalog = EpisodeCatalog(rb)
        self.cameras = image_keys(rb)
        self._ranges = {}

    @staticmethod
    def _commit_record(rb: ReplayBuffer) -> Any:
        """The commit record as stored now (read afresh: a cheap look at whether the store moved)."""
        return (rb.store.get_attrs("meta") or {}).get(COMMIT_RECORD)

    def refresh(self, force: bool = False) -> None:
        """Follow the store when another process committed since (appended, dropped, edited): at
        most every :data:`REFRESH_SECONDS` (``force``: now; while the store is gone: every call),
        read its commit record afresh (one small read) and, when it moved or cannot be read, reopen
        the store read-only and, when its episodes changed (:func:`.marking.store_state`), serve the
        new state (the page's saves then refuse stale marks).

        Raises HTTPProblem 410 naming the reason when the store cannot be opened any more (deleted
        or moved: FileNotFoundError, or half-deleted: CorruptStoreError / KeyError)."""
        if not force and self._gone is None and time.monotonic() - self._checked < REFRESH_SECONDS:
            return
        self._checked = time.monotonic()
        if not force and self._gone is None and self._unmoved():
            return
        try:
            rb = self._read_only()
        except (FileNotFoundError, CorruptStoreError, KeyError) as exc:
            reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            self._gone = (f"the store {self.path} is gone: {reason} (deleted or moved while the viewer showed it; "
                          "if an edit is replacing it, reload in a moment)")
            raise HTTPProblem(410, self._gone) from None
        self._gone = None
        if store_state(rb) != self.state:
            old = self.rb
            self._open(rb)
            old.close()
        else:
            rb.close()

    def explain_failure(self) -> None:
        """After a read of the store failed: HTTPProblem 410 when the store is gone (:meth:`refresh`),
        409 when it changed meanwhile (another process committed: the page should reload); returns
        when neither — the failure is then the viewer's own (a 500)."""
        with self.lock:
            before = self.state
            try:
                self.refresh(force=True)
            except HTTPProblem:
                raise
            except Exception:  # noqa: BLE001 - it cannot tell (an unreachable endpoint): the first error stands
                return
            if self.state != before:
                raise HTTPProblem(409, "the store changed while this was read (another process committed): "
                                       "reload the page")

    # ------------------------------------------------------------------ checks
    def episode(self, raw: str) -> int:
        """The episode index in a URL, 0-based; HTTPProblem 404 naming it and the count."""
        ep = parse_index(raw, "episode")
        n = self.catalog.n_episodes
        if not 0 <= ep < n:
            span = f" (0 to {n - 1})" if n else ""
            raise HTTPProblem(404, f"episode {ep} is out of range: the store has {n} episodes{span}")
        return ep

    # ------------------------------------------------------------------ answers
    def summary(self) -> dict[str, Any]:
        """``/api/summary``: ``{"path", "backend", "n_episodes", "n_steps", "fps" (Hz or None), "keys": [{"key",
        "shape" (step shape), "dtype", "camera"}], "cameras", "masks", "episode_meta" (per-episode meta
        names), "generation" (the store's edit generation), "state" (:func:`.marking.store_state`: what a save
        sends back), "writable"}``."""
        s = self.rb.store
        keys = [{"key": k, "shape": list(s.shape("data", k)[1:]), "dtype": str(np.dtype(s.dtype("data", k))),
                 "camera": k in self.cameras} for k in self.rb.keys()]
        return {"path": str(self.path), "backend": self.rb.backend, "n_episodes": self.catalog.n_episodes,
                "n_steps": self.rb.n_steps, "fps": self.catalog.fps, "keys": keys, "cameras": self.cameras,
                "masks": self.catalog.masks, "episode_meta": list(self.catalog.numeric) + self.catalog.text_names,
                "generation": self.generation, "state": self.state, "writable": self.writable}

    def episode_detail(self, ep: int) -> dict[str, Any]:
        """``/api/episodes/I``: the list row of episode ``ep`` (in range: :meth:`episode` checked it) plus
        ``"meta_full"`` (its string meta whole; ``episode_attrs`` parsed as JSON) and ``"cameras"``
        (``[{"key", "shape", "dtype", "display_range"}]``)."""
        row = self.catalog.rows(np.array([ep]))[0]
        s = self.rb.store
        full = {}
        for name in self.catalog.text_names:
            value = np.asarray(s.read("meta", name, ep, ep + 1), dtype=object)[0]
            value = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            try:
                full[name] = json.loads(value) if name == "episode_attrs" else value
            except ValueError:
                full[name] = value
        row["meta_full"] = full
        row["cameras"] = [{"key": k, "shape": list(s.shape("data", k)[1:]), "dtype": str(s.dtype("data", k)),
                           "display_range": self.display_range(k)} for k in self.cameras]
        return row

    def display_range(self, key: str) -> tuple[float, float] | None:
        """The one value range a camera's frames are scaled from for display (None: uint8, shown as
        stored), from frames spread over the store (:func:`.frames.display_range`), kept per key."""
        if key not in self._ranges:
            dtype = np.dtype(self.rb.store.dtype("data", key))
            rows = np.unique(np.linspace(0, self.rb.n_steps - 1, 16).astype(np.int64)) if self.rb.n_steps else None
            sample = self.rb.read_rows(key, rows, dtypes="stored") if rows is not None and dtype != np.uint8 else None
            self._ranges[key] = display_range(dtype, sample)
        return self._ranges[key]

    def frame(self, raw_ep: str, key: str, raw_step: str, fmt: str) -> bytes:
        """The bytes of step ``raw_step`` (0-based, in the episode) of camera ``key`` of episode
        ``raw_ep`` as ``fmt`` (:data:`.frames.FORMATS`).  HTTPProblem 404 for an unknown episode or
        camera or a step out of range (naming the episode's length), 400 for an unknown format,
        410 when the store is gone.

        A frame that reads as one value everywhere may be a chunk that is no longer stored (zarr
        reads it as its fill value): it is served only once the store's commit record is found
        unchanged; else the store is reopened (410 when gone) and the frame read from what it holds now."""
        if fmt not in FORMATS:
            raise HTTPProblem(400, f"format {fmt!r} is unknown; use one of {sorted(FORMATS)}")
        self.refresh()  # every few seconds: the store gone (410) or moved on (reopened)
        for attempt in range(2):
            ep = self.episode(raw_ep)
            if key not in self.cameras:
                raise HTTPProblem(404, f"{key!r} is not a camera of this store (cameras: {self.cameras})")
            length = int(self.catalog.lengths[ep])
            step = parse_index(raw_step, "step")
            if not 0 <= step < length:
                raise HTTPProblem(404, f"step {step} is out of range: episode {ep} has {length} steps "
                                       f"(0 to {length - 1})")
            row = int(self.catalog.starts[ep]) + step
            frame = self.rb.read_rows(key, np.array([row]), dtypes="stored")[0]
            if attempt or not _uniform(frame) or self._unmoved():
                return encode_frame(frame, fmt, value_range=self.display_range(key))
            self.refresh(force=True)
        raise AssertionError("unreachable")

    def _unmoved(self) -> bool:
        """True when the store's commit record is the one read at open (nothing committed or deleted since)."""
        try:
            return self._commit_record(self.rb) == self._record
        except Exception:  # noqa: BLE001 - a store that cannot say: look again (refresh)
            return False

    def stats(self) -> dict[str, Any]:
        """``{"keys": {key: {stat: values}}, "names": {key: component names or None}, "cameras":
        [...], "shapes": {key: step shape}}``: computed (or read from the store) once per store
        state, on a read-only buffer of its own, outside :attr:`lock`."""
        with self.lock:
            version, rb_shape = self.state, {k: list(self.rb.store.shape("data", k)[1:]) for k in self.rb.keys()}
            key_attrs = (self.rb.store.get_attrs("data") or {}).get("key_attrs") or {}
            cameras = list(self.cameras)
        with self._stats_lock:
            if version not in self._stats:
                rb = self._read_only()
                try:
                    values = rb.get_stats() if rb.n_episodes else {}
                finally:
                    rb.close()
                names = {k: component_names(key_attrs.get(k), int(np.prod(rb_shape[k], dtype=np.int64)))
                         for k in values}
                self._stats = {version: jsonable({"keys": values, "names": names, "cameras": cameras,
                                                  "shapes": {k: rb_shape[k] for k in values}})}
            return self._stats[version]

    def mask(self, name: str) -> dict[str, Any]:
        """``/api/masks/NAME``: ``{"name", "episodes" (the marked indices), "n_episodes"}``; HTTPProblem 404
        naming the masks there are when ``meta/mask.NAME`` is missing or not bool."""
        values = self.catalog.numeric.get(MASK_PREFIX + name)
        if values is None or values.dtype != np.bool_:
            raise HTTPProblem(404, f"no mask {name!r} (meta/{MASK_PREFIX}{name}); masks: {self.catalog.masks}")
        return {"name": name, "episodes": np.flatnonzero(values).tolist(), "n_episodes": int(values.size)}

    def save(self, name: str, body: Any) -> dict[str, Any]:
        """Save marks (see :func:`.marking.save_mask`); body ``{"episodes": [...], "state": S}`` with S the
        :func:`.marking.store_state` the page showed (``/api/summary``'s ``"state"``).  HTTPProblem 403
        (read-only viewer), 400 (a bad name, body or index), 409 (another writer, or the store's
        episodes changed since the page loaded: checked under the writer lock), 410 (store gone)."""
        if not self.writable:
            raise HTTPProblem(403, "this viewer is read-only: start it with `replaybuf serve STORE --writable` "
                                   "to save marks (or run the edit command shown)")
        if not isinstance(body, dict) or "episodes" not in body or "state" not in body:
            raise HTTPProblem(400, 'the body must be JSON {"episodes": [...], "state": S}, S the "state" of '
                                   "/api/summary when the page was loaded (the store's episodes the marks are for)")
        shown = body["state"]
        if not isinstance(shown, str):
            raise HTTPProblem(400, f"state must be the string /api/summary gave, got {shown!r:.80}")
        try:
            check_mask_name(name)
            mask = save_mask(self.path, name, body["episodes"], shown, self.storage_options)
        except (ValueError, TypeError, IndexError) as exc:
            raise HTTPProblem(400, str(exc)) from None
        except (StoreLockedError, StoreChangedError, ReadOnlyError) as exc:
            raise HTTPProblem(409, f"nothing was written: {exc}") from None
        except FileNotFoundError:
            self.refresh(force=True)  # 410 naming the reason
            raise
        if shown == self.state:
            self.catalog.set_mask(name, mask)
        else:  # the viewer had moved past the state saved to (which the store is back at): reopen
            self.refresh(force=True)
        episodes = np.flatnonzero(mask).tolist()
        return {"saved": f"meta/{MASK_PREFIX}{name}", "marked": int(mask.sum()), "n_episodes": int(mask.size),
                "state": shown, "commands": edit_commands(str(self.path), name, episodes)}

    def commands(self, params: Any) -> dict[str, str]:
        """``/api/commands?name&episodes=3,17``: :func:`.marking.edit_commands` for those marks;
        HTTPProblem 400 for a bad name or index."""
        name = params.get("name") or "marked"
        raw = params.get("episodes") or ""
        try:
            check_mask_name(name)
            episodes = [parse_index(e.strip(), "episode") for e in raw.split(",") if e.strip()]
            check_episodes(episodes, self.catalog.n_episodes)
        except (ValueError, TypeError, IndexError) as exc:
            raise HTTPProblem(400, str(exc)) from None
        except HTTPProblem as exc:
            raise HTTPProblem(400, str(exc)) from None
        return edit_commands(str(self.path), name, episodes)
