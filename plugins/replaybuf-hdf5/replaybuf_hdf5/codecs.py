"""Codec specs ↔ HDF5 filters.

replaybuf speaks numcodecs (``ReplayBuffer.resolve_compressor("default")`` is a ``numcodecs.Blosc``);
HDF5 speaks filters (``compression=``/``compression_opts=`` of ``h5py.Group.create_dataset``).

What :func:`to_h5_filter` accepts (what ``Hdf5Backend.create_array(codec=...)`` takes):

=================================  =================================================================
``None``                           no filter (uncompressed)
``"gzip"`` / ``"lzf"``             HDF5's built-in deflate (level 4) / LZF
``Lzf()``                          LZF (:class:`Lzf`; the form ``ReplayBuffer`` calls accept)
``numcodecs.GZip(level)``          gzip at ``level``; ``numcodecs.Zlib(level)`` too (same deflate)
``numcodecs.Blosc(...)``           the Blosc filter (id 32001) with the same cname/clevel/shuffle when
                                   ``hdf5plugin`` is importable; else **gzip level 4** (logged once)
``numcodecs.Zstd(level)``          the Zstd filter (id 32015) when ``hdf5plugin`` is importable; else
                                   **gzip level 4** (logged once)
zarr v3 gzip/zstd/blosc codecs     mapped as their numcodecs twins: a zarr buffer's ``codec()``
                                   answers these, so zarr → hdf5 copies keep the codec
a mapping of h5py kwargs           ``{"compression": ..., "compression_opts": ..., "shuffle": ...}``,
                                   e.g. an ``hdf5plugin`` filter object (they are such mappings)
=================================  =================================================================

What :func:`codec_from_dataset` returns (what ``Hdf5Backend.codec()`` answers): ``None`` (no
filter), ``numcodecs.GZip(level)``, :class:`Lzf` (numcodecs has no LZF codec),
``numcodecs.Blosc(cname, clevel, shuffle)`` / ``numcodecs.Zstd(level)`` for the hdf5plugin filters,
or for any other filter the dict ``{"compression": <filter id>, "compression_opts": <tuple>}``.
Every answer is accepted back by ``create_array(codec=...)``.  Why gzip-4 rather than LZF as the
fallback: ``GZip`` is a numcodecs codec, so an HDF5 buffer copied to zarr keeps a codec zarr knows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numcodecs

logger = logging.getLogger(__name__)

BLOSC_FILTER_ID = 32001
ZSTD_FILTER_ID = 32015
FALLBACK_GZIP_LEVEL = 4
_BLOSC_CNAMES = ("blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd")
_noted: set[str] = set()


class Lzf:
    """HDF5's built-in LZF filter as a codec object (numcodecs has no LZF codec).

    ``Hdf5Backend.codec()`` answers ``Lzf()`` for LZF datasets; pass it (or the string ``"lzf"``) to
    ``create_array(codec=...)``, or to ``ReplayBuffer.set_compressors`` / ``add_episode(compressors=)``,
    which take codec objects but read strings as preset names.  Not a zarr codec: copying an LZF
    array to zarr needs an explicit ``compressors={key: ...}``.
    """

    codec_id = "lzf"

    def get_config(self) -> dict[str, str]:
        return {"id": self.codec_id}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lzf)

    def __hash__(self) -> int:
        return hash(Lzf)

    def __repr__(self) -> str:
        return "Lzf()"


def _hdf5plugin():
    try:
        import hdf5plugin
    except ImportError:
        return None
    return hdf5plugin


def has_hdf5plugin() -> bool:
    """True when ``hdf5plugin`` is importable (Blosc/Zstd are then stored as themselves)."""
    return _hdf5plugin() is not None


def _fallback(what: str) -> dict[str, Any]:
    if what not in _noted:
        _noted.add(what)
        logger.warning(
            "replaybuf-hdf5: %s needs the hdf5plugin package, which is not installed; storing gzip "
            "level %d instead (pip install hdf5plugin to keep %s)", what, FALLBACK_GZIP_LEVEL, what)
    return {"compression": "gzip", "compression_opts": FALLBACK_GZIP_LEVEL}


def to_h5_filter(codec: Any) -> dict[str, Any]:
    """h5py ``create_dataset`` keyword arguments (``compression``, ``compression_opts``,
    optionally ``shuffle``) for one codec spec (see the module docstring for what is accepted).

    Returns ``{}`` for ``None``.

    Raises:
        TypeError: a codec this module cannot map (the message lists what is accepted).
        ValueError: a string other than ``"gzip"``/``"lzf"``.
    """
    if codec is None:
        return {}
    if isinstance(codec, str):
        if codec == "gzip":
            return {"compression": "gzip", "compression_opts": FALLBACK_GZIP_LEVEL}
        if codec == "lzf":
            return {"compression": "lzf"}
        raise ValueError(f"unknown HDF5 codec name {codec!r}; use 'gzip', 'lzf', Lzf(), a numcodecs codec "
                         "or None")
    if isinstance(codec, Lzf):
        return {"compression": "lzf"}
    if isinstance(codec, (numcodecs.GZip, numcodecs.Zlib)):
        return {"compression": "gzip", "compression_opts": int(codec.level)}
    if isinstance(codec, numcodecs.Blosc):
        plugin = _hdf5plugin()
        if plugin is None:
            return _fallback("Blosc")
        shuffle = codec.shuffle if codec.shuffle in (0, 1, 2) else 1  # AUTOSHUFFLE → byte shuffle
        return dict(plugin.Blosc(cname=codec.cname, clevel=int(codec.clevel), shuffle=shuffle))
    if isinstance(codec, numcodecs.Zstd):
        plugin = _hdf5plugin()
        if plugin is None:
            return _fallback("Zstd")
        return dict(plugin.Zstd(clevel=int(codec.level)))
    zarr_spec = _zarr_v3_spec(codec)
    if zarr_spec is not None:
        return to_h5_filter(zarr_spec)
    if isinstance(codec, Mapping) and "compression" in codec:
        out = {"compression": codec["compression"]}
        if codec.get("compression_opts") is not None:
            opts = codec["compression_opts"]
            out["compression_opts"] = tuple(opts) if isinstance(opts, (list, tuple)) else opts
        if codec.get("shuffle"):
            out["shuffle"] = True
        return out
    raise TypeError(
        f"cannot use {type(codec).__name__} {codec!r} as an HDF5 codec: pass None, 'gzip', 'lzf', "
        "numcodecs GZip/Zlib/Blosc/Zstd, or a mapping of h5py compression kwargs"
    )


_SHUFFLE_CODES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


def _zarr_v3_spec(codec: Any) -> Any:
    """A zarr v3 gzip/zstd/blosc codec (object or ``{"name", "configuration"}`` dict) as the
    equivalent numcodecs codec; ``None`` for anything else.  Duck-typed: zarr is not imported."""
    spec = codec
    if not isinstance(spec, Mapping) and callable(getattr(codec, "to_dict", None)):
        try:
            spec = codec.to_dict()
        except Exception:
            return None
    if not isinstance(spec, Mapping) or "name" not in spec:
        return None
    name, conf = spec["name"], dict(spec.get("configuration") or {})
    if name == "gzip":
        return numcodecs.GZip(level=int(conf.get("level", FALLBACK_GZIP_LEVEL)))
    if name == "zstd":
        return numcodecs.Zstd(level=int(conf.get("level", 0)))
    if name == "blosc":
        shuffle = conf.get("shuffle", "noshuffle")
        shuffle = _SHUFFLE_CODES.get(getattr(shuffle, "value", shuffle), 1)
        return numcodecs.Blosc(cname=str(getattr(conf.get("cname", "lz4"), "value", conf.get("cname", "lz4"))),
                               clevel=int(conf.get("clevel", 5)), shuffle=shuffle)
    return None


def codec_from_dataset(ds: Any) -> Any:
    """The codec spec of an ``h5py.Dataset`` (see the module docstring for the forms returned)."""
    filters = dict(ds._filters)  # {"gzip": 4} / {"lzf": None} / {"32001": (...)} / {"shuffle": ...}
    if "gzip" in filters:
        return numcodecs.GZip(level=int(filters["gzip"]))
    if "lzf" in filters:
        return Lzf()
    for key, opts in filters.items():
        if key in ("shuffle", "fletcher32", "scaleoffset"):
            continue
        try:
            fid = int(key)
        except ValueError:  # szip and other named filters
            return {"compression": key, "compression_opts": opts}
        opts = tuple(int(o) for o in (opts or ()))
        if fid == BLOSC_FILTER_ID and len(opts) >= 7 and 0 <= opts[6] < len(_BLOSC_CNAMES):
            return numcodecs.Blosc(cname=_BLOSC_CNAMES[opts[6]], clevel=opts[4], shuffle=opts[5])
        if fid == ZSTD_FILTER_ID:
            return numcodecs.Zstd(level=opts[0] if opts else 3)
        return {"compression": fid, "compression_opts": opts}
    return None


def _normalise(spec: dict[str, Any]) -> tuple:
    comp = spec.get("compression")
    opts = spec.get("compression_opts")
    if comp == BLOSC_FILTER_ID and isinstance(opts, tuple) and len(opts) >= 7:
        opts = opts[4:7]  # (clevel, shuffle, compressor); the first four are filled in by HDF5
    return comp, opts, bool(spec.get("shuffle"))


def codecs_equal(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` give the same HDF5 filter (e.g. ``numcodecs.GZip(4)`` and ``"gzip"``;
    ``numcodecs.Blosc(...)`` and ``GZip(4)`` when Blosc falls back to gzip)."""
    try:
        return _normalise(to_h5_filter(a)) == _normalise(to_h5_filter(b))
    except (TypeError, ValueError):
        return a == b
