"""``replaybuf view`` as a function: a PNG contact sheet of one episode's frames plus line plots of its
numeric keys (matplotlib's Agg canvas; pyplot and GUI backends are never touched)."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from replaybuf_core.store.buffer import ReplayBuffer

from .summary import open_read_only

#: image keys: (T, H, W) or (T, H, W, C) with C in {1, 3, 4} and H, W at least this many pixels
MIN_IMAGE_SIDE = 8
#: output file suffix → the format written (matplotlib, through Pillow for JPEG and WebP)
IMAGE_FORMATS = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".webp": "webp"}
MAX_LINES = 24


def image_keys(rb: ReplayBuffer) -> list[str]:
    """Data keys whose step shape is an image: ``(H, W)`` or ``(H, W, C)``, C in {1, 3, 4}, H, W >= 8."""
    out = []
    for key in rb.keys():
        shape = tuple(rb.store.shape("data", key))[1:]
        dt = np.dtype(rb.store.dtype("data", key))
        if dt.kind not in "uif":
            continue
        if (len(shape) == 2 or (len(shape) == 3 and shape[2] in (1, 3, 4))) and min(shape[:2]) >= MIN_IMAGE_SIDE:
            out.append(key)
    return out


def numeric_keys(rb: ReplayBuffer) -> list[str]:
    """Data keys plotted as lines: numeric or bool, not an image key (:func:`image_keys`)."""
    images = set(image_keys(rb))
    return [k for k in rb.keys() if k not in images and np.dtype(rb.store.dtype("data", k)).kind in "biuf"]


def _to_display(frames: np.ndarray) -> np.ndarray:
    """(n, H, W[, C]) of any numeric dtype → float in [0, 1] for imshow (uint8 /255; floats above 1
    are taken as 0..255, others as 0..1)."""
    f = frames.astype(np.float32)
    if frames.dtype == np.uint8 or (np.nanmax(f) > 1.0 if f.size else False):
        f = f / 255.0
    f = np.clip(np.nan_to_num(f), 0.0, 1.0)
    if f.ndim == 4 and f.shape[-1] == 1:
        f = f[..., 0]
    return f


def render_episode(path_or_buffer: Any, episode: int, out: str | os.PathLike, key: str | None = None,
                   max_frames: int = 16, dpi: int = 100) -> dict[str, Any]:
    """Write an image of episode ``episode`` — PNG, JPEG or WebP, chosen by the suffix of ``out``
    (:data:`IMAGE_FORMATS`) —: up to ``max_frames`` evenly spaced frames of image ``key``
    (default: the first image key; none when the buffer has no image key) in a grid, each titled with
    its step, then one line plot per numeric key (axis 0 = step in the episode; a key of step shape
    ``(d1, d2, ...)`` is drawn as its flattened components, at most 24 lines).

    Returns ``{"path", "episode", "image_key", "frames" (step indices shown), "plotted" (keys),
    "size" ((width, height) px)}``.

    Raises:
        IndexError / TypeError: bad episode index (names it and the count).
        KeyError: ``key`` is not a data key, or not an image key.
        ValueError: ``max_frames`` < 1; ``out`` has a suffix that is not an image format named in
            :data:`IMAGE_FORMATS` (checked before anything is read or written).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    suffix = os.path.splitext(os.fspath(out))[1].lower()
    fmt = IMAGE_FORMATS.get(suffix)
    if fmt is None:
        raise ValueError(f"{os.fspath(out)}: the file name must end in one of {sorted(IMAGE_FORMATS)} "
                         "(the image format is taken from it)")
    rb = open_read_only(path_or_buffer)
    images = image_keys(rb)
    if key is not None:
        if key not in rb:
            raise KeyError(f"no data key {key!r} (keys: {rb.keys()})")
        if key not in images:
            raise KeyError(f"data key {key!r} is not an image key (image keys: {images})")
    else:
        key = images[0] if images else None
    sl = rb.get_episode_slice(episode)
    ep = int(episode) % rb.n_episodes
    T = sl.stop - sl.start
    numeric = numeric_keys(rb)

    frames_idx: list[int] = []
    n_img = 0
    if key is not None:
        n_img = min(max_frames, T)
        frames_idx = sorted(set(np.linspace(0, T - 1, n_img).round().astype(int).tolist()))
        n_img = len(frames_idx)
    cols = min(4, n_img) if n_img else 1
    rows_img = math.ceil(n_img / cols) if n_img else 0
    rows_plot = len(numeric)
    width = 3.0 * max(cols, 3)
    height = 3.0 * rows_img * (1 if cols >= 3 else 1) + 2.2 * rows_plot + 0.6
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(rows_img + rows_plot, cols,
                            height_ratios=[3.0] * rows_img + [2.2] * rows_plot, hspace=0.45)
    fig.suptitle(f"episode {ep}: {T} steps (rows [{sl.start}, {sl.stop}))"
                 + (f" — {key}" if key else ""), fontsize=11)
    if key is not None:
        arr = rb.store
        frames = np.stack([arr.read("data", key, sl.start + i, sl.start + i + 1)[0] for i in frames_idx])
        disp = _to_display(frames)
        for j, (i, img) in enumerate(zip(frames_idx, disp)):
            ax = fig.add_subplot(grid[j // cols, j % cols])
            ax.imshow(img, cmap="gray" if img.ndim == 2 else None, vmin=0, vmax=1, interpolation="nearest")
            ax.set_title(f"step {i}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    for r, k in enumerate(numeric):
        ax = fig.add_subplot(grid[rows_img + r, :])
        x = np.asarray(rb.store.read("data", k, sl.start, sl.stop)).reshape(T, -1).astype(np.float64)
        shown = min(x.shape[1], MAX_LINES)
        ax.plot(np.arange(T), x[:, :shown], linewidth=1.0)
        more = f" (first {shown} of {x.shape[1]} components)" if shown < x.shape[1] else ""
        ax.set_title(f"{k} {tuple(rb.store.shape('data', k)[1:])}{more}", fontsize=9, loc="left")
        if shown <= 9 and x.shape[1] > 1:
            ax.legend([str(i) for i in range(shown)], fontsize=6, ncol=min(shown, 9), loc="upper right")
        ax.tick_params(labelsize=7)
        if r == rows_plot - 1:
            ax.set_xlabel("step in episode", fontsize=8)
    out = os.fspath(out)
    fig.savefig(out, format=fmt, bbox_inches="tight", pad_inches=0.15)
    from PIL import Image  # a matplotlib dependency

    with Image.open(out) as im:
        w, h = im.size
    return {"path": out, "episode": ep, "image_key": key, "frames": frames_idx, "plotted": numeric,
            "size": (int(w), int(h))}
