"""Dask clusters for the work that fans out (``replaybuf import --workers N`` / ``--scheduler ADDRESS``).

``dask.distributed`` is an optional extra (``pip install 'replaybuf[dask]'``), imported lazily.  A
local cluster is ``distributed.LocalCluster`` with ``N`` worker processes of one thread each, bound to
127.0.0.1, without a dashboard; ``--scheduler`` connects to an existing cluster instead (its workers
need replaybuf installed and the source and destination reachable at the same paths or URLs).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from replaybuf_core.interrupts import deferred_sigint

logger = logging.getLogger(__name__)

__all__ = ["distributed_module", "cluster_client", "add_cluster_arguments", "client_for"]


def distributed_module() -> Any:
    """``distributed``, or ImportError naming the extra that installs it."""
    try:
        import distributed
    except ImportError as exc:
        raise ImportError("running on Dask needs dask.distributed: pip install 'replaybuf[dask]'") from exc
    return distributed


CONNECT_TIMEOUT = 30  # seconds, handshake included


def _connect(distributed: Any, scheduler: str) -> Any:
    """``distributed.Client(scheduler)``, given up after :data:`CONNECT_TIMEOUT` s even when a server of
    another protocol accepts the connection and never answers (the client's own timeout then does
    not fire); the connecting thread is a daemon, so a hung attempt does not hold the process."""
    import threading

    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = distributed.Client(scheduler, timeout="10s")
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=connect, name="replaybuf-dask-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT)
    if thread.is_alive():
        raise OSError(f"no Dask scheduler answered within {CONNECT_TIMEOUT} s (is it the scheduler's address?)")
    if "error" in box:
        raise box["error"]
    return box["client"]


def _is_cancel_before_start(record: logging.LogRecord) -> bool:
    """Whether ``record`` is tornado's report of ``distributed.utils.sync``'s ``cancel`` raising
    NameError: a Ctrl-C that lands after ``sync`` scheduled its coroutine but before the coroutine
    assigned its ``future`` makes the loop run ``cancel`` on the unassigned name (distributed
    2026.8; nothing was started, so nothing is left to cancel)."""
    error = record.exc_info[1] if record.exc_info else None
    if not isinstance(error, NameError) or "future" not in str(error):
        return False
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    code = frame.tb_frame.f_code if frame is not None else None
    return code is not None and code.co_name == "cancel" and "distributed" in code.co_filename


class _CancelBeforeStart(logging.Filter):
    """Drops :func:`_is_cancel_before_start` records, so an interrupted command says one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _is_cancel_before_start(record)


def _ignore_cancel_before_start() -> None:
    """Installs :class:`_CancelBeforeStart` on tornado's application logger, once."""
    app_log = logging.getLogger("tornado.application")
    if not any(isinstance(f, _CancelBeforeStart) for f in app_log.filters):
        app_log.addFilter(_CancelBeforeStart())


