"""Map-style ``torch.utils.data.Dataset`` classes over the samplers, batched for DataLoaders.

``DataLoader(ds, batch_size=64, shuffle=True, num_workers=N, collate_fn=collate)`` fetches each
batch with one ``sample_batch`` (torch's ``__getitems__`` protocol) and hands it on unsplit.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.utils.data

from replaybuf_core.layout.frames import frame_keys
from replaybuf_core.sampling.sampler import SequenceSampler
from replaybuf_core.sampling.window_sampler import WindowSampler
from replaybuf_core.torch.batch import Batch, convert_images, to_torch
from replaybuf_core.torch.images import sample_converted, warm_kernels
from replaybuf_core.torch.opening import LazyStore

__all__ = ["SequenceDataset", "WindowDataset"]


def image_keys_of(buffer: Any, keys: Sequence[str]) -> list[str]:
    """Keys holding camera frames (see :func:`replaybuf_core.layout.frames.frame_keys`)."""
    return frame_keys(buffer, keys)


class _BatchedDataset(LazyStore, torch.utils.data.Dataset):
    """Shared item / batch access with the image conversion done once per batch."""

    def __init__(self, path_or_factory, image_keys: Sequence[str] | None, channels_first: bool,
                 float_images: bool, version: Any = None):
        super().__init__(path_or_factory, version)
        self.image_keys = None if image_keys is None else list(image_keys)
        self.channels_first = bool(channels_first)
        self.float_images = bool(float_images)
        if self.float_images:
            warm_kernels()  # off the first batch's path

    def _images(self) -> list[str]:
        if not (self.channels_first or self.float_images):
            return []
        if self.image_keys is None:
            s = self.sampler
            self.image_keys = image_keys_of(s.buffer, s.keys)
        return self.image_keys

    def _finish(self, arrays: dict[str, np.ndarray], shared: bool = False) -> dict[str, Any]:
        convert_images(arrays, self._images(), self.channels_first, self.float_images, shared=shared,
                       arena=getattr(self.sampler, "arena", None))
        return to_torch(arrays)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        """Sample ``idx`` (negative allowed) as a dict of tensors (strings stay NumPy).

        Raises IndexError out of range, TypeError for a non-int index."""
        return self._finish(self.sampler[idx])

    def __getitems__(self, indices: Sequence[int]) -> Batch:
        """Samples ``indices`` read with one ``sample_batch`` (camera frames converted as they are
        decoded: :func:`~replaybuf_core.torch.images.sample_converted`), as a :class:`Batch` (used by
        DataLoader)."""
        idx = np.asarray(list(indices), dtype=np.int64)
        in_worker = torch.utils.data.get_worker_info() is not None  # a worker's batch goes to shared memory
        arrays = sample_converted(self.sampler, idx, self._images(), self.channels_first, self.float_images,
                                  shared=in_worker)
        return Batch(to_torch(arrays), len(idx))


class SequenceDataset(_BatchedDataset):
    """diffusion_policy's fixed-length windows as a map-style ``torch.utils.data.Dataset``.

    Item ``i`` is window ``i`` of ``SequenceSampler(buffer, sequence_length, **sampler_kwargs)``:
    dict key -> ``torch.Tensor`` (sequence_length, *step shape) in the stored dtype (camera frames
    as uint8 even when an import's source held them as floats: a quarter of the bytes, converted
    once a batch by ``float_images``; pass ``dtypes="source"`` for the source's dtypes),
    ``"_is_pad"`` -> bool (sequence_length,), string keys -> ``np.ndarray``.  Windows, padding and
    ``key_first_k`` are exactly the sampler's (see :class:`SequenceSampler`).  For only the steps
    each key needs, use :class:`WindowDataset`.

    Args:
        path_or_factory: a store path (opened read-only) or a picklable no-argument callable
            returning a buffer; opened lazily in each process (see :mod:`replaybuf_core.torch.opening`).
        sequence_length: steps per window, >= 1.
        image_keys: keys converted by ``channels_first`` / ``float_images``; default the uint8
            (H, W, C) keys.
        channels_first: images as (..., C, H, W).
        float_images: images as float32 in [0, 1] (``x / 255``).
        version: a version of the store to read (a tag, an id, -N), pinned to its id at construction;
            ``dataset.version`` is its record (:class:`~replaybuf_core.torch.opening.LazyStore`).
        **sampler_kwargs: passed to :class:`SequenceSampler` (``pad_before``, ``pad_after``,
            ``keys``, ``key_first_k``, ``episode_mask``, ``skip_initial``, ``pad_mode``, ``dtypes``
            — here ``"stored"`` unless given).

    Raises:
        TypeError: ``path_or_factory`` neither a path nor a callable.  Errors of the opener and of
        :class:`SequenceSampler` surface on first use (``len()`` or indexing).
    """

    def __init__(self, path_or_factory: str | os.PathLike | Callable[[], Any], sequence_length: int, *,
                 image_keys: Sequence[str] | None = None, channels_first: bool = False,
                 float_images: bool = False, version: Any = None, **sampler_kwargs: Any):
        super().__init__(path_or_factory, image_keys, channels_first, float_images, version)
        self.sequence_length = sequence_length
        self.sampler_kwargs = dict(sampler_kwargs)

    def _build(self, buffer: Any, window_index: Any) -> SequenceSampler:
        return SequenceSampler(buffer, self.sequence_length, window_index=window_index,
                               **{"dtypes": "stored", **self.sampler_kwargs})

    def __repr__(self) -> str:
        return f"SequenceDataset({self._source_name()!r}, sequence_length={self.sequence_length}, {self.sampler_kwargs})"


class WindowDataset(_BatchedDataset):
    """Per-key windows (LeRobot's ``delta_timestamps``, diffusion_policy's horizons) as a
    map-style ``torch.utils.data.Dataset``.

    Item ``i`` is sample ``i`` of ``WindowSampler(buffer, delta_steps, **window_kwargs)``: dict
    key -> tensor (n_key, *step shape) for keys with offsets, (*step shape) for the others,
    ``"<key>_is_pad"`` -> bool (n_key,); only the steps asked for are read.

    Args:
        path_or_factory: as for :class:`SequenceDataset`.
        delta_steps: ``{key: [int offset, ...]}`` (or pass ``delta_timestamps=`` in seconds).
        image_keys, channels_first, float_images, version: as for :class:`SequenceDataset`.
        **window_kwargs: passed to :class:`WindowSampler` (``delta_timestamps``, ``fps``,
            ``tolerance_s``, ``keys``, ``pad_before``, ``pad_after``, ``pad_mode``, ``episode_mask``,
            ``dtypes`` — here ``"stored"`` unless given: frames as uint8, as for :class:`SequenceDataset`).

    Raises:
        TypeError: ``path_or_factory`` neither a path nor a callable.  Errors of the opener and of
        :class:`WindowSampler` surface on first use.
    """

    def __init__(self, path_or_factory: str | os.PathLike | Callable[[], Any], delta_steps=None, *,
                 image_keys: Sequence[str] | None = None, channels_first: bool = False,
                 float_images: bool = False, version: Any = None, **window_kwargs: Any):
        super().__init__(path_or_factory, image_keys, channels_first, float_images, version)
        self.delta_steps = delta_steps
        self.window_kwargs = dict(window_kwargs)

    def _build(self, buffer: Any, window_index: Any) -> WindowSampler:
        return WindowSampler(buffer, self.delta_steps, window_index=window_index,
                             **{"dtypes": "stored", **self.window_kwargs})

    def __repr__(self) -> str:
        return f"WindowDataset({self._source_name()!r}, delta_steps={self.delta_steps}, {self.window_kwargs})"
