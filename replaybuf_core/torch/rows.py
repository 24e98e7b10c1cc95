"""Sample rows of a batch that torch's ``default_collate`` puts back together without a copy.

``DataLoader(ds, batch_size=64, shuffle=True)`` — torch's defaults — fetches a batch with the
dataset's ``__getitems__`` and hands it to ``default_collate``, which splits nothing but stacks
every key's per-sample tensors again with ``torch.stack`` (``torch.utils.data.default_collate``:
Mapping → per key ``torch.stack(samples, 0, out=...)``).  Our batches are read whole, so that stack
is a copy of what already exists — and under a busy machine a slow one: it wakes torch's intra-op
threads beside the decode threads (measured 0.02–0.05× of ``sample_batch``).

The rows of a batch tensor are its ``torch.unbind`` views; the first is a :class:`BatchRow`, a
``torch.Tensor`` subclass whose ``__torch_function__`` (torch's public override protocol, "Extending
torch with a Tensor wrapper type" in its docs) sees ``torch.stack`` of all rows of one batch tensor
(those very views), in order, along dim 0, and returns that batch tensor itself — or copies it into the ``out`` tensor ``default_collate``
allocates in a worker's shared memory, unless the batch is already in shared memory.  Every other
operation runs as on a plain tensor and returns plain tensors (a row never spreads).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BatchRow", "batch_rows"]


class BatchRow(torch.Tensor):
    """Row 0 of the batch tensor ``_rb_base``; ``_rb_rest`` are the other rows (see the module doc).  Made by
    :func:`batch_rows`."""

    _rb_base: torch.Tensor
    _rb_rest: list

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.stack:
            whole = _whole_batch(args, kwargs)
            if whole is not None:
                return whole
        if func is torch.Tensor.as_subclass:
            return super().__torch_function__(func, types, args, kwargs)
        return _plain(super().__torch_function__(func, types, args, kwargs))

    def __reduce_ex__(self, protocol):  # pickled as the plain row, never with its whole batch
        return self.as_subclass(torch.Tensor).clone().__reduce_ex__(protocol)

    def __deepcopy__(self, memo):  # a plain copy of the row
        return self.as_subclass(torch.Tensor).clone()

    def __repr__(self, *, tensor_contents=None):
        return repr(self.as_subclass(torch.Tensor))


def batch_rows(batch: torch.Tensor) -> list[torch.Tensor]:
    """The rows ``batch[0], batch[1], ...`` (views, no copy; ``torch.unbind``); the first a
    :class:`BatchRow` that knows the batch — enough for ``torch.stack`` of the list to reach its
    ``__torch_function__`` — the others plain tensors (making 64 subclass views a key cost ~0.1 ms)."""
    rows = list(torch.unbind(batch))
    if rows:
        first = rows[0].as_subclass(BatchRow)
        first._rb_base = batch
        first._rb_rest = rows[1:]  # the other rows, by identity (a list without ``first``: no cycle)
        rows[0] = first
    return rows


def _whole_batch(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The batch tensor when ``torch.stack(tensors, dim=0, out=...)`` restacks all its rows in order:
    the first is the batch's :class:`BatchRow`, and each other is the very view :func:`batch_rows`
    made of row ``i`` (a row replaced by another tensor is stacked as torch would)."""
    tensors = args[0] if args else kwargs.get("tensors")
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    if dim != 0 or not isinstance(tensors, (list, tuple)) or not tensors:
        return None
    base = getattr(tensors[0], "_rb_base", None)
    if base is None or len(tensors) != len(base):
        return None
    rest = tensors[0]._rb_rest
    if any(t is not r for t, r in zip(tensors[1:], rest)):
        return None
    out = kwargs.get("out")
    if out is None or base.is_shared():
        return base
    if tuple(out.shape) != tuple(base.shape):
        out.resize_(base.shape)
    out.copy_(base)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, BatchRow):
        return value.as_subclass(torch.Tensor)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value
