"""A Dask worker preload (``distributed.Nanny(preload=[__name__])``, see
:func:`replaybuf_core.cluster.clients.cluster_client`): the local cluster's worker processes share the
terminal's process group, so a Ctrl-C reaches them too — each printed a KeyboardInterrupt traceback
while the client was already stopping the command.  They ignore SIGINT: the client, which gets the
same Ctrl-C, closes the cluster and says "interrupted" once."""

from __future__ import annotations

import signal
import threading


def dask_setup(worker) -> None:  # noqa: ARG001 - Dask's preload hook; the worker is not needed
    """Ignore SIGINT in this worker process (called by Dask in the worker's main thread at start).
    A local cluster's workers start with SIGINT blocked (``cluster_client``), so a Ctrl-C during
    their start-up is pending until here: ignored, it is dropped when unblocked."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
