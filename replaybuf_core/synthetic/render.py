"""Drawing synthetic frames with Pillow.

Frame layout (``S x S`` RGB, uint8): light background, dark obstacles, a grey trail
through all positions up to the current one, the agent as a dot of the fixed colour
:data:`AGENT_COLOUR` on top, and -- for tasks with a cue -- a coloured square in the
top-left corner (:data:`CUE_RECT`) whose colour :data:`CUE_COLOURS` ``[mode]`` tells the mode.

The agent colour is the same for every mode on purpose: colouring it by mode would
leak the mode into every image and defeat the point of a multimodality benchmark.

Pixel mapping (see :func:`position_to_pixel`): ``col = round(x * (S - 1))``,
``row = round((1 - y) * (S - 1))`` -- rows grow downward while ``y`` grows upward,
so (0, 0) is the bottom-left pixel and (1, 1) the top-right one.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
from PIL import Image, ImageDraw

from .shapes import Circle, Rect
from .tasks import TaskGeometry

__all__ = [
    "BACKGROUND_COLOUR",
    "OBSTACLE_COLOUR",
    "TRAIL_COLOUR",
    "AGENT_COLOUR",
    "CUE_COLOURS",
    "CUE_RECT",
    "position_to_pixel",
    "agent_radius_px",
    "FrameRenderer",
]

BACKGROUND_COLOUR: Tuple[int, int, int] = (245, 245, 240)
OBSTACLE_COLOUR: Tuple[int, int, int] = (55, 55, 60)
TRAIL_COLOUR: Tuple[int, int, int] = (165, 165, 165)
AGENT_COLOUR: Tuple[int, int, int] = (30, 100, 230)
#: Cue colour per mode of conditional_circle (mode 0 = upper circle: red, mode 1 = lower circle: green).
CUE_COLOURS: Tuple[Tuple[int, int, int], ...] = ((220, 50, 40), (40, 170, 70))
#: Cue square in unit coordinates (top-left corner of the frame, away from every path).
CUE_RECT = Rect(0.03, 0.85, 0.15, 0.97)


def position_to_pixel(position, image_size: int) -> np.ndarray:
    """Map unit-square positions to integer pixel indices.

    Args:
        position: array-like ``(..., 2)`` of ``(x, y)`` in ``[0, 1]`` (``y`` up).
        image_size: ``S``, frame side in pixels.

    Returns:
        int64 array ``(..., 2)`` of ``(row, col)`` with ``col = rint(x * (S - 1))`` and
        ``row = rint((1 - y) * (S - 1))``, clipped to ``[0, S - 1]``. Index a frame as
        ``image[row, col]``.
    """
    p = np.asarray(position, dtype=np.float64)
    scale = image_size - 1
    col = np.rint(p[..., 0] * scale)
    row = np.rint((1.0 - p[..., 1]) * scale)
    return np.clip(np.stack([row, col], axis=-1), 0, scale).astype(np.int64)


def agent_radius_px(image_size: int) -> int:
    """Radius in pixels of the agent dot: 0 (a single pixel) below 16 px, else ``max(1, S // 32)``."""
    return 0 if image_size < 16 else max(1, image_size // 32)


class FrameRenderer:
    """Draws the frames of one task configuration; static layers are cached per mode.

    Args:
        geometry: the task (obstacles, cue).
        image_size: ``S`` (pixels).
    """

    def __init__(self, geometry: TaskGeometry, image_size: int) -> None:
        self.geometry = geometry
        self.image_size = int(image_size)
        self._radius = agent_radius_px(self.image_size)
        self._backgrounds: Dict[int, Image.Image] = {}

    def background(self, mode: int) -> Image.Image:
        """The static layer (background, obstacles, cue) of ``mode`` as an RGB ``PIL.Image``; do not modify."""
        cue_mode = mode if self.geometry.has_cue else -1
        image = self._backgrounds.get(cue_mode)
        if image is None:
            image = Image.new("RGB", (self.image_size, self.image_size), BACKGROUND_COLOUR)
            draw = ImageDraw.Draw(image)
            for obstacle in self.geometry.obstacles:
                self._draw_shape(draw, obstacle, OBSTACLE_COLOUR)
            if cue_mode >= 0:
                self._draw_shape(draw, CUE_RECT, CUE_COLOURS[cue_mode % len(CUE_COLOURS)])
            self._backgrounds[cue_mode] = image
        return image

    def render(self, positions: np.ndarray, mode: int) -> np.ndarray:
        """Draw one episode.

        Args:
            positions: ``(T, 2)`` positions in ``[0, 1]``.
            mode: mode id (selects the cue colour).

        Returns:
            uint8 array ``(T, S, S, 3)``; frame ``t`` shows the trail through positions
            ``0..t`` and the agent dot at ``position_to_pixel(positions[t])``.
        """
        pixels = position_to_pixel(positions, self.image_size)
        t_len = pixels.shape[0]
        size = self.image_size
        out = np.empty((t_len, size, size, 3), dtype=np.uint8)
        canvas = self.background(mode).copy()
        trail = ImageDraw.Draw(canvas)
        rad = self._radius
        for t in range(t_len):
            row, col = int(pixels[t, 0]), int(pixels[t, 1])
            if t > 0:  # extend the trail incrementally on the persistent canvas
                trail.line([(int(pixels[t - 1, 1]), int(pixels[t - 1, 0])), (col, row)], fill=TRAIL_COLOUR, width=1)
            frame = canvas.copy()
            draw = ImageDraw.Draw(frame)
            if rad > 0:
                draw.ellipse([col - rad, row - rad, col + rad, row + rad], fill=AGENT_COLOUR)
            draw.point((col, row), fill=AGENT_COLOUR)
            out[t] = np.asarray(frame)
        return out

    def _draw_shape(self, draw: ImageDraw.ImageDraw, shape, colour) -> None:
        scale = self.image_size - 1
        if isinstance(shape, Circle):
            cx, cy, r = shape.cx * scale, (1.0 - shape.cy) * scale, shape.radius * scale
            draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=colour)
        else:
            draw.rectangle([shape.x0 * scale, (1.0 - shape.y1) * scale, shape.x1 * scale, (1.0 - shape.y0) * scale], fill=colour)
