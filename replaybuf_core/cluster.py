"""Dask clusters for the work that fans out (``replaybuf import --workers N`` / ``--scheduler ADDRESS``).

``dask.distributed`` is an optional extra (``pip install 'replaybuf[dask]'``), imported lazily.  A
local cluster is ``distributed.LocalCluster`` with ``N`` worker processes of one thread each, bound to
127.0.0.1, without a dashboard; ``--scheduler`` connects to an existing cluster instead (its workers
need replaybuf installed and the source and destination reachable at the same paths or URLs).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["distributed_module", "cluster_client"]


def distributed_module() -> Any:
    """``distributed``, or ImportError naming the extra that installs it."""
    try:
        import distributed
    except ImportError as exc:
        raise ImportError("running on Dask needs dask.distributed: pip install 'replaybuf[dask]'") from exc
    return distributed


@contextmanager
def cluster_client(workers: int | None = None, scheduler: str | None = None) -> Iterator[Any]:
    """A ``distributed.Client``: on a new local cluster of ``workers`` processes, or connected to the
    scheduler at ``scheduler`` (``tcp://host:port``); the local cluster is closed on exit.

    Raises:
        ValueError: both or neither of ``workers`` and ``scheduler``; ``workers`` < 1.
        ImportError: dask.distributed is not installed (names the extra).
        OSError: the scheduler cannot be reached (named).
    """
    if (workers is None) == (scheduler is None):
        raise ValueError("give either workers (a local cluster) or scheduler (an existing cluster's address)")
    distributed = distributed_module()
    import logging

    logging.getLogger("distributed").setLevel(logging.WARNING)  # no lines per worker started or closed
    if scheduler is not None:
        try:
            client = distributed.Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise OSError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from exc
        try:
            yield client
        finally:
            client.close()
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    # worker processes of one thread each (the codecs bring their own threads), no dashboard; each
    # has a nanny, which starts a new worker when one is killed
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=40) as cluster, \
            distributed.Client(cluster) as client:
        yield client
