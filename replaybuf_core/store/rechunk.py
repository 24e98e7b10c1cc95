"""Rechunking and recompressing arrays in place — built beside, swapped in, recoverable — and the
chunk/codec verbs of :class:`~replaybuf_core.ReplayBuffer` (``get_chunks``, ``set_chunks``,
``get_compressors``, ``set_compressors``, ``set_frames``; a mixin using the buffer's ``_store``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from replaybuf_core import registry
from replaybuf_core.errors import CapabilityError
from replaybuf_core.interrupts import deferred_sigint
from replaybuf_core.layout.chunks import check_chunks_compatible
from replaybuf_core.layout.compressors import resolve_compressor as _resolve_compressor
from replaybuf_core.layout.keys import temp_names
from replaybuf_core.protocol import CAP_CHUNKS, CAP_CODECS, CAP_SHARDS, StorageBackend

from .buffer_checks import _serialized
from .copying import copy_array

logger = logging.getLogger(__name__)


class ChunkCodecEditing:
    """``ReplayBuffer``'s chunk and codec methods."""

    def _require_cap(self, cap: str, what: str) -> None:
        if cap not in self._store.capabilities:
            raise CapabilityError(f"{what} needs a backend with {cap!r}; the {self.backend!r} backend has "
                                  f"{sorted(self._store.capabilities)}")

    def get_chunks(self) -> dict[str, tuple[int, ...]]:
        """key → chunk shape. Raises CapabilityError (a RuntimeError) without chunk support."""
        self._require_cap(CAP_CHUNKS, "get_chunks")
        return {k: tuple(self._store.chunks("data", k)) for k in self.keys()}

    @_serialized
    def set_chunks(self, chunks: Mapping[str, tuple[int, ...]], client: Any = None) -> None:
        """Rechunk the named arrays (streaming; the new array is written beside the old and swapped).
        ``client``: a ``distributed.Client`` whose cluster writes the new arrays (see
        :func:`rechunk_array`).

        Raises:
            CapabilityError: backend without chunks.  KeyError: unknown key.
            ValueError / TypeError: chunk tuples rejected by :func:`check_chunks_compatible`; with
            ``client``, a store the workers cannot reach or write (nothing changed).
        """
        self._require_cap(CAP_CHUNKS, "set_chunks")
        self._require_writable()
        for key, ck in chunks.items():
            if key not in self:
                raise KeyError(f"set_chunks: no data key {key!r} (keys: {self.keys()})")
            check_chunks_compatible(ck, self._store.shape("data", key), self._store.dtype("data", key).itemsize)
        for key, ck in chunks.items():
            if tuple(ck) != tuple(self._store.chunks("data", key)):
                rechunk_array(self._store, "data", key, chunks=tuple(int(c) for c in ck), client=client)
                self._after_rewrite(key)

    def get_compressors(self) -> dict[str, Any]:
        """key → codec (compressor, or the serializer such as WebP for image arrays; None if none)."""
        self._require_cap(CAP_CODECS, "get_compressors")
        return {k: self._store.codec("data", k) for k in self.keys()}

    @_serialized
    def set_compressors(self, compressors: Mapping[str, Any], client: Any = None) -> None:
        """Recompress the named arrays (preset names or codecs), keeping their chunks; ``client`` as
        for :meth:`set_chunks`.

        Raises: CapabilityError, KeyError (unknown key), ValueError (unknown preset name; with
        ``client``, a store the workers cannot reach or write)."""
        self._require_cap(CAP_CODECS, "set_compressors")
        self._require_writable()
        resolved = {}
        for key, c in compressors.items():
            if key not in self:
                raise KeyError(f"set_compressors: no data key {key!r} (keys: {self.keys()})")
            resolved[key] = _resolve_compressor(c)
        for key, codec in resolved.items():
            if not _same_codec(self._store, key, codec):
                rechunk_array(self._store, "data", key, codec=codec, client=client)
                self._after_rewrite(key)

    def frame_codecs(self, frames: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """``({key: FrameChoice}, {key: this backend's codec})`` for the camera keys ``frames`` names
        (every one for a bare choice; see :meth:`set_frames`), checked, nothing changed.

        Raises ValueError (unknown codec or key, JPEG on RGBA), CapabilityError (no ``image_codec``)."""
        from replaybuf_core.layout.frame_choice import choose_frames
        from replaybuf_core.layout.frames import frame_keys

        make = getattr(self._store, "image_codec", None)
        if make is None:
            raise CapabilityError(f"frames: the {self.backend!r} backend has no frame codecs")
        cameras = {k: (self._store.shape("data", k), self._store.dtype("data", k)) for k in frame_keys(self)}
        choices = choose_frames(frames, cameras, named_only=True)
        return choices, {k: make(c) for k, c in choices.items()}

    def set_frames(self, frames: Any, client: Any = None) -> dict[str, str]:
        """Convert camera keys to the frame codecs ``frames`` names, in place (crash-safe, each key
        built beside and swapped in, like :meth:`set_compressors`): ``"exact"``, ``"fast"``,
        ``"jpeg:90"``... for every frame key, or ``"KEY=CHOICE,..."`` / ``{key: choice}`` for some
        (``"*"``: the others; keys not named keep their codec).  See
        :mod:`replaybuf_core.layout.frame_choice`.  An exact store → a fast training copy, or back —
        going back to lossless keeps the lossy pixels, it does not restore the originals.

        Returns ``{key: choice}`` of the keys now in a new codec (keys already in it are left alone).

        Raises:
            ValueError: an unknown codec or key (a key that is not camera frames), JPEG on RGBA frames.
            CapabilityError: a backend without frame codecs (``image_codec``) or without codecs.
        Everything is checked before the first key is rewritten.
        """
        self._require_cap(CAP_CODECS, "set_frames")
        choices, codecs = self.frame_codecs(frames)
        changed = {k: str(choices[k]) for k, c in codecs.items() if not _same_codec(self._store, k, c)}
        if changed:
            self._set_frame_codecs({k: codecs[k] for k in changed}, client)
        return changed

    @_serialized
    def _set_frame_codecs(self, codecs: Mapping[str, Any], client: Any) -> None:
        """Rewrite each key with its frame codec and the chunks it needs (a video codec: ``gop``
        frames a chunk; an image codec: one), shards rounded to whole chunks."""
        from replaybuf_core.layout.sharding import frame_chunk_shape, frame_shard_shape

        self._require_writable()
        for key, codec in codecs.items():
            shape = self._store.shape("data", key)
            chunks = frame_chunk_shape(shape, codec)
            shards = self._store.shards("data", key) if CAP_SHARDS in self._store.capabilities else None
            if shards is not None:
                shards = frame_shard_shape(chunks, int(shards[0]))
            rechunk_array(self._store, "data", key, chunks=chunks, codec=codec, shards=shards, client=client)
            self._after_rewrite(key)

    def _after_rewrite(self, key: str) -> None:
        """``data/key`` was rewritten (rechunked, recompressed, converted): when its codec is now
        lossy, the rewrite re-encoded its pixels, so its stored statistics are recomputed from the
        rows written (:func:`~replaybuf_core.store.stored_stats.rehistogram`; lossless rewrites keep
        the values and the statistics)."""
        from .lossy_frames import lossy_keys
        from .stored_stats import rehistogram

        if lossy_keys(self._store, [key]):
            rehistogram(self._store, [key], np.asarray(self.episode_ends[: self.n_episodes], dtype=np.int64))
            self._persist()


def _same_codec(store: StorageBackend, key: str, codec: Any) -> bool:
    same = getattr(store, "codecs_equal", None)
    current = store.codec("data", key)
    if callable(same):
        return bool(same(current, codec))
    return current == codec


_KEEP = object()


def rechunk_array(store: StorageBackend, group: str, name: str, *, chunks: tuple[int, ...] | None = None,
                  codec: Any = _KEEP, shards: Any = _KEEP, tmp_key: str = "_temp", client: Any = None) -> None:
    """Rewrite ``group/name`` with new chunks and/or codec: stream into ``<tmp_key>.<name>`` beside it,
    then swap (old → ``<tmp_key>_old.<name>``, new → name, delete old), so a failure midway loses
    nothing; a process killed midway leaves temps that :func:`replaybuf_core.store.recovery.recover` (run
    by the next open) rolls back or deletes.

    ``chunks=None`` keeps the current chunks; ``codec``/``shards`` default to the current ones (shards
    are dropped when the new chunk length does not divide them).  ``client`` (a
    ``distributed.Client``): the new array's rows are written on its cluster, one task per span of
    whole new objects (:mod:`replaybuf_core.cluster.copy`), with the same bytes as here; the store
    must be a zarr store at a path or URL the workers reach (ValueError, nothing changed, otherwise).
    """
    old_chunks = tuple(store.chunks(group, name))
    new_chunks = tuple(chunks) if chunks is not None else old_chunks
    check_chunks_compatible(new_chunks, store.shape(group, name), store.dtype(group, name).itemsize)
    if codec is _KEEP:
        codec = store.codec(group, name)
    if shards is _KEEP:
        shards = store.shards(group, name) if CAP_SHARDS in store.capabilities else None
        if shards is not None and any(s % c for s, c in zip(shards, new_chunks)):
            shards = None
    if client is not None:  # refused before anything is written
        from replaybuf_core.cluster.copy import check_client, check_cluster_destination, endpoint_of

        check_client(client)
        check_cluster_destination(endpoint_of(store).backend, "a rechunk")
    tmp_key, backup = temp_names(name, tmp_key)  # the names say whose temps they are (recovery)
    for stale in (tmp_key, backup):
        if store.has_array(group, stale):
            store.delete_array(group, stale)
    try:
        copy_array(store, group, name, store, group, tmp_key, chunks=new_chunks, codec=codec, shards=shards,
                   client=client)
    except BaseException:
        try:
            if store.has_array(group, tmp_key):  # else it shows up as a data key
                store.delete_array(group, tmp_key)
        except Exception as exc:  # noqa: BLE001 - e.g. a writer still finishing after Ctrl-C: the original
            # error is what the caller must see; recovery (the next writable open) removes the temp array
            logger.warning("could not remove %s/%s after a failed rechunk (the next writable open removes it): %s",
                           group, tmp_key, exc)
        raise
    with deferred_sigint():  # a Ctrl-C is taken once the new array is in place (recovery would finish it)
        store.rename_array(group, name, backup)
        store.rename_array(group, tmp_key, name)
        store.delete_array(group, backup)


def rechunk_recompress_array(
    group: Any,
    name: str,
    chunks: tuple[int, ...] | None = None,
    chunk_length: int | None = None,
    compressor: Any = None,
    tmp_key: str = "_temp",
) -> Any:
    """Rewrite array ``group[name]`` with new chunks and/or compressor and return the new array (the
    seed's zarr-level rechunk; re-exported as ``replaybuf_zarr.rechunk_recompress_array``).

    Args:
        group: the native group holding the array (any ``zarr.Group``, not only a buffer's ``data``),
            of a backend that can address it as a data group (``as_data_group``; zarr can).
        name: the array's name in ``group``.
        chunks: the new chunk shape; ``chunk_length`` sets only the time-axis length instead.
        compressor: a preset name, a codec, or None to keep the current codec.
        tmp_key: name of the temporary array written beside the original.

    The array is streamed block by block into ``tmp_key`` and swapped in (:func:`rechunk_array`), so
    memory stays bounded and a failure midway leaves the original untouched.

    Raises:
        ValueError / TypeError: bad chunks or compressor.  KeyError: ``name`` is not an array of
        ``group``.  CapabilityError: no installed backend can address ``group`` as a data group.
    """
    entry = registry.guess_backend(group)
    as_data_group = getattr(entry, "as_data_group", None)
    if as_data_group is None:
        raise CapabilityError(f"the {entry.name!r} backend cannot rechunk an array of an arbitrary group "
                              "(no as_data_group); open the store as a ReplayBuffer and use set_chunks")
    store = as_data_group(group)
    if not store.has_array("data", name):
        raise KeyError(f"{name!r} is not an array of {group}")
    if chunks is None:
        chunks = tuple(store.chunks("data", name))
        if chunk_length is not None:
            chunks = (int(chunk_length),) + chunks[1:]
    kwargs: dict[str, Any] = {}
    if compressor is not None:
        kwargs["codec"] = _resolve_compressor(compressor)
    if tuple(chunks) != tuple(store.chunks("data", name)) or kwargs:
        rechunk_array(store, "data", name, chunks=tuple(chunks), tmp_key=tmp_key, **kwargs)
    return group[name]
