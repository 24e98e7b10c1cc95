"""The storage protocol: the verbs a backend provides, and the entry-point class that makes one.

A backend knows arrays in two groups, ``"data"`` and ``"meta"``; it does not know what an episode is
(that is :class:`replaybuf_core.ReplayBuffer`'s job).  Arrays are addressed by ``(group, name)``; time
is axis 0.  Row regions are half-open ``[start, stop)`` ranges along axis 0.

Capabilities a backend may declare in :attr:`StorageBackend.capabilities`:

``"chunks"``       ``chunks()`` answers and ``create_array(chunks=...)`` is honoured
``"codecs"``       ``codec()`` answers and ``create_array(codec=...)`` is honoured
``"shards"``       ``shards()`` answers and ``create_array(shards=...)`` is honoured
``"persistent"``   data survives the process (a file or directory store) — including its death: what
                   was committed before a SIGKILL opens again (``persist`` below; the kill trials
                   of :class:`replaybuf_core.testing.conformance.CrashConformance` hold a backend to it)
``"batched_read"`` ``read_ranges`` serves many row ranges with one read per chunk touched
``"versions"``     a third group ``"versions"`` (created on first use) holds older versions' undos
``"rows_at"``      ``read_rows`` and ``read_rows_async`` take ``at=`` (see there)
``"rows_convert"`` ``read_rows`` and ``read_rows_async`` of camera frames (uint8 ``(T, H, W, C)``) take
                   ``convert=`` (a :class:`~replaybuf_core.layout.frame_convert.FrameConversion`):
                   ``out`` has the converted step shape and dtype, each frame converted as it is
                   decoded (elsewhere the buffer gathers uint8 frames, then converts them)

Optional methods, called only when present (``getattr(store, name, None)``):

``accepts_codec(codec) -> bool``      copies fall back to the "default" preset when False
``image_codec(choice=None)``          the serializer for camera frames of a ``FrameChoice``
                                      (:mod:`replaybuf_core.layout.frame_choice`; None: ``exact``;
                                      zarr: JPEG XL, JPEG or WebP); absent: frames get the "default"
                                      preset, and a lossy choice is refused (the import asks for it)
``codecs_equal(a, b) -> bool``        ``set_compressors`` skips arrays already using the codec
``cache_bytes`` (property, settable)  size of a cache of decoded chunks (``ReplayBuffer.cache_bytes``)
``pin(group, name) -> bool``          load an array wholly into memory (``ReplayBuffer.warm``)
``pinned(group, name) -> ndarray | None``  the read-only copy ``pin`` made (``rb[key]`` then indexes it)
``read_rows(group, name, rows, out)``  gather arbitrary rows (int array of any shape) into ``out``
                                      (shape ``rows.shape + step shape``); else :func:`read_rows_via_ranges`
``read_rows_async(group, name, rows, out)``  start that gather; returns an object whose ``result()``
                                      finishes it and returns ``out`` (the sampler starts every key first).
                                      With ``"rows_at"``, both take ``at=`` (int (n,), n = ``len(rows)``,
                                      distinct): row ``i`` of ``rows`` goes to ``out[at[i]]``, ``out``
                                      of shape ``(m,) + rows.shape[1:] + step shape`` (a mixture's store
                                      reads its share of a batch straight into the batch's rows)
``write_async(group, name, start, values) -> Future``  a ``write`` that may finish in the background
                                      (``EpisodeWriter`` overlaps encoding with staging); the
                                      ``concurrent.futures.Future`` carries its error.  Until it is done,
                                      the backend makes overlapping reads, shrinking resizes,
                                      deletes/renames, ``flush`` and ``close`` wait for it
``copy_stored(src, src_group, src_name, group, name, n_rows) -> bool``  fill the new, empty array
                                      with ``src``'s stored objects holding its first ``n_rows`` rows,
                                      byte for byte (same codecs and layout); False: not possible,
                                      nothing written — copies then go row by row
``can_splice(group, name) -> bool``   rows of the array can be moved by ``splice_rows`` (frames of a
                                      frame codec: no frame decoded or encoded)
``splice_rows(group, name, start, pieces, src_group=None) -> bool``  rows ``[start, start + n)`` become the rows
                                      ``pieces`` name (``(array, a, b)``: rows of other arrays of
                                      ``src_group`` (default ``group``) with the same chunks and codecs), moved as stored bytes
                                      (a one-frame codec's chunks whole, a video chunk's packets
                                      re-cut), the array ending there; ``start`` on the chunk grid.
                                      False: not possible, the caller writes the rows (edits:
                                      :mod:`replaybuf_core.store.editing`)
``persist()``                         make everything written so far survive the death of this process
                                      (not a power loss); ``ReplayBuffer`` calls it after every commit
                                      of ``meta/episode_ends``, so a backend that buffers writes (an
                                      HDF5 file's cache) keeps the "a kill loses at most the episode
                                      in flight" promise.  Absent: every write is already durable
``location() -> (str, dict | None) | None``  the path or URL (and ``storage_options``) by which
                                      another process opens this store (Dask workers of
                                      :mod:`replaybuf_core.cluster.copy`); None: only this process
                                      reaches it (memory)
``lock_path() -> path | None``        directory where writable opens take the writer lock
                                      (:mod:`replaybuf_core.locking`); None: no lock
``remove_debris(group) -> list[str]`` delete leftovers of a killed writer that are not arrays
                                      (half-deleted directories, partial files); called on recovery
                                      for ``data``, ``meta``, the versions group (with ``"versions"``)
                                      and ``""`` (the root: only its own metadata's partial files)
``fill_value(group, name)``           an array's fill value (else read from the native array's
                                      ``fill_value``/``fillvalue``; :mod:`replaybuf_core.store.recovery`)
``stored_bytes(group, name) -> int | None``  bytes on storage for one array (``replaybuf info``)
``check_chunks(group, name, rows=None) -> list[str]``  problems with the stored objects, e.g. a
                                      missing chunk file (``replaybuf verify``; decoding is checked by
                                      reading); ``rows``: only objects holding some of the first
                                      ``rows`` rows (the committed ones) count
``reclaimable_bytes() -> int``       bytes of the store's file that hold nothing any more (a backend
                                      that never reuses freed space: HDF5); ``replaybuf edit`` repacks
                                      the file when they are a quarter of it or more (``compact``), or
                                      says how to
``compact() -> (int, int)``           rewrite the store's file with its live objects only (built
                                      beside, swapped in; HDF5), reopening it; returns its bytes before
                                      and after
``create_schema_arrays(schema, **options)``  create the ``data`` arrays a
                                      :class:`~replaybuf_core.layout.schema.DatasetSchema` declares
                                      (:mod:`replaybuf_core.store.creation`; options ``image_codec``,
                                      ``numeric_compressor``, ``image_frames_per_shard``)

Optional methods of a :class:`BackendEntrypoint`:

``check_schema(schema, **options)``   check what ``create_schema_arrays`` would be given, creating
                                      nothing (before a path is touched)
``as_data_group(native_group)``       a backend whose ``data`` group is any native group (the seed's
                                      ``rechunk_recompress_array``)
``break_lock(location, *, storage_options=None, force=False) -> holder | None``  break the writer
                                      lock or lease a dead writer left behind, or with ``force`` a live
                                      (or paused) writer's — which must then be unable to write beside
                                      the next writer (``replaybuf unlock``)
``delete_store(location, *, storage_options=None) -> int``  delete a store that has no directory to
                                      remove (object storage), under its writer lease (``replaybuf delete``)

A writer lock or lease a writable open takes (``lock_path`` / the backend's ``acquire_writer_lease()``)
may carry ``check()``: the buffer calls it before every change, data write and commit, and it raises
``StoreLockedError`` once the lease was lost (:mod:`replaybuf_zarr.lease`: the fence).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

GROUPS = ("data", "meta")

CAP_CHUNKS = "chunks"
CAP_CODECS = "codecs"
CAP_SHARDS = "shards"
CAP_PERSISTENT = "persistent"
CAP_BATCHED_READ = "batched_read"
#: the backend keeps a third group, :data:`VERSIONS_GROUP`, for the undos of older versions
#: (:mod:`replaybuf_core.store.versions`): arrays there are created, read, written and deleted with the
#: same verbs; readers of ``data`` and ``meta`` (plain zarr-python, diffusion_policy) never see them
CAP_VERSIONS = "versions"
VERSIONS_GROUP = "versions"
#: ``read_rows`` / ``read_rows_async`` take ``at=``: the rows land in the rows of ``out`` it names
CAP_ROWS_AT = "rows_at"
#: ``read_rows`` / ``read_rows_async`` of camera frames take ``convert=`` (a ``FrameConversion``)
CAP_ROWS_CONVERT = "rows_convert"
KNOWN_CAPABILITIES = frozenset({CAP_CHUNKS, CAP_CODECS, CAP_SHARDS, CAP_PERSISTENT, CAP_BATCHED_READ, CAP_VERSIONS,
                                CAP_ROWS_AT, CAP_ROWS_CONVERT})


@runtime_checkable
class StorageBackend(Protocol):
    """An open root holding the groups ``data`` and ``meta``: the storage verbs replaybuf needs.

    Strings: arrays of Python ``str`` are created with ``dtype=object``; ``read`` returns them as
    ``object`` arrays of ``str`` whatever the backend stores natively.
    Errors: a missing array is a ``KeyError`` naming ``group/name``; a write on a read-only root is a
    :class:`replaybuf_core.errors.ReadOnlyError`.
    """

    name: str
    """The backend's registered name, e.g. ``"zarr"``."""
    capabilities: frozenset[str]
    """Subset of :data:`KNOWN_CAPABILITIES`."""
    read_only: bool

    @property
    def root(self) -> Any:
        """The native root object (``zarr.Group``, ``dict``, ``h5py.File``...)."""

    def has_group(self, group: str) -> bool: ...

    def require_group(self, group: str) -> None: ...

    def native_group(self, group: str) -> Any:
        """The native object of a group (what ``ReplayBuffer.data`` / ``.meta`` return)."""

    def list_arrays(self, group: str) -> list[str]:
        """Names of the arrays directly in ``group``, sorted."""

    def has_array(self, group: str, name: str) -> bool: ...

    def get_array(self, group: str, name: str) -> Any:
        """The native array object; supports ``.shape``, ``.dtype`` and ``[slice]`` → ndarray."""

    def create_array(
        self,
        group: str,
        name: str,
        *,
        shape: tuple[int, ...],
        dtype: np.dtype,
        chunks: tuple[int, ...] | None = None,
        codec: Any = None,
        shards: tuple[int, ...] | None = None,
        fill_value: Any = None,
    ) -> None:
        """Create an array (replacing none: the name must be free) filled with ``fill_value``.

        ``codec`` is a compressor (e.g. ``numcodecs.Blosc``) or a serializer the backend understands;
        ``None`` means uncompressed.  Backends ignore ``chunks``/``codec``/``shards`` they lack the
        capability for."""

    def delete_array(self, group: str, name: str) -> None: ...

    def rename_array(self, group: str, src: str, dst: str) -> None:
        """Move an array to a free name in the same group (atomic where the store allows)."""

    def shape(self, group: str, name: str) -> tuple[int, ...]: ...

    def dtype(self, group: str, name: str) -> np.dtype: ...

    def chunks(self, group: str, name: str) -> tuple[int, ...] | None:
        """Chunk shape (the read unit), or ``None`` when the backend has no chunks."""

    def shards(self, group: str, name: str) -> tuple[int, ...] | None:
        """Shard shape (the stored-object unit), or ``None`` when unsharded."""

    def codec(self, group: str, name: str) -> Any:
        """The array's compressor, or its serializer when that is not plain bytes (e.g. WebP);
        ``None`` when uncompressed or unknown to the backend."""

    def resize(self, group: str, name: str, n_rows: int) -> None:
        """Set the length of axis 0.  Rows dropped by a shrink must not reappear after a later grow
        (grown rows hold the fill value)."""

    def write(self, group: str, name: str, start: int, values: np.ndarray) -> None:
        """Write ``values`` to rows ``[start, start + len(values))``; the rows must exist."""

    def read(self, group: str, name: str, start: int, stop: int, step: int | None = None) -> np.ndarray:
        """Rows ``[start:stop:step]`` as an ndarray (``0 <= start <= stop <= len``); in-memory
        backends may return a view, callers copy when they need to."""

    def read_ranges(
        self, group: str, name: str, starts: Sequence[int], stops: Sequence[int]
    ) -> list[np.ndarray]:
        """Many row ranges at once (one ndarray per range; may be read-only views of cached or
        in-memory data — callers copy before writing).  Backends without ``"batched_read"`` may
        implement it as a loop over :meth:`read`."""

    def get_attrs(self, group: str) -> dict[str, Any]: ...

    def set_attrs(self, group: str, attrs: Mapping[str, Any]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class BackendEntrypoint:
    """What a plugin registers: a small named class that opens and creates roots of one backend.

    Subclasses set :attr:`name`, :attr:`description`, :attr:`capabilities` and implement the three
    methods.  Modelled on xarray's ``BackendEntrypoint`` (``open_dataset`` + ``guess_can_open``).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    capabilities: ClassVar[frozenset[str]] = frozenset()

    def guess_can_open(self, obj: Any) -> bool:
        """True when ``obj`` (a native root, a store object, a path...) is this backend's."""
        return False

    def open(self, obj: Any, *, read_only: bool = False) -> StorageBackend:
        """Open an existing root.  Raises ``ValueError``/``FileNotFoundError`` for what it cannot open."""
        raise NotImplementedError

    def create(self, store: Any = None, *, if_exists: str = "replace", **kwargs: Any) -> StorageBackend:
        """Create (or reuse, see ``if_exists``) a root holding empty ``data`` and ``meta`` groups.

        ``store=None`` means the backend's in-memory default.  ``if_exists``: ``"replace"`` clears an
        existing root, ``"append"`` keeps what is there, ``"raise"`` raises ``FileExistsError``."""
        raise NotImplementedError


def check_row_region(group: str, name: str, n_rows: int, start: int, n: int) -> int:
    """Return ``stop = start + n`` for a write of ``n`` rows at ``start`` into ``group/name`` of
    ``n_rows`` rows — the rows must exist (backends call this in ``write``).

    Raises:
        IndexError: ``start < 0`` or ``stop > n_rows`` (names the array and the rows).
    """
    stop = start + n
    if start < 0 or stop > n_rows:
        raise IndexError(f"rows [{start}, {stop}) are outside {group}/{name} of length {n_rows}")
    return stop


class Pending:
    """Work started now and finished once, later: the answer of every ``*_async`` read (a sampler's
    batch, a mixture's batch, a read placed through a temporary) — ``finish()``'s value, computed by
    the first :meth:`result`; later calls return the same value or raise the same error, so a caller
    that retries never gets a batch a failed read left half written.

    Args:
        finish: completes the work started and returns its value; an exception it raises is kept.
    """

    def __init__(self, finish: Callable[[], Any]):
        self._finish: Callable[[], Any] | None = finish
        self._value: Any = None
        self._error: BaseException | None = None

    def result(self) -> Any:
        """``finish()``'s value (computed on the first call, returned again after); raises its error
        on this and every later call."""
        if self._error is not None:
            raise self._error
        if self._finish is not None:
            finish, self._finish = self._finish, None
            try:
                self._value = finish()
            except BaseException as exc:
                self._error = exc
                raise
        return self._value


def distinct(values: np.ndarray) -> bool:
    """Whether the 1-D int array ``values`` names no value twice (an ``at=``): a strictly increasing
    one (a mixture's rows of one store) is seen without sorting."""
    return values.size < 2 or bool(np.all(values[1:] > values[:-1])) or np.unique(values).size == values.size


def read_rows_via_ranges(store: StorageBackend, group: str, name: str, rows: np.ndarray,
                         out: np.ndarray, at: np.ndarray | None = None, convert: Any = None) -> np.ndarray:
    """Gather ``rows`` (int array, any shape, in range) of ``group/name`` into ``out`` through
    ``read_ranges``: the distinct rows are read as runs of consecutive rows, then indexed.  ``at``
    (int (n,)): row ``i`` of ``rows`` goes to ``out[at[i]]`` (see ``"rows_at"``); ``convert``
    (a ``FrameConversion``): the frames gathered as stored, then converted into ``out`` (see
    ``"rows_convert"``)."""
    rows = np.asarray(rows, dtype=np.int64)
    if convert is not None:
        staged = np.empty(rows.shape + tuple(store.shape(group, name)[1:]), store.dtype(group, name))
        return convert.convert_rows(read_rows_via_ranges(store, group, name, rows, staged), out, at)
    if rows.size == 0:
        return out
    if at is not None:
        out[at] = read_rows_via_ranges(store, group, name, rows, np.empty(rows.shape + out.shape[rows.ndim:], out.dtype))
        return out
    uniq = np.unique(rows)
    breaks = np.flatnonzero(np.diff(uniq) != 1) + 1
    starts = uniq[np.r_[0, breaks]]
    stops = uniq[np.r_[breaks - 1, uniq.size - 1]] + 1
    parts = store.read_ranges(group, name, starts, stops)
    data = np.concatenate(parts) if len(parts) > 1 else np.asarray(parts[0])
    out[...] = data[np.searchsorted(uniq, rows)]
    return out


def begin_write(group: str, name: str, arr: Any, start: int, values: np.ndarray) -> int | None:
    """The common head of a backend's ``write``: a 0-d array or value (a meta scalar) is assigned
    whole here and None returned; otherwise the rows are checked (:func:`check_row_region`) and
    ``stop`` returned for the caller to write ``arr[start:stop] = values``.

    Raises:
        IndexError: the rows do not exist.
    """
    if values.ndim == 0 or len(arr.shape) == 0:
        arr[...] = values
        return None
    return check_row_region(group, name, arr.shape[0], start, len(values))
