"""The replaybuf backend conformance suite (replaybuf_core.testing) on the HDF5 backend: on-disk
files (reopen = close + open the path) and in-memory files (``driver="core"``)."""

import pytest

testing = pytest.importorskip("replaybuf_core.testing")


class TestHdf5Conformance(testing.BufferConformance):
    pass
