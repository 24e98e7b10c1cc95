"""Saving the viewer's marks: the episodes a user marked become the bool meta array
``meta/mask.<name>`` (one row per episode, True = marked) — the store's mask convention, which the
sampler takes as ``episode_mask`` and ``replaybuf edit keep --mask mask.<name>`` keeps.  Nothing is
ever deleted here; :func:`edit_commands` prints the commands that would act on the marks."""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Sequence
from typing import Any

import numpy as np

from replaybuf_core.store.buffer import ReplayBuffer
from replaybuf_core.store.commit import read_generation

from .catalog import MASK_PREFIX

#: a mask name: letters, digits, ``_``, ``-`` and ``.``, at most 64 (it becomes part of a meta key)
MASK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}")


class StoreChangedError(RuntimeError):
    """The store's episodes changed since the page was loaded (marks would land on other episodes)."""


def store_state(rb: ReplayBuffer) -> str:
    """A token naming the episodes of ``rb`` as they are now: ``"g<edit generation>-e<episodes>-<hash>"``,
    the hash (BLAKE2b, 64 bits) over ``meta/episode_ends`` and the generation.

    Marks are episode indices, so they stay true exactly while this token does: an append adds
    an end (indices kept: a new token, and a save made before it is refused — the page reloads),
    any edit (delete, trim, keep, drop) bumps the edit generation even when the ends come out the
    same (delete episode 0, then append one of the same length).  Episode lengths alone could
    repeat; the generation never goes back, except when an interrupted edit is rolled back to the
    very episodes it started from."""
    ends = np.ascontiguousarray(rb.episode_ends, dtype="<i8")
    gen = read_generation(rb.store)
    digest = hashlib.blake2b(ends.tobytes(), digest_size=8, person=b"rb-marks")
    digest.update(str(gen).encode())
    return f"g{gen}-e{ends.size}-{digest.hexdigest()}"


def check_mask_name(name: Any) -> str:
    """``name`` when it can name ``meta/mask.<name>``; ValueError (naming it and the rule) otherwise."""
    if not isinstance(name, str) or not MASK_NAME.fullmatch(name):
        raise ValueError(f"mask name {name!r} is invalid: use 1-64 letters, digits, '_', '-' or '.', "
                         "starting with a letter, digit or '_'")
    return name


def check_episodes(episodes: Any, n_episodes: int | None) -> np.ndarray:
    """The marked episode indices as sorted unique int64, each in ``[0, n_episodes)`` (``n_episodes``
    None: the types only, each index a non-negative int64).

    Raises TypeError when they are not a list of integers, IndexError naming the first index out of
    range (and the count)."""
    if not isinstance(episodes, (list, tuple)) or not all(
            isinstance(e, int) and not isinstance(e, bool) for e in episodes):
        raise TypeError(f"episodes must be a list of integers, got {episodes!r:.80}")
    has = f": the store has {n_episodes} episodes" if n_episodes is not None else ""
    try:
        idx = np.unique(np.asarray(episodes, dtype=np.int64))
    except OverflowError:
        raise IndexError(f"an episode index is out of range{has}") from None
    bad = idx[(idx < 0) | (idx >= (n_episodes if n_episodes is not None else np.iinfo(np.int64).max))]
    if bad.size:
        raise IndexError(f"episode {int(bad[0])} is out of range{has}")
    return idx


def save_mask(path: Any, name: str, episodes: Any, expected_state: str,
              storage_options: dict | None = None) -> np.ndarray:
    """Write ``meta/mask.<name>`` (bool, one row per episode, True for ``episodes``) into the store
    at ``path``, replacing a mask of that name — only if the store's episodes are still those
    ``expected_state`` (:func:`store_state`) names, the state the page showed when the user marked.

    Opens the store writable for the write only, which takes the writer lock (a lease on object
    storage) as every writer does; the state is then read again *under the lock*, from the store
    (not from the viewer's copy), so no commit can slip between the check and the write.  Nothing is
    written unless every check passes.

    Returns the mask written.

    Raises:
        ValueError: a bad mask name.  TypeError / IndexError: bad ``episodes``.
        StoreLockedError: another process is writing the store.
        StoreChangedError: the store's episodes are no longer those of ``expected_state``.
        FileNotFoundError: there is no store at ``path`` (any more).
    """
    check_mask_name(name)
    check_episodes(episodes, None)  # the types now; the range once the store is open
    with ReplayBuffer(path, storage_options=storage_options) as rb:
        now = store_state(rb)
        if now != expected_state:
            raise StoreChangedError(
                f"the store changed since the page was loaded (the page showed {_describe(expected_state)}; "
                f"the store now has {_describe(now)}): its episode indices may name other episodes, so "
                "reload the page and mark again (nothing was written)")
        idx = check_episodes(episodes, rb.n_episodes)
        mask = np.zeros(rb.n_episodes, dtype=bool)
        mask[idx] = True
        rb.update_meta({MASK_PREFIX + name: mask})
    return mask


def _describe(state: str) -> str:
    """A :func:`store_state` token in words: ``"5 episodes at edit generation 1 (state g1-e5-…)"``."""
    m = re.fullmatch(r"g([0-9]+)-e([0-9]+)-[0-9a-f]+", state)
    if m is None:
        return f"state {state!r}"
    return f"{m[2]} episodes at edit generation {m[1]} (state {state})"


def edit_commands(path: str, name: str, episodes: Sequence[int]) -> dict[str, str]:
    """The ``replaybuf edit`` commands that act on marked ``episodes`` (none is run here):
    ``{"delete": "replaybuf edit delete PATH 3 17", "keep": "replaybuf edit keep PATH --mask mask.<name>"}``
    (``keep`` keeps the marked episodes once the mask is saved)."""
    idx = " ".join(str(int(e)) for e in sorted(set(episodes)))
    p = shlex.quote(str(path))
    return {"delete": f"replaybuf edit delete {p} {idx}".rstrip(),
            "keep": f"replaybuf edit keep {p} --mask {shlex.quote(MASK_PREFIX + name)}"}
