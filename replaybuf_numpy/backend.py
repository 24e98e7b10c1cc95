"""The in-memory NumPy backend: a dict ``{"data": {name: ndarray}, "meta": {name: ndarray}}``.

Arrays grow with spare capacity (doubling), so appending episodes costs amortised O(rows added);
the dict always holds exact-length views, so ``buffer.data[key]`` looks like a plain ndarray.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from replaybuf_core.errors import ReadOnlyError
from replaybuf_core.protocol import GROUPS, BackendEntrypoint, begin_write


def _zeros(shape: tuple[int, ...], dtype: np.dtype, fill_value: Any) -> np.ndarray:
    if dtype == object:
        arr = np.empty(shape, dtype=object)
        arr[...] = "" if fill_value is None else fill_value
        return arr
    if fill_value is None:
        return np.zeros(shape, dtype=dtype)
    return np.full(shape, fill_value, dtype=dtype)


class NumpyBackend:
    """:class:`~replaybuf_core.protocol.StorageBackend` over a dict of ndarrays (no chunks, no codecs)."""

    name = "numpy"
    capabilities: frozenset[str] = frozenset()

    def __init__(self, root: dict, *, read_only: bool = False):
        if not isinstance(root, dict):
            raise TypeError(f"the numpy backend needs a dict root, got {type(root).__name__}")
        self._root = root
        self.read_only = read_only
        self._capacity: dict[tuple[str, str], np.ndarray] = {}
        self._fill: dict[tuple[str, str], Any] = {}

    # -- groups ---------------------------------------------------------------------------------
    @property
    def root(self) -> dict:
        return self._root

    def has_group(self, group: str) -> bool:
        return isinstance(self._root.get(group), dict)

    def require_group(self, group: str) -> None:
        self._check_writable()
        if group not in self._root:
            self._root[group] = {}
        elif not isinstance(self._root[group], dict):
            raise ValueError(f"{group!r} in the root dict is a {type(self._root[group]).__name__}, not a dict")

    def native_group(self, group: str) -> dict:
        return self._root[group]

    def _group(self, group: str) -> dict:
        if group not in GROUPS:
            raise ValueError(f"unknown group {group!r}; groups are {GROUPS}")
        try:
            return self._root[group]
        except KeyError:
            raise KeyError(f"group {group!r} is missing from the root dict") from None

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError("this numpy buffer was opened read-only")

    # -- arrays ---------------------------------------------------------------------------------
    def list_arrays(self, group: str) -> list[str]:
        return sorted(self._group(group))

    def has_array(self, group: str, name: str) -> bool:
        return name in self._group(group)

    def get_array(self, group: str, name: str) -> np.ndarray:
        g = self._group(group)
        if name not in g:
            raise KeyError(f"no array {group}/{name}")
        return g[name]

    def create_array(self, group, name, *, shape, dtype, chunks=None, codec=None, shards=None, fill_value=None):
        self._check_writable()
        g = self._group(group)
        if name in g:
            raise ValueError(f"array {group}/{name} already exists")
        arr = _zeros(tuple(shape), np.dtype(dtype), fill_value)
        g[name] = arr
        self._capacity[(group, name)] = arr
        self._fill[(group, name)] = fill_value

    def delete_array(self, group, name):
        self._check_writable()
        self.get_array(group, name)
        del self._group(group)[name]
        self._capacity.pop((group, name), None)
        self._fill.pop((group, name), None)

    def rename_array(self, group, src, dst):
        self._check_writable()
        g = self._group(group)
        if dst in g:
            raise ValueError(f"cannot rename {group}/{src} to {dst!r}: the name is taken")
        g[dst] = self.get_array(group, src)
        del g[src]
        for d in (self._capacity, self._fill):
            if (group, src) in d:
                d[(group, dst)] = d.pop((group, src))

    def shape(self, group, name):
        return tuple(self.get_array(group, name).shape)

    def dtype(self, group, name):
        return self.get_array(group, name).dtype

    def chunks(self, group, name):
        return None

    def shards(self, group, name):
        return None

    def codec(self, group, name):
        return None

    def resize(self, group, name, n_rows):
        self._check_writable()
        view = self.get_array(group, name)
        n_rows = int(n_rows)
        cap = self._capacity.get((group, name))
        if cap is None or not (view is cap or view.base is cap):
            cap = view  # an array the user put in the dict: it becomes the capacity buffer
        old = view.shape[0]
        if n_rows > cap.shape[0]:
            new_cap = _zeros((max(n_rows, 2 * cap.shape[0], 16),) + cap.shape[1:], cap.dtype,
                             self._fill.get((group, name)))
            new_cap[:old] = view
            cap = new_cap
        elif n_rows > old:
            cap[old:n_rows] = _zeros((n_rows - old,) + cap.shape[1:], cap.dtype, self._fill.get((group, name)))
        self._capacity[(group, name)] = cap
        self._group(group)[name] = cap[:n_rows]

    def write(self, group, name, start, values):
        self._check_writable()
        arr = self.get_array(group, name)
        values = np.asarray(values)
        stop = begin_write(group, name, arr, start, values)
        if stop is None:  # a meta scalar, written whole
            return
        arr[start:stop] = values

    def read(self, group, name, start, stop, step=None):
        return self.get_array(group, name)[start:stop:step]

    def read_ranges(self, group: str, name: str, starts: Sequence[int], stops: Sequence[int]) -> list[np.ndarray]:
        arr = self.get_array(group, name)
        return [arr[a:b] for a, b in zip(starts, stops)]

    def read_rows(self, group: str, name: str, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Gather ``rows`` (int array of any shape) into ``out`` with one fancy index."""
        out[...] = self.get_array(group, name)[rows]
        return out

    def get_attrs(self, group):
        return dict(self._root.get("_attrs", {}).get(group, {}))

    def set_attrs(self, group, attrs: Mapping[str, Any]):
        self._check_writable()
        self._root.setdefault("_attrs", {}).setdefault(group, {}).update(attrs)

    def flush(self):
        pass

    def close(self):
        pass


class NumpyEntrypoint(BackendEntrypoint):
    """Opens dict roots; creates empty in-memory roots."""

    name = "numpy"
    description = "in-memory dict of NumPy arrays"
    capabilities = NumpyBackend.capabilities

    def guess_can_open(self, obj: Any) -> bool:
        return isinstance(obj, dict)

    def open(self, obj: Any, *, read_only: bool = False) -> NumpyBackend:
        return NumpyBackend(obj, read_only=read_only)

    def create(self, store: Any = None, *, if_exists: str = "replace", **kwargs: Any) -> NumpyBackend:
        if store is None:
            store = {}
        if not isinstance(store, dict):
            raise TypeError(f"the numpy backend creates roots in a dict, got {type(store).__name__}")
        if if_exists == "replace":
            store.clear()
        elif if_exists == "raise" and store:
            raise FileExistsError("the dict handed to the numpy backend is not empty")
        backend = NumpyBackend(store)
        for group in GROUPS:
            backend.require_group(group)
        return backend
