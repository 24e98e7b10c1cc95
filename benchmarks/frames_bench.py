"""Frame codecs on natural camera frames: bytes a frame, encode and decode frames/s on one core, PSNR.

Data (read-only, decoded with PyAV): the GR00T sample's h264 camera (256×256, natural rendered
scenes), and a 640×480 stand-in for a real robot camera — a mosaic of 3×2 GR00T frames from
different episodes at the same time index, cropped to 640×480 (native-resolution texture, no
upscaling, which would smooth the frames and flatter every codec).  Push-T's flat 96×96 frames are
measured too, to show how much they flatter a codec; and 96×96 / 128×128 crops of the GR00T frames for
the exact tier of small frames (lossless WebP method 1 up to 96×96, JPEG XL above).  Each codec is called through its zarr codec's
``encode_frame`` / ``decode_frame`` — the path imports and reads take — on one thread.
Goals (issue 29): exact encode ≤ 10 ms a 640×480 frame at ≤ 1.2× lossless WebP's bytes; fast tier
≥ 500 frames/s/core encode, ≥ 800 decode, PSNR ≥ 40 dB.
"""

from __future__ import annotations

import time

import numpy as np

from .common import PUSHT, Table

GR00T = PUSHT.parent / "lerobot_v2_gr00t_picknplace"


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0 ** 2 / mse))


