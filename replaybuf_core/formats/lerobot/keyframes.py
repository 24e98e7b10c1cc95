"""Whether a packet an mp4 marks as a keyframe (a sync sample) is a real random-access point: one a
fresh decoder starts from, after which no frame refers to a frame before it.

A pass-through import (:mod:`.passthrough`) stores each source GOP as its packets from such a
packet, to be decoded on their own; a mark the bitstream does not back (an open GOP) would store
chunks that decode to other frames than the source's.  These functions read only the headers of the
bitstream (no decoding):

* **H.264** (an mp4's ``avcC``: length-prefixed NAL units): the packet holds an IDR slice (NAL type 5).
  A non-IDR I-slice lets later frames refer past it.
* **AV1** (OBUs; an mp4's ``av1C``, AV1-ISOBMFF): the packet's first frame is a ``KEY_FRAME`` that is shown
  (``show_frame`` 1), which refreshes every reference slot — the AV1-ISOBMFF definition of a sync
  sample.  Not one: an ``INTRA_ONLY`` frame (it refreshes only some slots; the frames after it may
  still refer to older ones), a hidden *forward* key frame (``show_frame`` 0: the frames shown before
  it refer to frames before it) or a ``show_existing_frame`` header showing one (its key frame was
  decoded in an earlier packet).  Sources: the AV1 bitstream specification, sections 5.3 (OBU
  header), 5.5 (sequence header), 5.9 (uncompressed header) and 7.20 / 7.21 (reference frame update
  and loading).

What a demuxer marks differs by bitstream: an H.264 mp4's marks are its sync samples; FFmpeg marks AV1
packets itself, from the bitstream (its AV1 parser: a temporal unit whose shown frame is a
``KEY_FRAME``), keeping the mp4's mark only for a unit it cannot parse.  So an AV1 open GOP's entry
points (intra-only frames, forward key frames) are never marked, and a marked unit can still open
with hidden frames that refer to earlier ones — which :func:`av1_sync_problem` rejects.
"""

from __future__ import annotations

__all__ = ["h264_has_idr", "av1_first_frame", "av1_sync_problem"]

#: AV1 OBU types (spec 6.2.2).
OBU_SEQUENCE_HEADER, OBU_FRAME_HEADER, OBU_FRAME = 1, 3, 6
#: AV1 frame types (spec 6.8.2).
AV1_FRAME_TYPES = ("KEY_FRAME", "INTER_FRAME", "INTRA_ONLY_FRAME", "SWITCH_FRAME")


def h264_has_idr(packet: bytes, length_size: int) -> bool:
    """Whether an mp4 (``avcC``, NAL units each prefixed by its ``length_size``-byte length) H.264
    packet holds an IDR slice (NAL type 5)."""
    pos = 0
    while pos + length_size <= len(packet):
        n = int.from_bytes(packet[pos:pos + length_size], "big")
        pos += length_size
        if n and pos < len(packet) and packet[pos] & 0x1F == 5:
            return True
        pos += n
    return False


def _obus(data: bytes):
    """``(obu_type, payload)`` of each OBU of ``data`` (a temporal unit, or ``av1C``'s config OBUs).
    Raises ValueError when a size runs past the end (truncated or not AV1)."""
    pos = 0
    while pos < len(data):
        header = data[pos]
        obu_type, extension, has_size = (header >> 3) & 0xF, (header >> 2) & 1, (header >> 1) & 1
        pos += 1 + extension
        if has_size:
            size = shift = 0
            for _ in range(8):  # leb128
                if pos >= len(data):
                    raise ValueError("its OBUs do not parse: an OBU size runs past the end of the packet")
                byte = data[pos]
                pos += 1
                size |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
        else:
            size = len(data) - pos
        if pos + size > len(data):
            raise ValueError(f"its OBUs do not parse: an OBU of {size} bytes runs past the end of the packet")
        yield obu_type, data[pos:pos + size]
        pos += size


def _reduced_still_picture(sequence_header: bytes) -> bool:
    """``reduced_still_picture_header`` of a sequence header OBU's payload (its fifth bit, after
    ``seq_profile`` f(3) and ``still_picture`` f(1))."""
    return bool(sequence_header and sequence_header[0] & 0x08)


def av1_first_frame(packet: bytes, extradata: bytes = b"") -> tuple[str, bool]:
    """``(frame type, shown)`` of the first frame header in the AV1 temporal unit ``packet``: a name of
    :data:`AV1_FRAME_TYPES`, or ``"show_existing_frame"`` for a header that shows a frame decoded
    earlier.  ``extradata``: the stream's ``av1C`` record (4 bytes, then config OBUs: the sequence
    header when the packet holds none).

    Raises ValueError (one line): OBUs that do not parse, no sequence header before the frame, no
    frame."""
    reduced = None
    config = extradata[4:] if len(extradata) > 4 and extradata[0] & 0x80 else b""
    for obu_type, payload in _obus(config):
        if obu_type == OBU_SEQUENCE_HEADER:
            reduced = _reduced_still_picture(payload)
    for obu_type, payload in _obus(packet):
        if obu_type == OBU_SEQUENCE_HEADER:
            reduced = _reduced_still_picture(payload)
        elif obu_type in (OBU_FRAME_HEADER, OBU_FRAME):
            if reduced is None:
                raise ValueError("no sequence header precedes its frame (in the packet or the stream's av1C)")
            if reduced:  # a reduced still-picture header: a shown key frame, no header bits
                return "KEY_FRAME", True
            if not payload:
                raise ValueError("an empty frame header")
            if payload[0] & 0x80:
                return "show_existing_frame", True
            return AV1_FRAME_TYPES[(payload[0] >> 5) & 3], bool(payload[0] & 0x10)
    raise ValueError("it holds no frame")


def av1_sync_problem(packet: bytes, extradata: bytes = b"") -> str | None:
    """Why the AV1 temporal unit ``packet`` is not a random-access point (one line), or None when its
    first frame is a shown ``KEY_FRAME`` (see the module docstring and :func:`av1_first_frame`)."""
    try:
        kind, shown = av1_first_frame(packet, extradata)
    except ValueError as exc:
        return str(exc)
    if kind == "show_existing_frame":
        return "it shows a frame decoded earlier (show_existing_frame: a forward key frame's display, an open GOP)"
    if kind != "KEY_FRAME":
        return (f"its first frame is of type {kind}, not a KEY_FRAME (an open GOP: the frames after it may "
                "refer to frames before it)")
    if not shown:
        return ("its key frame is hidden (show_frame 0: a forward key frame, an open GOP: the frames shown "
                "before it refer to frames before it)")
    return None
