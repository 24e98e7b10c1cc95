"""Merging stores: ``ReplayBuffer.merge(sources, dst)`` writes the episodes of every source, in
order, into a new store — built beside ``dst`` and swapped in only once complete.

The sources must agree on their data keys, dtypes and step shapes (the error names the source, the
key and what differs).  The new store takes the first source's layout (chunks, codecs, shards: a
zarr-to-zarr copy keeps them, WebP frames included); the later sources' episodes are appended one
at a time through an ``EpisodeWriter`` (memory: one episode).  Per-episode meta arrays (one row per
episode, e.g. ``source_episode_index``, ``episode_attrs``, masks) present in every source with one
dtype and row shape are concatenated; others are left out, and the returned report says which.
What imports recorded of their sources follows (:mod:`replaybuf_core.store.source_records`): one
fps (other rates are refused), one task table (``task_index`` renumbered), no stale ``stats.json``.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from replaybuf_core.layout.chunks import row_bytes

from .editing import episode_meta_arrays
from .progress import progress_bar
from .replace import build_beside
from .source_records import merge_records, remap_tasks

__all__ = ["StoreMerging"]


def _describe(src: Any, i: int) -> str:
    root = getattr(src, "_merge_name", None)
    return f"source {i} ({root})" if root else f"source {i}"


def _layout(buf: Any) -> dict[str, tuple]:
    s = buf.store
    return {k: (np.dtype(s.dtype("data", k)), tuple(s.shape("data", k)[1:])) for k in buf.keys()}


def check_compatible(buffers: Sequence[Any]) -> None:
    """Raise ValueError naming the first source whose keys, dtypes or step shapes differ from
    source 0's."""
    want = _layout(buffers[0])
    for i, b in enumerate(buffers[1:], 1):
        got = _layout(b)
        if set(got) != set(want):
            missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
            raise ValueError(f"{_describe(b, i)} has other data keys than source 0: missing {missing}, extra {extra}")
        for k, (dtype, shape) in want.items():
            if got[k] != (dtype, shape):
                raise ValueError(f"{_describe(b, i)}: key {k!r} is {got[k][0]} {got[k][1]} per step, source 0 has "
                                 f"{dtype} {shape}")


class StoreMerging:
    """``ReplayBuffer``'s merge verbs (a mixin: it opens sources and the new store with the class it is
    called on, ``cls.create_from_path`` / ``cls(path)``)."""

    @classmethod
    def merge(cls, sources: list[Any], dst: str | os.PathLike, *, overwrite: bool = False, progress: bool = False):
        """Write the episodes of ``sources`` (store paths or buffers), in order, to a new zarr store
        at ``dst`` (built beside it, swapped in once complete) and open it read-only.  The sources
        must agree on keys, dtypes and step shapes; per-episode meta arrays they all hold are
        concatenated (see :mod:`replaybuf_core.store.merging`).  ``progress``: a tqdm bar over the
        data's bytes (:mod:`~replaybuf_core.store.progress`).

        Raises:
            ValueError: no source, sources that differ (naming the source, key and what differs),
                ``dst`` among the sources.  FileExistsError: ``dst`` exists without ``overwrite``.
        """
        cls.merge_stores(sources, dst, overwrite=overwrite, progress=progress)
        return cls.create_from_path(dst)

    @classmethod
    def merge_stores(cls, sources: Sequence[Any], dst: str | os.PathLike, *,
                     overwrite: bool = False, progress: bool = False) -> dict[str, Any]:
        """Write the episodes of ``sources`` (paths or ReplayBuffers), in order, to a new zarr store at
        ``dst``.  Returns ``{"n_episodes", "n_steps", "meta_merged", "meta_left_out"}``.  ``progress``:
        a tqdm bar on stderr over the data's bytes (the decoded rows of every source).

        Raises:
            ValueError: fewer than one source, sources that disagree (see :func:`check_compatible`),
                ``dst`` is one of the sources, or a URL (merge locally, then ``save_to_path(URL)``).
            FileExistsError: ``dst`` exists and ``overwrite`` is False.
            StoreLockedError: another process writes ``dst``.
        """
        if not sources:
            raise ValueError("merge needs at least one source")
        from replaybuf_core.locations import check_apart, local_path

        # a local path only: the merged store is built beside and swapped in (object stores cannot rename)
        dst_text = os.path.realpath(local_path(dst, "merge destination"))
        opened, buffers = [], []
        try:
            for i, s in enumerate(sources):
                if isinstance(s, (str, os.PathLike)):
                    if os.path.realpath(os.path.expanduser(os.fspath(s))) == dst_text:
                        raise ValueError(f"source {i} ({s}) is the destination: merge into a new path")
                    try:
                        check_apart(s, dst_text)  # nor inside it, nor holding it
                    except ValueError as exc:
                        raise ValueError(f"source {i} ({s}): {exc}") from None
                    b = cls.create_from_path(s)
                    b._merge_name = os.fspath(s)
                    opened.append(b)
                else:
                    b = s
                buffers.append(b)
            if os.path.exists(dst_text) and not overwrite:
                raise FileExistsError(f"{dst_text} exists: pass overwrite=True (--overwrite) to replace it")
            check_compatible(buffers)
            metas = [set(episode_meta_arrays(b.store, b.n_episodes)) for b in buffers]
            common = set.intersection(*metas)

            def meta_layout(b, m):
                return np.dtype(b.store.dtype("meta", m)), tuple(b.store.shape("meta", m)[1:])

            merged = sorted(m for m in common if len({meta_layout(b, m) for b in buffers}) == 1)
            left_out = sorted(set.union(*metas) - set(merged))
            records, lookups, notes = merge_records(buffers)  # refuses other fps before anything is written
            per_step = sum(row_bytes((0, *shape), dtype) for dtype, shape in _layout(buffers[0]).values())
            with build_beside(dst_text) as beside, \
                    progress_bar("merging", per_step * sum(b.n_steps for b in buffers), progress) as bar:
                # source 0 with its layout, into the new build itself (not beside it)
                buffers[0]._copy_to_path(os.fspath(beside.path), "zarr", if_exists="raise", progress=bar.update,
                                         record_version=False)  # the merge is one version (below), not two
                with cls(os.fspath(beside.path)) as out:
                    for m in left_out:
                        if out.store.has_array("meta", m):
                            out.store.delete_array("meta", m)
                    if records is not None:
                        out.store.set_attrs("data", {"source_attrs": records})
                    with out.writer() as w:
                        for b, lookup in zip(buffers[1:], lookups[1:]):
                            for e in range(b.n_episodes):
                                episode = b.get_episode(e, copy=True, dtypes="stored")
                                w.add_episode(remap_tasks(episode, lookup))
                                bar.update(per_step * len(next(iter(episode.values()))))
                    for m in merged:
                        rows = np.concatenate([np.asarray(b.store.read("meta", m, 0, b.n_episodes)) for b in buffers])
                        out.store.resize("meta", m, rows.shape[0])
                        out.store.write("meta", m, 0, rows)
                    n_episodes, n_steps = out.n_episodes, out.n_steps
                    out._note_appends(f"merge of {len(buffers)} stores: {n_episodes} episodes, {n_steps} steps",
                                      kind="merge")
            return {"n_episodes": n_episodes, "n_steps": n_steps, "meta_merged": merged, "meta_left_out": left_out,
                    "notes": notes}
        finally:
            for b in opened:
                b.close()
