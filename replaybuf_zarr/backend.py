"""The Zarr v3 backend: a ``zarr.Group`` holding ``data/`` and ``meta/`` groups.

Also opens zarr v2 stores (diffusion_policy's format) and ``.zip`` stores read-only (opening and
creating: :mod:`.entrypoint`).  Strings are
stored as zarr's variable-length UTF-8 and read back as ``object`` arrays of ``str``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from replaybuf_core.errors import ReadOnlyError
from replaybuf_core.interrupts import deferred_sigint
from replaybuf_core.protocol import (
    CAP_BATCHED_READ,
    CAP_CHUNKS,
    CAP_CODECS,
    CAP_PERSISTENT,
    CAP_ROWS_AT,
    CAP_ROWS_CONVERT,
    CAP_SHARDS,
    CAP_VERSIONS,
    GROUPS,
    VERSIONS_GROUP,
    begin_write,
    check_row_region,
    read_rows_via_ranges,
)

from .chunk_cache import DEFAULT_CACHE_BYTES, ChunkCache
from .chunk_reader import ChunkReader, make_reader
from .empty_chunks import storing_empty_chunks
from . import reader_holds
from .object_store import store_options, store_url
from .row_gather import RowsRead
from .row_splice import cut_partial_chunk
from .stored_bytes import StoredBytes
from .chunk_writer import ChunkWriter, make_writer
from .codec_convert import codec_of_array, codecs_equal, to_zarr_codecs
from .members import (delete_prefix, list_children, local_root, metadata_file_error, node_error, remove_debris,
                      remove_partial_metadata, rename_member)


#: Each mutating call runs whole before a Ctrl-C (SIGINT) or the CLI's SIGTERM is acted on: zarr-python's
#: writes run on its IO thread and ours on the codec pool, and both would go on after a
#: ``KeyboardInterrupt`` raised while the caller waits for them: whatever cleans up after the interrupt
#: (a build beside removed, a rechunk's temporary array deleted) would race writes still landing.
_whole = deferred_sigint()


def _is_string_dtype(dtype: np.dtype) -> bool:
    return dtype == object or dtype.kind in ("U", "T")


def _as_object_strings(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind in ("T", "U"):
        return values.astype(object)
    return values


class ZarrBackend(StoredBytes):
    """:class:`~replaybuf_core.protocol.StorageBackend` over a zarr group (v3, or v2 for reading)."""

    name = "zarr"

    def __init__(self, root: zarr.Group, *, read_only: bool | None = None):
        if not isinstance(root, zarr.Group):
            raise TypeError(f"the zarr backend needs a zarr.Group, got {type(root).__name__}")
        self._root = root
        store_ro = bool(getattr(root.store, "read_only", False))
        self.read_only = store_ro if read_only is None else (bool(read_only) or store_ro)
        caps = {CAP_CHUNKS, CAP_CODECS}
        if root.metadata.zarr_format == 3:
            caps.add(CAP_SHARDS)
        if local_root(root.store) is not None or type(root.store).__name__ in ("ZipStore", "FsspecStore"):
            caps.add(CAP_PERSISTENT)
        caps.update((CAP_BATCHED_READ, CAP_ROWS_AT, CAP_ROWS_CONVERT))
        if root.metadata.zarr_format == 3:
            caps.add(CAP_VERSIONS)
        self.capabilities = frozenset(caps)
        self._arrays: dict[tuple[str, str], zarr.Array] = {}
        self._readers: dict[tuple[str, str], ChunkReader | None] = {}
        self._writers: dict[tuple[str, str], ChunkWriter | None] = {}
        # background writes not known to be done: (group, name) -> [(start, stop, future)]
        self._pending: dict[tuple[str, str], list[tuple[int, int, Future]]] = {}
        self._pending_lock = threading.Lock()  # a sampler thread may read while the writer writes
        self._listing: dict[str, list[str]] = {}
        self._cache = ChunkCache(DEFAULT_CACHE_BYTES)
        self._reader_ids = itertools.count()
        self.codecs_equal = codecs_equal

    # -- fast reads -------------------------------------------------------------------------------
    @property
    def cache_bytes(self) -> int:
        """Capacity (bytes) of the LRU of decoded chunks shared by this store's readers."""
        return self._cache.max_bytes

    @cache_bytes.setter
    def cache_bytes(self, value: int) -> None:
        self._cache.max_bytes = value

    @property
    def cache(self) -> ChunkCache:
        return self._cache

    def _reader(self, group: str, name: str) -> ChunkReader | None:
        key = (group, name)
        if key not in self._readers:
            self._readers[key] = make_reader(self.get_array(group, name), self._cache, next(self._reader_ids))
        return self._readers[key]

    def pin(self, group: str, name: str) -> bool:
        """Load ``group/name`` wholly into memory for later reads; False when the array's layout has
        no fast reader (reads then go through zarr-python)."""
        self._settle((group, name))
        reader = self._reader(group, name)
        if reader is None:
            return False
        reader.pin()
        return True

    def pinned(self, group: str, name: str) -> np.ndarray | None:
        """Optional protocol method: the in-memory copy :meth:`pin` made of ``group/name`` (read-only),
        or None when the array is not pinned."""
        reader = self._readers.get((group, name))
        return None if reader is None else reader.pinned

    def _invalidate(self, group: str, name: str) -> None:
        self._settle((group, name))
        self._listing.pop(group, None)
        self._arrays.pop((group, name), None)
        self._readers.pop((group, name), None)
        self._writers.pop((group, name), None)

    # -- groups ---------------------------------------------------------------------------------
    @property
    def root(self) -> zarr.Group:
        return self._root

    @property
    def zarr_format(self) -> int:
        return self._root.metadata.zarr_format

    def has_group(self, group: str) -> bool:
        try:
            return isinstance(self._root[group], zarr.Group)
        except KeyError:
            return False
        except ValueError as exc:  # an empty or damaged zarr.json (JSONDecodeError is a ValueError)
            raise metadata_file_error(self._root.store, group, exc) from exc

    @_whole
    def require_group(self, group: str) -> None:
        self._check_writable()
        self._root.require_group(group)

    def native_group(self, group: str) -> zarr.Group:
        return self._group(group)

    def _group(self, group: str) -> zarr.Group:
        if group not in GROUPS and group != VERSIONS_GROUP:
            raise ValueError(f"unknown group {group!r}; groups are {GROUPS + (VERSIONS_GROUP,)}")
        try:
            g = self._root[group]
        except KeyError:
            if group == VERSIONS_GROUP and not self.read_only:  # older versions' undos: made on first use
                return self._root.require_group(group)
            raise KeyError(f"group {group!r} is missing from the zarr store") from None
        except ValueError as exc:  # an empty or damaged zarr.json (JSONDecodeError is a ValueError)
            raise metadata_file_error(self._root.store, group, exc) from exc
        if not isinstance(g, zarr.Group):
            raise KeyError(f"{group!r} in the zarr store is an array, not a group")
        return g

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"the zarr store {self._root.store} is open read-only")

    # -- arrays ---------------------------------------------------------------------------------
    def list_arrays(self, group: str) -> list[str]:
        cached = self._listing.get(group)
        if cached is not None:  # dropped by every create / delete / rename through this backend
            return list(cached)
        g = self._group(group)
        try:
            names = sorted(name for name, _ in g.arrays())
            self._listing[group] = names
            return list(names)
        except (KeyError, FileNotFoundError):
            raise
        except Exception as exc:  # one member's metadata is unreadable: name it
            for name in list_children(g.store, g.path):
                try:
                    g[name]
                except KeyError:
                    continue
                except Exception as member_exc:  # noqa: BLE001
                    raise node_error(group, name, member_exc) from member_exc
            raise node_error(group, "?", exc) from exc

    def has_array(self, group: str, name: str) -> bool:
        if (group, name) in self._arrays:
            return True
        try:
            return isinstance(self._group(group)[name], zarr.Array)
        except KeyError:
            return False

    def get_array(self, group: str, name: str) -> zarr.Array:
        cached = self._arrays.get((group, name))
        if cached is not None:
            return cached
        try:
            arr = self._group(group)[name]
        except KeyError:
            raise KeyError(f"no array {group}/{name} in the zarr store") from None
        except (ValueError, TypeError, RuntimeError) as exc:
            raise node_error(group, name, exc) from exc
        if not isinstance(arr, zarr.Array):
            raise KeyError(f"{group}/{name} is a group, not an array")
        arr = self._arrays[(group, name)] = storing_empty_chunks(arr)  # so `verify` finds every chunk
        return arr

    @_whole
    def create_array(self, group, name, *, shape, dtype, chunks=None, codec=None, shards=None, fill_value=None):
        self._check_writable()
        g = self._group(group)
        if name in g:
            raise ValueError(f"array {group}/{name} already exists")
        dtype = np.dtype(dtype)
        kwargs: dict[str, Any] = {}
        if _is_string_dtype(dtype):
            kwargs["dtype"] = str
            fill_value = "" if fill_value is None else fill_value
            if codec is not None and self.zarr_format == 3:
                kwargs["compressors"] = to_zarr_codecs(codec)[1]
        else:
            kwargs["dtype"] = dtype
            serializer, compressors = to_zarr_codecs(codec, self.zarr_format)
            if self.zarr_format == 2:
                kwargs["compressor"] = compressors
            else:
                kwargs["serializer"] = serializer
                kwargs["compressors"] = compressors
        if shards is not None and self.zarr_format == 3:
            kwargs["shards"] = tuple(int(s) for s in shards)
        if group == VERSIONS_GROUP and self.zarr_format == 3:  # an undo's objects in its own directory, flat
            kwargs["chunk_key_encoding"] = {"name": "default", "separator": "."}  # (mkdirs: a third of an edit)
        self._invalidate(group, name)
        g.create_array(
            name,
            shape=tuple(int(s) for s in shape),
            chunks=tuple(int(c) for c in chunks) if chunks is not None else "auto",
            fill_value=fill_value,
            **kwargs,
        )

    @_whole
    def delete_array(self, group, name):
        self._check_writable()
        self.get_array(group, name)  # KeyError when missing; (re)caches the handle ...
        self._invalidate(group, name)  # ... so forget it only now
        g = self._group(group)
        if local_root(self._root.store) is not None:
            del g[name]
        else:  # no directory to remove at once: metadata first, so a cut delete leaves no half array visible
            delete_prefix(g.store, f"{g.path}/{name}" if g.path else name)

    @_whole
    def rename_array(self, group, src, dst):
        self._check_writable()
        self.get_array(group, src)
        g = self._group(group)
        if dst in g:
            raise ValueError(f"cannot rename {group}/{src} to {dst!r}: the name is taken")
        self._invalidate(group, src)
        self._invalidate(group, dst)
        rename_member(g, src, dst)

    def accepts_codec(self, codec: Any) -> bool:
        """True when ``codec`` can be used in ``create_array`` (see :func:`to_zarr_codecs`)."""
        try:
            to_zarr_codecs(codec, self.zarr_format)
        except (TypeError, KeyError, ValueError):
            return False
        return True

    def image_codec(self, choice: Any = None) -> Any:
        """The serializer for camera frames (uint8 ``(1, H, W, C)`` chunks) of a
        :class:`~replaybuf_core.layout.frame_choice.FrameChoice` (or its ``--frames`` spelling; None:
        ``exact``): lossless JPEG XL (:class:`~replaybuf_zarr.codecs.JpegXLCodec`), JPEG
        (:class:`~replaybuf_zarr.codecs.JpegCodec`) or WebP (:class:`~replaybuf_zarr.codecs.WebPCodec`,
        lossless at :data:`~replaybuf_zarr.codecs.webp.LOSSLESS_LEVEL` effort, or lossy at its quality).

        Raises ValueError / TypeError for a choice that does not parse."""
        from replaybuf_core.layout.frame_choice import parse_frame_choice

        from .frame_choice import zarr_frame_codec

        return zarr_frame_codec(parse_frame_choice("exact" if choice is None else choice))

    def create_schema_arrays(self, schema: Any, **options: Any) -> None:
        """Create the ``data`` arrays a schema declares (:func:`~replaybuf_zarr.creation.create_zarr_arrays`
        with ``options``: ``image_codec``, ``numeric_compressor``, ``image_frames_per_shard``)."""
        from .creation import create_zarr_arrays

        create_zarr_arrays(self.native_group("data"), schema, **options)

    def shape(self, group, name):
        return tuple(self.get_array(group, name).shape)

    def dtype(self, group, name):
        dt = self.get_array(group, name).dtype
        return np.dtype(object) if _is_string_dtype(np.dtype(dt) if not isinstance(dt, np.dtype) else dt) else dt

    def chunks(self, group, name):
        return tuple(self.get_array(group, name).chunks)

    def shards(self, group, name):
        arr = self.get_array(group, name)
        shards = getattr(arr, "shards", None)
        return tuple(shards) if shards is not None else None

    def codec(self, group, name):
        return codec_of_array(self.get_array(group, name))

    @_whole
    def resize(self, group, name, n_rows):
        self._check_writable()
        arr = self.get_array(group, name)
        old = arr.shape[0]
        n_rows = int(n_rows)
        if n_rows < old:
            self._settle((group, name))  # a background write finishing later would bring rows back
            # zarr keeps a partial chunk's stale rows past the new end; a later grow would bring
            # them back.  Overwrite them with the fill value before shrinking.
            obj = (arr.shards or arr.chunks)[0] if self.zarr_format == 3 else arr.chunks[0]
            tail_end = min(old, -(-n_rows // obj) * obj)
            if tail_end > n_rows and not cut_partial_chunk(self, group, name, n_rows):  # (video: as stored bytes)
                fill = arr.fill_value if arr.fill_value is not None else 0  # v2's null: any value; zeros
                arr[n_rows:tail_end] = np.full((tail_end - n_rows,) + arr.shape[1:], fill, dtype=arr.dtype) \
                    if not _is_string_dtype(np.dtype(self.dtype(group, name))) else \
                    np.full((tail_end - n_rows,) + arr.shape[1:], "", dtype=object)
        arr.resize((n_rows,) + tuple(arr.shape[1:]))  # updates ``arr`` in place
        reader = self._readers.get((group, name))
        if reader is not None and n_rows >= old:
            reader.grow(n_rows)
        else:
            self._readers.pop((group, name), None)

    @_whole
    def write(self, group, name, start, values):
        self._check_writable()
        arr = self.get_array(group, name)
        values = np.asarray(values)
        stop = begin_write(group, name, arr, start, values)
        if stop is None:  # a meta scalar, written whole
            return
        key = (group, name)
        self._settle(key)  # zarr-python may rewrite an object a background write is storing
        writer = self._writer(key, arr)
        if writer is not None and (writer.write(start, values) or self._rewrite_objects(key, arr, writer, start, values)):
            self._forget(key, start, stop)
            return
        done = self._append_to_partial_gop(key, start, values)  # a video chunk's committed frames stay as stored
        if done:
            if done < len(values):
                self.write(group, name, start + done, values[done:])
            return
        self._readers.pop(key, None)  # zarr-python may have rewritten any object
        arr[start:stop] = values

    def _forget(self, key: tuple[str, str], start: int, stop: int) -> None:
        """Rows ``[start, stop)`` were rewritten (whole objects around them): drop what the reader
        holds for them."""
        reader = self._readers.get(key)
        if reader is not None:
            reader.forget(start, stop)

    def _rewrite_objects(self, key: tuple[str, str], arr: zarr.Array, writer: ChunkWriter, start: int,
                         values: np.ndarray) -> bool:
        """Read-modify-write of the chunks a write only partly covers (appending to a partial chunk:
        ``EpisodeWriter``'s number keys, ``episode_ends`` commits): the stored rows before and after
        the new ones, within the first and last chunk, come from the fast reader; the chunks are
        encoded whole and stored once.  zarr-python does the same work with ~4 ms more of its own
        machinery per call.  Unsharded arrays only (a shard's other inner chunks would be re-encoded
        too); False when not applicable, nothing written then."""
        if self.zarr_format != 3 or arr.shards is not None:
            return False
        reader = self._reader(*key)
        if reader is None:
            return False
        L = writer.object_len
        stop = start + len(values)
        first, last = (start // L) * L, min(arr.shape[0], -(-stop // L) * L)
        parts = []
        if first < start:
            parts.append(reader.read(first, start))
        parts.append(np.asarray(values))
        if stop < last:
            parts.append(reader.read(stop, last))
        return writer.write(first, np.concatenate(parts) if len(parts) > 1 else parts[0])

    def _writer(self, key: tuple[str, str], arr: zarr.Array) -> ChunkWriter | None:
        if key not in self._writers:
            self._writers[key] = make_writer(arr)
        return self._writers[key]

    def write_async(self, group: str, name: str, start: int, values: np.ndarray) -> Future:
        """Optional protocol method: start writing ``values`` (shape ``(n, ...)``) to rows
        ``[start, start + n)`` and return a ``concurrent.futures.Future`` that is done once they are
        stored (its exception: the encode/store error).  Writes covering whole chunks/shards on a
        ``LocalStore``/``MemoryStore`` are encoded and stored on the codec pool while the caller goes
        on; any other write is done before returning (its future already done).  ``values`` must not
        be modified until the future is done.

        Until a background write is done, reads overlapping its rows wait for it, and so do a
        shrinking resize, a synchronous write, delete/rename of the array, ``flush`` and ``close``.
        Nothing else waits: callers that commit rows (``EpisodeWriter``) wait on the future first.

        Raises (before anything is started): ``ReadOnlyError``; ``IndexError`` when the rows do not
        exist; ``KeyError`` for a missing array.
        """
        self._check_writable()
        arr = self.get_array(group, name)
        values = np.asarray(values)
        key = (group, name)
        if values.ndim and len(arr.shape):
            stop = check_row_region(group, name, arr.shape[0], start, len(values))
            writer = self._writer(key, arr)
            if writer is not None:
                self._settle(key, start, stop)  # two writes of one object must not race
                future = writer.submit(start, values)
                if future is not None:
                    with self._pending_lock:  # from now on reads of these rows wait for the write ...
                        self._pending.setdefault(key, []).append((start, stop, future))
                    self._forget(key, start, stop)  # ... and find nothing of the old objects
                    return future
        self.write(group, name, start, values)
        done: Future = Future()
        done.set_result(True)
        return done

    def _settle(self, key: tuple[str, str], lo: int = 0, hi: int | None = None) -> None:
        """Wait for the background writes of ``key`` overlapping rows ``[lo, hi)`` (all when ``hi``
        is None) and forget every finished one.  Their errors stay with their futures."""
        with self._pending_lock:
            pending = list(self._pending.get(key, ()))
        if not pending:
            return
        wait([f for a, b, f in pending if hi is None or (a < hi and lo < b)])
        with self._pending_lock:
            left = [(a, b, f) for a, b, f in self._pending.get(key, ()) if not f.done()]
            if left:
                self._pending[key] = left
            else:
                self._pending.pop(key, None)

    def settle_writes(self) -> None:
        """Wait for every background write of this store (errors stay with their futures)."""
        with self._pending_lock:
            keys = list(self._pending)
        for key in keys:
            self._settle(key)

    def read(self, group, name, start, stop, step=None):
        if self._pending:
            self._settle((group, name), start, stop)
        if step in (None, 1):
            reader = self._reader(group, name)
            if reader is not None:
                return reader.read(start, stop)
        return _as_object_strings(self.get_array(group, name)[start:stop:step])

    def read_ranges(self, group: str, name: str, starts: Sequence[int], stops: Sequence[int]) -> list[np.ndarray]:
        if self._pending and len(starts):
            self._settle((group, name), int(min(starts)), int(max(stops)))
        reader = self._reader(group, name)
        if reader is not None:
            return reader.read_ranges(starts, stops)
        arr = self.get_array(group, name)
        return [_as_object_strings(arr[a:b]) for a, b in zip(starts, stops)]

    def stored_bytes(self, group: str, name: str) -> int | None:
        """Optional protocol method: bytes stored for the array (metadata + chunk/shard objects)."""
        from .inspection import stored_bytes

        self._settle((group, name))
        return stored_bytes(self.get_array(group, name))

    def check_chunks(self, group: str, name: str, rows: int | None = None) -> list[str]:
        """Optional protocol method: problems with the stored objects (missing chunk/shard files);
        with ``rows``, objects wholly past the first ``rows`` rows (uncommitted ones) are no problem."""
        from .inspection import missing_objects

        self._settle((group, name))
        return missing_objects(self.get_array(group, name), f"{group}/{name}", rows)

    def read_rows(self, group: str, name: str, rows: np.ndarray, out: np.ndarray, at=None, convert=None):
        """Gather ``rows`` (int array of any shape) into ``out`` (``at``: ``"rows_at"``; ``convert``:
        ``"rows_convert"``): the fast reader decodes each chunk touched once; else zarr-python."""
        return self.read_rows_async(group, name, rows, out, at, convert).result()

    def read_rows_async(self, group: str, name: str, rows: np.ndarray, out: np.ndarray, at=None, convert=None) -> Any:
        """Optional protocol method: start :meth:`read_rows`; ``result()`` of what it returns completes
        the read and returns ``out`` (many chunks to decode: pool helpers start now, ``result()`` joins)."""
        if self._pending and np.size(rows):
            self._settle((group, name), int(np.min(rows)), int(np.max(rows)) + 1)
        reader = self._reader(group, name)
        if reader is not None:
            return reader.read_rows_async(rows, out, at, convert)
        return RowsRead(value=read_rows_via_ranges(self, group, name, rows, out, at, convert))

    def read_rows_resized(self, group: str, name: str, rows: np.ndarray, out: np.ndarray, fr: Any) -> np.ndarray | None:
        """Optional protocol method: :meth:`read_rows` of camera frames cropped and resized as ``fr``
        says, each codec its cheapest way (``ChunkReader.read_rows_resized``); None where the fast
        reader does not read the array (the buffer then resizes full frames)."""
        if self._pending and np.size(rows):
            self._settle((group, name), int(np.min(rows)), int(np.max(rows)) + 1)
        reader = self._reader(group, name)
        return None if reader is None else reader.read_rows_resized(rows, out, fr)

    def get_attrs(self, group):  # without the token a writer taking over stamps in (fenced_store.FENCE_ATTR)
        return {k: v for k, v in self._group(group).attrs.items() if k != "replaybuf_writer"}

    @_whole
    def set_attrs(self, group, attrs: Mapping[str, Any]):
        """Set ``attrs`` in one write of ``group``'s ``zarr.json`` (a kill leaves all or none; zarr's
        ``attrs.update`` writes once per key)."""
        self._check_writable()
        self._group(group).update_attributes(dict(attrs))

    def flush(self):
        """Wait for every background write (:meth:`write_async`)."""
        self.settle_writes()

    def remove_debris(self, group: str) -> list[str]:
        """Delete what a killed process leaves in ``group`` (:func:`~replaybuf_zarr.members.remove_debris`;
        ``""``: the root's partial metadata files only) and return the removed names.  Writers only."""
        self._check_writable()
        if group == "":
            local = local_root(self._root.store)
            return remove_partial_metadata(local / self._root.path if local and self._root.path else local)
        return remove_debris(self._group(group), local_root(self._root.store))

    def lock_path(self) -> Path | None:
        """The directory of a ``LocalStore`` root (where the writer lock goes), else None."""
        return local_root(self._root.store)

    def location(self) -> tuple[str, dict | None] | None:
        """``(path or URL, storage_options)`` another process opens this store by (Dask workers);
        None for a store in memory or in a ``.zip``.  A local path is absolute: workers need not
        share this process's working directory."""
        sub, local = self._root.path, local_root(self._root.store)
        if local is not None:
            return str((local / sub if sub else local).absolute()), None
        url = store_url(self._root.store)
        return None if url is None else (f"{url}/{sub}" if sub else url, store_options(self._root.store))

    def hold_version(self, version_id: int) -> Any:
        """A reader's hold of a version against ``gc`` on object storage (:mod:`.reader_holds`), else None."""
        return reader_holds.hold_version(self._root.store, version_id)

    def held_versions(self) -> dict[int, list[str]]:
        """On object storage, version id -> the live readers holding it (:mod:`.reader_holds`), else {}."""
        return reader_holds.held_versions(self._root.store)

    def acquire_writer_lease(self) -> Any:
        """On object storage, the writer's lease (:mod:`.lease`: ``.release()``, ``.check()`` fences a commit; every
        write is then conditional: :mod:`.fenced_store`), else None.  StoreLockedError names a foreign holder."""
        from .lease import take_lease

        if self.read_only or store_url(self._root.store) is None:
            return None
        lease, stamped = take_lease(self._root)
        if stamped:  # every zarr.json now carries this writer's token: forget the copies read before
            self._root = zarr.open_group(self._root.store, path=self._root.path, mode="r+")
            self._arrays.clear(), self._readers.clear(), self._writers.clear(), self._listing.clear()
        return lease

    def close(self):
        self.settle_writes()
        store = self._root.store
        local = local_root(store)
        if local is not None:  # the fast reader's open chunk/shard files of this store
            from .file_pool import FILES

            FILES.release_all(root=str(store.root))
        if type(store).__name__ == "ZipStore":
            store.close()

