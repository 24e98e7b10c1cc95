"""Saving the viewer's marks: the episodes a user marked become the bool meta array
``meta/mask.<name>`` (one row per episode, True = marked) — the store's mask convention, which the
sampler takes as ``episode_mask`` and ``replaybuf edit keep --mask mask.<name>`` keeps.  Nothing is
ever deleted here; :func:`edit_commands` prints the commands that would act on the marks."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf_core.store.buffer import ReplayBuffer

from .catalog import MASK_PREFIX

#: a mask name: letters, digits, ``_``, ``-`` and ``.``, at most 64 (it becomes part of a meta key)
MASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")


class StoreChangedError(RuntimeError):
    """The store's episodes changed since the page was loaded (marks would land on other episodes)."""


def check_mask_name(name: Any) -> str:
    """``name`` when it can name ``meta/mask.<name>``; ValueError (naming it and the rule) otherwise."""
    if not isinstance(name, str) or not MASK_NAME.fullmatch(name):
        raise ValueError(f"mask name {name!r} is invalid: use 1-64 letters, digits, '_', '-' or '.', "
                         "starting with a letter, digit or '_'")
    return name


def check_episodes(episodes: Any, n_episodes: int) -> np.ndarray:
    """The marked episode indices as sorted unique int64, each in ``[0, n_episodes)``.

    Raises TypeError when they are not a list of integers, IndexError naming the first index out of
    range (and the count)."""
    if not isinstance(episodes, (list, tuple)) or not all(
            isinstance(e, int) and not isinstance(e, bool) for e in episodes):
        raise TypeError(f"episodes must be a list of integers, got {episodes!r:.80}")
    try:
        idx = np.unique(np.asarray(episodes, dtype=np.int64))
    except OverflowError:
        raise IndexError(f"an episode index is out of range: the store has {n_episodes} episodes") from None
    bad = idx[(idx < 0) | (idx >= n_episodes)]
    if bad.size:
        raise IndexError(f"episode {int(bad[0])} is out of range: the store has {n_episodes} episodes")
    return idx


def save_mask(path: Any, name: str, episodes: Sequence[int], expected_n_episodes: int,
              storage_options: dict | None = None) -> np.ndarray:
    """Write ``meta/mask.<name>`` (bool, one row per episode, True for ``episodes``) into the store
    at ``path``, replacing a mask of that name.  Opens the store writable for the write only, which
    takes the writer lock (a lease on object storage) as every writer does, and checks everything
    before writing.

    Returns the mask written.

    Raises:
        ValueError: a bad mask name.  TypeError / IndexError: bad ``episodes``.
        StoreLockedError: another process is writing the store.
        StoreChangedError: the store no longer has ``expected_n_episodes`` episodes.
    """
    check_mask_name(name)
    idx = check_episodes(list(episodes), expected_n_episodes)
    with ReplayBuffer(path, storage_options=storage_options) as rb:
        if rb.n_episodes != expected_n_episodes:
            raise StoreChangedError(f"the store now has {rb.n_episodes} episodes, not the {expected_n_episodes} "
                                    "the page showed: reload the page and mark again (nothing was written)")
        mask = np.zeros(rb.n_episodes, dtype=bool)
        mask[idx] = True
        rb.update_meta({MASK_PREFIX + name: mask})
    return mask


def edit_commands(path: str, name: str, episodes: Sequence[int]) -> dict[str, str]:
    """The ``replaybuf edit`` commands that act on marked ``episodes`` (none is run here):
    ``{"delete": "replaybuf edit delete PATH 3 17", "keep": "replaybuf edit keep PATH --mask mask.<name>"}``
    (``keep`` keeps the marked episodes once the mask is saved)."""
    idx = " ".join(str(int(e)) for e in sorted(set(episodes)))
    p = shlex.quote(str(path))
    return {"delete": f"replaybuf edit delete {p} {idx}".rstrip(),
            "keep": f"replaybuf edit keep {p} --mask {shlex.quote(MASK_PREFIX + name)}"}
