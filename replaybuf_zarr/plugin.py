"""pluggy plugin module of the built-in Zarr backend (named in ``[project.entry-points.replaybuf]``)."""

from replaybuf_core.hookspecs import hookimpl

from .backend import ZarrEntrypoint


@hookimpl
def replaybuf_backends():
    return [ZarrEntrypoint]