@contextmanager
def cluster_client(workers: int | None = None, scheduler: str | None = None) -> Iterator[Any]:
    """A ``distributed.Client``: on a new local cluster of ``workers`` processes, or connected to the
    scheduler at ``scheduler`` (``tcp://host:port``); the local cluster is closed on exit.

    Raises:
        ValueError: both or neither of ``workers`` and ``scheduler``; ``workers`` < 1; a malformed
            ``scheduler`` address.
        ImportError: dask.distributed is not installed (names the extra).
        OSError: the scheduler cannot be reached (named).
    """
    if (workers is None) == (scheduler is None):
        raise ValueError("give either workers (a local cluster) or scheduler (an existing cluster's address)")
    distributed = distributed_module()

    logging.getLogger("distributed").setLevel(logging.WARNING)  # no lines per worker started or closed
    _ignore_cancel_before_start()
    if scheduler is not None:
        try:
            client = _connect(distributed, scheduler)
        except (OSError, TimeoutError) as exc:
            raise OSError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from exc
        except MemoryError as exc:  # a server of another protocol: its bytes read as a huge frame length
            raise OSError(f"{scheduler} answered, but not as a Dask scheduler (is it the scheduler's address?)") from exc
        except ValueError as exc:  # distributed's own words name neither the option nor the form
            raise ValueError(f"scheduler {scheduler!r} is not a Dask scheduler address (tcp://host:port): "
                             f"{exc}") from exc
        if not client.scheduler_info().get("workers"):
            logger.warning("the Dask cluster at %s has no workers yet: its tasks wait until one joins "
                           "(start some with `dask worker %s`)", scheduler, scheduler)
        try:
            yield client
        finally:
            client.close()
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    import dask

    # worker processes of one thread each (the codecs bring their own threads), no dashboard; each
    # has a nanny, which starts a new worker when one is killed.  Dask starts its workers with
    # MALLOC_TRIM_THRESHOLD_=65536, which makes our encodes 1.8x slower (glibc returns and refaults
    # the pages of every frame buffer): our workers keep glibc's default.
    # Each worker's codec pool gets its share of the cores (REPLAYBUF_CODEC_THREADS), not one
    # thread per core each.  Worker logs below CRITICAL are silenced: a failed task's error reaches
    # the client, which reports it once (not again as the worker's "Compute Failed" traceback).
    environ = {k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items()
               if k != "MALLOC_TRIM_THRESHOLD_"}
    environ["REPLAYBUF_CODEC_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    # The scheduler's HTTP server (health, metrics; no dashboard) takes a free port of 127.0.0.1, not
    # 8787, which another cluster may hold.
    # Worker processes ignore Ctrl-C (worker_setup): the client, in the same process group, stops
    # the command and closes the cluster, and says so once — not a traceback from every worker.
    options = dict(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                   silence_logs=logging.CRITICAL, preload=["replaybuf_core.cluster.worker_setup"],
                   scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"})
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}), ExitStack() as stack:
        # A Ctrl-C while the cluster starts is taken once it has started (then it is closed whole:
        # an interrupted start left "Nanny failed to start" and a traceback from every worker)
        with deferred_sigint(), _children_start_deaf_to_sigint():
            cluster = stack.enter_context(distributed.LocalCluster(**options))
            client = stack.enter_context(distributed.Client(cluster))
        yield client


@contextmanager
def _children_start_deaf_to_sigint() -> Iterator[None]:
    """Block SIGINT in this (the main) thread for the block: the threads started meanwhile (the
    cluster's event loop and the threads it starts worker processes from, a restarted worker's
    too) inherit the mask, and so do the worker processes: a Ctrl-C reaching the process group
    while a worker imports stays pending there until its preload ignores SIGINT
    (:mod:`~replaybuf_core.cluster.worker_setup`).  A Ctrl-C meant for this process is delivered
    when the block ends."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    from multiprocessing import resource_tracker

    # CPython starts its resource tracker the same way (bpo-33613) and unblocks SIGINT after: started
    # first, it leaves the mask alone
    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def add_cluster_arguments(parser: Any, what: str) -> None:
    """Add ``--workers N`` / ``--scheduler ADDRESS`` (mutually exclusive) to an argparse parser;
    ``what`` says what runs there, for the help."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=None, metavar="N",
                       help=f"{what} on a local Dask cluster of N worker processes (pip install 'replaybuf[dask]'); "
                            "the result is the serial one's, bit for bit")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help=f"{what} on the Dask cluster whose scheduler is at ADDRESS (tcp://host:port); its "
                            "workers must reach the same paths or URLs")


@contextmanager
def client_for(args: Any) -> Iterator[Any]:
    """The client of parsed ``--workers`` / ``--scheduler`` arguments, or None when neither is given.

    Raises:
        ValueError: ``--workers`` below 1.
    """
    if args.workers is None and args.scheduler is None:
        yield None
        return
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")
    with cluster_client(args.workers, args.scheduler) as client:
        yield client
