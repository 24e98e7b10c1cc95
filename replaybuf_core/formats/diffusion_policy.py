"""The ``diffusion-policy`` import format: diffusion_policy replay buffers (zarr v2 / v3 directories
or ``.zarr.zip``), as written by diffusion_policy's ``ReplayBuffer``.

Layout: ``data/<key>`` arrays (time on axis 0) and ``meta/episode_ends`` (int64, cumulative step
counts).  Read through the zarr backend's read-only protocol verbs.  Every ``data`` key becomes a
key of the same name (4-D numeric arrays of frame shape are camera frames: Push-T's float32 pixels
are proven to hold integers 0..255 and stored in the exact frame codec); every other ``meta`` array is
copied as it is.  Episodes are read in order with one reader per key that decodes each source
chunk once and keeps at most one chunk plus one episode part (Push-T: 2.8 GB of float32 frames,
< 0.5 GB RSS).
"""

from __future__ import annotations

import logging
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core import registry
from replaybuf_core.errors import CorruptStoreError
from replaybuf_core.layout.schema import is_frame_shape
from replaybuf_core.source import FormatEntrypoint, KeySpec, Source
from replaybuf_core.store.buffer import ReplayBuffer

logger = logging.getLogger(__name__)

EPISODE_ENDS = "episode_ends"
#: meta arrays an import writes itself; a replaybuf store imported again keeps its own as source.<name>
IMPORT_OWN_META = ("source_episode_index", "episode_attrs")


