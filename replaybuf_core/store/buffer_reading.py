"""The reading verbs of :class:`~replaybuf_core.ReplayBuffer`: episodes, step slices, batched
ranges and row gathers, the decoded-chunk cache and ``warm``.  A mixin: it uses the buffer's
``_store``, ``_n_ep``, ``episode_ends`` and ``keys()``."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import numpy as np

from replaybuf_core.errors import CapabilityError
from replaybuf_core.layout.frames import is_frames
from replaybuf_core.protocol import CAP_ROWS_AT, CAP_ROWS_CONVERT, Pending, distinct, read_rows_via_ranges

from .buffer_checks import _check_index


class StepReading:
    """``ReplayBuffer``'s read methods (see the class docstring there)."""

    # ------------------------------------------------------------------ reading
    def get_episode_slice(self, idx: int) -> slice:
        """``slice(start, stop)`` of episode ``idx`` in step indices (negative ``idx`` counts from the
        end). Raises IndexError (out of range, naming index and count) / TypeError (not an int)."""
        i = _check_index(idx, self._n_ep)
        start = int(self._ends[i - 1]) if i > 0 else 0
        return slice(start, int(self._ends[i]))

    def get_episode(self, idx: int, copy: bool = False, dtypes: str = "source") -> dict[str, np.ndarray]:
        """Episode ``idx`` as key → array (T, ...); O(1) index resolution, negative allowed.

        ``copy=False`` may return views into in-memory storage.  ``dtypes``: ``"source"`` (keys an
        import stored in another dtype come back in the source's, see
        :mod:`replaybuf_core.store.buffer_dtypes`) or ``"stored"``.
        Raises IndexError / TypeError; ValueError for another ``dtypes``."""
        sl = self.get_episode_slice(idx)
        return self.get_steps_slice(sl.start, sl.stop, copy=copy, dtypes=dtypes)

    def get_steps_slice(self, start: int | None, stop: int | None, step: int | None = None,
                        copy: bool = False, dtypes: str = "source") -> dict[str, np.ndarray]:
        """Steps ``[start:stop:step]`` (Python slice semantics over ``n_steps``) of every data key,
        in the dtypes ``dtypes`` names (as :meth:`get_episode`).

        Raises:
            ValueError: ``step`` ≤ 0; ``dtypes`` neither ``"source"`` nor ``"stored"``.
        """
        from .buffer_dtypes import check_dtypes

        check_dtypes(dtypes)
        if step is not None and step <= 0:
            raise ValueError(f"step must be positive, got {step}")
        a, b, st = slice(start, stop, step).indices(self.n_steps)
        b = max(a, b)
        out = {}
        for key in self.keys():
            x = self._store.read("data", key, a, b, st if st != 1 else None)
            # backends hand out fresh arrays or views of their memory; copy only the views
            cast = self._as_read(key, x, dtypes)
            out[key] = x.copy() if copy and cast is x and not x.flags.owndata else cast
        return out

    def read_ranges(self, key: str, starts, stops) -> list[np.ndarray]:
        """Rows ``[starts[i], stops[i])`` of data ``key`` for every i (one ndarray each), served by the
        backend's batched reader when it has one, in the stored dtype (a low-level path; see
        :meth:`dtype_of`).  The arrays may be read-only views of the backend's cache or memory: copy
        one before writing to it.

        Raises:
            KeyError: unknown key.  ValueError: ranges outside ``[0, n_steps]`` or lengths differ.
        """
        if key not in self:
            raise KeyError(f"no data key {key!r} (keys: {self.keys()})")
        starts = np.asarray(starts, dtype=np.int64)
        stops = np.asarray(stops, dtype=np.int64)
        if starts.shape != stops.shape or starts.ndim != 1:
            raise ValueError(f"starts {starts.shape} and stops {stops.shape} must be 1-D of one length")
        if starts.size and (starts.min() < 0 or stops.max() > self.n_steps or np.any(stops < starts)):
            raise ValueError(f"row ranges must satisfy 0 <= start <= stop <= n_steps={self.n_steps}")
        return self._store.read_ranges("data", key, starts, stops)

    def read_rows(self, key: str, rows, out: np.ndarray | None = None, dtypes: str = "source",
                  resize: Any = None, at=None, convert: Any = None) -> np.ndarray:
        """Gather steps ``rows`` (int array of any shape) of data ``key``: returns an array of shape
        ``rows.shape + step shape`` (into ``out`` when given — it may be a strided view, of any dtype
        the values cast to; else a new array of :meth:`dtype_of` ``(key, dtypes)``), decoding
        every chunk touched once.  The sampler's batch path; NumPy buffers do one fancy index.

        ``at`` (int array (n,), distinct, ``n = len(rows)``; needs ``out``): row ``i`` of ``rows``
        goes to ``out[at[i]]``, ``out`` of shape ``(m,) + rows.shape[1:] + step shape`` — a
        mixture reads a store's share of a batch straight into the batch's rows (backends with the
        ``"rows_at"`` capability write them in place; others through a temporary).

        ``resize`` (camera keys): ``(height, width)`` or a
        :class:`~replaybuf_core.layout.frame_resize.FrameResize` (with a crop) — the frames made
        smaller where it is cheapest (a JPEG decoded at a DCT scale, a video frame scaled in its RGB
        conversion: the backend's optional ``read_rows_resized``; else full frames resized by
        Pillow), step shape ``(height, width[, C])``; close to, not bit for bit, resizing full frames.

        ``convert`` (camera keys, uint8 ``(T, H, W, C)`` stored): a
        :class:`~replaybuf_core.layout.frame_convert.FrameConversion` — the frames come back
        channels-first and/or float32 ``x / 255`` (bit for bit torch's ``x.float() / 255``; ``dtypes``
        is then not used), each converted as it is decoded on backends with ``"rows_convert"`` (zarr),
        else gathered as uint8 and converted after.  ``out``, when given, must be C-contiguous.

        Raises:
            KeyError: unknown key.  IndexError: a row outside ``[0, n_steps)``, or an ``at`` outside
            ``out``.  ValueError: ``out`` of the wrong shape (or dtype, or not C-contiguous, with
            ``convert``), ``at`` not one distinct place a row or without ``out``; ``resize`` or
            ``convert`` of a key that is not camera frames, a ``resize`` not positive, larger than
            the frame or crop, or a crop outside the frame (naming the key).  TypeError: ``convert``
            that is not a ``FrameConversion``.
        """
        return self.read_rows_async(key, rows, out, dtypes, resize, at, convert).result()

    def read_rows_async(self, key: str, rows, out: np.ndarray | None = None, dtypes: str = "source",
                        resize: Any = None, at=None, convert: Any = None) -> Any:
        """Start :meth:`read_rows`: returns an object whose ``result()`` completes the read and
        returns the filled array.  On backends with ``read_rows_async`` (zarr) thread-pool helpers
        start decoding now, so the caller can read other keys meanwhile (the sampler does) and then
        join in; elsewhere (and with ``resize``) the read is done before returning.  Leave ``out``
        alone until ``result()``.  Raises what :meth:`read_rows` raises, before anything is read."""
        if at is None and np.ndim(rows) == 0:  # one row: read as a batch of one (the gathers index arrays of rows)
            one = self.read_rows_async(key, np.reshape(rows, (1,)), None if out is None else out[None], dtypes,
                                       resize, None, convert)

            def the_row() -> np.ndarray:
                batch = one.result()
                return batch[0] if out is None else out  # (out[None] is a view: out holds the row)
            return Pending(the_row)
        if convert is not None:
            return self._read_rows_converted(key, rows, out, resize, at, convert)
        done: Future = Future()
        if at is not None:
            rows, at = self._checked_at(key, rows, out, at, resize is None)
            if resize is not None or CAP_ROWS_AT not in getattr(self._store, "capabilities", ()):
                part = self.read_rows_async(key, rows, np.empty(rows.shape + out.shape[rows.ndim:], out.dtype), dtypes,
                                            resize)
                return Pending(lambda: _place(out, at, part.result()))
            start = getattr(self._store, "read_rows_async", None)
            if start is not None:
                return start("data", key, rows, out, at=at)
            done.set_result(self._store.read_rows("data", key, rows, out, at=at))
            return done
        if resize is not None:
            done.set_result(self._read_rows_resized(key, rows, out, dtypes, resize))
            return done
        rows, out = self._rows_and_out(key, rows, out, dtypes)
        start = getattr(self._store, "read_rows_async", None)
        if start is not None:
            return start("data", key, rows, out)
        gather = getattr(self._store, "read_rows", None)
        done.set_result(gather("data", key, rows, out) if gather is not None
                        else read_rows_via_ranges(self._store, "data", key, rows, out))
        return done

    def _read_rows_converted(self, key: str, rows, out: np.ndarray | None, resize: Any, at, convert: Any) -> Any:
        """:meth:`read_rows_async` with ``convert`` (see :meth:`read_rows`)."""
        from replaybuf_core.layout.frame_convert import FrameConversion

        if not isinstance(convert, FrameConversion):
            raise TypeError(f"convert (reading {key!r}) must be a FrameConversion, got {type(convert).__name__}")
        if key not in self:
            raise KeyError(f"no data key {key!r} (keys: {self.keys()})")
        shape = tuple(self._store.shape("data", key))
        if len(shape) != 4 or not is_frames(shape, self._store.dtype("data", key)):
            raise ValueError(f"convert: data key {key!r} is not camera frames (uint8 (T, H, W, C)): {shape}")
        if resize is not None:
            fr = _frame_resize(key, shape, resize)
            step = (fr.height, fr.width, shape[3])
        else:
            step = shape[1:]
        rows = self._checked_rows(rows)
        if at is not None:
            rows, at = self._checked_at(key, rows, out, at, False)
        want = (rows.shape if at is None else (out.shape[0],) + rows.shape[1:]) + convert.step_shape(step)
        if out is None:
            out = np.empty(want, dtype=convert.dtype)
        elif out.shape != want or out.dtype != convert.dtype or not out.flags.c_contiguous:
            raise ValueError(f"out is {out.dtype} {out.shape}{'' if out.flags.c_contiguous else ' (not C-contiguous)'}; "
                             f"reading {key!r} converted needs C-contiguous {convert.dtype} {want}")
        caps = getattr(self._store, "capabilities", ())
        if resize is None and CAP_ROWS_CONVERT in caps and (at is None or CAP_ROWS_AT in caps):
            extra = {"convert": convert} if at is None else {"convert": convert, "at": at}
            start = getattr(self._store, "read_rows_async", None)
            if start is not None:
                return start("data", key, rows, out, **extra)
            done: Future = Future()
            done.set_result(self._store.read_rows("data", key, rows, out, **extra))
            return done
        staged = self.read_rows_async(key, rows, np.empty(rows.shape + step, np.uint8), "stored", resize)
        return Pending(lambda: convert.convert_rows(staged.result(), out, at))

    def _read_rows_resized(self, key: str, rows, out: np.ndarray | None, dtypes: str, resize: Any) -> np.ndarray:
        """:meth:`read_rows` with ``resize`` (see there)."""
        from replaybuf_core.layout.frame_resize import resize_frame

        if key not in self:
            raise KeyError(f"no data key {key!r} (keys: {self.keys()})")
        shape = tuple(self._store.shape("data", key))
        if not is_frames(shape, self._store.dtype("data", key)):
            raise ValueError(f"resize: data key {key!r} is not camera frames (uint8 (T, H, W, C)): {shape}")
        fr = _frame_resize(key, shape, resize)
        rows = self._checked_rows(rows)
        want = rows.shape + (fr.height, fr.width) + shape[3:]
        if out is None:
            out = np.empty(want, dtype=self.dtype_of(key, dtypes))
        elif out.shape != want:
            raise ValueError(f"out has shape {out.shape}, expected {want}")
        stage = out if out.dtype == np.uint8 else np.empty(want, np.uint8)
        gather = getattr(self._store, "read_rows_resized", None)
        if gather is None or gather("data", key, rows, stage, fr) is None:
            frames = {int(r): resize_frame(self._store.read("data", key, int(r), int(r) + 1)[0], fr)
                      for r in np.unique(rows)}
            for pos, r in zip(np.ndindex(rows.shape), rows.reshape(-1).tolist()):
                stage[pos] = frames[r]
        if stage is not out:
            out[...] = stage
        return out

    def _checked_at(self, key: str, rows, out: np.ndarray | None, at, full: bool) -> tuple[np.ndarray, np.ndarray]:
        """``rows`` and ``at`` as int64, checked against ``out`` (its step shape too when ``full``:
        not resized) before anything is read (see :meth:`read_rows`)."""
        if key not in self:
            raise KeyError(f"no data key {key!r} (keys: {self.keys()})")
        if out is None:
            raise ValueError(f"at= needs out= (reading {key!r}): the array whose rows it names")
        rows = self._checked_rows(rows)
        if rows.ndim == 0:
            raise ValueError(f"at= needs rows with a first axis, one place in out for each row (reading {key!r}); "
                             f"rows is one int")
        at = np.asarray(at)
        if at.size == 0 and at.dtype.kind == "f":
            at = at.astype(np.int64)  # (an empty list)
        if at.dtype.kind not in "iu" or at.shape != rows.shape[:1]:
            raise ValueError(f"at must be ints of shape ({len(rows)},), one place in out for each "
                             f"row (reading {key!r}); got {at.dtype} {at.shape}")
        at = at.astype(np.int64, copy=False)
        want = rows.shape[1:] + (tuple(self._store.shape("data", key)[1:]) if full else out.shape[rows.ndim:])
        if out.ndim != len(want) + 1 or out.shape[1:] != want:
            raise ValueError(f"out has shape {out.shape}, expected (m,) + {want} (reading {key!r} at= its rows)")
        if at.size and (int(at.min()) < 0 or int(at.max()) >= out.shape[0]):
            bad = at[(at < 0) | (at >= out.shape[0])][0]
            raise IndexError(f"at names row {int(bad)} of out, which has {out.shape[0]} rows (reading {key!r})")
        if not distinct(at):
            raise ValueError(f"at names a row of out twice (reading {key!r}): each row gets one place")
        return rows, at

    def _checked_rows(self, rows) -> np.ndarray:
        """``rows`` as int64; IndexError naming a row outside ``[0, n_steps)``."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_steps):
            bad = rows[(rows < 0) | (rows >= self.n_steps)].flat[0]
            raise IndexError(f"row {int(bad)} is out of range for {self.n_steps} steps")
        return rows

    def _rows_and_out(self, key: str, rows, out: np.ndarray | None, dtypes: str = "source") -> tuple[np.ndarray, np.ndarray]:
        if key not in self:
            raise KeyError(f"no data key {key!r} (keys: {self.keys()})")
        dtype = self.dtype_of(key, dtypes)
        rows = self._checked_rows(rows)
        shape = rows.shape + tuple(self._store.shape("data", key)[1:])
        if out is None:
            out = np.empty(shape, dtype=dtype)
        elif out.shape != shape:
            raise ValueError(f"out has shape {out.shape}, expected {shape}")
        return rows, out

    # ------------------------------------------------------------------ read cache
    @property
    def cache_bytes(self) -> int | None:
        """Capacity in bytes of the backend's cache of decoded chunks (zarr: 256 MiB by default,
        shared by every key of this buffer); None for backends without one.  Set it to trade memory
        for speed: a cache as large as the decoded data set makes repeated sampling run from memory.

        Raises ValueError when set to a negative number; CapabilityError when the backend has no cache."""
        return getattr(self._store, "cache_bytes", None)

    @cache_bytes.setter
    def cache_bytes(self, value: int) -> None:
        if not hasattr(self._store, "cache_bytes"):
            raise CapabilityError(f"the {self.backend!r} backend has no chunk cache")
        self._store.cache_bytes = value

    def warm(self, keys: list[str] | None = None) -> None:
        """Load the named data keys (default: all) wholly into memory, so later reads of them never
        touch the store — what diffusion_policy users get from ``copy_from_path``, without copying
        the buffer.  A no-op for in-memory backends; backends without ``pin`` ignore it.  The copy is
        in the stored dtype (what the samplers read); a key stored in another dtype than its
        source's (Push-T's frames: uint8 for float32) gets a second copy in the source dtype at its
        first ``rb[key]`` read, as diffusion_policy's buffer holds it (at most 4 GiB a buffer:
        :func:`~replaybuf_core.store.step_array._source_copy`).

        Raises KeyError naming an unknown key."""
        keys = self.keys() if keys is None else [keys] if isinstance(keys, str) else list(keys)
        for key in keys:
            if key not in self:
                raise KeyError(f"warm: no data key {key!r} (keys: {self.keys()})")
        pin = getattr(self._store, "pin", None)
        if pin is not None:
            for key in keys:
                pin("data", key)


def _frame_resize(key: str, shape: tuple[int, ...], resize: Any) -> Any:
    """``resize`` (``(height, width)`` or a ``FrameResize``) as a ``FrameResize`` checked against the
    frames of ``key`` (stored ``shape``); ValueError naming the key when it does not fit."""
    from replaybuf_core.layout.frame_resize import FrameResize

    fr = resize if isinstance(resize, FrameResize) else FrameResize(*_pair(key, resize))
    fr.check(key, shape[1], shape[2])
    return fr


def _pair(key: str, value: Any) -> tuple[int, int]:
    """``resize=(height, width)`` checked: two ints (ValueError naming the key)."""
    import numbers

    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2 or any(
            isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral) for v in value):
        raise ValueError(f"resize of camera key {key!r} must be (height, width) ints, got {value!r}")
    return int(value[0]), int(value[1])


def _place(out: np.ndarray, at: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``out`` with ``out[at] = rows`` (the rows a read put into a temporary, for backends without
    ``"rows_at"``: :meth:`StepReading.read_rows_async`)."""
    out[at] = rows
    return out
