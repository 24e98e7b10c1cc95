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

# Each public name and the module that defines it, imported on first use (PEP 562): `import
# replaybuf_core` (and so every submodule's import, the CLI's start included) stays light — NumPy,
# zarr, numba and the backends load when a name that needs them is first touched.
_PUBLIC = {
    ".errors": ["BackendNotFoundError", "CapabilityError", "CorruptStoreError", "DamagedSourceError",
                "EmptyBufferError", "FormatNotFoundError", "ReadOnlyError", "ReplayBufferError", "StoreLockedError"],
    ".export_format": ["ExportFormat", "ExportPlan", "ExportReport"],
    ".exporting.run": ["export_dataset"],
    ".importing.pipeline": ["import_dataset", "import_source"],
    ".layout.chunks": ["check_chunks_compatible", "get_optimal_chunks"],
    ".layout.compressors": ["resolve_compressor"],
    ".layout.schema": ["DatasetSchema"],
    ".protocol": ["BackendEntrypoint", "StorageBackend"],
    ".registry": ["get_backend", "guess_backend", "list_backends", "list_export_formats", "list_formats"],
    ".sampling.sampler": ["SequenceSampler", "downsample_mask", "get_val_mask"],
    ".sampling.window_sampler": ["WindowSampler", "delta_timestamps_to_steps"],
    ".source": ["FormatEntrypoint", "KeySpec", "Source"],
    ".store.buffer": ["ReplayBuffer", "rechunk_array"],
    ".store.creation": ["create_replay_buffer"],
    ".store.episode_index": ["episode_of_steps", "get_episode_idxs"],
    ".store.writer": ["EpisodeWriter"],
}
_MODULE_OF = {name: module for module, names in _PUBLIC.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # found once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
