"""Buffered episode appends: each stored object (chunk or shard) written once.

``ReplayBuffer.add_episode`` writes every episode at once, so an episode that ends inside a chunk (or a
256-frame shard) makes the next one read, decode, re-encode and rewrite that object.  The
:class:`EpisodeWriter` stages episodes in memory and writes each data array in blocks aligned to its
stored-object length; an episode is committed (``meta/episode_ends``) once all of its rows are
stored, so the commit order of :mod:`replaybuf_core.store.buffer` holds: a crash loses only episodes not yet
committed, and the rows written past ``episode_ends[-1]`` are trimmed when the store is next opened.

Backends with the optional ``write_async`` verb (zarr) encode and store a block in the background
while the caller stages the next episodes: at most two blocks are in flight, and an episode is
committed when the writes holding its rows are done (seen at the next block or at ``flush``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import wait
from typing import Any

import numpy as np

from replaybuf_core.interrupts import deferred_sigint
from replaybuf_core.protocol import CAP_CHUNKS, CAP_SHARDS



class EpisodeWriter:
    """Stage episodes and write them as whole chunks/shards.  Use as a context manager::

        with buffer.writer() as w:
            for ep in episodes:
                w.add_episode(ep)

    Args:
        buffer: a writable :class:`~replaybuf_core.ReplayBuffer`.
        chunks / compressors / frames: as in ``add_episode``, for keys new to the buffer (``frames``:
            camera keys stored with a frame codec, e.g. ``frames="fast"`` to record JPEG q95 at a
            few ms a frame; checked when the first episode arrives).
        frames_per_shard: frames a shard for those new camera keys where the backend shards (default
            256).  The frames of a shard are encoded when it is complete or at a commit, so a short
            shard (about a second of frames) is what keeps a live recorder's ``end_episode``/``flush``
            quick; 256 suits bulk imports.  TypeError / ValueError (not a positive int) at once.
        max_staged_bytes: when staged rows exceed this (bytes, default 256 MiB), everything staged is
            written even if it ends inside a stored object (bounds memory for huge chunks).
        commit_interval: seconds (default 1.0) between two commits while episodes stream in.  Each
            key is written whenever it completes a stored object; a commit also writes the keys
            lagging behind (a number key whose long chunk is not full yet, rewritten whole each time)
            up to the furthest key, then appends the complete episodes to ``episode_ends``.  Episodes
            arriving slower than that commit at once; in a fast stream a crash loses about this much
            recording plus what is in flight, and an episode added less than this after a commit
            waits for the next ``add_episode`` or ``flush``.  0 commits at every stored object.

    ``add_episode`` validates like ``ReplayBuffer.add_episode`` (same errors, nothing staged on error).
    ``flush()`` writes everything staged, including partial objects, and commits every staged episode;
    ``close()`` and leaving the ``with`` block flush.  Leaving the block by an exception (Ctrl-C, a
    camera error) still writes and commits the episodes already added — they were validated and are
    complete — and then re-raises; only when that flush fails too are the uncommitted rows dropped.

    With a backend that writes in the background (``write_async``), a block's encoding overlaps the
    staging of the next episodes; episodes are committed once their rows are stored, at the latest by
    the next block's ``add_episode`` or by ``flush``.  A failed background write makes the writer
    unusable: that ``add_episode``/``flush`` raises it, later calls raise ``RuntimeError``, and the
    uncommitted rows are dropped when the ``with`` block is left.
    """

    def __init__(self, buffer: Any, chunks: Mapping | None = None, compressors: Mapping | None = None,
                 max_staged_bytes: int = 256 * 2**20, commit_interval: float = 1.0, frames: Any = None,
                 frames_per_shard: int | None = None):
        buffer._require_writable()  # also refuses a second writer on the same buffer
        if not commit_interval >= 0:
            raise ValueError(f"commit_interval must be >= 0 seconds, got {commit_interval!r}")
        self._rb = buffer
        self._chunks = dict(chunks or {})
        self._compressors = dict(compressors or {})
        if frames is not None:
            from replaybuf_core.layout.frame_choice import parse_frames

            parse_frames(frames)  # a codec name that does not parse is refused now, not at the first episode
        self._frames = frames
        if frames_per_shard is not None:
            from replaybuf_core.layout.sharding import validate_image_frames_per_shard

            validate_image_frames_per_shard(frames_per_shard)  # TypeError / ValueError now, not at the first episode
        self._frames_per_shard = frames_per_shard
        self._max_staged = int(max_staged_bytes)
        self._pending: dict[str, list[np.ndarray]] = {}
        self._written: dict[str, int] = {}  # rows on storage per key (buffer.n_steps + flushed)
        self._obj_len: dict[str, int] = {}
        self._ends: list[int] = []  # staged (uncommitted) episode ends
        self._staged_bytes = 0
        self._closed = False
        self._open_rows = 0  # rows staged by add_steps for the episode end_episode will close
        self._durable: dict[str, int] = {}  # rows known to be stored per key
        self._inflight: deque = deque()  # (futures, rows written per key once they are done)
        self._failed: BaseException | None = None
        self._commit_interval = float(commit_interval)
        self._last_commit = -float("inf")  # the first episode commits at once
        self._mutex = threading.RLock()  # threads sharing this writer take turns
        buffer._open_writer = self  # until close: the buffer refuses other changes meanwhile

    # -- public -----------------------------------------------------------------------------------
    @property
    def n_staged_episodes(self) -> int:
        """Episodes added but not yet committed to ``meta/episode_ends``."""
        return len(self._ends)

    def add_episode(self, data: Mapping[str, Any]) -> None:
        """Stage one episode (key → array (T, ...)); raises what ``ReplayBuffer.add_episode`` raises.
        A Ctrl-C meanwhile is raised when the episode is staged (and written where due)."""
        with self._mutex:
            if self._closed:
                raise RuntimeError("this EpisodeWriter is closed")
            self._check_not_failed()
            with deferred_sigint():
                self._add_episode(data)

    def add_steps(self, data: Mapping[str, Any], copy: bool = True) -> None:
        """Stage the next steps (key → array (n, ...), n >= 1) of an episode that :meth:`end_episode`
        closes: an episode too long to hold in memory (minutes of 480×640 frames) streams in parts.
        Validated like an episode (every key, equal lengths, matching step shapes and dtypes); the
        rows are written as their stored objects fill, but committed only with the episode.
        ``copy=False``: the writer may keep the arrays handed in (the caller promises not to change
        them), which saves a copy of every staged row (the importer streams this way)."""
        with self._mutex:
            if self._closed:
                raise RuntimeError("this EpisodeWriter is closed")
            self._check_not_failed()
            with deferred_sigint():
                self._add_episode(data, end=False, copy=copy)

    def end_episode(self) -> None:
        """Close the episode whose parts :meth:`add_steps` staged (it commits like an added episode).

        Raises:
            ValueError: no steps were staged since the last episode ended.
        """
        with self._mutex:
            self._check_not_failed()
            if self._open_rows == 0:
                raise ValueError("end_episode: no steps were added since the last episode ended "
                                 "(a zero-length episode holds no steps and is rejected)")
            with deferred_sigint():
                end = (self._ends[-1] if self._ends else self._rb.n_steps) + self._open_rows
                self._open_rows = 0
                self._ends.append(end)
                self._write(aligned=self._staged_bytes < self._max_staged)

    def discard_episode(self) -> int:
        """Drop the episode :meth:`add_steps` has begun (its staged rows, and those already written
        past the staged episodes: the next episode's rows take their place); episodes already ended
        are kept.  Waits for the writes in flight first.  Returns the rows dropped (0 when no
        episode is open)."""
        with self._mutex:
            self._check_not_failed()
            if self._open_rows == 0:
                return 0
            with deferred_sigint():
                self._settle(keep=0)
                start = self._ends[-1] if self._ends else self._rb.n_steps
                for key, parts in self._pending.items():
                    if self._written[key] > start:  # written rows of the dropped episode: overwritten later
                        self._pending[key] = []
                        self._written[key] = start
                        self._durable[key] = min(self._durable[key], start)
                    else:
                        block = np.concatenate(parts) if len(parts) > 1 else (parts[0] if parts else None)
                        keep = start - self._written[key]
                        self._pending[key] = [block[:keep]] if block is not None and keep else []
                    if self._rb.store.shape("data", key)[0] > start:
                        self._rb.store.resize("data", key, start)
                dropped, self._open_rows = self._open_rows, 0
                self._staged_bytes = sum(sum(p.nbytes if p.dtype != object else 64 * p.size for p in parts)
                                         for parts in self._pending.values())
                return dropped

    def stored_rows(self) -> dict[str, int]:
        """key → rows of the data array already on storage (written and, for background writes,
        finished), committed or not: an importer may read them back and check them before the
        episode commits.  Empty before the first episode."""
        with self._mutex:
            return dict(self._durable)

    def _add_episode(self, data: Mapping[str, Any], end: bool = True, copy: bool = True) -> None:
        if end and self._open_rows:
            raise ValueError("add_episode: an episode begun with add_steps is still open; call "
                             "end_episode() first")
        rb = self._rb
        if not self._written and not rb.keys():
            # the first episode of an empty buffer creates the arrays (through the buffer's rules)
            arrays, length, layouts = rb._validate_episode(data, self._chunks, self._compressors, self._frames,
                                                          self._frames_per_shard)
            rb._create_arrays(arrays, layouts, n_rows=0)
        arrays, length, _ = rb._validate_episode(data, None, None, self._frames)
        if self._ends:
            self._check_keys(arrays)
        if not self._written:
            self._start()
        for key, arr in arrays.items():
            if copy and np.may_share_memory(arr, data[key]):  # the caller may refill its array for the next episode
                arr = arr.copy()
            parts = self._pending[key]
            parts.append(arr)
            if len(parts) >= 16:  # many small parts (a recorder's blocks): one array, so counting them stays cheap
                parts[:] = [np.concatenate(parts)]
            self._staged_bytes += arr.nbytes if arr.dtype != object else 64 * arr.size
        if not end:
            self._open_rows += length
        else:
            self._ends.append((self._ends[-1] if self._ends else rb.n_steps) + length)
        self._write(aligned=self._staged_bytes < self._max_staged)

    def flush(self) -> None:
        """Write every staged row (partial objects included) and commit every staged episode
        (Ctrl-C meanwhile is raised once they are committed)."""
        with self._mutex:
            self._check_not_failed()
            if self._written:
                with deferred_sigint():
                    self._write(aligned=False)

    def close(self) -> None:
        """Flush and stop accepting episodes; when that flush fails, the uncommitted rows are
        dropped (as the next open would) and the error re-raised."""
        with self._mutex:
            if not self._closed:
                self._closed = True
                try:
                    self.flush()
                    if self._open_rows:  # an episode begun with add_steps and never ended
                        self._trim_uncommitted()
                except BaseException:
                    self._trim_uncommitted()
                    raise
                finally:
                    self._release()

    def _release(self) -> None:
        if getattr(self._rb, "_open_writer", None) is self:
            self._rb._open_writer = None

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        with self._mutex:
            self._closed = True
            try:  # keep every complete episode the caller handed over
                self.flush()
                if self._open_rows:
                    self._trim_uncommitted()
            except BaseException:
                self._trim_uncommitted()
            finally:
                self._release()

    # -- internals ----------------------------------------------------------------------------------
    def _check_not_failed(self) -> None:
        if self._failed is not None:
            raise RuntimeError(f"this EpisodeWriter stopped: a background write failed ({self._failed!r})") \
                from self._failed

    def _check_keys(self, arrays: Mapping[str, np.ndarray]) -> None:
        missing = sorted(set(self._pending) - set(arrays))
        if missing:  # pragma: no cover - _validate_episode already compares with the stored keys
            raise ValueError(f"episode keys differ from the buffer's: missing {missing}")

    def _start(self) -> None:
        rb = self._rb
        s = rb.store
        for key in rb.keys():
            self._pending[key] = []
            self._written[key] = rb.n_steps
            self._durable[key] = rb.n_steps
            obj = None
            if CAP_SHARDS in s.capabilities:
                shards = s.shards("data", key)
                obj = shards[0] if shards else None
            if obj is None and CAP_CHUNKS in s.capabilities:
                obj = s.chunks("data", key)[0]
            self._obj_len[key] = int(obj or 1)

    def _write(self, aligned: bool) -> None:
        """Write staged rows: with ``aligned``, each key up to its last whole stored object — and the
        keys lagging behind (a long-chunked number key beside 256-frame image shards) up to the
        furthest key, so episodes commit at least once per completed object and staging stays
        about one object deep; without ``aligned``, everything."""
        rb = self._rb
        rb._fence()  # a writer that lost its object store's lease writes no more objects (StoreLockedError)
        s = rb.store
        write_async = getattr(s, "write_async", None)
        futures: list = []
        wrote = False
        avail = {k: self._written[k] + sum(len(p) for p in parts) for k, parts in self._pending.items()}
        if aligned:
            stops = {k: (a // self._obj_len[k]) * self._obj_len[k] for k, a in avail.items()}
            if self._ends and time.monotonic() - self._last_commit >= self._commit_interval:  # episodes wait to commit
                target = max([stop for k, stop in stops.items() if stop > self._written[k]], default=0)
                stops = {k: max(stop, min(target, avail[k])) for k, stop in stops.items()}
        else:
            stops = avail
        try:
            for key, parts in self._pending.items():
                start, stop = self._written[key], stops[key]
                if not parts or stop <= start:
                    continue
                block = np.concatenate(parts) if len(parts) > 1 else parts[0]
                n = stop - start
                if s.shape("data", key)[0] < stop:  # grow by whole objects: one resize an object, not a call
                    obj = self._obj_len[key]
                    s.resize("data", key, -(-stop // obj) * obj if aligned else stop)
                if write_async is not None:
                    futures.append(write_async("data", key, start, block[:n]))
                else:
                    s.write("data", key, start, block[:n])
                rest = block[n:]
                self._pending[key] = [rest] if len(rest) else []
                self._written[key] = stop
                wrote = True
        except Exception as exc:  # a failed write (disk full...): no later commit may count on it
            self._inflight.append((futures, dict(self._written)))
            self._failed = exc
            self._wait_all()
            raise
        except BaseException:  # Ctrl-C mid-block: keep what was started; flush() goes on from there
            if futures:
                self._inflight.append((futures, dict(self._written)))
            raise
        if not aligned:  # everything is written: no capacity past the rows (a reader sees no stray rows)
            for key in self._pending:
                if s.shape("data", key)[0] > self._written[key]:
                    s.resize("data", key, self._written[key])
        self._staged_bytes = sum(
            sum(p.nbytes if p.dtype != object else 64 * p.size for p in parts) for parts in self._pending.values()
        )
        if wrote:
            self._inflight.append((futures, dict(self._written)))
        self._settle(keep=1 if aligned else 0)
        self._commit()

    def _settle(self, keep: int) -> None:
        """Take in the finished background writes (oldest first), waiting until at most ``keep``
        blocks are in flight.  A failed write stops the writer (after every write in flight ended)."""
        while self._inflight:
            futures, written = self._inflight[0]
            if len(self._inflight) <= keep and not all(f.done() for f in futures):
                return
            wait(futures)
            self._inflight.popleft()
            for f in futures:
                if f.exception() is not None:
                    self._failed = f.exception()
                    self._wait_all()
                    raise self._failed
            self._durable = written

    def _wait_all(self) -> None:
        while self._inflight:
            wait(self._inflight.popleft()[0])

    def _commit(self) -> None:
        if self._failed is not None:
            return
        committed = self._rb.n_steps
        while self._ends and self._ends[0] <= committed:  # committed already (an interrupted _commit)
            del self._ends[0]
        done = min(self._durable.values()) if self._durable else self._rb.n_steps
        k = 0
        while k < len(self._ends) and self._ends[k] <= done:
            k += 1
        if k:
            self._rb._commit_episode_ends(np.asarray(self._ends[:k], dtype=np.int64))
            del self._ends[:k]
            self._last_commit = time.monotonic()

    def _trim_uncommitted(self) -> None:
        """After an error: drop rows written past the last committed episode (as opening would)."""
        self._wait_all()
        rb = self._rb
        n = rb.n_steps
        for key in rb.keys():
            if rb.store.shape("data", key)[0] > n:
                rb.store.resize("data", key, n)
        self._pending.clear()
        self._ends.clear()
        self._open_rows = 0
