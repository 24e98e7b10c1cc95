"""``replaybuf rechunk PATH --chunk-length KEY=N --compressor KEY=PRESET``: the streaming, crash-safe
rechunk / recompress of ``ReplayBuffer.set_chunks`` / ``set_compressors`` from the shell."""

from __future__ import annotations

from replaybuf_core.cluster.clients import add_cluster_arguments, client_for
from replaybuf_core.layout.frame_choice import FRAMES_HELP


def register(sub) -> None:
    """Add this command to the ``replaybuf`` sub-parser action ``sub``."""
    p = sub.add_parser("rechunk", help="rechunk / recompress data keys in place (streaming, crash-safe)",
                       description="Rewrite data keys with a new chunk length (steps per chunk, the other "
                                   "dimensions kept) and/or compressor preset (default, disk, none).  Each "
                                   "key is written beside the old one and swapped in; a kill leaves the old "
                                   "or the new array.  KEY may be '*' for every key but camera frames, which "
                                   "keep their image codec and chunks unless named.")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--chunk-length", action="append", default=[], metavar="KEY=N",
                   help="steps per chunk for KEY (repeatable)")
    p.add_argument("--compressor", action="append", default=[], metavar="KEY=PRESET",
                   help="compressor preset for KEY: default (Blosc lz4), disk (Blosc zstd), none (repeatable)")
    p.add_argument("--frames", default=None, metavar="CHOICE",
                   help="convert camera keys to this frame codec (crash-safe, in place): " + FRAMES_HELP
                        + "; keys not named keep theirs")
    add_cluster_arguments(p, "rewrite the keys")
    p.set_defaults(func=run)


def _pairs(items: list[str], keys: list[str], what: str, star: list[str] | None = None) -> dict[str, str]:
    """``KEY=VALUE`` items as a dict; ``*`` stands for every key of ``star`` (default ``keys``)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"{what} {item!r}: expected KEY=VALUE")
        chosen = (keys if star is None else star) if key == "*" else [key]
        for k in chosen:
            if k not in keys:
                raise ValueError(f"{what} {item!r}: no data key {k!r} (keys: {keys})")
            out[k] = value
    return out


def run(args) -> int:
    """Run the command with parsed ``args``; returns the exit code (0 done, 2 refused)."""
    from replaybuf_core.layout.codec_names import describe_codec
    from replaybuf_core.layout.frames import frame_keys
    from replaybuf_core.store.buffer import ReplayBuffer

    if not args.chunk_length and not args.compressor and args.frames is None:
        raise ValueError("nothing to do: give --chunk-length KEY=N, --compressor KEY=PRESET and/or --frames CHOICE")
    with ReplayBuffer(args.path) as rb, client_for(args) as client:
        keys = rb.keys()
        frames = frame_keys(rb)
        # '*' leaves camera frames alone (their image codec fixes their chunks); name one to change it
        lengths = _pairs(args.chunk_length, keys, "--chunk-length", [k for k in keys if k not in frames])
        presets = _pairs(args.compressor, keys, "--compressor", [k for k in keys if k not in frames])
        chunks = {}
        for k, v in lengths.items():
            if not v.isdigit() or int(v) < 1:
                raise ValueError(f"--chunk-length {k}={v}: N must be a positive integer")
            chunks[k] = (int(v),) + tuple(rb.store.shape("data", k)[1:])
        codecs = {k: (None if v == "none" else v) for k, v in presets.items()}
        for k, v in codecs.items():  # validated before anything is rewritten
            rb.resolve_compressor(v)
        if args.frames is not None:
            if codecs.keys() & set(frames):
                raise ValueError(f"--compressor and --frames both name {sorted(codecs.keys() & set(frames))}: "
                                 "give camera keys their codec with --frames only")
            converted = rb.set_frames(args.frames, client=client)
            for k, choice in converted.items():
                print(f"{k}: frames now {choice} ({describe_codec(rb.store.codec('data', k))})")
            if not converted:
                print("frames: every camera named is in that codec already")
        # frame keys first: a codec that refuses the new layout (WebP: one frame per chunk) does so
        # before any other key was rewritten
        order = sorted(set(chunks) | set(codecs), key=lambda k: (k not in frames, k))
        done: list[str] = []
        for k in order:
            left = "which is left as it was"
            try:
                if k in chunks:
                    rb.set_chunks({k: chunks[k]}, client=client)
                    left = "which has its new chunks but not its new compressor"
                if k in codecs:
                    rb.set_compressors({k: codecs[k]}, client=client)
            except Exception as exc:  # each step is swapped in whole: say which ones are done
                finished = f"already rewritten: {', '.join(done)}" if done else "no key was rewritten"
                said = (f"{args.path}: rewriting {k!r} failed, {left} ({finished}; not started: "
                        f"{', '.join(order[len(done) + 1:]) or 'none'}): {exc}")
                try:
                    again = type(exc)(said)
                except Exception:  # noqa: BLE001 - an exception type that takes other arguments
                    again = RuntimeError(said)
                raise again from exc
            done.append(k)
        for k in sorted(set(chunks) | set(codecs)):
            print(f"{k}: chunks {tuple(rb.store.chunks('data', k))}, codec {describe_codec(rb.store.codec('data', k))}")
    return 0
