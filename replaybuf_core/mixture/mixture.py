"""``Mixture``: several stores (any backend, local or on object storage, different schemas) sampled as
one, with weights, a key map, explicit padding, per-store fps, and an epoch order that is the same on
any number of ranks and workers.

Made in the main process, a mixture opens every store once to check it against the key rules
(:mod:`.schema`) — every refusal names the store and the key, before any worker starts — and keeps,
per store, the O(episodes) window index of its :class:`~replaybuf_core.sampling.window_sampler.WindowSampler`
(25 bytes an episode).  It pickles small: a DataLoader worker (or a rank) opens its own stores on
first use and builds its samplers on those indexes.  Samples: LeRobot's anchor rule (every step of
every chosen episode is an anchor; offsets outside the episode clamp to it and are flagged in
``<key>_is_pad``).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping, Sequence

import numpy as np

from replaybuf_core.protocol import Pending
from replaybuf_core.sampling.arena import ARENA_SLOTS, OutputArena
from replaybuf_core.sampling.window_sampler import WindowSampler

from .order import EpochOrder
from .schema import ResolvedKey, ResolvedSource, StoreInfo, resolve
from .spec import DIM_IS_PAD, IS_PAD, SIZE, MixtureSource, _check_deltas

__all__ = ["Mixture", "PendingMixtureBatch"]

#: version of the definition hashed into :attr:`Mixture.fingerprint` (a state of another version is refused)
DEFINITION_VERSION = 1


def _store_info(buffer: Any) -> StoreInfo:
    of = getattr(buffer, "dtype_of", None)
    keys = {}
    for k in buffer.keys():
        arr = buffer[k]
        dt = np.dtype(of(k, "stored")) if callable(of) else np.dtype(arr.dtype)
        keys[k] = (dt, tuple(int(s) for s in arr.shape[1:]))
    get_attrs = getattr(getattr(buffer, "store", None), "get_attrs", None)
    fps = get_attrs("data").get("fps") if callable(get_attrs) else None
    return StoreInfo(keys, None if fps is None else float(fps))


def _episode_mask(source: MixtureSource, n_episodes: int) -> np.ndarray | None:
    if source.episodes is None:
        return None
    bad = [e for e in source.episodes if e >= n_episodes]
    if bad:
        raise IndexError(f"source {source.name!r}: episode {bad[0]} out of range for its {n_episodes} episodes")
    mask = np.zeros(n_episodes, dtype=bool)
    mask[list(source.episodes)] = True
    return mask


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


class Mixture:
    """Weighted samples of several stores under one schema.

    Args:
        sources: :class:`MixtureSource` each (or a mapping of its fields), at least one, names unique.
        keys: the mixture's keys: ``{name: MixtureKey | {"shape", "dtype", "fill", "pad_dims"} | None}``
            or a list of names; None: every key a store feeds (see :mod:`.schema` for the rules).
        delta_timestamps: ``{mixture key: [seconds, ...]}``, converted at each store's fps; keys
            without are read at the anchor step only.
        seed: the epoch order depends on ``(seed, epoch)`` only.
        tolerance_s: how far a delta may be from a multiple of a store's ``1 / fps``, seconds.
        pad_mode: ``"edge"`` (LeRobot's clamp) or ``"zero"`` for slots outside an episode.
        block, span: locality of the epoch order (:class:`~.order.EpochOrder`): the default
            ``block=1`` is a plain random order; ``block=K, span=S`` reads ``S`` runs of ``K``
            neighbouring windows at a time (object storage: a shard read once an epoch).
        samples_per_epoch: positions per epoch for weighted mixtures (default: all windows).

    Attributes:
        keys: :class:`~.schema.ResolvedKey` per mixture key.  sources: the :class:`MixtureSource` list.
        resolved: :class:`~.schema.ResolvedSource` per source.  order: the :class:`~.order.EpochOrder`.
        window_indexes: the O(episodes) window index of each source.  fingerprint: hash of the definition.

    Raises:
        KeyError, TypeError, ValueError, IndexError: every refusal of :mod:`.schema`, and: no source,
            repeated names, numeric weights mixed with ``"size"``, an episode out of range, a store
            without windows under a weight.  Errors of opening a store, prefixed with its name.
    """

    def __init__(self, sources: Sequence[MixtureSource | Mapping[str, Any]],
                 keys: Mapping[str, Any] | Sequence[str] | None = None, *,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, seed: int = 0,
                 tolerance_s: float = 1e-4, pad_mode: str = "edge", block: int = 1, span: int | None = None,
                 samples_per_epoch: int | None = None):
        srcs = [s if isinstance(s, MixtureSource) else MixtureSource(**dict(s)) for s in sources]
        if not srcs:
            raise ValueError("a mixture needs at least one source")
        names = [s.name for s in srcs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"source names must be unique; {twice} name several sources (give each a name=)")
        by_size = [s.weight == SIZE for s in srcs]
        if any(by_size) and not all(by_size):
            raise ValueError(f"weights: sources {[s.name for s in srcs if s.weight == SIZE]} are weighted 'size' and "
                             f"{[s.name for s in srcs if s.weight != SIZE]} by number; use numbers for all or 'size' for all")
        if pad_mode not in ("edge", "zero"):
            raise ValueError(f"pad_mode must be 'edge' or 'zero', got {pad_mode!r}")
        self.sources = srcs
        self.delta_timestamps = _check_deltas("the mixture", delta_timestamps) or {}
        self.pad_mode = pad_mode
        self.tolerance_s = float(tolerance_s)

        infos, buffers, masks = [], [], []
        try:
            for s in srcs:
                buffer = s.open()
                buffers.append(buffer)
                infos.append(_store_info(buffer))
                masks.append(_episode_mask(s, int(buffer.n_episodes)))
            self.keys, self.resolved = resolve(srcs, infos, keys, self.delta_timestamps, self.tolerance_s)
            self.window_indexes, digests, episodes = [], [], []
            for s, r, buffer, mask in zip(srcs, self.resolved, buffers, masks):
                sampler = self._sampler(r, buffer, mask, None)
                self.window_indexes.append(sampler.window_index)
                ends = np.asarray(buffer.episode_ends[:], dtype=np.int64)
                episodes.append(int(ends.size))
                digests.append(_digest(ends, mask if mask is not None else np.zeros(0, bool)))
        finally:
            for s, buffer in zip(srcs, buffers):
                close = getattr(buffer, "close", None)
                if not callable(s.location) and callable(close):
                    close()
        self.n_episodes = episodes
        self.masks = masks
        weights = None if all(by_size) else [float(s.weight) for s in srcs]
        self.order = EpochOrder([len(w) for w in self.window_indexes], weights, seed, block=block, span=span,
                                samples_per_epoch=samples_per_epoch, names=names)
        self._read_order = self._by_bytes()
        self.definition = self._definition(digests)
        self.fingerprint = hashlib.sha256(json.dumps(self.definition, sort_keys=True).encode()).hexdigest()[:32]
        self._samplers: list[WindowSampler] | None = None
        self._pid: int | None = None
        self._arena = self._new_arena()
        self._lock = threading.Lock()

    def _by_bytes(self) -> list[int]:
        """The sources, most bytes a sample first: a batch starts the reads that decode the most
        (camera frames, on the pool) before the small ones it reads on this thread meanwhile."""
        def size(s: int) -> int:
            return sum(int(np.prod(k.source_shapes[s])) * k.source_dtypes[s].itemsize * (k.n_steps or 1)
                       for k in self.keys if k.store_keys[s] is not None)
        return sorted(range(len(self.sources)), key=lambda s: -size(s))

    # ------------------------------------------------------------------ definition
    def _definition(self, digests: list[str]) -> dict:
        keys = [{"name": k.name, "dtype": k.dtype.str, "shape": list(k.shape), "n_steps": k.n_steps,
                 "fill": None if k.fill is None else repr(k.fill), "pad_dims": k.pad_dims, "store_keys": k.store_keys}
                for k in self.keys]
        sources = [{"weight": s.weight, "episodes_digest": d,  # (not the name or location: a copy elsewhere is the same)
                    "delta_steps": {k: v.tolist() for k, v in r.delta_steps.items()}, "renames": r.renames}
                   for s, r, d in zip(self.sources, self.resolved, digests)]
        return {"version": DEFINITION_VERSION, "keys": keys, "sources": sources, "pad_mode": self.pad_mode,
                "order": self.order.describe()}

    @classmethod
    def from_toml(cls, path: str | os.PathLike) -> Mixture:
        """The mixture a TOML file defines (see :mod:`replaybuf_core.mixture.config`)."""
        from .config import load_definition

        return cls(**load_definition(path))

    def __len__(self) -> int:
        """Samples per epoch."""
        return self.order.length

    def __repr__(self) -> str:
        parts = ", ".join(f"{s.name}:{len(w)}" for s, w in zip(self.sources, self.window_indexes))
        return (f"Mixture({parts}; keys={[k.name for k in self.keys]}, samples_per_epoch={len(self)}, "
                f"weighted={self.order.weighted}, fingerprint={self.fingerprint[:12]})")

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_samplers"], state["_pid"] = None, None  # never pickle open stores; the window indexes travel
        state["_arena"], state["_lock"] = None, None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._arena, self._lock = self._new_arena(), threading.Lock()

    def _new_arena(self) -> OutputArena:
        """This process's arena of batch arrays: its slots hold, of one shape and dtype, the batch being
        built, the one the caller holds, a spare, and one a store for every store (each store's share is
        read into an array of the batch's size while the others' reads run)."""
        return OutputArena(slots=ARENA_SLOTS + len(self.sources))

    # ------------------------------------------------------------------ reading
    def _sampler(self, r: ResolvedSource, buffer: Any, mask: np.ndarray | None, window_index: Any) -> WindowSampler:
        return WindowSampler(buffer, {k: v for k, v in r.delta_steps.items()}, keys=list(r.renames),
                             pad_mode=self.pad_mode, episode_mask=mask, window_index=window_index, dtypes="stored")

    @property
    def samplers(self) -> list[WindowSampler]:
        """This process's sampler of every source, opened on first use (again after a fork).

        Raises RuntimeError naming the source when a store no longer matches its window index."""
        pid = os.getpid()
        with self._lock:  # the prefetch and read-ahead threads may ask at once
            if self._samplers is None or self._pid != pid:
                samplers = []
                for s, r, wi, mask in zip(self.sources, self.resolved, self.window_indexes, self.masks):
                    try:
                        samplers.append(self._sampler(r, s.open(), mask, wi))
                    except ValueError as e:
                        if "built for other episodes" not in str(e):
                            raise
                        raise RuntimeError(f"source {s.name!r} changed since the mixture was made: {e}") from None
                self._samplers, self._pid = samplers, pid
        return self._samplers

    def read_ahead_positions(self, start: int, stop: int, epoch: int = 0) -> np.ndarray:
        """One position of ``[start, stop)`` (clipped to the epoch) per run of ``block`` neighbouring
        windows of a store those positions read: what :meth:`warm` reads so that every shard they
        need is fetched once, before the batches that need it."""
        stop = min(int(stop), len(self))
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        positions = np.arange(int(start), stop, dtype=np.int64)
        source, window = self.order.locate(epoch, positions)
        _, first = np.unique(np.stack([source, window // self.order.block]), axis=1, return_index=True)
        return positions[np.sort(first)]

    def warm(self, positions, epoch: int = 0, threads: int = 8) -> None:
        """Read the samples at ``positions`` and drop them, each on a thread of its own (up to
        ``threads`` at once: on object storage each waits on its own requests) while other threads
        may read batches (the samplers' reads are independent).  Afterwards the stores' readers know
        the shards those samples touch (an object store's HEAD and shard index), and a node's local
        byte cache (``replaybuf_cache_dir``) holds them, each fetched once."""
        samplers = self.samplers
        source, window = self.order.locate(epoch, positions)
        if len(window) <= 1 or threads <= 1:
            for s, w in zip(source.tolist(), window.tolist()):
                samplers[s].sample_batch([w])
            return
        with ThreadPoolExecutor(min(threads, len(window)), thread_name_prefix="replaybuf-mixture-warm") as pool:
            for done in [pool.submit(samplers[s].sample_batch, [w]) for s, w in zip(source.tolist(), window.tolist())]:
                done.result()

    def close(self) -> None:
        """Close this process's stores (opened again on the next read)."""
        for s, sampler in zip(self.sources, self._samplers or []):
            close = getattr(sampler.buffer, "close", None)
            if not callable(s.location) and callable(close):
                close()
        self._samplers = None

    def locate(self, positions, epoch: int = 0) -> dict[str, np.ndarray]:
        """Which sample sits at ``positions`` of epoch ``epoch``: ``{"source_index", "source_episode",
        "source_frame"}`` int64 (B,) — the source, its store's episode number and the anchor step in
        that episode — without reading data (needs no store open beyond the window indexes)."""
        source, window = self.order.locate(epoch, positions)
        episode, frame = np.empty_like(source), np.empty_like(source)
        for s in np.unique(source):
            sel = source == s
            wi = self.window_indexes[int(s)]
            episode[sel], frame[sel] = wi.locate(window[sel])
        return {"source_index": source, "source_episode": episode, "source_frame": frame}

    def _empty(self, key: ResolvedKey, b: int) -> np.ndarray:
        shape = (b,) + ((key.n_steps,) if key.n_steps is not None else ()) + key.shape
        return self._arena.empty(shape, key.dtype)

    def sample_batch(self, positions, epoch: int = 0) -> dict[str, np.ndarray]:
        """The samples at ``positions`` (int array-like (B,) in ``[0, len)``) of epoch ``epoch``.

        Returns:
            ``{key: (B, n, *shape) with offsets / (B, *shape)}`` in the key's dtype (strings as object
            arrays); ``"<key>_is_pad"`` bool (B, n) for keys with offsets (slots outside the episode,
            or all True where the sample's store lacks the key), (B,) for keys without offsets that
            some store lacks; ``"<key>_dim_is_pad"`` bool (B, D) for ``pad_dims`` keys; and
            ``source_index``, ``source_episode``, ``source_frame``, ``mixture_position`` int64 (B,).

        Raises:
            ValueError: a position outside the epoch.  RuntimeError: a store changed underneath.
        """
        return self.sample_batch_async(positions, epoch).result()

    def sample_batch_async(self, positions, epoch: int = 0) -> PendingMixtureBatch:
        """Start :meth:`sample_batch`: every store's reads are started (their camera frames decode
        on the codec pool) and ``result()`` of the returned :class:`PendingMixtureBatch` finishes
        them and returns the batch.  A loader starts its next batch before it finishes the current
        one, so the pool decodes the next batch's frames while this thread finishes this one's
        (:class:`~replaybuf_core.torch.MixtureDataset`).  Bad positions raise here; a failed read
        is raised by ``result()``."""
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        source, window = self.order.locate(epoch, positions)
        b = positions.size
        out: dict[str, np.ndarray] = {}
        for k in self.keys:
            out[k.name] = self._empty(k, b)
            if k.has_is_pad:
                out[k.name + IS_PAD] = np.zeros((b, k.n_steps) if k.n_steps is not None else (b,), dtype=bool)
            if k.pad_dims:
                out[k.name + DIM_IS_PAD] = np.zeros((b, k.shape[-1]), dtype=bool)
        episode, frame = np.empty(b, np.int64), np.empty(b, np.int64)
        samplers = self.samplers
        present = set(np.unique(source).tolist())
        started = []  # every store's share is started before any is finished: decodes overlap reads
        for s in [s for s in self._read_order if s in present]:
            rows = np.flatnonzero(source == s)
            sel = slice(None) if rows.size == b else rows
            at = None if rows.size == b else rows  # each store's share is read straight into its rows of the batch
            pending = samplers[s].sample_batch_async(window[rows], out=self._targets(s, b, out), at=at)
            episode[sel], frame[sel] = pending.episode_index, pending.frame_index
            started.append((s, sel, pending))
        out["source_index"], out["source_episode"], out["source_frame"] = source, episode, frame
        out["mixture_position"] = positions.copy()
        return PendingMixtureBatch(lambda: self._finish(started, out))

    def _finish(self, started: list, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The second half of :meth:`sample_batch` (see :class:`PendingMixtureBatch`)."""
        for s, sel, _ in started:  # the fill of keys a store lacks, written while its reads decode
            for k in self.keys:
                if k.store_keys[s] is None:
                    self._fill(k, s, {}, out, sel)
        for s, sel, pending in reversed(started):  # the small reads, done by now, while the large ones decode
            got = pending.result()
            for k in self.keys:
                if k.store_keys[s] is not None:
                    self._fill(k, s, got, out, sel)
            del got
        return out

    def _targets(self, s: int, b: int, out: dict) -> dict[str, np.ndarray]:
        """Where source ``s``'s sampler reads its samples of a batch of ``b`` (each into its own row,
        the sampler's ``at``): straight into the batch where a key needs no cast or padding, else a
        (b, ...) array of this process's arena (a shape that does not change from batch to batch, so
        its pages are reused, not faulted in anew)."""
        targets = {}
        for k in self.keys:
            store_key = k.store_keys[s]
            if store_key is None:
                continue
            dt = k.source_dtypes[s]
            dt = np.dtype(object) if dt.kind in "TU" else dt  # strings come back as object arrays
            step = ((k.n_steps,) if k.n_steps is not None else ()) + k.source_shapes[s]
            if dt == k.dtype and k.source_shapes[s] == k.shape:
                targets[store_key] = out[k.name]
            else:
                targets[store_key] = self._arena.empty((b,) + step, dt)
        return targets

    def _fill(self, k: ResolvedKey, s: int, got: dict, out: dict, sel) -> None:
        """Write source ``s``'s values of key ``k`` (rows ``sel`` of ``got``, as its sampler returned
        them) into rows ``sel`` of the batch ``out``, padded and flagged per the key's rules."""
        dst = out[k.name]
        store_key = k.store_keys[s]
        if store_key is None:
            dst[sel] = k.pad_value
            if k.has_is_pad:
                out[k.name + IS_PAD][sel] = True
            if k.pad_dims:
                out[k.name + DIM_IS_PAD][sel] = True
            return
        values = got[store_key]
        d_src = k.source_shapes[s][-1] if k.pad_dims else None
        if values is dst:
            pass  # read in place
        elif d_src is not None and d_src < k.shape[-1]:
            dst[sel, ..., d_src:] = k.pad_value
            dst[sel, ..., :d_src] = values[sel]
            out[k.name + DIM_IS_PAD][sel, d_src:] = True
        else:
            dst[sel] = values[sel]
        if k.n_steps is not None:
            out[k.name + IS_PAD][sel] = got[store_key + IS_PAD]

    # ------------------------------------------------------------------ statistics
    def stats(self, per_source: bool = False, keys: Sequence[str] | None = None) -> dict:
        """Normalisation statistics of the mixture's numeric keys, from each store's mergeable
        per-episode summaries (:mod:`replaybuf_core.stats`; stored ones are used, others computed).

        Args:
            per_source: False (default): pooled over every store that has the key, each step
                counted once (padded entries and stores without the key count for nothing); True:
                ``{source name: {key: stats}}``.
            keys: mixture keys (default: every numeric or bool key).

        Returns:
            ``{key: {"min", "max", "mean", "std", "count", "q01", ..., "q99"}}`` shaped like the
            key's step (padded entries NaN; camera frames per channel (C, 1, 1) on ``x / 255``).
            Pooled statistics weigh stores by their steps, not by the mixture's weights.

        Raises:
            KeyError: an unknown key.  ValueError: a key that is not numeric, or fed by frames in
            one store and other values in another.
        """
        from .stats import mixture_stats

        return mixture_stats(self, per_source, keys)


class PendingMixtureBatch(Pending):
    """A batch :meth:`Mixture.sample_batch_async` started: :meth:`result` finishes it once (the batch
    of :meth:`Mixture.sample_batch`; later calls return the same batch, or raise the same error:
    never a batch a failed read left half written).  Dropping it unfinished is safe: the reads
    started write only into its own arrays, which nobody is handed until they end."""
