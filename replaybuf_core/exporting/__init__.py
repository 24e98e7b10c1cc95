"""Export: a store's episodes written in another library's layout (``replaybuf export FORMAT STORE
DST``), built beside DST, read back through an independent reader, then swapped in.

Formats are plugins (the ``replaybuf_export_formats`` hook, :class:`ExportFormat`): the built-in
``diffusion-policy`` (zarr v2) and ``robomimic`` (HDF5) are found exactly like a third party's.
"""

from replaybuf_core.export_format import ExportFormat, ExportPlan, ExportReport

from .run import export_dataset, make_plan, parse_renames

__all__ = ["ExportFormat", "ExportPlan", "ExportReport", "export_dataset", "make_plan", "parse_renames"]
