"""The commit: ``meta/episode_ends`` (cumulative step counts; the rows it covers are committed) and
the small commit record written after it (``{"n_episodes", "n_steps", "generation"}`` in the ``meta``
attributes), which recovery checks ``episode_ends`` against.

``generation`` counts the edits committed (deletes, trims, keeps: changes to committed episodes; 0
before the first, and in records written before it existed).  Derived data — the stored statistics —
records the generation it was computed at and is trusted only at that generation, so what an edit's
interrupted follow-up left behind is never used (appends do not change it: statistics follow them
by the episodes they cover)."""

from __future__ import annotations

from replaybuf_core.protocol import StorageBackend

EPISODE_ENDS = "episode_ends"
#: fill value replaybuf gives ``meta/episode_ends``; a trailing run of it is an unfinished commit
EPISODE_ENDS_FILL = -1
#: ``meta`` group attribute holding the last commit: ``{"n_episodes": int, "n_steps": int, "generation": int}``
COMMIT_RECORD = "replaybuf_commit"
#: ``meta`` group attribute listing the meta arrays that hold one row per episode and grow with the
#: commits (an import's ``source_episode_index``, ``episode_attrs``...): rows past the committed
#: episodes are staged by an interrupted commit, and recovery trims them as it trims data rows
EPISODE_META = "replaybuf_episode_meta"


def read_commit_record(store: StorageBackend) -> tuple[int, int] | None:
    """``(n_episodes, n_steps)`` of the last commit recorded in ``store``'s ``meta`` attributes, or
    None when there is no (well-formed) record."""
    try:
        rec = store.get_attrs("meta").get(COMMIT_RECORD)
        return int(rec["n_episodes"]), int(rec["n_steps"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def read_generation(store: StorageBackend) -> int:
    """The edit generation of the last commit (see the module docstring); 0 without one."""
    try:
        return int(store.get_attrs("meta").get(COMMIT_RECORD, {}).get("generation", 0))
    except (AttributeError, KeyError, TypeError, ValueError):
        return 0


def write_commit_record(store: StorageBackend, n_episodes: int, n_steps: int, generation: int | None = None) -> None:
    """Record the committed state (see the module docstring for when it is written); ``generation``
    None keeps the current one (appends, drops, rollbacks), an edit's commit passes the next."""
    gen = read_generation(store) if generation is None else int(generation)
    store.set_attrs("meta", {COMMIT_RECORD: {"n_episodes": int(n_episodes), "n_steps": int(n_steps),
                                             "generation": gen}})
