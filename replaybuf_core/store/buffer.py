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
from replaybuf_core.errors import BackendNotFoundError, ReadOnlyError, StoreLockedError
from replaybuf_core.layout.compressors import resolve_compressor
from replaybuf_core.layout.keys import check_key, is_temp_name
from replaybuf_core.protocol import CAP_CHUNKS, StorageBackend

from .buffer_appending import EpisodeAppending
from .buffer_checks import _serialized
from .buffer_dtypes import SourceDtypes
from .buffer_copying import StoreCopying
from .buffer_editing import EpisodeEditing
from .buffer_reading import StepReading
from .commit import EPISODE_ENDS
from .episode_index import episode_lengths_from_ends, get_episode_idxs
from .merging import StoreMerging
from .rechunk import ChunkCodecEditing, rechunk_array
from .step_array import StepArray, in_memory
from .recovered_view import RecoveredView
from .recovery import RecoveryReport, recover

__all__ = ["ReplayBuffer", "rechunk_array"]

logger = logging.getLogger(__name__)

EPISODE_ENDS_CHUNK = 4096



class ReplayBuffer(EpisodeAppending, StoreCopying, StoreMerging, StepReading, ChunkCodecEditing, EpisodeEditing,
                   SourceDtypes):
    """An episodic replay buffer on a storage backend (zarr, numpy, or an installed plugin).

    Args:
        root: a ``zarr.Group``, a dict ``{"data": {...}, "meta": {"episode_ends": ...}}``, a
            :class:`~replaybuf_core.protocol.StorageBackend`, or anything an installed backend claims
            (a store, a path).
        backend: name of the backend to open ``root`` with (default: the first that claims it).
        read_only: open without write access; every mutating call raises
            :class:`~replaybuf_core.errors.ReadOnlyError`.
        version: open read-only at this version of the store (a tag name, a version id, or a negative
            number counting back from the current version; :mod:`replaybuf_core.store.versions`):
            every read — ``rb[key]``, samplers, the torch datasets given ``rb`` — sees that version;
            ``rb.version`` names it.  ``gc`` keeps it while the buffer is open.  Raises
            VersionNotFoundError (a KeyError) naming the store's versions and tags.

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

    The class is written in parts: opening and bookkeeping here; appending and dropping episodes in
    :mod:`replaybuf_core.store.buffer_appending`; copying and saving in
    :mod:`replaybuf_core.store.buffer_copying`; reading in :mod:`replaybuf_core.store.buffer_reading`; chunk and
    codec changes in :mod:`replaybuf_core.store.rechunk`; deleting, trimming and keeping episodes in
    :mod:`replaybuf_core.store.buffer_editing` (crash-safe: :mod:`replaybuf_core.store.editing`).
    """

    # ------------------------------------------------------------------ opening / creating
    def __init__(self, root: Any, *, backend: str | None = None, read_only: bool = False,
                 storage_options: dict | None = None, version: Any = None):
        read_only = read_only or version is not None
        try:
            store = registry.open_backend(root, backend=backend, read_only=read_only, storage_options=storage_options)
        except (FileNotFoundError, BackendNotFoundError) as exc:
            from .replace import interrupted_swap_hint

            hint = interrupted_swap_hint(root) if isinstance(root, (str, os.PathLike)) else None
            if hint is None:
                raise
            raise FileNotFoundError(f"no store at {os.fspath(root)}: {hint}") from exc
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
        if version is not None:
            store = _open_version(store, version)
            report.episode_ends = np.asarray(store.read("meta", EPISODE_ENDS, 0, store.shape("meta", EPISODE_ENDS)[0]),
                                             dtype=np.int64)
        self._store: StorageBackend = store
        self._recovery = report
        self._ends = np.array(report.episode_ends, dtype=np.int64)
        self._n_ep = self._ends.size
        self._idx_cache: np.ndarray | None = None
        self._auto_pin_refused: set[str] = set()  # keys rb[key] would not load into memory, and the
        self._auto_pinned_bytes = 0                # bytes of those it loaded (step_array._auto_pin)
        self._source_copies: dict[str, tuple] = {}  # warmed keys in their source dtype (step_array)
        self._read_dtypes: dict[tuple, tuple] = {}  # (key, dtypes) -> (native array, read dtype): StepArray
        self._counts_at_open = (self._n_ep, self.n_steps)  # appends since are recorded as a version at close

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
        try:
            self._note_appends()
        finally:
            self._closed = True
        try:
            self._store.close()
        finally:
            self._release_lock()

    def _note_appends(self, message: str | None = None, kind: str = "append") -> None:
        """Record the episodes appended since this buffer opened (or since the last version) as one
        version (:func:`~replaybuf_core.store.versions.note_appends`); a failure is a warning (the
        episodes are committed whatever the log says)."""
        if self._store.read_only or getattr(self, "_open_writer", None) is not None:
            return
        if (self._n_ep, self.n_steps) == self._counts_at_open and message is None:
            return
        from . import versions

        try:
            self._fence()
        except StoreLockedError:  # no longer this buffer's store to write to
            return
        try:
            with self._mutex:
                versions.note_appends(self._store, self._n_ep, self.n_steps, message, kind=kind)
                self._persist()
            self._counts_at_open = (self._n_ep, self.n_steps)
        except Exception as exc:  # noqa: BLE001 - the log is bookkeeping; the data is committed
            warnings.warn(f"replaybuf: the version of the appended episodes was not recorded ({exc})",
                          RuntimeWarning, stacklevel=3)

    @property
    def version(self) -> dict | None:
        """The version this buffer reads: its record (``id``, ``time``, ``kind``, ``message``,
        ``command``, ``n_episodes``, ``n_steps``) — the one opened with ``version=``, else the
        store's newest — or None for a store without versions (never edited: appends are recorded
        when a writable buffer closes).  Episodes appended since the newest record are not in it."""
        from .versions import log, public_record

        view = getattr(self._store, "version", None)
        if isinstance(view, dict):
            return public_record(view)
        versions = log(self._store)
        return public_record(versions[-1]) if versions else None

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
        """Data key ``key`` as an array that slices like NumPy (``rb[key][a:b]``, ``rb[key][rows]``):
        a :class:`~replaybuf_core.store.step_array.StepArray` reading through the backend's fast path
        (its ``.native`` is the backend's own array), or the backend's ``np.ndarray`` itself for
        in-memory backends.  On a read-only buffer a key in memory — warmed (:meth:`warm`), or a
        numeric key of at most 16 MiB that is not camera frames, loaded at its first ``rb[key]`` (within 128 MiB a buffer:
        :func:`~replaybuf_core.store.step_array._auto_pin`) — is a read-only ``np.ndarray`` in the
        source's dtype, as diffusion_policy's ``copy_from_path`` buffer hands out (its normaliser
        takes ``rb[key]`` whole and needs an ``np.ndarray``).  ``rb["data"]`` (when no key is named so) is the mapping of them all,
        as diffusion_policy's ``rb["data"][key]`` expects.  A key an import stored in another dtype
        than its source's reads in the source's (:mod:`replaybuf_core.store.buffer_dtypes`).
        Raises KeyError naming the key."""
        if not self._store.has_array("data", key):
            if key == "data":
                return {k: self[k] for k in self.keys()}
            raise KeyError(f"no data key {key!r} (keys: {self.keys()})")
        native = self._store.get_array("data", key)
        if isinstance(native, np.ndarray) and key not in self.source_dtypes:
            return native
        if self._store.read_only:
            memory = in_memory(self, key)
            if memory is not None:
                return memory
        return StepArray(self, key)

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
        Arrays of numbers or bools (masks) are compressed with the "default" preset, as an import's
        meta arrays are; scalars and text are stored as they are.

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
            # numbers compressed like an import's meta arrays (Blosc: verify can tell damage); text as is
            codec = None if dtype == object or not arr.ndim else resolve_compressor("default")
            s.create_array("meta", key, shape=arr.shape, dtype=dtype,
                           chunks=arr.shape if arr.ndim and all(arr.shape) else None, codec=codec)
            s.write("meta", key, 0, arr.astype(object) if dtype == object else arr)
        return self.meta

    # ------------------------------------------------------------------ writing
    def _require_writable(self, by_writer: bool = False) -> None:
        """Raises ValueError (closed), ReadOnlyError, or RuntimeError while an :meth:`writer` is open
        (its staged rows would be overwritten or merged; only the writer itself may append then), or
        StoreLockedError when this writer lost its lease (:meth:`_fence`)."""
        if self._closed:
            raise ValueError("this replay buffer is closed")
        if self._store.read_only:
            pinned = getattr(self._store, "version", None)
            if isinstance(pinned, dict):  # opened with version=: an older content, never written
                vid = pinned.get("id")
                raise ReadOnlyError(f"this replay buffer reads version {vid} (opened with version=), which is "
                                    f"read-only: to make it the current content, restore it on a writable "
                                    f"buffer (ReplayBuffer(path).restore({vid}); CLI: replaybuf restore PATH "
                                    f"{vid}), or save a copy of it (save_to_path)")
            raise ReadOnlyError("this replay buffer is open read-only (create_from_path opens read-only; "
                                "use ReplayBuffer(path) or copy_from_path to write)")
        if not by_writer and getattr(self, "_open_writer", None) is not None:
            raise RuntimeError("an EpisodeWriter is open on this buffer: add episodes through it, and "
                               "close it (leave its with block) before changing the buffer otherwise")
        self._fence()

    def _fence(self) -> None:
        """Before a change or a commit: a writer lock that can be lost (an object store's lease:
        ``check()``) must still be ours — StoreLockedError if it was broken, taken over or could not
        be renewed (:mod:`replaybuf_zarr.lease`).  A local directory's lock is the kernel's: nothing
        to check."""
        check = getattr(getattr(self, "_lock", None), "check", None)
        if callable(check):
            check()


