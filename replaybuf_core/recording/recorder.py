"""Recording frame by frame: a robot or simulator loop hands one frame (all keys of one step) at a
time, at its own rate, and the store keeps up in the background.

:meth:`Recorder.add_frame` checks the frame against the episode's first one, copies it and puts it on
a bounded queue — microseconds, not an encode.  One background thread takes frames off the queue in
blocks and streams them into an :class:`~replaybuf_core.store.writer.EpisodeWriter` (``add_steps``),
whose backend encodes and stores whole chunks/shards on its own threads (zarr's ``write_async``).
:meth:`save_episode` ends the episode and returns once it is committed (``meta/episode_ends``: the
writer's commit order, so a SIGKILL loses at most the episode being recorded); :meth:`discard_episode`
drops it.  Frames are never dropped: when encoding falls behind and the queue is full, ``add_frame``
blocks until there is room and warns once an episode with the lag (``lag_frames``, ``max_lag_frames``).

Each frame's time is stored in a ``timestamp`` key (float32 seconds from the episode's first frame:
the time passed in, or the recorder's clock at ``add_frame``); ``fps`` goes in the data attributes.
Intervals that stray from ``1/fps`` by more than ``tolerance`` of a period are counted and reported
when the episode is saved (``episode_reports``, a warning) — recorded as they happened, never
"corrected".
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["EpisodeReport", "Recorder", "RecorderLagWarning"]

_END, _DISCARD, _STOP = "end", "discard", "stop"

#: the stores recorders of this process record into: where (resolved path, URL or buffer id) → pid
_recording: dict[str, int] = {}
_recording_mutex = threading.Lock()


class RecorderLagWarning(UserWarning):
    """Encoding fell a full queue behind: ``add_frame`` blocked (frames are never dropped)."""


@dataclass
class EpisodeReport:
    """A saved episode: its ``index`` in the store, ``frames``, ``seconds`` (first to last frame),
    ``off_rate`` (intervals further than the tolerance from ``1/fps``), ``worst_interval_s`` and the
    frame it ended at (``worst_frame``), ``max_lag_frames`` (the queue's deepest point) and
    ``save_seconds`` (how long :meth:`Recorder.save_episode` waited)."""

    index: int
    frames: int
    seconds: float
    off_rate: int
    worst_interval_s: float
    worst_frame: int
    max_lag_frames: int
    save_seconds: float


class Recorder:
    """Record episodes frame by frame into a store (see the module docstring).

    Args:
        store: a path or URL (created if absent; an existing store is appended to) or a writable
            :class:`~replaybuf_core.ReplayBuffer` (not closed by the recorder).
        fps: the intended frame rate (Hz): stored in the data attributes, and the period the
            intervals are checked against.
        frames: the frame codec of camera keys when the store is new (default ``"fast"``: JPEG at a
            few ms a frame; ``"exact"`` for lossless JPEG XL — see the README's codec ladder); a
            store that holds keys already keeps their codecs (default None there).
        queue_seconds: how many seconds of frames may wait for the encoder before ``add_frame``
            blocks (default 2.0).
        tolerance: fraction of a period an interval may stray from ``1/fps`` before it is counted
            (default 0.5).
        clock: the time source of frames added without a time (default ``time.monotonic``).
        writer_options: passed to :meth:`ReplayBuffer.writer` (``chunks``, ``compressors``...).  A new
            store's camera keys are sharded about a second of frames a shard (``frames_per_shard``
            = ``round(fps)``, at most 256) unless given here: what keeps ``save_episode`` short.
        warn_lag: warn (:class:`RecorderLagWarning`, once) when the queue is full and ``add_frame``
            blocks (default True; a simulator that runs faster than real time blocks by design).

    Use as a context manager: leaving it normally saves nothing new and closes; leaving it by an
    exception discards the episode in progress (the saved ones stay) and re-raises.

    One recorder a store in a process: a second ``Recorder`` on the same store (its path, URL or
    buffer) while the first is open raises :class:`~replaybuf_core.errors.StoreLockedError` at
    construction (both would write the store's episodes; the writer lock only keeps other
    processes out); close the first one, or record several streams as keys of one recorder's frames.

    Raises (``add_frame``): ValueError naming the key and the frame index — a key missing or extra,
    a shape or dtype unlike the episode's first frame, a NaN or non-increasing time; the frame is not
    recorded and the episode goes on.  A failure of the background writer is raised by the next
    call, after which the recorder is closed.
    """

    def __init__(self, store: Any, fps: float, *, frames: Any = None, queue_seconds: float = 2.0,
                 tolerance: float = 0.5, clock: Callable[[], float] = time.monotonic,
                 writer_options: Mapping[str, Any] | None = None, warn_lag: bool = True):
        from replaybuf_core.store.buffer import ReplayBuffer

        if not (isinstance(fps, (int, float)) and math.isfinite(fps) and fps > 0):
            raise ValueError(f"fps must be a positive number of frames a second, got {fps!r}")
        if not queue_seconds > 0 or not 0 < tolerance:
            raise ValueError("queue_seconds and tolerance must be positive")
        self._own = not isinstance(store, ReplayBuffer)
        self._claimed = _claim(store)  # before the store is opened: nothing is made for a refused recorder
        try:
            if self._own:
                self.rb = ReplayBuffer.create_empty("zarr", store) if not _exists(store) else ReplayBuffer(store)
            else:
                self.rb = store
            self.rb._require_writable()
        except BaseException:
            _release(self._claimed)
            raise
        try:
            self._set_up(fps, frames, queue_seconds, tolerance, clock, writer_options, warn_lag)
        except BaseException:
            _release(self._claimed)
            if self._own:
                self.rb.close()
            raise

    def _set_up(self, fps, frames, queue_seconds, tolerance, clock, writer_options, warn_lag) -> None:
        self.fps, self.tolerance, self._clock = float(fps), float(tolerance), clock
        attrs = dict(self.rb.store.get_attrs("data"))
        if attrs.get("fps") not in (None, self.fps):
            raise ValueError(f"the store records at {attrs['fps']} fps; this recorder was asked for {self.fps}")
        attrs["fps"] = self.fps
        self.rb.store.set_attrs("data", attrs)
        self._frames, self._writer_options = frames, dict(writer_options or {})
        self._writer: Any = None  # made at the first frame, which says whether there are cameras
        self._queue: queue.Queue = queue.Queue(maxsize=max(2, int(round(queue_seconds * self.fps))))
        self._spec: dict[str, tuple[tuple[int, ...], np.dtype]] | None = None
        self._handed_over = False  # an episode was handed to the writer (save_episode)
        self._episode_frames = 0
        self._times: list[float] = []
        self._t0 = 0.0
        self._warn_lag = bool(warn_lag)
        self._lag_warned = not self._warn_lag
        self.max_lag_frames = 0
        self.episode_reports: list[EpisodeReport] = []
        self._error: BaseException | None = None
        self._closed = False
        self._n_saved = self.rb.n_episodes  # the index the next saved episode gets
        self._finals: list[tuple[int, dict[str, np.ndarray]]] = []  # (episode, final values) not yet in meta
        self._thread = threading.Thread(target=self._run, name="replaybuf-recorder", daemon=True)
        self._thread.start()

    # -- the loop's side -------------------------------------------------------------------------------
    @property
    def frames_in_episode(self) -> int:
        """Frames added to the episode in progress."""
        return self._episode_frames

    @property
    def lag_frames(self) -> int:
        """Frames waiting for the background writer now."""
        return self._queue.qsize()

    def add_frame(self, frame: Mapping[str, Any], timestamp: float | None = None) -> None:
        """Record one step: ``frame`` maps every key to its value for this step (an array of the
        step's shape, or a scalar); ``timestamp`` in seconds (any origin, increasing), default the
        recorder's clock now.  Returns once the frame is queued (blocking only when the queue is
        full — see the module docstring)."""
        self._check()
        t = float(self._clock() if timestamp is None else timestamp)
        i = self._episode_frames
        if not math.isfinite(t):
            raise ValueError(f"frame {i}: timestamp {t} is not a finite number of seconds")
        if self._times and t <= self._times[-1] + self._t0:
            raise ValueError(f"frame {i}: timestamp {t} s does not come after the previous frame's "
                             f"({self._times[-1] + self._t0} s)")
        values = self._checked(frame, i)
        if not self._times:
            self._t0 = t
        values["timestamp"] = np.float32(t - self._t0)
        self._put(("frame", values))
        self._times.append(t - self._t0)
        self._episode_frames += 1

    def save_episode(self, final: Mapping[str, Any] | None = None, wait: bool = True) -> EpisodeReport:
        """End the episode in progress; with ``wait`` (the default) return once it is committed to
        the store — without, at once (it commits in the background within the writer's commit
        interval, about a second; :meth:`close` waits for every one).

        ``final``: values of the step *after* the last one (a gym episode's last observation: key →
        array), appended as one row an episode to ``meta/final.<key>`` once the episode is committed —
        as the Minari import keeps them.  A kill between the commit and that row leaves the array
        one row short; a store whose episodes lack such rows gets none (a warning says so).

        Raises:
            ValueError: no frame was added since the last save (an empty episode).
        """
        self._check()
        if self._episode_frames == 0:
            raise ValueError("save_episode: no frame was added since the last episode (an empty episode is not "
                             "recorded)")
        t0 = time.perf_counter()
        done = threading.Event()
        done.final = {str(k): np.array(v, copy=True) for k, v in (final or {}).items()}
        done.wait_commit, done.index = bool(wait), self._n_saved
        self._n_saved += 1
        self._put((_END, done))
        if wait:
            done.wait()
            self._check()
        report = self._report(done.index, time.perf_counter() - t0 if wait else 0.0)
        self.episode_reports.append(report)
        if report.off_rate:
            warnings.warn(f"episode {report.index}: {report.off_rate} of {report.frames - 1} frame intervals strayed "
                          f"more than {self.tolerance:.0%} of a period from 1/{self.fps:g} s (worst "
                          f"{report.worst_interval_s * 1000:.1f} ms, before frame {report.worst_frame}); recorded as "
                          "they happened", RuntimeWarning, stacklevel=2)
        self._new_episode(saved=True)
        return report

    def discard_episode(self) -> int:
        """Drop the episode in progress (its frames queued or written); returns the frames dropped."""
        self._check()
        dropped = self._episode_frames
        if dropped:
            done = threading.Event()
            self._put((_DISCARD, done))
            done.wait()
            self._check()
        self._new_episode(saved=False)
        return dropped

    def close(self) -> None:
        """Stop the background thread (an episode in progress is discarded: call
        :meth:`save_episode` first to keep it) and close the writer, and the store when the
        recorder opened it."""
        if self._closed:
            return
        try:
            if self._episode_frames and self._error is None:
                self.discard_episode()
        finally:
            self._closed = True
            self._queue.put((_STOP, None))
            self._thread.join()
            try:
                if self._writer is not None:
                    self._writer.close()
                    if self._error is None:
                        self._drain_finals()
            finally:
                _release(self._claimed)
                if self._own:
                    self.rb.close()
        if self._error is not None:
            raise RuntimeError(f"the recorder's writer failed: {self._error!r}") from self._error

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self._episode_frames and self._error is None:
            try:
                self.discard_episode()
            except Exception:  # noqa: BLE001 - the loop's own exception is the one to raise
                logger.exception("discarding the episode in progress failed")
        self.close()

    # -- internals -----------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._error is not None:
            err = self._error
            raise RuntimeError(f"the recorder's background writer failed: {err!r}") from err
        if self._closed:
            raise RuntimeError("this Recorder is closed")

    def _checked(self, frame: Mapping[str, Any], i: int) -> dict[str, np.ndarray]:
        if not isinstance(frame, Mapping) or not frame:
            raise TypeError(f"frame {i}: add_frame takes a mapping of key -> value, got {type(frame).__name__}")
        if "timestamp" in frame:
            raise ValueError(f"frame {i}: 'timestamp' is the recorder's own key: pass the time as add_frame(..., "
                             "timestamp=t)")
        values = {str(k): np.array(v, copy=True) for k, v in frame.items()}  # the loop may reuse its buffers
        spec = {k: (v.shape, v.dtype) for k, v in values.items()}
        if self._spec is None:
            stored = self.rb.keys()
            if stored:
                want = set(stored) - {"timestamp"}
                if set(spec) != want:
                    raise ValueError(f"frame {i}: keys {sorted(spec)} differ from the store's {sorted(want)} "
                                     f"(missing {sorted(want - set(spec))}, extra {sorted(set(spec) - want)})")
            self._spec = spec
            if self._writer is None:
                self._open_writer(values)
            return values
        if set(spec) != set(self._spec):
            raise ValueError(f"frame {i}: keys differ from the first frame's: missing "
                             f"{sorted(set(self._spec) - set(spec))}, extra {sorted(set(spec) - set(self._spec))}")
        for k, (shape, dtype) in spec.items():
            if (shape, dtype) != self._spec[k]:
                raise ValueError(f"frame {i}: key {k!r} is {dtype} {shape}, the first frame's was "
                                 f"{self._spec[k][1]} {self._spec[k][0]}")
        return values

    def _open_writer(self, first: Mapping[str, np.ndarray]) -> None:
        """The writer, with ``fast`` frames for a new store's camera keys unless told otherwise."""
        frames = self._frames
        options = dict(self._writer_options)
        if not self.rb.keys():
            cameras = {k for k, v in first.items() if v.dtype == np.uint8 and v.ndim == 3 and v.shape[-1] in (1, 3, 4)}
            if frames is None:
                frames = "fast" if cameras else None
            # a recording grows without end: chunks sized for a long array, not for its first frames
            given = dict(options.get("chunks") or {})
            options["chunks"] = {**{k: _recording_chunks(v) for k, v in first.items()
                                    if k not in cameras and v.dtype != object},
                                 "timestamp": _recording_chunks(np.float32(0)), **given}
            # and camera shards of about a second: a shard's frames are encoded when it is complete or at
            # save_episode, so 256-frame shards made a save wait for up to 255 encodes a camera (0.5-0.8 s
            # for two 640x480 cameras); a second's worth keeps it under 0.1 s
            options.setdefault("frames_per_shard", int(min(256, max(1, round(self.fps)))))
        self._writer = self.rb.writer(frames=frames, **options)

    def _put(self, item) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            if not self._lag_warned:
                self._lag_warned = True
                warnings.warn(f"the recorder is {self._queue.qsize()} frames ({self._queue.qsize() / self.fps:.1f} s) "
                              "behind: encoding cannot keep up; add_frame blocks until it does (frames are never "
                              "dropped) — a faster frame codec (frames='fast') or fewer cameras would keep up",
                              RecorderLagWarning, stacklevel=3)
            while self._error is None:
                try:
                    self._queue.put(item, timeout=0.5)
                    break
                except queue.Full:
                    continue
            self._check()
        self.max_lag_frames = max(self.max_lag_frames, self._queue.qsize())

    def _new_episode(self, saved: bool) -> None:
        """Ready for the next episode.  ``saved``: the last one was handed to the writer.  Once an
        episode was, the keys stay the first frame's (the writer thread may still be creating the
        arrays: the store's keys are not yet all there).  While none was and the store has no keys
        (a discard waits for the writer thread), the next episode's first frame sets them again."""
        self._episode_frames, self._times, self._lag_warned = 0, [], not self._warn_lag
        self._handed_over = self._handed_over or saved
        if not self._handed_over and not self.rb.keys():
            self._spec = None

    def _report(self, index: int, save_seconds: float) -> EpisodeReport:
        times = np.asarray(self._times)
        dt = np.diff(times)
        off = np.abs(dt - 1.0 / self.fps) > self.tolerance / self.fps
        worst = int(np.argmax(np.abs(dt - 1.0 / self.fps))) if len(dt) else 0
        return EpisodeReport(index, len(times), float(times[-1]) if len(times) else 0.0,
                             int(off.sum()), float(dt[worst]) if len(dt) else 0.0, worst + 1,
                             self.max_lag_frames, save_seconds)

    def _run(self) -> None:
        """The background thread: frames off the queue in blocks into the writer."""
        block: list[dict[str, np.ndarray]] = []
        limit = max(8, int(self.fps // 4))  # hand the writer a quarter second of frames (8 at least) at a time

        def hand_over():
            if block:
                self._writer.add_steps({k: np.stack([f[k] for f in block]) for k in block[0]}, copy=False)
                block.clear()

        while True:
            kind, payload = self._queue.get()
            if self._error is not None:
                if isinstance(payload, threading.Event):
                    payload.set()
                if kind == _STOP:
                    return
                continue
            try:
                if kind == "frame":
                    block.append(payload)
                    # a quarter second at a time; when frames come faster than they are written (a
                    # simulator), while more wait, up to 8 times that: fewer, larger writes catch up
                    if len(block) >= limit and (self._queue.empty() or len(block) >= 8 * limit):
                        hand_over()
                        self._drain_finals()
                elif kind == _END:
                    hand_over()
                    self._writer.end_episode()
                    if payload.wait_commit:
                        self._writer.flush()
                    if payload.final:
                        self._finals.append((payload.index, payload.final))
                    self._drain_finals()
                elif kind == _DISCARD:
                    block.clear()
                    self._writer.discard_episode()
                elif kind == _STOP:
                    hand_over()
                    return
            except BaseException as exc:  # noqa: BLE001 - handed to the loop's next call
                self._error = exc
            finally:
                if isinstance(payload, threading.Event):
                    payload.set()


    def _drain_finals(self) -> None:
        """The final rows of the episodes committed so far, in order (one write a key for all of them)."""
        committed = self.rb.n_episodes
        ready = 0
        while ready < len(self._finals) and self._finals[ready][0] < committed:
            ready += 1
        if ready:
            batch, self._finals = self._finals[:ready], self._finals[ready:]
            self._append_finals(batch)

    def _append_finals(self, batch: list[tuple[int, dict[str, np.ndarray]]]) -> None:
        """Rows ``batch`` (consecutive committed episodes, each with its final values) to
        ``meta/final.<key>``: one row an episode, so row ``e`` belongs to episode ``e``."""
        s = self.rb.store
        first = batch[0][0]
        for key, value in batch[0][1].items():
            name = f"final.{key}"
            rows = [final.get(key) for _, final in batch]
            if any(r is None or r.shape != value.shape or r.dtype != value.dtype for r in rows):
                warnings.warn(f"meta/{name}: the final {key!r} of episodes {first}..{batch[-1][0]} differ in shape, "
                              "dtype or presence; not recorded", RuntimeWarning, stacklevel=2)
                continue
            if not s.has_array("meta", name):
                if first != 0:
                    warnings.warn(f"meta/{name}: the store's {first} earlier episodes have no such row; not recorded",
                                  RuntimeWarning, stacklevel=2)
                    continue
                s.create_array("meta", name, shape=(0, *value.shape), dtype=value.dtype)
            have = s.shape("meta", name)[0]
            if have != first or tuple(s.shape("meta", name)[1:]) != value.shape:
                warnings.warn(f"meta/{name} has {have} rows of shape {s.shape('meta', name)[1:]} for {first} episodes "
                              f"before these; the finals of {value.shape} not recorded", RuntimeWarning, stacklevel=2)
                continue
            s.resize("meta", name, first + len(rows))
            s.write("meta", name, first, np.stack(rows))


def _recording_chunks(first: np.ndarray) -> tuple[int, ...]:
    """Chunks of a recorded number key (``first``: one frame's value): about 256 KiB of rows, a
    power of two from 256 to 65,536 — each commit rewrites the partial last chunk, so this bounds
    that rewrite, and tiny episodes do not each make a file."""
    row = max(1, first.nbytes)
    rows = 1 << int(np.clip(np.floor(np.log2(2**18 / row)), 8, 16))
    return (rows, *first.shape)


def _where(store: Any) -> tuple[str, str]:
    """``(key, text)``: what identifies the store ``store`` names in this process — a local store by
    its resolved path, an object store by its URL, a buffer with neither by its identity — and how
    to name it in a message."""
    import os

    from replaybuf_core.locations import is_object_url

    if not isinstance(store, (str, os.PathLike)):
        found = getattr(store.store, "location", lambda: None)()
        if found is None:
            return f"buffer:{id(store.store)}", "this buffer"
        store = found[0]
    text = os.fspath(store)
    if is_object_url(text):
        return text.rstrip("/"), text
    return os.path.realpath(os.path.expanduser(text)), text


def _claim(store: Any) -> str:
    """Mark the store of ``store`` as recorded into by this process; returns its key for
    :func:`_release`.  Raises StoreLockedError when an open recorder of this process records there."""
    import os

    from replaybuf_core.errors import StoreLockedError

    key, text = _where(store)
    with _recording_mutex:
        if _recording.get(key) == os.getpid():  # (a forked child's copy of the parent's entries is not its own)
            raise StoreLockedError(
                f"another Recorder of this process is recording into {text}: close it (rec.close(), or leave its "
                "with block) before opening a second one on the same store — two recorders would both write "
                "its episodes")
        _recording[key] = os.getpid()
    return key


def _release(key: str) -> None:
    import os

    with _recording_mutex:
        if _recording.get(key) == os.getpid():
            del _recording[key]


def _exists(store: Any) -> bool:
    import os

    from replaybuf_core.locations import is_object_url

    if is_object_url(store):
        return False  # created in place; ReplayBuffer(url) would be needed to append to a bucket store
    return os.path.isdir(os.path.expanduser(str(store)))
