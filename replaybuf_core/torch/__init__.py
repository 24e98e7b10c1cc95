"""Optional PyTorch adapter: map-style datasets over the samplers, batched for DataLoaders.

Importing this package imports torch; nothing else in ``replaybuf_core`` does.

* :class:`SequenceDataset` — diffusion_policy's fixed-length windows (:class:`SequenceSampler`).
* :class:`WindowDataset` — per-key step offsets / ``delta_timestamps`` (:class:`WindowSampler`).
* :class:`StreamingWindowDataset` — ``WindowDataset``'s samples in streaming epochs: blocks read
  whole in a shuffled order, windows drawn from a bounded shuffle buffer (each GOP decoded once).
* :class:`LeRobotDataset` — the sample dict and ``meta`` of LeRobot's ``LeRobotDataset``, for
  training code written against LeRobot.
* :func:`collate` — pass as ``collate_fn``: each batch is one ``sample_batch``, handed on unsplit.
* :class:`MixtureDataset` / :class:`MixtureLoader` — a :class:`~replaybuf_core.mixture.Mixture` of
  stores as batches split across ranks and workers, resumable mid-epoch.
"""

from replaybuf_core.torch.batch import Batch, collate, convert_images, to_torch
from replaybuf_core.torch.datasets import SequenceDataset, WindowDataset
from replaybuf_core.torch.lerobot import LeRobotDataset, LeRobotMeta
from replaybuf_core.torch.mixture import MixtureDataset, MixtureLoader
from replaybuf_core.torch.streaming import StreamingWindowDataset

__all__ = ["Batch", "collate", "convert_images", "to_torch", "SequenceDataset", "WindowDataset",
           "StreamingWindowDataset", "LeRobotDataset", "LeRobotMeta", "MixtureDataset", "MixtureLoader"]
