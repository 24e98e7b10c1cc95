"""replaybuf core: episode bookkeeping, the storage protocol, the backend registry, chunk math.

This package never imports zarr; backends arrive through the ``replaybuf`` entry-point group.
"""

from .store.buffer import ReplayBuffer, rechunk_array
from .layout.chunks import check_chunks_compatible, get_optimal_chunks
from .layout.compressors import resolve_compressor
from .store.episode_index import episode_of_steps, get_episode_idxs
from .errors import (
    BackendNotFoundError,
    CapabilityError,
    CorruptStoreError,
    ReadOnlyError,
    ReplayBufferError,
    StoreLockedError,
)
from .protocol import BackendEntrypoint, StorageBackend
from .registry import get_backend, guess_backend, list_backends

__all__ = [
    "ReplayBuffer",
    "rechunk_array",
    "check_chunks_compatible",
    "get_optimal_chunks",
    "resolve_compressor",
    "get_episode_idxs",
    "episode_of_steps",
    "BackendEntrypoint",
    "StorageBackend",
    "get_backend",
    "guess_backend",
    "list_backends",
    "ReplayBufferError",
    "CorruptStoreError",
    "ReadOnlyError",
    "CapabilityError",
    "BackendNotFoundError",
    "StoreLockedError",
]
