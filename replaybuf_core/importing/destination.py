"""Where an import builds its store: beside a local destination, swapped in once verified
(:func:`~replaybuf_core.store.replace.build_beside`), or in place at an object-storage URL, which has no
rename (see :func:`~replaybuf_core.importing.pipeline.import_source`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
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

    def __init__(self, url: str, options: dict):
        self.path, self._options = url, options

    def stored_bytes(self) -> int | None:
        return _stored_bytes(self.path, self._options)


class _Beside:
    """Where a local import builds: beside the destination (:func:`build_beside`)."""

    def __init__(self, beside: Any, dst: Path):
        self._beside, self.path, self.replaces = beside, beside.path, dst.exists()

    @property
    def swap(self) -> bool:
        return self._beside.swap

    @swap.setter
    def swap(self, value: bool) -> None:
        self._beside.swap = value

    def stored_bytes(self) -> int:
        return _disk_bytes(os.fspath(self.path))


@contextmanager
def building(dst: Path | str, options: dict | None = None) -> Iterator[_InPlace | _Beside]:
    """Build beside a local ``dst`` and swap it in at the end; build a URL ``dst`` in place."""
    if isinstance(dst, Path):
        with build_beside(dst) as beside:
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
