"""Streaming epochs: windows drawn from a bounded buffer of decoded, contiguous blocks of the store.

Uniformly random windows cost a random read each: on a video store, a GOP decoded up to the frame
for every window (and a JPEG decode per frame on others).  A streaming epoch reads the store in
blocks instead — each block a run of consecutive windows and the rows they need, read in one go, so
every chunk (GOP) is decoded once per epoch, plus at most one at each block's edges — in a shuffled
block order, and draws the windows of a batch at random from the blocks held in a shuffle buffer
(the shuffle buffer of RLDS / tf.data that openpi and Octo train with; MosaicML streaming's shuffled
shards).  Every window comes exactly once per epoch; the order depends only on ``(seed, epoch)`` and
the worker split.

The price is correlation: a batch comes from the few blocks in the buffer, not from the whole store.
:meth:`StreamingWindowDataset.correlation` states it for the settings (the expected share of a batch
from its most common episode against uniform sampling's), and the buffer's bytes are
``buffer_windows`` windows' rows of every key.

Each DataLoader worker streams its own share of the blocks (block ``b`` to worker ``b mod
num_workers`` after the shuffle), so workers never read a block twice.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
import torch.utils.data

from replaybuf_core.sampling.arena import OutputArena
from replaybuf_core.sampling.sampler import _pad_value, _sample_dtype, array_like
from replaybuf_core.sampling.window_sampler import IS_PAD_SUFFIX, WindowSampler
from replaybuf_core.torch.batch import Batch, convert_images, to_torch
from replaybuf_core.torch.datasets import image_keys_of
from replaybuf_core.torch.images import converted_empty, take_converted, warm_kernels
from replaybuf_core.torch.opening import LazyStore

__all__ = ["StreamingWindowDataset"]

#: rows of at least this many bytes are copied one window at a time (no gathered temporary)
ROW_COPY_BYTES = 1 << 16
#: windows a block holds by default (consecutive windows: ~this many rows a key)
BLOCK_WINDOWS = 128
#: windows the shuffle buffer holds by default (a few blocks)
BUFFER_WINDOWS = 512


class StreamingWindowDataset(LazyStore, torch.utils.data.IterableDataset):
    """The windows of :class:`~replaybuf_core.torch.WindowDataset` (same arguments, same samples), in
    streaming epochs (see the module docstring): an ``IterableDataset`` for
    ``DataLoader(ds, batch_size=batch_size, num_workers=N)`` — no ``shuffle=`` (the order is the
    dataset's own); each sample is the dict ``WindowDataset`` gives, and ``batch_size`` consecutive
    samples are rows of one batch read at once, which torch's ``default_collate`` restacks without a
    copy.

    Args:
        path_or_factory, delta_steps, image_keys, channels_first, float_images: as for
            :class:`~replaybuf_core.torch.WindowDataset`.
        batch_size: samples read together (use the DataLoader's ``batch_size``), >= 1.
        block_windows: consecutive windows a block reads at once, >= 1.
        buffer_windows: windows the shuffle buffer holds (of the blocks loaded), >= ``block_windows``.
        seed: the shuffle's seed; an epoch's order depends only on ``(seed, epoch)`` and the workers.
        **window_kwargs: passed to :class:`~replaybuf_core.sampling.WindowSampler`.

    Raises:
        ValueError: ``batch_size`` or ``block_windows`` < 1, or a buffer that cannot hold one block
            (the message names the minimum).  Errors of the sampler surface on first use.
    """

    def __init__(self, path_or_factory: str | os.PathLike | Callable[[], Any], delta_steps=None, *,
                 image_keys: Sequence[str] | None = None, channels_first: bool = False,
                 float_images: bool = False, batch_size: int = 64, block_windows: int = BLOCK_WINDOWS,
                 buffer_windows: int = BUFFER_WINDOWS, seed: int = 0, **window_kwargs: Any):
        for name, v in (("batch_size", batch_size), ("block_windows", block_windows)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if isinstance(buffer_windows, bool) or not isinstance(buffer_windows, int) or buffer_windows < block_windows:
            raise ValueError(f"buffer_windows={buffer_windows!r} cannot hold one block: it must be at least "
                             f"block_windows={block_windows}")
        super().__init__(path_or_factory)
        self.delta_steps = delta_steps
        self.window_kwargs = dict(window_kwargs)
        self.image_keys = None if image_keys is None else list(image_keys)
        self.channels_first, self.float_images = bool(channels_first), bool(float_images)
        self.batch_size, self.block_windows, self.buffer_windows = batch_size, block_windows, buffer_windows
        self.seed, self.epoch = int(seed), 0
        if self.float_images:
            warm_kernels()  # off the first batch's path

    def _build(self, buffer: Any, window_index: Any) -> WindowSampler:
        if hasattr(buffer, "cache_bytes"):
            buffer.cache_bytes = 0  # every chunk is read once an epoch: caching decoded chunks only churns memory
        return WindowSampler(buffer, self.delta_steps, window_index=window_index,
                             **{"dtypes": "stored", **self.window_kwargs})

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration gives (as ``DistributedSampler.set_epoch``)."""
        self.epoch = int(epoch)

    def block_order(self, worker: int = 0, num_workers: int = 1) -> np.ndarray:
        """This worker's blocks, in the order this epoch reads them."""
        n_blocks = -(-len(self) // self.block_windows)
        order = np.random.default_rng([self.seed, self.epoch]).permutation(n_blocks)
        return order[worker::num_workers]

    def correlation(self) -> dict[str, float]:
        """How much a batch leans on one episode, for these settings and this store, measured on one
        epoch's first 64 batches (or all, when fewer): ``streaming`` — the mean share of a batch from
        its most common episode; ``uniform`` — the same for uniformly random windows; ``episodes`` —
        the number of episodes."""
        s = self.sampler
        wi = s.window_index
        rng = np.random.default_rng(0)
        shares, uniform = [], []
        for windows in self._batches_of_windows(0, 1, limit=64):
            ep = wi.locate(windows)[0]
            shares.append(np.bincount(ep).max() / len(ep))
            ep_u = wi.locate(rng.integers(0, len(wi), len(windows)))[0]
            uniform.append(np.bincount(ep_u).max() / len(ep_u))
        return {"streaming": float(np.mean(shares)), "uniform": float(np.mean(uniform)),
                "episodes": int(wi.window_end.size)}

    def _batches_of_windows(self, worker: int, num_workers: int, limit: int | None = None) -> Iterator[np.ndarray]:
        """The window numbers of each batch of this epoch for one worker (the shuffle buffer's draws).

        The buffer holds ``buffer_windows // block_windows`` blocks (more only while the windows left
        in them cannot fill a batch); a block leaves it once all its windows were drawn.  Drawn
        uniformly, a block's last few windows would linger for many batches and keep its rows (and
        those of every block so kept) in memory: so when the buffer is full and more blocks wait,
        the oldest block's last ``batch_size // 4`` windows (or fewer) go into the next batch."""
        n = len(self)
        rng = np.random.default_rng([self.seed, self.epoch, worker])
        blocks = list(self.block_order(worker, num_workers))
        resident = max(1, self.buffer_windows // self.block_windows)
        held: list[np.ndarray] = []  # the windows not yet drawn of each block in the buffer, oldest first
        made = 0
        while blocks or held:
            while blocks and (len(held) < resident or sum(h.size for h in held) < self.batch_size):
                b = int(blocks.pop(0))
                held.append(np.arange(b * self.block_windows, min(n, (b + 1) * self.block_windows)))
            forced = np.empty(0, dtype=np.int64)
            if blocks and len(held) >= resident and held[0].size <= self.batch_size // 4:
                forced = held.pop(0)  # the oldest block's stragglers: it leaves the buffer with this batch
            sizes = [h.size for h in held]
            pool = np.concatenate(held) if held else np.empty(0, dtype=np.int64)
            take = min(self.batch_size - forced.size, pool.size)
            pick = rng.choice(pool.size, size=take, replace=False)
            drawn = np.zeros(pool.size, dtype=bool)
            drawn[pick] = True
            parts = np.split(drawn, np.cumsum(sizes)[:-1]) if held else []
            held = [h[~d] for h, d in zip(held, parts) if (~d).any()]
            yield np.concatenate([forced, pool[pick]])
            made += 1
            if limit is not None and made >= limit:
                return

    def __len__(self) -> int:
        return LazyStore.__len__(self)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        s = self.sampler
        images = self._images(s)
        cache = _BlockCache(s, self.block_windows, self.buffer_windows)
        shared = info is not None
        for windows in self._batches_of_windows(worker, workers):
            arrays, converted = cache.gather(windows, images, self.channels_first, self.float_images, shared)
            convert_images(arrays, [k for k in images if k not in converted], self.channels_first, self.float_images,
                           shared=shared, arena=s.arena)
            yield from Batch(to_torch(arrays), len(windows))

    def _images(self, s: WindowSampler) -> list[str]:
        if not (self.channels_first or self.float_images):
            return []
        if self.image_keys is None:
            self.image_keys = image_keys_of(s.buffer, s.keys)
        return self.image_keys

    def __repr__(self) -> str:
        return (f"StreamingWindowDataset({self._source_name()!r}, delta_steps={self.delta_steps}, "
                f"block_windows={self.block_windows}, buffer_windows={self.buffer_windows}, {self.window_kwargs})")


class _BlockCache:
    """The rows of the blocks in the buffer, read a block at a time (each key's rows from the block's
    first to its last needed row, in one read: whole chunks decoded once), dropped when the last of
    a block's windows was drawn."""

    def __init__(self, sampler: WindowSampler, block_windows: int, buffer_windows: int):
        self.s, self.block_windows = sampler, block_windows
        self.blocks: dict[int, tuple[int, dict[str, np.ndarray], int]] = {}  # block -> (first row, key rows, left)
        offsets = [int(v) for d in sampler.delta_steps.values() for v in d] + [0]
        #: rows a block needs at most: its windows' anchors and the offsets around them
        self.max_rows = block_windows + max(offsets) - min(offsets)
        #: the blocks' arrays, reused once a block is dropped (no fresh pages per block)
        self.arena = OutputArena(slots=-(-buffer_windows // block_windows) + 2)

    def _rows(self, windows: np.ndarray) -> dict[str | None, tuple[np.ndarray, np.ndarray | None]]:
        """Per key: the buffer rows of each window (``(B, n_key)`` or ``(B,)``) and the padding flags."""
        s, wi = self.s, self.s.window_index
        episode, t = wi.locate(windows)
        start = wi.episode_start[episode][:, None]
        last = wi.episode_length[episode][:, None] - 1
        out = {}
        for key in s.keys:
            d = s.delta_steps.get(key)
            rel = t[:, None] + (d[None, :] if d is not None else np.zeros((1, 1), np.int64))
            rows = start + np.clip(rel, 0, last)
            out[key] = (rows[:, 0], None) if d is None else (rows, (rel < 0) | (rel > last))
        return out

    def _load(self, b: int) -> None:
        n = len(self.s.window_index)
        windows = np.arange(b * self.block_windows, min(n, (b + 1) * self.block_windows))
        rows = self._rows(windows)
        lo = min(int(r.min()) for r, _ in rows.values())
        hi = max(int(r.max()) for r, _ in rows.values()) + 1
        data = {}
        for key in self.s.keys:
            arr = array_like(self.s.buffer, key, self.s.dtypes)
            fr = self.s.resize.get(key)
            step = tuple(arr.shape[1:]) if fr is None else (fr.height, fr.width) + tuple(arr.shape[3:])
            whole = self.arena.empty((max(self.max_rows, hi - lo),) + step, _sample_dtype(arr.dtype))
            data[key] = self.s.buffer.read_rows(key, np.arange(lo, hi), out=whole[:hi - lo], dtypes=self.s.dtypes,
                                                **({} if fr is None else {"resize": fr}))
        self.blocks[b] = (lo, data, len(windows))

    def gather(self, windows: np.ndarray, images: Sequence[str] = (), channels_first: bool = False,
               to_float: bool = False, shared: bool = False) -> tuple[dict[str, Any], set[str]]:
        """The batch of ``windows`` as :meth:`WindowSampler.sample_batch` gives it, and the keys of
        ``images`` already converted as :func:`~replaybuf_core.torch.images.convert_images` converts
        them (``channels_first`` / ``to_float``; ``shared``: into shared-memory tensors) — gathered
        from the blocks' frames and converted in one pass."""
        block_of = windows // self.block_windows
        for b in np.unique(block_of).tolist():
            if b not in self.blocks:
                self._load(b)
        rows = self._rows(windows)
        result: dict[str, Any] = {}
        views: dict[str, np.ndarray] = {}  # what padding is written through (a tensor's NumPy view)
        converted: set[str] = set()
        fuse = channels_first or to_float
        for key, (r, pad) in rows.items():
            first = self.blocks[int(block_of[0])][1][key]
            if fuse and key in images and first.dtype == np.uint8 and first.ndim == 4:
                value, out = converted_empty(r.shape, first.shape[1:], channels_first, to_float, shared, self.s.arena)
                flat = out.reshape((-1,) + out.shape[r.ndim:])
                per = int(np.prod(r.shape[1:], dtype=np.int64))  # frames a window
                for b in np.unique(block_of).tolist():
                    lo, data, _ = self.blocks[b]
                    sel = np.flatnonzero(block_of == b)
                    at = (sel[:, None] * per + np.arange(per)).reshape(-1)
                    take_converted(data[key], (r[sel] - lo).reshape(-1), flat, at, channels_first, to_float)
                converted.add(key)
            else:
                value = out = self.s.arena.empty(r.shape + first.shape[1:], first.dtype)
                for b in np.unique(block_of).tolist():
                    lo, data, _ = self.blocks[b]
                    sel = np.flatnonzero(block_of == b)
                    src = data[key]
                    if src[:1].nbytes >= ROW_COPY_BYTES:  # frames: each window's rows taken straight into place
                        for i in sel.tolist():
                            np.take(src, r[i] - lo, axis=0, out=out[i])
                    else:
                        out[sel] = src[r[sel] - lo]
            result[key], views[key] = value, out
            if pad is not None:
                result[key + IS_PAD_SUFFIX] = pad
        if self.s.pad_mode == "zero":
            for key, d in self.s.delta_steps.items():
                pad = result[key + IS_PAD_SUFFIX]
                if pad.any():
                    views[key][pad] = _pad_value(views[key].dtype)
        for b, count in zip(*np.unique(block_of, return_counts=True)):
            lo, data, left = self.blocks[int(b)]
            if left - int(count) <= 0:
                del self.blocks[int(b)]
            else:
                self.blocks[int(b)] = (lo, data, left - int(count))
        return result, converted
