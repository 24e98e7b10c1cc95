"""``ReplayBuffer``: episode bookkeeping over any storage backend.

Layout (diffusion_policy's replay buffer): ``data/<key>`` arrays with time (steps) on axis 0, all of
``n_steps`` rows, and ``meta/episode_ends`` (int64, cumulative step counts, non-decreasing).  Episode
``i`` holds steps ``[episode_ends[i-1], episode_ends[i])`` (``episode_ends[-1]`` = 0 before the first).

Rules this class holds, whatever the backend:

* validate before mutate — a rejected call changes nothing;
* commit order — data rows first, ``meta/episode_ends`` last, so an interrupted ``add_episode`` leaves
  only rows past ``episode_ends[-1]``, which opening trims (writable) or hides (read-only);
* every key of a non-empty buffer is present in every episode (a missing or extra key is a
  ``ValueError``); zero-length episodes are rejected (``ValueError``): they hold no step and most
  samplers mis-handle them;
* values are cast to a stored array's dtype when NumPy's ``same_kind`` rule allows it (float64 into
  float32); other dtype changes are a ``TypeError``.
"""

from __future__ import annotations

import functools
import logging
import numbers
import os
import threading
import warnings
import weakref
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

from . import registry
from .chunks import check_chunks_compatible, get_optimal_chunks
from .compressors import resolve_compressor as _resolve_compressor
from .copying import copy_array
from .episode_index import episode_lengths_from_ends, get_episode_idxs
from . import locking
from .errors import CapabilityError, EmptyBufferError, ReadOnlyError
from .protocol import CAP_CHUNKS, CAP_CODECS, CAP_SHARDS, StorageBackend, read_rows_via_ranges
from .recovered_view import RecoveredView
from .recovery import COMMIT_RECORD, RecoveryReport, is_temp_name, recover, temp_names, write_commit_record
from .replace import build_beside, holding_lock
from .writer import EpisodeWriter

logger = logging.getLogger(__name__)

EPISODE_ENDS = "episode_ends"
EPISODE_ENDS_CHUNK = 4096
IF_EXISTS = ("replace", "raise", "skip")


