"""The commit: ``meta/episode_ends`` (cumulative step counts; the rows it covers are committed) and
the small commit record written after it (``{"n_episodes", "n_steps"}`` in the ``meta`` attributes),
which recovery checks ``episode_ends`` against."""

from __future__ import annotations

from replaybuf_core.protocol import StorageBackend

EPISODE_ENDS = "episode_ends"
#: fill value replaybuf gives ``meta/episode_ends``; a trailing run of it is an unfinished commit
EPISODE_ENDS_FILL = -1
#: ``meta`` group attribute holding the last commit: ``{"n_episodes": int, "n_steps": int}``
COMMIT_RECORD = "replaybuf_commit"


def read_commit_record(store: StorageBackend) -> tuple[int, int] | None:
    """``(n_episodes, n_steps)`` of the last commit recorded in ``store``'s ``meta`` attributes, or
    None when there is no (well-formed) record."""
    try:
        rec = store.get_attrs("meta").get(COMMIT_RECORD)
        return int(rec["n_episodes"]), int(rec["n_steps"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def write_commit_record(store: StorageBackend, n_episodes: int, n_steps: int) -> None:
    """Record the committed state (see the module docstring for when it is written)."""
    store.set_attrs("meta", {COMMIT_RECORD: {"n_episodes": int(n_episodes), "n_steps": int(n_steps)}})
