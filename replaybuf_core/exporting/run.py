"""The export pipeline: a store's episodes written in another library's layout, checked, built beside
the destination, read back independently and only then swapped in."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from replaybuf_core import registry
from replaybuf_core.export_format import ExportFormat, ExportPlan, ExportReport
from replaybuf_core.importing.arguments import parse_episodes
from replaybuf_core.locations import check_apart, local_path
from replaybuf_core.source import _disk_bytes
from replaybuf_core.store.buffer import ReplayBuffer
from replaybuf_core.store.progress import progress_bar
from replaybuf_core.store.replace import build_beside

__all__ = ["export_dataset", "make_plan", "parse_renames"]


def parse_renames(spec: str | Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    """Renames from ``"img=observation.image,action=actions"`` (or a mapping, or ``["a=b", ...]``).

    Raises ValueError: an item without ``=``, an empty side, a key renamed twice.
    """
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        return {str(k): str(v) for k, v in spec.items()}
    items = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in str(s).split(",")]
    out: dict[str, str] = {}
    for item in (i.strip() for i in items):
        if not item:
            continue
        old, sep, new = item.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise ValueError(f"--rename: {item!r} is not KEY=NEW_NAME")
        if old.strip() in out:
            raise ValueError(f"--rename: {old.strip()!r} renamed twice")
        out[old.strip()] = new.strip()
    return out


def make_plan(rb: Any, *, episodes: Any = None, keys: Iterable[str] | None = None, skip_keys: Iterable[str] = (),
              rename: Any = None, options: dict[str, Any] | None = None) -> ExportPlan:
    """The checked :class:`ExportPlan` of buffer ``rb``.

    ``episodes``: as ``replaybuf import --episodes`` (None: all, ``"0:10,20"``, indices);
    ``keys``: the data keys to export (None: all), ``skip_keys``: keys left out; ``rename``: see
    :func:`parse_renames`.

    Raises:
        KeyError: a key in ``keys``, ``skip_keys`` or ``rename`` that the store does not hold (named,
            with the store's keys).
        ValueError: no episode or no key left, two keys renamed to one name, bad episode text.
    """
    stored = list(rb.keys())
    renames = parse_renames(rename)
    for what, names in (("keys", list(keys or [])), ("skip-key", list(skip_keys)), ("rename", list(renames))):
        unknown = [k for k in names if k not in stored]
        if unknown:
            raise KeyError(f"--{what}: the store holds no key {unknown[0]!r}; its keys are {stored}")
    chosen = [k for k in (list(keys) if keys else stored) if k not in set(skip_keys)]
    if not chosen:
        raise ValueError("export: no key left to export (every key was skipped)")
    names = {k: renames.get(k, k) for k in chosen}
    clash = sorted({v for v in names.values() if list(names.values()).count(v) > 1})
    if clash:
        raise ValueError(f"--rename: two keys would be exported as {clash[0]!r}: "
                         f"{[k for k, v in names.items() if v == clash[0]]}")
    picked = parse_episodes(episodes, rb.n_episodes, "the store")
    if not picked:
        raise ValueError("export: the store holds no episode")
    return ExportPlan(rb, picked, names, dict(options or {}))


def export_dataset(store: Any, dst: str | os.PathLike, format: str | ExportFormat, *, episodes: Any = None,
                   keys: Iterable[str] | None = None, skip_keys: Iterable[str] = (), rename: Any = None,
                   overwrite: bool = False, progress: bool = True, **options: Any) -> ExportReport:
    """Write the store ``store`` (a path/URL or an open :class:`ReplayBuffer`) at the local path
    ``dst`` in the export format ``format`` (``"diffusion-policy"``, ``"robomimic"``,
    ``"lerobot"``... or an :class:`ExportFormat`).

    The plan is checked (:func:`make_plan`, then the format's own ``check``) before anything is
    written; the dataset is built beside ``dst``, read back through the format's independent reader
    and compared with the store (``verify``), and only then swapped in, so a failed or interrupted
    export leaves nothing at ``dst`` (and an ``--overwrite``-n dataset as it was).  ``options`` are
    the format's own (its ``add_arguments`` names them).  ``progress`` shows a tqdm bar of the steps written.

    Raises:
        FileExistsError: ``dst`` exists and ``overwrite`` is false, or it exists and is not a
            dataset of this format (never replaced).
        FormatNotFoundError: no installed export format has that name.
        KeyError / ValueError: see :func:`make_plan` and the format's ``check``; ValueError from
            verification names the key, episode and row that differ.
        ValueError: ``dst`` is a URL, the store itself, inside it or holding it.
    """
    fmt = format if isinstance(format, ExportFormat) else registry.get_export_format(format)
    dst_path = Path(os.path.abspath(local_path(dst, "export destination")))
    if isinstance(store, (str, os.PathLike)):
        check_apart(store, dst_path)
        with ReplayBuffer.create_from_path(store) as rb:
            return _export(rb, dst_path, fmt, episodes, keys, skip_keys, rename, overwrite, progress, options)
    return _export(store, dst_path, fmt, episodes, keys, skip_keys, rename, overwrite, progress, options)


def _export(rb, dst: Path, fmt: ExportFormat, episodes, keys, skip_keys, rename, overwrite, progress,
            options) -> ExportReport:
    t0 = time.perf_counter()
    if os.path.lexists(dst) and not overwrite:
        raise FileExistsError(f"{dst} exists: pass --overwrite (overwrite=True) to replace it")
    plan = make_plan(rb, episodes=episodes, keys=keys, skip_keys=skip_keys, rename=rename, options=options)
    notes = list(fmt.check(plan))
    report = ExportReport(fmt.name, os.fspath(dst), len(plan.episodes), plan.n_steps, dict(plan.names))
    with build_beside(dst, replaceable=fmt.recognises) as beside:
        with progress_bar(f"exporting ({fmt.name})", plan.n_steps, progress, unit="step") as bar:
            notes += fmt.write(plan, beside.path, _StepsOf(bar, len(plan.names)))
        report.compared = fmt.verify(plan, beside.path)
        report.psnr = dict(plan.psnr)
        report.bytes = _disk_bytes(os.fspath(beside.path))
        if beside.link_target is not None:
            notes.append(f"{dst} was a symlink to {beside.link_target}: the link was replaced by the new dataset; "
                         "what it pointed to was left as it was")
    report.notes = notes
    report.seconds = time.perf_counter() - t0
    return report


class _StepsOf:
    """The ``progress(n_rows)`` a format calls with the rows of one key it wrote, shown as steps on
    ``bar``: the rows of all ``n_keys`` keys make a step (a bar of rows counted keys × steps)."""

    def __init__(self, bar: Any, n_keys: int):
        self._bar, self._keys = bar, max(1, n_keys)
        self._rows = self._shown = 0

    def __call__(self, n_rows: int) -> None:
        self._rows += int(n_rows)
        steps = self._rows // self._keys
        if steps > self._shown:
            self._bar.update(steps - self._shown)
            self._shown = steps
