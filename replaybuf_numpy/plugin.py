"""pluggy plugin module of the built-in NumPy backend (named in ``[project.entry-points.replaybuf]``)."""

from replaybuf_core.hookspecs import hookimpl

from .backend import NumpyEntrypoint


@hookimpl
def replaybuf_backends():
    return [NumpyEntrypoint]
