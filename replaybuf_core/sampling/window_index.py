"""Window numbers -> (episode, start step): an index that costs O(episodes), not O(windows).

diffusion_policy's ``create_indices`` table spends 32 bytes per window: about 9 GB (and ~17 s) at
346 M steps, the size at which TorchRL users reported their slice sampler stalling
(pytorch/rl#2669), and every DataLoader worker built its own copy.  Every window of an episode is
one start step ``t`` in a contiguous range, so a window number is found from per-episode window
counts: a prefix sum and a binary search (``np.searchsorted``).  Memory: 25 bytes per episode;
build: a few vectorised passes over ``episode_ends``.

The index is plain NumPy and pickles small, so a DataLoader's workers get it from the main process
instead of rebuilding it.
"""

from __future__ import annotations

import numbers

import numpy as np

from replaybuf_core.sampling.sampler_indices import validate_index_args

#: offsets and window bounds are kept far inside int64, so the index math never wraps
MAX_OFFSET = 2**40


def check_offset(name: str, value) -> int:
    """``value`` as an int in ``[-MAX_OFFSET, MAX_OFFSET]``; TypeError for non-ints (bool, float,
    str), ValueError outside that range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if abs(value) > MAX_OFFSET:
        raise ValueError(f"{name} = {value} is beyond +-2**40 steps")
    return value

__all__ = ["WindowIndex"]


class WindowIndex:
    """The windows of every episode, numbered episode by episode, start by start.

    Episode ``e`` occupies buffer steps ``[episode_start[e], episode_start[e] + L)``.  Its windows
    start at the episode-relative steps ``t = first, first + 1, ..., L - end_margin`` (none when that
    range is empty, when ``L <= 0`` or when the episode is masked out); windows are numbered in
    episode order, then by ``t``.  What a start means is the sampler's business:

    * :class:`~replaybuf_core.sampling.sampler.SequenceSampler` (diffusion_policy's windows):
      ``first = skip_initial - pad_before``, ``end_margin = sequence_length - pad_after``; ``t`` is
      the step in window slot 0 (negative when the window begins in padding).
    * :class:`~replaybuf_core.sampling.window_sampler.WindowSampler`: ``t`` is the anchor ("current") step.

    Args:
        episode_ends: integer array (E,), cumulative step counts, non-decreasing.
        first: first window start of every episode, episode-relative (may be negative).
        end_margin: the last window start of an episode of length ``L`` is ``L - end_margin``.
        episode_mask: bool (E,); False episodes have no window.  None: all True.

    Raises:
        TypeError, ValueError: ``episode_ends`` / ``episode_mask`` invalid (see
            :func:`replaybuf_core.sampling.sampler_indices.validate_index_args`).
    """

    def __init__(self, episode_ends, first: int, end_margin: int, episode_mask=None):
        first, end_margin = check_offset("first", first), check_offset("end_margin", end_margin)
        ends, _, mask, _, _, _ = validate_index_args(episode_ends, 1, episode_mask)
        starts = np.empty_like(ends)
        if ends.size:
            starts[0] = 0
            starts[1:] = ends[:-1]
        lengths = ends - starts
        counts = np.where(mask & (lengths > 0), np.maximum(lengths - int(end_margin) - int(first) + 1, 0), 0)
        self.first = int(first)
        self.end_margin = int(end_margin)
        self.episode_start: np.ndarray = starts
        """int64 (E,): buffer step of each episode's first step."""
        self.episode_length: np.ndarray = lengths
        """int64 (E,): steps per episode."""
        self.episode_mask: np.ndarray = mask
        """bool (E,): the episodes that may have windows."""
        self.window_end: np.ndarray = np.cumsum(counts, dtype=np.int64)
        """int64 (E,): one past the number of episode ``e``'s last window (prefix sum of counts)."""
        self.n_windows = int(self.window_end[-1]) if ends.size else 0

    def __len__(self) -> int:
        return self.n_windows

    @classmethod
    def reuse_or_build(cls, window_index, episode_ends: np.ndarray, first: int, end_margin: int,
                       episode_mask: np.ndarray) -> WindowIndex:
        """``window_index`` when it was built for these episodes and window range (see
        :meth:`check_matches`), a new index when it is None.

        Raises:
            TypeError: ``window_index`` neither None nor a WindowIndex.  ValueError: it does not match.
        """
        if window_index is None:
            return cls(episode_ends, first, end_margin, episode_mask)
        if not isinstance(window_index, WindowIndex):
            raise TypeError(f"window_index must be a WindowIndex, got {type(window_index).__name__}")
        window_index.check_matches(episode_ends, first, end_margin, episode_mask)
        return window_index

    def check_matches(self, episode_ends: np.ndarray, first: int, end_margin: int, episode_mask: np.ndarray) -> None:
        """Raise ValueError unless this index was built for these episodes (int64 ``episode_ends``,
        bool ``episode_mask``) and window range: an index handed to a sampler of another store or
        other arguments.  Costs O(episodes) comparisons, no allocation per window."""
        ends = self.episode_start + self.episode_length
        if ((self.first, self.end_margin) != (int(first), int(end_margin))
                or not np.array_equal(ends, episode_ends) or not np.array_equal(self.episode_mask, episode_mask)):
            raise ValueError(
                f"{self!r} was built for other episodes or window arguments "
                f"(first={first}, end_margin={end_margin}, {np.size(episode_ends)} episodes expected)")

    @property
    def window_counts(self) -> np.ndarray:
        """int64 (E,): windows per episode."""
        return np.diff(self.window_end, prepend=np.int64(0))

    @property
    def nbytes(self) -> int:
        """Bytes held by the index arrays."""
        return self.episode_start.nbytes + self.episode_length.nbytes + self.window_end.nbytes

    def normalize(self, windows) -> np.ndarray:
        """Window numbers as int64 (B,), negative ones counted from the end as in Python (any
        integer dtype; unsigned or Python-int numbers too large for int64 are out of range, never
        wrapped).

        Raises:
            TypeError: non-integer (or bool) window numbers.  ValueError: more than one dimension.
            IndexError: a number outside ``[-len, len)`` (the message names it).
        """
        n = self.n_windows
        arr = np.asarray(windows)
        if arr.dtype == object and arr.size and all(
                isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) for v in arr.flat):
            bad = [int(v) for v in arr.flat if not -n <= int(v) < n]  # Python ints beyond int64
            if bad:
                raise IndexError(f"window index {bad[0]} out of range for {n} windows")
            arr = arr.astype(np.int64)
        if arr.dtype == np.bool_ or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"window indices must be integers, got dtype {arr.dtype}")
        if arr.ndim > 1:
            raise ValueError(f"window indices must be a 1-D array, got shape {arr.shape}")
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= n:  # before a cast could wrap it
            raise IndexError(f"window index {int(arr.max())} out of range for {n} windows")
        arr = arr.astype(np.int64, copy=False).reshape(-1)
        bad = (arr < -n) | (arr >= n)
        if bad.any():
            raise IndexError(f"window index {int(arr[bad][0])} out of range for {n} windows")
        return np.where(arr < 0, arr + n, arr)

    def locate(self, windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(episode, t)`` of already normalised window numbers (see :meth:`normalize`):
        two int64 arrays shaped like ``windows``; ``t`` is episode-relative."""
        episode = np.searchsorted(self.window_end, windows, side="right")
        before = np.where(episode > 0, self.window_end[np.maximum(episode - 1, 0)], 0)
        return episode, windows - before + self.first

    def episode_windows(self, episode: int) -> range:
        """The window numbers of one episode (empty when it has none).

        Raises IndexError for an episode outside ``[0, E)``."""
        n_ep = self.window_end.size
        if isinstance(episode, (bool, np.bool_)) or not isinstance(episode, numbers.Integral):
            raise TypeError(f"episode must be an int, got {type(episode).__name__} {episode!r}")
        episode = int(episode)
        if not 0 <= episode < n_ep:
            raise IndexError(f"episode {episode} out of range for {n_ep} episodes")
        stop = int(self.window_end[episode])
        return range(int(self.window_end[episode - 1]) if episode else 0, stop)

    def __repr__(self) -> str:
        return (f"WindowIndex(n_windows={self.n_windows}, n_episodes={self.window_end.size}, "
                f"first={self.first}, end_margin={self.end_margin}, nbytes={self.nbytes})")
