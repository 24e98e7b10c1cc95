"""pluggy plugin module of the built-in Zarr backend (named in ``[project.entry-points.replaybuf]``)."""

from replaybuf_core.hookspecs import hookimpl

from .entrypoint import ZarrEntrypoint


@hookimpl
def replaybuf_backends():
    """Hook: the backend entry-point classes of this package."""
    return [ZarrEntrypoint]
