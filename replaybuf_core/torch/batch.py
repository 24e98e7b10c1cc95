"""Batches for torch: NumPy arrays to tensors without a copy, image conversion once per batch, and a
batch object that a DataLoader passes through untouched.

A dataset's ``__getitems__`` (torch's batched-fetch protocol, ``torch.utils.data._utils.fetch``)
returns a :class:`Batch`; with ``collate_fn=collate`` the DataLoader hands that batch on as it is
— one ``sample_batch`` per batch, no split into samples and no restack.  Under torch's
``default_collate`` a :class:`Batch` still works (it is a sequence of per-sample dicts), at the cost
of a copy.
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceABC
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch
import torch.utils.data

__all__ = ["Batch", "collate", "to_torch", "convert_images", "pack_shared"]

_NUMERIC_KINDS = "biufc"


def to_torch(sample: Mapping[str, Any]) -> dict[str, Any]:
    """Numeric / bool arrays -> ``torch.Tensor`` of the same dtype and shape sharing their memory
    (``torch.from_numpy``; non-contiguous or read-only arrays are copied first); tensors pass as
    they are; string / object arrays stay ``np.ndarray``."""
    out: dict[str, Any] = {}
    for k, v in sample.items():
        if isinstance(v, torch.Tensor):
            out[k] = v
            continue
        v = np.asarray(v)
        if v.dtype.kind in _NUMERIC_KINDS:
            if not (v.flags.c_contiguous and v.flags.writeable):
                v = np.array(v, order="C")
            out[k] = torch.from_numpy(v)
        else:
            out[k] = v
    return out


def convert_images(batch: dict[str, np.ndarray], keys: Iterable[str], channels_first: bool,
                   to_float: bool, shared: bool = False) -> None:
    """Convert image arrays of ``batch`` in place (the dict's values are replaced), once per batch.

    Each ``batch[key]`` is uint8 (..., H, W, C).  ``channels_first`` gives (..., C, H, W) (a new
    C-contiguous array); ``to_float`` gives float32 in [0, 1], ``x / 255`` computed in float32 (the
    value ``torch``'s ``x.float() / 255`` gives, LeRobot's conversion).  Done in NumPy — it does not
    wake torch's intra-op thread pool inside a loader — on one slab of the batch per core for large
    batches (NumPy's ufuncs release the GIL; a 64-window batch of two 640×480 frames is ~236 MB of
    float32, bound by one thread otherwise).

    ``shared=True`` (DataLoader workers): each converted array is written straight into a new
    shared-memory ``torch.Tensor``, which replaces the value — the batch then crosses to the main
    process without another copy of its largest part (:func:`pack_shared` leaves shared tensors be).

    Raises:
        ValueError: a key whose array is not uint8 with at least 3 dimensions (the message names it).
    """
    for key in keys:
        x = batch[key]
        if x.dtype != np.uint8 or x.ndim < 3:
            raise ValueError(f"image key {key!r} must be uint8 (..., H, W, C), got {x.dtype} {x.shape}")
        if channels_first:
            x = np.moveaxis(x, -1, -3)
        if not (to_float or channels_first):
            continue
        value, out = _empty(x.shape, np.float32 if to_float else np.uint8, shared)
        if to_float:
            _divide(x, out)
        else:
            np.copyto(out, x)
        batch[key] = value


def _empty(shape: tuple[int, ...], dtype: Any, shared: bool) -> tuple[Any, np.ndarray]:
    """(the value to store, a NumPy view to write it through): a NumPy array, or a shared-memory
    tensor and its view."""
    if not shared:
        out = np.empty(shape, dtype=dtype)
        return out, out
    t = torch.empty(shape, dtype=torch.float32 if dtype == np.float32 else torch.uint8).share_memory_()
    return t, t.numpy()


#: arrays of at least this many values are converted on several threads
PARALLEL_VALUES = 1 << 22
_POOL: tuple[int, Any] | None = None


def _pool() -> Any:
    """This process's conversion threads (a new pool after a fork: threads do not survive it)."""
    global _POOL
    import os
    from concurrent.futures import ThreadPoolExecutor

    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max(1, os.cpu_count() or 1), thread_name_prefix="replaybuf-float"))
    return _POOL[1]


