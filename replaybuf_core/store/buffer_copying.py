"""The copying verbs of :class:`~replaybuf_core.ReplayBuffer`: ``copy_from_store``, ``copy_from_path``,
``save_to_store``, ``save_to_path`` and their layout resolution (chunks, codecs, shards of the copy).
A mixin: it uses the buffer's ``_store``, ``_n_ep``, ``keys()`` and ``episode_ends``."""

from __future__ import annotations

import logging
import os
from typing import Any, Self

import numpy as np

from replaybuf_core import registry
from replaybuf_core.layout.chunks import check_chunks_compatible, get_optimal_chunks, row_bytes
from replaybuf_core.layout.compressors import resolve_compressor as _resolve_compressor
from replaybuf_core.layout.sharding import frame_chunk_shape, frame_shard_shape
from replaybuf_core.locations import check_apart, is_object_url, local_path
from replaybuf_core.protocol import CAP_CHUNKS, CAP_CODECS, CAP_SHARDS, CAP_VERSIONS, VERSIONS_GROUP, StorageBackend

from .versions import TAGS, VERSIONS, delete_unread_undos, note_appends
from .commit import COMMIT_RECORD, EPISODE_ENDS, read_generation, write_commit_record
from .copying import copy_array
from .lossy_frames import lossy_keys
from .progress import progress_bar
from .replace import build_beside, holding_lock
from .stored_stats import rehistogram


logger = logging.getLogger("replaybuf_core.store.buffer")

IF_EXISTS = ("replace", "raise", "skip")


