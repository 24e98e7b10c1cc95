"""The only place replaybuf touches zarr-python below its public ``Array``/``Group``/``Store`` API.

zarr-python's store API is asynchronous; replaybuf's storage verbs are synchronous.  Three small
needs have no public synchronous form in every supported zarr (3.1.3 … 3.4.x), so they live here,
each with a fallback, and nothing else in replaybuf imports ``zarr.core``:

- :func:`sync` runs a store coroutine on zarr's own event loop (``zarr.core.sync.sync``; zarr runs
  its I/O on one background loop, and a second loop would fight it for the same store objects;
  :func:`start_io_loop` starts that loop whole, before a Ctrl-C can cut its start in half);
- :func:`buffer_prototype` is the CPU buffer prototype that ``Store.get`` needs
  (``zarr.buffer.default_buffer_prototype`` from zarr 3.1.5 on, ``zarr.core.buffer`` before);
- :func:`memory_store_dict` is the ``dict`` behind a ``MemoryStore`` (its ``_store_dict``), which
  the fast chunk reader reads without a coroutine per chunk.

Everything else — an array's layout, its codecs, chunk keys — is read from the store's ``zarr.json``
documents as the Zarr v3 specification defines them (:mod:`replaybuf_zarr.layout`).  When a zarr
release moves one of these three, this module is the one to change; ``tests/test_zarr_compat.py``
checks each against the installed zarr.
"""

from __future__ import annotations

from collections.abc import Awaitable, MutableMapping
from typing import Any, TypeVar

T = TypeVar("T")


def sync(coro: Awaitable[T]) -> T:
    """Run ``coro`` (a zarr store coroutine) to completion on zarr's event loop and return its result.

    Raises whatever the coroutine raises.
    """
    from zarr.core.sync import sync as _sync

    return _sync(coro)


def start_io_loop() -> None:
    """Start zarr's background event loop now, if it is not running yet, with Ctrl-C held back: zarr
    starts it on first use, and a ``KeyboardInterrupt`` between its making the loop's thread and
    starting it leaves a thread zarr's exit hook cannot join ("Exception ignored in atexit callback
    ... cannot join thread before it is started")."""
    import asyncio

    from replaybuf_core.interrupts import deferred_sigint

    with deferred_sigint():
        sync(asyncio.sleep(0))


def buffer_prototype() -> Any:
    """zarr's default (CPU) ``BufferPrototype``, as ``Store.get(key, prototype=...)`` takes it."""
    try:
        from zarr.buffer import default_buffer_prototype
    except ImportError:  # zarr < 3.1.5
        from zarr.core.buffer import default_buffer_prototype
    return default_buffer_prototype()


def memory_store_dict(store: Any) -> MutableMapping[str, Any] | None:
    """The mapping of keys to zarr ``Buffer`` objects behind a ``zarr.storage.MemoryStore``, or None
    when this zarr keeps it elsewhere (callers then take zarr-python's path)."""
    mapping = getattr(store, "_store_dict", None)
    return mapping if isinstance(mapping, MutableMapping) else None


def store_get(store: Any, key: str) -> bytes | None:
    """The bytes of object ``key`` of any zarr store (synchronously), or None when it is absent."""
    buf = sync(store.get(key, prototype=buffer_prototype()))
    return None if buf is None else buf.to_bytes()


def store_set(store: Any, key: str, data: bytes) -> None:
    """Store ``data`` as object ``key`` of any zarr store (synchronously)."""
    sync(store.set(key, buffer_prototype().buffer.from_bytes(data)))
