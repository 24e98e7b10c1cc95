"""A reusable conformance suite for replaybuf storage backends.

Any backend package (built-in or third party, e.g. an HDF5 plugin) checks that
:class:`replaybuf_core.ReplayBuffer` behaves identically on it by writing a small
:class:`BackendHarness` and subclassing the test classes below in its own test module::

    # tests/test_my_backend.py of a backend package
    import pytest
    from replaybuf_core import ReplayBuffer
    from replaybuf_core.testing import BackendHarness, BufferConformance

    class MyHarness(BackendHarness):
        name = "mybackend"                       # == buffer.backend
        def __init__(self, tmp_path):
            self.tmp_path, self.n = tmp_path, 0
        def make_empty(self):                    # a fresh, empty buffer on every call
            self.n += 1
            return ReplayBuffer.create_empty("mybackend", self.tmp_path / f"b{self.n}.h5")

    @pytest.fixture
    def harness(tmp_path):
        return MyHarness(tmp_path)

    class TestMyBackend(BufferConformance):      # every test of the suite, plus the state machine
        pass

What the backend's capabilities are is read from ``buffer.store.capabilities`` (``"chunks"``,
``"codecs"`` ...): tests of a capability the backend lacks check that the call raises
:class:`~replaybuf_core.errors.CapabilityError` instead.  Override :meth:`BackendHarness.reopen`
when re-opening from storage needs more than ``ReplayBuffer(buffer.root)`` (e.g. open the file path
again), and set the harness flags (``supports_strings``, ``supports_read_only``...) for what the
backend cannot do.

Importing this package imports ``pytest`` and ``hypothesis`` (test-only dependencies);
``replaybuf_core`` itself never imports it.
"""

from .conformance import (
    BufferConformance,
    ConstructorConformance,
    EpisodeConformance,
    MetaConformance,
    PropertiesConformance,
)
from .data import assert_buffer_equal, assert_episode_equal, make_episode, snapshot, tree_digest
from .durability_conformance import CrashConformance, StatefulConformance
from .edit_conformance import EditConformance, StatsConformance
from .harness import BackendHarness
from .layout_conformance import ChunkCodecConformance, CopyConformance, StorageProtocolConformance
from .refusal_conformance import ReadOnlyConformance, ValidateBeforeMutateConformance
from .stateful import make_state_machine, run_state_machine

__all__ = [
    "CrashConformance",
    "BackendHarness",
    "BufferConformance",
    "EditConformance",
    "StatsConformance",
    "ConstructorConformance",
    "PropertiesConformance",
    "MetaConformance",
    "EpisodeConformance",
    "ValidateBeforeMutateConformance",
    "ReadOnlyConformance",
    "ChunkCodecConformance",
    "CopyConformance",
    "StorageProtocolConformance",
    "StatefulConformance",
    "make_state_machine",
    "run_state_machine",
    "make_episode",
    "snapshot",
    "tree_digest",
    "assert_buffer_equal",
    "assert_episode_equal",
]
