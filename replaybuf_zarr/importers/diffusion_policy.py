"""Import diffusion_policy replay buffers (zarr v2 / v3 directories or ``.zarr.zip``) as replaybuf stores.

Layout of the source: ``data/<key>`` arrays (time on axis 0) and ``meta/episode_ends`` (int64,
cumulative step counts), as written by diffusion_policy's ``ReplayBuffer``.

What the import does (:func:`import_diffusion_policy`):

* **Streaming.**  Episodes are read one at a time (each source array through a reader that decodes
  source chunks once, in order, and keeps at most one chunk plus one episode) and appended through
  :meth:`ReplayBuffer.writer`, so every destination chunk/shard is written once and peak memory is a
  few chunks/shards, not the decoded data set (Push-T: 2.8 GB of float32 frames, < 0.5 GB RSS).
* **Images** — 4-D arrays ``(N, H, W, C)`` with ``C`` in {1, 3, 4} and ``H, W >= 8``:

  - ``uint8``: WebP (:class:`~replaybuf_zarr.codecs.WebPCodec`), lossless by default
    (``level=90``: libwebp effort; same bytes as 99 on Push-T, faster), lossy at quality ``Q``
    with ``lossy_quality=Q``; one frame a chunk, ``image_frames_per_shard`` frames a shard.
  - other numeric dtypes (Push-T stores float32 0..255): stored as uint8 WebP only when that is
    provably lossless — every block read is checked (``block.astype(uint8).astype(src dtype)`` must
    be *bitwise* identical to the block: integers in [0, 255], no NaN, no ``-0.0``).  The check runs
    as the data streams (no extra pass over the source, which on Push-T costs as much to decode as
    the frames cost to encode).  The first source chunk of each candidate is checked before anything
    is written, so the common failure (images normalised to [0, 1]) is found at once.  When a later
    block fails, the import **restarts** with that key kept in its source dtype (Blosc); the report
    and the log say so.  ``keep_dtype=True`` skips the conversion (source dtype, Blosc).
  - The conversion is recorded in the destination's ``data`` group attributes::

        {"conversions": {"img": {"source_dtype": "float32", "converted_to": "uint8",
                                 "codec": "replaybuf.webp(level=90, lossless=True)"}},
         "import": {"format": "diffusion-policy", "source": "...", "lossy_quality": null}}

* **Everything else**: source dtype, Blosc lz4 (the ``"default"`` preset), chunks from
  :func:`~replaybuf_core.chunks.get_optimal_chunks` on the full shape (2 MB target — the rule
  replaybuf uses for new keys; diffusion_policy's sources often hold tiny 161-row chunks).
  String (object) arrays are stored uncompressed.
* **Meta**: every ``meta`` array is copied (``episode_ends`` is rebuilt by the writer, the others are
  copied as they are).
* **Verification** of every array, episode by episode, as soon as the writer has committed the
  episode: its rows are read back from the destination store (decoded afresh from the stored
  objects) and compared with the source values kept since the episode was staged — bit for bit for
  exact keys (after the proven-lossless dtype conversion, so ``dst.astype(src.dtype)`` is
  bit-identical to the source), PSNR (dB, per key and the worst episode) for lossy image keys.  No
  second pass over the source and no hashing.  Then a fresh read-only open of the destination checks
  episode ends, keys, shapes and dtypes, and compares the meta arrays whole.  Failures name the key
  and the episode.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from replaybuf_core import ReplayBuffer, registry
from replaybuf_core.chunks import get_optimal_chunks
from replaybuf_core.codec_names import describe_codec
from replaybuf_core.compressors import resolve_compressor
from replaybuf_core.copying import copy_array
from replaybuf_core.errors import CorruptStoreError
from replaybuf_core.prefetch import prefetch
from replaybuf_core.replace import build_beside
from replaybuf_core.schema import is_frame_shape

from ..backend import ZarrEntrypoint
from ..codecs import WebPCodec
from ..codecs.webp import LOSSLESS_LEVEL
from ..sharding import get_image_shard_shape, validate_image_frames_per_shard
from .uint8_exact import as_uint8_if_lossless

logger = logging.getLogger(__name__)

__all__ = ["ImportReport", "KeyReport", "import_diffusion_policy", "is_frame_shape"]

EPISODE_ENDS = "episode_ends"
#: Seconds between commits while importing (see :class:`~replaybuf_core.writer.EpisodeWriter`).
IMPORT_COMMIT_INTERVAL = 0.25


@dataclass
class KeyReport:
    """What happened to one data key.

    ``exact``: True when the destination, cast back to the source dtype, is bit-identical to the
    source in every episode; False when an episode differs; None for lossy keys (see ``psnr_db``,
    dB over the whole key, and ``min_episode_psnr_db``, the worst episode; ``inf`` when identical).
    """

    key: str
    shape: tuple[int, ...]
    source_dtype: str
    stored_dtype: str
    codec: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    converted: bool = False
    lossy: bool = False
    exact: bool | None = None
    psnr_db: float | None = None
    min_episode_psnr_db: float | None = None
    note: str | None = None


@dataclass
class ImportReport:
    """Result of :func:`import_diffusion_policy`.

    ``problems`` lists every failed check (each names the key and, for data, the episode); ``ok`` is
    True when it is empty.  Byte counts are bytes on disk (the source ``.zip`` file size or the sum of
    the directory's files); ``seconds`` is wall time of the whole import including verification.
    """

    src: str
    dst: str
    n_episodes: int
    n_steps: int
    keys: dict[str, KeyReport]
    meta_keys: list[str]
    problems: list[str] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    #: source indices of the zero-length episodes left out (``drop_empty_episodes=True``)
    dropped_empty_episodes: list[int] = field(default_factory=list)
    source_bytes: int = 0
    stored_bytes: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """Human-readable multi-line summary (what the CLI prints)."""
        lines = [f"imported {self.src} -> {self.dst}: {self.n_episodes} episodes, {self.n_steps} steps "
                 f"in {self.seconds:.1f} s"]
        for r in self.keys.values():
            dt = r.source_dtype if r.source_dtype == r.stored_dtype else f"{r.source_dtype}->{r.stored_dtype}"
            if r.lossy:
                check = (f"PSNR {r.psnr_db:.2f} dB (worst episode {r.min_episode_psnr_db:.2f} dB)"
                         if r.psnr_db is not None else "not checked")
            else:
                check = {True: "bit-exact", False: "MISMATCH", None: "not checked"}[r.exact]
            lines.append(f"  {r.key:<12} {str(r.shape):<22} {dt:<16} {r.codec:<44} {check}")
            if r.note:
                lines.append(f"               note: {r.note}")
        lines.append(f"  meta: {', '.join(self.meta_keys)}")
        for msg in self.restarts:
            lines.append(f"  restart: {msg}")
        if self.dropped_empty_episodes:
            lines.append(f"  dropped {len(self.dropped_empty_episodes)} zero-length source episode(s): "
                         f"{self.dropped_empty_episodes[:20]}{' ...' if len(self.dropped_empty_episodes) > 20 else ''}")
        ratio = self.source_bytes / self.stored_bytes if self.stored_bytes else float("nan")
        lines.append(f"bytes on disk: source {self.source_bytes:,}, destination {self.stored_bytes:,} "
                     f"({ratio:.2f}x smaller)" if ratio >= 1 else
                     f"bytes on disk: source {self.source_bytes:,}, destination {self.stored_bytes:,} "
                     f"({1 / ratio:.2f}x larger)")
        if self.ok:
            lines.append("verification: OK (every array checked against the source)")
        else:
            lines.append(f"verification: FAILED ({len(self.problems)} problem(s))")
            lines.extend(f"  - {p}" for p in self.problems)
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ helpers
class _NotLossless(Exception):
    def __init__(self, key: str, episode: int, row: int, reason: str):
        super().__init__(f"data/{key}: episode {episode}, row {row}: {reason}")
        self.key, self.episode, self.row, self.reason = key, episode, row, reason


class _RowReader:
    """Serve increasing row ranges ``[start, stop)`` of one array, reading it in blocks aligned to
    ``block`` rows (its chunk / shard length) so each stored object is decoded once.  Holds at most
    the blocks overlapping the current range.  A range inside one block is handed out as a view of it
    (``EpisodeWriter.add_episode`` copies what it stages; the checker keeps it until the commit).
    ``convert(block, first_row)``, when given, maps each block as it is read (the uint8 conversion,
    done once per source chunk on the decoded block rather than on copies of it)."""

    def __init__(self, store: Any, group: str, name: str, n_rows: int, block: int, convert=None):
        self._s, self._g, self._n = store, group, name
        self._rows = int(n_rows)
        self._block = max(1, int(block))
        self._blocks: list[tuple[int, np.ndarray]] = []
        self._end = 0
        self._convert = convert

    def take(self, start: int, stop: int) -> np.ndarray:
        if self._blocks and start < self._blocks[0][0]:
            self._blocks, self._end = [], 0
        if not self._blocks:
            self._end = (start // self._block) * self._block
        while self._end < stop:
            new_end = min(self._rows, self._end + self._block)
            block = self._s.read(self._g, self._n, self._end, new_end)
            if self._convert is not None:
                block = self._convert(block, self._end)
            self._blocks.append((self._end, block))
            self._end = new_end
        self._blocks = [(b0, b) for b0, b in self._blocks if b0 + len(b) > start]
        parts = [b[max(start, b0) - b0: min(stop, b0 + len(b)) - b0] for b0, b in self._blocks if b0 < stop]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]  # a view: the writer copies it


def _object_rows(store: Any, group: str, name: str) -> int:
    shards = store.shards(group, name) if hasattr(store, "shards") else None
    if shards:
        return int(shards[0])
    chunks = store.chunks(group, name) if hasattr(store, "chunks") else None
    return int(chunks[0]) if chunks else 1


def _first_bad_value(x: np.ndarray) -> Any:
    """The first element of ``x`` (one row) that is not exactly a uint8 value."""
    r = np.ascontiguousarray(x).ravel()
    with np.errstate(invalid="ignore", over="ignore"):
        back = r.astype(np.uint8).astype(r.dtype)
    bad = np.flatnonzero((back.view(np.uint8).reshape(len(r), -1) != r.view(np.uint8).reshape(len(r), -1)).any(axis=1))
    return r[bad[0]].item() if bad.size else None


def _no_cache(store: Any) -> None:
    """Every chunk is read once, in order: a cache of decoded chunks would only cost memory."""
    if hasattr(store, "cache_bytes"):
        store.cache_bytes = 0


def _disk_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


@dataclass
class _Plan:
    key: str
    shape: tuple[int, ...]
    src_dtype: np.dtype
    dtype: np.dtype
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    codec: Any
    image: bool
    converted: bool
    lossy: bool
    note: str | None = None


def _plan_key(store: Any, key: str, n_steps: int, keep_dtype: bool, lossy_quality: int | None,
              fps: int | None, kept_float: dict[str, str]) -> _Plan:
    shape = (n_steps,) + tuple(store.shape("data", key)[1:])
    dtype = np.dtype(store.dtype("data", key))
    note = kept_float.get(key)
    image_ok = is_frame_shape(shape) and (dtype == np.uint8 or (
        dtype.kind in "iuf" and not keep_dtype and key not in kept_float))
    if image_ok:
        codec = (WebPCodec(level=int(lossy_quality), lossless=False) if lossy_quality is not None
                 else WebPCodec(level=LOSSLESS_LEVEL, lossless=True))
        chunks = (1,) + shape[1:]
        shards = get_image_shard_shape(chunks, fps) if fps else None
        return _Plan(key, shape, dtype, np.dtype(np.uint8), chunks, shards, codec, True,
                     dtype != np.uint8, lossy_quality is not None, note)
    if is_frame_shape(shape) and dtype.kind in "iuf" and keep_dtype and note is None:
        note = f"kept as {dtype} (keep_dtype)"
    chunks = get_optimal_chunks((max(shape[0], 1),) + shape[1:], dtype)
    codec = None if dtype == object else resolve_compressor("default")
    return _Plan(key, shape, dtype, dtype, chunks, None, codec, False, False, False, note)


# ------------------------------------------------------------------------------------------ the import
def import_diffusion_policy(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    keep_dtype: bool = False,
    lossy_quality: int | None = None,
    image_frames_per_shard: int | None = 256,
    progress: bool = True,
    overwrite: bool = False,
    drop_empty_episodes: bool = False,
) -> ImportReport:
    """Import the diffusion_policy replay buffer at ``src`` into a new zarr v3 store at ``dst``.

    See the module docstring for what is converted and how it is verified.

    Args:
        src: a zarr v2 or v3 directory, or a ``.zip`` of one (``~`` expanded); opened read-only.
        dst: the directory to create.
        keep_dtype: keep non-uint8 image arrays in their source dtype (Blosc) instead of converting
            provably-lossless ones to uint8 WebP.
        lossy_quality: ``None`` for lossless WebP; an int 0..100 for lossy WebP at that quality.
        image_frames_per_shard: frames per shard of WebP arrays (``None``: one file per frame).
        progress: show a tqdm bar over episodes (stderr).
        overwrite: replace an existing zarr store at ``dst`` (never a non-zarr directory).
        drop_empty_episodes: import a source whose ``episode_ends`` holds zero-length episodes (two
            equal consecutive entries, as 3D-Diffusion-Policy stores have) by leaving them out; their
            source indices are recorded in the store's ``data`` attributes
            (``import.dropped_empty_episodes``) and in the report.  replaybuf buffers hold no empty
            episode, so without it such a source is refused before anything is written.

    Returns:
        An :class:`ImportReport`; check ``report.ok`` (verification problems do not raise).

    Raises:
        FileNotFoundError: ``src`` does not exist.
        FileExistsError: ``dst`` exists (and ``overwrite`` is False, or it is not a zarr store).
        ValueError: ``src`` is not a replay buffer (no ``data``/``meta/episode_ends``, decreasing
            ``episode_ends``, short data array: a :class:`~replaybuf_core.errors.CorruptStoreError`),
            ``dst`` is inside ``src`` (or the same), bad ``lossy_quality``; ``src`` has zero-length
            episodes (named) and ``drop_empty_episodes`` is False.
        TypeError: bad ``lossy_quality`` / ``image_frames_per_shard`` type.
    Nothing is written when an argument is rejected.  The new store is built beside ``dst`` and swapped
    in once verified (an existing ``dst`` that fails verification is kept, the report says so); while
    importing, ``dst``'s writer lock is held (``StoreLockedError`` when another process records into it,
    before anything is written).  If the import fails midway, what was built is removed, ``dst`` is left
    as it was, and the error re-raised.
    """
    t0 = time.perf_counter()
    fps = validate_image_frames_per_shard(image_frames_per_shard)
    if lossy_quality is not None:
        if isinstance(lossy_quality, bool) or not isinstance(lossy_quality, (int, np.integer)):
            raise TypeError(f"lossy_quality must be an int 0..100 or None, got {lossy_quality!r}")
        if not 0 <= int(lossy_quality) <= 100:
            raise ValueError(f"lossy_quality must be in 0..100, got {lossy_quality}")
    src_path = Path(os.path.expanduser(os.fspath(src))).resolve()
    dst_path = Path(os.path.expanduser(os.fspath(dst))).resolve()
    if not src_path.exists():
        raise FileNotFoundError(f"no source store at {src_path}")
    if dst_path == src_path or src_path in dst_path.parents:
        raise ValueError(f"the destination {dst_path} must not be the source or inside it ({src_path})")
    if dst_path.exists() and (not overwrite or not ((dst_path / "zarr.json").exists()
                                                    or (dst_path / ".zgroup").exists())):
        raise FileExistsError(f"{dst_path} already exists"
                              + ("; pass overwrite=True (CLI: --overwrite) to replace it" if not overwrite else
                                 " and is not a zarr store; refusing to replace it"))
    src_store = registry.open_backend(os.fspath(src_path), backend="zarr", read_only=True)
    _no_cache(src_store)
    for group in ("data", "meta"):
        if not src_store.has_group(group):
            raise CorruptStoreError(f"{src_path} is not a replay buffer: it has no {group!r} group")
    src_rb = ReplayBuffer(src_store, read_only=True)  # validates episode_ends and data lengths
    if src_rb.n_episodes == 0:
        logger.info("%s holds no episode", src_path)
    lengths = np.diff(src_rb.episode_ends, prepend=0)
    empty = [int(i) for i in np.flatnonzero(lengths == 0)]
    if empty and not drop_empty_episodes:
        shown = ", ".join(map(str, empty[:20])) + (f", ... ({len(empty)} in all)" if len(empty) > 20 else "")
        raise ValueError(f"{src_path}: episode(s) {shown} of {src_rb.n_episodes} have zero length (equal "
                         "consecutive meta/episode_ends entries); replaybuf buffers hold no empty episode. "
                         "Pass drop_empty_episodes=True (CLI: --drop-empty-episodes) to import the others "
                         "and record which were dropped")
    if empty:
        logger.warning("%s: dropping %d zero-length episode(s): %s", src_path, len(empty), empty[:20])

    kept_float: dict[str, str] = {}
    restarts: list[str] = []
    # the cheap early check: the first chunk of every conversion candidate
    for key in src_rb.keys():
        plan = _plan_key(src_store, key, src_rb.n_steps, keep_dtype, lossy_quality, fps, kept_float)
        if plan.converted and src_rb.n_steps:
            n = min(src_rb.n_steps, _object_rows(src_store, "data", key))
            first = src_store.read("data", key, 0, n)
            u, row = as_uint8_if_lossless(first)
            del u  # only the verdict matters; the import reads the source again, streaming
            if row >= 0:
                kept_float[key] = (f"kept as {plan.src_dtype}: row {row} (episode "
                                   f"{_episode_of(src_rb, row)}) holds {_first_bad_value(first[row])!r}, "
                                   "not an integer in 0..255")
            del first
    # built beside dst and swapped in once verified: a store being recorded into is never touched
    # (its lock is held from here to the swap), and a failed import leaves the old store as it was
    with build_beside(dst_path) as beside:
        while True:
            try:
                result = _import_once(src_rb, src_path, beside.path, keep_dtype, lossy_quality, fps, kept_float,
                                      progress, bool(restarts), empty)
                break
            except _NotLossless as exc:
                msg = (f"data/{exc.key}: episode {exc.episode}, row {exc.row} {exc.reason}; restarting with "
                       f"{exc.key!r} kept as {src_store.dtype('data', exc.key)}")
                logger.warning("%s", msg)
                restarts.append(msg)
                kept_float[exc.key] = (f"kept as {src_store.dtype('data', exc.key)}: {exc.reason} "
                                       f"(episode {exc.episode}, row {exc.row})")
        plans, checker = result
        report = _verify(src_rb, src_path, beside.path, plans, checker, empty)
        report.dst = os.fspath(dst_path)
        report.stored_bytes = _disk_bytes(beside.path)
        if not report.ok and dst_path.exists():
            beside.swap = False  # keep the store that was there; the report says why
            report.problems.append(f"{dst_path} was left as it was: the new import failed verification")
    report.restarts = restarts
    report.dropped_empty_episodes = empty
    report.source_bytes = _disk_bytes(src_path)
    report.seconds = time.perf_counter() - t0
    return report


def _episode_of(rb: ReplayBuffer, row: int) -> int:
    return int(np.searchsorted(rb.episode_ends, row, side="right"))


#: Keys of at most this many bytes (the whole array) are kept whole and compared once at the end.
WHOLE_KEY_BYTES = 64 * 2**20


class _Checker:
    """Compares each committed episode, read back from the destination store, with the source values
    kept since it was staged (exact keys bit for bit, lossy keys by squared error).  Small keys
    (numbers: at most :data:`WHOLE_KEY_BYTES`) are kept whole and compared once, after the last
    commit: their big chunks would otherwise be decoded again for every episode."""

    def __init__(self, rb: ReplayBuffer, plans: dict[str, _Plan]):
        self.rb = rb
        self.plans = plans
        self.whole = {k: [] for k, p in plans.items()
                      if not p.lossy and p.shape[0] * int(np.prod(p.shape[1:])) * p.dtype.itemsize <= WHOLE_KEY_BYTES}
        self.bounds: list[tuple[int, int, int]] = []
        self.pending: deque = deque()
        self.first_bad: dict[str, int] = {}
        self.problems: list[str] = []
        self.sse = {k: 0.0 for k, p in plans.items() if p.lossy}
        self.worst = {k: math.inf for k in self.sse}

    def stage(self, ep: int, start: int, stop: int, episode: dict[str, np.ndarray]) -> None:
        for key, parts in self.whole.items():
            parts.append(episode[key])
        self.bounds.append((ep, start, stop))
        self.pending.append((ep, start, stop, {k: x for k, x in episode.items() if k not in self.whole}))

    def check_whole(self) -> None:
        """After the last commit: compare each small key whole (naming its first differing episode)."""
        store = self.rb.store
        n = self.rb.n_steps
        for key, parts in self.whole.items():
            x = np.concatenate(parts) if parts else np.empty((0,) + self.plans[key].shape[1:], self.plans[key].dtype)
            y = store.read("data", key, 0, n)
            if _same_bits(x, y):
                continue
            for ep, start, stop in self.bounds:
                if stop > len(y) or not _same_bits(x[start:stop], y[start:stop]):
                    self.first_bad[key] = ep
                    self.problems.append(f"data/{key}: episode {ep} (rows [{start}, {stop})) differs from the source")
                    break
            else:
                self.first_bad[key] = self.bounds[-1][0] if self.bounds else 0
                self.problems.append(f"data/{key}: {len(y)} rows stored, {len(x)} in the source")

    def check_committed(self) -> None:
        store = self.rb.store
        while self.pending and self.pending[0][0] < self.rb.n_episodes:
            ep, start, stop, source = self.pending.popleft()
            for key, x in source.items():
                y = store.read("data", key, start, stop)
                if key in self.sse:
                    e = float(np.sum((y.astype(np.float64) - x.astype(np.float64)) ** 2))
                    self.sse[key] += e
                    self.worst[key] = min(self.worst[key], _psnr(e, y.size))
                elif key not in self.first_bad and not _same_bits(x, y):
                    self.first_bad[key] = ep
                    self.problems.append(f"data/{key}: episode {ep} (rows [{start}, {stop})) differs from the source")


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal shape, dtype and bits (NaN and -0.0 included); strings compare as values."""
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.dtype == object:
        return bool(np.array_equal(x, y))
    if x.size == 0:
        return True
    return bool(np.array_equal(_as_bytes(x), _as_bytes(y)))


