"""The import on a Dask cluster: one task per shard-aligned span of rows of one key.

The plan (issue "Beyond one machine"):

1. **Sizes first.**  The client knows every chosen episode's length, hence the global rows of each
   (``meta/episode_ends`` to be), and creates the destination's arrays at their final length, as the
   serial import does (:func:`~replaybuf_core.importing.setup.set_up`: same chunks, codecs,
   shards and attributes).
2. **Spans.**  Each key's rows are cut into spans of whole stored objects (its shard, else its chunk,
   along axis 0) of about :data:`SPAN_BYTES` of source values, so no two tasks ever write the same
   object.  A task reads the rows of its span from the source (random access:
   :meth:`~replaybuf_core.source.Source.read_rows`, episode by episode), converts them as
   the serial import does (float frames proven uint8, native byte order), writes them with one
   ``write`` and reads them back to check them (bit for bit; lossy keys by squared error).
3. **The commit** is the client's alone: as spans complete, the episodes whose rows are all written
   in every key are appended to ``meta/episode_ends`` (at most every :data:`COMMIT_INTERVAL`
   seconds), so a long import exposes committed prefixes as it goes and a store whose client died
   opens with its committed prefix only.

Tasks are idempotent: a retried task (its worker was killed; the scheduler runs it again elsewhere)
writes the same objects with the same bytes.  A task that fails (a source episode that cannot be
read) fails the import with its error, which names the episode; the tasks not yet started are told
to stop and the running ones are waited for before the build is removed
(:class:`~replaybuf_core.cluster.tasks.TaskWindow`).
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replaybuf_core import registry
from replaybuf_core.cluster.tasks import TaskWindow, stopped, worker_resource
from replaybuf_core.layout import image_bytes
from replaybuf_core.stats.kernels import squared_error_sum

from .arguments import open_format
from .check import Checker, psnr_db, same_bits
from .plan import KeyPlan
from .resume import Progress, write_progress
from .uint8_exact import as_uint8_if_lossless, first_bad_value

__all__ = ["SpanJob", "plan_spans", "span_rows", "first_span", "write_span", "stream_on_cluster", "SPAN_BYTES"]

#: Source bytes of one task's span (at least one stored object of its key).
SPAN_BYTES = 32 * 2**20
#: Seconds between commits of ``meta/episode_ends`` while spans complete.
COMMIT_INTERVAL = 0.25


@dataclass
class SpanJob:
    """One task: rows ``[start, stop)`` of ``key``; ``episodes`` lists ``(destination episode,
    source index, first row of the episode, its length)`` of every episode overlapping the span."""

    import_id: str
    open_args: tuple[str, str, dict]  # (format name, source path, format options)
    dst: str
    backend: str
    storage_options: dict | None
    key: str
    start: int
    stop: int
    episodes: list[tuple[int, int, int, int]]  # (dst episode, source index, first row, length)
    convert: bool
    dtype: str
    lossy: bool


@dataclass
class SpanResult:
    """What a worker reports for rows ``[start, stop)`` of ``key``: the check's ``problems`` (empty: the
    rows read back as the source), the first bad row, per-episode squared error and pixel count of a
    lossy key (``episode_sse``: episode -> (SSE, values)), a lossless codec that was not, and the
    source's notes."""

    key: str
    start: int
    stop: int
    problems: list[str] = field(default_factory=list)
    first_bad: int | None = None
    episode_sse: dict[int, tuple[float, int]] = field(default_factory=dict)
    not_lossless: tuple[str, int, int, str] | None = None
    #: what the worker's source said while reading (``Source.notes``, ``Source.key_notes[key]``)
    notes: list[str] = field(default_factory=list)
    key_notes: list[str] = field(default_factory=list)


