"""Copying an array's rows on a Dask cluster: what ``copy``, ``save_to_path`` and ``rechunk`` do with
``client=`` (:func:`~replaybuf_core.store.copying.copy_array` hands its rows here).

The client creates the destination array (chunks, codec, shards) and cuts its rows into spans of
whole destination objects (shard, else chunk, along axis 0; :func:`~replaybuf_core.store.copying.block_rows`,
the serial copy's own blocks), so no two tasks ever write the same object.  Each task opens the source
and the destination by their :class:`Endpoint` (a path or URL both reach), reads its rows and writes
them with one ``write``.  A whole object written at once has the same bytes whoever writes it, so the
result is the serial copy's bit for bit; a task rerun after its worker died rewrites the same bytes.

The destination must take many writers: a zarr store (every object its own file or object).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from replaybuf_core import registry

__all__ = ["Endpoint", "endpoint_of", "check_client", "check_cluster_destination", "copy_rows_on_cluster"]


@dataclass(frozen=True)
class Endpoint:
    """A store as a worker process opens it: backend name, path or URL, ``storage_options``."""

    backend: str
    location: str
    storage_options: dict | None = None

    def open(self, read_only: bool) -> Any:
        """The store's backend object (no writer lock: the client holds the store's)."""
        options = {"storage_options": self.storage_options} if self.storage_options else {}
        return registry.get_backend(self.backend).open(self.location, read_only=read_only, **options)


def endpoint_of(store: Any) -> Endpoint:
    """The :class:`Endpoint` of an open backend object (its optional ``location()`` verb).

    Raises:
        ValueError: a store only this process reaches (memory, a ``.zip``, a backend without the
            optional ``location()`` verb such as hdf5), named by its backend.
    """
    fn = getattr(store, "location", None)
    where = fn() if callable(fn) else None
    if where is None:
        raise ValueError(f"this {store.name} store has no location Dask workers can open it by (it is in memory "
                         f"or a .zip, or the {store.name} backend takes one process): copy it to a zarr directory "
                         "or an object-storage URL first, or work without a cluster")
    location, options = where
    return Endpoint(store.name, location, options)


def check_client(client: Any) -> None:
    """Refuse a ``client=`` that is not a ``distributed.Client`` (an address string, say) before
    anything is written.

    Raises:
        TypeError: naming what was given and how to make a client.
    """
    if not callable(getattr(client, "submit", None)) or not callable(getattr(client, "scheduler_info", None)):
        raise TypeError(f"client must be a distributed.Client, got {type(client).__name__} {client!r:.80}: make one "
                        "with distributed.Client(address) or replaybuf_core.cluster.clients.cluster_client(workers=N)")


def check_cluster_destination(backend: str, what: str) -> None:
    """Refuse a destination backend that takes one writer (everything but zarr).

    Raises:
        ValueError: naming the backend and ``what`` was asked (e.g. "an import").
    """
    if backend != "zarr":
        raise ValueError(f"{what} on a Dask cluster writes zarr stores only (its workers each write their own "
                         f"objects; a {backend} store takes one writer): use the zarr backend, or work without "
                         "a cluster (no client=; CLI: no --workers/--scheduler)")


@dataclass(frozen=True)
class _CopySpan:
    token: str
    src: Endpoint
    src_array: tuple[str, str]  # (group, name)
    dst: Endpoint
    dst_array: tuple[str, str]
    start: int
    stop: int


def _copy_span(job: _CopySpan) -> int:
    """A task: rows ``[start, stop)`` from the source array into the destination array."""
    from .tasks import stopped, worker_resource

    src = worker_resource(job.token, "src", lambda: job.src.open(read_only=True))
    dst = worker_resource(job.token, "dst", lambda: job.dst.open(read_only=False))
    values = src.read(*job.src_array, job.start, job.stop)
    if stopped():  # the copy failed or was interrupted meanwhile: its destination may be gone
        return 0
    dst.write(*job.dst_array, job.start, values)
    dst.flush()
    return job.stop - job.start


def copy_rows_on_cluster(client: Any, src: Any, src_array: tuple[str, str], dst: Any, dst_array: tuple[str, str],
                         n_rows: int, step: int) -> None:
    """Copy rows ``[0, n_rows)`` of ``src_array`` (``(group, name)``) of the backend object ``src``
    into the existing ``dst_array`` of ``dst``, one task per ``step`` rows on ``client``'s cluster.

    ``step`` must be a multiple of the destination's object rows (see the module docstring).

    Raises:
        ValueError: a store the workers cannot reach (:func:`endpoint_of`), a destination that takes
            one writer (:func:`check_cluster_destination`).
        what a task raised (an unreadable chunk, named by the backend), once the other tasks stopped.
    """
    from .tasks import TaskWindow

    a, b = endpoint_of(src), endpoint_of(dst)
    check_cluster_destination(b.backend, "a copy")
    dst.flush()  # the array's metadata is where the workers look for it
    token = uuid.uuid4().hex
    jobs = (_CopySpan(token, a, src_array, b, dst_array, start, min(n_rows, start + step))
            for start in range(0, n_rows, step))
    with TaskWindow(client, _copy_span, jobs, f"replaybuf-copy-{dst_array[1]}") as results:
        for _ in results:
            pass
