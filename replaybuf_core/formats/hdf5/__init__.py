"""The HDF5 family of import formats — ``robomimic``, ``minari``, ``d3rlpy``, ``maniskill`` — read
with h5py (``pip install 'replaybuf[hdf5]'``, which brings hdf5plugin's Blosc/Zstd/LZ4/bitshuffle
filters too).  Each is a format on the shared import pipeline; :mod:`.episodes` holds what the
episode-per-group layouts share, :mod:`.common` the HDF5 reading."""
