"""Fixed-length window sampling over episodic replay buffers.

Behaviour follows ``diffusion_policy/common/sampler.py`` of
real-stanford/diffusion_policy (``create_indices``, ``get_val_mask``,
``downsample_mask``, ``SequenceSampler``); differences are listed in the
docstrings. This module never imports zarr or torch: it talks to the buffer
only through ``episode_ends``, ``keys()``, ``buffer[key]`` (``.shape``,
``.dtype``, ``arr[a:b]``) and ``read_ranges(key, starts, stops)``.
"""

from __future__ import annotations

import numbers
from typing import Mapping, Sequence

import numpy as np

from replaybuf_core.sampling.arena import OutputArena
from replaybuf_core.sampling.sampler_indices import _check_int, create_indices, validate_index_args
from replaybuf_core.sampling.window_index import WindowIndex
from replaybuf_core.store.buffer_dtypes import check_dtypes

__all__ = ["create_indices", "get_val_mask", "downsample_mask", "SequenceSampler", "IS_PAD_KEY"]

#: Key of the padding flags in every sample / batch.
IS_PAD_KEY = "_is_pad"

_PAD_MODES = ("edge", "zero")


def get_val_mask(n_episodes: int, val_ratio: float, seed: int = 0) -> np.ndarray:
    """Pick a random validation split of episodes.

    Same rule and same random draw as diffusion_policy's ``get_val_mask``
    (``numpy.random.default_rng(seed).choice``), so a given seed selects the
    same episodes as diffusion_policy does.

    Args:
        n_episodes: number of episodes, >= 0.
        val_ratio: fraction of episodes for validation, in [0, 1]. The count is
            ``round(n_episodes * val_ratio)`` (Python rounding) clipped to
            ``[1, n_episodes - 1]``.
        seed: seed for ``numpy.random.default_rng``.

    Returns:
        bool array (n_episodes,), True = validation episode. All False when
        ``val_ratio == 0`` or ``n_episodes <= 1``; otherwise at least one True
        and at least one False.

    Raises:
        TypeError: ``n_episodes`` not an int.
        ValueError: ``n_episodes < 0`` or ``val_ratio`` outside [0, 1] (or NaN).
    """
    n_episodes = _check_int("n_episodes", n_episodes, 0)
    if not isinstance(val_ratio, numbers.Real) or not (0.0 <= float(val_ratio) <= 1.0):
        raise ValueError(f"val_ratio must be a number in [0, 1], got {val_ratio!r}")
    mask = np.zeros(n_episodes, dtype=bool)
    if val_ratio <= 0 or n_episodes < 2:
        return mask
    n_val = min(max(1, round(n_episodes * val_ratio)), n_episodes - 1)
    rng = np.random.default_rng(seed=seed)
    mask[rng.choice(n_episodes, size=n_val, replace=False)] = True
    return mask


def downsample_mask(mask, max_n: int | None, seed: int = 0) -> np.ndarray:
    """Keep at most ``max_n`` True entries of ``mask``, chosen at random.

    Same draw as diffusion_policy's ``downsample_mask`` for the same seed.

    Args:
        mask: bool array (n_episodes,).
        max_n: maximum number of True entries kept, >= 0; ``None`` keeps all.
        seed: seed for ``numpy.random.default_rng``.

    Returns:
        a new bool array (n_episodes,), a subset of ``mask`` with
        ``min(mask.sum(), max_n)`` True entries (``mask`` unchanged if it has
        at most ``max_n``).

    Raises:
        TypeError: ``mask`` not of dtype bool, ``max_n`` not an int.
        ValueError: ``mask`` not 1-D, ``max_n < 0``.
    """
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"mask must have dtype bool, got {mask.dtype}")
    if mask.ndim != 1:
        raise ValueError(f"mask must be 1-D, got shape {mask.shape}")
    out = mask.copy()
    if max_n is None:
        return out
    max_n = _check_int("max_n", max_n, 0)
    true_idx = np.flatnonzero(mask)
    if true_idx.size <= max_n:
        return out
    rng = np.random.default_rng(seed=seed)
    keep = true_idx[rng.choice(true_idx.size, size=max_n, replace=False)]
    out[:] = False
    out[keep] = True
    return out


