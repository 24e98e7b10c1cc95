"""The import's arguments, checked before anything is read or written: which episodes, the codec
settings, and whether the destination is a place an import may write."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core import registry
from replaybuf_core.layout.sharding import validate_image_frames_per_shard
from replaybuf_core.locations import is_object_url, local_path


def open_format(entry: Any, path: str | os.PathLike, options: dict | None, progress: bool) -> Any:
    """``entry.open(path, **options)``; with ``progress`` False, also ``progress=False`` for a format
    that shows a bar while it opens (the RLDS index of many shards) — ``--no-progress`` and Dask
    workers (whose stderr is not the user's to fill) are quiet.  A format without that option is
    opened as it is.  Raises what the format's ``open`` raises."""
    options = dict(options or {})
    if not progress and "progress" not in options:
        try:
            return entry.open(path, **options, progress=False)
        except TypeError as exc:
            if "progress" not in str(exc):
                raise
    return entry.open(path, **options)


def parse_episodes(spec: Any, n: int, owner: str = "the source") -> list[int]:
    """Episode indices (of ``n`` episodes) chosen by ``spec``: None (all), an int, an iterable of
    ints, or text such as ``"0:10"``, ``"5"``, ``"0:10,20,30:"`` (Python slices, negative indices
    from the end).  ``owner`` names what holds the episodes in messages (``"the source"`` of an
    import, ``"the store x.zarr"`` of an edit or export).

    Raises:
        ValueError: an index out of ``0..n-1``, a repeated index, or unreadable text (named).
        TypeError: ``spec`` of another type.
    """
    if spec is None:
        return list(range(n))
    if isinstance(spec, (bool, np.bool_)):
        raise TypeError(f"episodes must be indices or text like '0:10', got {spec!r}")
    if isinstance(spec, (int, np.integer)):
        spec = [int(spec)]
    if isinstance(spec, str):
        out: list[int] = []
        for part in (p.strip() for p in spec.split(",")):
            try:
                if ":" in part:
                    bits = [int(b) if b.strip() else None for b in part.split(":")]
                    if len(bits) > 3:
                        raise ValueError(part)
                    out.extend(range(n)[slice(*bits)])
                else:
                    out.append(int(part))
            except ValueError:
                raise ValueError(f"episodes: cannot read {part!r} (use indices and slices such as "
                                 "'0:10,20,30:')") from None
        spec = out
    if not isinstance(spec, Iterable):
        raise TypeError(f"episodes must be indices or text like '0:10', got {type(spec).__name__}")
    chosen = []
    for i in spec:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"episodes: {i!r} is not an episode index")
        j = int(i) + n if int(i) < 0 else int(i)
        if not 0 <= j < n:
            raise ValueError(f"episodes: index {int(i)} is out of range; {owner} has {n} episodes"
                             + (f" (0..{n - 1})" if n else ""))
        chosen.append(j)
    if len(set(chosen)) != len(chosen):
        dup = sorted({i for i in chosen if chosen.count(i) > 1})
        raise ValueError(f"episodes: index(es) {dup[:10]} chosen more than once")
    if not chosen and n:
        raise ValueError(f"episodes: {spec!r} chooses no episode ({owner} has {n}: 0..{n - 1})")
    return chosen


def check_settings(lossy_quality: Any, image_frames_per_shard: Any, frames: Any = None) -> tuple[Any, int | None]:
    """``(frames, image_frames_per_shard)`` checked (callers check them before opening a source).

    ``lossy_quality`` (an int 0..100) is the older spelling of ``frames="webp:Q"``; giving both is an
    error.  ``frames`` is parsed (:func:`~replaybuf_core.layout.frame_choice.parse_frames`) so a bad
    choice fails here; it is returned as given (or ``"webp:Q"``) — keys are matched once the source's
    keys are known.  Raises TypeError / ValueError naming the setting."""
    from replaybuf_core.layout.frame_choice import parse_frames

    fps = validate_image_frames_per_shard(image_frames_per_shard)
    if lossy_quality is not None:
        if isinstance(lossy_quality, bool) or not isinstance(lossy_quality, (int, np.integer)):
            raise TypeError(f"lossy_quality must be an int 0..100 or None, got {lossy_quality!r}")
        if not 0 <= int(lossy_quality) <= 100:
            raise ValueError(f"lossy_quality must be in 0..100, got {lossy_quality}")
        if frames is not None:
            raise ValueError(f"give frames={frames!r} or lossy_quality={lossy_quality} (the older spelling of "
                             "frames='webp:Q'), not both")
        frames = f"webp:{int(lossy_quality)}"
    parse_frames(frames)
    return frames, fps


