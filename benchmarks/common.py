"""Timing helpers and the result table shared by the benchmark sections."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: Push-T: ``shared/data`` beside the repository (CI's layout), else this workplace's /work/shared
_CANDIDATES = (Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "pusht_cchi_v7_replay.zarr",
               Path("/work/shared/data/pusht_cchi_v7_replay.zarr"))
PUSHT = next((p for p in _CANDIDATES if p.is_dir()), _CANDIDATES[0])


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs, seconds."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def dir_bytes(path: str | os.PathLike) -> int:
    """Total size in bytes of the files under ``path``."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


@dataclass
class Table:
    """Rows of (section, measurement, value, unit) and ratio rows with their goals."""

    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    goals: list[tuple[str, str, float, str, bool]] = field(default_factory=list)

    def add(self, section: str, what: str, value: float, unit: str, fmt: str = "{:.3g}") -> None:
        self.rows.append((section, what, fmt.format(value), unit))

    def ratio(self, section: str, what: str, value: float, goal: str, met: bool) -> None:
        self.goals.append((section, what, value, goal, met))

    def render(self) -> str:
        out = []
        w = max([len(r[1]) for r in self.rows] + [len(g[1]) for g in self.goals] + [20])
        out.append(f"{'section':<10} {'measurement':<{w}} {'median':>12} unit")
        out.append("-" * (w + 32))
        for s, what, v, unit in self.rows:
            out.append(f"{s:<10} {what:<{w}} {v:>12} {unit}")
        out.append("")
        out.append(f"{'section':<10} {'ratio':<{w}} {'value':>12} goal            met")
        out.append("-" * (w + 48))
        for s, what, v, goal, met in self.goals:
            out.append(f"{s:<10} {what:<{w}} {v:>12.3g} {goal:<15} {'yes' if met else 'NO'}")
        return "\n".join(out)
