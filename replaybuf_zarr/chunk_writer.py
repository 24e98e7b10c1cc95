"""A fast writer of whole chunks / shards for zarr arrays on a ``LocalStore`` or ``MemoryStore``.

zarr-python's write path costs about twice the encoding itself for sharded WebP frames (its async
pipeline hands every 27 KB frame to a thread and back).  When a write covers whole stored objects
(chunks, or shards of chunks) along time, this writer encodes the chunks on a thread pool with the
array's own codecs and stores each object once — a shard is the concatenated chunk bytes followed by
its index of ``(offset, nbytes)`` uint64 pairs and a crc32c, per the Zarr v3 sharding codec spec.
Files are written to a temporary name and renamed, so a crash leaves the old object or the new one.

Layouts it does not know, and writes that do not cover whole objects, make :meth:`ChunkWriter.write`
return False; the caller then writes through zarr-python.  Tests read every object it writes back
through zarr-python.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from typing import Callable

import numpy as np
import zarr

from .layout import ChunkKeys, ShardLayout, chunk_layout
from .pool import submit_map
from .spec_codecs import array_encoder, crc32c
from .zarr_compat import store_set

_EMPTY = 2**64 - 1


class ChunkWriter:
    """Writes whole time-axis objects of one zarr v3 array; build it with :func:`make_writer`."""

    def __init__(self, arr: zarr.Array, encode: Callable, chunk_shape: tuple[int, ...],
                 shard: ShardLayout | None, keys: ChunkKeys):
        self._arr = arr
        self._store = arr.store
        self._key_of = keys
        self._encode = encode
        self._chunk = chunk_shape
        self._shard = shard
        self.object_len = shard.shape[0] if shard else chunk_shape[0]
        self._dtype = arr.dtype
        self._fill = arr.fill_value if arr.fill_value is not None else 0
        from zarr.storage import LocalStore

        self._local = str(self._store.root) if isinstance(self._store, LocalStore) else None

    def _put(self, key: str, data: bytes) -> None:
        if self._local is not None:
            path = os.path.join(self._local, key)
            directory = os.path.dirname(path)
            # mode 0o666 less the umask, as zarr's LocalStore and open() give (mkstemp would make it 0600)
            tmp = os.path.join(directory, f".tmp-{os.urandom(16).hex()}")
            fd = _create(tmp, directory)
            try:
                try:
                    view, done = memoryview(data).cast("B"), 0
                    while done < len(view):
                        done += os.write(fd, view[done:])
                finally:
                    os.close(fd)
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            return
        store_set(self._store, key, data)

    def link_object(self, src: "ChunkWriter", src_index: int, index: int) -> bool:
        """Make stored object ``index`` (a shard, else a chunk, along time) of this array a hard link
        to object ``src_index`` of ``src``'s array — the same layout, both in one ``LocalStore``
        directory tree.  Where the object does not exist yet the link is made at its name (one
        atomic ``link``); where it is that file already, nothing is done; else through a temporary
        link and a rename (a kill leaves the old object or the new one).  No byte is read or
        written: a backup of whole shards costs a link each.  Safe because nothing writes an object
        in place: this writer and zarr-python's ``LocalStore`` (``_atomic_write``) store every object
        as a new file renamed over the old one, and a deletion unlinks one name only.  False,
        nothing changed, when either array is not on local disk, the source object was never
        written (or is not a file), or the file system refuses (another device)."""
        if self._local is None or src._local is None:
            return False
        tail = (0,) * (len(self._chunk) - 1)
        source = os.path.join(src._local, src._key_of((int(src_index),) + tail))
        path = os.path.join(self._local, self._key_of((int(index),) + tail))
        directory = os.path.dirname(path)
        try:
            _link(source, path, directory)
            return True
        except FileExistsError:
            pass
        except OSError:
            return False  # no source file, a directory, another device, a refusing file system
        try:
            if os.path.samefile(source, path):
                return True  # already that file (a roll-back's shards the edit had not rewritten yet)
        except OSError:
            pass
        tmp = os.path.join(directory, f".tmp-{os.urandom(16).hex()}")
        try:
            _link(source, tmp, directory)
        except OSError:
            return False
        try:
            os.replace(tmp, path)
        finally:  # rename(2) of two names of one file does nothing and leaves both: never keep the temporary one
            if os.path.lexists(tmp):
                os.unlink(tmp)
        return True

    def write(self, start: int, values: np.ndarray) -> bool:
        """Store rows ``[start, start + len(values))``; True when done, False when the write does not
        cover whole objects (or the array is shorter than it) — nothing is written then."""
        fut = self.submit(start, values)
        if fut is None:
            return False
        fut.result()
        return True

    def submit(self, start: int, values: np.ndarray) -> Future | None:
        """Start storing rows ``[start, start + len(values))`` in the background: the chunks are
        encoded on the codec pool and, once the last one is done, the objects are stored by the pool
        thread that finished it.  Returns a ``concurrent.futures.Future`` (result True; the
        exception of a failed encode or store), or None — nothing started — when the write does not
        cover whole objects.  ``values`` must not be modified until the future is done.

        Several submitted writes queue on the pool in order, so the encoding of one overlaps the
        tail of the previous one and whatever the caller does meanwhile (staging the next episodes).
        """
        n_rows = self._arr.shape[0]
        stop = start + len(values)
        L = self.object_len
        if start % L or not (stop % L == 0 or stop == n_rows) or stop > n_rows or len(values) == 0:
            return None
        values = np.asarray(values).astype(self._dtype, copy=False)
        c0 = self._chunk[0]
        # every chunk of the block, padded with the fill value at the array's end
        n_chunks = -(-len(values) // c0)
        chunks = []
        for i in range(n_chunks):
            part = values[i * c0:(i + 1) * c0]
            if len(part) < c0:
                padded = np.full(self._chunk, self._fill, dtype=self._dtype)
                padded[: len(part)] = part
                part = padded
            chunks.append(part)
        first = start // c0
        return submit_map(self._encode, chunks, lambda encoded: self._store_objects(first, encoded))

    def _store_objects(self, first: int, encoded: list[bytes]) -> bool:
        """Store encoded chunks ``first, first + 1, ...`` (whole shards when sharded)."""
        if self._shard is None:
            for i, data in enumerate(encoded):
                coords = (first + i,) + (0,) * (len(self._chunk) - 1)
                self._put(self._key_of(coords), data)
            return True
        per = self._shard.per_shard[0]
        for s0 in range(0, len(encoded), per):
            block = encoded[s0: s0 + per]
            index = np.full((per, 2), _EMPTY, dtype="<u8")
            offset = self._shard.index_size if not self._shard.at_end else 0
            for j, data in enumerate(block):
                index[j] = (offset, len(data))
                offset += len(data)
            index_bytes = index.tobytes()
            if self._shard.crc:
                index_bytes += crc32c(index_bytes).to_bytes(4, "little")
            body = b"".join(block)
            shard_bytes = body + index_bytes if self._shard.at_end else index_bytes + body
            coords = ((first + s0) // per,) + (0,) * (len(self._chunk) - 1)
            self._put(self._key_of(coords), shard_bytes)
        return True


def _create(path: str, directory: str) -> int:
    """A new file at ``path`` open for writing (mode 0o666 less the umask), its ``directory`` made
    when missing — made only then: on a store of thousands of objects a ``makedirs`` before every
    write cost a fifth of an edit."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        return os.open(path, flags, 0o666)
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        return os.open(path, flags, 0o666)


