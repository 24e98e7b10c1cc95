"""Copies of a LeRobot v2.x dataset whose camera videos are re-encoded in another codec (PyAV).

LeRobot datasets in the wild carry AV1 (LeRobot's own encoder since 2024), H.264 and MPEG-4 Part 2
(OpenCV's ``mp4v`` writer, older pipelines).  The G1 data is AV1; this makes the other two from it,
so the peer benchmark can show each source codec::

    python -m benchmarks.peer.transcode SRC DEST --codec mpeg4|h264 [--crf 23] [--g N] [--qscale 3]

Runs in replaybuf's venv (PyAV), not the LeRobot one.  SRC is read only; DEST must not exist: the copy
is built in a temporary folder beside DEST and renamed into place when every video is checked.

Per camera and episode: the source mp4 is decoded (RGB, as LeRobot returns frames) and encoded the
way LeRobot 0.6.1's ``encode_video_frames`` does (``av.VideoFrame.from_ndarray(rgb)`` into a stream
of ``fps``, pts = frame index, yuv420p), with:

* ``h264``: libx264, yuv420p, ``g=2`` (LeRobot's GOP: a random frame costs at most 2 decodes, as in
  LeRobot's own AV1 datasets), ``crf=23`` (x264's default, "visually fine"; LeRobot's default
  ``crf=30`` is on SVT-AV1's 0-63 scale and would be a coarse x264 encode), x264's default preset
  (medium, B-frames allowed) -- what ``RGBEncoderConfig(vcodec="h264", g=2, crf=23)`` writes;
* ``mpeg4``: FFmpeg's MPEG-4 Part 2 encoder, yuv420p, ``g=12`` (FFmpeg's default GOP, which
  OpenCV's writer keeps), a fixed quantizer ``qscale=3`` (``-q:v 3``: qmin = qmax = 3; on the G1 data
  its PSNR against the source decode, ~39.4 dB, is about the h264 copy's, ~39.9 dB), no B-frames.

Then the copy is decoded again and checked: the same number of frames at the same times (to 1e-6 s)
as the source, else an error naming the file.  info.json's camera ``info`` gets ``video.codec``
(the codec's canonical name, as LeRobot's ``get_video_info`` writes it), ``video.pix_fmt`` and the
encoder settings (``video.g``, ``video.crf`` / ``video.extra_options``).  ``episodes_stats.jsonl``
keeps the source's image statistics (the re-encoded frames differ by the codec's error only).

Prints one JSON line: codec, settings, frames, bytes and bytes a frame of the copy's videos and of
the source's, PSNR of the copy against the source decode (RGB, all frames), seconds taken.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

#: codec name -> (PyAV encoder, default GOP)
ENCODERS = {"h264": ("libx264", 2), "mpeg4": ("mpeg4", 12)}


def _decode_rgb(path: Path) -> tuple[list[np.ndarray], list[float]]:
    """Every frame of ``path``'s first video stream as RGB (H, W, 3) uint8, and its time in seconds."""
    import av

    frames, times = [], []
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        for f in c.decode(s):
            frames.append(f.to_ndarray(format="rgb24"))
            times.append(float(f.time))
    return frames, times


def _encoder_options(codec: str, g: int, crf: float, qscale: int) -> dict[str, str]:
    if codec == "h264":
        return {"g": str(g), "crf": str(crf)}
    return {"g": str(g), "qmin": str(qscale), "qmax": str(qscale), "bf": "0"}


def _encode(frames: list[np.ndarray], path: Path, fps: int, codec: str, options: dict[str, str]) -> None:
    import av

    with av.open(str(path), "w") as out:
        s = out.add_stream(ENCODERS[codec][0], rate=fps, options=options)
        s.pix_fmt = "yuv420p"
        s.height, s.width = frames[0].shape[:2]
        s.codec_context.time_base = Fraction(1, fps)
        for i, rgb in enumerate(frames):
            f = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            f.pts, f.time_base = i, Fraction(1, fps)
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)


def _psnr_db(sq_err: float, n_values: int) -> float:
    return float("inf") if sq_err == 0 else float(10 * np.log10(255.0 ** 2 * n_values / sq_err))


def _video_keys(info: dict) -> list[str]:
    return sorted(k for k, v in info.get("features", {}).items() if v.get("dtype") == "video")


