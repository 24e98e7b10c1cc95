"""replaybuf-hdf5: an HDF5 storage backend for replaybuf, found through the ``replaybuf`` entry point.

You never import this package to use it: ``ReplayBuffer.create_empty("hdf5", store="x.h5")`` and
``ReplayBuffer("x.h5")`` find it through the registry once the distribution is installed.
"""

from .backend import Hdf5Backend, Hdf5Entrypoint
from .codecs import Lzf, codec_from_dataset, codecs_equal, has_hdf5plugin, to_h5_filter

__all__ = ["Hdf5Backend", "Hdf5Entrypoint", "to_h5_filter", "codec_from_dataset", "codecs_equal",
           "has_hdf5plugin", "Lzf"]
__version__ = "0.1.0"
