"""diffusion_policy's dataset code as its users run it, written from its public algorithm
(real-stanford/diffusion_policy: ``common/sampler.py`` ``create_indices`` and
``SequenceSampler.sample_sequence``, ``dataset/pusht_image_dataset.py`` ``_sample_to_data`` and
``get_normalizer``, ``model/common/normalizer.py`` ``_fit``), for
tests and benchmarks that check our ``ReplayBuffer`` drops in where its own did.

It touches the buffer only as that code does: ``replay_buffer.episode_ends[:]``,
``replay_buffer[key]`` sliced ``[a:b]`` once per key per item, ``.shape`` and ``.dtype``, and
``replay_buffer[key]`` handed whole to the normaliser.  Nothing here knows about replaybuf.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["create_indices", "ClientSequenceSampler", "InMemoryBuffer", "pusht_sample_to_data",
           "pusht_normalizer_data", "linear_normalizer_fit"]


def create_indices(episode_ends: np.ndarray, sequence_length: int, episode_mask: np.ndarray,
                   pad_before: int = 0, pad_after: int = 0) -> np.ndarray:
    """Rows ``[buffer_start, buffer_end, sample_start, sample_end]`` (int64 (N, 4)) of every window,
    as diffusion_policy builds them."""
    pad_before = min(max(pad_before, 0), sequence_length - 1)
    pad_after = min(max(pad_after, 0), sequence_length - 1)
    indices = []
    for i in range(len(episode_ends)):
        if not episode_mask[i]:
            continue
        start_idx = 0 if i == 0 else int(episode_ends[i - 1])
        episode_length = int(episode_ends[i]) - start_idx
        for idx in range(-pad_before, episode_length - sequence_length + pad_after + 1):
            buffer_start = max(idx, 0) + start_idx
            buffer_end = min(idx + sequence_length, episode_length) + start_idx
            start_offset = buffer_start - (idx + start_idx)
            end_offset = (idx + sequence_length + start_idx) - buffer_end
            indices.append([buffer_start, buffer_end, start_offset, sequence_length - end_offset])
    return np.array(indices, dtype=np.int64).reshape(-1, 4)


class ClientSequenceSampler:
    """diffusion_policy's ``SequenceSampler``: one item = one window, read key by key with
    ``replay_buffer[key][a:b]`` and padded by repeating the edge steps."""

    def __init__(self, replay_buffer: Any, sequence_length: int, pad_before: int = 0, pad_after: int = 0,
                 keys=None, key_first_k: dict | None = None):
        episode_ends = replay_buffer.episode_ends[:]
        self.indices = create_indices(episode_ends, sequence_length, np.ones(len(episode_ends), bool),
                                      pad_before, pad_after)
        self.keys = list(keys if keys is not None else replay_buffer.keys())
        self.sequence_length = sequence_length
        self.replay_buffer = replay_buffer
        self.key_first_k = dict(key_first_k or {})

    def __len__(self) -> int:
        return len(self.indices)

    def sample_sequence(self, idx: int) -> dict[str, np.ndarray]:
        buffer_start, buffer_end, sample_start, sample_end = self.indices[idx]
        result = {}
        for key in self.keys:
            input_arr = self.replay_buffer[key]
            if key not in self.key_first_k:
                sample = input_arr[buffer_start:buffer_end]
            else:
                n_data = buffer_end - buffer_start
                k_data = min(self.key_first_k[key], n_data)
                sample = np.full((n_data,) + input_arr.shape[1:], fill_value=np.nan if input_arr.dtype.kind == "f"
                                 else 0, dtype=input_arr.dtype)
                sample[:k_data] = input_arr[buffer_start:buffer_start + k_data]
            data = sample
            if sample_start > 0 or sample_end < self.sequence_length:
                data = np.zeros((self.sequence_length,) + input_arr.shape[1:], dtype=input_arr.dtype)
                if sample_start > 0:
                    data[:sample_start] = sample[0]
                if sample_end < self.sequence_length:
                    data[sample_end:] = sample[-1]
                data[sample_start:sample_end] = sample
            result[key] = data
        return result


def pusht_sample_to_data(sample: dict[str, np.ndarray]) -> dict[str, Any]:
    """``PushTImageDataset._sample_to_data``: images channels-first over 255, agent position, actions."""
    return {"obs": {"image": np.moveaxis(sample["img"], -1, 1) / 255,
                    "agent_pos": sample["state"][:, :2].astype(np.float32)},
            "action": sample["action"].astype(np.float32)}


def pusht_normalizer_data(replay_buffer: Any) -> dict[str, Any]:
    """What ``PushTImageDataset.get_normalizer`` hands ``LinearNormalizer.fit``: the buffer's
    ``action`` whole and the first two components of ``state``."""
    return {"action": replay_buffer["action"], "agent_pos": replay_buffer["state"][..., :2]}


def linear_normalizer_fit(data: Any, last_n_dims: int = 1, output_max: float = 1.0, output_min: float = -1.0,
                          range_eps: float = 1e-4) -> tuple[Any, Any]:
    """``(scale, offset)`` float32 torch tensors of diffusion_policy's ``_fit`` in ``limits`` mode with
    ``fit_offset`` (its default), on ``data`` as it takes it: a ``zarr.Array`` is read whole, an
    ``np.ndarray`` goes through ``torch.from_numpy``, and anything else must already be a torch tensor
    (it calls ``data.type(torch.float32)``: an AttributeError on anything else).  Needs torch."""
    import torch
    import zarr

    if isinstance(data, zarr.Array):
        data = data[:]
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    data = data.type(torch.float32)
    dim = int(np.prod(data.shape[-last_n_dims:])) if last_n_dims > 0 else 1
    data = data.reshape(-1, dim)
    input_min, _ = data.min(axis=0)
    input_max, _ = data.max(axis=0)
    input_range = input_max - input_min
    ignore_dim = input_range < range_eps
    input_range[ignore_dim] = output_max - output_min
    scale = (output_max - output_min) / input_range
    offset = output_min - scale * input_min
    offset[ignore_dim] = (output_max + output_min) / 2 - input_min[ignore_dim]
    return scale, offset


class InMemoryBuffer:
    """diffusion_policy's in-memory ``ReplayBuffer`` as its sampler sees it (what its
    ``copy_from_path`` gives): the first ``n_episodes`` of a diffusion-policy zarr store at ``path``,
    read with zarr-python into NumPy arrays by key, and ``episode_ends``."""

    def __init__(self, path: Any, keys, n_episodes: int | None = None):
        import zarr

        g = zarr.open_group(str(path), mode="r")
        self.episode_ends = g["meta/episode_ends"][:n_episodes]
        n = int(self.episode_ends[-1])
        self.data = {k: g["data"][k][:n] for k in keys}

    def __getitem__(self, key: str) -> np.ndarray:
        return self.data[key]

    def keys(self) -> list[str]:
        return list(self.data)