def _divide(x: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = x / 255`` in float32, in slabs along axis 0 on the conversion threads when large."""
    import os

    n = min(os.cpu_count() or 1, len(x)) if x.ndim else 1
    if x.size < PARALLEL_VALUES or n < 2:
        _divide_frames(x, out)
        return
    bounds = np.linspace(0, len(x), n + 1).astype(int)
    futures = [_pool().submit(_divide_frames, x[a:b], out[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()


def _divide_frames(x: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = x / 255`` frame by frame; a strided frame (a channels-first view) is first
    copied to a contiguous uint8 frame — a quarter of the bytes, and the division then runs on
    contiguous memory (measured: ~10-20 % less time than dividing the strided view)."""
    if x.flags.c_contiguous or x.ndim < 3:
        np.divide(x, np.float32(255), out=out, casting="unsafe")
        return
    frames, outs = x.reshape((-1,) + x.shape[-3:]), out.reshape((-1,) + out.shape[-3:])
    for f, o in zip(frames, outs):
        np.divide(np.ascontiguousarray(f), np.float32(255), out=o, casting="unsafe")


_ALIGN = 64


def pack_shared(data: dict[str, Any]) -> dict[str, Any]:
    """The tensors of ``data`` copied into one shared-memory storage, as views of it (same keys,
    dtypes, shapes; other values as they are).

    A DataLoader worker hands each tensor of a batch to the main process through its own
    shared-memory segment and file descriptor; in one storage a batch costs one segment and one
    descriptor (measured on Push-T, 2 workers: about 12 % more samples/s).  Offsets are aligned to
    64 bytes.  Tensors already in shared memory (images :func:`convert_images` wrote there) are
    left where they are.
    """
    tensors = [(k, v) for k, v in data.items() if isinstance(v, torch.Tensor) and not v.is_shared()]
    if len(tensors) < 2:
        return data
    sizes = [-(-v.numel() * v.element_size() // _ALIGN) * _ALIGN for _, v in tensors]
    arena = torch.empty(sum(sizes), dtype=torch.uint8).share_memory_()
    out, offset = dict(data), 0
    for (k, v), size in zip(tensors, sizes):
        nbytes = v.numel() * v.element_size()
        view = arena[offset: offset + nbytes].view(v.dtype).view(v.shape)
        view.copy_(v)
        out[k] = view
        offset += size
    return out


class Batch(SequenceABC):
    """A whole batch, dict ``key -> tensor (B, ...)`` in :attr:`data`, that also reads as a sequence
    of B per-sample dicts (views), so torch's ``default_collate`` accepts it too.

    :func:`collate` returns :attr:`data` itself: no copy, no restack.  Under ``default_collate`` the
    per-sample tensors are :class:`~replaybuf_core.torch.rows.BatchRow` views, which its
    ``torch.stack`` turns back into the batch tensor without a copy (a copy into shared memory in a
    worker when the tensor is not there yet); other values (strings) are collated as torch does.
    """

    def __init__(self, data: dict[str, Any], size: int):
        self.data = data
        self._sample_dicts: list[dict[str, Any]] | None = None  # the per-sample dicts (views), made on first use
        self.size = int(size)
        wrong = [k for k, v in data.items() if len(v) != self.size]
        if wrong:
            raise ValueError(f"Batch of {self.size}: {wrong} hold {[len(data[k]) for k in wrong]} samples")

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, j):  # type: ignore[override]
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(self.size))]
        if isinstance(j, (bool, np.bool_)) or not isinstance(j, (int, np.integer)):
            raise TypeError(f"batch samples are numbered by int, got {type(j).__name__}")
        if not -self.size <= j < self.size:
            raise IndexError(f"sample {j} out of range for a batch of {self.size}")
        return self._samples()[j]

    def __iter__(self):
        return iter(self._samples())

    def _samples(self) -> list[dict[str, Any]]:
        """The per-sample dicts, made once: ``default_collate`` asks for every sample once per key."""
        if self._sample_dicts is None:
            from .rows import batch_rows

            rows = {k: batch_rows(v) for k, v in self.data.items() if isinstance(v, torch.Tensor)}
            self._sample_dicts = [{k: rows[k][j] if k in rows else v[j] for k, v in self.data.items()}
                          for j in range(self.size)]
        return self._sample_dicts

    def __repr__(self) -> str:
        return f"Batch(size={self.size}, keys={list(self.data)})"


def collate(samples: Sequence[Mapping[str, Any]] | Batch) -> dict[str, Any]:
    """``collate_fn`` for DataLoaders over replaybuf datasets.

    A :class:`Batch` (what the datasets' ``__getitems__`` return) is passed through as its dict
    ``key -> (B, ...)`` — in a DataLoader worker (where torch runs ``collate_fn``) with its tensors
    packed into one shared storage (:func:`pack_shared`), so the batch crosses to the main process
    as one segment.  A list of per-sample dicts is stacked: tensors with ``torch.stack``, NumPy
    (string) arrays with ``np.stack``, scalars (``task`` strings) into lists — needed when a key
    holds strings, which torch's ``default_collate`` rejects.

    Raises:
        ValueError: ``samples`` is empty.
    """
    if isinstance(samples, Batch):
        if torch.utils.data.get_worker_info() is not None:
            return pack_shared(samples.data)
        return samples.data
    if len(samples) == 0:
        raise ValueError("collate needs at least one sample")
    out: dict[str, Any] = {}
    for k in samples[0]:
        vals = [s[k] for s in samples]
        if isinstance(vals[0], torch.Tensor):
            out[k] = torch.stack(vals)
        elif isinstance(vals[0], np.ndarray):
            out[k] = np.stack(vals)
        else:
            out[k] = vals
    return out
