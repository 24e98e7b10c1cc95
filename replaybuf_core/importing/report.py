"""What an import did, key by key, and what its checks found (:class:`ImportReport`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class KeyReport:
    """What happened to one data key.

    ``exact``: True when the destination, cast back to the source dtype, is bit-identical to the
    source in every episode; False when an episode differs; None for lossy keys (see ``psnr_db``,
    dB over the whole key, and ``min_episode_psnr_db``, the worst episode; ``inf`` when identical).
    Camera frames: ``bytes_per_frame`` stored (None when the backend cannot tell) and
    ``source_bytes_per_frame``, of the imported episodes (None when the format cannot tell, e.g.
    frames inside an HDF5 file).  ``source_notes``: what the source format said about this key
    (``Source.key_notes``: a camera's bit depth or rotation the stored frames do not keep...).
    """

    key: str
    shape: tuple[int, ...]
    source_dtype: str
    stored_dtype: str
    codec: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    converted: bool = False
    lossy: bool = False
    exact: bool | None = None
    psnr_db: float | None = None
    min_episode_psnr_db: float | None = None
    note: str | None = None
    bytes_per_frame: float | None = None
    source_bytes_per_frame: float | None = None
    source_notes: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    """Result of an import (:func:`replaybuf_core.importing.import_source`).

    ``problems`` lists every failed check (each names the key and, for data, the episode); ``ok`` is
    True when it is empty.  Byte counts are bytes on disk (a file's size or the sum of a directory's
    files); ``seconds`` is wall time of the whole import including verification.  ``notes``: what
    the source format said about the source (lossy video, a camera with no files...);
    ``skipped_episodes``: source episodes left out, each ``{"episode": ..., "reason": ...}``;
    ``frame_handling``: camera → how the format stored it when it chose (LeRobot's ``video="passthrough"``:
    ``"passed through: ..."`` or ``"re-encoded with the frames= codec: <why>"``);
    ``resumed``: ``(kept, episodes)`` when the import continued a stopped run's build
    (:mod:`~replaybuf_core.importing.resume`): ``kept`` of its ``episodes`` were already imported
    and were neither read nor written again; None for an import from the start.
    """

    src: str
    dst: str
    n_episodes: int
    n_steps: int
    keys: dict[str, KeyReport]
    meta_keys: list[str]
    problems: list[str] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    #: source indices of the zero-length episodes left out (``drop_empty_episodes=True``)
    dropped_empty_episodes: list[int] = field(default_factory=list)
    skipped_episodes: list[dict[str, Any]] = field(default_factory=list)
    skipped_keys: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    frame_handling: dict[str, str] = field(default_factory=dict)
    format: str = ""
    source_bytes: int = 0
    #: episodes in the source (the import may have taken some of them: ``episodes=``)
    source_episodes: int = 0
    stored_bytes: int = 0
    seconds: float = 0.0
    resumed: tuple[int, int] | None = None

    @property
    def ok(self) -> bool:
        """True when every check passed (``problems`` is empty)."""
        return not self.problems

    def summary(self) -> str:
        """Human-readable multi-line summary (what the CLI prints)."""
        fmt = f" ({self.format})" if self.format else ""
        lines = [f"imported {self.src}{fmt} -> {self.dst}: {self.n_episodes} episodes, {self.n_steps} steps "
                 f"in {self.seconds:.1f} s"]
        if self.resumed is not None:
            lines.append(f"  resumed: {self.resumed[0]} of {self.resumed[1]} episodes were already imported (kept from "
                         "a stopped run)")
        width = max([12] + [len(k) for k in self.keys])
        for r in self.keys.values():
            dt = r.source_dtype if r.source_dtype == r.stored_dtype else f"{r.source_dtype}->{r.stored_dtype}"
            if r.lossy:
                check = (f"PSNR {r.psnr_db:.2f} dB (worst episode {r.min_episode_psnr_db:.2f} dB)"
                         if r.psnr_db is not None else "not checked")
            else:
                check = {True: "bit-exact", False: "MISMATCH", None: "not checked"}[r.exact]
            lines.append(f"  {r.key:<{width}} {str(r.shape):<22} {dt:<16} {r.codec:<44} {check}")
            if r.bytes_per_frame is not None:
                src = ""
                if r.source_bytes_per_frame:
                    src = (f", {r.bytes_per_frame / r.source_bytes_per_frame:.1f}x the source's "
                           f"{_kb(r.source_bytes_per_frame)}")
                lines.append(f"  {'':<{width}} frames: {_kb(r.bytes_per_frame)} a frame{src}")
                hint = _flat_frames_hint(r)
                if hint:
                    lines.append(f"  {'':<{width}} hint: {hint}")
            for note in ([r.note] if r.note else []) + r.source_notes:
                lines.append(f"  {'':<{width}} note: {note}")
        lines.append(f"  meta: {', '.join(self.meta_keys)}")
        for key, how in self.frame_handling.items():
            lines.append(f"  video: {key}: {how}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        if self.skipped_keys:
            lines.append(f"  left out (as asked): {', '.join(self.skipped_keys)}")
        for msg in self.restarts:
            lines.append(f"  restart: {msg}")
        if self.dropped_empty_episodes:
            lines.append(f"  dropped {len(self.dropped_empty_episodes)} zero-length source episode(s): "
                         f"{_some(self.dropped_empty_episodes)}")
        if self.skipped_episodes:
            lines.append(f"  skipped {len(self.skipped_episodes)} source episode(s):")
            lines.extend(f"    episode {s['episode']}: {s['reason']}" for s in self.skipped_episodes[:20])
            if len(self.skipped_episodes) > 20:
                lines.append(f"    ... ({len(self.skipped_episodes) - 20} more)")
        size = f"bytes on disk: source {self.source_bytes:,}, destination {self.stored_bytes:,}"
        if self.source_episodes and self.n_episodes < self.source_episodes:  # a part: no ratio to the whole
            lines.append(f"bytes on disk: source {self.source_bytes:,} (all {self.source_episodes} episodes), "
                         f"destination {self.stored_bytes:,} ({self.n_episodes} of them)")
        elif not (self.source_bytes and self.stored_bytes):
            lines.append(size)
        elif self.source_bytes >= self.stored_bytes:
            lines.append(f"{size} ({self.source_bytes / self.stored_bytes:.2f}x smaller)")
        else:
            lines.append(f"{size} ({self.stored_bytes / self.source_bytes:.2f}x larger)")
        if self.ok:
            lossy = [r.key for r in self.keys.values() if r.lossy]
            how = (f"; lossy {', '.join(lossy)} by PSNR, the rest bit for bit" if lossy else ", bit for bit")
            lines.append(f"verification: OK (every array checked against the source{how})")
        else:
            lines.append(f"verification: FAILED ({len(self.problems)} problem(s))")
            lines.extend(f"  - {p}" for p in self.problems)
        return "\n".join(lines)


#: frames JPEG XL stores in fewer bits a pixel than this are flat (rendered, synthetic scenes)
FLAT_BITS_PER_PIXEL = 2.0


def _flat_frames_hint(r: KeyReport) -> str | None:
    """For lossless JPEG XL frames that are flat (fewer than :data:`FLAT_BITS_PER_PIXEL` bits a pixel):
    lossless WebP is the better codec there — measured on Push-T's 96×96 frames (0.9 bits a pixel):
    as fast to encode, ~half the bytes, ~3× faster to decode; on natural camera frames (4–5 bits a
    pixel) it encodes 10–150× slower, so it is not the default."""
    if not r.codec.startswith("replaybuf.jpegxl") or not r.bytes_per_frame or len(r.shape) < 3:
        return None
    bpp = r.bytes_per_frame * 8 / (r.shape[1] * r.shape[2])
    if bpp >= FLAT_BITS_PER_PIXEL:
        return None
    return (f"flat frames ({bpp:.1f} bits a pixel): lossless WebP (--frames webp:m1, or rechunk --frames webp:m1) "
            "stores such frames smaller and decodes them ~3x faster, encoding as fast")


def _kb(n: float) -> str:
    return f"{n / 1e3:.1f} KB" if n >= 1e3 else f"{n:.0f} B"


def _some(xs: list) -> str:
    return f"{xs[:20]}{' ...' if len(xs) > 20 else ''}"
