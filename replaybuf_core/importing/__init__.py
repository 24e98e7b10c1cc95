"""Importing datasets of other formats: one pipeline (:mod:`.pipeline`) for every format, formats as
plugins (:class:`.source.FormatEntrypoint`, found through the ``replaybuf_formats`` hook).

``import_source`` / ``import_dataset`` load lazily: the format registry imports
:mod:`.source` alone, and the pipeline imports the registry.
"""

from .report import ImportReport, KeyReport
from replaybuf_core.source import KINDS, FormatEntrypoint, KeySpec, Source

__all__ = ["ImportReport", "KeyReport", "KINDS", "FormatEntrypoint", "KeySpec", "Source", "import_source",
           "import_dataset", "parse_episodes"]


def __getattr__(name: str):
    if name in ("import_source", "import_dataset", "parse_episodes"):
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
