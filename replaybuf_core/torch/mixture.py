"""A :class:`~replaybuf_core.mixture.Mixture` as a ``torch.utils.data.IterableDataset`` of whole
batches, split across ranks and workers, resumable mid-epoch.

**Who reads what.**  Rank ``r`` of ``world_size`` takes slice ``r`` of every global batch of
``world_size * batch_size`` positions (:func:`~replaybuf_core.mixture.order.rank_batches`); inside a
rank, DataLoader worker ``w`` of ``n`` builds the rank's batches ``w, w + n, w + 2n, ...``, which a
DataLoader hands on in order.  So no sample is read twice, and the ranks' batches of step ``j``,
taken in rank order, are global batch ``j`` of a stream that depends only on ``(seed, epoch)``.

**Resuming.**  :class:`MixtureLoader` wraps a plain ``DataLoader`` and counts the batches it handed
on: its ``state_dict()`` is ``{"mixture": fingerprint, "epoch", "position"}`` — the global position
every rank has reached (ranks step together under DDP) — so a run killed mid-epoch resumes at the
next global batch, on any number of ranks or workers.  The dataset itself implements
``state_dict`` / ``load_state_dict`` per worker, the protocol of torchdata's ``StatefulDataLoader``
(which snapshots each worker's state with the batches it yields).  A state of another mixture (its
fingerprint differs) is refused.

**Prefetch.**  Each worker (or the main process with ``num_workers=0``) reads its next batch on a
background thread while the current one is handed on (``prefetch=1``); that thread starts each
batch's reads before it finishes the one before (:meth:`Mixture.sample_batch_async`), so the codec
pool's threads go from one batch's frames to the next's without waiting for it.  Under the block order
(``Mixture(block=K, span=S)``) it also reads ahead: entering a run of ``K * S`` positions, it warms
the next two runs on another thread (:meth:`Mixture.warm`: one sample per block), so the shards of the
next blocks are in the node's local byte cache before the batches that need them.
"""

from __future__ import annotations

import numbers
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.utils.data

from replaybuf_core.layout.frames import is_frames
from replaybuf_core.mixture.mixture import Mixture
from replaybuf_core.mixture.order import rank_batch_positions, rank_batches
from replaybuf_core.torch.batch import convert_images, pack_shared, to_torch

__all__ = ["MixtureDataset", "MixtureLoader"]