def span_rows(p: KeyPlan, span_bytes: int | None = None) -> int:
    """Rows of each span of the key planned ``p``: a multiple of its stored object's rows (shard, else
    chunk, along axis 0) of about ``span_bytes`` (default :data:`SPAN_BYTES`) of source values."""
    span_bytes = SPAN_BYTES if span_bytes is None else int(span_bytes)
    obj = int(p.shards[0]) if p.shards else int(p.chunks[0])
    row_bytes = max(1, int(np.prod(p.shape[1:], dtype=np.int64)) * np.dtype(p.src_dtype).itemsize)
    return max(1, span_bytes // (obj * row_bytes)) * obj


def first_span(p: KeyPlan, n_steps: int, from_row: int, span_bytes: int | None = None) -> int:
    """The first row of the first span of ``p``'s key holding a row at or past ``from_row`` (``n_steps``
    when none does)."""
    if from_row >= n_steps:
        return n_steps
    rows = span_rows(p, span_bytes)
    return (from_row // rows) * rows


def plan_spans(plans: dict[str, KeyPlan], n_steps: int, span_bytes: int | None = None, from_row: int = 0
               ) -> Iterator[tuple[str, int, int]]:
    """``(key, start, stop)`` of every task, made lazily: each key's rows cut at multiples of its
    stored object's rows (shard, else chunk, along axis 0), about ``span_bytes`` (default
    :data:`SPAN_BYTES`) of source values a span (:func:`span_rows`), in row order across keys (so that
    the committed prefix grows from the start).  ``from_row``: only the spans holding rows at or past
    it (an import continued: the rows before it are committed)."""

    def spans(key: str, p: KeyPlan) -> Iterator[tuple[int, str, int]]:
        rows = span_rows(p, span_bytes)
        return ((a, key, min(n_steps, a + rows)) for a in range(first_span(p, n_steps, from_row, span_bytes),
                                                                n_steps, rows))

    for a, key, b in heapq.merge(*(spans(k, p) for k, p in plans.items())):
        yield key, a, b


def _open_destination(job: SpanJob):
    options = {"storage_options": job.storage_options} if job.storage_options else {}
    return worker_resource(job.import_id, "dst", lambda: registry.get_backend(job.backend).open(
        job.dst, read_only=False, **options))


def _open_source(job: SpanJob):
    fmt, path, options = job.open_args
    return worker_resource(job.import_id, "src", lambda: open_format(registry.get_format(fmt), path, options, False))


def write_span(job: SpanJob) -> SpanResult:
    """Run one task on a worker (see the module docstring): read, convert, write, read back, compare.
    The source may hand its own encoded images to the frame codec meanwhile (an RLDS source's JPEG
    bytes: :mod:`replaybuf_core.layout.image_bytes`; the read, the write and the check are this task's).

    Raises what the source raises for an unreadable episode (named by the format), and ValueError
    for an episode that gives fewer rows than its length.
    """
    with image_bytes.session():
        return _write_span(job)


def _write_span(job: SpanJob) -> SpanResult:
    result = SpanResult(job.key, job.start, job.stop)
    source, dst = _open_source(job), _open_destination(job)
    dtype = np.dtype(job.dtype)
    pieces: list[tuple[int, np.ndarray]] = []
    wanted = [(src_index, max(job.start, first) - first, min(job.stop, first + length) - first)
              for _, src_index, first, length in job.episodes]
    try:
        values = source.read_pieces(job.key, wanted)
    except Exception:  # noqa: BLE001 - read piece by piece to name the episode that fails
        values = [_read_piece(source, job.key, piece) for piece in wanted]
    result.notes, result.key_notes = list(source.notes), list(source.key_notes.get(job.key, ()))
    for (ep, src_index, _, _), (_, lo, hi), x in zip(job.episodes, wanted, values):
        if x is None or len(x) != hi - lo:
            raise ValueError(f"{source.format_name} source {source.path}: episode {src_index}: rows [{lo}, {hi}) of "
                             f"{job.key!r} gave {0 if x is None else len(x)} rows")
        if job.convert:
            u, bad = as_uint8_if_lossless(x)
            if u is None:
                result.not_lossless = (job.key, src_index, lo + bad,
                                       f"holds {first_bad_value(x[bad])!r}, not an integer in 0..255")
                return result
            x = u
        elif x.dtype != dtype:
            x = x.astype(dtype)  # the same values in native byte order
        pieces.append((ep, x))
    values = np.concatenate([x for _, x in pieces]) if len(pieces) > 1 else pieces[0][1]
    if stopped():  # the import failed or was interrupted meanwhile: its build may be gone
        return result
    dst.write("data", job.key, job.start, values)
    dst.flush()
    stored = dst.read("data", job.key, job.start, job.stop)
    row = 0
    for ep, x in pieces:
        y = stored[row: row + len(x)]
        if job.lossy:
            e = squared_error_sum(y, x)
            result.episode_sse[ep] = (e, int(y.size))
        elif result.first_bad is None and not same_bits(x, y):
            result.first_bad = ep
            result.problems.append(f"data/{job.key}: episode {ep}: rows [{job.start + row}, "
                                   f"{job.start + row + len(x)}) differ from the source")
        row += len(x)
    return result


def _read_piece(source: Any, key: str, piece: tuple[int, int, int]) -> np.ndarray:
    index, lo, hi = piece
    try:
        return source.read_rows(index, [key], lo, hi).get(key)
    except Exception as exc:  # named here: the client sees only this task's error
        raise ValueError(f"{source.format_name} source {source.path}: episode {index}: cannot read rows "
                         f"[{lo}, {hi}) of {key!r}: {type(exc).__name__}: {exc}") from exc


class NotLossless(Exception):
    """A task found a value that keeps a key from its uint8 conversion: ``(key, episode, row, reason)``."""

    def __init__(self, key: str, episode: int, row: int, reason: str):
        super().__init__(f"data/{key}: episode {episode}, row {row}: {reason}")
        self.key, self.episode, self.row, self.reason = key, episode, row, reason


def stream_on_cluster(client: Any, source: Any, rb: Any, plans: dict[str, KeyPlan], indices: list[int],
                      n_steps: int, open_args: tuple[str, str, dict], dst: str, backend: str,
                      storage_options: dict | None, progress: bool, plan: str | None = None,
                      kept: Progress | None = None) -> tuple[Checker, list]:
    """Write every span on ``client``'s cluster and commit the episodes as their rows complete.

    ``rb`` may hold committed episodes already (an import continued, :mod:`.resume`): only the spans
    holding rows past them run; ``kept`` is the progress the stopped run recorded for them (its
    checks' findings, merged into the returned checker).  With ``plan`` (a local build), the
    progress is written into the build (:func:`~replaybuf_core.importing.resume.write_progress`)
    before each commit, so that a killed import can be continued.

    Returns the import's :class:`Checker` (filled from the tasks' checks) and the episodes' bounds
    ``(episode, start, stop)``.

    Raises:
        NotLossless: a converted key holds a value that is not an integer in 0..255 (the caller
            restarts with the key kept, as the serial import does).
        what a task raised (a source episode that cannot be read, named), after the other tasks
        were stopped.
    """
    lengths = np.asarray(source.episode_lengths, dtype=np.int64)[indices]
    ends = np.cumsum(lengths)
    firsts = ends - lengths
    bounds = [(ep, int(firsts[ep]), int(ends[ep])) for ep in range(len(indices))]
    import_id = uuid.uuid4().hex
    committed = int(rb.n_episodes)  # kept from a stopped run (0 for a new import)
    from_row = int(ends[committed - 1]) if committed else 0

    def jobs():  # made as they are submitted: a long import has millions of spans
        for key, a, b in plan_spans(plans, n_steps, from_row=from_row):
            lo = int(np.searchsorted(ends, a, side="right"))
            hi = int(np.searchsorted(firsts, b, side="left"))
            eps = [(ep, int(indices[ep]), int(firsts[ep]), int(lengths[ep])) for ep in range(lo, hi)]
            p = plans[key]
            yield SpanJob(import_id, open_args, dst, backend, storage_options, key, a, b, eps, p.converted,
                          p.dtype.str, p.lossy)

    checker = Checker(rb.store, plans)
    checker.whole, checker.pending = {}, {}  # the tasks check every row
    checks = _Checks(plans, kept)
    checker.problems.extend(checks.problems)
    checker.first_bad.update(checks.first_bad)
    prefix = {k: first_span(p, n_steps, from_row) for k, p in plans.items()}  # per key: rows written from 0 on
    ahead: dict[str, dict[int, int]] = {k: {} for k in plans}  # spans done beyond it: start -> stop
    last_commit = 0.0
    bar = None
    window = TaskWindow(client, write_span, jobs(), "replaybuf-import-span")
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_steps, unit="step", desc=f"importing on {window.n_workers} workers", initial=from_row)
    try:
        with window as results:
            for _, r in results:
                if r.not_lossless is not None:
                    raise NotLossless(*r.not_lossless)
                for problem in r.problems:  # (a span rewritten on continuing finds a kept problem again)
                    if problem not in checker.problems:
                        checker.problems.append(problem)
                for note in r.notes:  # what the workers' sources said while reading, once each
                    if note not in source.notes:
                        source.notes.append(note)
                for note in r.key_notes:
                    source.note_key(r.key, note)
                if r.first_bad is not None:
                    checker.first_bad[r.key] = min(r.first_bad, checker.first_bad.get(r.key, r.first_bad))
                checks.add(r.key, r.episode_sse)
                ahead[r.key][r.start] = r.stop
                while prefix[r.key] in ahead[r.key]:
                    prefix[r.key] = ahead[r.key].pop(prefix[r.key])
                row = min(prefix.values())
                k = int(np.searchsorted(ends, row, side="right"))
                now = time.monotonic()
                if k > committed and (now - last_commit >= COMMIT_INTERVAL or k == len(ends)):
                    checks.fold(k)
                    if plan is not None:  # first the checks of the episodes, then their commit
                        write_progress(dst, Progress(plan, max(k, checks.folded), checker.problems,
                                                     dict(checker.first_bad), checks.totals()))
                    rb._commit_episode_ends(ends[committed:k])
                    if bar is not None:
                        bar.update(int(ends[k - 1]) - (int(ends[committed - 1]) if committed else 0))
                    committed, last_commit = k, now
    finally:
        if bar is not None:
            bar.close()
    checks.fold(len(ends))
    for key, (sse, _, worst) in checks.totals().items():
        checker.sse[key] = sse
        checker.worst[key] = worst
    return checker, bounds


class _Checks:
    """The lossy keys' squared errors, per episode as the spans report them, folded into sums once
    their episodes commit (memory: the episodes in flight); starts from a stopped run's ``kept``
    (its episodes' errors are not counted again when a continued span rewrites them)."""

    def __init__(self, plans: dict[str, KeyPlan], kept: Progress | None):
        self.per_episode: dict[str, dict[int, list]] = {k: {} for k, p in plans.items() if p.lossy}
        self.sums = {k: [0.0, 0, float("inf")] for k in self.per_episode}
        self.folded, self.problems, self.first_bad = 0, [], {}
        if kept is not None:
            self.folded, self.problems, self.first_bad = kept.episodes, list(kept.problems), dict(kept.first_bad)
            for k, v in kept.sse.items():
                if k in self.sums:
                    self.sums[k] = [float(v[0]), int(v[1]), float(v[2])]

    def add(self, key: str, episode_sse: dict[int, tuple[float, int]]) -> None:
        for ep, (e, n) in episode_sse.items():
            if ep >= self.folded:
                acc = self.per_episode[key].setdefault(ep, [0.0, 0])
                acc[0] += e
                acc[1] += n

    def fold(self, k: int) -> None:
        """Add the errors of episodes ``[folded, k)`` (all their spans done) to the sums."""
        if k <= self.folded:
            return
        for key, per_episode in self.per_episode.items():
            acc = self.sums[key]
            for ep in [ep for ep in per_episode if ep < k]:
                e, n = per_episode.pop(ep)
                acc[0] += e
                acc[1] += n
                acc[2] = min(acc[2], psnr_db(e, n))
        self.folded = k

    def totals(self) -> dict[str, list[float]]:
        """Lossy key → ``[sum of squared errors, values, worst episode's PSNR (dB)]`` of the folded episodes."""
        return {k: list(v) for k, v in self.sums.items()}
