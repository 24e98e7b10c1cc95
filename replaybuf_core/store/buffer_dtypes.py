"""Source dtypes: an imported key reads back in the dtype its source had.

An import stores camera frames of a float source (Push-T's ``img`` is float32 0..255) as uint8 once
it has proved every value an integer in 0..255 — a quarter of the bytes, and what the frame codecs
hold — and records the source dtype in the ``data`` group's ``conversions`` attribute
(``{key: {"source_dtype": "float32", "converted_to": "uint8", ...}}``).  Client code expects the
source's dtype back: diffusion_policy's dataset divides ``img`` by 255 and feeds a float32 model,
and ``uint8 / 255`` is float64.

So the buffer's read paths — ``rb[key]``, ``get_episode``, ``get_steps_slice``, ``read_rows``,
the samplers — return such keys in the source dtype (an exact cast: the values are integers), unless
asked for ``dtypes="stored"``.  Writes accept the source dtype and store it exactly, refusing a
value the stored dtype cannot hold.  The cast is done here, above the backends, so it is the same
for every backend (zarr, numpy, an installed plugin); ``zarr.json`` keeps the stored dtype, so plain
zarr-python (and any other Zarr reader) reads the stored uint8 values, and the source dtype is in
the attribute.  A mixin of :class:`~replaybuf_core.ReplayBuffer` (uses ``_store`` and ``keys``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

DTYPES = ("source", "stored")


def check_dtypes(dtypes: str) -> str:
    """``dtypes`` itself if it is ``"source"`` or ``"stored"``; else ValueError naming both."""
    if dtypes not in DTYPES:
        raise ValueError(f"dtypes must be 'source' (the dtype the import's source had) or 'stored', got {dtypes!r}")
    return dtypes


class SourceDtypes:
    """``ReplayBuffer``'s source-dtype bookkeeping (see the module doc)."""

    @property
    def source_dtypes(self) -> dict[str, np.dtype]:
        """key → the source's dtype, for the keys stored in another dtype (an import's conversions;
        native byte order).  Keys stored as their source had them are absent."""
        cached = getattr(self, "_source_dtypes", None)
        if cached is not None:
            return cached
        conversions = {}
        try:
            conversions = self._store.get_attrs("data").get("conversions") or {}
        except (KeyError, AttributeError):
            pass
        out: dict[str, np.dtype] = {}
        if isinstance(conversions, dict):
            for key, entry in conversions.items():
                try:
                    dt = np.dtype(entry["source_dtype"]).newbyteorder("=")
                except (TypeError, KeyError, ValueError):
                    continue  # not a conversion this version understands: reads keep the stored dtype
                if (self._store.has_array("data", key) and dt.kind in "biuf"
                        and dt != np.dtype(self._store.dtype("data", key))):
                    out[key] = dt
        self._source_dtypes = out
        return out

    def dtype_of(self, key: str, dtypes: str = "source") -> np.dtype:
        """The dtype reads of data ``key`` return: its source dtype (``dtypes="source"``, the default)
        or the dtype it is stored in (``"stored"``).  Raises KeyError (unknown key), ValueError."""
        check_dtypes(dtypes)
        stored = np.dtype(self._store.dtype("data", key))
        return self.source_dtypes.get(key, stored) if dtypes == "source" else stored

    def _as_read(self, key: str, values: np.ndarray, dtypes: str) -> np.ndarray:
        """``values`` (stored dtype) in the dtype ``dtypes`` asks for."""
        dt = self.source_dtypes.get(key) if dtypes == "source" else None
        return values if dt is None or values.dtype == dt else values.astype(dt)

    def _as_stored(self, key: str, values: Any, stored: np.dtype) -> np.ndarray:
        """``values`` of a key stored as ``stored`` with source dtype :meth:`source_dtypes`: cast to
        ``stored``, checked exact.  Raises ValueError naming the key and a value it cannot hold."""
        arr = np.asarray(values)
        source = self.source_dtypes.get(key)
        if source is None or arr.dtype == stored or arr.dtype.kind not in "biuf":
            return arr
        cast = arr.astype(stored)
        back = cast.astype(arr.dtype)
        same = (back == arr) & (np.signbit(back) == np.signbit(arr)) if arr.dtype.kind == "f" else back == arr
        if not np.all(same):
            bad = arr[~same].flat[0] if np.ndim(same) else arr
            raise ValueError(f"data key {key!r} is stored as {stored} (its source had {source}): "
                             f"{bad!r} cannot be stored exactly (integers in the {stored} range only)")
        return cast
