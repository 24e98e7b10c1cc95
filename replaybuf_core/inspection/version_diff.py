"""What changed between two versions of a store: episodes added, removed and changed.

Episodes are told apart by content: each episode's fingerprint is a BLAKE2b digest of its rows of
every data key that is not camera frames (and of its length), so the comparison reads the small keys
only.  An episode of one version whose fingerprint the other has (as often) is the same episode,
wherever it sits; what is left is *removed* (only in the first) or *added* (only in the second), and
an added episode whose rows of the first small key are a run inside a removed one's is that episode
*changed* (trimmed or rewritten in part).  Two episodes equal in every small key and length count as
the same episode (frames are not compared).
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["VersionDiff", "diff_versions"]


@dataclass
class VersionDiff:
    """Episode indices of the first version (``removed``, ``changed`` keys) and of the second
    (``added``, ``changed`` values), and the two versions' records."""

    a: dict
    b: dict
    removed: list[int] = field(default_factory=list)
    added: list[int] = field(default_factory=list)
    changed: dict[int, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        def few(xs: list[int]) -> str:
            return ", ".join(map(str, xs[:20])) + (f", ... ({len(xs)} in all)" if len(xs) > 20 else "")
        out = [f"version {self.a['id']} ({self.a['n_episodes']} episodes, {self.a['n_steps']} steps) -> version "
               f"{self.b['id']} ({self.b['n_episodes']} episodes, {self.b['n_steps']} steps)"]
        out.append(f"removed {len(self.removed)} episode(s)" + (f": {few(self.removed)}" if self.removed else ""))
        out.append(f"added {len(self.added)} episode(s)" + (f": {few(self.added)}" if self.added else ""))
        pairs = [f"{i}->{j}" for i, j in sorted(self.changed.items())]
        out.append(f"changed {len(pairs)} episode(s)" + (f": {', '.join(pairs[:20])}" if pairs else "")
                   + (f", ... ({len(pairs)} in all)" if len(pairs) > 20 else ""))
        return out


def _episodes(rb: Any) -> tuple[list[bytes], list[np.ndarray]]:
    """Fingerprints of ``rb``'s episodes, and each episode's rows of its first small key."""
    from replaybuf_core.layout.frames import frame_keys

    small = [k for k in rb.keys() if k not in set(frame_keys(rb))]
    ends = np.asarray(rb.episode_ends, dtype=np.int64)
    starts = np.r_[0, ends[:-1]]
    arrays = {k: np.asarray(rb.store.read("data", k, 0, rb.n_steps)) for k in small}
    prints, firsts = [], []
    for a, b in zip(starts, ends):
        h = hashlib.blake2b(str(int(b - a)).encode(), digest_size=16)
        for k in small:
            h.update(k.encode())
            h.update(np.ascontiguousarray(arrays[k][a:b]).tobytes())
        prints.append(h.digest())
        firsts.append(arrays[small[0]][a:b] if small else np.zeros(0))
    return prints, firsts


def _inside(part: np.ndarray, whole: np.ndarray) -> bool:
    n = len(part)
    if not n or n > len(whole):
        return False
    hits = np.flatnonzero(np.all((whole[: len(whole) - n + 1] == part[0]).reshape(len(whole) - n + 1, -1), axis=1))
    return any(np.array_equal(whole[h:h + n], part) for h in hits[:64])


def diff_versions(path: Any, v1: Any, v2: Any = -1) -> VersionDiff:
    """The :class:`VersionDiff` between versions ``v1`` and ``v2`` (tags, ids or negative numbers;
    default the current one) of the store at ``path``, opened read-only at each.

    Raises VersionNotFoundError (a KeyError) naming the known versions."""
    from replaybuf_core.store.buffer import ReplayBuffer

    with ReplayBuffer(path, version=v1) as ra, ReplayBuffer(path, version=v2) as rb:
        pa, fa = _episodes(ra)
        pb, fb = _episodes(rb)
        out = VersionDiff(ra.version, rb.version)
    left = Counter(pa)
    where = defaultdict(list)
    for i, p in enumerate(pa):
        where[p].append(i)
    matched_a = set()
    for j, p in enumerate(pb):
        if left[p]:
            left[p] -= 1
            matched_a.add(where[p].pop(0))
        else:
            out.added.append(j)
    out.removed = [i for i in range(len(pa)) if i not in matched_a]
    for j in list(out.added):
        for i in out.removed:
            if i not in out.changed and _inside(fb[j], fa[i]):
                out.changed[i] = j
                break
    out.added = [j for j in out.added if j not in set(out.changed.values())]
    out.removed = [i for i in out.removed if i not in out.changed]
    return out
