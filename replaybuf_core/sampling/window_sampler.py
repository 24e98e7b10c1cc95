"""Per-key windows around an anchor step: LeRobot's ``delta_timestamps`` and diffusion_policy's horizons.

Every sample is an *anchor* step ``t`` of an episode; each sampled key is read at its own step
offsets ``t + d`` (``{"img": [-1, 0], "state": [-1, 0], "action": range(-1, 15)}``), so only the
steps asked for are read and returned — (B, 2, 96, 96, 3) for the images, not (B, 16, ...).
Two rules choose the anchors:

* **LeRobot's** (``pad_before=pad_after=None``, the default; ``lerobot/datasets/lerobot_dataset.py``,
  ``get_delta_indices`` / ``_get_query_indices``): every step of every chosen episode is an anchor;
  offsets outside the episode are clamped to its first / last step and flagged in
  ``<key>_is_pad``.
* **diffusion_policy's** (``pad_before`` / ``pad_after`` given; ``diffusion_policy/common/sampler.py``):
  the whole window — from the smallest offset of any key to the largest — may overhang the episode
  start by at most ``pad_before`` steps and its end by at most ``pad_after`` (each clamped to the
  window length - 1, so a window always holds a real step).  With offsets ``range(-n_obs + 1,
  horizon - n_obs + 1)`` this gives exactly the windows of ``SequenceSampler(horizon, pad_before,
  pad_after)``, and each key's values equal the first slots of that sampler's (``key_first_k``).

Padding (``pad_mode``): ``"edge"`` repeats the episode's first / last step (LeRobot's clamp; also
diffusion_policy's edge padding), ``"zero"`` writes 0 / False / "".  This module never imports torch.
"""

from __future__ import annotations

import numbers
from typing import Any, Mapping, Sequence

import numpy as np

from replaybuf_core.layout.frame_convert import FrameConversion
from replaybuf_core.layout.frame_resize import FrameResize, parse_resize
from replaybuf_core.layout.frames import frame_keys
from replaybuf_core.protocol import Pending, distinct
from replaybuf_core.sampling.arena import OutputArena
from replaybuf_core.sampling.sampler import _pad_value, _sample_dtype, array_like
from replaybuf_core.sampling.sampler_indices import _check_int, validate_index_args
from replaybuf_core.sampling.window_index import MAX_OFFSET, WindowIndex
from replaybuf_core.store.buffer_dtypes import check_dtypes

__all__ = ["WindowSampler", "PendingBatch", "delta_timestamps_to_steps", "IS_PAD_SUFFIX"]

#: ``<key> + IS_PAD_SUFFIX`` holds the padding flags of ``key`` (LeRobot's name).
IS_PAD_SUFFIX = "_is_pad"


def delta_timestamps_to_steps(delta_timestamps: Mapping[str, Sequence[float]], fps: float,
                              tolerance_s: float = 1e-4) -> dict[str, np.ndarray]:
    """LeRobot's ``delta_timestamps`` (seconds) as step offsets at ``fps``.

    Same rule as LeRobot's ``check_delta_timestamps`` / ``get_delta_indices``: every delta must be a
    multiple of ``1 / fps`` within ``tolerance_s`` seconds; the offset is ``round(delta * fps)``.

    Args:
        delta_timestamps: ``{key: [seconds, ...]}``, e.g. ``{"action": [i / 10 for i in range(16)]}``.
        fps: frames per second of the store, > 0.
        tolerance_s: allowed distance in seconds from a multiple of ``1 / fps``, >= 0.

    Returns:
        ``{key: int64 array (n_key,)}`` of step offsets.

    Raises:
        ValueError: ``fps`` <= 0, a negative tolerance, an empty or non-numeric list, or a delta
            that is not a multiple of ``1 / fps`` (the message names the key and the delta).
    """
    fps = float(fps)
    if not (fps > 0 and np.isfinite(fps)):
        raise ValueError(f"fps must be a finite number > 0, got {fps}")
    if not float(tolerance_s) >= 0:
        raise ValueError(f"tolerance_s must be >= 0, got {tolerance_s}")
    out = {}
    for key, deltas in delta_timestamps.items():
        try:
            d = np.asarray(list(deltas), dtype=np.float64) if not isinstance(deltas, (str, bytes)) else np.asarray([])
        except (TypeError, ValueError):
            d = np.asarray([])
        if d.ndim != 1 or d.size == 0 or not np.all(np.isfinite(d)):
            raise ValueError(f"delta_timestamps[{key!r}] must be a non-empty list of seconds, got {deltas!r}")
        steps = np.round(d * fps)
        if np.abs(steps).max() > MAX_OFFSET:
            raise ValueError(f"delta_timestamps[{key!r}] reaches {float(np.abs(d).max())!r} s, beyond 2**40 steps "
                             f"at {fps:g} fps")
        off = np.abs(steps / fps - d)
        if off.max() > tolerance_s:
            i = int(np.argmax(off))
            raise ValueError(
                f"delta_timestamps[{key!r}] holds {float(d[i])!r} s, {off[i]:.3g} s from a multiple of 1/fps = "
                f"{1 / fps:.6g} s (tolerance_s={tolerance_s}); at {fps:g} fps use multiples of 1/{fps:g} s")
        out[key] = steps.astype(np.int64)
    return out


