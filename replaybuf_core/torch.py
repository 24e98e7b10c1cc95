"""Optional PyTorch adapter: a ``torch.utils.data.Dataset`` over a :class:`SequenceSampler`.

Importing this module imports torch; nothing else in ``replaybuf_core`` does.

The dataset keeps only a path (or an opener callable) and the sampler
arguments. The store is opened lazily, in the process that reads: each
DataLoader worker opens its own buffer on its first ``__getitem__``, and a
pickled dataset never carries an open buffer. This replaces diffusion_policy's
pattern of loading the whole store into memory in the main process before
forking workers.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.utils.data

from replaybuf_core.sampler import SequenceSampler

__all__ = ["SequenceDataset", "collate", "to_torch"]

_NUMERIC_KINDS = "biufc"


def to_torch(sample: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Convert a sample or batch dict: numeric/bool arrays -> ``torch.Tensor``
    (same dtype and shape, sharing memory), string/object arrays stay ``np.ndarray``."""
    out: dict[str, Any] = {}
    for k, v in sample.items():
        v = np.asarray(v)
        out[k] = torch.from_numpy(np.ascontiguousarray(v)) if v.dtype.kind in _NUMERIC_KINDS else v
    return out


def collate(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``collate_fn`` for DataLoaders over :class:`SequenceDataset`.

    Stacks tensors with ``torch.stack`` and NumPy (string) arrays with
    ``np.stack`` along a new batch axis 0: key -> (B, sequence_length, ...).
    Needed when a sampled key holds strings (torch's ``default_collate``
    rejects string arrays); for numeric keys only it equals ``default_collate``.

    Raises:
        ValueError: ``samples`` is empty.
    """
    if len(samples) == 0:
        raise ValueError("collate needs at least one sample")
    out: dict[str, Any] = {}
    for k in samples[0]:
        vals = [s[k] for s in samples]
        out[k] = torch.stack(vals) if isinstance(vals[0], torch.Tensor) else np.stack(vals)
    return out


class SequenceDataset(torch.utils.data.Dataset):
    """Windows of a replay buffer as a map-style ``torch.utils.data.Dataset``.

    Item ``i`` is window ``i`` of ``SequenceSampler(buffer, sequence_length,
    **sampler_kwargs)``: dict key -> ``torch.Tensor`` (sequence_length, *trailing)
    in the stored dtype, ``"_is_pad"`` -> bool tensor (sequence_length,), string
    keys -> ``np.ndarray`` (use :func:`collate` as ``collate_fn`` then). Windows,
    padding and ``key_first_k`` are exactly the sampler's (behaviour from
    diffusion_policy's ``SequenceSampler``, see :class:`SequenceSampler`).

    DataLoader batches are read with ``SequenceSampler.sample_batch`` (through
    ``__getitems__``), i.e. one batched ``read_ranges`` per key, instead of one
    read per window per key.

    Args:
        path_or_factory: path of a store, opened read-only with
            ``ReplayBuffer.create_from_path(path)``, or a picklable callable with no
            arguments returning a buffer (e.g. ``functools.partial(...)``).
        sequence_length: steps per window, >= 1.
        **sampler_kwargs: passed to :class:`SequenceSampler` (``pad_before``,
            ``pad_after``, ``keys``, ``key_first_k``, ``episode_mask``,
            ``skip_initial``, ``pad_mode``).

    Raises:
        TypeError: ``path_or_factory`` neither a path nor a callable.
        Errors of the opener and of :class:`SequenceSampler` surface on first use
        (``len()`` or indexing), not at construction.
    """

    def __init__(self, path_or_factory: str | os.PathLike | Callable[[], Any], sequence_length: int,
                 **sampler_kwargs: Any):
        if isinstance(path_or_factory, (str, os.PathLike)):
            self._path: str | None = os.fspath(path_or_factory)
            self._factory: Callable[[], Any] | None = None
        elif callable(path_or_factory):
            self._path, self._factory = None, path_or_factory
        else:
            raise TypeError(
                "path_or_factory must be a path or a callable returning a ReplayBuffer, "
                f"got {type(path_or_factory).__name__}"
            )
        self.sequence_length = sequence_length
        self.sampler_kwargs = dict(sampler_kwargs)
        self._len: int | None = None
        self._sampler: SequenceSampler | None = None
        self._pid: int | None = None

    # ---------------------------------------------------------------- opening
    def _open_buffer(self):
        if self._factory is not None:
            return self._factory()
        from replaybuf_core.buffer import ReplayBuffer

        return ReplayBuffer.create_from_path(self._path)

    def _make_sampler(self) -> SequenceSampler:
        return SequenceSampler(self._open_buffer(), self.sequence_length, **self.sampler_kwargs)

    @property
    def sampler(self) -> SequenceSampler:
        """The sampler of this process, opened on first use (re-opened after a fork)."""
        pid = os.getpid()
        if self._sampler is None or self._pid != pid:
            sampler = self._make_sampler()
            if self._len is not None and len(sampler) != self._len:
                raise RuntimeError(
                    f"the store changed: {len(sampler)} windows now, {self._len} when the dataset was sized"
                )
            self._sampler, self._pid, self._len = sampler, pid, len(sampler)
        return self._sampler

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_sampler"] = None  # never pickle an open buffer
        state["_pid"] = None
        return state

    # ----------------------------------------------------------------- access
    def __len__(self) -> int:
        """Number of windows. Sized from a temporary buffer that is not kept, so
        the main process holds no open store when workers start."""
        if self._len is None:
            if self._sampler is not None and self._pid == os.getpid():
                self._len = len(self._sampler)
            else:
                self._len = len(self._make_sampler())
        return self._len

    def __getitem__(self, idx: int) -> dict[str, Any]:
        """Window ``idx`` (negative allowed); IndexError when out of range."""
        return to_torch(self.sampler[idx])

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Windows ``indices`` read in one ``sample_batch`` (used by DataLoader)."""
        batch = to_torch(self.sampler.sample_batch(np.asarray(list(indices), dtype=np.int64)))
        return [{k: v[j] for k, v in batch.items()} for j in range(len(indices))]

    def __repr__(self) -> str:
        src = self._path if self._path is not None else getattr(self._factory, "__name__", repr(self._factory))
        return f"SequenceDataset({src!r}, sequence_length={self.sequence_length}, {self.sampler_kwargs})"
