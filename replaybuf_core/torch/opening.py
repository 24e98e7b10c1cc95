"""The store behind a torch dataset, opened lazily in the process that reads.

The dataset keeps only a path (or an opener callable), its sampler arguments and — once sized — the
sampler's O(episodes) window index.  Each DataLoader worker opens its own buffer on first use and
builds its sampler on the index the main process sent it (a few bytes per episode, pickled or
inherited on fork), never on a table it rebuilds; a pickled dataset never carries an open buffer.
This replaces diffusion_policy's pattern of loading the whole store into memory in the main process
before forking workers.
"""

from __future__ import annotations

import os
from typing import Any, Callable

__all__ = ["LazyStore"]


class LazyStore:
    """Base of the datasets: ``path_or_factory`` -> a sampler opened per process.

    Subclasses implement ``_build(buffer, window_index)`` returning a sampler (anything with
    ``__len__`` and a ``window_index`` attribute) built on ``window_index`` when it is not None.

    Args:
        path_or_factory: path of a store, opened read-only with ``ReplayBuffer.create_from_path``,
            or a picklable callable with no arguments returning a buffer.
        version: read this version of the store at the path (a tag, an id, -N: see
            :mod:`replaybuf_core.store.versions`), resolved to its id here, once, so that every worker
            reads the same version even if the tag moves; :attr:`version` is its record (id, time,
            message), for a training run to log.  None: the current content.

    Raises:
        TypeError: ``path_or_factory`` neither a path nor a callable; ``version`` with a callable.
        VersionNotFoundError (a KeyError): no such version.
    """

    def __init__(self, path_or_factory: str | os.PathLike | Callable[[], Any], version: Any = None):
        if isinstance(path_or_factory, (str, os.PathLike)):
            self._path: str | None = os.fspath(path_or_factory)
            self._factory: Callable[[], Any] | None = None
        elif callable(path_or_factory):
            self._path, self._factory = None, path_or_factory
        else:
            raise TypeError(
                "path_or_factory must be a path or a callable returning a ReplayBuffer, "
                f"got {type(path_or_factory).__name__}"
            )
        #: the record of the version read (``version=``), else None
        self.version: dict | None = None
        if version is not None:
            if self._path is None:
                raise TypeError("version= needs the store's path, not an opener: open the version in the opener")
            with self._open_at(version) as rb:
                self.version = rb.version
        self._len: int | None = None
        self._window_index: Any = None
        self._sampler: Any = None
        self._pid: int | None = None

    def _build(self, buffer: Any, window_index: Any) -> Any:
        raise NotImplementedError

    def _open_at(self, version: Any) -> Any:
        from replaybuf_core.locations import is_object_url
        from replaybuf_core.store.buffer import ReplayBuffer

        path = self._path if is_object_url(self._path) else os.path.expanduser(self._path)
        return ReplayBuffer(path, version=version)

    def _open_buffer(self) -> Any:
        if self._factory is not None:
            return self._factory()
        if self.version is not None:
            return self._open_at(int(self.version["id"]))
        from replaybuf_core.store.buffer import ReplayBuffer

        return ReplayBuffer.create_from_path(self._path)

    @property
    def sampler(self) -> Any:
        """The sampler of this process, opened on first use (re-opened after a fork).

        Raises RuntimeError when the store no longer matches the window index this dataset was
        sized with (it changed underneath)."""
        pid = os.getpid()
        if self._sampler is None or self._pid != pid:
            try:
                sampler = self._build(self._open_buffer(), self._window_index)
            except ValueError as e:
                if self._window_index is None or "built for other episodes" not in str(e):
                    raise
                raise RuntimeError(f"the store changed since this dataset was sized: {e}") from None
            self._sampler, self._pid = sampler, pid
            self._len, self._window_index = len(sampler), sampler.window_index
        return self._sampler

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_sampler"] = None  # never pickle an open buffer; the window index travels
        state["_pid"] = None
        return state

    def __len__(self) -> int:
        """Number of samples.  Sized from a temporary buffer that is not kept (its window index
        is), so the main process holds no open store when workers start."""
        if self._len is None:
            if self._sampler is not None and self._pid == os.getpid():
                self._len = len(self._sampler)
            else:
                sampler = self._build(self._open_buffer(), None)
                self._len, self._window_index = len(sampler), sampler.window_index
                close = getattr(sampler.buffer, "close", None)
                if close is not None and self._factory is None:
                    close()
        return self._len

    def _source_name(self) -> str:
        return self._path if self._path is not None else getattr(self._factory, "__name__", repr(self._factory))
