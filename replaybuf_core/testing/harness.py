"""The harness a backend package provides to the conformance suite."""

from __future__ import annotations

from typing import Any

from replaybuf_core.store.buffer import ReplayBuffer

from .data import make_episode


class BackendHarness:
    """How the conformance suite creates and re-opens buffers of one backend.

    Subclass it, set :attr:`name` and implement :meth:`make_empty`; override the rest only when the
    defaults do not fit.  Expose an instance through a pytest fixture called ``harness`` (see
    :mod:`replaybuf_core.testing`).  One harness instance serves one test, and :meth:`make_empty` may
    be called many times in it (the state machine calls it once per hypothesis example), so every
    call must return a *new, independent* empty buffer (e.g. a fresh file name per call).

    Capabilities are not declared here: the suite reads ``buffer.store.capabilities``.
    """

    #: the backend's registered name; the suite asserts ``buffer.backend == name``.
    name: str = ""
    #: ``str`` (object) arrays round-trip (the protocol requires it; set False only while porting).
    supports_strings: bool = True
    #: :meth:`reopen_read_only` works.
    supports_read_only: bool = True
    #: the StorageBackend ``write`` verb is looked up on the instance, so tests may monkeypatch
    #: ``buffer.store.write`` to inject a failure mid-write.
    supports_write_injection: bool = True

    def make_empty(self) -> ReplayBuffer:
        """A fresh, empty, writable buffer on this backend (new storage on every call)."""
        raise NotImplementedError

    def reopen(self, buffer: ReplayBuffer) -> ReplayBuffer:
        """The same data opened again from its storage (writable).

        The default, ``ReplayBuffer(buffer.root, backend=self.name)``, re-reads everything through the
        backend (for in-memory backends, the same root object).  Persistent backends should override
        it to open the path / file again.  ``buffer`` must not be used afterwards."""
        buffer.store.flush()
        return ReplayBuffer(buffer.root, backend=self.name)

    def reopen_read_only(self, buffer: ReplayBuffer) -> ReplayBuffer:
        """The same data opened read-only (only called when :attr:`supports_read_only`)."""
        buffer.store.flush()
        return ReplayBuffer(buffer.root, backend=self.name, read_only=True)

    def new_store(self) -> Any:
        """A fresh, empty destination for ``save_to_store(store, backend=name)`` and
        ``ReplayBuffer(store, backend=name)`` (a dict, a zarr store, a file path...).  Raise
        ``NotImplementedError`` (the default) to skip the save tests."""
        raise NotImplementedError

    #: False for a persistent backend whose kill safety is best effort (HDF5): a kill trial then also
    #: passes when the store refuses to open (the damage is reported, never read as data); a store
    #: that opens must still hold exactly the committed episodes, bit-exact
    kill_safe: bool = True
    #: kill trials per kind in :class:`~replaybuf_core.testing.conformance.CrashConformance`
    #: (None: the suite's default); a harness whose every request is slow (a network store) runs fewer
    crash_trials: int | None = None
    #: hypothesis examples of the state machine (None: its default, 25)
    state_machine_examples: int | None = None

    def crash_path(self) -> Any:
        """A fresh path (not yet existing) where this persistent backend creates a store that other
        *processes* open by path — ``ReplayBuffer(path)`` must pick this backend for it (a ``.h5``
        file, a directory...).  The kill trials of
        :class:`~replaybuf_core.testing.conformance.CrashConformance` run there.  Return None (the
        default) for a backend that does not persist: those trials skip."""
        return None

    def remove_group(self, buffer: ReplayBuffer, group: str) -> Any:
        """Delete the ``data`` or ``meta`` group from the buffer's root (to test that opening such a
        store raises CorruptStoreError).  Raise ``NotImplementedError`` (the default) to skip those
        tests."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def filled(harness: BackendHarness, lengths=(3, 5, 2), strings: bool = False):
    """A buffer from ``harness.make_empty()`` holding episodes of ``lengths`` (``make_episode(n, seed=i)``);
    returns (buffer, episodes)."""
    buf = harness.make_empty()
    eps = [make_episode(n, seed=i, strings=strings) for i, n in enumerate(lengths)]
    for ep in eps:
        buf.add_episode(ep)
    return buf, eps


def has_capability(buffer: ReplayBuffer, cap: str) -> bool:
    """Whether ``buffer``'s backend declares ``cap`` (``replaybuf_core.protocol.CAP_*``)."""
    return cap in buffer.store.capabilities
