"""Matplotlib plot of all trajectories of a synthetic data set (Agg, no GUI, no pyplot state).

Incremental use while streaming episodes (images are never kept)::

    recorder = TrajectoryRecorder(task_name, obstacles, mode_labels)
    for episode in episodes:
        ...                                   # write the episode somewhere
        recorder.add(episode)                 # keeps only position (T, 2) and the mode id
    recorder.save("out_trajectories.png")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .shapes import Circle, Obstacle

__all__ = ["DEFAULT_FIGSIZE", "DEFAULT_DPI", "plot_trajectories", "TrajectoryRecorder"]

#: Default figure size in inches (width, height); with :data:`DEFAULT_DPI` the PNG is 800 x 600 px.
DEFAULT_FIGSIZE: Tuple[float, float] = (8.0, 6.0)
DEFAULT_DPI = 100
_MAX_LEGEND_MODES = 30


def _mode_colours(num_modes: int) -> np.ndarray:
    from matplotlib import colormaps

    if num_modes <= 10:
        return colormaps["tab10"](np.arange(num_modes))
    if num_modes <= 20:
        return colormaps["tab20"](np.arange(num_modes))
    return colormaps["turbo"](np.linspace(0.0, 1.0, num_modes))


def _as_mode(mode_id) -> int:
    arr = np.asarray(mode_id)
    if arr.size == 0:
        raise ValueError("mode_ids contains an empty entry")
    return int(arr.reshape(-1)[0])


def plot_trajectories(
    episodes_positions: Iterable[np.ndarray],
    mode_ids: Iterable,
    task_name: str,
    obstacles: Sequence[Obstacle],
    out_path: Union[str, os.PathLike],
    *,
    num_modes: Optional[int] = None,
    mode_labels: Optional[Sequence[str]] = None,
    title: Optional[str] = None,
    figsize: Tuple[float, float] = DEFAULT_FIGSIZE,
    dpi: int = DEFAULT_DPI,
) -> Path:
    """Plot every trajectory in the unit square, coloured by mode, and save a PNG.

    Draws obstacles (grey), each trajectory as a line in its mode's colour, start points
    (small black dots), end points (``x`` in the mode colour), ``title`` (default: the task
    name and episode count) and a legend (one entry per mode present, up to 30).

    Args:
        episodes_positions: iterable of float ``(T_i, 2)`` arrays, ``(x, y)`` in unit coordinates (``y`` up).
        mode_ids: one mode per episode: an int or any array whose first element is the mode
            (e.g. the ``(T, 1)`` ``mode_id`` of an episode).
        task_name: shown in the title.
        obstacles: :class:`~.shapes.Circle` / :class:`~.shapes.Rect` in unit coordinates.
        out_path: PNG file to write (parent folders are created).
        num_modes: number of modes for the colour map; default ``max(mode) + 1``.
        mode_labels: legend label per mode; default ``"mode m"``.
        figsize, dpi: figure size in inches and resolution; the PNG is
            ``round(figsize[0] * dpi) x round(figsize[1] * dpi)`` pixels.

    Returns:
        ``Path`` of the written PNG.

    Raises:
        ValueError: a positions array is not ``(T, 2)``, the two iterables differ in length,
            or a mode is negative or ``>= num_modes``.
    """
    # matplotlib is imported only when a plot is drawn (it costs ~0.3 s to import)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Circle as CirclePatch
    from matplotlib.patches import Patch, Rectangle

    positions: List[np.ndarray] = []
    for i, pos in enumerate(episodes_positions):
        arr = np.asarray(pos, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] < 1:
            raise ValueError(f"episodes_positions[{i}] must have shape (T, 2) with T >= 1, got {arr.shape}")
        positions.append(arr)
    modes = np.array([_as_mode(m) for m in mode_ids], dtype=np.int64)
    if len(modes) != len(positions):
        raise ValueError(f"got {len(positions)} position arrays but {len(modes)} mode ids")
    if num_modes is None:
        num_modes = int(modes.max()) + 1 if len(modes) else 1
    if len(modes) and (modes.min() < 0 or modes.max() >= num_modes):
        raise ValueError(f"mode ids must lie in [0, {num_modes}), got range [{modes.min()}, {modes.max()}]")
    labels = list(mode_labels) if mode_labels is not None else [f"mode {m}" for m in range(num_modes)]
    colours = _mode_colours(num_modes)

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_axes([0.08, 0.08, 0.62, 0.84])
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    for obstacle in obstacles:
        if isinstance(obstacle, Circle):
            patch = CirclePatch((obstacle.cx, obstacle.cy), obstacle.radius)
        else:
            patch = Rectangle((obstacle.x0, obstacle.y0), obstacle.x1 - obstacle.x0, obstacle.y1 - obstacle.y0)
        patch.set_facecolor("0.35")
        patch.set_edgecolor("0.15")
        patch.set_zorder(1)
        ax.add_patch(patch)

    handles: List = []
    present = np.unique(modes)
    for m in present.tolist():
        idx = np.flatnonzero(modes == m)
        alpha = float(np.clip(25.0 / len(idx), 0.15, 0.9))
        lines = LineCollection([positions[i] for i in idx], colors=[colours[m]], linewidths=0.8, alpha=alpha, zorder=2)
        ax.add_collection(lines)
        ends = np.array([positions[i][-1] for i in idx])
        ax.scatter(ends[:, 0], ends[:, 1], marker="x", s=14, color=colours[m], linewidths=0.8, zorder=4)
        if len(handles) < _MAX_LEGEND_MODES:
            label = labels[m] if m < len(labels) else f"mode {m}"
            handles.append(Line2D([], [], color=colours[m], label=f"{label} (n={len(idx)})"))
    if len(present) > _MAX_LEGEND_MODES:
        handles.append(Line2D([], [], linestyle="none", label=f"... {len(present) - _MAX_LEGEND_MODES} more modes"))
    if positions:
        starts = np.array([p[0] for p in positions])
        ax.scatter(starts[:, 0], starts[:, 1], marker=".", s=6, color="black", zorder=3)
    handles.append(Line2D([], [], linestyle="none", marker="x", color="0.2", label="end point"))
    handles.append(Line2D([], [], linestyle="none", marker=".", color="black", label="start point"))
    if obstacles:
        handles.append(Patch(facecolor="0.35", edgecolor="0.15", label="obstacle"))
    ncol = 1 if len(handles) <= 18 else 2
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(0.70, 0.5), fontsize="small", ncol=ncol, frameon=False)
    ax.set_title(title if title is not None else f"{task_name} ({len(positions)} episodes)")

    out = Path(out_path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=dpi)
    return out


class TrajectoryRecorder:
    """Collects positions and mode ids while episodes stream by, then calls :func:`plot_trajectories`.

    Only ``position`` (float32 ``(T, 2)``, copied) and the mode id are kept: about
    ``8 T`` bytes per episode; images are never referenced.

    Args:
        task_name: plot title.
        obstacles: obstacles to draw (e.g. :func:`~.tasks.task_obstacles`).
        mode_labels: optional legend label per mode; its length also fixes the colour map.
    """

    def __init__(self, task_name: str, obstacles: Sequence[Obstacle], mode_labels: Optional[Sequence[str]] = None) -> None:
        self.task_name = task_name
        self.obstacles = tuple(obstacles)
        self.mode_labels = tuple(mode_labels) if mode_labels is not None else None
        self.positions: List[np.ndarray] = []
        self.mode_ids: List[int] = []

    def __len__(self) -> int:
        return len(self.positions)

    def add(self, episode: Union[Mapping[str, np.ndarray], np.ndarray], mode_id=None) -> None:
        """Record one episode: an episode dict (uses ``position`` and ``mode_id``) or ``(positions, mode_id)``.

        Raises:
            ValueError: ``mode_id`` missing when ``episode`` is a positions array.
        """
        if isinstance(episode, Mapping):
            positions, mode = episode["position"], episode["mode_id"] if mode_id is None else mode_id
        else:
            if mode_id is None:
                raise ValueError("mode_id is required when adding a positions array")
            positions, mode = episode, mode_id
        self.positions.append(np.array(positions, dtype=np.float32, copy=True))
        self.mode_ids.append(_as_mode(mode))

    def save(self, out_path: Union[str, os.PathLike], **kwargs) -> Path:
        """Write the PNG via :func:`plot_trajectories` (``kwargs`` are passed on); returns its path."""
        if self.mode_labels is not None:
            kwargs.setdefault("num_modes", len(self.mode_labels))
            kwargs.setdefault("mode_labels", self.mode_labels)
        return plot_trajectories(self.positions, self.mode_ids, self.task_name, self.obstacles, out_path, **kwargs)
