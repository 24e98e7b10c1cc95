"""Trajectory geometry of the synthetic multimodal tasks.

Coordinates: the unit square ``[0, 1] x [0, 1]``, ``x`` to the right, ``y`` **up**.
Every task has a fixed obstacle layout and, for each mode, a noise-free *clean path*
sampled with ``T`` points spaced evenly by arc length.

Tasks (``K`` = ``num_modes``, ``S`` = ``num_styles``; mode count ``M``; context width ``C``):

``circle``
    Two circles of radius 0.2 centred at (0.5, 0.7) and (0.5, 0.3), touching at the start
    (0.5, 0.5). Mode 0 traces the upper circle counter-clockwise, mode 1 the lower circle
    clockwise (a figure eight: both leave the start moving right). A disc obstacle of
    radius 0.05 sits at each centre. ``M = 2`` (fixed), ``C = 2``, context all zeros.
``conditional_circle``
    Same geometry; context is the one-hot mode (``C = 2``) and each frame shows a
    coloured cue square in the top-left corner whose colour tells which circle to take.
``sequential_decision``
    Start at the bottom centre (0.5, 0.05), go up, branch left/right to x = 0.3 / 0.7,
    go up, branch again by +-0.12 and go up to y = 0.95. A rectangle sits between the
    first two branches and one between each pair of second branches.
    ``M = 4`` (fixed): 0 = LL, 1 = LR, 2 = RL, 3 = RR. ``C = 4``, context all zeros.
``radial``
    ``K >= 2`` straight rays from the centre (0.5, 0.5) to radius 0.4, ray ``k`` at angle
    ``2*pi*k/K`` (ray 0 points right, counter-clockwise). An axis-aligned square obstacle
    sits on each bisector at distance 0.3 from the centre, sized so that it stays at least
    ``0.01 + 5 * noise_std`` from both neighbouring rays (half-side clamped to [0.02, 0.06];
    with many rays -- about K > 16 at the default noise -- the squares crowd the rays, noisy
    samples keep colliding and generation raises RuntimeError). ``M = K``, ``C = K``,
    context all zeros.
``corridor_navigation``
    A vertical wall ``x in [0.47, 0.53]`` spanning the square, with ``K`` gaps (``K`` even,
    ``2 <= K <= 40``) centred at ``y_k = 0.05 + 0.9 (k + 0.5) / K`` so none is on the
    straight line y = 0.5. The path runs from (0.03, 0.5) to (0.35, y_k), through the gap
    horizontally to (0.65, y_k), then to (0.97, 0.5). With ``S > 1`` styles, style ``j``
    adds ``0.05 * sin(2 pi j v)`` to ``y`` along both diagonal legs (``v`` in [0, 1] along
    the leg; style 0 is straight). ``M = K * S``, mode ``m`` = gap ``m // S``, style
    ``m % S``. ``C = M``, context all zeros.

For every task the context width ``C`` equals the number of modes ``M``; only
``conditional_circle`` fills it (one-hot), the others carry zeros so that every task
has the same episode layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .shapes import Circle, Obstacle, Rect
from .validation import check_int, check_nonnegative_real

__all__ = [
    "TASK_NAMES",
    "MAX_MODES",
    "TaskGeometry",
    "task_geometry",
    "task_obstacles",
    "check_task_name",
    "corridor_gaps",
]

#: Names accepted by :func:`task_geometry` and the generator, in documentation order.
TASK_NAMES: Tuple[str, ...] = ("circle", "conditional_circle", "sequential_decision", "radial", "corridor_navigation")

#: ``mode_id`` is stored as uint8, so a task has at most this many modes.
MAX_MODES = 256

_FIXED_MODES = {"circle": 2, "conditional_circle": 2, "sequential_decision": 4}
_DEFAULT_MODES = {"circle": 2, "conditional_circle": 2, "sequential_decision": 4, "radial": 2, "corridor_navigation": 2}

# circle / conditional_circle
CIRCLE_RADIUS = 0.2
CIRCLE_START = (0.5, 0.5)
CIRCLE_CENTRES = ((0.5, 0.7), (0.5, 0.3))
CIRCLE_OBSTACLE_RADIUS = 0.05

# radial
RAY_LENGTH = 0.4
RADIAL_OBSTACLE_DISTANCE = 0.3
RADIAL_HALF_SIDE_RANGE = (0.02, 0.06)
RADIAL_BASE_CLEARANCE = 0.01
CLEARANCE_SIGMAS = 5.0

# corridor_navigation
WALL_X = (0.47, 0.53)
CORRIDOR_MAX_GAPS = 40
CORRIDOR_START = (0.03, 0.5)
CORRIDOR_END = (0.97, 0.5)
CORRIDOR_GAP_ENTRY_X = (0.35, 0.65)
STYLE_AMPLITUDE = 0.05

# sequential_decision
SEQ_START = (0.5, 0.05)
SEQ_STEM_TOP = 0.25
SEQ_FIRST_X = (0.3, 0.7)
SEQ_LEVELS = (0.40, 0.55, 0.70, 0.95)
SEQ_SECOND_OFFSET = 0.12


def check_task_name(task_name) -> str:
    """Return ``task_name`` if it is one of :data:`TASK_NAMES`, else raise ValueError listing them."""
    if not isinstance(task_name, str) or task_name not in TASK_NAMES:
        raise ValueError(f"unknown task_name {task_name!r}; expected one of: {', '.join(TASK_NAMES)}")
    return task_name


@dataclass(frozen=True)
class TaskGeometry:
    """Resolved geometry of one task configuration (built by :func:`task_geometry`).

    Attributes:
        task_name: one of :data:`TASK_NAMES`.
        num_modes: ``K`` -- the task's base mode count (circles/rays/gaps/branch outcomes).
        num_styles: ``S`` -- style variants per base mode (> 1 only for corridor_navigation).
        noise_std: positional noise the obstacles were sized for (radial only depends on it).
        obstacles: discs and rectangles in unit coordinates.
        has_cue: whether frames show the mode cue square (conditional_circle).
    """

    task_name: str
    num_modes: int
    num_styles: int
    noise_std: float
    obstacles: Tuple[Obstacle, ...]
    has_cue: bool

    @property
    def total_modes(self) -> int:
        """``M``: number of distinct modes, ``num_modes * num_styles``."""
        return self.num_modes * self.num_styles

    @property
    def context_dim(self) -> int:
        """``C``: width of the ``context`` array, equal to :attr:`total_modes`."""
        return self.total_modes

    def context_row(self, mode: int) -> np.ndarray:
        """Context vector of one mode, float32 shape ``(C,)``: one-hot for conditional_circle, else zeros."""
        row = np.zeros(self.context_dim, dtype=np.float32)
        if self.task_name == "conditional_circle":
            row[mode] = 1.0
        return row

    def mode_labels(self) -> Tuple[str, ...]:
        """Human-readable label of every mode (length ``M``), used in plot legends."""
        name = self.task_name
        if name in ("circle", "conditional_circle"):
            return ("upper circle", "lower circle")
        if name == "sequential_decision":
            return ("LL", "LR", "RL", "RR")
        if name == "radial":
            return tuple(f"ray {k} ({360.0 * k / self.num_modes:.0f}\N{DEGREE SIGN})" for k in range(self.num_modes))
        if self.num_styles == 1:
            return tuple(f"gap {k}" for k in range(self.num_modes))
        return tuple(f"gap {m // self.num_styles}, style {m % self.num_styles}" for m in range(self.total_modes))

    def clean_path(self, mode: int, trajectory_length: int) -> np.ndarray:
        """Noise-free path of ``mode``: float64 ``(trajectory_length, 2)``, evenly spaced by arc length.

        Raises:
            ValueError: ``mode`` outside ``[0, total_modes)`` or ``trajectory_length < 2``.
        """
        mode = check_int("mode", mode, 0, self.total_modes - 1)
        t_len = check_int("trajectory_length", trajectory_length, 2)
        u = np.linspace(0.0, 1.0, t_len)
        name = self.task_name
        if name in ("circle", "conditional_circle"):
            cx, cy = CIRCLE_CENTRES[mode]
            theta = (-0.5 * math.pi + 2.0 * math.pi * u) if mode == 0 else (0.5 * math.pi - 2.0 * math.pi * u)
            return np.stack([cx + CIRCLE_RADIUS * np.cos(theta), cy + CIRCLE_RADIUS * np.sin(theta)], axis=-1)
        if name == "radial":
            angle = 2.0 * math.pi * mode / self.num_modes
            r = RAY_LENGTH * u
            return np.stack([0.5 + r * math.cos(angle), 0.5 + r * math.sin(angle)], axis=-1)
        if name == "sequential_decision":
            return _resample_by_arc_length(_sequential_waypoints(mode), t_len)
        return _resample_by_arc_length(_corridor_polyline(self, mode), t_len)


def task_geometry(task_name: str, num_modes: Optional[int] = None, num_styles: int = 1, noise_std: float = 0.008) -> TaskGeometry:
    """Validate the task arguments and build its :class:`TaskGeometry`.

    Args:
        task_name: one of :data:`TASK_NAMES`.
        num_modes: ``K``. ``None`` picks the task default (2, except 4 for sequential_decision).
            circle / conditional_circle accept only 2 and sequential_decision only 4;
            radial needs ``K >= 2``; corridor_navigation needs an even ``K`` in ``[2, 40]``.
        num_styles: ``S >= 1``; values > 1 are allowed only for corridor_navigation.
        noise_std: standard deviation (unit coordinates) the radial obstacles are sized for.

    Raises:
        ValueError: unknown task, incompatible ``num_modes``/``num_styles``, ``M = K * S > 256``,
            negative ``noise_std``.
        TypeError: arguments of the wrong type.
    """
    task_name = check_task_name(task_name)
    noise_std = check_nonnegative_real("noise_std", noise_std)
    num_styles = check_int("num_styles", num_styles, 1)
    if num_styles > 1 and task_name != "corridor_navigation":
        raise ValueError(f"num_styles={num_styles} is only supported by 'corridor_navigation', not {task_name!r}; use num_styles=1")
    if num_modes is None:
        num_modes = _DEFAULT_MODES[task_name]
    else:
        num_modes = check_int("num_modes", num_modes, 1)
    if task_name in _FIXED_MODES:
        fixed = _FIXED_MODES[task_name]
        if num_modes != fixed:
            raise ValueError(f"task {task_name!r} has exactly {fixed} modes, got num_modes={num_modes}; pass num_modes={fixed} or None")
    elif task_name == "radial":
        if num_modes < 2:
            raise ValueError(f"task 'radial' needs num_modes >= 2 rays, got num_modes={num_modes}")
    else:  # corridor_navigation
        if num_modes < 2 or num_modes % 2 != 0:
            raise ValueError(
                f"task 'corridor_navigation' needs an even num_modes >= 2 (an odd count would put a gap "
                f"on the straight line y = 0.5), got num_modes={num_modes}"
            )
        if num_modes > CORRIDOR_MAX_GAPS:
            raise ValueError(f"task 'corridor_navigation' supports at most {CORRIDOR_MAX_GAPS} gaps, got num_modes={num_modes}")
    if num_modes * num_styles > MAX_MODES:
        raise ValueError(
            f"num_modes * num_styles = {num_modes} * {num_styles} = {num_modes * num_styles} exceeds "
            f"{MAX_MODES} (mode_id is uint8)"
        )
    obstacles = _build_obstacles(task_name, num_modes, noise_std)
    return TaskGeometry(task_name, num_modes, num_styles, noise_std, obstacles, task_name == "conditional_circle")


def task_obstacles(task_name: str, num_modes: Optional[int] = None, num_styles: int = 1, noise_std: float = 0.008) -> Tuple[Obstacle, ...]:
    """Obstacles of a task (discs :class:`Circle` / rectangles :class:`Rect`, unit coordinates, ``y`` up).

    Same arguments and errors as :func:`task_geometry`. The radial squares depend on
    ``noise_std``; pass the value used for generation to get the same geometry.
    """
    return task_geometry(task_name, num_modes, num_styles, noise_std).obstacles


# --------------------------------------------------------------------------- internals


def _build_obstacles(task_name: str, num_modes: int, noise_std: float) -> Tuple[Obstacle, ...]:
    if task_name in ("circle", "conditional_circle"):
        return tuple(Circle(cx, cy, CIRCLE_OBSTACLE_RADIUS) for cx, cy in CIRCLE_CENTRES)
    if task_name == "sequential_decision":
        return (
            Rect(0.45, 0.40, 0.55, 0.60),
            Rect(0.25, 0.75, 0.35, 0.95),
            Rect(0.65, 0.75, 0.75, 0.95),
        )
    if task_name == "radial":
        return _radial_obstacles(num_modes, noise_std)
    return _corridor_walls(num_modes)


def _radial_obstacles(k: int, noise_std: float) -> Tuple[Obstacle, ...]:
    margin = RADIAL_BASE_CLEARANCE + CLEARANCE_SIGMAS * noise_std
    half_angle = math.pi / k
    lo, hi = RADIAL_HALF_SIDE_RANGE
    squares = []
    for i in range(k):
        phi = 2.0 * math.pi * i / k + half_angle
        # Distance from an axis-aligned square (centre c, half-side h) to a line through the
        # centre with unit normal n is |n.c| - h (|n_x| + |n_y|); |n.c| = d sin(pi/K) for both rays.
        spread = max(abs(math.sin(a)) + abs(math.cos(a)) for a in (phi - half_angle, phi + half_angle))
        half = (RADIAL_OBSTACLE_DISTANCE * math.sin(half_angle) - margin) / spread
        half = min(max(half, lo), hi)
        cx = 0.5 + RADIAL_OBSTACLE_DISTANCE * math.cos(phi)
        cy = 0.5 + RADIAL_OBSTACLE_DISTANCE * math.sin(phi)
        squares.append(Rect(cx - half, cy - half, cx + half, cy + half))
    return tuple(squares)


def corridor_gaps(k: int) -> Tuple[np.ndarray, float]:
    """Gap centres ``y_k`` (float64 ``(K,)``) and gap half-height for a wall with ``K`` gaps."""
    spacing = 0.9 / k
    centres = 0.05 + spacing * (np.arange(k) + 0.5)
    half = min(0.1, 0.5 * spacing - 0.01)
    return centres, half


def _corridor_walls(k: int) -> Tuple[Obstacle, ...]:
    centres, half = corridor_gaps(k)
    edges = [0.0]
    for y in centres:
        edges.extend([y - half, y + half])
    edges.append(1.0)
    x0, x1 = WALL_X
    return tuple(Rect(x0, edges[i], x1, edges[i + 1]) for i in range(0, len(edges), 2))


def _sequential_waypoints(mode: int) -> np.ndarray:
    first = SEQ_FIRST_X[mode // 2]
    second = first + (SEQ_SECOND_OFFSET if mode % 2 else -SEQ_SECOND_OFFSET)
    y1, y2, y3, y4 = SEQ_LEVELS
    return np.array(
        [SEQ_START, (SEQ_START[0], SEQ_STEM_TOP), (first, y1), (first, y2), (second, y3), (second, y4)],
        dtype=np.float64,
    )


def _corridor_polyline(geometry: TaskGeometry, mode: int, points_per_leg: int = 256) -> np.ndarray:
    gap, style = divmod(mode, geometry.num_styles)
    centres, _ = corridor_gaps(geometry.num_modes)
    y_gap = float(centres[gap])
    v = np.linspace(0.0, 1.0, points_per_leg)
    wiggle = STYLE_AMPLITUDE * np.sin(2.0 * math.pi * style * v)
    (sx, sy), (ex, ey) = CORRIDOR_START, CORRIDOR_END
    ax, bx = CORRIDOR_GAP_ENTRY_X
    left = np.stack([sx + (ax - sx) * v, sy + (y_gap - sy) * v + wiggle], axis=-1)
    right = np.stack([bx + (ex - bx) * v, y_gap + (ey - y_gap) * v + wiggle], axis=-1)
    return np.concatenate([left, right])  # the gap crossing is the straight segment left[-1] -> right[0]


def _resample_by_arc_length(polyline: np.ndarray, n: int) -> np.ndarray:
    seg = np.hypot(*np.diff(polyline, axis=0).T)
    cumulative = np.concatenate([[0.0], np.cumsum(seg)])
    targets = np.linspace(0.0, cumulative[-1], n)
    return np.stack([np.interp(targets, cumulative, polyline[:, 0]), np.interp(targets, cumulative, polyline[:, 1])], axis=-1)
