"""The import pipeline: any :class:`~replaybuf_core.source.Source` into a new store, the
same way for every format.

:func:`import_source` plans each key's storage (:mod:`~replaybuf_core.importing.plan`), streams the
chosen episodes in parts through :meth:`ReplayBuffer.writer` (a prefetch thread reads and decodes the
source while the writer encodes the destination on the codec pool), proves and converts float frames
to uint8 as they stream (restarting with the key kept when a value is not an integer 0..255),
verifies every stored row against the source values (:mod:`~replaybuf_core.importing.check`), records
provenance in the destination's ``data`` attributes, shows a progress bar, and builds the destination
beside its final path, moving it into place only once verified
(:func:`~replaybuf_core.store.replace.build_beside`): an error, Ctrl-C or SIGTERM leaves no half-written
output, and an existing store replaced with ``overwrite`` stays as it was until the swap.

What the destination holds besides ``data/<key>`` and ``meta/episode_ends``:

* ``meta/source_episode_index`` (int64, one per episode): the source's index of each episode;
* ``meta/episode_attrs`` (text, one JSON object per episode) when the source has per-episode
  attributes (LeRobot: tasks, per-episode statistics);
* the source's own meta arrays (diffusion-policy: every ``meta`` array but ``episode_ends``);
* ``data`` attributes: ``import`` (format, source path, options, what was dropped or skipped),
  ``conversions`` (keys stored as uint8 after the proof), ``fps``, ``source_attrs`` (the source's
  dataset-level attributes) and ``key_attrs`` (what the source said about each key).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core import registry
from replaybuf_core.cluster.copy import check_client, check_cluster_destination
from replaybuf_core.interrupts import deferred_sigint
from replaybuf_core.layout.codec_names import describe_codec
from replaybuf_core.layout import image_bytes, video_packets
from replaybuf_core.layout.frame_choice import FrameChoice, choose_frames
from replaybuf_core.layout.schema import is_frame_shape
from replaybuf_core.source import Source
from replaybuf_core.store.buffer import ReplayBuffer

from .arguments import check_destination, check_settings, open_format, parse_episodes
from .check import Checker, PassThroughMismatch, psnr_db, same_bits
from .destination import building
from .distributed import NotLossless, stream_on_cluster
from .plan import KeyPlan
from .prefetch import prefetch
from .report import ImportReport, KeyReport
from .resume import Progress, adopter, forget_progress, plan_digest, write_progress
from .setup import SHARD_RAW_BYTES, continue_build, meta_arrays, no_cache, set_up  # noqa: F401 - SHARD_RAW_BYTES: re-exported
from .uint8_exact import as_uint8_if_lossless, first_bad_value

logger = logging.getLogger(__name__)

__all__ = ["import_source", "import_dataset", "parse_episodes", "check_settings", "check_destination", "IMPORT_COMMIT_INTERVAL", "PART_BYTES"]

#: Seconds between commits while importing (see :class:`~replaybuf_core.store.writer.EpisodeWriter`).
IMPORT_COMMIT_INTERVAL = 0.25
#: Source bytes per part of an episode (all keys): long episodes stream in parts of about this size.
PART_BYTES = 16 * 2**20


class _NotLossless(Exception):
    def __init__(self, key: str, episode: int, row: int, reason: str):
        super().__init__(f"data/{key}: episode {episode}, row {row}: {reason}")
        self.key, self.episode, self.row, self.reason = key, episode, row, reason


def import_dataset(src: str | os.PathLike, dst: str | os.PathLike, format: str | None = None, *,
                   format_options: dict[str, Any] | None = None, **kwargs: Any) -> ImportReport:
    """Open ``src`` with the import format named ``format`` (guessed from the files when None) and
    :func:`import_source` it into ``dst``; ``format_options`` go to the format's ``open``, the other
    keyword arguments to :func:`import_source`.

    Raises:
        FormatNotFoundError: no installed format has that name, or none recognises ``src`` (the
            message lists the installed formats and what each needs installed).
        and what the format's ``open`` and :func:`import_source` raise.
    """
    entry = registry.get_format(format) if format is not None else registry.guess_format(src)
    source = open_format(entry, src, format_options, kwargs.get("progress", True))
    source.open_args = (entry.name, os.path.abspath(os.path.expanduser(os.fspath(src))),  # for workers (client=)
                        dict(format_options or {}))
    try:
        return import_source(source, dst, **kwargs)
    finally:
        source.close()


def import_source(
    source: Source,
    dst: str | os.PathLike,
    *,
    backend: str = "zarr",
    episodes: Any = None,
    skip_keys: Iterable[str] = (),
    keep_dtype: bool = False,
    lossy_quality: int | None = None,
    image_frames_per_shard: int | None = 256,
    frames: Any = None,
    progress: bool = True,
    overwrite: bool = False,
    drop_empty_episodes: bool = False,
    storage_options: dict[str, Any] | None = None,
    client: Any = None,
    resume: bool = True,
) -> ImportReport:
    """Import ``source`` into a new store at ``dst`` (see the module docstring for what it holds).

    Args:
        source: an opened source (``registry.get_format(name).open(path)``); not closed here.
        dst: the path to create (``~`` expanded), or an object-storage URL (``s3://bucket/prefix``;
            see "Object storage" below).
        backend: the destination backend's name (default ``"zarr"``; ``replaybuf backends`` lists them).
        episodes: the source episodes to import (see :func:`parse_episodes`); None: all.
        skip_keys: source keys to leave out (named in the report and the attributes).
        keep_dtype: keep non-uint8 frames in their source dtype (Blosc) instead of converting
            provably lossless ones to uint8.
        lossy_quality: the older spelling of ``frames="webp:Q"`` (lossy WebP at quality Q, 0..100).
        frames: the codec of the camera frames (:mod:`replaybuf_core.layout.frame_choice`): ``"exact"``
            (the default: lossless, bit for bit — JPEG XL on zarr), ``"fast"`` (JPEG q95), a codec
            (``"jpeg:90"``, ``"jpeg420:85"``, ``"webp"``, ``"webp:90"``, ``"jpegxl"``), or per key
            (``"observation.images.wrist=fast,*=exact"`` / ``{key: choice}``).  Lossy keys are checked
            by PSNR against the decoded source, lossless ones bit for bit.  A source may store some
            cameras its own way instead (``Source.frame_choices``: LeRobot's ``video="passthrough"``
            keeps the mp4 packets; checked bit for bit; the report's ``frame_handling`` says which).
        image_frames_per_shard: frames per shard of image arrays (None: one object per frame); large
            frames get fewer, so a shard holds at most :data:`SHARD_RAW_BYTES` of raw pixels.
        progress: show a tqdm bar over steps (stderr).
        overwrite: replace an existing store of ``backend`` at ``dst`` (never anything else).
        drop_empty_episodes: leave out zero-length source episodes (recorded in the attributes and
            the report); without it such a source is refused before anything is written.
        storage_options: for a URL ``dst``: obstore's options (credentials, endpoint, region);
            without them the usual ``AWS_*`` (etc.) environment variables apply.
        client: a ``distributed.Client``: write the destination on its cluster, one task per
            shard-aligned span (:mod:`~replaybuf_core.importing.distributed`); the result is the
            serial import's, bit for bit.  Needs a source opened by :func:`import_dataset` (its
            workers open it again) and a destination every worker reaches at the same path or URL.
        resume: with ``client`` and a local ``dst``: continue what a stopped run of the same import
            left beside ``dst`` (interrupted — Ctrl-C, SIGTERM — such an import keeps its build for
            this; killed, it is left as it was) (:mod:`~replaybuf_core.importing.resume`: the same source files,
            episodes, keys and options; its committed episodes are kept, neither read nor written
            again; the report's ``resumed`` says how many).  False (CLI ``--restart``): remove it and
            start over.  Imports without ``client`` always start over.

    Returns:
        An :class:`ImportReport`; check ``report.ok`` (verification problems do not raise).

    Raises:
        FileExistsError: ``dst`` exists and ``overwrite`` is False, or it is not a store of ``backend``.
        ValueError: ``dst`` is the source, inside it, or holds it; bad ``lossy_quality`` / ``frames``
            (an unknown codec or key, JPEG on RGBA frames, a lossy choice on a backend without a
            lossy image codec, both given); an in-memory backend; an unknown key in
            ``skip_keys`` (the message lists the keys); a key of a dtype no store holds (named, with
            the ``skip_keys`` that leaves it out); bad ``episodes``; chosen episodes the source
            cannot give (``source.unavailable``, named with the option that helps); a source's
            pass-through cameras (LeRobot ``video="passthrough"``) with ``client`` or on a backend
            without a video frame codec; zero-length
            episodes (named) without ``drop_empty_episodes``; nothing left to import; a source
            episode whose data disagrees with its metadata (named by the format).
        TypeError: bad ``lossy_quality`` / ``image_frames_per_shard`` / ``episodes`` type.
        BackendNotFoundError: no backend called ``backend``.
    Nothing is written when an argument is rejected.  While importing, ``dst``'s writer lock is held
    (``StoreLockedError`` when another process records into it, before anything is written).  If
    the import fails midway, what was built is removed, ``dst`` is left as it was, and the error
    re-raised.  A destination that fails verification does not replace an existing ``dst``.

    Object storage: object stores have no rename, so a URL destination is written in place: it must
    hold no store (``FileExistsError`` otherwise, ``overwrite`` included), its writer lease is held
    throughout, and the episodes commit as they stream (data objects first, then
    ``meta/episode_ends``).  An import that fails or is killed midway leaves a store of the episodes
    committed so far, whose ``data`` attribute ``import["complete"]`` is false (it turns true once
    the import is verified); delete it before importing there again.
    """
    t0 = time.perf_counter()
    frames, fps = check_settings(lossy_quality, image_frames_per_shard, frames)
    if client is not None:
        check_client(client)
        check_cluster_destination(backend, "an import")
    if client is not None and getattr(source, "open_args", None) is None:
        raise ValueError("an import on a Dask cluster needs a source its workers can open again: use "
                         "import_dataset(src, dst, format, client=...)")
    entry = registry.get_backend(backend)
    src_path, dst_path = check_destination(source.path, dst, backend, overwrite, storage_options)
    options = {"storage_options": storage_options} if storage_options else {}
    skip = list(dict.fromkeys(skip_keys))
    unknown = [k for k in skip if k not in source.keys]
    if unknown:
        raise ValueError(f"skip_keys: {unknown} not in the source; its keys are {list(source.keys)}")
    keys = [k for k in source.keys if k not in skip]
    for k in keys:
        spec = source.keys[k]
        if not (spec.dtype.kind in "biufc" or (spec.dtype == object and spec.kind == "strings")):
            what = "variable-length numbers" if spec.dtype == object else f"dtype {spec.dtype}"
            raise ValueError(f"{src_path}: key {k!r} holds {what}, which a store cannot hold (numbers, booleans "
                             f"and text only); leave it out with skip_keys=[{k!r}] (CLI: --skip-key {k})")
    if not keys:
        raise ValueError(f"nothing to import: every key of {src_path} is skipped")
    asked, choices = _frame_choices(source, keys, frames)
    passed = [k for k, c in choices.items() if c.passthrough and c.codec != "jpeg"]  # JPEG bytes: also on Dask
    if passed and client is not None:
        raise ValueError(f"pass-through ({', '.join(f'{k}: {choices[k]}' for k in passed)}) runs in one process, not on a "
                         "Dask cluster: import without client= (or with LeRobot's video reencode)")
    chosen = parse_episodes(episodes, source.n_episodes)
    missing = [i for i in chosen if i in source.unavailable]
    if missing and not source.skip_unavailable:
        ids = [source.episode_id(i) for i in missing]
        raise ValueError(f"{src_path}: {len(missing)} chosen episode(s) cannot be imported, episode(s) {ids[:20]}"
                         f"{' ...' if len(ids) > 20 else ''}; e.g. episode {ids[0]}: {source.unavailable[missing[0]]}. "
                         f"{source.unavailable_hint}")
    unavailable = [{"episode": source.episode_id(i), "reason": source.unavailable[i]} for i in missing]
    chosen = [i for i in chosen if i not in source.unavailable]
    if not chosen and source.n_episodes:
        raise ValueError(f"{src_path}: none of the chosen episodes can be imported")
    lengths = np.asarray(source.episode_lengths, dtype=np.int64)
    empty = [i for i in chosen if lengths[i] == 0]
    if empty and not drop_empty_episodes:
        shown = ", ".join(map(str, empty[:20])) + (f", ... ({len(empty)} in all)" if len(empty) > 20 else "")
        raise ValueError(f"{src_path}: episode(s) {shown} of {source.n_episodes} have zero length; replaybuf "
                         "buffers hold no empty episode. Pass drop_empty_episodes=True (CLI: "
                         "--drop-empty-episodes) to import the others and record which were dropped")
    if empty:
        logger.warning("%s: dropping %d zero-length episode(s): %s", src_path, len(empty), empty[:20])
    indices = [i for i in chosen if lengths[i] > 0]
    n_steps = int(lengths[indices].sum()) if indices else 0
    if not indices:
        raise ValueError(f"{src_path}: nothing to import: no chosen episode holds a step"
                         + (f" ({'; '.join(n for n in source.notes[:2])})" if source.notes else ""))
    step_bytes = sum(source.keys[k].step_bytes for k in keys)
    max_rows = max(1, PART_BYTES // max(1, step_bytes))

    kept: dict[str, str] = {}
    restarts: list[str] = []
    # the cheap early check: the first part of the first episode of every conversion candidate
    candidates = [k for k in keys if source.keys[k].kind == "frames" and source.keys[k].dtype.kind in "iuf"
                  and source.keys[k].dtype != np.uint8 and not keep_dtype]
    if candidates and indices:
        first = next(iter(source.iter_parts(indices[0], candidates, max_rows)))
        for key in candidates:
            _, row = as_uint8_if_lossless(first[key])
            if row >= 0:
                kept[key] = (f"kept as {source.keys[key].dtype}: row {row} (episode {indices[0]}) holds "
                             f"{first_bad_value(first[key][row])!r}, not an integer in 0..255")
        del first
    settings = dict(keep_dtype=bool(keep_dtype), lossy_quality=lossy_quality, frames=choices, frames_per_shard=fps,
                    max_rows=max_rows, client=client, backend=backend, storage_options=storage_options)
    local = isinstance(dst_path, Path)
    plan = plan_digest(source, keys, indices, settings, kept) if client is not None and local else None
    adopt = adopter(plan if resume else None, "--restart / resume=False" if client is not None else
                    "only an import on a Dask cluster (--workers / --scheduler) continues a stopped one")
    resumed = None
    with building(dst_path, options, adopt=adopt if local else None) as beside:
        adopted = beside.adopted
        # a Ctrl-C or SIGTERM (a cluster's preemption) of a resumable import keeps its build for the next run
        beside.keep_if_interrupted = plan is not None and resume
        while True:
            try:
                plans, checker, bounds, resumed = _import_once(
                    source, entry, beside.path, keys, indices, n_steps, kept, settings, progress, bool(restarts),
                    _provenance(source, src_path, skip, empty, chosen, settings, unavailable), options,
                    plan_digest(source, keys, indices, settings, kept) if plan is not None else None, adopted)
                break
            except PassThroughMismatch as exc:  # that camera re-encoded from the start: nothing of it kept
                msg = f"{exc}: the source's packets did not decode to its frames; restarting with {exc.key!r} re-encoded"
                logger.warning("%s", msg)
                restarts.append(msg)
                choices.pop(exc.key)
                if asked.get(exc.key) is not None:
                    choices[exc.key] = asked[exc.key]
                source.decline_frame_choice(exc.key, f"the pass-through check failed ({exc})")
                adopted = False
            except (_NotLossless, NotLossless) as exc:
                dtype = source.keys[exc.key].dtype
                msg = (f"data/{exc.key}: episode {exc.episode}, row {exc.row} {exc.reason}; restarting with "
                       f"{exc.key!r} kept as {dtype}")
                logger.warning("%s", msg)
                restarts.append(msg)
                kept[exc.key] = f"kept as {dtype}: {exc.reason} (episode {exc.episode}, row {exc.row})"
                adopted = False
        report = _verify(source, entry, src_path, beside.path, plans, checker, indices, backend, options)
        report.dst = os.fspath(dst_path)
        if plan is not None:
            forget_progress(beside.path)  # verified: nothing to continue; the store is the serial import's
        report.stored_bytes = beside.stored_bytes()
        if not report.ok and beside.replaces:
            beside.swap = False  # keep the store that was there; the report says why
            report.problems.append(f"{dst_path} was left as it was: the new import failed verification")
        elif report.ok:
            with ReplayBuffer(os.fspath(beside.path), backend=backend, **options) as rb:
                no_cache(rb.store)
                summarizer = checker.stats_summarizer()  # frames: the histograms of the rows checked
                if client is not None:
                    from replaybuf_core.cluster.stats import cluster_summarizer

                    summarizer = cluster_summarizer(client, os.fspath(beside.path), storage_options, backend)
                rb.get_stats(summarizer=summarizer)  # stored with the store (meta/replaybuf_stats), kept up to date
                rb.store.set_attrs("data", {"import": {  # with what the source said while it was read
                    **rb.store.get_attrs("data")["import"], "complete": True, "notes": list(source.notes),
                    "key_notes": {k: list(v) for k, v in source.key_notes.items() if k in keys and v}}})
    report.format = source.format_name
    report.restarts = restarts
    report.resumed = resumed
    report.dropped_empty_episodes = empty
    report.skipped_episodes = list(source.skipped) + unavailable
    report.skipped_keys = skip
    report.notes = list(source.notes)
    for key, r in report.keys.items():
        r.source_notes = list(source.key_notes.get(key, ()))
    report.frame_handling = {k: v for k, v in source.frame_handling.items() if k in keys}
    report.source_bytes, report.source_episodes = source.source_bytes(), source.n_episodes
    report.seconds = time.perf_counter() - t0
    return report


def _frame_choices(source: Source, keys: list[str], frames: Any) -> tuple[dict[str, FrameChoice], dict[str, FrameChoice]]:
    """key → FrameChoice for every key of ``keys`` the source gives as camera frames (checked: JPEG on
    RGBA is refused before anything is written): ``(asked, chosen)``, what ``frames`` asks for and what
    the source makes of it (``Source.frame_choices``: pass-through cameras)."""
    cameras = {k: ((0,) + source.keys[k].shape, np.uint8) for k in keys
               if source.keys[k].kind == "frames" and is_frame_shape((0,) + source.keys[k].shape)}
    asked = choose_frames(frames, cameras)
    return asked, source.frame_choices(dict(asked))


def _provenance(source: Source, src_path: Path, skip: list[str], empty: list[int], chosen: list[int],
                settings: dict, unavailable: list[dict]) -> dict[str, Any]:
    ids = [source.episode_id(i) for i in chosen]
    sel = None if chosen == list(range(source.n_episodes)) else (
        f"{ids[0]}:{ids[-1] + 1}" if ids and ids == list(range(ids[0], ids[-1] + 1)) else ids)
    return {"format": source.format_name, "source": os.fspath(src_path),
            "lossy_quality": settings["lossy_quality"], "keep_dtype": settings["keep_dtype"],
            "frames": {k: str(c) for k, c in settings["frames"].items()},
            "episodes": sel, "skipped_keys": skip, "dropped_empty_episodes": list(empty),
            "skipped_episodes": list(source.skipped) + unavailable, "notes": list(source.notes),
            "key_notes": {k: list(v) for k, v in source.key_notes.items() if k not in skip and v}, "complete": False}


def _import_once(source: Source, entry: Any, path: Path, keys: list[str], indices: list[int], n_steps: int,
                 kept: dict[str, str], settings: dict, progress: bool, replace: bool,
                 provenance: dict[str, Any], options: dict, plan: str | None = None, adopted: bool = False,
                 ) -> tuple[dict[str, KeyPlan], Checker, list, tuple[int, int] | None]:
    """One pass of the import into ``path`` (created; ``replace``: over what a restart left there; with
    ``adopted``, a stopped run's build continued when it fits the plan, else started over).  Returns
    the plans, the checker, the episodes' bounds and ``(episodes kept, episodes)`` when continued."""
    # Setting up is not cut by Ctrl-C / SIGTERM: an interrupted zarr call would go on writing in
    # zarr's event-loop thread after the build beside the destination was removed.
    rb = None
    progress_kept = None
    try:
        with deferred_sigint():  # a signal held meanwhile is raised at its end, inside this try
            if adopted:
                rb, plans, progress_kept = continue_build(source, entry, path, keys, indices, n_steps, kept,
                                                          settings, plan, options)
            if rb is None:
                dst = entry.create(os.fspath(path), if_exists="replace" if replace or adopted else "raise", **options)
                try:
                    rb, plans = set_up(source, dst, keys, indices, n_steps, kept, settings, provenance)
                    if plan is not None:
                        write_progress(path, Progress(plan))
                except BaseException:
                    dst.close()
                    raise
        if settings["client"] is None:
            # a pass-through source hands its packets to the video codec, its JPEG bytes to the JPEG codec
            with video_packets.session(), image_bytes.session():
                return (*_stream(source, rb, plans, keys, indices, n_steps, settings, progress), None)
        resumed = (int(rb.n_episodes), len(indices)) if progress_kept is not None and rb.n_episodes else None
        checker, bounds = stream_on_cluster(settings["client"], source, rb, plans, indices, n_steps, source.open_args,
                                            os.fspath(path), settings["backend"], settings["storage_options"],
                                            progress, plan, progress_kept)
        return plans, checker, bounds, resumed
    finally:
        if rb is not None:
            rb.close()  # releases the destination's writer lock and its open files


def _stream(source: Source, rb: ReplayBuffer, plans: dict[str, KeyPlan], keys: list[str], indices: list[int],
            n_steps: int, settings: dict, progress: bool) -> tuple[dict[str, KeyPlan], Checker, list]:
    """Stream the episodes through the writer and check every stored row (see the module docstring)."""
    converted = [k for k, p in plans.items() if p.converted]
    reorder = {k: p.dtype for k, p in plans.items() if not p.converted and p.dtype != p.src_dtype}  # byte order
    lengths = source.episode_lengths
    bounds: list[tuple[int, int, int]] = []

    def parts():
        # runs in a prefetch thread: source decoding overlaps with destination encoding
        row = 0
        for ep, (src_index, episode_parts) in enumerate(source.iter_episodes(indices, keys, settings["max_rows"])):
            start = row
            for part in episode_parts:
                n = _part_length(source, src_index, part, keys)
                for key in converted:
                    u, bad = as_uint8_if_lossless(part[key])
                    if u is None:
                        raise _NotLossless(key, src_index, row - start + bad,
                                           f"holds {first_bad_value(part[key][bad])!r}, not an integer in 0..255")
                    part[key] = u
                for key, dtype in reorder.items():
                    part[key] = part[key].astype(dtype)  # the same values in native byte order
                yield ep, row, part
                row += n
            if row - start != int(lengths[src_index]):
                raise ValueError(f"{source.format_name} source {source.path}: episode {src_index} gave "
                                 f"{row - start} steps; its metadata says {int(lengths[src_index])}")
            yield ep, (start, row), None

    checker = Checker(rb.store, plans, passthrough=[k for k, c in settings["frames"].items() if c.passthrough])
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_steps, unit="step", desc=f"importing {Path(source.path).name}")
    try:
        with checker.mismatch_first(), rb.writer(commit_interval=IMPORT_COMMIT_INTERVAL) as w:
            for ep, row, part in prefetch(parts(), depth=2):
                if part is None:
                    w.end_episode()
                    bounds.append((ep, row[0], row[1]))
                else:
                    for key, values in part.items():
                        checker.stage(key, row, values, ep)
                    w.add_steps(part, copy=False)
                    if bar is not None:
                        bar.update(len(next(iter(part.values()))))
                checker.check(w.stored_rows())
        checker.check(dict.fromkeys(keys, n_steps))  # the rows the final flush stored
        checker.wait()
        checker.finish_lossy()
        checker.check_whole(n_steps, bounds)
    finally:
        checker.close()
        if bar is not None:
            bar.close()
    return plans, checker, bounds


def _part_length(source: Source, index: int, part: dict[str, np.ndarray], keys: list[str]) -> int:
    lens = {k: len(part[k]) for k in keys if k in part}
    missing = [k for k in keys if k not in part]
    if missing or len(set(lens.values())) > 1:
        raise ValueError(f"{source.format_name} source {source.path}: episode {index}: a part "
                         f"{'lacks ' + str(missing) if missing else 'has keys of different lengths ' + str(lens)}")
    return next(iter(lens.values()))


def _verify(source: Source, entry: Any, src_path: Path, dst_path: Path, plans: dict[str, KeyPlan],
            checker: Checker, indices: list[int], backend: str, options: dict) -> ImportReport:
    """Re-open the destination read-only, check its structure and meta against the source, and
    collect the per-row data checks made while importing."""
    problems: list[str] = []
    dst_rb = ReplayBuffer.create_from_path(dst_path, backend=backend, **options)
    try:
        dst = dst_rb.store
        no_cache(dst)
        want_ends = np.cumsum(np.asarray(source.episode_lengths, dtype=np.int64)[indices])
        if dst_rb.n_episodes != len(want_ends) or not np.array_equal(dst_rb.episode_ends, want_ends):
            problems.append(f"meta/episode_ends differs: {len(want_ends)} episodes / "
                            f"{int(want_ends[-1]) if len(want_ends) else 0} steps chosen from the source, "
                            f"destination {dst_rb.n_episodes} / {dst_rb.n_steps}")
        if sorted(dst_rb.keys()) != sorted(plans):
            problems.append(f"data keys differ: source {sorted(plans)}, destination {dst_rb.keys()}")
        reports: dict[str, KeyReport] = {}
        for key in (k for k in plans if k in dst_rb):
            p = plans[key]
            shape, dtype = tuple(dst.shape("data", key)), np.dtype(dst.dtype("data", key))
            reports[key] = KeyReport(key, p.shape, str(p.src_dtype), str(dtype), describe_codec(dst.codec("data", key)),
                                     tuple(dst.chunks("data", key) or ()), dst.shards("data", key), p.converted,
                                     p.lossy, note=p.note)
            if p.image:
                stored = getattr(dst, "stored_bytes", lambda g, n: None)("data", key)
                reports[key].bytes_per_frame = stored / shape[0] if stored is not None and shape[0] else None
                reports[key].source_bytes_per_frame = source.frame_bytes(key, list(indices))
            if shape != p.shape or dtype != p.dtype:
                problems.append(f"data/{key}: destination is {shape} {dtype}, expected {p.shape} {p.dtype}")
        meta_keys = sorted(dst.list_arrays("meta"))
        if problems:
            return ImportReport(os.fspath(src_path), os.fspath(dst_path), dst_rb.n_episodes, dst_rb.n_steps,
                                reports, meta_keys, problems)
        problems.extend(checker.problems)
        for key, rows in checker.unchecked().items():
            problems.append(f"data/{key}: {rows} rows were never read back")
        for key, r in reports.items():
            if plans[key].lossy:
                r.psnr_db = psnr_db(checker.sse[key], dst_rb.n_steps * int(np.prod(plans[key].shape[1:])))
                r.min_episode_psnr_db = checker.worst[key]
            else:
                r.exact = key not in checker.first_bad
        whole, per_episode = meta_arrays(source, indices)
        for name, want in {**whole, **per_episode}.items():
            if not dst.has_array("meta", name):
                problems.append(f"meta/{name}: missing from the destination")
                continue
            got = dst.read("meta", name, 0, dst.shape("meta", name)[0])
            want = np.asarray(want)
            if not same_bits(want.reshape(got.shape) if want.ndim == 0 else want, got):
                problems.append(f"meta/{name}: differs from the source ({want.shape} {want.dtype} vs "
                                f"{got.shape} {got.dtype})")
        return ImportReport(os.fspath(src_path), os.fspath(dst_path), dst_rb.n_episodes, dst_rb.n_steps, reports,
                            meta_keys, problems)
    finally:
        dst_rb.close()
