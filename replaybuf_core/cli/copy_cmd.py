"""``replaybuf copy SRC DST``: a store copied to another path or URL (e.g. to or from a bucket), with
its chunks, codecs, shards, meta arrays and attributes — on this machine or a Dask cluster."""

from __future__ import annotations

from replaybuf_core.cluster.clients import add_cluster_arguments, client_for
from replaybuf_core.layout.frame_choice import FRAMES_HELP


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("copy", help="copy a store to another path or URL (crash-safe)",
                       description="Copy the store SRC (a path or an s3:// gs:// az:// URL) to DST, keeping its "
                                   "chunks, codecs, shards, meta arrays and attributes.  A local DST is built "
                                   "beside and swapped in once complete; a DST URL must hold no store (object "
                                   "stores have no rename) and is written data first, meta/episode_ends last.")
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    p.add_argument("--backend", default="zarr", metavar="NAME", help="backend of DST (default zarr)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at a local DST")
    p.add_argument("--frames", default=None, metavar="CHOICE",
                   help="store DST's camera keys in this frame codec (default: SRC's codecs): " + FRAMES_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_cluster_arguments(p, "copy")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the command with parsed ``args``; returns the exit code (0 done, 2 refused).

    Raises (shown by the CLI, exit 2): FileExistsError for an existing DST without ``--overwrite``;
    ValueError for DST being SRC, inside it or holding it, or (``--workers``/``--scheduler``) a DST
    backend other than zarr; FileExistsError for a DST that is not a store (never replaced);
    CorruptStoreError naming SRC, the array and the chunk that does not decode (no DST is left).
    """
    import os

    from replaybuf_core.cluster.copy import check_cluster_destination
    from replaybuf_core.errors import CorruptStoreError
    from replaybuf_core.locations import check_apart, is_object_url, local_path
    from replaybuf_core.store.buffer import ReplayBuffer

    if (args.workers is not None or args.scheduler is not None):
        check_cluster_destination(args.backend, "a copy")
    check_apart(args.src, args.dst)
    if not is_object_url(args.dst):
        dst = local_path(args.dst, "copy destination")
        if os.path.lexists(dst) and not args.overwrite:
            raise FileExistsError(f"{dst} exists: pass --overwrite to replace it")
    with ReplayBuffer.create_from_path(args.src) as rb, client_for(args) as client:
        codecs = None
        if args.frames is not None:
            if args.backend != rb.backend:
                raise ValueError(f"--frames: the codecs are made by SRC's backend ({rb.backend}); DST's is "
                                 f"{args.backend} — copy first, then `replaybuf rechunk DST --frames ...`")
            codecs = rb.frame_codecs(args.frames)[1]
        try:
            rb.save_to_path(args.dst, backend=args.backend, client=client, compressors=codecs,
                            progress=not args.no_progress)
        except CorruptStoreError as exc:  # the store's own message names the array and chunk, not the store
            raise CorruptStoreError(f"SRC {args.src}: {exc}") from exc
        print(f"copied {args.src} to {args.dst}: {rb.n_episodes} episodes, {rb.n_steps} steps, keys {rb.keys()}")
        if not is_object_url(args.dst):
            for line in _converted_frames(rb.store, args.dst, args.backend, asked=set(codecs or ())):
                print(f"note: {line}")
    return 0


def _converted_frames(src, dst_path: str, backend: str, asked: set[str] = frozenset()) -> list[str]:
    """One line per camera key whose frame codec (WebP, JPEG XL, JPEG, video: a codec with a
    ``lossless`` flag) DST's backend could not take: the copy stored its decoded pixels — the values
    SRC reads — with another codec (the backend's fallback), usually in more bytes.  Keys in
    ``asked`` were converted because ``--frames`` asked for it: no note."""
    from replaybuf_core import registry
    from replaybuf_core.layout.codec_names import describe_codec

    dst = registry.get_backend(backend).open(dst_path, read_only=True)
    lines = []
    try:
        for key in src.list_arrays("data"):
            if key in asked:
                continue
            was = src.codec("data", key)
            if getattr(was, "lossless", None) is None:
                continue
            now = dst.codec("data", key)
            if describe_codec(now) == describe_codec(was):
                continue
            sizes = [getattr(s, "stored_bytes", lambda g, n: None)("data", key) for s in (dst, src)]
            size = f" ({sizes[0]:,} bytes; {sizes[1]:,} in SRC)" if None not in sizes else ""
            lines.append(f"data/{key}: the {backend} backend has no form of SRC's frame codec {describe_codec(was)}: "
                         f"stored as its decoded pixels (the values SRC reads) with {describe_codec(now)}{size}")
    finally:
        dst.close()
    return lines
