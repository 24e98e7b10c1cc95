"""replaybuf's built-in in-memory backend (a dict of NumPy arrays)."""

from .backend import NumpyBackend, NumpyEntrypoint

__all__ = ["NumpyBackend", "NumpyEntrypoint"]