def _serialized(method):
    """Run a mutating method under the buffer's lock: threads writing through one buffer take
    turns (each call whole), instead of interleaving resizes and commits."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._mutex:
            return method(self, *args, **kwargs)

    return run


#: characters no key may hold: path separators of any platform (zarr, HDF5 and the file system
#: would read ``a\b`` as a path), and control characters
_BAD_KEY_CHARS = frozenset("/\\") | frozenset(chr(c) for c in range(32)) | {chr(127)}


#: names a store's own files use (zarr v3/v2 metadata, the writer lock): never keys
_RESERVED_KEYS = frozenset({"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata", ".replaybuf.lock"})
#: longest key (UTF-8 bytes): a file name holds 255, rechunk temp names add ``_temp_old.``
MAX_KEY_BYTES = 240


def _check_key(key: Any, what: str = "data key") -> None:
    if not isinstance(key, str):
        raise TypeError(f"{what} must be a str, got {type(key).__name__} {key!r}")
    if key == "" or key in (".", "..") or set(key) & _BAD_KEY_CHARS:
        raise ValueError(f"{what} {key!r} is invalid: keys must be non-empty, not '.'/'..', and hold "
                         "no '/', no backslash and no control character")
    if key in _RESERVED_KEYS:
        raise ValueError(f"{what} {key!r} is reserved: stores keep their own metadata under that name")
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise ValueError(f"{what} {key[:40]!r}... is {len(key.encode('utf-8'))} bytes long: keys hold at most "
                         f"{MAX_KEY_BYTES} (they become file names)")
    if is_temp_name(key):
        raise ValueError(f"{what} {key!r} is reserved for rechunk temp arrays ('_temp', '_temp.*', '_temp_old*')")


def _as_episode_array(key: str, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim == 0:
        raise ValueError(f"data key {key!r}: a 0-d value has no time axis; pass an array of shape (T, ...)")
    if arr.dtype == object:
        if not all(isinstance(v, str) for v in arr.flat):
            bad = next(v for v in arr.flat if not isinstance(v, str))
            raise TypeError(f"data key {key!r}: object arrays may hold only str, found {type(bad).__name__}")
    elif arr.dtype.kind == "U":
        arr = arr.astype(object)
    elif arr.dtype.kind not in "biufc":
        raise TypeError(f"data key {key!r}: unsupported dtype {arr.dtype}")
    return arr


def _check_index(idx: Any, n: int, what: str = "episode") -> int:
    if isinstance(idx, (bool, np.bool_)) or not isinstance(idx, (numbers.Integral, np.integer)):
        raise TypeError(f"{what} index must be an int, got {type(idx).__name__} {idx!r}")
    i = int(idx)
    if not -n <= i < n:
        raise IndexError(f"{what} index {i} is out of range for a buffer of {n} episodes")
    return i + n if i < 0 else i


class ReplayBuffer:
    """An episodic replay buffer on a storage backend (zarr, numpy, or an installed plugin).

    Args:
        root: a ``zarr.Group``, a dict ``{"data": {...}, "meta": {"episode_ends": ...}}``, a
            :class:`~replaybuf_core.protocol.StorageBackend`, or anything an installed backend claims
            (a store, a path).
        backend: name of the backend to open ``root`` with (default: the first that claims it).
        read_only: open without write access; every mutating call raises
            :class:`~replaybuf_core.errors.ReadOnlyError`.

    Raises:
        CorruptStoreError (a ValueError): ``data``/``meta``/``meta/episode_ends`` missing;
            ``episode_ends`` not integer, negative or decreasing; a data array shorter than
            ``episode_ends[-1]`` (names the key and both numbers).
        BackendNotFoundError (a ValueError): no backend claims ``root``.

        StoreLockedError (a RuntimeError): a writable open of a local directory store that another
            process holds open for writing (the message names its pid).

    Interrupted writes are undone on open by :func:`replaybuf_core.recovery.recover` (a
    ``RuntimeWarning`` says what and how many steps): a data array *longer* than ``episode_ends[-1]``
    (interrupted append), trailing ``-1`` fill entries of ``episode_ends`` (interrupted commit), an
    interrupted rechunk swap.  Writable opens repair the store; read-only opens change nothing on disk
    and present the committed content through :class:`~replaybuf_core.recovered_view.RecoveredView`
    (``buffer[key]`` is then a read-only :class:`~replaybuf_core.recovered_view.RowLimitedArray` of
    ``n_steps`` rows; the native groups ``buffer.data``/``buffer.meta`` stay unfiltered).

    Writable opens of a local directory take the writer lock ``<store>/.replaybuf.lock`` (see
    :mod:`replaybuf_core.locking`), released by :meth:`close` / leaving a ``with`` block, or when the
    process dies.  Use ``with ReplayBuffer(path) as rb:``.
    """

    # ------------------------------------------------------------------ opening / creating
    def __init__(self, root: Any, *, backend: str | None = None, read_only: bool = False):
        store = registry.open_backend(root, backend=backend, read_only=read_only)
        self._mutex = threading.RLock()  # mutations of one buffer from several threads take turns
        self._closed = False
        self._lock = None
        self._release = None
        if not store.read_only:
            lock_dir = locking.lock_dir_of(store)
            if lock_dir is not None:  # one writer process per store (StoreLockedError)
                self._lock = locking.acquire(lock_dir)
                if self._lock is not None:
                    self._release = weakref.finalize(self, self._lock.release)
        try:
            report = recover(store)  # writable: repairs interrupted writes; read-only: only looks
        except BaseException:
            self._release_lock()
            raise
        if not report.clean:
            warnings.warn(str(report), RuntimeWarning, stacklevel=2)
            if store.read_only:
                store = RecoveredView(store, report)
        self._store: StorageBackend = store
        self._recovery = report
        self._ends = np.array(report.episode_ends, dtype=np.int64)
        self._n_ep = self._ends.size
        self._idx_cache: np.ndarray | None = None

    @property
    def recovery(self) -> RecoveryReport:
        """What opening found and repaired (writable) or hid (read-only): see
        :mod:`replaybuf_core.recovery`.  ``recovery.clean`` is True for an intact store."""
        return self._recovery

    def _release_lock(self) -> None:
        if self._release is not None:
            self._release()

    def close(self) -> None:
        """Release the writer lock and close the backend (files, zip stores).  Idempotent; the buffer
        must not be used afterwards (writes raise ``ValueError``)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._store.close()
        finally:
            self._release_lock()

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    @classmethod
    def create_empty(cls, backend: str = "zarr", store: Any = None, **kwargs: Any) -> ReplayBuffer:
        """An empty buffer on the named backend, in ``store`` (the backend's in-memory default when
        None).  Extra keyword arguments go to the backend's ``create``.

        Raises:
            BackendNotFoundError: no backend called ``backend`` is installed.
        """
        entry = registry.get_backend(backend)
        s = entry.create(store, if_exists=kwargs.pop("if_exists", "append"), **kwargs)
        cls._ensure_episode_ends(s)
        return cls(s)

    @staticmethod
    def _ensure_episode_ends(s: StorageBackend) -> None:
        if not s.has_array("meta", EPISODE_ENDS):
            s.create_array("meta", EPISODE_ENDS, shape=(0,), dtype=np.dtype(np.int64),
                           chunks=(EPISODE_ENDS_CHUNK,), codec=None, fill_value=-1)

    @classmethod
    def create_empty_zarr(cls, storage: Any = None, root: Any = None) -> ReplayBuffer:
        """An empty zarr-backed buffer: in ``root`` (a ``zarr.Group``) if given, else in ``storage``
        (a zarr store; a ``MemoryStore`` when None).  Existing content of ``root`` is kept."""
        if root is not None:
            return cls.create_empty("zarr", root=root)
        return cls.create_empty("zarr", storage)

    @classmethod
    def create_empty_numpy(cls) -> ReplayBuffer:
        """An empty in-memory buffer on the NumPy backend."""
        return cls.create_empty("numpy")

    @classmethod
    def create_from_group(cls, group: Any, **kwargs: Any) -> ReplayBuffer:
        """Open ``group`` (a ``zarr.Group``) as a buffer, creating ``data``/``meta`` if it has none."""
        s = registry.open_backend(group)
        if not s.has_group("data"):
            return cls.create_empty("zarr", root=group)
        return cls(s, **kwargs)

    @classmethod
    def create_from_path(cls, zarr_path: str | os.PathLike, backend: str | None = None) -> ReplayBuffer:
        """Open the store at ``zarr_path`` (``~`` expanded) **read-only**.

        Raises:
            FileNotFoundError: nothing at the path.
        """
        path = os.path.expanduser(os.fspath(zarr_path))
        return cls(path, backend=backend, read_only=True)

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
    ) -> ReplayBuffer:
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
    ) -> ReplayBuffer:
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
                     if_exists: str = "replace", **kwargs: Any) -> Any:
        """Write this buffer to a zarr ``LocalStore`` at ``zarr_path`` (``~`` expanded); returns the
        store.  ``if_exists="replace"`` builds the new store beside an existing one and swaps it in
        at the end; ``"raise"``/``"skip"`` write into it.  Either way the store's writer lock is
        held meanwhile: a store another process is recording into is never touched
        (``StoreLockedError``), and a failed save leaves the old store as it was."""
        path = os.path.expanduser(os.fspath(zarr_path))
        backend = kwargs.pop("backend", "zarr")
        self._validate_copy_args(None, chunks, compressors, if_exists)
        self._copy_to_path(path, backend, chunks=chunks, compressors=compressors, if_exists=if_exists, **kwargs)
        dst = registry.get_backend(backend).open(path, read_only=True)
        root = dst.root
        dst.close()
        return getattr(root, "store", root)

    # ------------------------------------------------------------------ copying internals
    def _copy_to_new(self, store: Any, backend: str | None, *, keys=None, chunks=None, compressors=None,
                     if_exists="replace", **kwargs: Any) -> ReplayBuffer:
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
                      if_exists="replace", **kwargs: Any) -> None:
        """Copy into the store at local ``path`` on ``backend``: ``replace`` builds beside it and
        swaps (:func:`~replaybuf_core.replace.build_beside`), the other modes write into it; both
        under its writer lock."""
        entry = registry.get_backend(backend)
        if if_exists == "replace":
            with build_beside(path) as beside:
                dst = entry.create(os.fspath(beside.path), if_exists="append", **kwargs)
                try:
                    self._copy_into(dst, keys=keys, chunks=chunks, compressors=compressors, if_exists=if_exists)
                finally:
                    dst.close()
            return
        with holding_lock(path):
            dst = entry.create(path, if_exists="append", **kwargs)
            try:
                self._copy_into(dst, keys=keys, chunks=chunks, compressors=compressors, if_exists=if_exists)
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
            check_chunks_compatible(c, self._store.shape("data", k))
        for k, c in (compressors or {}).items():
            if k not in all_keys:
                raise KeyError(f"compressor given for {k!r}, which is not a data key (keys: {all_keys})")
            _resolve_compressor(c)
        return keys

    def _copy_into(self, dst: StorageBackend, *, keys=None, chunks=None, compressors=None,
                   if_exists="replace") -> None:
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
        for group, key in names:
            if dst.has_array(group, key):
                if if_exists == "skip":
                    continue
                dst.delete_array(group, key)
            if group == "meta":
                if key == EPISODE_ENDS:
                    continue
                copy_array(self._store, "meta", key, dst, "meta", key)
                continue
            ck, codec, shards = self._resolve_layout(key, dst, chunks.get(key), compressors.get(key, "__source__"))
            copy_array(self._store, "data", key, dst, "data", key, n_rows=self.n_steps,
                       chunks=ck, codec=codec, shards=shards)
        for group in ("data", "meta"):  # provenance (e.g. an import's conversions) travels along
            attrs = {k: v for k, v in self._store.get_attrs(group).items() if k != COMMIT_RECORD}
            if attrs:  # (the commit record is written for the destination's own commit, below)
                dst.set_attrs(group, attrs)
        if not dst.has_array("meta", EPISODE_ENDS):
            self._ensure_episode_ends(dst)
        dst.resize("meta", EPISODE_ENDS, self._n_ep)
        if self._n_ep:
            dst.write("meta", EPISODE_ENDS, 0, self.episode_ends)
        write_commit_record(dst, self._n_ep, self.n_steps)
        dst.flush()

    def _resolve_layout(self, key: str, dst: StorageBackend, chunks: Any, compressor: Any):
        """Chunk resolution: explicit → this buffer's array → ``get_optimal_chunks`` (2 MB target);
        codec: explicit → this buffer's → the "default" preset.  Shards are kept when the chunks are."""
        s = self._store
        shape, dtype = s.shape("data", key), s.dtype("data", key)
        src_chunks = s.chunks("data", key) if CAP_CHUNKS in s.capabilities else None
        src_shards = s.shards("data", key) if CAP_SHARDS in s.capabilities else None
        if chunks is not None:
            ck = tuple(int(c) for c in chunks)
        elif src_chunks is not None:
            ck = tuple(src_chunks)
        else:
            ck = get_optimal_chunks((max(shape[0], 1),) + tuple(shape[1:]), dtype)
        shards = src_shards if (src_shards is not None and ck == src_chunks) else None
        if CAP_SHARDS not in dst.capabilities:
            shards = None
        if compressor == "__source__":
            codec = s.codec("data", key) if CAP_CODECS in s.capabilities else _resolve_compressor("default")
            accepts = getattr(dst, "accepts_codec", None)
            if codec is not None and callable(accepts) and not accepts(codec):
                logger.warning("data key %r: the %s backend cannot use the source codec %r; using the "
                               "'default' preset", key, dst.name, codec)
                codec = _resolve_compressor("default")
        else:
            codec = _resolve_compressor(compressor)
        return ck, codec, shards

    # ------------------------------------------------------------------ static helpers
    @staticmethod
    def resolve_compressor(compressor: Any = "default") -> Any:
        """See :func:`replaybuf_core.compressors.resolve_compressor`."""
        return _resolve_compressor(compressor)

    # ------------------------------------------------------------------ properties
    @property
    def store(self) -> StorageBackend:
        """The storage backend object (protocol verbs)."""
        return self._store

    @property
    def root(self) -> Any:
        """The native root (``zarr.Group`` / dict / ...)."""
        return self._store.root

    @property
    def data(self) -> Any:
        """The native ``data`` group (``zarr.Group`` / dict)."""
        return self._store.native_group("data")

    @property
    def meta(self) -> Any:
        """The native ``meta`` group."""
        return self._store.native_group("meta")

    @property
    def episode_ends(self) -> np.ndarray:
        """int64 (n_episodes,), read-only view of the cumulative step counts."""
        view = self._ends[: self._n_ep]
        view.flags.writeable = False
        return view

    @property
    def backend(self) -> str:
        """The backend's name: ``"zarr"``, ``"numpy"`` or a plugin's."""
        return self._store.name

    @property
    def read_only(self) -> bool:
        return bool(self._store.read_only)

    @property
    def n_steps(self) -> int:
        return int(self._ends[self._n_ep - 1]) if self._n_ep else 0

    @property
    def n_episodes(self) -> int:
        return self._n_ep

    @property
    def chunk_size(self) -> int | None:
        """Time-axis chunk length of the first data array (None without chunks or arrays)."""
        if CAP_CHUNKS not in self._store.capabilities:
            return None
        keys = self.keys()
        return self._store.chunks("data", keys[0])[0] if keys else None

    @property
    def episode_lengths(self) -> np.ndarray:
        """int64 (n_episodes,) number of steps of each episode."""
        return episode_lengths_from_ends(self.episode_ends)

    def get_episode_idxs(self) -> np.ndarray:
        """int64 (n_steps,): the episode index of every step (cached until the next mutation)."""
        if self._idx_cache is None or self._idx_cache.size != self.n_steps:
            idx = get_episode_idxs(self.episode_ends)
            idx.flags.writeable = False
            self._idx_cache = idx
        return self._idx_cache

    def __repr__(self) -> str:
        tree = getattr(self._store.root, "tree", None)
        if callable(tree):  # zarr's tree, as the seed shows it (needs `rich` on some zarr versions)
            with warnings.catch_warnings():  # zarr names the writer lock file "not a zarr component"
                warnings.filterwarnings("ignore", message=".*replaybuf.lock.*")
                try:
                    return str(tree())
                except ImportError:
                    pass
        keys = ", ".join(f"{k}: {self._store.shape('data', k)} {self._store.dtype('data', k)}"
                         for k in self.keys())
        return (f"ReplayBuffer(backend={self.backend!r}, n_episodes={self.n_episodes}, "
                f"n_steps={self.n_steps}, data={{{keys}}})")

    # mapping over data keys
    def keys(self) -> list[str]:
        """Data keys, sorted (rechunk temp arrays are never keys)."""
        return [k for k in self._store.list_arrays("data") if not is_temp_name(k)]

    def values(self) -> list[Any]:
        return [self._store.get_array("data", k) for k in self.keys()]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, self._store.get_array("data", k)) for k in self.keys()]

    def __getitem__(self, key: str) -> Any:
        """The native data array of ``key``. Raises KeyError naming the key."""
        if not self._store.has_array("data", key):
            raise KeyError(f"no data key {key!r} (keys: {self.keys()})")
        return self._store.get_array("data", key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._store.has_array("data", key)

    def __len__(self) -> int:
        return self.n_steps

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    # ------------------------------------------------------------------ meta
    @_serialized
    def update_meta(self, data: Mapping[str, Any]) -> Any:
        """Store each value as a meta array (scalars and lists become arrays; replaces existing).

        Raises:
            TypeError: a value becomes an ``object`` array, or a key is not a str.
            ValueError: a key is ``"episode_ends"`` (managed by the buffer), empty or contains '/'.
        Returns the native meta group.
        """
        self._require_writable()
        arrays = {}
        for key, value in data.items():
            _check_key(key, "meta key")
            if key == EPISODE_ENDS:
                raise ValueError("meta key 'episode_ends' is managed by the buffer; use add_episode")
            arr = np.asarray(value)
            if arr.dtype == object:
                raise TypeError(f"meta key {key!r}: value of type {type(value).__name__} becomes an object "
                                "array; pass numbers, strings or arrays of them")
            arrays[key] = arr
        s = self._store
        for key, arr in arrays.items():
            if s.has_array("meta", key):
                s.delete_array("meta", key)
            dtype = np.dtype(object) if arr.dtype.kind == "U" else arr.dtype
            s.create_array("meta", key, shape=arr.shape, dtype=dtype,
                           chunks=arr.shape if arr.ndim and all(arr.shape) else None, codec=None)
            s.write("meta", key, 0, arr.astype(object) if dtype == object else arr)
        return self.meta

    # ------------------------------------------------------------------ writing
    def _require_writable(self, by_writer: bool = False) -> None:
        """Raises ValueError (closed), ReadOnlyError, or RuntimeError while an :meth:`writer` is open
        (its staged rows would be overwritten or merged; only the writer itself may append then)."""
        if self._closed:
            raise ValueError("this replay buffer is closed")
        if self._store.read_only:
            raise ReadOnlyError("this replay buffer is open read-only (create_from_path opens read-only; "
                                "use ReplayBuffer(path) or copy_from_path to write)")
        if not by_writer and getattr(self, "_open_writer", None) is not None:
            raise RuntimeError("an EpisodeWriter is open on this buffer: add episodes through it, and "
                               "close it (leave its with block) before changing the buffer otherwise")

    def _validate_episode(self, data: Mapping[str, Any], chunks, compressors):
        if not isinstance(data, Mapping):
            raise TypeError(f"an episode must be a dict of arrays, got {type(data).__name__}")
        if len(data) == 0:
            raise ValueError("an episode needs at least one key; got an empty dict")
        arrays: dict[str, np.ndarray] = {}
        length = None
        for key, value in data.items():
            _check_key(key)
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
        layouts = {}
        for key, arr in arrays.items():
            if key in existing:
                continue
            ck = (chunks or {}).get(key)
            if ck is not None:
                check_chunks_compatible(ck, arr.shape)
                ck = tuple(int(c) for c in ck)
            else:
                ck = get_optimal_chunks(arr.shape, arr.dtype if arr.dtype != object else np.dtype("O"))
            codec = _resolve_compressor((compressors or {}).get(key, "default"))
            if arr.dtype == object and key not in (compressors or {}):
                codec = None
            layouts[key] = (ck, codec)
        return arrays, length, layouts

    @_serialized
    def add_episode(self, data: Mapping[str, Any], chunks: dict | None = None,
                    compressors: dict | None = None) -> None:
        """Append one episode.

        Args:
            data: key → array of shape (T, ...) (T ≥ 1, same T for all keys). ``str`` arrays allowed.
            chunks: chunk shapes for keys new to the buffer (default: ``get_optimal_chunks`` of the
                episode's shape, the seed's rule).
            compressors: codecs / preset names for new keys (default: the ``"default"`` preset).

        Raises:
            ValueError: empty dict, 0-d value, ragged lengths, zero length, keys differing from the
                buffer's, a step-shape change, a bad key name or chunk value.
            TypeError: dtype that cannot be stored (see module doc), object arrays not of str.
            ReadOnlyError: the buffer is read-only.
        Nothing is written when an error is raised.  Commit: data rows, then ``episode_ends``.
        """
        self._require_writable()
        arrays, length, layouts = self._validate_episode(data, chunks, compressors)
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
        """Create the data arrays named in ``layouts`` ((chunks, codec) per key) with ``n_rows`` rows."""
        for key, (ck, codec) in layouts.items():
            arr = arrays[key]
            self._store.create_array("data", key, shape=(n_rows,) + arr.shape[1:], dtype=arr.dtype,
                                     chunks=ck, codec=codec)

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
        s = self._store
        k = len(ends)
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

    @_serialized
    def writer(self, chunks: Mapping | None = None, compressors: Mapping | None = None,
               max_staged_bytes: int = 256 * 2**20, commit_interval: float = 1.0) -> EpisodeWriter:
        """A buffered appender that writes each chunk/shard once (see
        :class:`replaybuf_core.writer.EpisodeWriter` for the arguments); use it as a context manager.

        Raises ReadOnlyError on a read-only buffer; ValueError for a negative ``commit_interval``."""
        return EpisodeWriter(self, chunks=chunks, compressors=compressors, max_staged_bytes=max_staged_bytes,
                             commit_interval=commit_interval)

    def extend(self, data: Mapping[str, Any]) -> None:
        """Append ``data`` as one episode (the seed's alias of :meth:`add_episode`)."""
        self.add_episode(data)

    @_serialized
    def drop_episode(self) -> None:
        """Remove the last episode.  Order: the commit record, then ``episode_ends``, then the data
        rows, each made durable (``persist``) before the next, so a kill leaves the episode or not.

        Raises:
            EmptyBufferError (a ValueError and an IndexError): the buffer is empty.
            ReadOnlyError: read-only buffer.
        """
        self._require_writable()
        if self._n_ep == 0:
            raise EmptyBufferError("drop_episode on an empty buffer (0 episodes)")
        s = self._store
        new_steps = int(self._ends[self._n_ep - 2]) if self._n_ep > 1 else 0
        # each step durable before the next overwrites anything (a backend buffering writes may put
        # a shrink's fill values on disk before its new length): record, then ends, then data
        write_commit_record(s, self._n_ep - 1, new_steps)  # before the ends: it never claims more
        self._persist()
        s.resize("meta", EPISODE_ENDS, self._n_ep - 1)
        self._n_ep -= 1
        self._idx_cache = None
        self._persist()
        for key in self.keys():
            s.resize("data", key, new_steps)
        self._persist()

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

    # ------------------------------------------------------------------ reading
    def get_episode_slice(self, idx: int) -> slice:
        """``slice(start, stop)`` of episode ``idx`` in step indices (negative ``idx`` counts from the
        end). Raises IndexError (out of range, naming index and count) / TypeError (not an int)."""
        i = _check_index(idx, self._n_ep)
        start = int(self._ends[i - 1]) if i > 0 else 0
        return slice(start, int(self._ends[i]))

    def get_episode(self, idx: int, copy: bool = False) -> dict[str, np.ndarray]:
        """Episode ``idx`` as key → array (T, ...); O(1) index resolution, negative allowed.

        ``copy=False`` may return views into in-memory storage. Raises IndexError / TypeError."""
        sl = self.get_episode_slice(idx)
        return self.get_steps_slice(sl.start, sl.stop, copy=copy)

    def get_steps_slice(self, start: int | None, stop: int | None, step: int | None = None,
                        copy: bool = False) -> dict[str, np.ndarray]:
        """Steps ``[start:stop:step]`` (Python slice semantics over ``n_steps``) of every data key.

        Raises:
            ValueError: ``step`` ≤ 0.
        """
        if step is not None and step <= 0:
            raise ValueError(f"step must be positive, got {step}")
        a, b, st = slice(start, stop, step).indices(self.n_steps)
        b = max(a, b)
        out = {}
        for key in self.keys():
            x = self._store.read("data", key, a, b, st if st != 1 else None)
            # backends hand out fresh arrays or views of their memory; copy only the views
            out[key] = x.copy() if copy and not x.flags.owndata else x
        return out

    def read_ranges(self, key: str, starts, stops) -> list[np.ndarray]:
        """Rows ``[starts[i], stops[i])`` of data ``key`` for every i (one ndarray each), served by the
        backend's batched reader when it has one.  The arrays may be read-only views of the backend's
        cache or memory: copy one before writing to it.

        Raises:
            KeyError: unknown key.  ValueError: ranges outside ``[0, n_steps]`` or lengths differ.
        """
        if key not in self:
            raise KeyError(f"no data key {key!r} (keys: {self.keys()})")
        starts = np.asarray(starts, dtype=np.int64)
        stops = np.asarray(stops, dtype=np.int64)
        if starts.shape != stops.shape or starts.ndim != 1:
            raise ValueError(f"starts {starts.shape} and stops {stops.shape} must be 1-D of one length")
        if starts.size and (starts.min() < 0 or stops.max() > self.n_steps or np.any(stops < starts)):
            raise ValueError(f"row ranges must satisfy 0 <= start <= stop <= n_steps={self.n_steps}")
        return self._store.read_ranges("data", key, starts, stops)

    def read_rows(self, key: str, rows, out: np.ndarray | None = None) -> np.ndarray:
        """Gather steps ``rows`` (int array of any shape) of data ``key``: returns an array of shape
        ``rows.shape + step shape`` (into ``out`` when given — it may be a strided view), decoding
        every chunk touched once.  The sampler's batch path; NumPy buffers do one fancy index.

        Raises:
            KeyError: unknown key.  IndexError: a row outside ``[0, n_steps)``.
            ValueError: ``out`` of the wrong shape.
        """
        rows, out = self._rows_and_out(key, rows, out)
        gather = getattr(self._store, "read_rows", None)
        if gather is not None:
            return gather("data", key, rows, out)
        return read_rows_via_ranges(self._store, "data", key, rows, out)

    def read_rows_async(self, key: str, rows, out: np.ndarray | None = None) -> Any:
        """Start :meth:`read_rows`: returns an object whose ``result()`` completes the read and
        returns the filled array.  On backends with ``read_rows_async`` (zarr) thread-pool helpers
        start decoding now, so the caller can read other keys meanwhile (the sampler does) and then
        join in; elsewhere the read is done before returning.  Leave ``out`` alone until
        ``result()``.  Raises what :meth:`read_rows` raises, before anything is read."""
        rows, out = self._rows_and_out(key, rows, out)
        start = getattr(self._store, "read_rows_async", None)
        if start is not None:
            return start("data", key, rows, out)
        done: Future = Future()
        gather = getattr(self._store, "read_rows", None)
        done.set_result(gather("data", key, rows, out) if gather is not None
                        else read_rows_via_ranges(self._store, "data", key, rows, out))
        return done

    def _rows_and_out(self, key: str, rows, out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if key not in self:
            raise KeyError(f"no data key {key!r} (keys: {self.keys()})")
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_steps):
            bad = rows[(rows < 0) | (rows >= self.n_steps)].flat[0]
            raise IndexError(f"row {int(bad)} is out of range for {self.n_steps} steps")
        shape = rows.shape + tuple(self._store.shape("data", key)[1:])
        if out is None:
            out = np.empty(shape, dtype=self._store.dtype("data", key))
        elif out.shape != shape:
            raise ValueError(f"out has shape {out.shape}, expected {shape}")
        return rows, out

    # ------------------------------------------------------------------ read cache
    @property
    def cache_bytes(self) -> int | None:
        """Capacity in bytes of the backend's cache of decoded chunks (zarr: 256 MiB by default,
        shared by every key of this buffer); None for backends without one.  Set it to trade memory
        for speed: a cache as large as the decoded data set makes repeated sampling run from memory.

        Raises ValueError when set to a negative number; CapabilityError when the backend has no cache."""
        return getattr(self._store, "cache_bytes", None)

    @cache_bytes.setter
    def cache_bytes(self, value: int) -> None:
        if not hasattr(self._store, "cache_bytes"):
            raise CapabilityError(f"the {self.backend!r} backend has no chunk cache")
        self._store.cache_bytes = value

    def warm(self, keys: list[str] | None = None) -> None:
        """Load the named data keys (default: all) wholly into memory, so later reads of them never
        touch the store — what diffusion_policy users get from ``copy_from_path``, without copying
        the buffer.  A no-op for in-memory backends; backends without ``pin`` ignore it.

        Raises KeyError naming an unknown key."""
        keys = self.keys() if keys is None else list(keys)
        for key in keys:
            if key not in self:
                raise KeyError(f"warm: no data key {key!r} (keys: {self.keys()})")
        pin = getattr(self._store, "pin", None)
        if pin is not None:
            for key in keys:
                pin("data", key)

    # ------------------------------------------------------------------ chunks / codecs
    def _require_cap(self, cap: str, what: str) -> None:
        if cap not in self._store.capabilities:
            raise CapabilityError(f"{what} needs a backend with {cap!r}; the {self.backend!r} backend has "
                                  f"{sorted(self._store.capabilities)}")

    def get_chunks(self) -> dict[str, tuple[int, ...]]:
        """key → chunk shape. Raises CapabilityError (a RuntimeError) without chunk support."""
        self._require_cap(CAP_CHUNKS, "get_chunks")
        return {k: tuple(self._store.chunks("data", k)) for k in self.keys()}

    @_serialized
    def set_chunks(self, chunks: Mapping[str, tuple[int, ...]]) -> None:
        """Rechunk the named arrays (streaming; the new array is written beside the old and swapped).

        Raises:
            CapabilityError: backend without chunks.  KeyError: unknown key.
            ValueError / TypeError: chunk tuples rejected by :func:`check_chunks_compatible`.
        """
        self._require_cap(CAP_CHUNKS, "set_chunks")
        self._require_writable()
        for key, ck in chunks.items():
            if key not in self:
                raise KeyError(f"set_chunks: no data key {key!r} (keys: {self.keys()})")
            check_chunks_compatible(ck, self._store.shape("data", key))
        for key, ck in chunks.items():
            if tuple(ck) != tuple(self._store.chunks("data", key)):
                rechunk_array(self._store, "data", key, chunks=tuple(int(c) for c in ck))

    def get_compressors(self) -> dict[str, Any]:
        """key → codec (compressor, or the serializer such as WebP for image arrays; None if none)."""
        self._require_cap(CAP_CODECS, "get_compressors")
        return {k: self._store.codec("data", k) for k in self.keys()}

    @_serialized
    def set_compressors(self, compressors: Mapping[str, Any]) -> None:
        """Recompress the named arrays (preset names or codecs), keeping their chunks.

        Raises: CapabilityError, KeyError (unknown key), ValueError (unknown preset name)."""
        self._require_cap(CAP_CODECS, "set_compressors")
        self._require_writable()
        resolved = {}
        for key, c in compressors.items():
            if key not in self:
                raise KeyError(f"set_compressors: no data key {key!r} (keys: {self.keys()})")
            resolved[key] = _resolve_compressor(c)
        for key, codec in resolved.items():
            if not _same_codec(self._store, key, codec):
                rechunk_array(self._store, "data", key, codec=codec)


def _same_codec(store: StorageBackend, key: str, codec: Any) -> bool:
    same = getattr(store, "codecs_equal", None)
    current = store.codec("data", key)
    if callable(same):
        return bool(same(current, codec))
    return current == codec


_KEEP = object()


def rechunk_array(store: StorageBackend, group: str, name: str, *, chunks: tuple[int, ...] | None = None,
                  codec: Any = _KEEP, shards: Any = _KEEP, tmp_key: str = "_temp") -> None:
    """Rewrite ``group/name`` with new chunks and/or codec: stream into ``<tmp_key>.<name>`` beside it,
    then swap (old → ``<tmp_key>_old.<name>``, new → name, delete old), so a failure midway loses
    nothing; a process killed midway leaves temps that :func:`replaybuf_core.recovery.recover` (run
    by the next open) rolls back or deletes.

    ``chunks=None`` keeps the current chunks; ``codec``/``shards`` default to the current ones (shards
    are dropped when the new chunk length does not divide them).
    """
    old_chunks = tuple(store.chunks(group, name))
    new_chunks = tuple(chunks) if chunks is not None else old_chunks
    check_chunks_compatible(new_chunks, store.shape(group, name))
    if codec is _KEEP:
        codec = store.codec(group, name)
    if shards is _KEEP:
        shards = store.shards(group, name) if CAP_SHARDS in store.capabilities else None
        if shards is not None and any(s % c for s, c in zip(shards, new_chunks)):
            shards = None
    tmp_key, backup = temp_names(name, tmp_key)  # the names say whose temps they are (recovery)
    for stale in (tmp_key, backup):
        if store.has_array(group, stale):
            store.delete_array(group, stale)
    try:
        copy_array(store, group, name, store, group, tmp_key, chunks=new_chunks, codec=codec, shards=shards)
    except BaseException:
        if store.has_array(group, tmp_key):  # else it shows up as a data key
            store.delete_array(group, tmp_key)
        raise
    store.rename_array(group, name, backup)
    store.rename_array(group, tmp_key, name)
    store.delete_array(group, backup)