def check_destination(src: str | os.PathLike, dst: str | os.PathLike, backend: str = "zarr",
                      overwrite: bool = False, storage_options: dict | None = None) -> tuple[Path, Path | str]:
    """``(source path, destination)``, once ``dst`` is known to be a place an import may write
    (callers check it before opening a source).  The destination is a resolved local path, or the
    URL itself for object storage (``s3://``, ``gs://``, ``az://``: see :func:`check_url_destination`).

    Raises:
        ValueError: ``dst`` is a URL of an unknown scheme, the source, or inside the source.
        FileExistsError: ``dst`` exists and ``overwrite`` is False, or it is not a ``backend`` store;
            a URL that holds a store already.
        OSError: a URL whose bucket is missing or whose endpoint does not answer (named).
        BackendNotFoundError: no backend called ``backend``.
    """
    from replaybuf_core.protocol import CAP_PERSISTENT

    entry = registry.get_backend(backend)
    if CAP_PERSISTENT not in entry.capabilities:
        raise ValueError(f"the {backend} backend keeps its stores in memory; an import writes a file or directory "
                         "(use --backend zarr or a file backend such as hdf5)")
    if not os.fspath(dst).strip():
        raise ValueError("the destination is an empty path")
    if is_object_url(dst):
        return Path(os.path.expanduser(os.fspath(src))).resolve(), check_url_destination(
            entry, os.fspath(dst), overwrite, storage_options)
    local_path(dst, "the destination")  # refuses a URL of an unknown scheme by name
    if storage_options:
        raise ValueError(f"storage_options are for object-storage URLs (s3://, gs://, az://), not {os.fspath(dst)!r}")
    src_path = Path(os.path.expanduser(os.fspath(src))).resolve()
    # a symlink at the destination is replaced, never its target (as copy and save_to_path do:
    # replace.build_beside); where the source sits is judged on the resolved path
    dst_path = Path(os.path.abspath(os.path.expanduser(os.fspath(dst))))
    dst_real = dst_path.resolve()
    if dst_real == src_path or src_path in dst_real.parents:
        raise ValueError(f"the destination {dst_path} must not be the source or inside it ({src_path})")
    if src_path in dst_real.parents or dst_real in src_path.parents:
        raise ValueError(f"the source {src_path} is inside the destination {dst_path}: replacing the destination "
                         "would delete it")
    parent = next(p for p in dst_path.parents if p.exists())
    if not parent.is_dir():
        raise ValueError(f"cannot create {dst_path}: {parent} is a file, not a directory")
    if dst_path.exists():
        if not overwrite:
            raise FileExistsError(f"{dst_path} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
        if not _is_store(entry, dst_path):
            raise FileExistsError(f"{dst_path} already exists and is not a {backend} store; refusing to replace it")
    return src_path, dst_path


def check_url_destination(entry: Any, url: str, overwrite: bool, storage_options: dict | None = None) -> str:
    """``url`` (without a trailing ``/``) once it is known to hold no store, for an import straight
    into object storage.  Object stores have no rename, so an existing store cannot be replaced by
    building beside it and swapping: ``overwrite`` is refused for URLs, and the caller deletes an old
    store itself.  A prefix holding objects that are not a zarr store is refused when the store is
    created, before anything is written.

    Raises:
        FileExistsError: ``url`` holds a store (with or without ``overwrite``).
        OSError: the bucket is missing, the credentials are refused or the endpoint does not answer.
        ValueError: ``backend`` cannot open object storage.
    """
    url = url.rstrip("/")
    try:
        probe = entry.open(url, read_only=True, storage_options=storage_options)
    except FileNotFoundError:
        return url
    except TypeError as exc:  # a backend whose open takes no storage_options: not an object-store one
        raise ValueError(f"{url}: the {entry.name} backend does not open object storage (use --backend zarr)") from exc
    probe.close()
    how = ("object stores have no rename, so an import cannot build beside the old store and swap it in; "
           f"delete the old store first (`replaybuf delete {url} --yes`: under its lease, metadata first) or import to "
           "another prefix")
    raise FileExistsError(f"{url} already holds a store; " + ("overwrite (--overwrite) cannot replace it there: "
                                                              if overwrite else "") + how)


def _is_store(entry: Any, path: Path) -> bool:
    try:
        return bool(entry.guess_can_open(os.fspath(path)))
    except Exception:
        return False
