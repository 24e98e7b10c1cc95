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

import logging
import os
import threading
import warnings
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from replaybuf_core import locking, registry
from replaybuf_core.errors import EmptyBufferError, ReadOnlyError
from replaybuf_core.layout.chunks import check_chunks_compatible, get_optimal_chunks
from replaybuf_core.layout.compressors import resolve_compressor as _resolve_compressor
from replaybuf_core.layout.keys import check_key, is_temp_name
from replaybuf_core.protocol import CAP_CHUNKS, StorageBackend

from .buffer_checks import _as_episode_array, _serialized
from .buffer_copying import StoreCopying
from .buffer_editing import EpisodeEditing
from .buffer_reading import StepReading
from .commit import EPISODE_ENDS, write_commit_record
from .episode_index import episode_lengths_from_ends, get_episode_idxs
from .merging import StoreMerging
from .rechunk import ChunkCodecEditing, rechunk_array
from .recovered_view import RecoveredView
from .recovery import RecoveryReport, recover
from .writer import EpisodeWriter

__all__ = ["ReplayBuffer", "rechunk_array"]

logger = logging.getLogger(__name__)

EPISODE_ENDS_CHUNK = 4096



class ReplayBuffer(StoreCopying, StoreMerging, StepReading, ChunkCodecEditing, EpisodeEditing):
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

    Interrupted writes are undone on open by :func:`replaybuf_core.store.recovery.recover` (a
    ``RuntimeWarning`` says what and how many steps): a data array *longer* than ``episode_ends[-1]``
    (interrupted append), trailing ``-1`` fill entries of ``episode_ends`` (interrupted commit), an
    interrupted rechunk swap.  Writable opens repair the store; read-only opens change nothing on disk
    and present the committed content through :class:`~replaybuf_core.store.recovered_view.RecoveredView`
    (``buffer[key]`` is then a read-only :class:`~replaybuf_core.store.recovered_view.RowLimitedArray` of
    ``n_steps`` rows; the native groups ``buffer.data``/``buffer.meta`` stay unfiltered).

    Writable opens of a local directory take the writer lock ``<store>/.replaybuf.lock`` (see
    :mod:`replaybuf_core.locking`), released by :meth:`close` / leaving a ``with`` block, or when the
    process dies.  Use ``with ReplayBuffer(path) as rb:``.

    The class is written in parts: opening, bookkeeping and writing here; copying and saving in
    :mod:`replaybuf_core.store.buffer_copying`; reading in :mod:`replaybuf_core.store.buffer_reading`; chunk and
    codec changes in :mod:`replaybuf_core.store.rechunk`; deleting, trimming and keeping episodes in
    :mod:`replaybuf_core.store.buffer_editing` (crash-safe: :mod:`replaybuf_core.store.editing`).
    """

    # ------------------------------------------------------------------ opening / creating
    def __init__(self, root: Any, *, backend: str | None = None, read_only: bool = False,
                 storage_options: dict | None = None):
        store = registry.open_backend(root, backend=backend, read_only=read_only, storage_options=storage_options)
        self._mutex = threading.RLock()  # mutations of one buffer from several threads take turns
        self._closed = False
        self._lock = None
        self._release = None
        if not store.read_only:
            lock_dir = locking.lock_dir_of(store)
            if lock_dir is not None:  # one writer process per store (StoreLockedError)
                self._lock = locking.acquire(lock_dir)
            elif callable(getattr(store, "acquire_writer_lease", None)):  # object storage: a lease
                self._lock = store.acquire_writer_lease()
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
        :mod:`replaybuf_core.store.recovery`.  ``recovery.clean`` is True for an intact store."""
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
    def create_from_path(cls, zarr_path: str | os.PathLike, backend: str | None = None,
                         storage_options: dict | None = None) -> ReplayBuffer:
        """Open the store at ``zarr_path`` (``~`` expanded; or an ``s3://`` / ``gs://`` / ``az://`` URL,
        configured by ``storage_options`` or the environment) **read-only**.

        Raises:
            FileNotFoundError: nothing at the path or URL.  OSError: an object store that cannot be
            read (missing bucket, wrong credentials, unreachable endpoint; named).  ValueError: a URL
            of an unknown scheme.
        """
        from replaybuf_core.locations import is_object_url, local_path

        path = os.fspath(zarr_path) if is_object_url(zarr_path) else local_path(zarr_path, "store")
        return cls(path, backend=backend, read_only=True, storage_options=storage_options)


    def get_stats(self, keys: list[str] | None = None, recompute: bool = False,
                  summarizer: Any = None) -> dict[str, dict[str, np.ndarray]]:
        """Normalisation statistics of the numeric data keys (default all): per key and feature
        dimension ``count``, ``mean``, ``std``, ``min``, ``max`` and ``q01``/``q10``/``q50``/``q90``/
        ``q99`` (LeRobot's names; float64 arrays of the step shape), camera frames per channel on
        ``x / 255`` (C, 1, 1).  Kept in the store (:mod:`replaybuf_core.store.stored_stats`): episodes
        committed since the last call are read and merged in, and a writable buffer saves the result,
        so a call costs in proportion to the new episodes; ``recompute`` ignores what is stored
        (the first call in a process also compiles the kernels: about 2 s, cached on disk).
        Precision: see :func:`replaybuf_core.stats.summaries.compute_stats`.  ``summarizer``: how the episodes
        to read are summarised (default :func:`replaybuf_core.stats.summaries.summarize`, here;
        :func:`replaybuf_core.cluster.stats.cluster_summarizer` runs the same blocks on a Dask
        cluster, with the same result bit for bit).

        Raises KeyError naming an unknown key, ValueError naming a requested key that is not numeric
        or bool (strings)."""
        from .stored_stats import stats_of

        for k in keys or []:
            if k not in self:
                raise KeyError(f"get_stats: no data key {k!r} (keys: {self.keys()})")
            dtype = np.dtype(self._store.dtype("data", k))
            if dtype.kind not in "biuf":
                raise ValueError(f"get_stats: data key {k!r} holds {dtype} values; statistics are kept for "
                                 "numeric and bool keys")
        with self._mutex:
            return {k: s.result() for k, s in stats_of(self, keys, recompute=recompute,
                                                        summarizer=summarizer).items()}

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
            with warnings.catch_warnings():  # zarr calls the writer's lock or lease "not a zarr component"
                warnings.filterwarnings("ignore", message=r".*\.replaybuf\.(lock|lease)\b.*")
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
            check_key(key, "meta key")
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
                check_chunks_compatible(ck, arr.shape, arr.dtype.itemsize)
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
        :class:`replaybuf_core.store.writer.EpisodeWriter` for the arguments); use it as a context manager.

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
        from .stored_stats import EditPlan

        plan = EditPlan(self, np.array([self._n_ep - 1]), {})
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
