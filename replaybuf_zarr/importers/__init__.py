"""Importers of other replay-buffer formats into replaybuf zarr stores (and their ``replaybuf import``
CLI sub-commands)."""

from .diffusion_policy import ImportReport, KeyReport, import_diffusion_policy

__all__ = ["ImportReport", "KeyReport", "import_diffusion_policy"]
