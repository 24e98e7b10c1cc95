"""An HDF5 file with one group per episode (robomimic ``data/demo_N``, Minari ``episode_N``, ManiSkill
``traj_N``) as an import :class:`~replaybuf_core.source.Source`.

Each dataset under an episode group is classified by its length against the episode's ``T``
steps (which the format says: ``num_samples``, the actions' length...):

* ``T`` rows: a data key (``obs/eef_pos`` → ``obs.eef_pos``);
* ``T + 1`` rows (Minari's and ManiSkill's observations, infos, env states): the first ``T`` rows are
  the data key, and the last row of every episode is kept in ``meta/final.<key>`` (one row per
  episode), so an export could rebuild the file exactly;
* anything else (robomimic's one-row ``initial_state``, per-episode scalars): ``meta/episode.<key>``,
  one row per episode.

A key present in only some episodes, or whose dtype or step shape differs between episodes, is an
error naming it and the episodes — or, with ``missing_keys="drop"``, keys not in every episode are
left out (reported).  Variable-length bytes holding JPEG or PNG images (Minari ≥ 0.5.3 stores image
observations so) are decoded with Pillow; the report says the pixels are those decodes.
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from replaybuf_core.layout.schema import is_frame_shape
from replaybuf_core.source import KeySpec, Source

from .common import attrs_of, check_filters, datasets, key_of, open_file, read, require_h5py

IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n")


def _kind(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    if dtype == object:
        return "strings"
    if dtype == np.uint8 and is_frame_shape((2,) + shape):
        return "frames"
    if dtype.kind == "u" and dtype.itemsize == 2 and len(shape) in (2, 3) and min(shape[:2]) >= 8:
        return "depth"
    return "numbers"


def _as_bytes(cell) -> bytes:
    """One variable-length cell (bytes, or a uint8 array of h5py's vlen uint8) as bytes."""
    return np.asarray(cell, dtype=np.uint8).tobytes() if isinstance(cell, np.ndarray) else bytes(cell)


def _decode_images(values, where: str) -> np.ndarray:
    from PIL import Image

    out = []
    for i, b in enumerate(values):
        try:
            with Image.open(io.BytesIO(_as_bytes(b))) as im:
                out.append(np.asarray(im))
        except Exception as exc:
            raise ValueError(f"{where}: row {i} holds bytes that do not decode as an image ({exc})") from exc
    a = np.stack(out) if out else np.zeros((0, 1, 1, 3), np.uint8)
    return a[..., None] if a.ndim == 3 else a


class EpisodeGroupsSource(Source):
    """Episodes stored as groups of one HDF5 file (see the module docstring).

    Subclasses call :meth:`_scan` with ``(name, group, T)`` of every episode (in import order),
    after setting ``format_name``, ``attrs`` and ``notes``.
    """

    def __init__(self, path: str | os.PathLike, missing_keys: str = "error"):
        super().__init__(os.path.abspath(os.path.expanduser(os.fspath(path))))
        if missing_keys not in ("error", "drop"):
            raise ValueError(f"missing_keys must be 'error' or 'drop', got {missing_keys!r}")
        self.missing_keys = missing_keys
        self.file = None
        self._images: set[str] = set()  # keys of encoded images (decoded as they are read)

    def _open(self, path: str | None = None):
        self.file = open_file(path or self.path)
        return self.file

    # ---------------------------------------------------------------------------------- scanning
    def _scan(self, episodes: list[tuple[str, Any, int]], allow_final: bool = True) -> None:
        """Classify every dataset of every episode group and build ``keys``.  ``allow_final``:
        the format stores ``T + 1``-row datasets (Minari, ManiSkill; not robomimic, where a dataset
        one row longer than ``num_samples`` is an error)."""
        self._episodes = episodes
        self.episode_lengths = np.array([t for _, _, t in episodes], dtype=np.int64)
        per: dict[str, dict[str, tuple[str, Any]]] = {}  # path -> episode name -> (class, dataset)
        for name, group, t in episodes:
            for path, ds in datasets(group).items():
                n = ds.shape[0] if ds.shape else None
                cls = "step" if n == t else "step+1" if n == t + 1 else "episode"
                if cls == "step+1" and not allow_final and t > 0:
                    raise ValueError(f"{self.path}: {name}/{path} has {n} rows but the episode has {t} steps "
                                     "(its num_samples); the two disagree")
                per.setdefault(path, {})[name] = (cls, ds)
        all_names = [n for n, _, _ in episodes]
        self._paths: dict[str, tuple[str, str]] = {}  # key -> (class, path)
        dropped = []
        for path, found in per.items():
            missing = [n for n in all_names if n not in found]
            if missing:
                if self.missing_keys == "drop":
                    dropped.append(path)
                    continue
                raise ValueError(f"{self.path}: {path} is in {len(found)} of {len(all_names)} episodes (missing in "
                                 f"{missing[:5]}{' ...' if len(missing) > 5 else ''}); pass missing_keys='drop' "
                                 "(CLI: --missing-keys drop) to leave such keys out")
            classes = {c for c, _ in found.values()}
            if len(classes) > 1:
                # one-step episodes make a T-row dataset look like a per-episode one: the majority wins
                counts = {c: sum(1 for cc, _ in found.values() if cc == c) for c in classes}
                cls = max(sorted(counts, key=("step", "step+1", "episode").index), key=counts.get)  # ties: a step
                odd = [n for n, (c, _) in found.items() if c != cls]
                if not all(self.episode_lengths[all_names.index(n)] <= 1 for n in odd):
                    raise ValueError(f"{self.path}: {path} has {found[odd[0]][1].shape[0]} rows in episode {odd[0]} "
                                     f"({int(self.episode_lengths[all_names.index(odd[0])])} steps) but is a "
                                     f"{cls} dataset elsewhere")
            else:
                cls = classes.pop()
            shapes = {(ds.dtype.str if ds.dtype.kind != "O" else "O", ds.shape[1:] if cls != "episode" else ds.shape)
                      for _, ds in found.values()}
            if len(shapes) > 1:
                raise ValueError(f"{self.path}: {path} differs between episodes (dtype, step shape): "
                                 f"{sorted(shapes, key=str)[:3]}; leave it out with skip_keys / --skip-key")
            key = key_of(path)
            if key in self._paths:
                raise ValueError(f"{self.path}: datasets {self._paths[key][1]} and {path} both map to key {key!r}")
            self._paths[key] = (cls, path)
            if cls == "episode":
                continue
            ds = next(iter(found.values()))[1]
            check_filters(ds, self.path)
            dtype, shape = np.dtype(object) if ds.dtype.kind == "O" else ds.dtype, tuple(ds.shape[1:])
            attrs = {"source_path": path, **attrs_of(ds)}
            image = False
            if dtype == object and ds.shape[0] and require_bytes(ds):
                first = ds[0]
                if isinstance(first, (bytes, np.bytes_, np.ndarray)) and _as_bytes(first[:8]).startswith(IMAGE_MAGIC):
                    sample = _decode_images([first], f"{self.path}: {path}")
                    dtype, shape, image = sample.dtype, sample.shape[1:], True
                    self.notes.append(f"{key}: encoded images (JPEG/PNG bytes) in the source; the store keeps "
                                      "their decoded pixels exactly")
            kind = _kind(dtype, shape)
            if dtype == object and not image and require_h5py().check_string_dtype(ds.dtype) is None:
                kind = "numbers"  # variable-length numbers: not text (the import refuses them, naming the key)
            self.keys[key] = KeySpec(dtype, shape, kind, attrs)
            if image:
                self._images.add(key)
        if dropped:
            self.notes.append(f"left out (not in every episode; missing_keys='drop'): {', '.join(dropped)}")
        if episodes and not any(c != "episode" for c, _ in self._paths.values()):
            name, group, t = episodes[0]
            rows = {p: ds.shape[0] if ds.shape else "scalar" for p, ds in list(datasets(group).items())[:6]}
            raise ValueError(f"{self.path}: no dataset has one row per step: {name} has {t} steps but its datasets "
                             f"have {rows} rows")
        self._finals = [k for k, (c, _) in self._paths.items() if c == "step+1"]
        self._per_episode = [k for k, (c, _) in self._paths.items() if c == "episode"]

    # ---------------------------------------------------------------------------------- reading
    def _read_key(self, index: int, key: str) -> np.ndarray:
        name, group, t = self._episodes[index]
        cls, path = self._paths[key]
        where = f"{self.path}: {name}/{path}"
        a = read(group[path], where)
        if cls == "step+1":
            a = a[:t]
        if key in self._images:
            a = _decode_images(a, where)
        return a

    def read_episode(self, index: int, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        if not 0 <= index < len(self._episodes):
            raise IndexError(f"episode {index} out of range: {self.path} has {len(self._episodes)} episodes")
        return {k: self._read_key(index, k) for k in (keys or self.keys)}

    def episode_meta(self, indices: list[int]) -> dict[str, np.ndarray]:
        out = {}
        for key in self._finals:
            rows = []
            for i in indices:
                name, group, t = self._episodes[i]
                where = f"{self.path}: {name}/{self._paths[key][1]}"
                last = group[self._paths[key][1]][t]  # the T+1-th row alone
                if key in self._images:
                    last = _decode_images([last], where)[0]
                elif self.keys[key].dtype == object and isinstance(last, bytes):
                    last = last.decode("utf-8", errors="backslashreplace")
                rows.append(last)
            out[f"final.{key}"] = _stack(rows, self.keys[key].dtype)
        for key in self._per_episode:
            rows = [read(self._episodes[i][1][self._paths[key][1]], f"{self.path}: {self._episodes[i][0]}")
                    for i in indices]
            out[f"episode.{key}"] = _stack(rows, rows[0].dtype if rows else np.float64)
        return out

    def episode_attrs(self, index: int) -> dict[str, Any]:
        name, group, _ = self._episodes[index]
        return {"name": name, "attrs": attrs_of(group)}

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def require_bytes(ds) -> bool:
    """True for a dataset of variable-length bytes (not text)."""
    from .common import require_h5py

    h5py = require_h5py()
    vlen = h5py.check_vlen_dtype(ds.dtype)
    return vlen is not None and h5py.check_string_dtype(ds.dtype) is None or (
        vlen is not None and h5py.check_string_dtype(ds.dtype).encoding == "ascii")


def _stack(rows: list, dtype) -> np.ndarray:
    if not rows:
        return np.zeros((0,), dtype=dtype)
    if np.dtype(dtype) == object or any(np.asarray(r).dtype == object for r in rows):
        rows = [r.item() if isinstance(r, np.ndarray) and r.ndim == 0 else r for r in rows]
        rows = [r.decode("utf-8", errors="backslashreplace") if isinstance(r, bytes) else r for r in rows]
        out = np.empty((len(rows),) + np.shape(rows[0]), dtype=object)
        for i, r in enumerate(rows):
            out[i] = r
        return out
    return np.stack([np.asarray(r) for r in rows])


def add_missing_keys_argument(group) -> str:
    """Add ``--missing-keys {error,drop}`` (shared by the HDF5 episode formats); returns its dest."""
    group.add_argument("--missing-keys", dest="missing_keys", choices=("error", "drop"), default=None,
                       help="robomimic/minari/maniskill: what to do with keys only some episodes hold "
                            "(default error; drop leaves them out and reports them)")
    return "missing_keys"
