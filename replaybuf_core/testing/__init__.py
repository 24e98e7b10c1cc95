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

The conformance classes and the state machine need ``pytest`` and ``hypothesis`` (test-only
dependencies): they load on first use (PEP 562), so the pytest-free helpers — ``make_episode``,
``tree_digest``, :mod:`.files`, :mod:`.crash`, :mod:`.lerobot_writer`, :mod:`.diffusion_policy_client`
(what the benchmarks use) — import without them.  ``replaybuf_core`` itself never imports this package.
"""

_PUBLIC = {
    ".conformance": ["BufferConformance", "ConstructorConformance", "EpisodeConformance", "MetaConformance",
                     "PropertiesConformance"],
    ".data": ["assert_buffer_equal", "assert_episode_equal", "make_episode", "snapshot", "tree_digest"],
    ".durability_conformance": ["CrashConformance", "StatefulConformance"],
    ".edit_conformance": ["EditConformance", "StatsConformance"],
    ".harness": ["BackendHarness"],
    ".layout_conformance": ["ChunkCodecConformance", "CopyConformance", "StorageProtocolConformance"],
    ".refusal_conformance": ["ReadOnlyConformance", "ValidateBeforeMutateConformance"],
    ".stateful": ["make_state_machine", "run_state_machine"],
}
_MODULE_OF = {name: module for module, names in _PUBLIC.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = globals()[name] = getattr(import_module(_MODULE_OF[name], __name__), name)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
