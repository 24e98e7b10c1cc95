"""Importing datasets of other formats: one pipeline (:mod:`.pipeline`) for every format, formats as
plugins (:class:`replaybuf_core.source.FormatEntrypoint`, the contract a format implements, found
through the ``replaybuf_formats`` hook).

``import_source`` / ``import_dataset`` load on first use, so that importing the report and the
contract stays light.
"""

from replaybuf_core.source import KINDS, FormatEntrypoint, KeySpec, Source

from .report import ImportReport, KeyReport

__all__ = ["ImportReport", "KeyReport", "KINDS", "FormatEntrypoint", "KeySpec", "Source", "import_source",
           "import_dataset", "parse_episodes"]


def __getattr__(name: str):
    if name in ("import_source", "import_dataset", "parse_episodes"):
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
