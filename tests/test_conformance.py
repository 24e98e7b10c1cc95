"""The reusable backend conformance suite (replaybuf_core.testing) on the built-in backends:
numpy, zarr on a MemoryStore, zarr on a LocalStore (the `harness` fixture in conftest.py)."""

from replaybuf_core.testing import BufferConformance


class TestBuiltinBackends(BufferConformance):
    pass
