"""The ``diffusion-policy`` export format: the zarr **v2** group diffusion_policy's ``ReplayBuffer``
reads (``ReplayBuffer.copy_from_path`` / ``create_from_path`` with zarr 2.x).

Layout (real-stanford/diffusion_policy, ``diffusion_policy/common/replay_buffer.py``): a zarr v2 group
holding ``data/<key>`` arrays (time on axis 0, the episodes' rows concatenated) and
``meta/episode_ends`` (int64, cumulative step counts).  Arrays are written as its own writer writes
them: in chunks of whole steps of about 2 MB (``get_optimal_chunks``' target), compressed with one
of its two presets — ``"disk"`` (the default here: Blosc zstd clevel 5 bit-shuffled, what Push-T
was published with) or ``"default"`` (Blosc lz4 clevel 5, no shuffle: faster to decode, larger).  Keys keep the dtype the source stored (a diffusion-policy import's
float32 images go out float32); ``images_dtype="uint8"`` writes camera keys as uint8 (refused when a
value is not an integer in 0..255).

Verification reads every chunk back without zarr-python: each array's ``.zarray`` parsed as the
zarr v2 specification defines it (https://zarr-specs.readthedocs.io/en/latest/v2/v2.0.html), each
chunk file decoded with its numcodecs compressor, compared bit for bit with the store.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf_core.export_format import ExportFormat, ExportPlan
from replaybuf_core.interrupts import deferred_sigint
from replaybuf_core.layout.compressors import COMPRESSOR_PRESETS, resolve_compressor

__all__ = ["DiffusionPolicyExport", "chunk_length"]

#: diffusion_policy's ``get_optimal_chunks`` aims at chunks of this many bytes
TARGET_CHUNK_BYTES = 2_000_000
IMAGES_DTYPES = ("uint8", "float32")


def chunk_length(step_shape: tuple[int, ...], dtype: np.dtype, n_rows: int) -> int:
    """Rows a chunk: whole steps, about :data:`TARGET_CHUNK_BYTES` (at least 1, at most ``n_rows``)."""
    step_bytes = max(1, int(np.prod(step_shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
    return max(1, min(max(1, n_rows), math.ceil(TARGET_CHUNK_BYTES / step_bytes)))


def _is_camera(step_shape: tuple[int, ...]) -> bool:
    return len(step_shape) == 3 and step_shape[-1] in (1, 3, 4)


def _compressor(plan: ExportPlan):
    return resolve_compressor(plan.options.get("compressor") or "disk")


class DiffusionPolicyExport(ExportFormat):
    """``diffusion-policy``: a zarr v2 ``data/`` + ``meta/episode_ends`` group (see the module docstring).

    Options: ``images_dtype``: None (the source's dtype), ``"uint8"`` or ``"float32"`` for camera
    keys (steps of shape ``(H, W, C)``, C in 1, 3, 4); ``compressor``: ``"disk"`` (default) or
    ``"default"``, diffusion_policy's presets.
    """

    name = "diffusion-policy"
    description = "diffusion_policy's replay_buffer.zarr (zarr v2: data/<key>, meta/episode_ends)"

    def add_arguments(self, group) -> list[str]:
        group.add_argument("--images-dtype", dest="images_dtype", choices=IMAGES_DTYPES, default=None,
                           help="diffusion-policy: write camera keys in this dtype (default: the source's)")
        group.add_argument("--dp-compressor", dest="compressor", choices=COMPRESSOR_PRESETS, default=None,
                           help="diffusion-policy: its compressor preset (default disk: zstd; default: lz4)")
        return ["images_dtype", "compressor"]

    def _out_dtype(self, plan: ExportPlan, key: str) -> np.dtype:
        shape, dtype = plan.step_spec(key)
        want = plan.options.get("images_dtype")
        return np.dtype(want) if want and _is_camera(shape) else dtype

    def check(self, plan: ExportPlan) -> list[str]:
        want = plan.options.get("images_dtype")
        if want is not None and want not in IMAGES_DTYPES:
            raise ValueError(f"images_dtype must be one of {IMAGES_DTYPES} or None, got {want!r}")
        if plan.options.get("compressor") not in (None, *COMPRESSOR_PRESETS):
            raise ValueError(f"compressor must be one of {COMPRESSOR_PRESETS}, got {plan.options['compressor']!r}")
        for key, name in plan.names.items():
            _, dtype = plan.step_spec(key)
            if dtype.kind not in "biuf":
                raise ValueError(f"diffusion-policy export: key {key!r} holds {dtype} values; diffusion_policy's "
                                 "zarr holds numbers only: leave it out with --skip-key " + key)
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"diffusion-policy export: {name!r} (key {key!r}) is not a zarr array name")
        notes = []
        others = [m for m in plan.rb.store.list_arrays("meta") if m != "episode_ends" and not m.startswith("_")]
        if others:
            notes.append(f"meta arrays other than episode_ends are not written ({', '.join(others[:5])}"
                         f"{'...' if len(others) > 5 else ''}): diffusion_policy reads only episode_ends")
        return notes

    def write(self, plan: ExportPlan, path: Path, progress) -> list[str]:
        import zarr

        root = zarr.open_group(os.fspath(path), mode="w", zarr_format=2)
        n = plan.n_steps
        for key, name in plan.names.items():
            shape, _ = plan.step_spec(key)
            dtype = self._out_dtype(plan, key)
            length = chunk_length(shape, dtype, n)
            # every chunk written, all-zero ones too (zarr skips those by default): `replaybuf verify` then
            # tells a lost chunk from a skipped one on the export as on our own stores
            arr = root.create_array(f"data/{name}", shape=(n, *shape), dtype=dtype, chunks=(length, *shape),
                                    compressors=_compressor(plan), fill_value=0, config={"write_empty_chunks": True})
            pending: list[np.ndarray] = []
            held = written = 0
            for j in range(len(plan.episodes)):
                block = self._convert(plan, key, j, dtype)
                pending.append(block)
                held += len(block)
                progress(len(block))
                if held >= length:  # write whole chunks only (each chunk file written once)
                    stack = np.concatenate(pending)
                    whole = (len(stack) // length) * length
                    with deferred_sigint():  # zarr's IO thread would go on writing after a Ctrl-C
                        arr[written:written + whole] = stack[:whole]
                    written += whole
                    pending, held = [stack[whole:]], len(stack) - whole
            if held:
                with deferred_sigint():
                    arr[written:written + held] = np.concatenate(pending)
        ends = np.cumsum(plan.lengths).astype(np.int64)
        with deferred_sigint():
            root.create_array("meta/episode_ends", shape=ends.shape, dtype=np.int64, chunks=ends.shape or (1,),
                              compressors=_compressor(plan), fill_value=0, config={"write_empty_chunks": True})[:] = ends
        return [f"zarr v2, diffusion_policy's {plan.options.get('compressor') or 'disk'!r} compressor "
                f"({_compressor(plan)}); chunks of about {TARGET_CHUNK_BYTES / 1e6:.0f} MB as its writer makes them"]

    def _convert(self, plan: ExportPlan, key: str, j: int, dtype: np.dtype) -> np.ndarray:
        block = plan.read(key, j)
        if block.dtype == dtype:
            return block
        if dtype == np.uint8:
            bad = ~np.isfinite(block) | (block < 0) | (block > 255) | (block != np.round(block)) \
                if block.dtype.kind == "f" else (block < 0) | (block > 255)
            if bad.any():
                row = int(np.argwhere(bad)[0][0])
                raise ValueError(f"images_dtype=uint8: key {key!r}, episode {plan.episodes[j]} row {row} holds "
                                 f"{block[row].ravel()[bad[row].ravel()][0].item()!r}, not an integer in 0..255")
        return block.astype(dtype)

    def verify(self, plan: ExportPlan, path: Path) -> list[str]:
        ends = _read_whole(path / "meta" / "episode_ends")
        want = np.cumsum(plan.lengths)
        if not np.array_equal(ends, want):
            raise ValueError(f"{path}: meta/episode_ends read back differs from the store's lengths")
        for key, name in plan.names.items():
            reader = _V2Array(path / "data" / name)
            dtype = self._out_dtype(plan, key)
            if reader.dtype != dtype or reader.shape != (plan.n_steps, *plan.step_spec(key)[0]):
                raise ValueError(f"{path}: data/{name} is {reader.dtype} {reader.shape}, expected {dtype} "
                                 f"{(plan.n_steps, *plan.step_spec(key)[0])}")
            row = 0
            for j in range(len(plan.episodes)):
                expect = self._convert(plan, key, j, dtype)
                got = reader.rows(row, row + len(expect))
                if got.tobytes() != np.ascontiguousarray(expect).tobytes():
                    bad = int(np.flatnonzero((got != expect).reshape(len(expect), -1).any(axis=1))[0]) \
                        if len(expect) else 0
                    raise ValueError(f"{path}: data/{name} differs from store key {key!r} at episode "
                                     f"{plan.episodes[j]} row {bad}")
                row += len(expect)
        return [f"diffusion-policy: {len(plan.names)} arrays and meta/episode_ends read back chunk by chunk "
                "(.zarray + numcodecs, no zarr-python) and equal to the store, bit for bit"]

    def recognises(self, path) -> bool:
        p = Path(path)
        return (p / ".zgroup").is_file() and (p / "meta" / "episode_ends" / ".zarray").is_file()


class _V2Array:
    """A zarr v2 array read as the v2 spec defines it: ``.zarray`` (shape, chunks, dtype, order C,
    compressor, no filters) and one file per chunk named ``i.0.0...`` (separator ``.``); a chunk
    file that is absent holds ``fill_value`` (zarr does not write chunks of fill values only)."""

    def __init__(self, path: Path):
        import numcodecs

        meta: dict[str, Any] = json.loads((path / ".zarray").read_text())
        if meta.get("zarr_format") != 2 or meta.get("order", "C") != "C" or meta.get("filters"):
            raise ValueError(f"{path}: not a plain zarr v2 array (format, order C, no filters): {meta}")
        self.path, self.shape = path, tuple(meta["shape"])
        self.chunks, self.dtype = tuple(meta["chunks"]), np.dtype(meta["dtype"])
        self.sep = meta.get("dimension_separator", ".")
        self.fill_value = meta.get("fill_value") or 0
        self.codec = numcodecs.get_codec(meta["compressor"]) if meta.get("compressor") else None
        self._cached: tuple[int, np.ndarray] | None = None

    def chunk(self, c: int) -> np.ndarray:
        if self._cached is not None and self._cached[0] == c:
            return self._cached[1]
        name = self.sep.join([str(c)] + ["0"] * (len(self.shape) - 1))
        try:
            raw = (self.path / name).read_bytes()
        except FileNotFoundError:  # the spec: a chunk never written holds fill_value everywhere
            out = np.full(self.chunks, self.fill_value, dtype=self.dtype)
        else:
            buf = self.codec.decode(raw) if self.codec is not None else raw
            out = np.frombuffer(buf, dtype=self.dtype).reshape(self.chunks)
        self._cached = (c, out)
        return out

    def rows(self, a: int, b: int) -> np.ndarray:
        length = self.chunks[0]
        parts = [self.chunk(c)[max(a - c * length, 0):min(b - c * length, length)]
                 for c in range(a // length, (b - 1) // length + 1)] if b > a else []
        return np.concatenate(parts) if parts else np.empty((0, *self.shape[1:]), self.dtype)


def _read_whole(path: Path) -> np.ndarray:
    arr = _V2Array(path)
    return arr.rows(0, arr.shape[0])
