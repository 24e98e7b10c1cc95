"""Optional PyTorch adapter: map-style datasets over the samplers, batched for DataLoaders.

Importing this package imports torch; nothing else in ``replaybuf_core`` does.

* :class:`SequenceDataset` — diffusion_policy's fixed-length windows (:class:`SequenceSampler`).
* :class:`WindowDataset` — per-key step offsets / ``delta_timestamps`` (:class:`WindowSampler`).
* :class:`LeRobotDataset` — the sample dict and ``meta`` of LeRobot's ``LeRobotDataset``, for
  training code written against LeRobot.
* :func:`collate` — pass as ``collate_fn``: each batch is one ``sample_batch``, handed on unsplit.
"""

from replaybuf_core.torch.batch import Batch, collate, convert_images, to_torch
from replaybuf_core.torch.datasets import SequenceDataset, WindowDataset
from replaybuf_core.torch.lerobot import LeRobotDataset, LeRobotMeta

__all__ = ["Batch", "collate", "convert_images", "to_torch", "SequenceDataset", "WindowDataset",
           "LeRobotDataset", "LeRobotMeta"]
