"""Writes through a lossy frame codec: which keys they concern, and what an edit re-encoded.

A camera key stored with a lossy frame codec (JPEG — ``--frames fast`` —, lossy WebP, the video
codec, pass-through video) changes its pixels whenever its rows are written again: the codec encodes
the decoded pixels a second time (a second generation; measured 27–37 dB for video).  A copy or a
conversion into such a codec, and an edit that moves rows of such a key, therefore change the pixels
of frames the user did not touch.  What follows from that:

* the stored frame statistics of such a key are brought to the written pixels
  (:func:`replaybuf_core.store.stored_stats.rehistogram` after a copy or conversion, the edit's
  histogram update otherwise), so ``replaybuf verify`` passes;
* an edit rewrites such a key from its first changed *chunk* (not shard) on, from a lossless backup
  (one generation, not two), and says per key how many kept frames it re-encoded and their worst
  PSNR against the frames before the edit (:class:`EditReport`).

A codec is lossy when it says so: the frame codecs carry ``lossless`` (False for JPEG and video, the
WebP codec's setting); any codec without the attribute (Blosc, none) is lossless.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replaybuf_core.protocol import CAP_CODECS, StorageBackend
from replaybuf_core.stats.kernels import channel_histograms
from replaybuf_core.stats.summaries import FRAME_BLOCK_BYTES

__all__ = ["EditReport", "ReencodedFrames", "frame_histogram", "is_lossy", "lossy_keys", "measure_tail", "worst_psnr"]


def is_lossy(codec: Any) -> bool:
    """True when writing through ``codec`` may change the values written (its ``lossless`` is False)."""
    return getattr(codec, "lossless", True) is False


def lossy_keys(store: StorageBackend, keys: list[str] | None = None) -> list[str]:
    """The data keys of ``store`` (``keys``, default all) stored with a lossy codec; none on a backend
    without codecs."""
    if CAP_CODECS not in store.capabilities:
        return []
    names = store.list_arrays("data") if keys is None else keys
    return [k for k in names if is_lossy(store.codec("data", k))]


def worst_psnr(before: np.ndarray, after: np.ndarray) -> float:
    """The lowest per-frame PSNR (dB, peak 255) of uint8 frames ``after`` against ``before`` (same
    shape ``(n, ...)``); ``inf`` when every frame is identical or ``n`` is 0."""
    if not len(before):
        return math.inf
    diff = before.astype(np.float64) - after.astype(np.float64)
    mse = np.mean((diff * diff).reshape(len(before), -1), axis=1)
    worst = float(mse.max())
    return math.inf if worst == 0 else 10 * math.log10(255.0 ** 2 / worst)


def frame_histogram(store: StorageBackend, key: str, start: int, stop: int, group: str = "data") -> np.ndarray:
    """int64 (C, 256): per-channel value counts of rows ``[start, stop)`` of the uint8 frame key
    ``data/key``, read in blocks of about 8 MB."""
    shape = tuple(store.shape(group, key))
    hist = np.zeros((int(shape[-1]), 256), dtype=np.int64)
    per = max(1, FRAME_BLOCK_BYTES // max(1, int(np.prod(shape[1:], dtype=np.int64))))
    for a in range(start, stop, per):
        channel_histograms(np.asarray(store.read(group, key, a, min(stop, a + per))), hist)
    return hist


def measure_tail(store: StorageBackend, key: str, new_n: int) -> Any:
    """For a shrink of the lossy frame key ``data/key`` to ``new_n`` rows (``drop_episode``), which
    re-encodes the kept frames of the chunk holding the new end: call before the shrink; the returned
    function, called after it, gives the :class:`ReencodedFrames` (its histograms for the stored
    statistics).  Holds at most one chunk of frames."""
    chunks = store.chunks("data", key) if hasattr(store, "chunks") else None
    first = (new_n // int((chunks or (1,))[0] or 1)) * int((chunks or (1,))[0] or 1)
    old_hist = frame_histogram(store, key, first, int(store.shape("data", key)[0]))
    before = np.asarray(store.read("data", key, first, new_n))

    def after() -> ReencodedFrames:
        now = np.asarray(store.read("data", key, first, new_n))
        new_hist = np.zeros_like(old_hist)
        channel_histograms(now, new_hist)
        return ReencodedFrames(key, first, new_n - first, worst_psnr(before, now) if len(now) else math.nan,
                               old_hist, new_hist)

    return after


@dataclass
class ReencodedFrames:
    """What an edit did to one lossy frame key.

    Attributes:
        key: the data key.
        first_row: first row (of the edited store) it rewrote; rows before it kept their bytes.
        frames: kept frames it re-encoded (rows ``[first_row, n_steps)`` of the edited store).
        worst_psnr_db: the lowest PSNR of those frames against the same frames before the edit
            (``inf``: all identical; ``nan``: none re-encoded).
        old_hist, new_hist: int64 (C, 256) per-channel value counts of the rewritten rows before the
            edit (every old row from ``first_row`` on, deleted ones too) and after it (for the stored
            statistics); empty (0, 256) when the frames were moved as stored bytes.
        moved: frames moved as stored bytes (rows ``[first_row, first_row + moved)`` of the edited
            store: a one-frame codec's chunks whole, a video chunk's packets re-cut;
            :mod:`replaybuf_core.store.row_moves`), bit for bit the frames they were; 0 when the
            rows were decoded and encoded.
        unplanned: the backend could not move the rows as planned and they were re-encoded; the
            stored statistics of the key are recomputed on the next ``get_stats``.
    """

    key: str
    first_row: int
    frames: int
    worst_psnr_db: float
    old_hist: np.ndarray = field(repr=False)
    new_hist: np.ndarray = field(repr=False)
    moved: int = 0
    unplanned: bool = False

    def describe(self) -> str:
        """One line for the CLI: how many kept frames were re-encoded, and how well."""
        if not self.frames and self.moved:
            return (f"{self.key}: 0 frames re-encoded; {self.moved} kept frame(s) moved as stored bytes (rows "
                    f"{self.first_row}..{self.first_row + self.moved - 1} of the edited store, bit for bit as before)")
        if not self.frames:
            return f"{self.key}: no kept frame was re-encoded (the edit starts on a chunk boundary)"
        quality = "identical to before" if math.isinf(self.worst_psnr_db) else \
            f"worst PSNR {self.worst_psnr_db:.1f} dB against before the edit"
        return (f"{self.key}: {self.frames} kept frame(s) re-encoded by its lossy codec (rows {self.first_row}.."
                f"{self.first_row + self.frames - 1} of the edited store; {quality})")


@dataclass
class EditReport:
    """What an edit of a :class:`~replaybuf_core.ReplayBuffer` did (``delete_episodes``,
    ``keep_episodes`` and ``trim_episode`` return it).

    Attributes:
        kind: the verb.
        n_episodes, n_steps: ``(before, after)`` each.
        reencoded: per data key with a lossy frame codec that the edit rewrote, a
            :class:`ReencodedFrames` (empty when the edit changed nothing or the store has no lossy
            frames): its ``frames`` the kept frames re-encoded (0 when they were moved as stored
            bytes: ``moved``).
    """

    kind: str
    n_episodes: tuple[int, int]
    n_steps: tuple[int, int]
    reencoded: dict[str, ReencodedFrames] = field(default_factory=dict)

    @property
    def frames_reencoded(self) -> int:
        """Kept frames the edit re-encoded, over every lossy frame key (0: every kept frame is bit for
        bit what it was)."""
        return sum(r.frames for r in self.reencoded.values())

    def lines(self) -> list[str]:
        """The notes worth printing: one per lossy key whose kept frames were re-encoded or moved."""
        return [f"note: {r.describe()}" for r in self.reencoded.values() if r.frames or r.moved]