def _link(source: str, path: str, directory: str) -> None:
    """``os.link(source, path)``, ``path``'s ``directory`` made when missing (see :func:`_create`)."""
    try:
        os.link(source, path)
    except FileNotFoundError:
        if not os.path.exists(source):
            raise
        os.makedirs(directory, exist_ok=True)
        os.link(source, path)


def make_writer(arr: zarr.Array) -> ChunkWriter | None:
    """A :class:`ChunkWriter` for ``arr``, or None when its layout/store is not supported.

    Supported: zarr v3, regular grid, chunks (and shards) spanning every dimension but time, a
    bytes/WebP serializer with Blosc/Zstd/Gzip/crc32c compressors, shard indexes ``[bytes, crc32c]``.
    """
    from zarr.storage import LocalStore, MemoryStore

    if not isinstance(arr.store, (LocalStore, MemoryStore)) or arr.ndim == 0:
        return None
    dtype = arr.dtype if isinstance(arr.dtype, np.dtype) else None
    if dtype is None or dtype.kind not in "biufc":
        return None
    layout = chunk_layout(arr)
    if layout is None or layout.zarr_format != 3 or layout.dtype != dtype.newbyteorder("="):
        return None
    if layout.chunk_shape[1:] != tuple(arr.shape[1:]):
        return None  # chunks must span every dimension but time
    encode = array_encoder(layout.codecs, layout.chunk_shape, dtype)
    if encode is None:
        return None
    return ChunkWriter(arr, encode, layout.chunk_shape, layout.shard, layout.keys)