def _offsets(key: str, value) -> np.ndarray:
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, range, np.ndarray)):
        raise TypeError(f"delta_steps[{key!r}] must be a sequence of ints, got {type(value).__name__}")
    arr = np.asarray(list(value))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"delta_steps[{key!r}] must be a non-empty 1-D sequence of ints, got {value!r}")
    if arr.dtype == object and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in arr):
        arr = np.asarray([MAX_OFFSET + 1 if abs(int(v)) > MAX_OFFSET else int(v) for v in arr])
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"delta_steps[{key!r}] must hold ints, got dtype {arr.dtype}")
    if np.abs(arr.astype(np.float64)).max() > MAX_OFFSET:
        raise ValueError(f"delta_steps[{key!r}] holds an offset beyond +-2**40 steps")
    return arr.astype(np.int64)


class WindowSampler:
    """Windows with their own step offsets per key, under LeRobot's or diffusion_policy's rule.

    Sample ``i`` is anchor ``(episode, t)`` (see :meth:`locate`).  For a key with offsets
    ``d`` (n,) its value is the steps ``t + d`` of that episode, shape (n, *step shape), and
    ``"<key>_is_pad"`` (n,) bool is True where ``t + d`` lies outside ``[0, L)``; those slots hold
    the clamped step (``"edge"``) or zeros (``"zero"``).  A sampled key without offsets is read at
    the anchor (clamped to the episode): shape (*step shape), no padding flags.  Arrays keep the stored dtype (strings come
    back as ``object`` arrays of ``str``).

    Which anchors exist (see the module docstring): LeRobot's rule (``pad_before`` and
    ``pad_after`` None) — every step ``t = 0 .. L - 1``; diffusion_policy's rule — ``t`` such that
    ``t + min_offset >= -pad_before`` and ``t + max_offset <= L - 1 + pad_after``, the extremes taken
    over every key (a key without offsets counts as offset 0).  Anchors are numbered episode by
    episode through an O(episodes) :class:`WindowIndex`.

    Args:
        buffer: a ReplayBuffer (members used: ``episode_ends``, ``keys()``, ``buffer[key]`` for
            ``.shape`` / ``.dtype``, ``read_rows`` / ``read_rows_async``).
        delta_steps: ``{key: [int offset, ...]}`` relative to the anchor, e.g.
            ``{"img": [-1, 0], "state": [-1, 0], "action": range(-1, 15)}``; any order, repeats
            allowed.
        delta_timestamps: the same in seconds (LeRobot's argument), converted with
            :func:`delta_timestamps_to_steps`; give this or ``delta_steps``, not both.
        fps: frames per second for ``delta_timestamps``; default: the store's ``fps`` attribute
            (set by ``replaybuf import``).
        tolerance_s: allowed distance of a delta from a multiple of ``1 / fps``, seconds.
        keys: keys to sample; default every key of ``delta_steps`` and every other data key.
        pad_before, pad_after: None for LeRobot's rule; ints >= 0 for diffusion_policy's (both or
            neither).
        pad_mode: ``"edge"`` or ``"zero"``.
        episode_mask: bool (n_episodes,); False episodes give no sample (LeRobot's ``episodes``).
        window_index: a :class:`WindowIndex` built for the same buffer and arguments (e.g. sent
            from a DataLoader's main process); default: built here.
        dtypes: ``"source"`` (default: keys an import stored in another dtype come back in the
            source's, e.g. Push-T's float32 ``img`` — :mod:`replaybuf_core.store.buffer_dtypes`) or
            ``"stored"`` (as stored: uint8 frames, a quarter of the bytes).
        resize, crop: reduced-resolution camera frames (:mod:`replaybuf_core.layout.frame_resize`):
            ``resize=(H, W)`` or ``{key: (H, W)}``, ``crop=(top, left, height, width)`` or per key —
            cropped then resized where it is cheapest (``ReplayBuffer.read_rows(resize=)``); the
            key's step shape becomes ``(H, W, C)``.

    Raises:
        TypeError, ValueError: malformed offsets, both or neither of ``delta_steps`` /
            ``delta_timestamps``, one pad without the other, unknown ``pad_mode``, no fps for
            ``delta_timestamps``, a key whose ``<key>_is_pad`` is itself a data key, invalid
            ``episode_mask`` or ``window_index``; a ``resize``/``crop`` that is not positive, larger
            than the frames or outside them (naming the key).
        KeyError: a key not in the buffer; a ``resize``/``crop`` key that is not a sampled camera key.
    """

    def __init__(self, buffer, delta_steps: Mapping[str, Sequence[int]] | None = None, *,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None, fps: float | None = None,
                 tolerance_s: float = 1e-4, keys: Sequence[str] | None = None,
                 pad_before: int | None = None, pad_after: int | None = None, pad_mode: str = "edge",
                 episode_mask=None, window_index: WindowIndex | None = None, dtypes: str = "source",
                 resize: Any = None, crop: Any = None):
        self.dtypes = check_dtypes(dtypes)
        if (delta_steps is None) == (delta_timestamps is None):
            raise TypeError("give delta_steps (offsets in steps) or delta_timestamps (seconds), exactly one")
        if pad_mode not in ("edge", "zero"):
            raise ValueError(f"pad_mode must be 'edge' or 'zero', got {pad_mode!r}")
        if (pad_before is None) != (pad_after is None):
            raise TypeError("pad_before and pad_after go together: both None (LeRobot's rule) or both ints")
        buffer_keys = list(buffer.keys())
        if delta_timestamps is not None:
            if fps is None:
                fps = buffer.store.get_attrs("data").get("fps")
                if fps is None:
                    raise ValueError("delta_timestamps needs the store's fps: it has no 'fps' attribute, pass fps=")
            self.fps: float | None = float(fps)
            delta_steps = delta_timestamps_to_steps(delta_timestamps, self.fps, tolerance_s)
        else:
            self.fps = None if fps is None else float(fps)
        offsets = {str(k): _offsets(k, v) for k, v in dict(delta_steps).items()}
        if keys is None:
            keys = list(offsets) + [k for k in buffer_keys if k not in offsets]
        elif isinstance(keys, str):
            raise TypeError(f"keys must be a sequence of str, not a str ({keys!r})")
        keys = list(keys)
        missing = [k for k in list(offsets) + keys if k not in buffer_keys]
        if missing:
            raise KeyError(f"keys not in the buffer: {sorted(set(missing))}; buffer keys: {buffer_keys}")
        extra = [k for k in offsets if k not in keys]
        if extra:
            raise KeyError(f"delta_steps keys {extra} are not among the sampled keys {keys}")
        clash = [k + IS_PAD_SUFFIX for k in offsets if k + IS_PAD_SUFFIX in keys]
        if clash:
            raise ValueError(f"{clash} would hold padding flags but are sampled data keys")

        lo = min([0] + [int(d.min()) for d in offsets.values()])
        hi = max([0] + [int(d.max()) for d in offsets.values()])
        if pad_before is None:
            first, end_margin = 0, 1
            self.rule = "lerobot"
        else:
            span = hi - lo + 1
            pad_before = min(_check_int("pad_before", pad_before, 0), span - 1)
            pad_after = min(_check_int("pad_after", pad_after, 0), span - 1)
            first, end_margin = -pad_before - lo, 1 - pad_after + hi
            self.rule = "diffusion_policy"
        ends, _, mask, _, _, _ = validate_index_args(np.asarray(buffer.episode_ends[:]), 1, episode_mask)
        window_index = WindowIndex.reuse_or_build(window_index, ends, first, end_margin, mask)
        self.buffer = buffer
        self.arena = OutputArena()  # batch outputs reused once their holders drop them (arena.py)
        cameras = {k: tuple(buffer[k].shape) for k in frame_keys(buffer, keys)}
        self.cameras: tuple[str, ...] = tuple(cameras)
        """The sampled keys holding camera frames (uint8 ``(T, H, W, C)``): those ``convert`` may name."""
        self.converts: bool = _takes_convert(buffer)
        """Whether the buffer's row reads take ``convert=`` (a ReplayBuffer's do; a duck-typed buffer's
        may not): without it, ``sample_batch(convert=)`` fails with the buffer's TypeError."""
        self.resize: dict[str, FrameResize] = parse_resize(resize, crop, cameras)
        """``{camera key: FrameResize}`` of the keys read at reduced resolution."""
        self.keys: list[str] = keys
        self.delta_steps: dict[str, np.ndarray] = offsets
        """``{key: int64 (n,)}`` step offsets from the anchor."""
        self.pad_before, self.pad_after, self.pad_mode = pad_before, pad_after, pad_mode
        self.window_index: WindowIndex = window_index
        self._async = callable(getattr(buffer, "read_rows_async", None))
        # camera frames first: their decodes start on the pool while this thread reads the small keys
        self._read_order = [k for k in keys if k in cameras] + [k for k in keys if k not in cameras]

    def __len__(self) -> int:
        """Number of samples (anchors)."""
        return self.window_index.n_windows

    def __repr__(self) -> str:
        deltas = {k: v.tolist() for k, v in self.delta_steps.items()}
        return (f"WindowSampler(n_windows={len(self)}, rule={self.rule!r}, delta_steps={deltas}, "
                f"pad_before={self.pad_before}, pad_after={self.pad_after}, pad_mode={self.pad_mode!r}, "
                f"keys={self.keys})")

    def sample_shape(self, key: str, convert: Any = None) -> tuple[int, ...]:
        """The shape of ``key`` in one sample: ``(n_key, *step)`` for a key with offsets, else the
        step shape; a resized camera's step is ``(H, W, C)`` of its ``resize``, a converted one's
        ``convert.step_shape`` of that.  Raises KeyError for a key not sampled, ValueError for a
        ``convert`` of a key that is not a camera."""
        if key not in self.keys:
            raise KeyError(f"{key!r} is not a sampled key (keys: {self.keys})")
        if convert is not None and key not in self.cameras:
            raise ValueError(f"{key!r} is not a sampled camera key (uint8 (T, H, W, C)), so it has no converted "
                             f"shape; camera keys: {list(self.cameras)}")
        step = self._step_shape(key, tuple(self.buffer[key].shape[1:]), convert)
        d = self.delta_steps.get(key)
        return step if d is None else (len(d),) + step

    def _step_shape(self, key: str, stored: tuple[int, ...], convert: Any) -> tuple[int, ...]:
        """One step of ``key`` as sampled: ``stored`` (the stored step shape), resized and converted
        as the sampler reads it."""
        fr = self.resize.get(key)
        step = stored if fr is None else (fr.height, fr.width) + stored[2:]
        return step if convert is None else convert.step_shape(step)

    def locate(self, indices) -> dict[str, np.ndarray]:
        """Where samples sit: ``{"episode_index", "frame_index", "index"}``, int64 (B,) each — the
        episode, the anchor's step within it and its buffer step.  Under LeRobot's rule the anchor
        is always a step of the episode; under diffusion_policy's it may lie in the padding
        (``frame_index`` < 0 or >= the episode length; ``index`` is then off the episode too).

        Raises IndexError / TypeError / ValueError for bad indices (see :meth:`WindowIndex.normalize`)."""
        wi = self.window_index
        episode, t = wi.locate(wi.normalize(indices))
        return {"episode_index": episode, "frame_index": t, "index": wi.episode_start[episode] + t}

    def sample_batch(self, indices, out: Mapping[str, np.ndarray] | None = None, at=None,
                     convert: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Samples ``indices`` at once: one batched ``read_rows`` per key, every key started before
        any is finished (a chunked backend decodes one key while this thread gathers another).

        Args:
            indices: int array-like (B,) of sample numbers (negative allowed).
            out: ``{key: array}`` to read keys into (each of the shape and dtype it would be given,
                C-contiguous rows) instead of arrays of the sampler's arena (a mixture's batch slices).
            at: int array-like (B,) of distinct rows of the ``out`` arrays (then of any length
                ``M``, shape ``(M, ...)``): sample ``i`` is written to row ``at[i]`` of each — a
                mixture reads a store's share of a batch straight into the batch's rows.  Keys
                not in ``out`` come back as (B, ...) arrays as without ``at``.
            convert: ``{camera key: FrameConversion}``
                (:class:`~replaybuf_core.layout.frame_convert.FrameConversion`): those keys come back
                channels-first and/or float32 ``x / 255`` (torch's ``x.float() / 255`` bit for bit),
                each frame converted as it is decoded where the backend can (``"rows_convert"``);
                their ``out`` arrays, when given, are of the converted shape and dtype, C-contiguous.

        Returns:
            ``{key: (B, n_key, *step) or (B, *step), "<key>_is_pad": bool (B, n_key)}`` (the ``out``
            arrays as given with ``at``).

        Raises:
            IndexError: an index outside ``[-len, len)``, an ``at`` outside ``out``.
            TypeError: non-integer indices.  ValueError: more than one dimension; ``out`` of the wrong
            shape or dtype; ``at`` of another length than ``indices`` or naming a row twice; a
            ``convert`` key that is not one of :attr:`cameras`.  TypeError: ``convert`` not a dict of
            ``FrameConversion``.
        """
        return self.sample_batch_async(indices, out, at, convert).result()

    def sample_batch_async(self, indices, out: Mapping[str, np.ndarray] | None = None, at=None,
                           convert: Mapping[str, Any] | None = None) -> "PendingBatch":
        """Start :meth:`sample_batch`: every key's read is started (a chunked backend's pool helpers
        decode camera frames meanwhile) and ``result()`` of the returned :class:`PendingBatch`
        finishes them and returns the batch.  A mixture starts each store's share of a batch before
        finishing any, so one store's decodes overlap another's reads.  Leave ``out`` alone until
        ``result()``; the errors of :meth:`sample_batch` are raised here (bad indices) or by
        ``result()`` (a failed read)."""
        wi = self.window_index
        out_arrays = out
        if convert is not None and not isinstance(convert, Mapping):
            raise TypeError(f"convert must be a dict {{camera key: FrameConversion}}, got {type(convert).__name__}")
        convert = dict(convert or {})
        bad = {k: type(v).__name__ for k, v in convert.items() if not isinstance(v, FrameConversion)}
        if bad:
            raise TypeError(f"convert maps camera keys to FrameConversion objects; got {bad}")
        wrong = [k for k in convert if k not in self.cameras]
        if wrong:
            raise ValueError(f"convert names {wrong}, which are not sampled camera keys (uint8 (T, H, W, C)); "
                             f"those are {list(self.cameras)}")
        episode, t = wi.locate(wi.normalize(indices))
        if at is not None:
            at = np.asarray(at)
            if at.size == 0 and at.dtype.kind == "f":
                at = at.astype(np.int64)  # (an empty list)
            if at.dtype.kind not in "iu" or at.shape != t.shape or not distinct(at):
                raise ValueError(f"at must be {t.size} distinct ints, one row of out for each sample; got {at.dtype} "
                                 f"{at.shape}{'' if at.shape != t.shape else ' naming a row twice'}")
        start = wi.episode_start[episode][:, None]
        last = wi.episode_length[episode][:, None] - 1
        plans, read, placed = [], {}, {}
        for key in self._read_order:  # every key checked before any read starts
            arr = array_like(self.buffer, key, self.dtypes)
            d = self.delta_steps.get(key)
            rel = t[:, None] + (d[None, :] if d is not None else np.zeros((1, 1), np.int64))
            pad = (rel < 0) | (rel > last)
            rows = start + np.clip(rel, 0, last)
            if d is None:
                rows, pad = rows[:, 0], None
            dtype = _sample_dtype(arr.dtype)
            fr = self.resize.get(key)
            size = {} if fr is None else {"resize": fr}
            if key in convert:
                dtype, size["convert"] = convert[key].dtype, convert[key]
            shape = rows.shape + self._step_shape(key, tuple(arr.shape[1:]), convert.get(key))
            out = None if not out_arrays else out_arrays.get(key)
            if out is None:
                out = self.arena.empty(shape, dtype)  # reused once nobody holds it
            elif at is not None:
                if out.shape[1:] != shape[1:] or out.dtype != dtype:
                    raise ValueError(f"out[{key!r}] is {out.dtype} {out.shape}, the samples {dtype} (M,) + {shape[1:]}")
                if at.size and (int(at.max()) >= out.shape[0] or int(at.min()) < 0):
                    raise IndexError(f"at names rows outside out[{key!r}], which has {out.shape[0]} rows")
                size["at"] = placed[key] = at
            elif out.shape != shape or out.dtype != dtype:
                raise ValueError(f"out[{key!r}] is {out.dtype} {out.shape}, the samples {dtype} {shape}")
            plans.append((key, rows, out, size))
            read[key] = out
            if pad is not None:
                read[key + IS_PAD_SUFFIX] = pad
        pending = []
        try:
            for key, rows, out, size in plans:
                if self._async:
                    pending.append(self.buffer.read_rows_async(key, rows, out=out, **size))
                else:
                    self.buffer.read_rows(key, rows, out=out, **size)
        except BaseException:
            for p in pending:  # no read started here goes on writing once this raises
                try:
                    p.result()
                except BaseException:
                    pass
            raise
        result = {}
        for key in self.keys:  # in the order of keys, as before
            result[key] = read[key]
            if key + IS_PAD_SUFFIX in read:
                result[key + IS_PAD_SUFFIX] = read[key + IS_PAD_SUFFIX]
        return PendingBatch(self, pending, result, episode, t, placed)

    def __getitem__(self, idx) -> dict[str, np.ndarray]:
        """Sample ``idx``: like one row of :meth:`sample_batch` — ``(n_key, *step)`` / ``(*step)``
        arrays and ``"<key>_is_pad"`` (n_key,).

        Raises TypeError for a non-int index, IndexError outside ``[-len, len)``."""
        if isinstance(idx, (bool, np.bool_)) or not isinstance(idx, numbers.Integral):
            raise TypeError(f"sample index must be an int, got {type(idx).__name__}")
        return {k: v[0] for k, v in self.sample_batch([int(idx)]).items()}


class PendingBatch(Pending):
    """A batch :meth:`WindowSampler.sample_batch_async` started; :meth:`result` finishes it once
    (later calls return the same batch, or raise the same error: never a batch a failed read left
    half written): the batch of :meth:`WindowSampler.sample_batch`, after the reads started, or the
    first failed read's error."""

    def __init__(self, sampler: WindowSampler, pending: list, result: dict[str, np.ndarray],
                 episode_index: np.ndarray, frame_index: np.ndarray, placed: dict[str, np.ndarray] | None = None):
        def finish() -> dict[str, np.ndarray]:
            for p in pending:
                p.result()
            if sampler.pad_mode == "zero":
                for key in sampler.delta_steps:
                    pad = result[key + IS_PAD_SUFFIX]
                    if pad.any():
                        sample, step = np.nonzero(pad)  # sample i's rows are out[at[i]] when read with at=
                        at = (placed or {}).get(key)
                        result[key][sample if at is None else at[sample], step] = _pad_value(result[key].dtype)
            return result

        super().__init__(finish)
        #: int64 (B,): each sample's episode and anchor step in it (:meth:`WindowSampler.locate`), known at once
        self.episode_index, self.frame_index = episode_index, frame_index


def _takes_convert(buffer: Any) -> bool:
    """Whether ``buffer.read_rows`` (and ``read_rows_async``, when it has one) accept ``convert=``."""
    import inspect

    for name in ("read_rows", "read_rows_async"):
        method = getattr(buffer, name, None)
        if method is None:
            if name == "read_rows":
                return False
            continue
        try:
            params = inspect.signature(method).parameters
        except (TypeError, ValueError):
            return False
        if "convert" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return False
    return True