class _Like:
    """``shape`` and ``dtype`` of a data array, read in another dtype than ``buffer[key]`` gives."""

    def __init__(self, arr, dtype: np.dtype):
        self._arr, self.shape, self.dtype = arr, tuple(arr.shape), np.dtype(dtype)

    def __getitem__(self, index):
        return np.asarray(self._arr[index])


def array_like(buffer, key: str, dtypes: str):
    """``buffer[key]``, or for ``dtypes="stored"`` an object of its shape and stored dtype (a
    :class:`~replaybuf_core.ReplayBuffer` reads an imported key in its source dtype otherwise:
    :mod:`replaybuf_core.store.buffer_dtypes`).  The samplers allocate their output by it."""
    arr = buffer[key]
    of = getattr(buffer, "dtype_of", None)
    if dtypes == "stored" and callable(of):
        stored = np.dtype(of(key, "stored"))
        if stored != arr.dtype:
            return _Like(arr, stored)
    return arr


def _sample_dtype(dtype) -> np.dtype:
    """The dtype of sampled arrays: strings (zarr's ``StringDType`` / fixed-width) come out as
    ``object`` arrays of ``str``, as every backend's reads return them."""
    dtype = np.dtype(dtype)
    return np.dtype(object) if dtype.kind in "TU" else dtype


def _pad_value(dtype: np.dtype):
    """Value of "zero" padding: 0, False, "" (b"" for bytes)."""
    if dtype.kind in "OUT":
        return ""
    if dtype.kind == "S":
        return b""
    if dtype.kind == "b":
        return False
    return 0


def _unread_value(dtype: np.dtype):
    """Value of slots not read because of ``key_first_k``: NaN for floats."""
    if dtype.kind in "fc":
        return np.nan
    return _pad_value(dtype)


