"""pluggy plugin module of the built-in NumPy backend (named in ``[project.entry-points.replaybuf]``)."""

from replaybuf_core.hookspecs import hookimpl

from .backend import NumpyEntrypoint


@hookimpl
def replaybuf_backends():
    """Hook: the backend entry-point classes of this package."""
    return [NumpyEntrypoint]
