"""pluggy plugin module of the HDF5 backend, named in ``[project.entry-points.replaybuf]``.

Importing it must stay cheap (the registry imports every plugin module at first use): it imports
h5py and the backend classes, and opens nothing.
"""

from replaybuf_core.hookspecs import hookimpl

from .backend import Hdf5Entrypoint


@hookimpl
def replaybuf_backends():
    """The backend entry-point classes this plugin provides: ``[Hdf5Entrypoint]``."""
    return [Hdf5Entrypoint]
