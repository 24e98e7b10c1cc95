"""Pass-through import of LeRobot video: store a camera's mp4 packets as they are, not decoded and
re-encoded (``LeRobotSource(video="passthrough")``, CLI ``--video passthrough``).

The stored frames are ``replaybuf.video`` chunks (:mod:`replaybuf_zarr.codecs.video_chunk`) whose
segments are the source's own packets: for the rows of a chunk that fall in one source GOP, the GOP's
packets from its keyframe to the last of those rows, the stream's ``extradata`` and how many decoded
frames to skip.  Each chunk decodes on its own, and to exactly what PyAV decodes from the source (the
import checks every row bit for bit against its own decode of the mp4, as a re-encoding import does).
The packets reach the codec through :mod:`replaybuf_core.layout.video_packets`.

A camera goes through when every mp4 file of it (:func:`probe`, a demux: no decoding):

* is H.264 (4:2:0 or 4:4:4, 8-bit) or AV1 (4:2:0, 8-bit) — the bitstreams the video codec reads — with
  even sides for 4:2:0;
* starts with a keyframe, and its packets' presentation times increase in decode order (no B-frames:
  reordered frames would need every packet of a GOP for any frame, and open GOPs refer across
  keyframes);
* has keyframes at most :data:`MAX_GOP` frames apart — the limit: a chunk holds whole GOPs, so a read
  of one frame decodes up to that many, and a chunk boundary inside a GOP stores that GOP's packets up
  to it twice; 32 frames is ~1 s at LeRobot's 30 fps, ~60 ms of AV1 decoding at 640×480 — and each
  packet the mp4 marks as a keyframe is a real random-access point (:mod:`.keyframes`, from the
  bitstream's headers): an H.264 IDR picture, an AV1 shown ``KEY_FRAME`` (not an ``INTRA_ONLY`` frame,
  a hidden forward key frame or the ``show_existing_frame`` showing one: open GOPs).  FFmpeg marks AV1
  keyframes itself (its parser: a temporal unit showing a key frame), so an open GOP's entry points —
  libsvtav1's ``irefresh-type=1`` intra-only frames, libaom's forward key frames — are not marked and
  its GOPs run from key frame to key frame; when that is longer than :data:`MAX_GOP`, the report
  names the open GOP.

A camera whose stored chunks still do not decode to the source's frames fails the import's
bit-for-bit check; the import then starts again with that camera re-encoded, and the report says
why (:meth:`LeRobotSource.decline_frame_choice`) — never wrong frames kept, never a failed import.

Chunks hold :func:`chunk_frames` frames: a whole number of the longest source GOP, at least
:data:`MIN_CHUNK_FRAMES` (LeRobot's g=2 → 32).  Episodes whose first row is not on the chunk grid, or
not at a keyframe (v3 files hold many episodes), cost at most one partial GOP's packets more per chunk
boundary — a keyframe, which in LeRobot's g=2 AV1 is about twice a frame's average bytes: at 8 frames
a chunk that was +25 % of the G1 camera's bytes, at 32 about +5 %.  A read decodes only the GOPs
holding the frames it wants (:meth:`replaybuf_zarr.codecs.video.VideoCodec.decode_rows`), so a
longer chunk costs a random read only the bytes it fetches.

Any other camera is re-encoded with the ``frames=`` codec, and the report says why
(:attr:`Source.frame_handling`); never silently.  A file that cannot be opened or demuxed (truncated,
damaged) is an error naming the camera, the file and its episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from replaybuf_core.layout.frame_choice import VIDEO_PIX_FMTS
from replaybuf_core.layout.video_packets import GopPackets, PacketRecord

from .keyframes import av1_first_frame, av1_sync_problem, h264_has_idr
from .layout import require

#: The longest source GOP (frames from a keyframe to the next) that goes through.
MAX_GOP = 32
#: Frames per stored chunk at least (a whole number of source GOPs; see the module docstring).
MIN_CHUNK_FRAMES = 32
#: The bitstreams and pixel formats replaybuf's video chunks carry (``replaybuf.video``'s own).
PIX_FMTS = VIDEO_PIX_FMTS
#: FFmpeg decoder names → the bitstream they decode.
BITSTREAMS = {"h264": "h264", "libdav1d": "av1", "libaom-av1": "av1", "av1": "av1"}
#: The values of the ``video`` option.
MODES = ("reencode", "passthrough")


@dataclass(frozen=True)
class PassThrough:
    """How a camera goes through: its ``bitstream`` (``"h264"`` / ``"av1"``), the longest source GOP
    ``max_gop`` and the stored chunk's frames ``chunk``."""

    bitstream: str
    max_gop: int
    chunk: int

    def describe(self) -> str:
        return (f"passed through: the source's {self.bitstream} packets (GOPs of at most {self.max_gop} "
                f"frames), {self.chunk} frames a chunk")