class _RowReader:
    """Serve increasing row ranges ``[start, stop)`` of one array, reading it in blocks aligned to
    ``block`` rows (its chunk / shard length) so each stored object is decoded once.  Holds at most
    the blocks overlapping the current range; a range inside one block is a view of it."""

    def __init__(self, store: Any, group: str, name: str, n_rows: int, block: int):
        self._s, self._g, self._n = store, group, name
        self._rows = int(n_rows)
        self._block = max(1, int(block))
        self._blocks: list[tuple[int, np.ndarray]] = []
        self._end = 0

    def take(self, start: int, stop: int) -> np.ndarray:
        if self._blocks and start < self._blocks[0][0]:
            self._blocks, self._end = [], 0
        if not self._blocks:
            self._end = (start // self._block) * self._block
        while self._end < stop:
            new_end = min(self._rows, self._end + self._block)
            self._blocks.append((self._end, self._s.read(self._g, self._n, self._end, new_end)))
            self._end = new_end
        self._blocks = [(b0, b) for b0, b in self._blocks if b0 + len(b) > start]
        parts = [b[max(start, b0) - b0: min(stop, b0 + len(b)) - b0] for b0, b in self._blocks if b0 < stop]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _object_rows(store: Any, group: str, name: str) -> int:
    shards = store.shards(group, name) if hasattr(store, "shards") else None
    if shards:
        return int(shards[0])
    chunks = store.chunks(group, name) if hasattr(store, "chunks") else None
    return int(chunks[0]) if chunks else 1


class DiffusionPolicySource(Source):
    """A diffusion_policy replay buffer opened read-only (see the module docstring).

    Raises (on open): FileNotFoundError (nothing at ``path``); CorruptStoreError, a ValueError (no
    ``data``/``meta`` group, decreasing ``episode_ends``, a data array shorter than the episodes).
    """

    format_name = "diffusion-policy"

    def __init__(self, path: str | os.PathLike):
        p = Path(os.path.expanduser(os.fspath(path))).resolve()
        if not p.exists():
            raise FileNotFoundError(f"no source store at {p}")
        super().__init__(p)
        store = registry.open_backend(os.fspath(p), backend="zarr", read_only=True)
        if hasattr(store, "cache_bytes"):
            store.cache_bytes = 0  # every chunk is read once, in order
        for group in ("data", "meta"):
            if not store.has_group(group):
                store.close()
                raise CorruptStoreError(f"{p} is not a replay buffer: it has no {group!r} group")
        self._store = store
        self._rb = ReplayBuffer(store, read_only=True)  # validates episode_ends and data lengths
        self._ends = np.asarray(self._rb.episode_ends, dtype=np.int64)
        self.episode_lengths = np.diff(self._ends, prepend=0)
        for key in self._rb.keys():
            shape = tuple(store.shape("data", key))
            dtype = np.dtype(store.dtype("data", key))
            kind = ("strings" if dtype == object else
                    "frames" if is_frame_shape(shape) and dtype.kind in "iuf" else "numbers")
            self.keys[key] = KeySpec(dtype, shape[1:], kind)
        self.attrs = {"data": dict(store.get_attrs("data")), "meta": dict(store.get_attrs("meta"))}
        self.attrs["meta"].pop("replaybuf_commit", None)  # the source's own commit record

    def _bounds(self, index: int) -> tuple[int, int]:
        if not 0 <= index < len(self._ends):
            raise IndexError(f"episode {index} out of range: {self.path} has {len(self._ends)} episodes")
        return (int(self._ends[index - 1]) if index else 0), int(self._ends[index])

    def read_episode(self, index: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        start, stop = self._bounds(index)
        return {k: self._store.read("data", k, start, stop) for k in (keys or self.keys)}

    def read_rows(self, index: int, keys: list[str], start: int, stop: int) -> dict[str, np.ndarray]:
        first, last = self._bounds(index)
        if not 0 <= start <= stop <= last - first:
            raise IndexError(f"rows [{start}, {stop}) out of range: episode {index} of {self.path} has "
                             f"{last - first} steps")
        return {k: self._store.read("data", k, first + start, first + stop) for k in keys}

    def read_pieces(self, key: str, pieces: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """Pieces that sit back to back in the source are read with one call, then split."""
        rows = []
        for index, a, b in pieces:
            first, last = self._bounds(index)
            if not 0 <= a <= b <= last - first:
                raise IndexError(f"rows [{a}, {b}) out of range: episode {index} of {self.path} has "
                                 f"{last - first} steps")
            rows.append((first + a, first + b))
        out: list[np.ndarray] = []
        i = 0
        while i < len(rows):
            j = i + 1
            while j < len(rows) and rows[j][0] == rows[j - 1][1]:
                j += 1
            block = self._store.read("data", key, rows[i][0], rows[j - 1][1])
            for a, b in rows[i:j]:
                out.append(block[a - rows[i][0]: b - rows[i][0]])
            i = j
        return out

    def iter_episodes(self, indices, keys, max_rows) -> Iterator[tuple[int, Iterator[dict[str, np.ndarray]]]]:
        """In increasing order, every source chunk is decoded once (one reader per key)."""
        if list(indices) != sorted(indices):
            yield from super().iter_episodes(indices, keys, max_rows)
            return
        n = int(self._ends[-1]) if len(self._ends) else 0
        readers = {k: _RowReader(self._store, "data", k, n, _object_rows(self._store, "data", k)) for k in keys}

        def parts(start: int, stop: int):
            for a in range(start, stop, max_rows):
                b = min(stop, a + max_rows)
                yield {k: readers[k].take(a, b) for k in keys}

        for i in indices:
            yield i, parts(*self._bounds(i))

    def meta_arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for name in self._store.list_arrays("meta"):
            if name == EPISODE_ENDS or name in IMPORT_OWN_META:
                continue
            shape = self._store.shape("meta", name)
            out[name] = (np.asarray(self._store.get_array("meta", name)[()]) if len(shape) == 0
                         else self._store.read("meta", name, 0, shape[0]))
        return out

    def episode_meta(self, indices: list[int]) -> dict[str, np.ndarray]:
        """A replaybuf store's own per-episode import records (``source_episode_index``,
        ``episode_attrs``) follow the episodes chosen, as ``source.<name>``."""
        out = {}
        for name in IMPORT_OWN_META:
            if self._store.has_array("meta", name) and self._store.shape("meta", name)[:1] == (len(self._ends),):
                out[f"source.{name}"] = self._store.read("meta", name, 0, len(self._ends))[list(indices)]
        return out

    def close(self) -> None:
        self._rb.close()


def _looks_like_replay_buffer(path: Path) -> bool:
    if path.is_dir():
        return ((path / "zarr.json").exists() or (path / ".zgroup").exists()) and (
            (path / "meta" / EPISODE_ENDS).is_dir())
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
        return any(n.startswith("meta/episode_ends/") or n.startswith("meta/episode_ends") for n in names)
    return False


class DiffusionPolicyFormat(FormatEntrypoint):
    """``diffusion-policy``: zarr v2/v3 replay buffers with ``data/<key>`` and ``meta/episode_ends``
    (directories or ``.zarr.zip``)."""

    name = "diffusion-policy"
    description = "diffusion_policy replay buffer: zarr v2/v3 directory or .zarr.zip (data/*, meta/episode_ends)"

    def guess_can_open(self, path) -> bool:
        try:
            return _looks_like_replay_buffer(Path(os.path.expanduser(os.fspath(path))))
        except OSError:
            return False

    def open(self, path, **options) -> DiffusionPolicySource:
        if options:
            raise TypeError(f"the diffusion-policy format takes no options, got {sorted(options)}")
        return DiffusionPolicySource(path)


def import_diffusion_policy(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    keep_dtype: bool = False,
    lossy_quality: int | None = None,
    image_frames_per_shard: int | None = 256,
    progress: bool = True,
    overwrite: bool = False,
    drop_empty_episodes: bool = False,
    frames: Any = None,
):
    """Import the diffusion_policy replay buffer at ``src`` into a new zarr v3 store at ``dst``: the
    ``diffusion-policy`` format on :func:`replaybuf_core.importing.import_source` (whose docstring
    gives the arguments, the checks and the errors).  ``src`` is a zarr v2/v3 directory or a
    ``.zip`` of one, opened read-only.  Returns the :class:`~replaybuf_core.importing.ImportReport`.

    Raises:
        FileNotFoundError: ``src`` does not exist.
        CorruptStoreError (a ValueError): ``src`` is not a replay buffer.
        and what :func:`~replaybuf_core.importing.import_source` raises.
    """
    from replaybuf_core.importing.pipeline import check_destination, check_settings, import_source

    check_settings(lossy_quality, image_frames_per_shard, frames)
    if os.path.exists(os.path.expanduser(os.fspath(src))):
        check_destination(src, dst, "zarr", overwrite)
    with DiffusionPolicySource(src) as source:
        return import_source(source, dst, backend="zarr", keep_dtype=keep_dtype, lossy_quality=lossy_quality,
                             frames=frames, image_frames_per_shard=image_frames_per_shard, progress=progress,
                             overwrite=overwrite, drop_empty_episodes=drop_empty_episodes)
