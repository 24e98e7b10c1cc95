"""What the import report says about a LeRobot camera's videos that its stored frames do not keep,
or that its files say otherwise than ``meta/info.json``: one line each, from the files' own
:class:`~.video.VideoFacts` (their stream and first frame, read with PyAV).

* a codec other than the one ``info.json``'s ``video.codec`` names (``mpeg4`` files declared ``h264``);
* more than 8 bits a sample (``yuv420p10le``): the frames are stored as PyAV's ``rgb24`` decode —
  8-bit RGB, as LeRobot's own video decoders give a policy too — so the low bits are dropped (kept
  at 16 bits they would need a lossless numeric codec: no frame codec here holds more than 8 bits);
* a display rotation (the file's display matrix): the frames are stored as coded, not rotated.

Each line depends only on the camera and the fact (no file counts or names), so lines gathered by
several processes (Dask workers reading different files) merge by union.
"""

from __future__ import annotations

from collections.abc import Iterable

from .video import VideoFacts

#: names ``info.json``'s ``video.codec`` may use for a codec → FFmpeg's canonical name
ALIASES = {"x264": "h264", "openh264": "h264", "avc": "h264", "avc1": "h264", "x265": "hevc", "h265": "hevc",
           "svtav1": "av1", "aom-av1": "av1", "aom": "av1", "dav1d": "av1", "rav1e": "av1"}


def canonical_codec(name: str) -> str:
    """FFmpeg's canonical name of a codec named ``name`` by an encoder or decoder (``libx264`` →
    ``h264``, ``libsvtav1`` → ``av1``); other names lower-cased as they are."""
    n = str(name).lower()
    n = n[3:] if n.startswith("lib") else n
    return ALIASES.get(n, n)


def camera_notes(declared_codec: str | None, facts: Iterable[VideoFacts], depth: bool) -> list[str]:
    """The report's lines for one camera whose files showed ``facts`` (see the module docstring);
    ``declared_codec``: ``info.json``'s ``video.codec`` (None: not declared); ``depth``: a depth
    camera (stored as uint16: its bit depth is kept)."""
    out: list[str] = []
    facts = sorted(set(facts), key=lambda f: (f.codec, str(f.pix_fmt), f.rotation))
    if declared_codec:
        for codec, long in sorted({(f.codec, f.codec_long) for f in facts}):
            if codec != canonical_codec(declared_codec):
                out.append(f"its video is {codec} ({long}), not {declared_codec} as meta/info.json says")
    if not depth:
        for bits, pix in sorted({(f.bits, f.pix_fmt) for f in facts if f.bits > 8}):
            out.append(f"{bits}-bit video ({pix}): its frames are stored as 8-bit RGB (PyAV's rgb24, as LeRobot's "
                       f"decoders give them too), the low {bits - 8} bits of each sample dropped")
    for degrees in sorted({f.rotation for f in facts if f.rotation % 360}):
        out.append(f"its video asks players to rotate the frames by {degrees} degrees (display matrix); they are "
                   "stored as coded, not rotated")
    return out
