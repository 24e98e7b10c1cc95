"""Index math for :class:`replaybuf_core.sampling.sampler.SequenceSampler`.

The window table produced here is the one of ``create_indices`` in
real-stanford/diffusion_policy (``diffusion_policy/common/sampler.py``),
extended by ``skip_initial`` and by strict argument validation.

Two implementations are kept:

* :func:`_create_indices_numba` -- a ``@numba.njit(cache=True)`` kernel compiled
  once per process (and cached on disk), two passes (count, then fill).
* :func:`_create_indices_numpy` -- a vectorised NumPy form.

:func:`create_indices` uses the numba kernel, which measured faster: on 100k
episodes of 1..199 steps (sequence_length 16, pad_before 1, pad_after 7,
9.3M windows, 2-core shared machine) about 165 ms for the kernel against
about 300-550 ms for the NumPy form (measured once; ``python -m benchmarks`` reports the kernel's
time). Loading the
cached kernel costs about 0.4 s once per process (a few seconds on the
first compile). The NumPy form is kept as an independent cross-check in the
tests.
"""

from __future__ import annotations

import numbers

import numpy as np

from replaybuf_core.compiled import numba

__all__ = ["create_indices", "validate_index_args"]


def _check_int(name: str, value, minimum: int) -> int:
    # bool is an Integral subclass; it is never a sensible length or count.
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def validate_index_args(
    episode_ends,
    sequence_length,
    episode_mask,
    pad_before=0,
    pad_after=0,
    skip_initial=0,
):
    """Validate and normalise the arguments of :func:`create_indices`.

    Returns ``(episode_ends int64 (E,), sequence_length, episode_mask bool (E,),
    pad_before, pad_after, skip_initial)`` with both pads clamped to
    ``sequence_length - 1``.

    Raises:
        TypeError: a count is not an int, ``episode_ends`` is not integer,
            ``episode_mask`` is not of dtype bool.
        ValueError: ``sequence_length < 1``, a pad or ``skip_initial`` < 0,
            ``episode_ends`` not 1-D / negative / decreasing, or the mask
            length differs from the number of episodes.
    """
    sequence_length = _check_int("sequence_length", sequence_length, 1)
    pad_before = _check_int("pad_before", pad_before, 0)
    pad_after = _check_int("pad_after", pad_after, 0)
    skip_initial = _check_int("skip_initial", skip_initial, 0)

    ends = np.asarray(episode_ends)
    if ends.ndim != 1:
        raise ValueError(f"episode_ends must be 1-D, got shape {ends.shape}")
    if ends.size and not np.issubdtype(ends.dtype, np.integer):
        raise TypeError(f"episode_ends must have an integer dtype, got {ends.dtype}")
    ends = ends.astype(np.int64, copy=False)
    if ends.size:
        if ends[0] < 0:
            raise ValueError(f"episode_ends must be >= 0, got episode_ends[0] = {ends[0]}")
        bad = np.flatnonzero(np.diff(ends) < 0)
        if bad.size:
            i = int(bad[0]) + 1
            raise ValueError(
                "episode_ends must be non-decreasing (cumulative step counts), "
                f"got episode_ends[{i - 1}] = {ends[i - 1]} > episode_ends[{i}] = {ends[i]}"
            )

    if episode_mask is None:
        mask = np.ones(ends.shape, dtype=bool)
    else:
        mask = np.asarray(episode_mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"episode_mask must have dtype bool, got {mask.dtype}")
        if mask.shape != ends.shape:
            raise ValueError(
                f"episode_mask must have shape (n_episodes,) = {ends.shape}, got {mask.shape}"
            )

    # diffusion_policy's rule: a window always keeps at least one real step.
    pad_before = min(pad_before, sequence_length - 1)
    pad_after = min(pad_after, sequence_length - 1)
    return ends, sequence_length, mask, pad_before, pad_after, skip_initial


