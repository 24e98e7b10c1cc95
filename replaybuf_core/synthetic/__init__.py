"""Synthetic multimodal imitation-learning data sets with known structure.

A point agent moves in the unit square (``y`` up) along one of several distinct ways
(*modes*) to solve a task; episodes carry rendered frames, positions, actions, the mode
id and a context vector. See :mod:`.tasks` for the geometry of each task, :mod:`.render`
for the frame layout and pixel mapping, :mod:`.plot` for the trajectory plot and
:mod:`.schema` for :class:`SyntheticSchema` and :mod:`.store` for writing a data set into a store
(:func:`create_replay_buffer_from_synthetic`). This package does not import zarr.
"""

from .generate import (
    EPISODE_KEYS,
    MAX_REDRAWS,
    MIN_IMAGE_SIZE,
    GenerationSettings,
    episode_modes,
    generate_task_episodes,
    iterate_episodes,
    resolve_generation_arguments,
)
from .plot import TrajectoryRecorder, plot_trajectories
from .render import (
    AGENT_COLOUR,
    BACKGROUND_COLOUR,
    CUE_COLOURS,
    CUE_RECT,
    OBSTACLE_COLOUR,
    TRAIL_COLOUR,
    FrameRenderer,
    agent_radius_px,
    position_to_pixel,
)
from .schema import SyntheticSchema
from .shapes import Circle, Obstacle, Rect, collides, distance_to_obstacles
from .store import create_replay_buffer_from_synthetic
from .tasks import MAX_MODES, TASK_NAMES, TaskGeometry, task_geometry, task_obstacles

__all__ = [
    "AGENT_COLOUR",
    "BACKGROUND_COLOUR",
    "CUE_COLOURS",
    "CUE_RECT",
    "EPISODE_KEYS",
    "MAX_MODES",
    "MAX_REDRAWS",
    "MIN_IMAGE_SIZE",
    "OBSTACLE_COLOUR",
    "TASK_NAMES",
    "TRAIL_COLOUR",
    "Circle",
    "FrameRenderer",
    "GenerationSettings",
    "Obstacle",
    "Rect",
    "SyntheticSchema",
    "TaskGeometry",
    "TrajectoryRecorder",
    "agent_radius_px",
    "collides",
    "distance_to_obstacles",
    "episode_modes",
    "create_replay_buffer_from_synthetic",
    "generate_task_episodes",
    "iterate_episodes",
    "plot_trajectories",
    "position_to_pixel",
    "resolve_generation_arguments",
    "task_geometry",
    "task_obstacles",
]
