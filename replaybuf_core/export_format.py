"""What an export format is: the plug-in class (:class:`ExportFormat`), the checked plan it writes
from (:class:`ExportPlan`) and what it reports (:class:`ExportReport`).

An export format writes a store's episodes in another library's layout (``replaybuf export FORMAT
STORE DST``).  It speaks only the store's public reading API (``rb[key]``, ``episode_ends``, ``meta``,
the data group's attributes), so it works on every backend.  The pipeline that runs it
(:func:`replaybuf_core.exporting.run.export_dataset`) checks the plan, has the format check it too
(:meth:`ExportFormat.check`, before anything is written), builds beside DST, has the format read
what it wrote back through an independent reader (:meth:`ExportFormat.verify`) and only then swaps
it in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

__all__ = ["ExportFormat", "ExportPlan", "ExportReport"]


@dataclass
class ExportPlan:
    """A checked export: which episodes and keys of the buffer ``rb`` go out, under which names.

    ``episodes``: store episode indices, in the order they are written (exported episode ``j`` is
    store episode ``episodes[j]``); ``names``: store data key → exported name (the keys chosen, in
    the store's order, renames applied); ``options``: the format's own options (keyword → value);
    ``psnr``: what a lossy format's verification measured (exported name → dB against the store).
    """

    rb: Any
    episodes: list[int]
    names: dict[str, str]
    options: dict[str, Any] = field(default_factory=dict)
    psnr: dict[str, float] = field(default_factory=dict)

    @property
    def lengths(self) -> np.ndarray:
        """Steps of each exported episode (int64, shape ``(len(episodes),)``)."""
        return self.rb.episode_lengths[self.episodes].astype(np.int64)

    @property
    def n_steps(self) -> int:
        """Steps exported in all."""
        return int(self.lengths.sum())

    def span(self, j: int) -> tuple[int, int]:
        """``(start, stop)`` store rows of exported episode ``j``."""
        ends = self.rb.episode_ends
        i = self.episodes[j]
        return (int(ends[i - 1]) if i else 0), int(ends[i])

    def read(self, key: str, j: int) -> np.ndarray:
        """Exported episode ``j``'s rows of store key ``key``, in the dtype the source stored
        (``rb[key]``'s: float32 images of a diffusion-policy import read as float32)."""
        a, b = self.span(j)
        return np.asarray(self.rb[key][a:b])

    def step_spec(self, key: str) -> tuple[tuple[int, ...], np.dtype]:
        """``(step shape, dtype)`` of store key ``key`` as read (the source's dtype)."""
        arr = self.rb[key]
        return tuple(arr.shape[1:]), np.dtype(arr.dtype)

    def data_attrs(self) -> dict[str, Any]:
        """The store's data-group attributes (what an import kept: ``fps``, ``source_attrs``,
        ``key_attrs``...)."""
        return dict(self.rb.store.get_attrs("data"))


@dataclass
class ExportReport:
    """What an export did: ``format``, ``dst``, ``n_episodes``, ``n_steps``, the exported names,
    ``compared`` (what verification read back and how: one line each), ``notes`` (what the format
    decided or left out), ``psnr`` (lossy keys: exported name → dB against the store), ``seconds``
    and ``bytes`` (DST on disk)."""

    format: str
    dst: str
    n_episodes: int
    n_steps: int
    names: dict[str, str]
    compared: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    psnr: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    bytes: int = 0

    def summary(self) -> str:
        """A few lines for the CLI."""
        out = [f"exported {self.n_episodes} episodes, {self.n_steps} steps as {self.format} to {self.dst} "
               f"in {self.seconds:.1f} s ({self.bytes:,} bytes)"]
        renamed = {k: v for k, v in self.names.items() if k != v}
        if renamed:
            out.append("  renamed: " + ", ".join(f"{k} -> {v}" for k, v in renamed.items()))
        out += [f"  note: {n}" for n in self.notes]
        out.append("verification: OK (" + "; ".join(self.compared) + ")")
        return "\n".join(out)


class ExportFormat:
    """What an export-format plugin registers (the ``replaybuf_export_formats`` hook): a small named
    class.

    Subclasses set :attr:`name` (``replaybuf export NAME STORE DST``), :attr:`description`,
    :attr:`requires` (the pip extra its writer needs) and implement :meth:`write`, :meth:`verify`
    and :meth:`recognises`; :meth:`check` refuses what the layout cannot hold before anything is
    written; :meth:`add_arguments` adds the format's own CLI options.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    requires: ClassVar[str | None] = None

    def add_arguments(self, group) -> list[str]:
        """Add this format's ``replaybuf export`` options to argparse ``group``; return their
        ``dest`` names (passed as ``options`` when set)."""
        return []

    def check(self, plan: ExportPlan) -> list[str]:
        """Refuse (ValueError naming the key or episode) what this layout cannot hold; return notes
        on what it decided.  Runs before anything is written."""
        return []

    def write(self, plan: ExportPlan, path: Path, progress: Any) -> list[str]:
        """Write the plan at ``path`` (which does not exist); call ``progress(n_rows)`` as each key's
        rows are written (the bar shows steps: ``n_rows`` rows of one key are ``n_rows / len(plan.names)``
        steps); return notes."""
        raise NotImplementedError

    def verify(self, plan: ExportPlan, path: Path) -> list[str]:
        """Read ``path`` back through an independent reader and compare it with the store; return
        one line per thing compared.  Raises ValueError naming the key, episode and row that
        differ."""
        raise NotImplementedError

    def recognises(self, path: str | os.PathLike) -> bool:
        """True when ``path`` holds a dataset of this format (``--overwrite`` replaces only such a
        path; never raises)."""
        return False
