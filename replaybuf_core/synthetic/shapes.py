"""Obstacle primitives in unit-square coordinates.

All synthetic tasks live in the unit square ``[0, 1] x [0, 1]`` with ``x`` growing to
the right and ``y`` growing *upward*. Obstacles are either discs (:class:`Circle`) or
axis-aligned rectangles (:class:`Rect`). The same objects are used to draw frames,
to draw the trajectory plot and to reject colliding samples, so all three agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union

import numpy as np

__all__ = ["Circle", "Rect", "Obstacle", "distance_to_obstacles", "collides"]


@dataclass(frozen=True)
class Circle:
    """A solid disc obstacle.

    Attributes:
        cx, cy: centre in unit coordinates (``y`` up).
        radius: radius in unit coordinates (> 0).
    """

    cx: float
    cy: float
    radius: float

    def distance(self, points: np.ndarray) -> np.ndarray:
        """Signed distance from ``points`` (shape ``(..., 2)``, unit coordinates) to the disc.

        Returns float64 of shape ``points.shape[:-1]``: positive outside, ``<= 0`` inside
        or on the boundary.
        """
        p = np.asarray(points, dtype=np.float64)
        return np.hypot(p[..., 0] - self.cx, p[..., 1] - self.cy) - self.radius


@dataclass(frozen=True)
class Rect:
    """A solid axis-aligned rectangle obstacle ``[x0, x1] x [y0, y1]`` (unit coordinates, ``y`` up)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def __post_init__(self) -> None:
        if not (self.x0 < self.x1 and self.y0 < self.y1):
            raise ValueError(f"Rect needs x0 < x1 and y0 < y1, got {self!r}")

    def distance(self, points: np.ndarray) -> np.ndarray:
        """Signed distance from ``points`` (shape ``(..., 2)``) to the rectangle.

        Returns float64 of shape ``points.shape[:-1]``: positive outside (Euclidean distance
        to the nearest edge or corner), ``<= 0`` inside or on the boundary.
        """
        p = np.asarray(points, dtype=np.float64)
        cx, cy = (self.x0 + self.x1) / 2.0, (self.y0 + self.y1) / 2.0
        hx, hy = (self.x1 - self.x0) / 2.0, (self.y1 - self.y0) / 2.0
        dx = np.abs(p[..., 0] - cx) - hx
        dy = np.abs(p[..., 1] - cy) - hy
        outside = np.hypot(np.maximum(dx, 0.0), np.maximum(dy, 0.0))
        inside = np.minimum(np.maximum(dx, dy), 0.0)
        return outside + inside


Obstacle = Union[Circle, Rect]


def distance_to_obstacles(points: np.ndarray, obstacles: Iterable[Obstacle]) -> np.ndarray:
    """Smallest signed distance from each point to any obstacle.

    Args:
        points: ``(..., 2)`` positions in unit coordinates.
        obstacles: circles and rectangles.

    Returns:
        float64 array of shape ``points.shape[:-1]``; ``+inf`` where there are no obstacles.
    """
    p = np.asarray(points, dtype=np.float64)
    best = np.full(p.shape[:-1], np.inf)
    for obstacle in obstacles:
        best = np.minimum(best, obstacle.distance(p))
    return best


def collides(points: np.ndarray, obstacles: Iterable[Obstacle]) -> bool:
    """True when any point lies inside or on the boundary of any obstacle (distance ``<= 0``)."""
    return bool(np.any(distance_to_obstacles(points, obstacles) <= 0.0))
