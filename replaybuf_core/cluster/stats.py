"""Statistics on a Dask cluster: the blocks of :func:`~replaybuf_core.stats.summaries.plan_blocks`, one task
each, on workers that open the store read-only at the same path or URL.

The result is :func:`~replaybuf_core.stats.summaries.summarize`'s bit for bit: each task summarises exactly
the blocks the serial pass would, frame histograms and sketch counts are integers (their sums do not
depend on the order), and the client merges the segment moments of all blocks in block order with
the same :func:`~replaybuf_core.stats.summaries.finish`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from replaybuf_core.stats.summaries import KeySummary, finish, plan_blocks, summarize_blocks

from .tasks import TaskWindow, worker_resource

__all__ = ["summarize_on_cluster", "cluster_summarizer"]


def _summarize_task(job: tuple) -> tuple[dict, dict]:
    _, token, open_read_only, location, storage_options, backend, block, spec = job  # (block number, ...)
    rb = worker_resource(token, "buffer", lambda: open_read_only(
        location, backend=backend, storage_options=storage_options))
    out = {block[0]: KeySummary(*spec)}
    parts = summarize_blocks(rb, [block], out)
    return {k: (s.hist if s.hist is not None else s.sketch) for k, s in out.items()}, parts


def summarize_on_cluster(client: Any, location: str, buffer: Any, keys: Sequence[str], first: int, stop: int, *,
                         storage_options: dict | None = None, backend: str | None = None) -> dict[str, KeySummary]:
    """:func:`~replaybuf_core.stats.summaries.summarize` of ``buffer`` (open at ``location``: a path or URL every
    worker of ``client``'s cluster reaches) with one task per block.  Each worker opens the store once,
    read-only, with ``type(buffer).create_from_path`` (the buffer's own class: this package sits below
    the store and does not import it).

    Raises what a task raises (an unreadable chunk, named by the backend).
    """
    out, blocks = plan_blocks(buffer, keys, first, stop)
    if not blocks:
        finish(out, {})
        return out
    token = uuid.uuid4().hex
    specs = {k: (s.kind, s.shape, s.exact) for k, s in out.items()}
    opener = type(buffer).create_from_path
    jobs = ((i, token, opener, location, storage_options, backend, block, specs[block[0]])
            for i, block in enumerate(blocks))
    done: dict[int, dict] = {}
    with TaskWindow(client, _summarize_task, jobs, "replaybuf-stats") as results:
        for job, (counts, task_parts) in results:
            for key, c in counts.items():
                if out[key].hist is not None:
                    out[key].hist += c
                else:
                    out[key].sketch.merge(c)
            done[job[0]] = task_parts
    parts: dict[str, list] = {k: [] for k in out}
    for i in sorted(done):  # in block order: the segments of an episode stay in order
        for key, p in done[i].items():
            parts[key].extend(p)
    finish(out, parts)
    return out


def cluster_summarizer(client: Any, location: str, storage_options: dict | None = None, backend: str | None = None):
    """A ``summarize(buffer, keys, first, stop)`` that runs on ``client``'s cluster (for
    :func:`~replaybuf_core.store.stored_stats.stats_of`)."""

    def run(buffer: Any, keys: Sequence[str], first: int, stop: int) -> dict[str, KeySummary]:
        return summarize_on_cluster(client, location, buffer, keys, first, stop, storage_options=storage_options,
                                    backend=backend)

    return run