def _as_bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _import_once(src_rb, src_path, dst_path, keep_dtype, lossy_quality, fps, kept_float, progress,
                 replace, empty) -> tuple[dict[str, _Plan], _Checker]:
    src_store = src_rb.store
    n_steps, n_ep = src_rb.n_steps, src_rb.n_episodes
    keys = src_rb.keys()
    plans = {k: _plan_key(src_store, k, n_steps, keep_dtype, lossy_quality, fps, kept_float) for k in keys}
    # every chunk is stored, even one equal to the fill value: `verify` can then tell a missing
    # stored object from one zarr skipped
    with zarr.config.set({"array.write_empty_chunks": True}):
        dst = ZarrEntrypoint().create(os.fspath(dst_path), if_exists="replace" if replace else "raise")
        _no_cache(dst)
        for key, p in plans.items():
            dst.create_array("data", key, shape=(0,) + p.shape[1:], dtype=p.dtype, chunks=p.chunks,
                             codec=p.codec, shards=p.shards, fill_value=None if p.dtype == object else 0)
        for name in src_store.list_arrays("meta"):
            if name != EPISODE_ENDS:
                copy_array(src_store, "meta", name, dst, "meta", name)
        ReplayBuffer._ensure_episode_ends(dst)
        conversions = {
            p.key: {"source_dtype": str(p.src_dtype), "converted_to": "uint8", "codec": describe_codec(p.codec)}
            for p in plans.values() if p.converted
        }
        dst.set_attrs("data", {
            "conversions": conversions,
            "import": {"format": "diffusion-policy", "source": os.fspath(src_path),
                       "lossy_quality": lossy_quality, "keep_dtype": bool(keep_dtype),
                       "kept_dtype": dict(kept_float), "dropped_empty_episodes": list(empty)},
        })
        rb = ReplayBuffer(dst)
        # The final length is known: size every data array once (instead of one metadata rewrite
        # per array and written block).  The rows stay uncommitted until the writer commits their
        # episodes; a crash leaves rows past episode_ends that the next open trims.
        for key in keys:
            dst.resize("data", key, n_steps)
        ends = src_rb.episode_ends

        def to_uint8(key: str):
            def convert(block: np.ndarray, first_row: int) -> np.ndarray:
                u, row = as_uint8_if_lossless(block)
                if u is None:
                    raise _NotLossless(key, _episode_of(src_rb, first_row + row), first_row + row,
                                       f"holds {_first_bad_value(block[row])!r}, not an integer in 0..255")
                return u
            return convert

        readers = {k: _RowReader(src_store, "data", k, n_steps, _object_rows(src_store, "data", k),
                                 to_uint8(k) if plans[k].converted else None) for k in keys}
        checker = _Checker(rb, plans)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=n_ep, unit="episode", desc=f"importing {src_path.name}")
        try:
            def episodes():
                # runs in a prefetch thread: source decoding overlaps with destination encoding
                start, ep = 0, 0  # ep: the destination's episode index (empty source ones are left out)
                for src_ep in range(n_ep):
                    stop = int(ends[src_ep])
                    if stop == start:
                        continue
                    episode = {}
                    for key in keys:
                        episode[key] = readers[key].take(start, stop)  # converted keys: uint8 already
                    yield ep, start, stop, episode
                    start, ep = stop, ep + 1

            # commits 4x a second: the checker keeps each episode's source values until its commit
            with rb.writer(commit_interval=IMPORT_COMMIT_INTERVAL) as w:
                for ep, start, stop, episode in prefetch(episodes(), depth=2):
                    checker.stage(ep, start, stop, episode)
                    w.add_episode(episode)
                    checker.check_committed()
                    if bar is not None:
                        bar.update(1)
            checker.check_committed()  # the episodes the final flush committed
            checker.check_whole()
        finally:
            if bar is not None:
                bar.close()
            rb.close()  # releases the destination's writer lock and its open files
    return plans, checker