@numba.njit(cache=True)
def _create_indices_numba(episode_ends, episode_mask, sequence_length, pad_before, pad_after, skip_initial):
    n_episodes = episode_ends.shape[0]
    lo = skip_initial - pad_before  # first window start, episode-relative
    # pass 1: count
    total = 0
    prev = 0
    for i in range(n_episodes):
        end = episode_ends[i]
        length = end - prev
        prev = end
        if episode_mask[i] and length > 0:
            hi = length - sequence_length + pad_after
            if hi >= lo:
                total += hi - lo + 1
    out = np.empty((total, 4), dtype=np.int64)
    # pass 2: fill
    row = 0
    prev = 0
    for i in range(n_episodes):
        start = prev
        end = episode_ends[i]
        length = end - start
        prev = end
        if not episode_mask[i] or length <= 0:
            continue
        hi = length - sequence_length + pad_after
        for t in range(lo, hi + 1):
            first = t if t > 0 else 0
            last = t + sequence_length
            if last > length:
                last = length
            out[row, 0] = start + first
            out[row, 1] = start + last
            out[row, 2] = first - t
            out[row, 3] = last - t
            row += 1
    return out


def _create_indices_numpy(episode_ends, episode_mask, sequence_length, pad_before, pad_after, skip_initial):
    starts = np.concatenate(([0], episode_ends[:-1])).astype(np.int64) if episode_ends.size else episode_ends
    lengths = episode_ends - starts
    lo = skip_initial - pad_before
    hi = lengths - sequence_length + pad_after
    counts = np.where(episode_mask & (lengths > 0), np.maximum(hi - lo + 1, 0), 0)
    total = int(counts.sum())
    if total == 0:
        return np.zeros((0, 4), dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    ep = np.repeat(np.arange(episode_ends.size), counts)
    t = np.arange(total, dtype=np.int64) - offsets[ep] + lo
    first = np.maximum(t, 0)
    last = np.minimum(t + sequence_length, lengths[ep])
    out = np.empty((total, 4), dtype=np.int64)
    out[:, 0] = starts[ep] + first
    out[:, 1] = starts[ep] + last
    out[:, 2] = first - t
    out[:, 3] = last - t
    return out


def create_indices(
    episode_ends,
    sequence_length: int,
    episode_mask,
    pad_before: int = 0,
    pad_after: int = 0,
    skip_initial: int = 0,
) -> np.ndarray:
    """Enumerate every fixed-length window of an episodic buffer.

    Same table (rows and order) as ``create_indices`` of real-stanford/diffusion_policy
    (``diffusion_policy/common/sampler.py``) when ``skip_initial == 0``.

    Args:
        episode_ends: integer array (n_episodes,), cumulative step counts
            (``episode_ends[i]`` = one past the last step of episode ``i``).
            Zero-length episodes are allowed and yield no window.
        sequence_length: window length in steps, >= 1.
        episode_mask: bool array (n_episodes,); episodes where it is False yield
            no window. ``None`` means all True.
        pad_before: at most this many leading steps of a window may lie before
            the episode start (padding). Clamped to ``sequence_length - 1``,
            as in diffusion_policy, so every window holds >= 1 real step.
        pad_after: the same at the episode end; clamped likewise.
        skip_initial: drop the first ``skip_initial`` windows of every episode.
            Window starts ``t`` (episode-relative step that lands in slot 0,
            negative when the window begins in padding) run over
            ``skip_initial - pad_before <= t <= length - sequence_length + pad_after``.
            Equivalently: the step in window slot ``pad_before`` (the "current"
            step when ``pad_before = n_obs_steps - 1``) is never one of the
            first ``skip_initial`` steps of the episode. With ``pad_before=0``
            the first ``skip_initial`` steps are never window starts; they can
            still appear later inside a window.

    Returns:
        int64 array (n_windows, 4), rows
        ``[buffer_start_idx, buffer_end_idx, sample_start_idx, sample_end_idx]``,
        ordered by episode then start. For a window starting at episode-relative
        ``t`` in an episode starting at buffer step ``s`` of length ``L``::

            buffer_start_idx = s + max(t, 0)          # first real step (buffer index)
            buffer_end_idx   = s + min(t + S, L)      # one past the last real step
            sample_start_idx = max(t, 0) - t          # window slot of the first real step
            sample_end_idx   = min(t + S, L) - t      # one past the slot of the last real step

        so slots ``[0, sample_start_idx)`` and ``[sample_end_idx, S)`` are padding and
        ``buffer_end_idx - buffer_start_idx == sample_end_idx - sample_start_idx >= 1``.

    Raises:
        TypeError, ValueError: see :func:`validate_index_args`.
    """
    ends, s, mask, pb, pa, skip = validate_index_args(
        episode_ends, sequence_length, episode_mask, pad_before, pad_after, skip_initial
    )
    return _create_indices_numba(ends, mask, s, pb, pa, skip)
