"""The episode generator: :func:`generate_task_episodes`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, Optional, Sequence

import numpy as np

from .render import FrameRenderer
from .shapes import collides
from .tasks import TaskGeometry, task_geometry
from .validation import check_int, check_mode_weights, check_nonnegative_real

__all__ = [
    "EPISODE_KEYS",
    "MIN_IMAGE_SIZE",
    "MAX_REDRAWS",
    "GenerationSettings",
    "resolve_generation_arguments",
    "episode_modes",
    "generate_task_episodes",
    "iterate_episodes",
]

#: Keys of every episode dict, in this order.
EPISODE_KEYS = ("image", "position", "action", "mode_id", "context")
#: Smallest and largest accepted ``image_size`` (px).  One episode's frames are rendered at once:
#: 60 steps at 1024 px are 189 MB; larger sides would need gigabytes per episode.
MIN_IMAGE_SIZE, MAX_IMAGE_SIZE = 8, 1024
#: Attempts to draw a collision-free noisy trajectory before giving up with RuntimeError.
MAX_REDRAWS = 100


@dataclass(frozen=True)
class GenerationSettings:
    """Validated generator arguments (built by :func:`resolve_generation_arguments`).

    ``mode_weights`` is ``None`` (balanced) or float64 ``(M,)`` normalised to sum 1.
    """

    geometry: TaskGeometry
    num_episodes: int
    seed: int
    image_size: int
    trajectory_length: int
    noise_std: float
    mode_weights: Optional[np.ndarray]


def resolve_generation_arguments(
    task_name: str,
    num_episodes: int,
    seed: int,
    image_size: int = 64,
    num_modes: Optional[int] = None,
    trajectory_length: int = 60,
    noise_std: float = 0.008,
    num_styles: int = 1,
    mode_weights: Optional[Sequence[float]] = None,
) -> GenerationSettings:
    """Check every argument of :func:`generate_task_episodes` and return them resolved.

    Raises:
        ValueError / TypeError: see :func:`generate_task_episodes`.
    """
    geometry = task_geometry(task_name, num_modes, num_styles, noise_std)
    return GenerationSettings(
        geometry=geometry,
        num_episodes=check_int("num_episodes", num_episodes, 0),
        seed=check_int("seed", seed, 0),
        image_size=check_int("image_size", image_size, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE),
        trajectory_length=check_int("trajectory_length", trajectory_length, 2),
        noise_std=check_nonnegative_real("noise_std", noise_std),
        mode_weights=check_mode_weights(mode_weights, geometry.total_modes, geometry.task_name),
    )


def episode_modes(settings: GenerationSettings, rng: np.random.Generator) -> np.ndarray:
    """Mode of every episode, uint8 ``(num_episodes,)``, drawn from ``rng``.

    Balanced (``mode_weights is None``): mode ``m`` appears ``N // M`` times, plus one for
    the first ``N % M`` modes, and the sequence is shuffled with ``rng.permutation``.
    Weighted: i.i.d. draws ``rng.choice(M, size=N, p=mode_weights)``.
    """
    n, m = settings.num_episodes, settings.geometry.total_modes
    if settings.mode_weights is None:
        counts = np.full(m, n // m, dtype=np.int64)
        counts[: n % m] += 1
        modes = rng.permutation(np.repeat(np.arange(m), counts))
    else:
        modes = rng.choice(m, size=n, p=settings.mode_weights)
    return modes.astype(np.uint8)


def generate_task_episodes(
    task_name: str,
    num_episodes: int,
    seed: int,
    image_size: int = 64,
    num_modes: Optional[int] = None,
    trajectory_length: int = 60,
    noise_std: float = 0.008,
    num_styles: int = 1,
    mode_weights: Optional[Sequence[float]] = None,
) -> Iterator[Dict[str, np.ndarray]]:
    """Generate episodes of a synthetic multimodal task (geometry: see :mod:`replaybuf_core.synthetic.tasks`).

    A point agent moves in the unit square (``y`` up). Arguments are validated when this
    function is *called*; the returned iterator then produces one episode at a time, so
    memory stays at one episode. Same arguments and seed give byte-identical episodes.

    Args:
        task_name: ``circle``, ``conditional_circle``, ``sequential_decision``, ``radial`` or
            ``corridor_navigation``.
        num_episodes: ``N >= 0``.
        seed: int ``>= 0`` for ``np.random.default_rng``.
        image_size: ``8 <= S <= 1024`` pixels.
        num_modes: ``K``; ``None`` = task default. circle and conditional_circle have exactly
            2 modes and sequential_decision exactly 4: any other explicit value raises
            ValueError. radial: ``K >= 2`` rays. corridor_navigation: even ``K`` in [2, 40] gaps.
        trajectory_length: ``T >= 2`` steps.
        noise_std: standard deviation of i.i.d. Gaussian noise added to every position
            (unit coordinates), then clipped to [0, 1].
        num_styles: ``S >= 1`` wiggle styles per gap (corridor_navigation only).
        mode_weights: ``None`` for balanced counts, or ``M = K * S`` non-negative weights
            (normalised) from which each episode's mode is drawn.

    Yields:
        dict with, in this order:

        * ``image``: uint8 ``(T, S, S, 3)`` RGB frames (see :mod:`.render`),
        * ``position``: float32 ``(T, 2)`` in ``[0, 1]``,
        * ``action``: float32 ``(T, 2)``, ``position[t + 1] - position[t]`` (float32), last row 0,
        * ``mode_id``: uint8 ``(T, 1)``, the episode's mode repeated,
        * ``context``: float32 ``(T, C)`` with ``C = M``: one-hot mode for conditional_circle,
          zeros otherwise.

    Randomness: one ``np.random.default_rng(seed)`` stream. First the whole mode sequence is
    drawn (:func:`episode_modes`: balanced counts shuffled, or weighted i.i.d. draws), then
    the noise of each episode in order. A noisy trajectory that touches an obstacle is
    re-drawn (so the noise is Gaussian conditioned on a collision-free path), up to
    :data:`MAX_REDRAWS` times.

    Raises:
        ValueError: unknown task (message lists the tasks); out-of-range argument; explicit
            ``num_modes`` incompatible with the task; odd ``num_modes`` for corridor_navigation;
            ``num_styles > 1`` outside corridor_navigation; ``mode_weights`` of wrong length,
            negative, non-finite or all zero.
        TypeError: an argument of the wrong type (e.g. a float ``num_episodes``).
        RuntimeError: (while iterating) no collision-free trajectory after :data:`MAX_REDRAWS`
            attempts -- the geometry is too tight for ``noise_std`` / ``num_modes``.
    """
    settings = resolve_generation_arguments(
        task_name, num_episodes, seed, image_size, num_modes, trajectory_length, noise_std, num_styles, mode_weights
    )
    return iterate_episodes(settings)


def iterate_episodes(settings: GenerationSettings) -> Iterator[Dict[str, np.ndarray]]:
    """Generator of the episodes described by already-validated ``settings`` (see :func:`generate_task_episodes`)."""
    geometry = settings.geometry
    rng = np.random.default_rng(settings.seed)
    modes = episode_modes(settings, rng)
    renderer = FrameRenderer(geometry, settings.image_size)
    t_len = settings.trajectory_length
    clean_paths: Dict[int, np.ndarray] = {}
    for mode in modes.tolist():
        if mode not in clean_paths:
            clean_paths[mode] = geometry.clean_path(mode, t_len)
        position = _draw_positions(settings, clean_paths[mode], mode, rng)
        action = np.zeros_like(position)
        action[:-1] = position[1:] - position[:-1]
        yield {
            "image": renderer.render(position, mode),
            "position": position,
            "action": action,
            "mode_id": np.full((t_len, 1), mode, dtype=np.uint8),
            "context": np.tile(geometry.context_row(mode), (t_len, 1)),
        }


def _draw_positions(settings: GenerationSettings, clean: np.ndarray, mode: int, rng: np.random.Generator) -> np.ndarray:
    geometry = settings.geometry
    sigma = settings.noise_std
    attempts = MAX_REDRAWS if sigma > 0 else 1
    for _ in range(attempts):
        noisy = clean + rng.normal(0.0, sigma, size=clean.shape) if sigma > 0 else clean
        position = np.clip(noisy, 0.0, 1.0).astype(np.float32)
        if not collides(position, geometry.obstacles):
            return position
    label = geometry.mode_labels()[mode]
    raise RuntimeError(
        f"task {geometry.task_name!r}: no collision-free trajectory for mode {mode} ({label}) after {attempts} "
        f"attempt(s) with noise_std={sigma}, num_modes={geometry.num_modes}, num_styles={geometry.num_styles}; "
        f"the geometry is too tight for this noise -- lower noise_std or num_modes"
    )
