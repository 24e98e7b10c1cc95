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
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.utils.data

from .images import convert_images

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