def _open_version(store: StorageBackend, version: Any) -> Any:
    """``store`` (read-only) as version ``version`` (:class:`~replaybuf_core.store.version_view.VersionView`),
    held against ``gc`` while open (a local directory's lock file, an object store's renewed hold:
    :mod:`.version_readers`).  Raises VersionNotFoundError (also for a version an edit after it kept
    no undo for: :func:`~.versions.require_kept`), and ValueError for a bad setting of the
    hold (``REPLAYBUF_LEASE_SECONDS``); a hold the store refuses (no write rights) is a warning."""
    from .version_readers import hold_store
    from .version_view import VersionView
    from .versions import find, log, require_kept

    # one log read per look, its index used in it: gc may shorten the log between two reads, and an
    # index read in one log names another version in the next
    versions = log(store)
    index = find(store, version, versions)
    require_kept(versions, index)  # (an unknown or unkept version is refused before anything is held)
    vid = int(versions[index]["id"])
    where = locking.lock_dir_of(store)
    try:
        held = hold_store(store, where, vid)
    except Exception as exc:
        if isinstance(exc, ValueError):  # bad settings (e.g. REPLAYBUF_LEASE_SECONDS): the user's to fix
            raise
        if where is None or not isinstance(exc, OSError):  # an object store this reader cannot write to
            logger.warning("reading version %s without a hold (%s): a gc elsewhere cannot see this reader",
                           version, exc)
        held = None  # (a local directory this process cannot write: gc runs elsewhere, if at all)
    try:
        versions = log(store)  # again, with the hold taken: gc may have run
        return VersionView(store, find(store, vid, versions), held, versions)
    except BaseException:
        if held is not None:
            held.release()
        raise