class SequenceSampler:
    """Fixed-length windows over the episodes of a replay buffer.

    Port of diffusion_policy's ``SequenceSampler``
    (real-stanford/diffusion_policy, ``diffusion_policy/common/sampler.py``) with
    the same window table, plus ``skip_initial``, ``pad_mode``, ``_is_pad`` and a
    batched reader.

    **Windows and padding.** For an episode occupying buffer steps
    ``[s, s + L)`` (``L >= 1``) the windows start at episode-relative steps
    ``t = skip_initial - pad_before, ..., L - sequence_length + pad_after``
    (none if that range is empty; both pads are first clamped to
    ``sequence_length - 1``). Window ``t`` covers episode steps
    ``t, ..., t + sequence_length - 1``; those before 0 or from ``L`` on are
    padding. A window never mixes two episodes and always holds at least one
    real step. So with ``pad_before = pad_after = 0`` an episode yields
    ``max(L - sequence_length + 1, 0)`` windows (none if it is shorter than a
    window); each unit of ``pad_before`` / ``pad_after`` adds one window that
    overhangs the start / end by one more step. Every window is a row
    ``[buffer_start_idx, buffer_end_idx, sample_start_idx, sample_end_idx]`` of
    :attr:`indices` (see :func:`create_indices`): real steps
    ``buffer[buffer_start_idx:buffer_end_idx]`` land in window slots
    ``[sample_start_idx, sample_end_idx)``; the other slots are padding, filled with

    * ``pad_mode="edge"`` (diffusion_policy's rule): slots before
      ``sample_start_idx`` repeat the window's first real step, slots from
      ``sample_end_idx`` on repeat its last real step;
    * ``pad_mode="zero"``: 0 for numbers, False for bool, "" for strings.

    ``sample["_is_pad"][j]`` is True exactly for padding slots.

    Worked example: one episode of length 3 (buffer steps 0, 1, 2 holding
    ``a, b, c``), ``sequence_length=4, pad_before=1, pad_after=1``. Starts run
    ``t = -1 .. 3 - 4 + 1 = 0``, i.e. two windows::

        t   buffer_start buffer_end sample_start sample_end   edge     _is_pad
        -1  0            3          1            4            a a b c  T F F F
         0  0            3          0            3            a b c c  F F F T

    (``"zero"`` gives ``0 a b c`` and ``a b c 0``.) With ``skip_initial=1`` only
    the ``t = 0`` row remains; with ``pad_before = pad_after = 0`` this episode
    yields no window at all.

    Points that surprise diffusion_policy users:

    * ``pad_before`` / ``pad_after`` are the *maximum* overhang of a window past
      the episode start / end, not padding added to every window; windows in
      the middle of an episode have none. An episode yields
      ``max(L - sequence_length + 1 + pad_before + pad_after - skip_initial, 0)``
      windows (pads after clamping).
    * Episodes shorter than ``sequence_length - pad_before - pad_after`` are
      silently skipped (no window fits), as are all episodes of ``L <= 0``.
    * A window is padded on both sides only when ``L < sequence_length``
      (e.g. ``L=1, sequence_length=4, pad_before=pad_after=3`` gives starts
      ``-3..0``; ``t=-1`` has one padding slot in front, two behind).
    * Pads larger than ``sequence_length - 1`` are clamped to it, so every window
      holds at least one real step.
    * "edge" padding repeats the first / last real step *of the window*, which
      is the first / last step of the episode whenever padding occurs.

    **key_first_k** ``{key: k}``: only the first ``k`` window slots of ``key``
    are produced, exactly as without ``key_first_k`` (including their padding),
    and only the stored steps they need are read; slots ``k, ...`` hold NaN for
    floats, 0 for ints, False for bool, "" for strings. ``_is_pad`` is unaffected.
    (diffusion_policy instead keeps the first ``k`` *stored* steps of the window,
    so after front padding it returned a few more real slots, and its edge
    padding at the end could repeat NaN; the first ``k`` slots agree.)

    Args:
        replay_buffer: a ReplayBuffer (see module docstring for the members used); the name is
            diffusion_policy's, so its calls (``SequenceSampler(replay_buffer=rb, sequence_length=...,
            pad_before=..., pad_after=..., keys=..., key_first_k=..., episode_mask=...)``) run unchanged.
        sequence_length: steps per window, >= 1.
        pad_before, pad_after, skip_initial: see :func:`create_indices`.
        keys: data keys to return, default ``buffer.keys()``.
        key_first_k: ``{key: k}`` with ``k >= 0`` ints, keys among ``keys``.
        episode_mask: bool (n_episodes,); False episodes never appear.
            Default all True.
        pad_mode: ``"edge"`` or ``"zero"``.
        window_index: a :class:`WindowIndex` built for the same buffer and arguments (e.g. another
            sampler's :attr:`window_index`, or one a DataLoader's main process sent its workers);
            default: built here, in O(episodes).
        dtypes: ``"source"`` (default: keys an import stored in another dtype come back in the
            source's, e.g. Push-T's float32 ``img`` — :mod:`replaybuf_core.store.buffer_dtypes`) or
            ``"stored"`` (as stored: uint8 frames, a quarter of the bytes).

    Windows are numbered through :attr:`window_index` (memory and build time O(episodes)); the
    diffusion_policy table :attr:`indices` (32 bytes per window) is built only when asked for.

    Raises:
        TypeError, ValueError: invalid index arguments (see
            :func:`create_indices`), unknown ``pad_mode``, invalid ``key_first_k``, a
            ``window_index`` built for other episodes or arguments.
        KeyError: a key of ``keys`` / ``key_first_k`` not in the buffer / ``keys``.
    """

    def __init__(
        self,
        replay_buffer,
        sequence_length: int,
        pad_before: int = 0,
        pad_after: int = 0,
        keys: Sequence[str] | None = None,
        key_first_k: Mapping[str, int] | None = None,
        episode_mask=None,
        skip_initial: int = 0,
        pad_mode: str = "edge",
        window_index: WindowIndex | None = None,
        dtypes: str = "source",
    ):
        buffer = replay_buffer
        check_dtypes(dtypes)
        if pad_mode not in _PAD_MODES:
            raise ValueError(f"pad_mode must be one of {_PAD_MODES}, got {pad_mode!r}")
        ends, sequence_length, mask, pad_before, pad_after, skip_initial = validate_index_args(
            np.asarray(buffer.episode_ends[:]), sequence_length, episode_mask,
            pad_before=pad_before, pad_after=pad_after, skip_initial=skip_initial)
        first, end_margin = skip_initial - pad_before, sequence_length - pad_after
        window_index = WindowIndex.reuse_or_build(window_index, ends, first, end_margin, mask)
        self.window_index: WindowIndex = window_index
        """Window number -> (episode, start): O(episodes) memory (see :class:`WindowIndex`)."""
        self._episode_ends, self._episode_mask = ends, mask
        self._indices: np.ndarray | None = None

        buffer_keys = list(buffer.keys())
        if keys is None:
            keys = buffer_keys
        elif isinstance(keys, str):
            raise TypeError(f"keys must be a sequence of str, not a str ({keys!r})")
        keys = list(keys)
        missing = [k for k in keys if k not in buffer_keys]
        if missing:
            raise KeyError(f"keys not in the buffer: {missing}; buffer keys: {buffer_keys}")
        if IS_PAD_KEY in keys:
            raise ValueError(f"{IS_PAD_KEY!r} is reserved for the padding flags")

        first_k: dict[str, int] = {}
        for k, v in dict(key_first_k or {}).items():
            if k not in keys:
                raise KeyError(f"key_first_k key {k!r} is not among the sampled keys {keys}")
            first_k[k] = min(_check_int(f"key_first_k[{k!r}]", v, 0), int(sequence_length))

        self.buffer = buffer
        self.arena = OutputArena()  # batch outputs reused once their holders drop them (arena.py)
        self.sequence_length = int(sequence_length)
        self.pad_before = min(int(pad_before), self.sequence_length - 1)
        self.pad_after = min(int(pad_after), self.sequence_length - 1)
        self.skip_initial = int(skip_initial)
        self.keys: list[str] = keys
        self.key_first_k: dict[str, int] = first_k
        self.pad_mode = pad_mode
        self.dtypes = dtypes
        self._has_read_ranges = callable(getattr(buffer, "read_ranges", None))
        self._has_read_rows = callable(getattr(buffer, "read_rows", None))
        self._has_read_rows_async = callable(getattr(buffer, "read_rows_async", None))

    def __len__(self) -> int:
        """Number of windows."""
        return self.window_index.n_windows

    @property
    def indices(self) -> np.ndarray:
        """int64 (n_windows, 4) table ``[buffer_start, buffer_end, sample_start, sample_end]`` of every
        window (diffusion_policy's ``indices``, see :func:`create_indices`), built on first access
        and kept: 32 bytes per window (1.3 GB at 50 M steps).  Sampling never needs it — it maps
        window numbers through :attr:`window_index` — so use :meth:`window_rows` for some rows."""
        if self._indices is None:
            self._indices = create_indices(self._episode_ends, self.sequence_length, self._episode_mask,
                                           pad_before=self.pad_before, pad_after=self.pad_after,
                                           skip_initial=self.skip_initial)
        return self._indices

    def window_rows(self, indices) -> np.ndarray:
        """Rows of :attr:`indices` for the given window numbers, computed from the O(episodes)
        :attr:`window_index`: int64 (B, 4) ``[buffer_start, buffer_end, sample_start, sample_end]``.

        Raises:
            IndexError: a window number outside ``[-len, len)``.  TypeError: non-integer numbers.
            ValueError: more than one dimension.
        """
        wi = self.window_index
        episode, t = wi.locate(wi.normalize(indices))
        start, length = wi.episode_start[episode], wi.episode_length[episode]
        first = np.maximum(t, 0)
        last = np.minimum(t + self.sequence_length, length)
        return np.stack([start + first, start + last, first - t, last - t], axis=1)

    def __repr__(self) -> str:
        return (
            f"SequenceSampler(n_windows={len(self)}, sequence_length={self.sequence_length}, "
            f"pad_before={self.pad_before}, pad_after={self.pad_after}, "
            f"skip_initial={self.skip_initial}, pad_mode={self.pad_mode!r}, keys={self.keys})"
        )

    # ------------------------------------------------------------------ indices
    def _rows_to_read(self, key: str, rows: np.ndarray) -> np.ndarray:
        """Stored steps to read per window for ``key``: int64 (B,)."""
        bs, be, ss, se = rows.T
        n_real = be - bs
        k = self.key_first_k.get(key)
        if k is None:
            return n_real
        # slots [0, k) are needed; real ones are [ss, min(se, k)).
        need = np.clip(np.minimum(se, k) - ss, 0, None)
        if self.pad_mode == "edge" and k > 0:
            need = np.maximum(need, 1)  # front padding repeats the first real step
        return np.minimum(need, n_real)

    # -------------------------------------------------------------- assembling
    def _assemble(self, key: str, rows: np.ndarray, n_read: np.ndarray, chunks: list | None, arr_like,
                  defer: bool = False):
        """Build the (B, S, *trailing) array of ``key``; ``chunks`` holds one array per window
        with ``n_read > 0``, in order — or is None, and the rows are gathered with
        ``buffer.read_rows`` straight into the output (no intermediate arrays).  With ``defer`` the
        gather is only started (``buffer.read_rows_async``) and a function finishing the array is
        returned: the batch path starts every key before finishing any, so the thread pool decodes
        one key's chunks while this thread reads the others.

        Vectorised: every slot gathers stored row ``clip(slot - sample_start, 0, n_read - 1)`` of its
        window (edge padding is exactly that clamp), then "zero" pads and unread ``key_first_k`` slots
        are overwritten — one gather per key instead of a Python loop over windows."""
        b, s = rows.shape[0], self.sequence_length
        dtype = _sample_dtype(arr_like.dtype)
        k = self.key_first_k.get(key, s)
        out = self.arena.empty((b, s) + tuple(arr_like.shape[1:]), dtype)  # reused once nobody holds it
        slots = np.arange(s, dtype=np.int64)
        ss = rows[:, 2:3]
        sel = n_read > 0
        pending = None
        if k > 0 and sel.any():
            rel = np.minimum(np.maximum(slots[None, :k] - ss, 0), np.maximum(n_read[:, None] - 1, 0))
            if chunks is None and defer and self._has_read_rows_async:  # started; finished below
                pending = self.buffer.read_rows_async(key, rows[:, 0:1] + rel, out=out[:, :k])
            elif chunks is None:  # the buffer gathers the rows straight into ``out``
                self.buffer.read_rows(key, rows[:, 0:1] + rel, out=out[:, :k])
            else:
                flat = np.concatenate(chunks) if len(chunks) > 1 else np.asarray(chunks[0])
                offsets = np.cumsum(n_read) - n_read
                gather = (offsets[:, None] + rel)[sel]
                if sel.all():
                    out[:, :k] = flat[gather]
                else:
                    out[sel, :k] = flat[gather]
        if k < s:  # after the read started: pool helpers decode while this thread fills
            out[:, k:] = _unread_value(dtype)

        def finish() -> np.ndarray:
            if pending is not None:
                pending.result()
            if self.pad_mode == "zero":
                out[self._pad_flags(rows) & (slots[None, :] < k)] = _pad_value(dtype)
            return out

        return finish if defer else finish()

    def _pad_flags(self, rows: np.ndarray) -> np.ndarray:
        slots = np.arange(self.sequence_length, dtype=np.int64)
        return (slots < rows[:, 2:3]) | (slots >= rows[:, 3:4])

    # ------------------------------------------------------------------ access
    def __getitem__(self, idx) -> dict[str, np.ndarray]:
        """One window.

        Args:
            idx: int window index; negative counts from the end as in Python.

        Returns:
            dict ``key -> array (sequence_length, *trailing)`` (buffer dtype) and
            ``"_is_pad" -> bool (sequence_length,)``.

        Raises:
            IndexError: ``idx`` outside ``[-len, len)`` (message gives both).
            TypeError: ``idx`` not an integer.
        """
        if isinstance(idx, (bool, np.bool_)) or not isinstance(idx, numbers.Integral):
            raise TypeError(f"window index must be an int, got {type(idx).__name__}")
        n = len(self)
        i = int(idx)
        if not -n <= i < n:
            raise IndexError(f"window index {i} out of range for sampler of length {n}")
        bs, be, ss, se = (int(x) for x in self.window_rows([i])[0])
        result: dict[str, np.ndarray] = {}
        for key in self.keys:
            arr = array_like(self.buffer, key, self.dtypes)
            k = self.key_first_k.get(key, self.sequence_length)
            n_read = self._n_read_one(k, bs, be, ss, se)
            chunk = None
            if n_read > 0:
                # read_ranges goes through the backend's fast reader (zarr: ~50 µs, not ~0.5 ms)
                chunk = (self.buffer.read_ranges(key, [bs], [bs + n_read])[0] if self._has_read_ranges
                         else np.asarray(arr[bs: bs + n_read]))
            result[key] = self._assemble_one(k, ss, se, chunk, arr)
        pad = np.ones(self.sequence_length, dtype=bool)
        pad[ss:se] = False
        result[IS_PAD_KEY] = pad
        return result

    def _n_read_one(self, k: int, bs: int, be: int, ss: int, se: int) -> int:
        """Scalar form of :meth:`_rows_to_read` for one window."""
        if k >= self.sequence_length:
            return be - bs
        need = max(min(se, k) - ss, 0)
        if self.pad_mode == "edge" and k > 0:
            need = max(need, 1)
        return min(need, be - bs)

    def _assemble_one(self, k: int, ss: int, se: int, chunk, arr_like) -> np.ndarray:
        """One window of one key (fast path of ``__getitem__``)."""
        dtype = _sample_dtype(arr_like.dtype)
        out = np.empty((self.sequence_length,) + tuple(arr_like.shape[1:]), dtype=dtype)
        self._fill_window(out, k, ss, se, chunk, dtype)
        return out

    def _fill_window(self, out: np.ndarray, k: int, ss: int, se: int, chunk, dtype: np.dtype) -> None:
        """Write one window (S, *trailing) into ``out`` from the ``chunk`` of stored rows read
        for it (see :meth:`_n_read_one`), with slice assignments only."""
        s = self.sequence_length
        edge = self.pad_mode == "edge"
        real_end = min(se, k)
        if real_end > ss:
            out[ss:real_end] = chunk[: real_end - ss]
        front = min(ss, k)
        if front > 0:
            out[:front] = chunk[0] if edge else _pad_value(dtype)
        if k > se:  # then the whole real part was read: chunk[-1] is the last real step
            out[se:k] = chunk[-1] if edge else _pad_value(dtype)
        if k < s:
            out[k:] = _unread_value(dtype)

    def sample_sequence(self, idx: int) -> dict[str, np.ndarray]:
        """Alias of ``sampler[idx]`` (diffusion_policy's name)."""
        return self[idx]

    def sample_batch(self, indices) -> dict[str, np.ndarray]:
        """Many windows at once, read through ``buffer.read_ranges``.

        Equal to stacking ``sampler[i]`` for ``i`` in ``indices``, but each key is
        read with a single ``buffer.read_ranges(key, starts, stops)`` call so a
        chunked backend can serve the whole batch with one read per chunk touched.

        Args:
            indices: int array-like (B,) of window indices (negative allowed).

        Returns:
            dict ``key -> array (B, sequence_length, *trailing)`` and
            ``"_is_pad" -> bool (B, sequence_length)``.

        Raises:
            IndexError: an index outside ``[-len, len)``.
            TypeError: non-integer (or bool) indices.
            ValueError: ``indices`` with more than one dimension.
        """
        rows = self.window_rows(indices)
        starts = rows[:, 0]
        finish = {}
        for key in self.keys:  # start every key's read (thread-pool helpers decode meanwhile) ...
            arr = array_like(self.buffer, key, self.dtypes)
            n_read = self._rows_to_read(key, rows)
            sel = n_read > 0
            chunks: list | None = None
            if not self._has_read_rows:
                chunks = []
                if sel.any():
                    chunks = list(self.buffer.read_ranges(key, starts[sel], starts[sel] + n_read[sel]))
            finish[key] = self._assemble(key, rows, n_read, chunks, arr, defer=True)
        result = {key: f() for key, f in finish.items()}  # ... then finish them
        result[IS_PAD_KEY] = self._pad_flags(rows)
        return result
