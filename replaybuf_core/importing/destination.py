"""Where an import builds its store: beside a local destination, swapped in once verified
(:func:`~replaybuf_core.store.replace.build_beside`), or in place at an object-storage URL, which has no
rename (see :func:`~replaybuf_core.importing.pipeline.import_source`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from replaybuf_core.source import _disk_bytes
from replaybuf_core.store.buffer import ReplayBuffer
from replaybuf_core.store.replace import build_beside

logger = logging.getLogger(__name__)

__all__ = ["building"]


class _InPlace:
    """Where a URL import builds: the destination itself (object stores have no rename)."""

    replaces = False  # the URL held no store (check_url_destination)
    swap = True
    keep_if_interrupted = False  # (written in place: what was committed stays anyway)
    adopted = False  # written in place: never continued (delete it before importing there again)

    def __init__(self, url: str, options: dict):
        self.path, self._options = url, options

    def stored_bytes(self) -> int | None:
        return _stored_bytes(self.path, self._options)


class _Beside:
    """Where a local import builds: beside the destination (:func:`build_beside`)."""

    def __init__(self, beside: Any, dst: Path):
        self._beside, self.path, self.replaces = beside, beside.path, dst.exists()
        self.adopted = beside.adopted  # a killed run's build, continued (:mod:`.resume`)

    @property
    def swap(self) -> bool:
        return self._beside.swap

    @property
    def keep_if_interrupted(self) -> bool:
        """Keep the build when a Ctrl-C / SIGTERM ends the import (the next run continues it)."""
        return self._beside.keep_if_interrupted

    @keep_if_interrupted.setter
    def keep_if_interrupted(self, value: bool) -> None:
        self._beside.keep_if_interrupted = value

    @swap.setter
    def swap(self, value: bool) -> None:
        self._beside.swap = value

    def stored_bytes(self) -> int:
        return _disk_bytes(os.fspath(self.path))


@contextmanager
def building(dst: Path | str, options: dict | None = None,
             adopt: Callable[[Path], bool] | None = None) -> Iterator[_InPlace | _Beside]:
    """Build beside a local ``dst`` and swap it in at the end; build a URL ``dst`` in place.
    ``adopt``: which leftover build of a dead process beside a local ``dst`` to continue
    (:func:`~replaybuf_core.importing.resume.adopter`)."""
    if isinstance(dst, Path):
        with build_beside(dst, adopt=adopt) as beside:
            yield _Beside(beside, dst)
        return
    try:
        yield _InPlace(dst, options or {})
    except BaseException:
        logger.error("%s: the import stopped; the store there holds the episodes committed so far (its data "
                     "attribute import.complete is false): delete it before importing there again", dst)
        raise


def _stored_bytes(url: str, options: dict) -> int | None:
    """Bytes stored for the arrays of the store at ``url`` (the backend's ``stored_bytes``)."""
    with ReplayBuffer.create_from_path(url, **options) as rb:
        sizer = getattr(rb.store, "stored_bytes", None)
        if sizer is None:
            return None
        sizes = [sizer(g, k) for g in ("data", "meta") for k in rb.store.list_arrays(g)]
    return None if None in sizes else sum(sizes)
