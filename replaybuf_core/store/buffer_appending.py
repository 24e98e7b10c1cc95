"""The appending verbs of :class:`~replaybuf_core.ReplayBuffer`: ``add_episode`` (validate, write the
rows, commit ``meta/episode_ends``), the buffered :meth:`writer`, ``drop_episode`` / ``pop_episode``,
and the commit itself (rows durable, then the ends, then the commit record).  A mixin: it uses the
buffer's ``_store``, ``_ends``, ``_n_ep``, ``_mutex``, ``_require_writable`` and ``keys``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from replaybuf_core.errors import EmptyBufferError
from replaybuf_core.layout.chunks import check_chunks_compatible, get_optimal_chunks
from replaybuf_core.layout.compressors import resolve_compressor as _resolve_compressor
from replaybuf_core.layout.keys import check_key
from replaybuf_core.protocol import CAP_SHARDS

from .buffer_checks import _as_episode_array, _serialized
from .commit import EPISODE_ENDS, EPISODE_META, read_generation, write_commit_record
from .writer import EpisodeWriter

logger = logging.getLogger("replaybuf_core.store.buffer")


class EpisodeAppending:
    """``ReplayBuffer``'s append and drop methods (see the class docstring there)."""

    def _validate_episode(self, data: Mapping[str, Any], chunks, compressors, frames: Any = None,
                          frames_per_shard: int | None = None):
        if not isinstance(data, Mapping):
            raise TypeError(f"an episode must be a dict of arrays, got {type(data).__name__}")
        if len(data) == 0:
            raise ValueError("an episode needs at least one key; got an empty dict")
        arrays: dict[str, np.ndarray] = {}
        length = None
        for key, value in data.items():
            check_key(key)
            arr = _as_episode_array(key, value)
            if length is None:
                length, first = arr.shape[0], key
            elif arr.shape[0] != length:
                raise ValueError(f"episode lengths differ: {first!r} has {length} steps, {key!r} has "
                                 f"{arr.shape[0]}")
            arrays[key] = arr
        if length == 0:
            raise ValueError("a zero-length episode holds no steps and is rejected")
        s = self._store
        existing = self.keys()
        if existing:
            missing = sorted(set(existing) - set(arrays))
            extra = sorted(set(arrays) - set(existing))
            if missing or extra:
                raise ValueError(f"episode {self._n_ep} keys differ from the buffer's: missing {missing}, "
                                 f"extra {extra} (every episode must carry every data key)")
            for key, arr in arrays.items():
                shape, dtype = s.shape("data", key), np.dtype(s.dtype("data", key))
                if tuple(arr.shape[1:]) != tuple(shape[1:]):
                    raise ValueError(f"data key {key!r}: step shape {arr.shape[1:]} differs from the "
                                     f"stored {tuple(shape[1:])}")
                source = self.source_dtypes.get(key)
                if source is not None and arr.dtype != dtype and np.can_cast(arr.dtype, source, casting="same_kind"):
                    arrays[key] = self._as_stored(key, arr.astype(source, copy=False), dtype)  # exact, or ValueError
                    continue
                if (dtype == object) != (arr.dtype == object) or (
                        dtype != object and not np.can_cast(arr.dtype, dtype, casting="same_kind")):
                    raise TypeError(f"data key {key!r}: dtype {arr.dtype} cannot be stored in the existing "
                                    f"{dtype} array")
        for k in (chunks or {}):
            if k not in arrays:
                raise KeyError(f"chunks given for {k!r}, which is not in the episode")
        for k, c in (compressors or {}).items():
            if k not in arrays:
                raise KeyError(f"compressor given for {k!r}, which is not in the episode")
            _resolve_compressor(c)  # an unknown preset is an error even for an existing key
        new_frames = self._frame_layouts(arrays, existing, chunks, compressors, frames, frames_per_shard)
        layouts = {}
        for key, arr in arrays.items():
            if key in existing:
                continue
            if key in new_frames:
                layouts[key] = new_frames[key]
                continue
            ck = (chunks or {}).get(key)
            if ck is not None:
                check_chunks_compatible(ck, arr.shape, arr.dtype.itemsize)
                ck = tuple(int(c) for c in ck)
            else:
                ck = get_optimal_chunks(arr.shape, arr.dtype if arr.dtype != object else np.dtype("O"))
            codec = _resolve_compressor((compressors or {}).get(key, "default"))
            if arr.dtype == object and key not in (compressors or {}):
                codec = None
            layouts[key] = (ck, codec, None)
        return arrays, length, layouts

    def _frame_layouts(self, arrays: Mapping[str, np.ndarray], existing: list[str], chunks, compressors,
                       frames: Any, frames_per_shard: int | None = None) -> dict[str, tuple]:
        """key → (chunks, frame codec, shards) of the camera keys new to the buffer that ``frames``
        covers (:func:`~replaybuf_core.layout.frame_choice.choose_frames`); {} when ``frames`` is None.
        A key named both in ``frames`` and ``compressors`` is a ValueError; an explicit compressor
        wins over a bare / ``"*"`` choice."""
        if frames is None:
            return {}
        from replaybuf_core.layout.frame_choice import choose_frames, parse_frames
        from replaybuf_core.layout.frames import is_frames
        from replaybuf_core.layout.sharding import DEFAULT_IMAGE_FRAMES_PER_SHARD, frame_chunk_shape, frame_shard_shape

        cameras = {k: (a.shape, a.dtype) for k, a in arrays.items() if a.dtype != object and is_frames(a.shape, a.dtype)}
        if not cameras:
            raise ValueError(f"frames={frames!r}: the episode holds no camera frames (uint8 (T, H, W, C), C in 1, 3, "
                             f"4); its keys: {[f'{k} {a.dtype} {a.shape}' for k, a in arrays.items()]}")
        named = [k for k in parse_frames(frames) if k != "*"]
        both = sorted(set(named) & set(compressors or {}))
        if both:
            raise ValueError(f"frames and compressors both name {both}: give each key one of them")
        choices = choose_frames(frames, cameras)
        make = getattr(self._store, "image_codec", None)
        if make is None:
            from replaybuf_core.errors import CapabilityError

            raise CapabilityError(f"frames: the {self.backend!r} backend has no frame codecs (image_codec); "
                                  f"store {sorted(choices)} with compressors instead")
        from .rechunk import _same_codec

        for key in [k for k in choices if k in existing]:  # a stored key keeps its codec: never a silent other
            if not _same_codec(self._store, key, make(choices[key])):
                raise ValueError(f"frames: {key!r} is stored as {self._store.codec('data', key)}, not "
                                 f"{choices[key]}; appends keep a key's codec — convert it first with "
                                 f"rb.set_frames({{{key!r}: {str(choices[key])!r}}}) (CLI: rechunk --frames)")
        choices = {k: c for k, c in choices.items() if k not in existing and k not in (compressors or {})}
        if not choices:
            return {}
        out = {}
        for key, choice in choices.items():
            codec = make(choice)
            ck = frame_chunk_shape(arrays[key].shape, codec)
            given = (chunks or {}).get(key)
            if given is not None and tuple(int(c) for c in given) != ck:
                raise ValueError(f"data key {key!r}: frame codec {choice} stores {ck[0]} frame(s) a chunk, chunks "
                                 f"must be {ck}, got {tuple(given)}")
            shards = (frame_shard_shape(ck, frames_per_shard or DEFAULT_IMAGE_FRAMES_PER_SHARD)
                      if CAP_SHARDS in self._store.capabilities else None)
            out[key] = (ck, codec, shards)
        return out

    @_serialized
    def add_episode(self, data: Mapping[str, Any], chunks: dict | None = None,
                    compressors: dict | None = None, frames: Any = None) -> None:
        """Append one episode.

        Args:
            data: key → array of shape (T, ...) (T ≥ 1, same T for all keys). ``str`` arrays allowed.
            chunks: chunk shapes for keys new to the buffer (default: ``get_optimal_chunks`` of the
                episode's shape, the seed's rule).
            compressors: codecs / preset names for new keys (default: the ``"default"`` preset).
            frames: frame codecs for camera keys new to the buffer (uint8 ``(T, H, W, C)``, C in 1, 3,
                4): ``"exact"``, ``"fast"``, ``"jpeg:90"``, ``"KEY=CHOICE,...,*=CHOICE"`` or a mapping
                (:mod:`replaybuf_core.layout.frame_choice`); each such key is stored one frame a chunk
                (in shards of 256 frames where the backend shards).  None (the default) keeps the
                seed's rule: camera keys get ``compressors`` like any other key (Blosc).

        Raises:
            ValueError: empty dict, 0-d value, ragged lengths, zero length, keys differing from the
                buffer's, a step-shape change, a bad key name or chunk value; ``frames`` naming a key
                that is not camera frames, an unknown codec, JPEG on RGBA, a key in both ``frames``
                and ``compressors``, chunks other than one frame for a frame codec.
            CapabilityError: ``frames`` on a backend without frame codecs (numpy).
            TypeError: dtype that cannot be stored (see module doc), object arrays not of str.
            ReadOnlyError: the buffer is read-only.
        Nothing is written when an error is raised.  Commit: data rows, then ``episode_ends``.
        """
        self._require_writable()
        arrays, length, layouts = self._validate_episode(data, chunks, compressors, frames)
        s = self._store
        start, stop = self.n_steps, self.n_steps + length
        written: list[str] = []
        try:
            self._create_arrays(arrays, layouts, n_rows=stop)
            written.extend(layouts)
            for key, arr in arrays.items():
                if key not in layouts:
                    s.resize("data", key, stop)
                    written.append(key)
                s.write("data", key, start, arr)
        except BaseException:
            for key in written:  # roll back what this call grew; best effort
                try:
                    if key in layouts:
                        s.delete_array("data", key)
                    else:
                        s.resize("data", key, start)
                except Exception:  # pragma: no cover - the original error matters more
                    logger.exception("rollback of %s failed", key)
            raise
        self._commit_episode_end(stop)

    def _create_arrays(self, arrays: Mapping[str, np.ndarray], layouts: Mapping[str, tuple], n_rows: int) -> None:
        """Create the data arrays named in ``layouts`` ((chunks, codec, shards) per key) with ``n_rows`` rows."""
        for key, (ck, codec, shards) in layouts.items():
            arr = arrays[key]
            self._store.create_array("data", key, shape=(n_rows,) + arr.shape[1:], dtype=arr.dtype,
                                     chunks=ck, codec=codec, **({"shards": shards} if shards else {}))

    def _persist(self) -> None:
        """Ask the backend to make the commit survive a kill (optional ``persist`` verb)."""
        persist = getattr(self._store, "persist", None)
        if callable(persist):
            persist()

    def _commit_episode_end(self, end: int) -> None:
        self._commit_episode_ends(np.array([end], dtype=np.int64))

    def _commit_episode_ends(self, ends: np.ndarray) -> None:
        """Append ``ends`` (int64, increasing, all data rows already written) to ``meta/episode_ends``:
        the commit point of every append."""
        self._fence()  # a writer whose lease was broken or lapsed commits nothing (StoreLockedError)
        s = self._store
        k = len(ends)
        self._write_staged_meta(self._n_ep, self._n_ep + k)  # the episodes' meta rows before their ends
        # each step durable before the next (a backend buffering writes may flush them in any
        # order, and a kill can land mid-flush): the rows, then the ends, then the record
        self._persist()
        if self._n_ep + k > self._ends.size:
            grown = np.empty(max(16, 2 * self._ends.size, self._n_ep + k), dtype=np.int64)
            grown[: self._n_ep] = self._ends[: self._n_ep]
            self._ends = grown
        s.resize("meta", EPISODE_ENDS, self._n_ep + k)
        s.write("meta", EPISODE_ENDS, self._n_ep, ends)
        self._ends[self._n_ep: self._n_ep + k] = ends
        self._n_ep += k
        self._idx_cache = None
        self._persist()
        write_commit_record(s, self._n_ep, int(ends[-1]))  # after the ends: it never claims more
        self._persist()

    def _stage_episode_meta(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Per-episode meta rows of episodes still to come, known up front (an import): ``arrays``
        maps a meta array (created beforehand with 0 rows past the committed episodes) to one row per
        episode, the first for the next episode committed.  Each commit writes the rows of the
        episodes it commits, before their ``episode_ends``: the meta grows with the commits and never
        describes an uncommitted episode.  The names go in the ``meta`` attribute
        :data:`~replaybuf_core.store.commit.EPISODE_META`, so recovery trims rows a kill left staged.

        Raises:
            ValueError: an array named is missing, or holds other rows than the committed episodes.
        """
        s = self._store
        for name in arrays:
            if not s.has_array("meta", name) or s.shape("meta", name)[0] != self._n_ep:
                raise ValueError(f"meta/{name} must exist with one row per committed episode ({self._n_ep}) "
                                 "before rows of later episodes are staged")
        names = sorted(set(s.get_attrs("meta").get(EPISODE_META, [])) | set(arrays))
        s.set_attrs("meta", {EPISODE_META: names})
        self._staged_meta = {name: (self._n_ep, np.asarray(v)) for name, v in arrays.items()}

    def _write_staged_meta(self, first: int, stop: int) -> None:
        """Write the staged meta rows of episodes ``[first, stop)`` (see :meth:`_stage_episode_meta`)."""
        s = self._store
        for name, (origin, values) in getattr(self, "_staged_meta", {}).items():
            lo, hi = max(first, origin), min(stop, origin + len(values))
            if hi > lo:
                s.resize("meta", name, hi)
                s.write("meta", name, lo, values[lo - origin: hi - origin])

    @_serialized
    def writer(self, chunks: Mapping | None = None, compressors: Mapping | None = None,
               max_staged_bytes: int = 256 * 2**20, commit_interval: float = 1.0,
               frames: Any = None, frames_per_shard: int | None = None) -> EpisodeWriter:
        """A buffered appender that writes each chunk/shard once (see
        :class:`replaybuf_core.store.writer.EpisodeWriter` for the arguments); use it as a context manager.

        Raises ReadOnlyError on a read-only buffer; ValueError for a negative ``commit_interval``."""
        return EpisodeWriter(self, chunks=chunks, compressors=compressors, max_staged_bytes=max_staged_bytes,
                             commit_interval=commit_interval, frames=frames, frames_per_shard=frames_per_shard)

    def extend(self, data: Mapping[str, Any]) -> None:
        """Append ``data`` as one episode (the seed's alias of :meth:`add_episode`)."""
        self.add_episode(data)

    @_serialized
    def drop_episode(self) -> None:
        """Remove the last episode.  Order: the commit record, then ``episode_ends``, then the data
        rows, each made durable (``persist``) before the next, so a kill leaves the episode or not.
        On a store that keeps versions (:mod:`replaybuf_core.store.versions`) it is
        ``delete_episodes([-1])``: a version, the episode kept in the previous version's undo.

        Raises:
            EmptyBufferError (a ValueError and an IndexError): the buffer is empty.
            ReadOnlyError: read-only buffer.
        """
        self._require_writable()
        if self._n_ep == 0:
            raise EmptyBufferError("drop_episode on an empty buffer (0 episodes)")
        from .versions import keeps_versions

        if keeps_versions(self._store):  # older versions read these rows: an edit keeps them as an undo
            self.delete_episodes([self._n_ep - 1], message="drop_episode")
            return
        from .lossy_frames import lossy_keys, measure_tail
        from .stored_stats import EditPlan

        s = self._store
        plan = EditPlan(self, np.array([self._n_ep - 1]), {}, lossy_keys(s, self.keys()))
        new_steps = int(self._ends[self._n_ep - 2]) if self._n_ep > 1 else 0
        # the shrink re-encodes the kept frames of a lossy key's last chunk: their statistics follow
        measured = {k: measure_tail(s, k, new_steps) for k in plan.lossy}
        # each step durable before the next overwrites anything (a backend buffering writes may put
        # a shrink's fill values on disk before its new length): record, then ends, then data
        # before the ends: it never claims more; the next generation, as an edit's: stats entries of the
        # episodes before are never trusted again, even once an append makes the ends read the same
        write_commit_record(s, self._n_ep - 1, new_steps, generation=read_generation(s) + 1)
        self._persist()
        s.resize("meta", EPISODE_ENDS, self._n_ep - 1)
        self._n_ep -= 1
        self._idx_cache = None
        self._persist()
        for key in self.keys():
            s.resize("data", key, new_steps)
        self._persist()
        plan.rewritten = {k: after() for k, after in measured.items()}
        plan.apply()

    @_serialized
    def pop_episode(self) -> dict[str, np.ndarray]:
        """Remove the last episode and return it (a copy: key → array (T, ...)).

        Raises:
            EmptyBufferError (a ValueError and an IndexError): the buffer is empty.
            ReadOnlyError: read-only buffer.
        """
        self._require_writable()
        if self._n_ep == 0:
            raise EmptyBufferError("pop_episode on an empty buffer (0 episodes)")
        episode = self.get_episode(self._n_ep - 1, copy=True)
        self.drop_episode()
        return episode
