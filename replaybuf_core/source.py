"""What a source format provides to the import pipeline: a :class:`FormatEntrypoint` (the small named
class a plugin registers, modelled on xarray's ``BackendEntrypoint``) that opens a :class:`Source`
(what a dataset holds, and any episode by index).

A format knows how to read its files; it knows nothing about codecs, shards, verification or the
destination — :func:`replaybuf_core.importing.import_source` does that for every format alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

#: What a key holds; decides its storage (see :mod:`replaybuf_core.importing.plan`).
KINDS = ("frames", "depth", "numbers", "strings")


@dataclass(frozen=True)
class KeySpec:
    """One data key of a source.

    Attributes:
        dtype: the dtype of the values the source returns (numpy; ``object`` for strings).
        shape: the step shape (the array of an episode is ``(T,) + shape``).
        kind: ``"frames"`` (camera images, channels last: candidates for WebP, and for the proven
            uint8 conversion when not uint8), ``"depth"`` (depth maps, e.g. 16-bit: lossless Blosc,
            never WebP), ``"numbers"`` or ``"strings"``.
        attrs: what the source format says about the key (LeRobot's feature entry, video info...),
            JSON-serialisable; kept in the destination's attributes.
    """

    dtype: np.dtype
    shape: tuple[int, ...]
    kind: str = "numbers"
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        if self.kind not in KINDS:
            raise ValueError(f"KeySpec.kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def step_bytes(self) -> int:
        """Bytes of one step of this key (64 per string, a rough figure)."""
        n = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        return n * (64 if self.dtype == object else self.dtype.itemsize)


class Source:
    """An opened dataset of some format: what it holds, and any episode by index.

    Subclasses set, in ``__init__``:

    * ``keys``: key → :class:`KeySpec`, in the order the destination should list them;
    * ``episode_lengths``: int64 array, steps of each episode the source offers (index = episode
      number of the import, 0..n-1);
    * ``fps``: steps per second, or None when the format does not say;
    * ``attrs``: JSON-serialisable dataset-level attributes (tasks, statistics, robot type,
      provenance) for the destination's attributes;
    * ``skipped``: source data the format left out, each ``{"episode": ..., "reason": ...}`` (d3rlpy's
      steps after the last terminal flag), reported by the import;
    * ``unavailable``: index → why, for episodes that cannot be imported (a missing video); choosing
      one is an error naming it and ``unavailable_hint`` (the option that helps), unless
      ``skip_unavailable`` (LeRobot's ``skip_episodes_without_video``): then it is left out and
      reported.  Indices stay those of the full episode list;
    * ``notes``: one line each, what the import report should say about the source (e.g. a camera
      declared with no files, lossy source video);
    * ``key_notes``: key → lines the import report says under that key (e.g. a camera's 10-bit video
      stored as 8-bit, a display rotation not applied); a format may add to it while it reads
      (:meth:`note_key`), and the import collects it after the last read (from every Dask worker too);
    * ``frame_handling``: camera key → how its frames are stored when the format chose for it (LeRobot's
      pass-through: "passed through ..." or "re-encoded: <why>"), shown in the import report;

    and implement :meth:`read_episode`.  :meth:`iter_parts` may be overridden to stream long
    episodes in pieces (video decoding); :meth:`meta_arrays`, :meth:`episode_attrs`,
    :meth:`source_bytes`, :meth:`frame_choices`, :meth:`decline_frame_choice` and :meth:`close` have
    defaults.
    """

    format_name: ClassVar[str] = "?"

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.keys: dict[str, KeySpec] = {}
        self.episode_lengths = np.zeros(0, dtype=np.int64)
        self.fps: float | None = None
        self.attrs: dict[str, Any] = {}
        self.skipped: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.key_notes: dict[str, list[str]] = {}
        self.unavailable: dict[int, str] = {}
        self.skip_unavailable = False
        self.unavailable_hint = ""
        self.frame_handling: dict[str, str] = {}

    @property
    def n_episodes(self) -> int:
        """Episodes the source lists (``len(episode_lengths)``), unavailable ones included."""
        return len(self.episode_lengths)

    def read_episode(self, index: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        """Episode ``index`` (0 <= index < n_episodes) as key → array ``(T,) + keys[key].shape`` of
        ``keys[key].dtype`` (only ``keys`` when given).  Random access: any order, any thread that
        holds its own Source.  Raises IndexError for a bad index; a format's error (ValueError)
        naming the episode and the file for unreadable data."""
        raise NotImplementedError

    def iter_parts(self, index: int, keys: list[str], max_rows: int) -> Iterator[dict[str, np.ndarray]]:
        """Episode ``index`` in consecutive parts of at most ``max_rows`` steps (every key in each
        part, equal lengths).  The default reads the episode whole and slices it; a format whose
        episodes may not fit in memory (video) streams them."""
        episode = self.read_episode(index, keys)
        n = int(self.episode_lengths[index])
        for start in range(0, n, max(1, int(max_rows))):
            yield {k: v[start:start + max_rows] for k, v in episode.items()}

    def read_rows(self, index: int, keys: list[str], start: int, stop: int) -> dict[str, np.ndarray]:
        """Steps ``[start, stop)`` of episode ``index`` (``0 <= start <= stop <= its length``), as
        :meth:`read_episode` gives them; a distributed import reads the rows of one span this way.
        The default slices :meth:`iter_parts`; a format with random access to rows overrides it."""
        out: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        row = 0
        for part in self.iter_parts(index, keys, max(1, stop - start)):
            n = len(part[keys[0]]) if keys else 0
            if row + n > start and row < stop:
                for k in keys:
                    out[k].append(part[k][max(0, start - row): stop - row])
            row += n
            if row >= stop:
                break
        return {k: np.concatenate(v) if len(v) != 1 else v[0] for k, v in out.items() if v}

    def read_pieces(self, key: str, pieces: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """The rows of ``key`` of each piece ``(episode index, start, stop)``, in order (a distributed
        import's span: the end of one episode, whole episodes, the start of another).  The default
        calls :meth:`read_rows` per piece; a format that stores episodes back to back overrides it to
        read neighbouring pieces at once (each stored object decoded once)."""
        return [self.read_rows(i, [key], a, b)[key] for i, a, b in pieces]

    def iter_episodes(self, indices: list[int], keys: list[str], max_rows: int
                      ) -> Iterator[tuple[int, Iterator[dict[str, np.ndarray]]]]:
        """``(index, parts)`` for each of ``indices`` in order (the import streams them this way).
        The default calls :meth:`iter_parts`; a format that reads its files sequentially (shared
        chunks across episodes) overrides it to decode each stored object once."""
        for i in indices:
            yield i, self.iter_parts(i, keys, max_rows)

    def episode_id(self, index: int) -> int:
        """The source's own number of episode ``index`` (LeRobot's ``episode_index``; by default
        ``index``), kept in ``meta/source_episode_index``."""
        return int(index)

    def episode_attrs(self, index: int) -> dict[str, Any]:
        """JSON-serialisable attributes of episode ``index`` (its tasks, its source index and name,
        per-episode statistics...); kept as one JSON string per episode in ``meta/episode_attrs``."""
        return {}

    def episode_meta(self, indices: list[int]) -> dict[str, np.ndarray]:
        """Meta arrays with one row per episode, for the episodes ``indices`` in that order (masks
        such as robomimic's ``train``/``valid``, final observations, per-episode values); the
        import writes them beside ``episode_ends`` so they follow the episodes chosen."""
        return {}

    def meta_arrays(self) -> dict[str, np.ndarray]:
        """Arrays to copy as they are into the destination's ``meta`` group (never ``episode_ends``)."""
        return {}

    def source_bytes(self) -> int:
        """Bytes on disk of the source (for the report's size comparison)."""
        return _disk_bytes(self.path)

    def frame_choices(self, choices: dict[str, Any]) -> dict[str, Any]:
        """The frame codec of each camera: ``choices`` (key → ``FrameChoice``, what ``frames=`` asked for)
        with the cameras the source stores its own way replaced (LeRobot's pass-through: a ``FrameChoice``
        with ``passthrough=True``).  Default: ``choices`` unchanged."""
        return choices

    def decline_frame_choice(self, key: str, reason: str) -> None:
        """The import could not keep camera ``key`` the source's own way (:meth:`frame_choices`; e.g. a
        pass-through whose stored packets did not decode to the source's frames, ``reason`` saying how):
        it starts again with ``key`` stored by the ``frames=`` codec, and the source reads it for that.
        Default: ``frame_handling[key]`` says so."""
        self.frame_handling[key] = f"re-encoded with the frames= codec: {reason}"

    def note_key(self, key: str, text: str) -> None:
        """Add ``text`` to ``key_notes[key]`` (once)."""
        notes = self.key_notes.setdefault(key, [])
        if text not in notes:
            notes.append(text)

    def frame_bytes(self, key: str, indices: list[int] | None = None) -> float | None:
        """Bytes one frame of camera ``key`` takes in the source for the episodes ``indices`` (None:
        all), e.g. their video files' bytes over their frames, or None when the format cannot tell; the
        import report compares the stored frames' bytes with it."""
        return None

    def close(self) -> None:
        """Release open files."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _disk_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


class FormatEntrypoint:
    """What a format plugin registers (through the ``replaybuf_formats`` hook): a small named class.

    Subclasses set :attr:`name` (used on the command line: ``replaybuf import NAME SRC DST``),
    :attr:`description`, :attr:`requires` (the pip extra that installs what it reads with, for the
    message shown when it is missing) and implement :meth:`guess_can_open` and :meth:`open`.
    :meth:`add_arguments` lets a format add its own ``replaybuf import`` options.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    requires: ClassVar[str | None] = None

    def guess_can_open(self, path: str | os.PathLike) -> bool:
        """True when ``path`` looks like this format (cheap: a marker file, a suffix; never raises)."""
        return False

    def open(self, path: str | os.PathLike, **options: Any) -> Source:
        """Open ``path`` as a :class:`Source`.  Raises FileNotFoundError, ValueError (not this
        format, or malformed, naming the file), ImportError (an optional reader missing, naming the
        extra to install), TypeError for an unknown option."""
        raise NotImplementedError

    def might_open(self, path: str | os.PathLike) -> bool:
        """True when ``path`` looks like this format by what needs no optional reader (a file
        signature, a marker file): used to say which extra to install when :meth:`guess_can_open`
        cannot look inside (its reader missing).  Never raises."""
        return False

    def add_arguments(self, group) -> list[str]:
        """Add this format's ``replaybuf import`` options to the argparse ``group``; return their
        ``dest`` names (passed to :meth:`open` as keyword options when set)."""
        return []
