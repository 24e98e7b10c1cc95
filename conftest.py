"""Root pytest configuration: the HDF5 plugin's tests run only where the plugin is installed
(`pip install -e plugins/replaybuf-hdf5`, as .ci/run does)."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("replaybuf_hdf5") else ["plugins/replaybuf-hdf5/tests"]
