"""Which codec stores a camera's frames: the ``--frames`` / ``frames=`` vocabulary, parsed and checked
without any backend (a backend turns a :class:`FrameChoice` into its own codec: ``image_codec``).

Grammar of one choice (case-insensitive):

=================  =============================================================================
``exact``          the exact tier: lossless, bit for bit, fast to encode and decode — :data:`TIERS`
                   (JPEG XL lossless, effort 1; frames of at most 96 × 96 pixels:
                   lossless WebP, method 1 — :func:`tier_choice`; both chosen by measurement,
                   ``benchmarks/frames``)
``fast``           the fast lossy tier — :data:`TIERS` (JPEG quality 95, 4:4:4 up to 96 × 96 pixels,
                   4:2:0 above: :data:`FAST_LARGE`; PSNR ≥ 40 dB)
``jpegxl``         lossless JPEG XL (``jpegxl:E``: effort E in 1..9, default 1)
``webp``           lossless WebP (the codec of stores written before the ladder; slow to encode)
``webp:mM``        lossless WebP at libwebp method M (0..6, 0 fastest), effort 0
``webp:Q``         lossy WebP at quality Q (0..100)
``jpeg[:Q]``       JPEG at quality Q (1..100, default 95), no chroma subsampling (4:4:4)
``jpeg420[:Q]``    JPEG with 4:2:0 chroma subsampling (smaller, softer colour)
``compact``        the compact tier — :data:`TIERS` (``video:h264:16:g4``: about LeRobot's AV1 bytes at
                   ≥ 40 dB on real 640 × 480 camera frames; a random frame decodes at most 4)
``video[:...]``    video chunks: each chunk of G frames one closed GOP —
                   ``video[:h264|av1][:CRF][:gG]`` (default ``video:h264:18:g8``; AV1's default crf
                   30); RGB frames with even sides; lossy (PSNR checked); needs PyAV
=================  =============================================================================

Per key: ``KEY=CHOICE`` pairs separated by commas, ``*`` for every other frame key
(``"observation.images.wrist=fast,*=exact"``), or a mapping ``{key: choice}`` in the API.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

__all__ = ["FRAMES_HELP", "FrameChoice", "SMALL_FRAME_PIXELS", "TIERS", "parse_frame_choice", "tier_choice", "parse_frames", "resolve_frames", "check_frames_fit",
           "choose_frames"]

#: the two tiers, by name → the codec each means (what ``exact`` and ``fast`` resolve to)
TIERS = {"exact": "jpegxl:1", "fast": "jpeg:95", "compact": "video:h264:16:g4"}
#: ``compact``'s choice, measured on the G1 data's 640 × 480 camera (``benchmarks/natural``, issue 48):
#: H.264 (x264 ``medium``, ``fastdecode``: no CABAC, no deblocking) in closed GOPs of 4 frames at crf
#: 16 is 10.5 KB a frame (1.17× the source AV1's 9.0 KB) at 40.4 dB against the source's decode;
#: a random frame costs at most 4 decodes of ~0.6 ms (GOPs of 2 need 1.4× the bytes for 40 dB, of 8
#: twice the decodes; CABAC halves the decode speed for ~15 % fewer bytes).  H.264, not AV1:
#: A100/H100 GPUs decode H.264 in hardware (NVDEC) and not AV1.

#: frames of at most this many pixels (H × W: 96 × 96) take :data:`EXACT_SMALL` for ``exact``.
#: Measured (``benchmarks/frames``, one thread): on Push-T's 96 × 96 frames lossless WebP method 1
#: is half JPEG XL's bytes (0.5 vs 1.0 KB) and decodes 5× faster; on 96 × 96 crops of natural
#: frames it is 12 % larger and decodes 3.7× faster (encoding at ~800 frames/s).  At 128 × 128 the
#: decode lead shrinks to 1.2× for the same 12 %, and from 256 × 256 up JPEG XL wins on every count
SMALL_FRAME_PIXELS = 96 * 96
#: what ``exact`` means for small frames
EXACT_SMALL = "webp:m1"
#: what ``fast`` means for frames of more than :data:`SMALL_FRAME_PIXELS` pixels: JPEG at 4:2:0.
#: Camera frames that size come from 4:2:0 video or sensors (a 4:4:4 JPEG stores chroma they never
#: had); measured on the G1 data's 640 × 480 frames (one thread): 63 against 82 KB a frame, decoded
#: in 0.97 against 1.24 ms, at 44.5 against 46.7 dB (worst frame).  Small frames (Push-T's flat
#: colours) keep 4:4:4.
FAST_LARGE = "jpeg420:95"

#: the default of imports, synth and schema creation: exact frames
DEFAULT = "exact"

#: the ``--frames`` help of every CLI command that writes frames
FRAMES_HELP = ("camera-frame codec: exact (lossless: JPEG XL, WebP for frames of at most 96x96=9216 px; the default), "
               "fast (JPEG q95, 4:2:0 above 96x96 px; lossy, checked by PSNR), compact (video:h264:16:g4: about "
               "LeRobot's video bytes), jpegxl[:EFFORT], webp (lossless), webp:mMETHOD "
               "(lossless), webp:Q, jpeg[:Q], jpeg420[:Q], "
               "video[:h264|av1][:CRF][:gFRAMES] (G frames a chunk, one GOP; PyAV); per key: "
               "'KEY=CHOICE,...,*=CHOICE'")

_CODECS = ("webp", "jpegxl", "jpeg", "jpeg420", "video")
_GRAMMAR = ("exact, fast, compact, jpegxl[:EFFORT 1..9], webp (lossless), webp:mMETHOD (0..6, lossless), "
            "webp:QUALITY (0..100, lossy), "
            "jpeg[:QUALITY 1..100], jpeg420[:QUALITY] or video[:h264|av1][:CRF][:gFRAMES]")

#: the video bitstreams: name → (crf range, default crf); and the default frames per chunk (GOP)
VIDEO_CRF = {"h264": ((0, 51), 18), "av1": ((1, 63), 30)}
VIDEO_GOP = 8
#: the pixel formats each video bitstream's chunks hold (8-bit; the first is the encoder's default)
VIDEO_PIX_FMTS = {"h264": ("yuv420p", "yuv444p"), "av1": ("yuv420p",)}


@dataclass(frozen=True)
class FrameChoice:
    """One camera's frame codec, backend-neutral.

    ``codec``: ``"webp"``, ``"jpegxl"``, ``"jpeg"`` or ``"video"``; ``quality``: the lossy quality (WebP
    0..100, JPEG 1..100, video: the crf — lower is better), None when lossless; ``effort``: JPEG XL's
    effort (1..9), else None; ``subsampling``: JPEG's chroma subsampling ``"444"`` / ``"420"``, else
    None; ``bitstream``: video's ``"h264"`` / ``"av1"``, else None; ``gop``: video's frames per chunk,
    else None.  ``passthrough``: a video choice no ``--frames`` spelling makes — a source's own packets
    stored as they are (a LeRobot import's ``video="passthrough"``, :mod:`.video_packets`): lossless
    against the source's decode, ``quality`` None; or a JPEG choice whose frames are the source's own
    JPEG bytes (an RLDS import, :mod:`.image_bytes`): lossless against the source's decode, ``quality``
    and ``subsampling`` those of frames appended later.  ``method``: lossless WebP's libwebp method (0..6;
    None: ``webp``'s own setting).  ``tier``: ``"exact"`` / ``"fast"`` when the choice was spelled by
    its tier (not compared: a tier resolves per camera, :func:`tier_choice`).  ``str(choice)`` is its ``--frames`` spelling
    (``passthrough:BITSTREAM:gG`` / ``passthrough:jpeg`` for a pass-through choice, which ``--frames`` does
    not take).
    """

    codec: str
    quality: int | None = None
    effort: int | None = None
    subsampling: str | None = None
    bitstream: str | None = None
    gop: int | None = None
    passthrough: bool = False
    method: int | None = None
    tier: str | None = field(default=None, compare=False)

    @property
    def lossless(self) -> bool:
        """True when every frame reads back bit for bit (a pass-through reads back as the source's decode)."""
        return self.quality is None or self.passthrough

    def __str__(self) -> str:
        if self.codec == "jpeg" and self.passthrough:
            return "passthrough:jpeg"
        if self.codec == "jpeg":
            return f"{'jpeg420' if self.subsampling == '420' else 'jpeg'}:{self.quality}"
        if self.codec == "jpegxl":
            return f"jpegxl:{self.effort}"
        if self.codec == "video" and self.passthrough:
            return f"passthrough:{self.bitstream}:g{self.gop}"
        if self.codec == "video":
            return f"video:{self.bitstream}:{self.quality}:g{self.gop}"
        if self.method is not None:
            return f"webp:m{self.method}"
        return "webp" if self.quality is None else f"webp:{self.quality}"


def _number(text: str, what: str, low: int, high: int, spec: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"frames {spec!r}: {what} must be an integer in {low}..{high}, got {text!r}") from None
    if not low <= value <= high:
        raise ValueError(f"frames {spec!r}: {what} must be in {low}..{high}, got {value}")
    return value


def parse_frame_choice(spec: Any) -> FrameChoice:
    """One choice (see the module docstring) → :class:`FrameChoice`; a FrameChoice passes through.

    Raises:
        TypeError: ``spec`` is neither a string nor a FrameChoice.
        ValueError: an unknown codec name or a quality / effort out of range (naming the spec and the
            grammar).
    """
    if isinstance(spec, FrameChoice):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"frames: a choice is a string such as 'exact', 'fast' or 'jpeg:90', got {spec!r}")
    text = spec.strip().lower()
    if text in TIERS:
        return replace(parse_frame_choice(TIERS[text]), tier=text)
    name, _, arg = text.partition(":")
    if name not in _CODECS:
        raise ValueError(f"frames {spec!r}: unknown frame codec {name!r}; choose one of {_GRAMMAR}")
    if name == "webp" and arg.startswith("m"):
        return FrameChoice("webp", method=_number(arg[1:], "the WebP method", 0, 6, spec))
    if name == "webp":
        return FrameChoice("webp", None if not arg else _number(arg, "the WebP quality", 0, 100, spec))
    if name == "jpegxl":
        return FrameChoice("jpegxl", effort=1 if not arg else _number(arg, "the JPEG XL effort", 1, 9, spec))
    if name == "video":
        return _video_choice(arg, spec)
    quality = 95 if not arg else _number(arg, "the JPEG quality", 1, 100, spec)
    return FrameChoice("jpeg", quality, subsampling="420" if name == "jpeg420" else "444")


def _video_choice(arg: str, spec: str) -> FrameChoice:
    """``video[:h264|av1][:CRF][:gG]``'s arguments (in any order, each at most once)."""
    parts = [p for p in arg.split(":")] if arg else []
    bitstream = crf = gop = None
    for part in parts:
        if part in VIDEO_CRF:
            if bitstream is not None:
                raise ValueError(f"frames {spec!r}: the video bitstream is given twice")
            bitstream = part
        elif part.startswith("g"):
            if gop is not None:
                raise ValueError(f"frames {spec!r}: the frames per chunk (gG) are given twice")
            gop = _number(part[1:], "the frames per chunk (gG)", 1, 1024, spec)
        elif part.isdigit():
            if crf is not None:
                raise ValueError(f"frames {spec!r}: the crf is given twice")
            crf = part
        else:
            raise ValueError(f"frames {spec!r}: {part!r} is not h264, av1, a crf or gFRAMES; the video "
                             "grammar is video[:h264|av1][:CRF][:gFRAMES]")
    bitstream = bitstream or "h264"
    (low, high), default = VIDEO_CRF[bitstream]
    quality = default if crf is None else _number(crf, f"the {bitstream} crf", low, high, spec)
    return FrameChoice("video", quality, bitstream=bitstream, gop=VIDEO_GOP if gop is None else gop)


def parse_frames(frames: Any) -> dict[str, FrameChoice]:
    """A ``frames`` argument → ``{key or "*": FrameChoice}`` (not yet matched against keys).

    ``frames``: None (the default, :data:`DEFAULT` for every key), one choice (string or FrameChoice)
    for every key, ``"KEY=CHOICE,...,*=CHOICE"``, or a mapping ``{key: choice}`` (``"*"``: the rest).

    Raises TypeError / ValueError naming the part at fault (see :func:`parse_frame_choice`); a key
    given twice is a ValueError.
    """
    if frames is None:
        return {"*": parse_frame_choice(DEFAULT)}
    if isinstance(frames, FrameChoice):
        return {"*": frames}
    if isinstance(frames, str):
        if "=" not in frames:
            return {"*": parse_frame_choice(frames)}
        pairs = []
        for part in frames.split(","):
            key, eq, choice = part.strip().rpartition("=")
            if not eq or not key.strip():
                raise ValueError(f"frames {frames!r}: {part.strip()!r} is not KEY=CHOICE (e.g. "
                                 "'observation.images.wrist=fast,*=exact')")
            pairs.append((key.strip(), choice))
    elif isinstance(frames, Mapping):
        pairs = list(frames.items())
    else:
        raise TypeError(f"frames must be a choice string, 'KEY=CHOICE,...' or a mapping, got {frames!r}")
    out: dict[str, FrameChoice] = {}
    for key, choice in pairs:
        if not isinstance(key, str):
            raise TypeError(f"frames: keys are strings, got {key!r}")
        if key in out:
            raise ValueError(f"frames: key {key!r} is given twice")
        out[key] = parse_frame_choice(choice)
    return out


def resolve_frames(frames: Any, frame_keys: Sequence[str], *, default: Any = DEFAULT) -> dict[str, FrameChoice]:
    """``{frame key: FrameChoice}`` for every key of ``frame_keys`` (the keys stored as frames).

    A key named in ``frames`` gets its choice, every other one ``frames["*"]``, or ``default`` (a choice
    string; the tier :data:`DEFAULT` unless given) when there is no ``"*"``.

    Raises:
        ValueError: ``frames`` names a key that is not among ``frame_keys`` (the message lists them) —
            never ignored, a typo would otherwise store a camera with the wrong codec; and what
            :func:`parse_frames` raises.
    """
    parsed = parse_frames(frames) if frames is not None else {}
    return _match(parsed, list(frame_keys), default, named_only=False)


def check_frames_fit(key: str, choice: FrameChoice, shape: Sequence[int], dtype: Any) -> None:
    """Check that ``choice`` can store key ``key``'s frames of ``shape`` (steps first) and ``dtype``.

    Raises:
        ValueError: a codec on frames other than uint8 (all are 8-bit), JPEG on frames of 4 channels
            (JPEG has no alpha), video on frames other than RGB or with an odd side — naming the key
            and what would hold them.
    """
    import numpy as np

    if np.dtype(dtype) != np.uint8:
        raise ValueError(f"frames: {key!r} holds {np.dtype(dtype)} values; {choice} stores 8-bit frames only "
                         "(depth and float frames are stored exactly with Blosc)")
    channels = int(shape[-1]) if len(shape) == 4 else 1
    if choice.codec == "jpeg" and channels == 4:
        raise ValueError(f"frames: {key!r} has 4 channels (RGBA); JPEG holds gray or RGB only — choose "
                         "'exact', 'jpegxl' or 'webp:Q' for it")
    if choice.codec == "video":
        if channels != 3:
            raise ValueError(f"frames: {key!r} has {channels} channel(s); {choice} holds RGB frames only — "
                             "choose 'exact' or 'fast' for it")
        if len(shape) >= 3 and (int(shape[1]) % 2 or int(shape[2]) % 2):
            raise ValueError(f"frames: {key!r} frames are {shape[1]}x{shape[2]} px; {choice} (4:2:0 chroma) "
                             "needs even sides — choose 'exact' or 'fast' for it")


def choose_frames(frames: Any, cameras: Mapping[str, tuple[Sequence[int], Any]], *, named_only: bool = False,
                  default: Any = DEFAULT) -> dict[str, FrameChoice]:
    """``{camera key: FrameChoice}``, each checked against its frames: :func:`resolve_frames` and
    :func:`check_frames_fit` in one, for every writer of frames (import, schema creation, rechunk,
    the episode writer).

    Args:
        frames: as :func:`parse_frames` (None: ``default`` for every camera).
        cameras: key → (shape with steps first, dtype) of every camera-frame key there is (the keys
            ``frames`` may name).
        named_only: return only the keys ``frames`` names (every camera when it has ``"*"`` or is one
            choice): ``rechunk --frames 'wrist=fast'`` leaves the other cameras as they are.

    Raises:
        ValueError / TypeError: what :func:`resolve_frames` and :func:`check_frames_fit` raise —
            before anything is written.
    """
    parsed = parse_frames(frames) if frames is not None else {}
    choices = _match(parsed, list(cameras), default, named_only=named_only)
    for key, choice in choices.items():
        shape, dtype = cameras[key]
        choices[key] = choice = tier_choice(choice, shape)
        check_frames_fit(key, choice, shape, dtype)
    return choices


def tier_choice(choice: FrameChoice, shape: Sequence[int]) -> FrameChoice:
    """``choice`` for a camera of frames ``shape`` (steps first: (T, H, W[, C])): the ``exact`` tier is
    lossless WebP, method 1 (:data:`EXACT_SMALL`) for frames of at most :data:`SMALL_FRAME_PIXELS`
    pixels and JPEG XL otherwise; the ``fast`` tier JPEG q95 at 4:4:4 up to that size and 4:2:0
    (:data:`FAST_LARGE`) above; every other choice is returned as it is."""
    small = len(shape) >= 3 and int(shape[1]) * int(shape[2]) <= SMALL_FRAME_PIXELS
    if choice.tier == "exact" and small:
        return replace(parse_frame_choice(EXACT_SMALL), tier="exact")
    if choice.tier == "fast" and len(shape) >= 3 and not small:
        return replace(parse_frame_choice(FAST_LARGE), tier="fast")
    return choice


def _match(parsed: Mapping[str, FrameChoice], keys: list[str], default: Any, *, named_only: bool) -> dict[str, FrameChoice]:
    unknown = [k for k in parsed if k != "*" and k not in keys]
    if unknown:
        raise ValueError(f"frames: {unknown} are not camera-frame keys here; the frame keys are {keys}")
    rest = parsed.get("*", parse_frame_choice(default))
    return {k: parsed.get(k, rest) for k in keys if not named_only or "*" in parsed or k in parsed}
