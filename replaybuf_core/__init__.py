"""replaybuf core: episodic replay buffers for robot learning over any storage backend.

The public surface — what the README and docs use; the modules behind it may move:

* the store: :class:`ReplayBuffer`, :class:`EpisodeWriter`, :func:`create_replay_buffer` (from a
  :class:`DatasetSchema`), :func:`rechunk_array`, the step → episode index;
* sampling: :class:`SequenceSampler` (diffusion_policy's windows, with ``_is_pad``),
  :class:`WindowSampler` (per-key windows: LeRobot's ``delta_timestamps``), :func:`get_val_mask`,
  :func:`downsample_mask`, :func:`delta_timestamps_to_steps`;
* importing: :func:`import_dataset`, :func:`import_source`, and the format contract
  (:class:`FormatEntrypoint`, :class:`Source`, :class:`KeySpec`);
* exporting: :func:`export_dataset` (LeRobot v3.0, diffusion-policy zarr v2, robomimic HDF5) and
  the export-format contract (:class:`ExportFormat`, :class:`ExportPlan`);
* backends: the storage protocol (:class:`StorageBackend`, :class:`BackendEntrypoint`) and the
  registry (:func:`get_backend`, :func:`guess_backend`, :func:`list_backends`, :func:`list_formats`,
  :func:`list_export_formats`);
* the project's errors.

The PyTorch datasets are :mod:`replaybuf_core.torch` (imports torch); the conformance kit for
backend authors is :mod:`replaybuf_core.testing`.  This package never imports a backend package;
backends arrive through the ``replaybuf`` entry-point group (docs/architecture.md).
"""

from .errors import (
    BackendNotFoundError,
    CapabilityError,
    CorruptStoreError,
    DamagedSourceError,
    EmptyBufferError,
    FormatNotFoundError,
    ReadOnlyError,
    ReplayBufferError,
    StoreLockedError,
)
from .export_format import ExportFormat, ExportPlan, ExportReport
from .layout.chunks import check_chunks_compatible, get_optimal_chunks
from .layout.compressors import resolve_compressor
from .layout.schema import DatasetSchema
from .protocol import BackendEntrypoint, StorageBackend
from .registry import get_backend, guess_backend, list_backends, list_export_formats, list_formats
from .sampling.sampler import SequenceSampler, downsample_mask, get_val_mask
from .sampling.window_sampler import WindowSampler, delta_timestamps_to_steps
from .source import FormatEntrypoint, KeySpec, Source
from .store.buffer import ReplayBuffer, rechunk_array
from .store.creation import create_replay_buffer
from .store.episode_index import episode_of_steps, get_episode_idxs
from .store.writer import EpisodeWriter

__all__ = [
    "BackendEntrypoint",
    "BackendNotFoundError",
    "CapabilityError",
    "CorruptStoreError",
    "DatasetSchema",
    "EmptyBufferError",
    "EpisodeWriter",
    "ExportFormat",
    "ExportPlan",
    "ExportReport",
    "FormatEntrypoint",
    "DamagedSourceError",
    "FormatNotFoundError",
    "KeySpec",
    "ReadOnlyError",
    "ReplayBuffer",
    "ReplayBufferError",
    "SequenceSampler",
    "Source",
    "StorageBackend",
    "StoreLockedError",
    "WindowSampler",
    "check_chunks_compatible",
    "create_replay_buffer",
    "delta_timestamps_to_steps",
    "downsample_mask",
    "episode_of_steps",
    "export_dataset",
    "get_backend",
    "get_episode_idxs",
    "get_optimal_chunks",
    "get_val_mask",
    "guess_backend",
    "import_dataset",
    "import_source",
    "list_backends",
    "list_export_formats",
    "list_formats",
    "rechunk_array",
    "resolve_compressor",
]


def __getattr__(name: str):
    # the import pipeline loads on first use: `import replaybuf_core` stays light for readers
    if name in ("import_dataset", "import_source"):
        from .importing import pipeline

        return getattr(pipeline, name)
    if name == "export_dataset":
        from .exporting import run

        return run.export_dataset
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
