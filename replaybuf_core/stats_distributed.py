"""Statistics on a Dask cluster: the blocks of :func:`~replaybuf_core.stats.plan_blocks`, one task
each, on workers that open the store read-only at the same path or URL.

The result is :func:`~replaybuf_core.stats.summarize`'s bit for bit: each task summarises exactly
the blocks the serial pass would, frame histograms and sketch counts are integers (their sums do not
depend on the order), and the client merges the segment moments of all blocks in block order with
the same :func:`~replaybuf_core.stats.finish`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from .stats import KeySummary, finish, plan_blocks, summarize_blocks

__all__ = ["summarize_on_cluster", "cluster_summarizer"]

_open: dict[str, Any] = {}  # in each worker: the buffer of the current pass


def _summarize_task(token: str, location: str, storage_options: dict | None, backend: str | None, jobs: list,
                    empty: dict[str, tuple[str, tuple, bool]]) -> tuple[dict, dict]:
    from .buffer import ReplayBuffer

    for name in [n for n in _open if n != token]:
        _open.pop(name).close()
    rb = _open.get(token)
    if rb is None:
        rb = _open[token] = ReplayBuffer.create_from_path(location, backend=backend, storage_options=storage_options)
    out = {key: KeySummary(*spec) for key, spec in empty.items()}
    parts = summarize_blocks(rb, jobs, out)
    return {k: (s.hist if s.hist is not None else s.sketch) for k, s in out.items()}, parts


def summarize_on_cluster(client: Any, location: str, buffer: Any, keys: Sequence[str], first: int, stop: int, *,
                         storage_options: dict | None = None, backend: str | None = None) -> dict[str, KeySummary]:
    """:func:`~replaybuf_core.stats.summarize` of ``buffer`` (open at ``location``: a path or URL every
    worker of ``client``'s cluster reaches) with one task per block.

    Raises what a task raises (an unreadable chunk, named by the backend).
    """
    out, jobs = plan_blocks(buffer, keys, first, stop)
    if not jobs:
        finish(out, {})
        return out
    token = uuid.uuid4().hex
    specs = {k: (s.kind, s.shape, s.exact) for k, s in out.items()}
    futures = [client.submit(_summarize_task, token, location, storage_options, backend, [job],
                             {job[0]: specs[job[0]]}, pure=False, key=f"replaybuf-stats-{i}-{token}")
               for i, job in enumerate(jobs)]
    parts: dict[str, list] = {k: [] for k in out}
    try:
        for fut in futures:  # in block order: the segments of an episode stay in order
            counts, task_parts = fut.result()
            for key, c in counts.items():
                if out[key].hist is not None:
                    out[key].hist += c
                else:
                    out[key].sketch.merge(c)
                parts[key].extend(task_parts.get(key, []))
    except BaseException:
        client.cancel(futures)
        raise
    finish(out, parts)
    return out


def cluster_summarizer(client: Any, location: str, storage_options: dict | None = None, backend: str | None = None):
    """A ``summarize(buffer, keys, first, stop)`` that runs on ``client``'s cluster (for
    :func:`~replaybuf_core.stats_store.stats_of`)."""

    def run(buffer: Any, keys: Sequence[str], first: int, stop: int) -> dict[str, KeySummary]:
        return summarize_on_cluster(client, location, buffer, keys, first, stop, storage_options=storage_options,
                                    backend=backend)

    return run
