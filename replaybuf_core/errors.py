"""The project's own exception classes.

Everything else raises the built-in exception that fits (DESIGN.md conventions): ``ValueError`` for bad
values or shapes, ``TypeError`` for bad types, ``KeyError`` for missing keys, ``IndexError`` for bad
episode indices, ``RuntimeError`` for an operation the backend cannot do.  The classes below subclass
the matching built-in so ``except ValueError`` keeps working for callers that do not know them.
"""

from __future__ import annotations


class ReplayBufferError(Exception):
    """Base class of every exception defined by replaybuf."""


class CorruptStoreError(ReplayBufferError, ValueError):
    """A store's layout breaks the replay-buffer rules (missing group, ``episode_ends`` not int64 /
    negative / decreasing, a data array shorter than ``episode_ends[-1]``)."""


class ReadOnlyError(ReplayBufferError, RuntimeError):
    """A write was attempted on a buffer opened read-only."""


class CapabilityError(ReplayBufferError, RuntimeError):
    """The backend lacks the capability an operation needs (e.g. chunk queries on the NumPy backend)."""


class BackendNotFoundError(ReplayBufferError, ValueError):
    """No installed backend has the requested name or can open the object handed in."""


class FormatNotFoundError(ReplayBufferError, ValueError):
    """No installed import format has the requested name or recognises the source handed in."""


class DamagedSourceError(ReplayBufferError, ValueError):
    """A source a format recognises by its signature (an HDF5 file's magic bytes, say) but cannot
    read: truncated or damaged.  ``guess_format`` raises it instead of "no format recognises it"."""


class StoreLockedError(ReplayBufferError, RuntimeError):
    """Another process holds the store's writer lock."""


class EmptyBufferError(ReplayBufferError, ValueError, IndexError):
    """An operation needs at least one episode and the buffer has none (``drop_episode`` /
    ``pop_episode``).  A ``ValueError`` as diffusion_policy's ``ReplayBuffer`` documents, and an
    ``IndexError`` as an empty sequence's ``pop()`` raises."""