def _psnr(sse: float, count: int) -> float:
    if count == 0 or sse == 0:
        return math.inf
    return 10.0 * math.log10(255.0 ** 2 / (sse / count))


def _verify(src_rb: ReplayBuffer, src_path: Path, dst_path: Path, plans: dict[str, _Plan],
            checker: _Checker, empty: list[int]) -> ImportReport:
    """Re-open the destination read-only, check its structure and meta against the source, and
    collect the per-episode data checks made while importing (see module docstring)."""
    problems: list[str] = []
    dst_rb = ReplayBuffer.create_from_path(dst_path)
    dst = dst_rb.store
    _no_cache(dst)
    src_store = src_rb.store
    reports: dict[str, KeyReport] = {}
    want_ends = np.delete(np.asarray(src_rb.episode_ends), empty)  # the source's, empty episodes left out
    if dst_rb.n_episodes != len(want_ends) or not np.array_equal(dst_rb.episode_ends, want_ends):
        problems.append(f"meta/episode_ends differs: source {len(want_ends)} episodes / {src_rb.n_steps} "
                        f"steps{f' ({len(empty)} empty ones dropped)' if empty else ''}, destination "
                        f"{dst_rb.n_episodes} / {dst_rb.n_steps}")
    if sorted(dst_rb.keys()) != sorted(plans):
        problems.append(f"data keys differ: source {sorted(plans)}, destination {dst_rb.keys()}")
    keys = [k for k in plans if k in dst_rb]
    for key in keys:
        p = plans[key]
        shape, dtype = tuple(dst.shape("data", key)), np.dtype(dst.dtype("data", key))
        codec = dst.codec("data", key)
        reports[key] = KeyReport(key, p.shape, str(p.src_dtype), str(dtype), describe_codec(codec),
                                 tuple(dst.chunks("data", key)), dst.shards("data", key), p.converted, p.lossy,
                                 note=p.note)
        if shape != p.shape or dtype != p.dtype:
            problems.append(f"data/{key}: destination is {shape} {dtype}, expected {p.shape} {p.dtype}")
    if problems:
        return ImportReport(os.fspath(src_path), os.fspath(dst_path), dst_rb.n_episodes, dst_rb.n_steps,
                            reports, src_store.list_arrays("meta"), problems)
    n = src_rb.n_steps
    problems.extend(checker.problems)
    first_bad, sse, worst = checker.first_bad, checker.sse, checker.worst
    for key in keys:
        r = reports[key]
        if plans[key].lossy:
            r.psnr_db = _psnr(sse[key], n * int(np.prod(plans[key].shape[1:])))
            r.min_episode_psnr_db = worst[key]
        else:
            r.exact = key not in first_bad
    meta_keys = src_store.list_arrays("meta")
    for name in meta_keys:
        if name == EPISODE_ENDS:
            continue
        if not dst.has_array("meta", name):
            problems.append(f"meta/{name}: missing from the destination")
            continue
        a = np.asarray(_read_all(src_store, name))
        b = np.asarray(_read_all(dst, name))
        if not _same_bits(a, b):
            problems.append(f"meta/{name}: differs from the source ({a.shape} {a.dtype} vs {b.shape} {b.dtype})")
    return ImportReport(os.fspath(src_path), os.fspath(dst_path), dst_rb.n_episodes, dst_rb.n_steps, reports,
                        meta_keys, problems)


def _read_all(store: Any, name: str) -> np.ndarray:
    shape = store.shape("meta", name)
    if len(shape) == 0:
        return np.asarray(store.get_array("meta", name)[()])
    return store.read("meta", name, 0, shape[0])