def natural_frames(n: int, step: int) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``(256×256 frames, 640×480 mosaics, mp4 bytes a frame)`` from the GR00T sample — ``n`` frames,
    every ``step``-th of each video — or None without PyAV or the sample."""
    try:
        import av
    except ImportError:
        return None
    videos = sorted(GR00T.glob("videos/*/*/*.mp4"))
    if not videos:
        return None
    episodes, total = [], 0
    for v in videos:
        with av.open(str(v)) as c:
            total += c.streams.video[0].frames
            frames = []
            for f in c.decode(video=0):
                frames.append(f.to_ndarray(format="rgb24"))
                if len(frames) == step * n:
                    break
            episodes.append(frames)
    times = range(0, step * n, step)
    small = np.stack([episodes[0][t] for t in times])

    def mosaic(t: int) -> np.ndarray:
        rows = [np.concatenate([episodes[(r * 3 + c) % len(episodes)][t] for c in range(3)], axis=1) for r in range(2)]
        return np.ascontiguousarray(np.concatenate(rows, axis=0)[:480, :640])

    mp4 = sum(v.stat().st_size for v in videos) / total
    return small, np.stack([mosaic(t) for t in times]), mp4


def _codecs() -> dict[str, object]:
    from replaybuf_core.layout.frame_choice import parse_frame_choice
    from replaybuf_zarr.frame_choice import zarr_frame_codec

    names = ["webp", "exact", "webp:m1", "jpegxl:2", "fast", "jpeg:90", "jpeg420:95", "webp:90"]
    return {n: zarr_frame_codec(parse_frame_choice(n)) for n in names}


def _measure(codec, frames: np.ndarray) -> tuple[float, float, float, float]:
    """(bytes a frame, encode s a frame, decode s a frame, worst PSNR dB) on one thread."""
    chunks = [f[None] for f in frames]
    t = time.perf_counter()
    data = [codec.encode_frame(c) for c in chunks]
    enc = (time.perf_counter() - t) / len(chunks)
    t = time.perf_counter()
    out = [codec.decode_frame(d, c.shape) for d, c in zip(data, chunks)]
    dec = (time.perf_counter() - t) / len(chunks)
    worst = min(_psnr(c, o) for c, o in zip(chunks, out))
    return float(np.mean([len(d) for d in data])), enc, dec, worst


def run(table: Table, smoke: bool) -> None:
    n = 4 if smoke else 24
    got = natural_frames(n, 1 if smoke else 12)
    if got is None:
        table.add("frames", f"skipped: no PyAV or no {GR00T}", 0, "")
        return
    small, big, mp4 = got
    sets = {"640x480": big, "256x256": small, "128x128 crops": np.ascontiguousarray(small[:, 64:192, 64:192]),
            "96x96 crops": np.ascontiguousarray(small[:, 80:176, 80:176])}
    if PUSHT.is_dir():
        import zarr

        sets["Push-T 96x96"] = zarr.open_group(PUSHT, mode="r")["data/img"][:n].astype(np.uint8)
    results = {}
    for label, frames in sets.items():
        for name, codec in _codecs().items():
            size, enc, dec, worst = results[label, name] = _measure(codec, frames)
            q = "exact" if worst == float("inf") else f"{worst:.1f} dB"
            table.add("frames", f"{label} {name}: KB a frame ({q})", size / 1e3, "KB", "{:.1f}")
            table.add("frames", f"{label} {name}: encode frames/s/core", 1 / enc, "fps", "{:.0f}")
            table.add("frames", f"{label} {name}: decode frames/s/core", 1 / dec, "fps", "{:.0f}")
    table.add("frames", "256x256 the source's h264 mp4: KB a frame", mp4 / 1e3, "KB", "{:.1f}")
    v = _video_rows(table, smoke)
    table.ratio("frames", "256x256 video bytes / the source mp4's (h264, re-encoded)", v / mp4, "(shown)", True)
    ex, wp, fast = results["640x480", "exact"], results["640x480", "webp"], results["640x480", "fast"]
    table.ratio("frames", "640x480 exact encode ms a frame", ex[1] * 1e3, "<= 10", ex[1] * 1e3 <= 10)
    table.ratio("frames", "640x480 exact bytes / lossless WebP bytes", ex[0] / wp[0], "<= 1.2", ex[0] / wp[0] <= 1.2)
    table.ratio("frames", "640x480 fast encode frames/s/core", 1 / fast[1], ">= 500", 1 / fast[1] >= 500)
    table.ratio("frames", "640x480 fast decode frames/s/core", 1 / fast[2], ">= 800", 1 / fast[2] >= 800)
    table.ratio("frames", "640x480 fast worst PSNR dB", fast[3], ">= 40", fast[3] >= 40)
    # the exact tier of small frames (<= 96x96 px): lossless WebP method 1 instead of JPEG XL e1
    for label in ("96x96 crops", "Push-T 96x96"):
        if (label, "webp:m1") not in results:
            continue
        w, j = results[label, "webp:m1"], results[label, "exact"]
        table.ratio("frames", f"{label}: webp:m1 decode speed / JPEG XL e1's", j[2] / w[2], ">= 1.3 (small exact)",
                    j[2] / w[2] >= 1.3)
        table.ratio("frames", f"{label}: webp:m1 bytes / JPEG XL e1's", w[0] / j[0], "<= 1.15", w[0] / j[0] <= 1.15)
    for label in ("128x128 crops", "256x256"):  # why exact stays JPEG XL above 96x96
        w, j = results[label, "webp:m1"], results[label, "exact"]
        table.ratio("frames", f"{label}: webp:m1 decode speed / JPEG XL e1's", j[2] / w[2], "(shown)", True)
        table.ratio("frames", f"{label}: webp:m1 encode time / JPEG XL e1's", w[1] / j[1], "(shown)", True)
    r = results["256x256", "fast"][0] / mp4
    table.ratio("frames", "256x256 fast bytes / the source mp4's", r, "<= 4 (the compact tier is video)", r <= 4)


def _video_rows(table: Table, smoke: bool) -> float:
    """The video tier on consecutive frames (a GOP needs motion, not every 12th frame): one chunk of G
    frames a call, one thread; LeRobot's own encoding (AV1, G 2, crf 30, SVT preset 12) through the same
    codec for comparison.  Returns the default video tier's bytes a 256×256 frame."""
    from replaybuf_zarr.codecs.video import VideoCodec

    small, big, _ = natural_frames(16 if smoke else 48, 1)
    codecs = {"video (h264 crf 18 g8)": VideoCodec(), "video:av1 (crf 30 g8)": VideoCodec(codec="av1"),
              "LeRobot's AV1 (crf 30 g2 preset 12)": VideoCodec(codec="av1", gop=2, preset="12")}
    sizes = {}
    for label, frames in (("640x480", big), ("256x256", small)):
        for name, codec in codecs.items():
            g = codec.gop
            chunks = [frames[i:i + g] for i in range(0, len(frames) - len(frames) % g, g)]
            n = g * len(chunks)
            t = time.perf_counter()
            data = [codec.encode_frame(c) for c in chunks]
            enc = (time.perf_counter() - t) / n
            t = time.perf_counter()
            out = [codec.decode_frame(d, c.shape) for d, c in zip(data, chunks)]
            dec = (time.perf_counter() - t) / n
            db = _psnr(np.concatenate(chunks), np.concatenate(out))
            sizes[label, name] = sum(map(len, data)) / n
            table.add("frames", f"{label} {name}: KB a frame ({db:.1f} dB)", sizes[label, name] / 1e3, "KB", "{:.1f}")
            table.add("frames", f"{label} {name}: encode frames/s/core", 1 / enc, "fps", "{:.0f}")
            table.add("frames", f"{label} {name}: decode frames/s/core", 1 / dec, "fps", "{:.0f}")
    return sizes["256x256", "video (h264 crf 18 g8)"]