def chunk_frames(max_gop: int) -> int:
    """Frames per chunk for a longest source GOP of ``max_gop`` frames: its smallest multiple that is at
    least :data:`MIN_CHUNK_FRAMES`."""
    return max_gop * max(1, -(-MIN_CHUNK_FRAMES // max_gop))


def probe(camera: str, files: dict[str, list[int]]) -> PassThrough | str:
    """Whether ``camera``'s mp4 files (path → the episodes they hold) can go through: a
    :class:`PassThrough`, or why not (one line naming the file).

    Raises ValueError naming the camera, the file and its episodes when a file cannot be opened or
    demuxed (truncated or damaged)."""
    av = require("av", "reading LeRobot videos")
    longest = 1
    bitstream = None
    for path, episodes in sorted(files.items()):
        where = f"episode(s) {_some(episodes)}, camera {camera}: {path}"
        try:
            container = av.open(path)
        except Exception as exc:
            raise ValueError(f"{where}: cannot open the video (truncated or damaged?): {exc}") from exc
        try:
            if not container.streams.video:
                raise ValueError(f"{where}: holds no video stream")
            why, gop, bits = _probe_stream(container, container.streams.video[0], where)
        finally:
            container.close()
        if why:
            return f"{path}: {why}"
        if bitstream is not None and bits != bitstream:
            return f"its files hold different bitstreams ({bitstream}, {bits})"
        bitstream, longest = bits, max(longest, gop)
    if bitstream is None:
        return "no video file"
    return PassThrough(bitstream, longest, chunk_frames(longest))


def _probe_stream(container, stream, where: str) -> tuple[str | None, int, str]:
    """(why not, longest GOP, bitstream) of one file's video stream; demuxes every packet."""
    cc = stream.codec_context
    bits = BITSTREAMS.get(cc.name)
    if bits is None:
        return f"{cc.name} video (pass-through carries {' and '.join(PIX_FMTS)} only)", 0, ""
    if cc.pix_fmt not in PIX_FMTS[bits]:
        return (f"pixel format {cc.pix_fmt} ({bits} passes through as {' or '.join(PIX_FMTS[bits])}: 8-bit; "
                "the stored frames are the re-encoded 8-bit RGB)"), 0, bits
    if cc.pix_fmt == "yuv420p" and (cc.width % 2 or cc.height % 2):
        return f"odd frame size {cc.width}x{cc.height} with 4:2:0 chroma", 0, bits
    extradata = bytes(cc.extradata or b"")
    length_size = (extradata[4] & 3) + 1 if bits == "h264" and len(extradata) > 4 and extradata[0] == 1 else 0
    last_pts, since_key, longest, n = None, 0, 1, 0
    intra_only = None  # the first AV1 packet opening with an intra-only frame (an open GOP's entry point)
    try:
        for packet in container.demux(stream):
            if not packet.size:
                continue
            if packet.pts is None:
                return f"packet {n} has no presentation time", 0, bits
            if n == 0 and not packet.is_keyframe:
                return "the first packet is not a keyframe", 0, bits
            if last_pts is not None and packet.pts <= last_pts:
                return (f"reordered frames (B-frames): packet {n} is presented at {packet.pts}, before the "
                        f"packet decoded ahead of it ({last_pts})"), 0, bits
            if packet.is_keyframe:
                if bits == "h264" and length_size and not h264_has_idr(bytes(packet), length_size):
                    return f"open GOP: keyframe packet {n} is not an IDR picture", 0, bits
                why = av1_sync_problem(bytes(packet), extradata) if bits == "av1" else None
                if why:
                    return f"open GOP: keyframe packet {n} is not an AV1 random-access point: {why}", 0, bits
                since_key = 0
            elif bits == "av1" and intra_only is None and _av1_intra_only(bytes(packet), extradata):
                intra_only = n
            since_key += 1
            longest = max(longest, since_key)
            if longest > MAX_GOP and intra_only is not None:
                return (f"open GOPs: its entry points are AV1 intra-only frames (e.g. packet {intra_only}), which a "
                        "decoder cannot start from (FFmpeg marks no keyframe there), and its key frames are more "
                        f"than {MAX_GOP} frames apart (from packet {n - since_key + 1})"), 0, bits
            if longest > MAX_GOP:
                return (f"GOPs longer than {MAX_GOP} frames (a keyframe every {longest}+ frames from packet "
                        f"{n - since_key + 1}); the limit bounds a random read's decode"), 0, bits
            last_pts, n = packet.pts, n + 1
    except Exception as exc:
        raise ValueError(f"{where}: cannot read packet {n} (truncated or damaged?): {exc}") from exc
    if n == 0:
        return "no packets", 0, bits
    return None, longest, bits


def _av1_intra_only(packet: bytes, extradata: bytes) -> bool:
    """Whether an AV1 temporal unit's first frame is an ``INTRA_ONLY`` frame (unparsable: no)."""
    try:
        return av1_first_frame(packet, extradata)[0] == "INTRA_ONLY_FRAME"
    except ValueError:
        return False


def tracked_frames(container, stream, records: dict[int, PacketRecord]):
    """Decode ``stream`` from the container's position (a keyframe, after a seek) and yield its frames,
    noting in ``records`` (frame pts → :class:`PacketRecord`) where each frame's packets are: the
    packets of its GOP from the keyframe.  The caller pops each record it uses (stale ones, of frames
    it skipped, are dropped at each keyframe).  Decoder errors propagate (the caller names the row)."""
    cc = stream.codec_context
    bits = BITSTREAMS.get(cc.name, cc.name)
    extradata = bytes(cc.extradata or b"")
    gop: GopPackets | None = None
    for packet in container.demux(stream):
        if packet.size:
            if packet.is_keyframe:
                gop = GopPackets(bits, extradata)
                while len(records) > 4 * MAX_GOP:  # records of frames the caller skipped, oldest first
                    del records[next(iter(records))]
            if gop is not None and packet.pts is not None:  # no record before the first keyframe
                records[packet.pts] = PacketRecord(gop, len(gop.packets))
                gop.packets.append(bytes(packet))
        yield from stream.decode(packet if packet.size else None)


def _some(xs: list[int]) -> str:
    return ", ".join(map(str, xs[:10])) + (f", ... ({len(xs)} in all)" if len(xs) > 10 else "")
