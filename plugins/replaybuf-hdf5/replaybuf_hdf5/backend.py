"""The HDF5 backend: one HDF5 file (or any ``h5py.Group``) holding the groups ``data`` and ``meta``.

Layout: every array is a chunked, resizable dataset (``maxshape=(None, *shape[1:])``) except 0-d meta
scalars, which HDF5 stores contiguous (no chunks, no filters).  Strings are variable-length UTF-8
(``h5py.string_dtype()``) and read back as ``object`` arrays of ``str``.  Codecs: see
:mod:`replaybuf_hdf5.codecs`.  Deleting or rechunking an array does not shrink the file (HDF5 does not
reclaim space; run ``h5repack`` to compact it).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from replaybuf_core.errors import ReadOnlyError
from replaybuf_core.protocol import CAP_CHUNKS, CAP_CODECS, CAP_PERSISTENT, GROUPS, BackendEntrypoint

from . import codecs as _codecs

# Importing hdf5plugin (when installed) registers its filters with HDF5 for this process: datasets
# written with Blosc/Zstd by any process can then be read and appended to by this one.
_codecs.has_hdf5plugin()

H5_SUFFIXES = (".h5", ".hdf5")
_JSON_ATTRS = "_replaybuf_json_attrs"
"""Hidden group attribute naming the attributes stored as JSON text (lists, dicts, None)."""


def _is_string_dtype(dtype: np.dtype) -> bool:
    return dtype == object or dtype.kind in ("U", "T", "S")


def _is_h5_string(ds: h5py.Dataset) -> bool:
    return h5py.check_string_dtype(ds.dtype) is not None


def _as_object_strings(values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in ("U", "T"):
        return arr.astype(object)
    return arr


class StrGroup(h5py.Group):
    """An ``h5py.Group`` whose item access returns string datasets as their ``.asstr()`` view, so
    ``buffer.meta["task"][()]`` is a ``str`` as on the other backends (plain h5py gives ``bytes``).
    Everything else is the h5py group: ``.attrs``, ``.keys()``, ``.create_dataset`` ...; the
    underlying dataset of a string view is ``view._dset``."""

    def __getitem__(self, name):
        obj = super().__getitem__(name)
        if isinstance(obj, h5py.Dataset) and _is_h5_string(obj):
            return obj.asstr()
        return obj


class Hdf5Backend:
    """:class:`~replaybuf_core.protocol.StorageBackend` over an ``h5py.File`` or ``h5py.Group``.

    Args:
        root: the group holding ``data``/``meta`` (usually the ``h5py.File``).
        read_only: refuse writes (:class:`~replaybuf_core.errors.ReadOnlyError`); forced True when
            the file is open in mode ``"r"``.
        owns_file: :meth:`close` closes ``root.file`` (True when the backend opened the file itself).

    Capabilities: ``chunks``, ``codecs`` and ``persistent`` (the last one not for an in-memory file,
    ``driver="core", backing_store=False``).  No ``shards``; ``read_ranges`` is a loop over ``read``.
    Errors: a missing array is a ``KeyError`` naming ``group/name``; writes on a read-only root raise
    ``ReadOnlyError``; a name already taken is a ``ValueError``.
    """

    name = "hdf5"

    def __init__(self, root: h5py.Group, *, read_only: bool = False, owns_file: bool = False):
        if not isinstance(root, h5py.Group):
            raise TypeError(f"the hdf5 backend needs an h5py.File or h5py.Group, got {type(root).__name__}")
        self._root = root
        self._fresh: set[tuple[str, str]] = set()  # string datasets whose tail chunk was rebuilt
        self._owns_file = owns_file
        self._filename = root.file.filename
        file_ro = root.file.mode == "r"
        self.read_only = bool(read_only) or file_ro
        caps = {CAP_CHUNKS, CAP_CODECS}
        if not _is_memory_file(root.file):
            caps.add(CAP_PERSISTENT)
            if not self.read_only:
                _hold_metadata_until_flush(root.file)
        self.capabilities = frozenset(caps)

    # -- groups ---------------------------------------------------------------------------------
    @property
    def root(self) -> h5py.Group:
        """The ``h5py.File`` (or group) holding ``data`` and ``meta``."""
        return self._root

    @property
    def filename(self) -> str:
        """The HDF5 file's name (a made-up name for in-memory files)."""
        return self._filename

    def has_group(self, group: str) -> bool:
        return isinstance(self._root.get(group), h5py.Group)

    def require_group(self, group: str) -> None:
        """Create ``group`` if missing. Raises ReadOnlyError; ValueError when ``group`` is a dataset."""
        self._check_writable()
        existing = self._root.get(group)
        if existing is None:
            self._root.create_group(group)
        elif not isinstance(existing, h5py.Group):
            raise ValueError(f"{group!r} in the HDF5 file is a dataset, not a group")

    def native_group(self, group: str) -> StrGroup:
        """The group as a :class:`StrGroup`: an ``h5py.Group`` whose string datasets read as ``str``."""
        return StrGroup(self._group(group).id)

    def _group(self, group: str) -> h5py.Group:
        if group not in GROUPS:
            raise ValueError(f"unknown group {group!r}; groups are {GROUPS}")
        g = self._root.get(group)
        if g is None:
            raise KeyError(f"group {group!r} is missing from the HDF5 file {self.filename}")
        if not isinstance(g, h5py.Group):
            raise KeyError(f"{group!r} in the HDF5 file is a dataset, not a group")
        return g

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"the HDF5 file {self.filename} is open read-only")

    def _dataset(self, group: str, name: str) -> h5py.Dataset:
        ds = self._group(group).get(name)
        if not isinstance(ds, h5py.Dataset):
            raise KeyError(f"no array {group}/{name} in the HDF5 file {self.filename}")
        return ds

    # -- arrays ---------------------------------------------------------------------------------
    def list_arrays(self, group: str) -> list[str]:
        g = self._group(group)
        return sorted(k for k in g if isinstance(g.get(k), h5py.Dataset))

    def has_array(self, group: str, name: str) -> bool:
        try:
            return isinstance(self._group(group).get(name), h5py.Dataset)
        except KeyError:
            return False

    def get_array(self, group: str, name: str) -> Any:
        """The ``h5py.Dataset``; for string datasets its ``.asstr()`` view (``dtype`` object,
        ``[slice]`` → object array of ``str``).  Raises KeyError naming ``group/name``."""
        ds = self._dataset(group, name)
        return ds.asstr() if _is_h5_string(ds) else ds

    def create_array(self, group, name, *, shape, dtype, chunks=None, codec=None, shards=None, fill_value=None):
        """Create a dataset of ``shape`` (time on axis 0, resizable) and ``dtype`` (``object`` →
        variable-length UTF-8 strings).

        ``chunks``: tuple, one entry per axis (non-time entries are clamped to the shape, HDF5 needs
        that for fixed axes); ``None`` → h5py's guess.  ``codec``: see :mod:`replaybuf_hdf5.codecs`.
        String datasets are stored without a filter whatever ``codec`` says (HDF5 would compress
        only the heap references).  ``shards`` is ignored (no shard capability).  ``fill_value`` is the HDF5 fill value
        (numeric/bool arrays; strings fill with ``""``).  0-d shapes make a contiguous scalar dataset
        without chunks or codec.

        Raises:
            ReadOnlyError: read-only root.  ValueError: the name is taken.
            TypeError / ValueError: an unsupported codec (see :func:`~replaybuf_hdf5.codecs.to_h5_filter`).
        """
        self._check_writable()
        g = self._group(group)
        if name in g:
            raise ValueError(f"array {group}/{name} already exists")
        shape = tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        is_str = _is_string_dtype(dtype)
        h5_dtype = h5py.string_dtype() if is_str else dtype
        kwargs: dict[str, Any] = {}
        if fill_value is not None and not is_str:
            kwargs["fillvalue"] = np.asarray(fill_value, dtype=dtype)
        if len(shape) == 0:
            g.create_dataset(name, shape=(), dtype=h5_dtype, **kwargs)
            return
        filters = _codecs.to_h5_filter(codec)  # validate even where it is not applied
        if not is_str:  # filters on variable-length strings only compress heap pointers: skipped
            kwargs.update(filters)
        maxshape = (None,) + tuple(s if s > 0 else None for s in shape[1:])
        if chunks is not None:
            chunks = tuple(int(c) for c in chunks)
            if len(chunks) != len(shape):
                raise ValueError(f"chunks {chunks} do not match the rank of shape {shape}")
            chunks = (max(1, chunks[0]),) + tuple(
                max(1, min(c, s)) if s > 0 else max(1, c) for c, s in zip(chunks[1:], shape[1:]))
        g.create_dataset(name, shape=shape, maxshape=maxshape, dtype=h5_dtype,
                         chunks=chunks if chunks is not None else True, **kwargs)

    def delete_array(self, group, name):
        """Unlink the dataset (its space is not reclaimed). Raises KeyError, ReadOnlyError."""
        self._check_writable()
        self._dataset(group, name)
        del self._group(group)[name]

    def rename_array(self, group, src, dst):
        """``h5py.Group.move`` (one link operation, atomic within the file).
        Raises KeyError (no ``src``), ValueError (``dst`` taken), ReadOnlyError."""
        self._check_writable()
        self._dataset(group, src)
        g = self._group(group)
        if dst in g:
            raise ValueError(f"cannot rename {group}/{src} to {dst!r}: the name is taken")
        g.move(src, dst)

    def shape(self, group, name):
        return tuple(self._dataset(group, name).shape)

    def dtype(self, group, name):
        """The numpy dtype; ``object`` for string datasets."""
        ds = self._dataset(group, name)
        return np.dtype(object) if _is_h5_string(ds) else ds.dtype

    def chunks(self, group, name):
        """The dataset's chunk shape (``None`` for 0-d scalars, which are contiguous)."""
        ck = self._dataset(group, name).chunks
        return tuple(ck) if ck is not None else None

    def shards(self, group, name):
        """Always ``None``: HDF5 has no shards (one file holds every chunk)."""
        self._dataset(group, name)
        return None

    def codec(self, group, name):
        """The dataset's compression as a codec spec; see :func:`~replaybuf_hdf5.codecs.codec_from_dataset`."""
        return _codecs.codec_from_dataset(self._dataset(group, name))

    def accepts_codec(self, codec: Any) -> bool:
        """Optional protocol verb: True when ``codec`` has an HDF5 form (:func:`~replaybuf_hdf5.codecs.
        to_h5_filter`); a copy falls back to the "default" preset for one that has none (a zarr frame
        codec: WebP, JPEG XL, JPEG, video), storing the decoded values."""
        try:
            _codecs.to_h5_filter(codec)
        except (TypeError, ValueError):
            return False
        return True

    def stored_bytes(self, group: str, name: str) -> int | None:
        """Optional protocol verb: bytes the dataset's data take in the file (HDF5's storage size)."""
        return int(self._dataset(group, name).id.get_storage_size())

    @staticmethod
    def codecs_equal(a: Any, b: Any) -> bool:
        """Whether two codec specs give the same HDF5 filter (used by ``set_compressors``)."""
        return _codecs.codecs_equal(a, b)

    def resize(self, group, name, n_rows):
        """Set the length of axis 0.  On a shrink the dropped rows of the last kept chunk are first
        overwritten with the fill value, so a later grow shows fill values, never old rows (HDF5
        ≥ 1.10 does this itself; the explicit write keeps it true on any build).
        Raises ReadOnlyError, KeyError, ValueError (negative ``n_rows``)."""
        self._check_writable()
        ds = self._dataset(group, name)
        n_rows = int(n_rows)
        if n_rows < 0:
            raise ValueError(f"cannot resize {group}/{name} to {n_rows} rows")
        self._fresh_string_tail(group, name, ds)
        old = ds.shape[0]
        if n_rows < old and ds.chunks is not None:
            c = ds.chunks[0]
            tail_end = min(old, -(-n_rows // c) * c)
            if tail_end > n_rows:
                ds[n_rows:tail_end] = self._fill_block(ds, tail_end - n_rows)
        ds.resize(n_rows, axis=0)

    @staticmethod
    def _fill_block(ds: h5py.Dataset, n: int) -> np.ndarray:
        shape = (n,) + tuple(ds.shape[1:])
        if _is_h5_string(ds):
            block = np.empty(shape, dtype=object)
            block[...] = ""
            return block
        fill = ds.fillvalue
        return np.full(shape, fill if fill is not None else 0, dtype=ds.dtype)

    def write(self, group, name, start, values):
        """Write ``values`` (shape ``(n, *shape[1:])``) to rows ``[start, start + n)``; a 0-d array
        takes a 0-d value.  Raises IndexError (rows outside the array), ReadOnlyError, KeyError."""
        self._check_writable()
        ds = self._dataset(group, name)
        values = np.asarray(values)
        if _is_h5_string(ds) and values.dtype.kind in ("U", "T"):
            values = values.astype(object)
        if values.ndim == 0 or ds.ndim == 0:  # a meta scalar
            ds[()] = values
            return
        stop = start + len(values)
        if start < 0 or stop > ds.shape[0]:
            raise IndexError(f"rows [{start}, {stop}) are outside {group}/{name} of length {ds.shape[0]}")
        if stop > start:
            self._fresh_string_tail(group, name, ds)
            ds[start:stop] = values

    def _fresh_string_tail(self, group: str, name: str, ds: h5py.Dataset) -> None:
        """Before the first write of this session into a string dataset: rebuild its last, partly
        filled chunk from the rows inside the array.  A killed process can leave that chunk holding,
        past the array's end, references to strings whose heap never reached the file; HDF5 reads
        the old values of every element it overwrites, so the next append would fail with "bad heap
        index".  Shrinking to the chunk boundary drops the chunk whole (no element is read), and
        the kept rows are written back into a fresh one."""
        if (group, name) in self._fresh or not _is_h5_string(ds) or ds.chunks is None or ds.ndim == 0:
            return
        self._fresh.add((group, name))
        n, c = ds.shape[0], ds.chunks[0]
        base = (n // c) * c
        if base == n:
            return
        keep = ds[base:n]
        ds.resize(base, axis=0)
        ds.resize(n, axis=0)
        ds[base:n] = keep

    def read(self, group, name, start, stop, step=None):
        """Rows ``[start:stop:step]`` as a new ndarray (strings: ``object`` array of ``str``)."""
        ds = self._dataset(group, name)
        if ds.ndim == 0:
            out = ds.asstr()[()] if _is_h5_string(ds) else ds[()]
            return np.asarray(out, dtype=object) if _is_h5_string(ds) else np.asarray(out)
        src = ds.asstr() if _is_h5_string(ds) else ds
        return _as_object_strings(src[start:stop:step])

    def read_ranges(self, group: str, name: str, starts: Sequence[int], stops: Sequence[int]) -> list[np.ndarray]:
        """One ndarray per ``[starts[i], stops[i])`` (a loop over :meth:`read`: no ``batched_read``)."""
        return [self.read(group, name, int(a), int(b)) for a, b in zip(starts, stops)]

    def get_attrs(self, group):
        """The group's HDF5 attributes as Python values (numpy scalars → Python scalars; arrays stay
        ndarrays; values stored as JSON are decoded)."""
        attrs = self._group(group).attrs
        json_keys = set(_decode_str_list(attrs.get(_JSON_ATTRS)))
        out: dict[str, Any] = {}
        for key in attrs:
            if key == _JSON_ATTRS:
                continue
            value = attrs[key]
            if key in json_keys:
                value = json.loads(value)
            elif isinstance(value, bytes):
                value = value.decode("utf-8")
            elif isinstance(value, np.generic):
                value = value.item()
            out[key] = value
        return out

    def set_attrs(self, group, attrs: Mapping[str, Any]):
        """Update the group's attributes.  ``str``/``int``/``float``/``bool`` and ndarrays are stored
        as native HDF5 attributes; lists, tuples, dicts and ``None`` as JSON text (decoded by
        :meth:`get_attrs`).  Raises ReadOnlyError; TypeError for values neither native nor JSON."""
        self._check_writable()
        target = self._group(group).attrs
        json_keys = set(_decode_str_list(target.get(_JSON_ATTRS)))
        for key, value in dict(attrs).items():
            if isinstance(value, (list, tuple, dict)) or value is None:
                target[key] = json.dumps(value)
                json_keys.add(key)
            else:
                target[key] = value
                json_keys.discard(key)
        if json_keys:
            target[_JSON_ATTRS] = sorted(json_keys)
        elif _JSON_ATTRS in target:
            del target[_JSON_ATTRS]

    def flush(self):
        """Flush the file's buffers to disk (no-op when read-only)."""
        if self._root.id.valid and not self.read_only:
            self._root.file.flush()

    def reclaimable_bytes(self) -> int:
        """Optional protocol verb: bytes of the file that hold no dataset's data or metadata any more
        (HDF5 never reuses space freed by rewritten or deleted datasets: see
        :data:`CRASH_SAFE_FILE`) — the file's size less the storage of every dataset and an
        allowance for metadata; 0 for in-memory files.  A copy (``replaybuf copy IN.h5 OUT.h5`` or
        ``h5repack``) reclaims it."""
        if _is_memory_file(self._root.file) or not os.path.isfile(self._filename):
            return 0
        self.flush()
        used = 0

        def visit(_name, obj):
            nonlocal used
            if isinstance(obj, h5py.Dataset):
                used += int(obj.id.get_storage_size()) + 4096  # the data, and its object header
        self._root.file.visititems(visit)
        return max(0, os.path.getsize(self._filename) - used - 64 * 1024)  # superblock, groups, attributes

    def compact(self) -> tuple[int, int]:
        """Optional protocol verb: rewrite the file with its live objects only, giving back what
        :meth:`reclaimable_bytes` counts (:func:`~replaybuf_hdf5.compaction.compact_file`: built beside,
        swapped in; chunks copied as stored), then reopen it.  Only for a writable file this backend
        opened itself; anything else holding the old file's h5py objects must not use them afterwards.

        Returns ``(bytes before, bytes after)``.  Raises ReadOnlyError; ValueError for a group of a
        caller's file or an in-memory file; OSError when the new file cannot be written (the old one
        is kept and reopened)."""
        from .compaction import compact_file

        self._check_writable()
        if not self._owns_file or self._root.name != "/" or _is_memory_file(self._root.file):
            raise ValueError(f"compact: only a file the hdf5 backend opened itself can be rewritten ({self.filename})")
        self._root.file.close()
        try:
            return compact_file(self._filename, CRASH_SAFE_FILE)
        finally:
            self._root = h5py.File(self._filename, "r+", **WRITE_CHUNK_CACHE)
            self._fresh.clear()
            _hold_metadata_until_flush(self._root.file)

    def persist(self):
        """Optional protocol verb, called after every commit: flush HDF5's metadata and chunk caches
        to the file, so a killed process leaves the committed episodes readable (HDF5 otherwise
        keeps them in memory until ``close``)."""
        self.flush()

    def close(self):
        """Close the file when this backend opened it (a file handed in by the caller is only
        flushed; the caller closes it).  Closing twice is harmless."""
        if not self._root.id.valid:
            return
        if self._owns_file:
            self._root.file.close()
        else:
            self.flush()


#: how replaybuf creates HDF5 files.  ``fs_strategy="none"``: HDF5 never reuses file space freed
#: in a session, so rewriting a chunk (an append into a partly filled compressed chunk) never
#: overwrites bytes that the metadata last flushed to disk still points to — a killed process then
#: leaves the file as of its last flush (:meth:`Hdf5Backend.persist`, after every commit) instead
#: of chunks holding other chunks' bytes.  The price: rewritten chunks leave dead space behind
#: (``h5repack`` reclaims it).
CRASH_SAFE_FILE = {"fs_strategy": "none"}
#: writable files get a raw-chunk cache this large (bytes; h5py's default is 1 MiB), so the chunks an
#: append touches stay in memory until the flush after its commit instead of reaching the disk early
WRITE_CHUNK_CACHE = {"rdcc_nbytes": 64 * 2**20, "rdcc_nslots": 100_003, "rdcc_w0": 0.0}


def _hold_metadata_until_flush(f: h5py.File) -> None:
    """Keep HDF5's metadata (object headers, chunk indexes, the global heap of strings) in memory
    until the next flush: with evictions off, the file on disk only changes at :meth:`Hdf5Backend.
    persist` (after each commit), never half-way through an append.  Raw chunks may still be written
    earlier — with :data:`CRASH_SAFE_FILE` into fresh space the flushed metadata does not point to.
    Source: HDF5 ``H5Pset_mdc_config`` (``evictions_enabled`` needs the automatic resize modes off)."""
    try:
        config = f.id.get_mdc_config()
        config.incr_mode = config.flash_incr_mode = config.decr_mode = 0  # H5C_*__off
        config.evictions_enabled = False
        f.id.set_mdc_config(config)
    except (AttributeError, ValueError, RuntimeError):  # pragma: no cover - an h5py without the call
        pass


def _decode_str_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.atleast_1d(value)]


def _is_memory_file(f: h5py.File) -> bool:
    if f.driver != "core":
        return False
    try:
        return not f.id.get_access_plist().get_fapl_core()[1]
    except Exception:  # pragma: no cover - very old h5py
        return False


def _is_h5_path(obj: Any) -> bool:
    if not isinstance(obj, (str, os.PathLike)):
        return False
    s = os.fspath(obj)
    return isinstance(s, str) and "://" not in s and s.lower().endswith(H5_SUFFIXES)


class Hdf5Entrypoint(BackendEntrypoint):
    """Opens ``h5py.File``/``h5py.Group`` objects and ``.h5``/``.hdf5`` paths; creates roots in a file
    path, an open ``h5py`` group, or (``store=None``) an in-memory HDF5 file."""

    name = "hdf5"
    description = "HDF5 file (h5py): chunked resizable datasets, gzip/lzf (Blosc/Zstd with hdf5plugin)"
    capabilities = frozenset({CAP_CHUNKS, CAP_CODECS, CAP_PERSISTENT})

    def guess_can_open(self, obj: Any) -> bool:
        """True for an ``h5py.Group`` (``h5py.File`` included) or a str/PathLike ending ``.h5``/``.hdf5``."""
        return isinstance(obj, h5py.Group) or _is_h5_path(obj)

    def open(self, obj: Any, *, read_only: bool = False) -> Hdf5Backend:
        """Open an ``h5py`` group as is, or the file at a path in mode ``"r"`` (``read_only``) / ``"r+"``.

        Raises:
            FileNotFoundError: no file at the path.
            ValueError: the file is not HDF5, or ``obj`` is neither a group nor a path.
        """
        if isinstance(obj, h5py.Group):
            return Hdf5Backend(obj, read_only=read_only)
        if not isinstance(obj, (str, os.PathLike)):
            raise ValueError(f"the hdf5 backend opens h5py groups and file paths, not {type(obj).__name__}")
        path = Path(os.path.expanduser(os.fspath(obj)))
        if not path.exists():
            raise FileNotFoundError(f"no HDF5 file at {path}")
        if not h5py.is_hdf5(path):
            raise ValueError(f"{path} is not an HDF5 file")
        f = h5py.File(path, "r") if read_only else h5py.File(path, "r+", **WRITE_CHUNK_CACHE)
        return Hdf5Backend(f, read_only=read_only, owns_file=True)

    def create(self, store: Any = None, *, if_exists: str = "replace", **kwargs: Any) -> Hdf5Backend:
        """A root with empty ``data``/``meta`` groups.

        Args:
            store: a path (``~`` expanded; parent directories are made), an open writable ``h5py``
                group, or ``None`` for an in-memory file (``driver="core", backing_store=False``).
            if_exists: ``"replace"`` truncates the file / deletes ``data`` and ``meta`` of a group;
                ``"append"`` keeps what is there; ``"raise"`` raises ``FileExistsError`` if the file
                exists (group: if it holds ``data`` or ``meta``).
            **kwargs: passed to ``h5py.File`` (e.g. ``libver="latest"``, ``rdcc_nbytes=...``).

        Raises:
            FileExistsError: ``if_exists="raise"`` and something is there; ``"replace"`` of a file
                that is not HDF5 (it is never overwritten).
            ValueError: unknown ``if_exists``.  TypeError: ``store`` of another type.
        """
        if if_exists not in ("replace", "append", "raise"):
            raise ValueError(f"if_exists must be 'replace', 'append' or 'raise', got {if_exists!r}")
        if store is None:
            f = h5py.File(f"replaybuf-{uuid.uuid4().hex}.h5", "w", driver="core", backing_store=False,
                          **kwargs)
            backend = Hdf5Backend(f, owns_file=True)
        elif isinstance(store, h5py.Group):
            present = [g for g in GROUPS if g in store]
            if present and if_exists == "raise":
                raise FileExistsError(f"the HDF5 group {store.name} of {store.file.filename} already "
                                      f"holds {present}")
            backend = Hdf5Backend(store)
            backend._check_writable()
            if if_exists == "replace":
                for g in present:
                    del store[g]
        elif isinstance(store, (str, os.PathLike)):
            path = Path(os.path.expanduser(os.fspath(store)))
            if path.exists():
                if if_exists == "raise":
                    raise FileExistsError(f"{path} already exists")
                if path.is_dir() or not h5py.is_hdf5(path):
                    raise FileExistsError(f"{path} exists and is not an HDF5 file; refusing to "
                                          "overwrite it")
            path.parent.mkdir(parents=True, exist_ok=True)
            mode = {"replace": "w", "append": "a", "raise": "w-"}[if_exists]
            if mode == "a" and not path.exists():
                mode = "w-"  # a new file (h5py sets file-space settings only when creating)
            kwargs = {**WRITE_CHUNK_CACHE, **(CRASH_SAFE_FILE if mode != "a" else {}), **kwargs}
            backend = Hdf5Backend(h5py.File(path, mode, **kwargs), owns_file=True)
        else:
            raise TypeError(f"the hdf5 backend creates roots at a path, in an h5py group or in memory "
                            f"(None), not in {type(store).__name__}")
        for group in GROUPS:
            if not backend.has_group(group):
                backend.require_group(group)
        return backend