#: runs of blocks warmed ahead of the one being read (each one's shards fetched while earlier runs are read)
READ_AHEAD_RUNS = 2


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or int(value) < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def _distributed() -> tuple[int, int]:
    """``(rank, world_size)`` of the initialised default process group, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class MixtureDataset(torch.utils.data.IterableDataset):
    """This rank's batches of a mixture, one ``dict`` of tensors per item: use it with
    ``DataLoader(ds, batch_size=None, num_workers=N)`` (items are already batches), or through
    :class:`MixtureLoader` to resume mid-epoch.

    Each batch is :meth:`Mixture.sample_batch` as tensors (strings stay NumPy object arrays): keys
    (B, n, *shape) / (B, *shape), ``<key>_is_pad``, ``<key>_dim_is_pad``, ``source_index``,
    ``source_episode``, ``source_frame``, ``mixture_position``.

    Args:
        mixture: the :class:`~replaybuf_core.mixture.Mixture`.
        batch_size: samples per batch of this rank, >= 1 (the global batch is ``world_size`` times that).
        rank, world_size: this rank and the number of ranks; default: the initialised
            ``torch.distributed`` group's, else 0 and 1.
        drop_last: leave out the last global batch when it is short (every rank then has the same
            number of batches, as DDP needs); False: every position once, the last batches short or
            missing on the last ranks.
        epoch: the epoch to read (see :meth:`set_epoch`).
        prefetch: batches read ahead on a background thread per worker (0: none).
        read_ahead: under the block order, warm the next run of blocks on another thread (default:
            on when the mixture's ``block`` > 1 and ``span`` is set).
        image_keys: keys converted by ``channels_first`` / ``float_images``; default the uint8
            (H, W, C) keys.
        channels_first, float_images: images as (..., C, H, W) and/or float32 in [0, 1].

    Raises:
        ValueError: a bad batch size, rank, world size or prefetch.
    """

    def __init__(self, mixture: Mixture, batch_size: int, *, rank: int | None = None, world_size: int | None = None,
                 drop_last: bool = False, epoch: int = 0, prefetch: int = 1, read_ahead: bool | None = None,
                 image_keys: Sequence[str] | None = None, channels_first: bool = False, float_images: bool = False):
        if not isinstance(mixture, Mixture):
            raise TypeError(f"MixtureDataset needs a Mixture, got {type(mixture).__name__}")
        d_rank, d_world = _distributed()
        self.world_size = _int("world_size", d_world if world_size is None else world_size, 1)
        self.rank = _int("rank", d_rank if rank is None else rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} out of range for world_size {self.world_size}")
        self.mixture = mixture
        self.batch_size = _int("batch_size", batch_size, 1)
        self.drop_last = bool(drop_last)
        self.prefetch = _int("prefetch", prefetch, 0)
        order = mixture.order
        self.read_ahead = (order.block > 1 and order.span is not None) if read_ahead is None else bool(read_ahead)
        self.epoch = _int("epoch", epoch, 0)
        self.start = 0  # global position this iteration starts from
        self._next_batch = 0  # the next batch (of this rank) this worker builds, counted from start
        if image_keys is None:
            image_keys = [k.name for k in mixture.keys if is_frames((1,) + k.shape, k.dtype)]
        self.image_keys = list(image_keys)
        self.channels_first, self.float_images = bool(channels_first), bool(float_images)

    @property
    def global_batch_size(self) -> int:
        return self.world_size * self.batch_size

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` from its start (nothing changes when it is already the epoch: a
        resumed position stays)."""
        epoch = _int("epoch", epoch, 0)
        if epoch != self.epoch:
            self.epoch, self.start, self._next_batch = epoch, 0, 0

    def set_position(self, epoch: int, position: int) -> None:
        """Read epoch ``epoch`` from global position ``position`` (``0 <= position <= len(mixture)``)."""
        position = _int("position", position, 0)
        if position > len(self.mixture):
            raise ValueError(f"position {position} is past the epoch's {len(self.mixture)} samples")
        self.epoch, self.start, self._next_batch = _int("epoch", epoch, 0), position, 0

    def __len__(self) -> int:
        """Batches of this rank from the current position to the end of the epoch."""
        return rank_batches(len(self.mixture), self.start, self.world_size, self.rank, self.batch_size, self.drop_last)

    def positions(self, j: int) -> np.ndarray:
        """int64 global positions of this rank's batch ``j`` (counted from the current start)."""
        return rank_batch_positions(len(self.mixture), self.start, self.world_size, self.rank, self.batch_size, j)

    def _batch(self, j: int, in_worker: bool, started: dict | None = None, after: int | None = None) -> dict[str, Any]:
        """Batch ``j`` as tensors.  ``started``: batches whose reads are under way (``{j: pending}``);
        ``after``: the batch to start before this one is finished (its decodes then queue behind this
        one's, so the pool never waits for this thread's share of the work between batches)."""
        pending = started.pop(j, None) if started is not None else None
        if pending is None:
            pending = self.mixture.sample_batch_async(self.positions(j), self.epoch)
        if after is not None and started is not None:
            try:
                started[after] = self.mixture.sample_batch_async(self.positions(after), self.epoch)
            except Exception:
                pass  # raised again when that batch is built, in its turn
        arrays = pending.result()
        if self.image_keys and (self.channels_first or self.float_images):
            convert_images(arrays, self.image_keys, self.channels_first, self.float_images, shared=in_worker)
        data = to_torch(arrays)
        return pack_shared(data) if in_worker else data

    def _run_length(self) -> int:
        """Positions per run of blocks the order visits together (0: no runs to read ahead)."""
        order = self.mixture.order
        return order.block * order.span if self.read_ahead and order.span is not None else 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        wid, n_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        first = self._next_batch + (wid - self._next_batch) % n_workers
        todo = range(first, len(self), n_workers)
        run = self._run_length()
        warmer = ThreadPoolExecutor(1, thread_name_prefix="replaybuf-mixture-warm") if run else None
        warmed: set[int] = set()

        def read_ahead(j: int) -> None:
            here = self.positions(j)
            for g in range(int(here[0]) // run + 1, int(here[0]) // run + 1 + READ_AHEAD_RUNS) if len(here) else ():
                if 0 < g * run < len(self.mixture) and g not in warmed:
                    warmed.add(g)
                    ahead = self.mixture.read_ahead_positions(g * run, (g + 1) * run, self.epoch)
                    warmer.submit(self.mixture.warm, ahead, self.epoch)

        pool = ThreadPoolExecutor(1, thread_name_prefix="replaybuf-mixture-prefetch") if self.prefetch else None
        started: dict[int, Any] = {}  # (only the prefetch thread starts and finishes batches in it)

        def build(i: int) -> dict[str, Any]:
            return self._batch(todo[i], info is not None, started, todo[i + 1] if i + 1 < len(todo) else None)

        try:
            ahead = [pool.submit(build, i) for i in range(min(self.prefetch, len(todo)))] if pool else []
            for i, j in enumerate(todo):
                if warmer is not None:
                    read_ahead(j)
                if pool is None:
                    batch = self._batch(j, info is not None)
                else:
                    batch = ahead.pop(0).result()
                    if i + self.prefetch < len(todo):
                        ahead.append(pool.submit(build, i + self.prefetch))
                self._next_batch = j + n_workers
                yield batch
        finally:
            for p in (pool, warmer):
                if p is not None:
                    p.shutdown(wait=True, cancel_futures=True)
            for pending in started.values():  # a batch started ahead and not wanted: its reads end first
                try:
                    pending.result()
                except Exception:
                    pass

    # ------------------------------------------------------------------ the Stateful protocol
    def state_dict(self) -> dict[str, Any]:
        """This worker's (or process's) place: ``{"mixture", "epoch", "start", "next_batch",
        "world_size", "rank", "batch_size"}`` — plain ints and a str (torchdata's
        ``StatefulDataLoader`` keeps one per worker)."""
        return {"mixture": self.mixture.fingerprint, "epoch": self.epoch, "start": self.start,
                "next_batch": self._next_batch, "world_size": self.world_size, "rank": self.rank,
                "batch_size": self.batch_size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (of :meth:`state_dict`).

        Raises:
            ValueError: a state of another mixture (fingerprint), or of another rank layout while
                mid-way through its batches (resume such a run through :class:`MixtureLoader`'s
                global position).
        """
        check_state(self.mixture, state)
        layout = (state.get("world_size"), state.get("rank"), state.get("batch_size"))
        if int(state.get("next_batch", 0)) and layout != (self.world_size, self.rank, self.batch_size):
            raise ValueError(f"this state was saved by rank {layout[1]} of {layout[0]} with batch_size {layout[2]}; "
                             f"this dataset is rank {self.rank} of {self.world_size} with batch_size {self.batch_size}. "
                             "Resume on another layout from MixtureLoader.state_dict()'s global position")
        self.set_position(int(state["epoch"]), int(state.get("start", 0)))
        self._next_batch = int(state.get("next_batch", 0))


def check_state(mixture: Mixture, state: Mapping[str, Any]) -> None:
    """Raise ValueError unless ``state`` is a state dict of this mixture (same fingerprint)."""
    if not isinstance(state, Mapping) or "mixture" not in state or "epoch" not in state:
        raise ValueError(f"not a state dict of a mixture loader: {type(state).__name__} "
                         f"{sorted(state) if isinstance(state, Mapping) else ''}")
    if state["mixture"] != mixture.fingerprint:
        raise ValueError(f"this state dict belongs to another mixture (fingerprint {state['mixture']}; this mixture's "
                         f"is {mixture.fingerprint}): its stores, keys, weights, seed or order differ")


class MixtureLoader:
    """A ``torch.utils.data.DataLoader`` over a :class:`MixtureDataset` that counts the batches it
    hands on, so a run resumes mid-epoch: ``state_dict()`` / ``load_state_dict()`` (torchdata's
    ``StatefulDataLoader`` protocol), with a state that is the global position reached.

    Iterating goes on from the position reached (a loop broken off and started again continues);
    once an epoch is finished, iterating again starts the next epoch.  :meth:`set_epoch` chooses one.

    Args:
        dataset: the :class:`MixtureDataset` of this rank.
        **dataloader_kwargs: passed to ``DataLoader`` (``num_workers``, ``pin_memory``,
            ``persistent_workers``, ``multiprocessing_context`` — ``"spawn"`` for object storage,
            whose client does not survive a fork, ...); ``batch_size`` is None (items are batches).

    Raises:
        TypeError: ``dataset`` not a MixtureDataset, or a ``batch_size`` / ``sampler`` given.
    """

    def __init__(self, dataset: MixtureDataset, **dataloader_kwargs: Any):
        if not isinstance(dataset, MixtureDataset):
            raise TypeError(f"MixtureLoader needs a MixtureDataset, got {type(dataset).__name__}")
        bad = sorted(set(dataloader_kwargs) & {"batch_size", "sampler", "batch_sampler", "shuffle", "drop_last"})
        if bad:
            raise TypeError(f"MixtureLoader: {bad} belong to the MixtureDataset (items are whole batches)")
        self.dataset = dataset
        self.kwargs = dict(dataloader_kwargs)
        self._handed = 0  # batches handed on since the dataset's start

    @property
    def position(self) -> int:
        """The global position every rank has reached (all ranks stepping together)."""
        ds = self.dataset
        return min(ds.start + self._handed * ds.global_batch_size, len(ds.mixture))

    def __len__(self) -> int:
        return len(self.dataset)

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` (from its start, unless it is the epoch already under way)."""
        if epoch != self.dataset.epoch:
            self._handed = 0
        self.dataset.set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        ds = self.dataset
        if self.position >= len(ds.mixture):
            ds.set_position(ds.epoch + 1, 0)
        else:
            ds.set_position(ds.epoch, self.position)
        self._handed = 0
        for batch in torch.utils.data.DataLoader(ds, batch_size=None, **self.kwargs):
            self._handed += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """``{"mixture": fingerprint, "epoch", "position", "global_batch_size"}``: where to resume."""
        return {"mixture": self.dataset.mixture.fingerprint, "epoch": self.dataset.epoch, "position": self.position,
                "global_batch_size": self.dataset.global_batch_size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at ``state`` (of :meth:`state_dict`), on any number of ranks and workers: the next
        batches are those of the global position it holds.

        Raises:
            ValueError: a state of another mixture (fingerprint) or a position past the epoch.
        """
        check_state(self.dataset.mixture, state)
        self.dataset.set_position(int(state["epoch"]), int(state["position"]))
        self._handed = 0
