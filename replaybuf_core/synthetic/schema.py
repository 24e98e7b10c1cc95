"""``SyntheticSchema``: the settings of one synthetic data set and the arrays it produces."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np

from .generate import EPISODE_KEYS, GenerationSettings, iterate_episodes, resolve_generation_arguments
from .plot import TrajectoryRecorder
from .shapes import Obstacle
from .tasks import TaskGeometry

__all__ = ["SyntheticSchema", "LOW_DIM_CHUNK_ROWS"]

#: Rows per chunk of the low-dimensional arrays (position, action, mode_id, context).
LOW_DIM_CHUNK_ROWS = 1024


@dataclass(frozen=True)
class SyntheticSchema:
    """Settings of a synthetic data set destined for a zarr store; validated on construction.

    The arguments mean the same as in :func:`~.generate.generate_task_episodes`; ``num_modes=None``
    picks the task default (2; 4 for sequential_decision). The instance is frozen; use
    ``dataclasses.replace`` to derive a variant (it is validated again).

    Attributes:
        zarr_path: target store; ``str`` or ``os.PathLike``, stored as a ``Path`` with ``~`` expanded.
        mode_weights: stored as a tuple of floats as given (normalisation happens at generation).

    Raises:
        TypeError: ``zarr_path`` not a ``str``/``os.PathLike`` (``bytes`` paths are rejected), or
            any argument of the wrong type.
        ValueError: empty ``zarr_path`` or any invalid setting (same checks as the generator).
    """

    zarr_path: Path
    task_name: str = "circle"
    num_episodes: int = 1000
    seed: int = 42
    image_size: int = 64
    num_modes: Optional[int] = None
    trajectory_length: int = 60
    noise_std: float = 0.008
    num_styles: int = 1
    mode_weights: Optional[Tuple[float, ...]] = None

    def __post_init__(self) -> None:
        raw = self.zarr_path
        if not isinstance(raw, (str, os.PathLike)):
            raise TypeError(f"zarr_path must be a str or os.PathLike, got {raw!r} of type {type(raw).__name__}")
        text = os.fspath(raw)
        if not isinstance(text, str):
            raise TypeError(f"zarr_path must be a text path, got bytes path {raw!r}")
        if not text.strip():
            raise ValueError(f"zarr_path must not be empty, got {raw!r}")
        object.__setattr__(self, "zarr_path", Path(text).expanduser())
        settings = resolve_generation_arguments(
            self.task_name,
            self.num_episodes,
            self.seed,
            self.image_size,
            self.num_modes,
            self.trajectory_length,
            self.noise_std,
            self.num_styles,
            self.mode_weights,
        )
        object.__setattr__(self, "_settings", settings)
        # Store the normalised, plain-Python forms (ints/floats, weights as a tuple).
        object.__setattr__(self, "num_episodes", settings.num_episodes)
        object.__setattr__(self, "seed", settings.seed)
        object.__setattr__(self, "image_size", settings.image_size)
        object.__setattr__(self, "trajectory_length", settings.trajectory_length)
        object.__setattr__(self, "noise_std", settings.noise_std)
        object.__setattr__(self, "num_styles", settings.geometry.num_styles)
        if self.num_modes is not None:
            object.__setattr__(self, "num_modes", settings.geometry.num_modes)
        if self.mode_weights is not None:
            object.__setattr__(self, "mode_weights", tuple(float(w) for w in np.asarray(self.mode_weights, dtype=np.float64)))

    # ------------------------------------------------------------------ derived

    @property
    def settings(self) -> GenerationSettings:
        """The validated generator settings."""
        return self._settings  # type: ignore[attr-defined]

    @property
    def geometry(self) -> TaskGeometry:
        """Task geometry (obstacles, mode labels, clean paths)."""
        return self.settings.geometry

    @property
    def total_modes(self) -> int:
        """``M``: number of modes (``K * num_styles``)."""
        return self.geometry.total_modes

    @property
    def context_dim(self) -> int:
        """``C``: width of the ``context`` array (= ``M``)."""
        return self.geometry.context_dim

    @property
    def obstacles(self) -> Tuple[Obstacle, ...]:
        """Obstacles in unit coordinates (as drawn in the frames and the plot)."""
        return self.geometry.obstacles

    # ------------------------------------------------------------------ methods

    def episodes(self) -> Iterator[Dict[str, np.ndarray]]:
        """A fresh generator of the ``num_episodes`` episodes (see ``generate_task_episodes``); deterministic."""
        return iterate_episodes(self.settings)

    def array_specs(self) -> Dict[str, Dict[str, Any]]:
        """Empty-array specs for a store that episodes are appended to along axis 0 (steps).

        Returns:
            ``{key: {"shape", "chunks", "dtype", "needs_compressor"}}`` for the keys
            ``image``, ``position``, ``action``, ``mode_id``, ``context`` (in that order):

            * image: shape ``(0, S, S, 3)``, chunks ``(1, S, S, 3)``, uint8, compressor: yes
            * position, action: ``(0, 2)``, chunks ``(1024, 2)``, float32, compressor: no
              (noisy floats barely compress)
            * mode_id: ``(0, 1)``, chunks ``(1024, 1)``, uint8, compressor: yes (constant runs)
            * context: ``(0, C)``, chunks ``(1024, C)``, float32, compressor: yes (zeros / one-hot)
        """
        s, c, rows = self.image_size, self.context_dim, LOW_DIM_CHUNK_ROWS
        specs = {
            "image": ((s, s, 3), (1, s, s, 3), np.uint8, True),
            "position": ((2,), (rows, 2), np.float32, False),
            "action": ((2,), (rows, 2), np.float32, False),
            "mode_id": ((1,), (rows, 1), np.uint8, True),
            "context": ((c,), (rows, c), np.float32, True),
        }
        assert tuple(specs) == EPISODE_KEYS
        return {
            key: {"shape": (0,) + inner, "chunks": chunks, "dtype": np.dtype(dtype), "needs_compressor": compress}
            for key, (inner, chunks, dtype, compress) in specs.items()
        }

    def trajectory_plot_path(self) -> Path:
        """``<parent>/<stem>_trajectories.png`` where ``stem`` is the store name without a ``.zarr`` suffix."""
        name = self.zarr_path.name
        stem = name[: -len(".zarr")] if name.endswith(".zarr") and len(name) > len(".zarr") else name
        return self.zarr_path.parent / f"{stem}_trajectories.png"

    def trajectory_recorder(self) -> TrajectoryRecorder:
        """A :class:`~.plot.TrajectoryRecorder` set up with this task's name, obstacles and mode labels.

        Feed it each episode of :meth:`episodes` with ``add`` and call
        ``save(schema.trajectory_plot_path())`` at the end.
        """
        return TrajectoryRecorder(self.task_name, self.obstacles, self.geometry.mode_labels())