def transcode(src: Path, dest: Path, codec: str, *, g: int | None = None, crf: float = 23,
              qscale: int = 3, progress: bool = True) -> dict:
    """Write a copy of the LeRobot v2.x dataset ``src`` at ``dest`` with every camera re-encoded as
    ``codec`` ("h264" or "mpeg4"); return the summary printed by the CLI (bytes, PSNR in dB, ...).

    Raises ValueError for an unknown codec, a ``dest`` that exists, a ``src`` that is not a v2.x
    LeRobot dataset with video, or a copy whose frames or times differ from the source's (naming
    the file); nothing is left at ``dest`` then.
    """
    from tqdm import tqdm

    if codec not in ENCODERS:
        raise ValueError(f"codec {codec!r}: expected one of {sorted(ENCODERS)}")
    g = ENCODERS[codec][1] if g is None else g
    if g < 1 or crf < 0 or not 1 <= qscale <= 31:
        raise ValueError(f"g={g}, crf={crf}, qscale={qscale}: need g >= 1, crf >= 0, 1 <= qscale <= 31")
    info_path = src / "meta" / "info.json"
    if not info_path.is_file():
        raise ValueError(f"{src} is not a LeRobot dataset (no meta/info.json)")
    info = json.loads(info_path.read_text())
    if not str(info.get("codebase_version", "")).startswith("v2"):
        raise ValueError(f"{src}: codebase_version {info.get('codebase_version')!r}; only v2.x (one mp4 per "
                         "episode and camera) is transcoded")
    cameras = _video_keys(info)
    videos = {cam: sorted(src.glob(f"videos/*/{cam}/*.mp4")) for cam in cameras}
    if not cameras or not all(videos.values()):
        raise ValueError(f"{src}: no mp4 for cameras {[c for c in cameras if not videos[c]] or '(none declared)'}")
    if dest.exists():
        raise ValueError(f"{dest} exists: remove it first or choose another destination")
    dest.parent.mkdir(parents=True, exist_ok=True)
    options = _encoder_options(codec, g, crf, qscale)
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(src, work, dirs_exist_ok=True, ignore=lambda d, names: [n for n in names if n.endswith(".mp4")])
        for d, _, files in os.walk(work):  # the source may be read-only
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)
        src_bytes = out_bytes = n_frames = 0
        sq_err, n_values = 0.0, 0
        canonical = None
        todo = [(cam, p) for cam in cameras for p in videos[cam]]
        for cam, path in tqdm(todo, desc=f"transcode to {codec}", disable=not progress, file=sys.stderr):
            out_path = work / path.relative_to(src)
            out_path.parent.mkdir(parents=True, exist_ok=True)
            frames, times = _decode_rgb(path)
            _encode(frames, out_path, info["fps"], codec, options)
            again, times_again = _decode_rgb(out_path)
            if len(again) != len(frames) or not np.allclose(times_again, times, rtol=0, atol=1e-6):
                raise ValueError(f"{out_path.relative_to(work)}: the {codec} copy has {len(again)} frames at "
                                 f"{times_again[:3]}..., the source {len(frames)} at {times[:3]}...")
            for a, b in zip(frames, again):
                sq_err += float(np.sum((a.astype(np.int32) - b) ** 2))
                n_values += a.size
            src_bytes += path.stat().st_size
            out_bytes += out_path.stat().st_size
            n_frames += len(frames)
            if canonical is None:
                import av

                with av.open(str(out_path)) as c:
                    canonical = c.streams.video[0].codec.canonical_name
        for cam in cameras:
            cam_info = info["features"][cam].setdefault("info", {})
            cam_info.update({"video.codec": canonical, "video.pix_fmt": "yuv420p", "video.g": g})
            if codec == "h264":
                cam_info["video.crf"] = crf
            else:
                cam_info["video.extra_options"] = {"qscale": qscale}
        (work / "meta" / "info.json").write_text(json.dumps(info, indent=4) + "\n")
        os.rename(work, dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return {"codec": canonical, "encoder": ENCODERS[codec][0], "options": options, "src": str(src), "dest": str(dest),
            "cameras": cameras, "frames": n_frames, "bytes": out_bytes, "bytes_per_frame": out_bytes / n_frames,
            "src_bytes": src_bytes, "src_bytes_per_frame": src_bytes / n_frames, "psnr_db": _psnr_db(sq_err, n_values),
            "seconds": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path, help="LeRobot v2.x dataset folder (read only)")
    p.add_argument("dest", type=Path, help="folder to create (must not exist)")
    p.add_argument("--codec", choices=sorted(ENCODERS), required=True)
    p.add_argument("--g", type=int, default=None, help="GOP length (default: h264 2, mpeg4 12)")
    p.add_argument("--crf", type=float, default=23, help="x264 CRF (h264 only)")
    p.add_argument("--qscale", type=int, default=3, help="fixed MPEG-4 quantizer 1..31 (mpeg4 only)")
    args = p.parse_args(argv)
    try:
        result = transcode(args.src, args.dest, args.codec, g=args.g, crf=args.crf, qscale=args.qscale)
    except ValueError as e:
        p.exit(2, f"transcode: {e}\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
