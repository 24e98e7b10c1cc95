"""replaybuf's Zarr v3 backend: zarr groups as replay-buffer stores, codec translation, rechunking."""

from .backend import ZarrBackend, ZarrEntrypoint
from .rechunk import rechunk_recompress_array

__all__ = ["ZarrBackend", "ZarrEntrypoint", "rechunk_recompress_array"]
