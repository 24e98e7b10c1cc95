"""Progress bars of the long verbs (editing, merging, verifying, exporting): a tqdm bar on stderr, as the
import's (``--no-progress`` turns it off).  The verbs that move data key by key count its bytes as
decoded rows hold them (:func:`~replaybuf_core.layout.chunks.row_bytes`) — the one measure that grows
evenly across keys of very different widths (a camera key's row is thousands of times an action's)."""

from __future__ import annotations

from typing import Any

__all__ = ["progress_bar"]


def progress_bar(desc: str, total: float | None, enabled: bool, unit: str = "B") -> Any:
    """A tqdm bar (``tqdm.auto``: a widget in notebooks) counting ``total`` ``unit`` — bytes ("B", shown
    in KiB/MiB/GiB) unless said otherwise; with ``enabled`` False a disabled bar, whose ``update``,
    ``reset`` and ``close`` do nothing.  A bar made before its total is known (``total`` 0 or None,
    given later by ``reset(total=...)``) is not drawn until then or half a second has passed: no
    empty "0.00B" line."""
    from tqdm.auto import tqdm

    class Bar(tqdm):
        def reset(self, total=None):
            self.delay = 0  # the total is known: drawn from now on, and closed with its last line
            super().reset(total=total)

    scale = {"unit_scale": True, "unit_divisor": 1024} if unit == "B" else {}
    return Bar(total=total, desc=desc, unit=unit, disable=not enabled, delay=0.5 if not total else 0, **scale)