class StoreCopying:
    """``ReplayBuffer``'s copy and save methods (see the class docstring there)."""

    @classmethod
    def copy_from_store(
        cls,
        src_store: Any,
        store: Any = None,
        keys: list[str] | None = None,
        chunks: dict[str, tuple[int, ...]] | None = None,
        compressors: dict[str, Any] | None = None,
        if_exists: str = "replace",
        backend: str | None = None,
        **kwargs: Any,
    ) -> Self:
        """Copy the buffer in ``src_store`` (a store, group, dict or path) into a new buffer.

        ``store=None`` and ``backend=None`` load it into memory (NumPy backend), as the seed did.
        Otherwise the destination is ``store`` on ``backend`` (default: the backend that claims
        ``store``).  ``keys`` limits the data keys copied; ``chunks`` / ``compressors`` map keys to
        new chunk shapes / codecs.  The copy streams block by block (memory bounded by a few chunks).
        """
        src = cls(registry.open_backend(src_store, read_only=True))
        return src._copy_to_new(store, backend, keys=keys, chunks=chunks, compressors=compressors,
                                if_exists=if_exists, **kwargs)

    @classmethod
    def copy_from_path(
        cls,
        zarr_path: str | os.PathLike,
        backend: str | None = None,
        store: Any = None,
        keys: list[str] | None = None,
        chunks: dict[str, tuple[int, ...]] | None = None,
        compressors: dict[str, Any] | None = None,
        if_exists: str = "replace",
        **kwargs: Any,
    ) -> Self:
        """Copy the store at ``zarr_path`` (``~`` expanded; zarr v2/v3 directory or ``.zip``) into a
        new buffer: into memory (NumPy) when ``store`` and ``backend`` are None, else into ``store`` on
        ``backend``.  ``backend="numpy"`` is deprecated (logs a warning; same as leaving it None)."""
        if backend == "numpy":
            logger.warning("copy_from_path(backend='numpy') is deprecated: leave backend and store None")
            backend, store = None, None
        src_path = os.path.expanduser(os.fspath(zarr_path))
        return cls.copy_from_store(src_path, store=store, keys=keys, chunks=chunks,
                                   compressors=compressors, if_exists=if_exists, backend=backend, **kwargs)

    def save_to_store(
        self,
        store: Any,
        chunks: dict[str, tuple[int, ...]] | None = None,
        compressors: dict[str, Any] | None = None,
        if_exists: str = "replace",
        backend: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Write this buffer into ``store`` (backend: ``backend`` or the one claiming ``store``) and
        return ``store``.  Chunks/codecs: explicit per key → this buffer's → defaults."""
        if store is None:
            raise ValueError("save_to_store needs a store; use copy_from_store(..., store=None) for memory")
        saved = self._copy_to_new(store, backend or registry.guess_backend(store).name, chunks=chunks,
                                  compressors=compressors, if_exists=if_exists, **kwargs)
        saved.store.close()  # file backends release the file; the caller keeps ``store``
        return store

    def save_to_path(self, zarr_path: str | os.PathLike, chunks=None, compressors=None,
                     if_exists: str = "replace", client: Any = None, **kwargs: Any) -> Any:
        """Write this buffer to a zarr ``LocalStore`` at ``zarr_path`` (``~`` expanded); returns the
        store.  ``if_exists="replace"`` builds the new store beside an existing one and swaps it in
        at the end; ``"raise"``/``"skip"`` write into it.  Either way the store's writer lock is
        held meanwhile: a store another process is recording into is never touched
        (``StoreLockedError``), and a failed save leaves the old store as it was.

        ``client`` (a ``distributed.Client``): the data arrays' rows are copied on its cluster, one
        task per span of whole destination objects (:mod:`replaybuf_core.cluster.copy`), with the
        same bytes as here.  This buffer must then be at a path or URL the workers reach and the
        destination a zarr store (``ValueError`` before anything is written otherwise).

        ``progress``: True shows a tqdm bar on stderr over the data's decoded bytes (as ``merge`` and
        the edits do; the ``copy`` command's bar); a callable ``progress(n_bytes)`` is called instead
        as data rows are copied, with their decoded bytes (:meth:`_copy_into`); None/False: neither.

        ``ValueError`` (nothing written) for a destination that is this buffer's own path or URL, lies
        inside it or holds it; ``FileExistsError`` for an existing path that is not a store;
        ``TypeError`` (nothing written) for a ``progress`` that is neither a bool nor callable."""
        backend = kwargs.pop("backend", "zarr")
        progress = kwargs.pop("progress", None)
        if isinstance(progress, (bool, np.bool_)) and progress:
            total = sum(row_bytes(self._store.shape("data", k), self._store.dtype("data", k)) for k in self.keys())
            with progress_bar("copying", total * self.n_steps, True) as bar:
                return self.save_to_path(zarr_path, chunks, compressors, if_exists, client, backend=backend,
                                         progress=bar.update, **kwargs)
        if isinstance(progress, (bool, np.bool_)):
            progress = None
        elif progress is not None and not callable(progress):
            raise TypeError(f"save_to_path: progress must be a bool or a callable taking a byte count, got {progress!r}")
        self._validate_copy_args(None, chunks, compressors, if_exists)
        here = getattr(self._store, "location", lambda: None)()
        if here is not None:  # not into itself, not over a directory holding it
            check_apart(here[0], zarr_path)
        if client is not None:
            from replaybuf_core.cluster.copy import check_client, check_cluster_destination, endpoint_of

            check_client(client)
            endpoint_of(self._store)
            check_cluster_destination(backend, "a copy")
        if is_object_url(zarr_path):
            return self._save_to_url(os.fspath(zarr_path), backend, chunks, compressors, if_exists, client=client,
                                     progress=progress, **kwargs)
        path = local_path(zarr_path, "save_to_path")
        self._copy_to_path(path, backend, chunks=chunks, compressors=compressors, if_exists=if_exists, client=client,
                           progress=progress, **kwargs)
        dst = registry.get_backend(backend).open(path, read_only=True)
        root = dst.root
        dst.close()
        return getattr(root, "store", root)

    def _save_to_url(self, url: str, backend: str, chunks, compressors, if_exists: str, client: Any = None,
                     progress: Any = None, **kwargs: Any) -> Any:
        """save_to_path on object storage: no rename to swap a store in, so the prefix must hold none
        (``FileExistsError`` otherwise, nothing written); data objects go first and
        ``meta/episode_ends`` last, so an interrupted save reads as a store of the committed prefix."""
        entry = registry.get_backend(backend)
        options = kwargs.get("storage_options")
        probe = None
        try:
            probe = entry.open(url, read_only=True, storage_options=options)
        except FileNotFoundError:
            pass
        if probe is not None:
            probe.close()
            raise FileExistsError(f"{url} already holds a zarr store; object stores have no rename to swap a "
                                  "new one in: delete it first or save to another prefix")
        dst = entry.create(url, if_exists="append", **kwargs)
        try:
            self._copy_into(dst, chunks=chunks, compressors=compressors, if_exists=if_exists, client=client,
                            progress=progress)
        finally:
            dst.close()
        saved = entry.open(url, read_only=True, storage_options=options)
        saved.close()
        return saved.root.store

    # ------------------------------------------------------------------ copying internals
    def _copy_to_new(self, store: Any, backend: str | None, *, keys=None, chunks=None, compressors=None,
                     if_exists="replace", **kwargs: Any) -> Self:
        if store is None and backend is None:
            backend = "numpy"
        entry = registry.get_backend(backend) if backend else registry.guess_backend(store)
        self._validate_copy_args(keys, chunks, compressors, if_exists)
        if isinstance(store, (str, os.PathLike)) and "://" not in os.fspath(store):
            path = os.path.expanduser(os.fspath(store))
            self._copy_to_path(path, entry.name, keys=keys, chunks=chunks, compressors=compressors,
                               if_exists=if_exists, **kwargs)
            return type(self)(path, backend=entry.name)
        dst = entry.create(store, if_exists="append", **kwargs)
        self._copy_into(dst, keys=keys, chunks=chunks, compressors=compressors, if_exists=if_exists)
        return type(self)(dst)

    def _copy_to_path(self, path: str, backend: str, *, keys=None, chunks=None, compressors=None,
                      if_exists="replace", client: Any = None, progress: Any = None, record_version: bool = True,
                      **kwargs: Any) -> None:
        """Copy into the store at local ``path`` on ``backend``: ``replace`` builds beside it and
        swaps (:func:`~replaybuf_core.store.replace.build_beside`), the other modes write into it; both
        under its writer lock.  ``progress(n_bytes)``: see :meth:`_copy_into`."""
        entry = registry.get_backend(backend)
        if if_exists == "replace":
            with build_beside(path) as beside:
                dst = entry.create(os.fspath(beside.path), if_exists="append", **kwargs)
                try:
                    self._copy_into(dst, keys=keys, chunks=chunks, compressors=compressors, if_exists=if_exists,
                                    client=client, progress=progress, record_version=record_version)
                finally:
                    dst.close()
            return
        with holding_lock(path):
            dst = entry.create(path, if_exists="append", **kwargs)
            try:
                self._copy_into(dst, keys=keys, chunks=chunks, compressors=compressors, if_exists=if_exists,
                                client=client, progress=progress, record_version=record_version)
            finally:
                dst.close()

    def _validate_copy_args(self, keys, chunks, compressors, if_exists) -> list[str]:
        if if_exists not in IF_EXISTS:
            raise ValueError(f"if_exists must be one of {IF_EXISTS}, got {if_exists!r}")
        all_keys = self.keys()
        keys = all_keys if keys is None else list(keys)
        for k in keys:
            if k not in all_keys:
                raise KeyError(f"data key {k!r} is not in the buffer (keys: {all_keys})")
        for k, c in (chunks or {}).items():
            if k not in all_keys:
                raise KeyError(f"chunks given for {k!r}, which is not a data key (keys: {all_keys})")
            check_chunks_compatible(c, self._store.shape("data", k), self._store.dtype("data", k).itemsize)
        for k, c in (compressors or {}).items():
            if k not in all_keys:
                raise KeyError(f"compressor given for {k!r}, which is not a data key (keys: {all_keys})")
            _resolve_compressor(c)
        return keys

    def _copy_into(self, dst: StorageBackend, *, keys=None, chunks=None, compressors=None,
                   if_exists="replace", client: Any = None, progress: Any = None, record_version: bool = True) -> None:
        """Copy this buffer's data keys (then meta arrays, ``episode_ends`` last) into ``dst``;
        ``progress(n_bytes)`` is called as data rows are copied, with their decoded bytes.
        ``record_version``: on a backend that keeps versions, the copy is the destination's first
        version (:func:`_record_copy`); False for a caller that records the result itself (merge)."""
        keys = self._validate_copy_args(keys, chunks, compressors, if_exists)
        chunks, compressors = chunks or {}, compressors or {}
        for group in ("data", "meta"):
            dst.require_group(group)
        names = [("data", k) for k in keys] + [("meta", k) for k in self._store.list_arrays("meta")]
        if if_exists == "raise":
            taken = [f"{g}/{k}" for g, k in names if dst.has_array(g, k)]
            if taken:
                raise FileExistsError(f"the destination already holds {taken}; pass if_exists='replace'")
        # data first, meta/episode_ends last: the destination becomes a valid buffer only at the end
        if dst.has_array("meta", EPISODE_ENDS) and if_exists == "replace":
            dst.delete_array("meta", EPISODE_ENDS)
        if if_exists == "replace":  # the old buffer's other data keys would not match the new lengths
            for stale in set(dst.list_arrays("data")) - set(keys):
                dst.delete_array("data", stale)
        lossy_src, kept = set(lossy_keys(self._store, keys)), set()
        for group, key in names:
            if dst.has_array(group, key):
                if if_exists == "skip":
                    continue
                dst.delete_array(group, key)
            if group == "meta":
                if key == EPISODE_ENDS:
                    continue
                if len(self._store.shape("meta", key)) == 0 or CAP_CODECS not in self._store.capabilities:
                    copy_array(self._store, "meta", key, dst, "meta", key)
                else:  # per-episode arrays keep their chunks and codec too
                    ck, codec, shards = self._resolve_layout(key, dst, None, "__source__", group="meta")
                    copy_array(self._store, "meta", key, dst, "meta", key, chunks=ck, codec=codec, shards=shards)
                continue
            ck, codec, shards = self._resolve_layout(key, dst, chunks.get(key), compressors.get(key, "__source__"))
            if copy_array(self._store, "data", key, dst, "data", key, n_rows=self.n_steps, chunks=ck, codec=codec,
                          shards=shards, client=client, keep_stored=key in lossy_src, progress=progress):
                kept.add(key)  # lossy frames copied as stored: the same pixels
        for group in ("data", "meta"):  # provenance (e.g. an import's conversions) travels along
            # (not the version log and tags: the older versions' undos stay in the source)
            attrs = {k: v for k, v in self._store.get_attrs(group).items()
                     if k not in (COMMIT_RECORD, VERSIONS, TAGS)}
            if attrs:  # (the commit record is written for the destination's own commit, below)
                dst.set_attrs(group, attrs)
        if not dst.has_array("meta", EPISODE_ENDS):
            self._ensure_episode_ends(dst)
        dst.resize("meta", EPISODE_ENDS, self._n_ep)
        if self._n_ep:
            dst.write("meta", EPISODE_ENDS, 0, self.episode_ends)
        write_commit_record(dst, self._n_ep, self.n_steps, generation=read_generation(self._store))  # stats stay valid
        # ... but for keys written through a lossy codec (JPEG, video): re-encoded pixels, recounted
        rehistogram(dst, [k for k in lossy_keys(dst, keys) if k not in kept],
                    np.asarray(self.episode_ends[: self._n_ep], dtype=np.int64))
        if record_version and CAP_VERSIONS in dst.capabilities:
            _record_copy(dst, self._n_ep, self.n_steps, if_exists)
        dst.flush()

    def _resolve_layout(self, key: str, dst: StorageBackend, chunks: Any, compressor: Any, group: str = "data"):
        """Chunk resolution: explicit → this buffer's array → ``get_optimal_chunks`` (2 MB target);
        codec: explicit → this buffer's → the "default" preset.  Shards are kept when the chunks are."""
        s = self._store
        shape, dtype = s.shape(group, key), s.dtype(group, key)
        src_chunks = s.chunks(group, key) if CAP_CHUNKS in s.capabilities else None
        src_shards = s.shards(group, key) if CAP_SHARDS in s.capabilities else None
        if compressor == "__source__":
            codec = s.codec(group, key) if CAP_CODECS in s.capabilities else _resolve_compressor("default")
            accepts = getattr(dst, "accepts_codec", None)
            if codec is not None and callable(accepts) and not accepts(codec):
                logger.warning("%s key %r: the %s backend cannot use the source codec %r; using the "
                               "'default' preset", group, key, dst.name, codec)
                codec = _resolve_compressor("default")
        else:
            codec = _resolve_compressor(compressor)
        framed = compressor != "__source__" and hasattr(codec, "frames_per_chunk")  # a new frame codec
        if chunks is not None:
            ck = tuple(int(c) for c in chunks)
        elif framed:  # its frames a chunk (a video codec's GOP)
            ck = frame_chunk_shape(shape, codec)
        elif src_chunks is not None:
            ck = tuple(src_chunks)
        else:
            ck = get_optimal_chunks((max(shape[0], 1),) + tuple(shape[1:]), dtype)
        shards = src_shards if (src_shards is not None and ck == src_chunks) else None
        if framed and src_shards is not None and shards is None and chunks is None:
            shards = frame_shard_shape(ck, int(src_shards[0]))  # whole GOPs a shard
        if CAP_SHARDS not in dst.capabilities:
            shards = None
        return ck, codec, shards

    # ------------------------------------------------------------------ static helpers
    @staticmethod
    def resolve_compressor(compressor: Any = "default") -> Any:
        """See :func:`replaybuf_core.layout.compressors.resolve_compressor`."""
        return _resolve_compressor(compressor)


def _record_copy(dst: StorageBackend, n_episodes: int, n_steps: int, if_exists: str) -> None:
    """Record a copy's content as a version of ``dst`` (by the command that runs: ``replaybuf copy``,
    ``synth``, a program's ``save_to_path``).  A new destination gets version 0.  A destination that
    had versions of its own and was replaced in place (``if_exists="replace"`` on a store object):
    those versions described arrays that are gone, so its log, tags and undo arrays are dropped and
    the copy is version 0.  Copied beside an existing log otherwise (``skip``): the log is left as it
    was — it is not known which of its versions the mix of old and new arrays is."""
    from .versions import log

    if log(dst):
        if if_exists != "replace":
            return
        if dst.has_group(VERSIONS_GROUP):  # no version names them now, and nobody reads them
            delete_unread_undos(dst, [], dict, [])
        dst.set_attrs("meta", {VERSIONS: [], TAGS: {}})
    note_appends(dst, n_episodes, n_steps, kind="copy")
