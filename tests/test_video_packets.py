"""The pass-through hand-over (``layout/video_packets.py``): a chunk of frames is claimed from the
registered source packets with no packet stored twice where a run of one GOP can go on — also when a
still scene repeats a frame's pixels (AV1's "show the last frame again" packets), which before
stored each repeated frame as its own segment with its keyframe again (+61 % of the G1 camera's
bytes)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replaybuf_core.layout import video_packets as vp


def _frames(pixels: list[int]) -> list[np.ndarray]:
    return [np.full((2, 3, 3), p, np.uint8) for p in pixels]


@settings(max_examples=200, deadline=None)
@given(gops=st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=4), min_size=1, max_size=6),
       start=st.integers(0, 5), length=st.integers(1, 12))
def test_claimed_segments_decode_to_the_chunk_and_never_repeat_a_run(gops, start, length):
    """Model: each source GOP's frames have pixel values (repeats allowed); the claimed segments,
    "decoded" by taking frame ``skip + i`` of their packets, give back the chunk's frames, and no
    packet of a GOP is stored twice unless the chunk leaves that GOP and comes back."""
    vp.clear()
    with vp.session():
        sources, pixels = [], []
        for g, values in enumerate(gops):
            gop = vp.GopPackets("h264", b"", [bytes([g, i]) for i in range(len(values))])
            for i, v in enumerate(values):
                frame = _frames([v])[0]
                vp.register(frame, vp.PacketRecord(gop, i))
                sources.append((g, i))
                pixels.append(v)
        chunk_pixels = pixels[start:start + length]
        if not chunk_pixels:
            return
        segments = vp.claim(np.stack(_frames(chunk_pixels)))
        assert segments is not None
        got = []
        for codec, extra, skip, take, packets in segments:
            for k in range(skip, skip + take):
                g, i = packets[k]  # the packet's bytes name its GOP and place
                got.append(gops[g][i])
        assert got == chunk_pixels  # the segments hold frames with exactly the chunk's pixels
        # a chunk that is a stretch of one source GOP is one segment: never a frame stored apart
        # because another GOP frame has its pixels
        inside = {g for g, _ in sources[start:start + length]}
        if len(inside) == 1:
            assert len(segments) == 1 and segments[0][3] == len(chunk_pixels), segments


def test_a_repeated_frame_continues_its_gop_instead_of_storing_the_keyframe_again():
    vp.clear()
    with vp.session():
        gop = vp.GopPackets("av1", b"", [b"KEY" * 100, b"R"])  # a keyframe, then "show it again"
        a = _frames([7])[0]
        vp.register(a, vp.PacketRecord(gop, 0))
        vp.register(a.copy(), vp.PacketRecord(gop, 1))
        segments = vp.claim(np.stack([a, a]))
    assert segments == [("av1", b"", 0, 2, (b"KEY" * 100, b"R"))]  # one run, the keyframe once
