"""Running a stream of small tasks on a Dask cluster, and what a worker keeps open between them.

:class:`TaskWindow` submits ``fn(job)`` for each job of a (possibly lazy, possibly huge) iterable,
keeping at most :data:`IN_FLIGHT_PER_WORKER` tasks per worker in flight: the scheduler holds a
window, not millions of tasks, and work done first is the work at the start of the plan (so a
committed prefix grows from the start).  Results come back as tasks complete, in any order.

Stopping: leaving the ``with`` block with an error (a task's, the caller's, Ctrl-C) sets a
``distributed.Event`` every task checks before it starts, so the tasks not yet started do nothing,
and waits for the running ones (up to :data:`STOP_TIMEOUT`, or :data:`INTERRUPT_TIMEOUT` after
Ctrl-C, and never once no worker is left), so none writes into what the caller removes next.

:func:`worker_resource` is for the tasks: the stores and sources they open, kept per operation
(a token) in the worker process and closed once newer operations have replaced them.
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .clients import distributed_module

__all__ = ["TaskWindow", "worker_resource", "stopped", "IN_FLIGHT_PER_WORKER"]

logger = logging.getLogger(__name__)

#: Tasks submitted ahead per worker (the rest wait on the client).
IN_FLIGHT_PER_WORKER = 4
#: Operations whose resources a worker keeps open (older ones are closed).
KEPT_OPERATIONS = 4
#: Seconds to wait for running tasks when a window is stopped by an error ...
STOP_TIMEOUT = 120
#: ... and by an interrupt (Ctrl-C, which a local cluster's workers get too).
INTERRUPT_TIMEOUT = 10
#: Seconds a window waits for a cluster without workers to get one before it gives up ...
WORKER_WAIT = 60
#: ... and, while no task completes, between looks at whether the cluster still has a worker.
WORKER_CHECK = 5

_resources: dict[str, dict[str, Any]] = {}  # in each worker process: token -> name -> value (oldest first)


def worker_resource(token: str, name: str, make: Callable[[], Any]) -> Any:
    """In a worker process: ``make()``'s value for ``name`` in the operation ``token``, made at the
    first task of that operation that asks and kept for its later tasks.  The resources of all but
    the :data:`KEPT_OPERATIONS` newest operations are closed (their ``close()``, errors logged)."""
    kept = _resources.get(token)
    if kept is None:
        kept = _resources[token] = {}
        while len(_resources) > KEPT_OPERATIONS:
            old = _resources.pop(next(iter(_resources)))
            for value in old.values():
                close = getattr(value, "close", None)
                try:
                    if callable(close):
                        close()
                except Exception as exc:  # noqa: BLE001 - a stale handle: the new operation goes on
                    logger.warning("closing %r of an earlier operation failed: %s", value, exc)
    if name not in kept:
        kept[name] = make()
    return kept[name]


_task = threading.local()  # in a worker thread: the abort event's name of the task it runs


def stopped() -> bool:
    """In a task of a :class:`TaskWindow`: whether the window has been stopped (an error, Ctrl-C) since
    the task started.  Tasks check it right before they write, so a task still running when the
    caller removes what it builds does not write into it afterwards."""
    name = getattr(_task, "abort", None)
    return name is not None and distributed_module().Event(name).is_set()


def _run(fn: Callable[[Any], Any], abort: str, job: Any) -> tuple[bool, Any]:
    """A task: ``(False, None)`` when the window was stopped before it started, else ``(True, fn(job))``."""
    if distributed_module().Event(abort).is_set():
        return False, None
    _task.abort = abort
    try:
        return True, fn(job)
    finally:
        _task.abort = None


class TaskWindow:
    """``with TaskWindow(client, fn, jobs, name) as results: for job, result in results: ...``

    ``fn`` runs on the workers (it must be importable there: a module-level function); ``jobs`` is
    iterated lazily, ``window`` (default :data:`IN_FLIGHT_PER_WORKER` × workers) at a time.  ``name``
    prefixes the task keys (what the Dask dashboard shows).  A task's error is raised by the
    iteration; see the module docstring for what leaving the block with an error does.

    Raises:
        TimeoutError: the cluster has no worker and gets none within :data:`WORKER_WAIT` seconds
            (nothing is submitted); from the iteration, the same once every worker has left and none
            joins within :data:`WORKER_WAIT` seconds (its tasks would wait forever).
        RuntimeError: (from the iteration) a task whose workers kept dying (Dask's ``KilledWorker``),
            naming the task.
    """

    def __init__(self, client: Any, fn: Callable[[Any], Any], jobs: Iterable[Any], name: str,
                 window: int | None = None):
        self._client, self._fn, self._jobs = client, fn, iter(jobs)
        self._token = uuid.uuid4().hex
        self._abort = f"replaybuf-abort-{self._token}"
        self._name = name
        self._need_a_worker()
        n_workers = max(1, len(client.scheduler_info().get("workers", {})))
        self.n_workers = n_workers
        self._window = window or IN_FLIGHT_PER_WORKER * n_workers
        self._futures: dict[Any, Any] = {}  # future -> job, for the tasks not yet consumed
        self._count = itertools.count()

    def __enter__(self) -> Iterator[tuple[Any, Any]]:
        return self._results()

    def _submit(self, n: int) -> list:
        new = []
        for job in itertools.islice(self._jobs, n):
            fut = self._client.submit(_run, self._fn, self._abort, job, pure=False,
                                      key=f"{self._name}-{next(self._count)}-{self._token}")
            self._futures[fut] = job
            new.append(fut)
        return new

    def _need_a_worker(self) -> None:
        """Return when the cluster has a worker, or gets one within :data:`WORKER_WAIT` seconds;
        else TimeoutError naming the cluster (its tasks would wait forever)."""
        if self._client.scheduler_info().get("workers"):
            return
        try:
            self._client.wait_for_workers(1, timeout=WORKER_WAIT)
        except TimeoutError:
            address = getattr(getattr(self._client, "scheduler", None), "address", "?")
            raise TimeoutError(f"the Dask cluster at {address} has no workers (waited {WORKER_WAIT} s for one): "
                               f"start some with `dask worker {address}`, or use --workers N for a local "
                               "cluster") from None

    def _completed(self) -> Iterator[Any]:
        """The submitted futures as they complete, each followed by the submission of the next job;
        while none completes, every :data:`WORKER_CHECK` seconds :meth:`_need_a_worker`."""
        wait = distributed_module().wait
        pending = set(self._submit(self._window))
        while pending:
            try:
                done, pending = wait(pending, timeout=WORKER_CHECK, return_when="FIRST_COMPLETED")
            except TimeoutError:
                self._need_a_worker()
                continue
            for fut in done:
                pending.update(self._submit(1))
                yield fut

    def _results(self) -> Iterator[tuple[Any, Any]]:
        for fut in self._completed():
            try:
                ran, result = fut.result()  # a task's error is raised here
            except distributed_module().KilledWorker as exc:
                raise RuntimeError(f"{self._name}: a task ({fut.key}) took down every worker that ran it (Dask's "
                                   f"KilledWorker: {exc}); a worker process dies on it — out of memory, or a crash "
                                   "in a decoder — so the work stops here") from exc
            job = self._futures.pop(fut)  # done: its result is released on the cluster
            if ran:
                yield job, result

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            return
        import time

        distributed = distributed_module()
        # Ctrl-C reaches a local cluster's workers too (one process group): their tasks then never
        # finish, so an interrupt waits a short while only, and no wait outlives the workers.
        patience = INTERRUPT_TIMEOUT if not issubclass(kind, Exception) else STOP_TIMEOUT
        try:
            distributed.Event(self._abort, client=self._client).set()
            deadline = time.monotonic() + patience
            futures = list(self._futures)
            while time.monotonic() < deadline:
                futures = [f for f in futures if not f.done()]
                if not futures or not self._client.scheduler_info().get("workers"):
                    break  # all stopped, or no worker left to finish them
                time.sleep(0.1)
            if futures:
                logger.warning("stopping %s: %d task(s) did not stop; they are cancelled", self._name, len(futures))
                self._client.cancel(futures)
        except Exception as err:  # noqa: BLE001 - best effort: the original error is what propagates
            logger.warning("stopping the tasks of %s: %r", self._name, err)
