"""The replaybuf backend conformance suite (replaybuf_core.testing) on the HDF5 backend: on-disk
files (reopen = close + open the path) and in-memory files (``driver="core"``)."""

import pytest

testing = pytest.importorskip("replaybuf_core.testing")
pytest.importorskip("h5py")  # the plugin is optional: `pip install -e plugins/replaybuf-hdf5`
pytest.importorskip("replaybuf_hdf5")


class TestHdf5Conformance(testing.BufferConformance):
    pass
