"""The backend registry: loads the ``replaybuf`` entry-point group through pluggy and resolves a
backend by name or by the object handed in.

Modelled on xarray's ``plugins.py`` and datasette's ``get_plugins()``: a plugin that fails to import
or whose hook raises becomes a ``RuntimeWarning`` (the other backends stay usable); two backends with
one name warn and the first loaded wins; when nothing can open an input the error lists what is
installed.  The built-in ``numpy`` and ``zarr`` backends are found the same way as third-party ones.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import os
import signal
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pluggy

from . import hookspecs
from .errors import BackendNotFoundError, DamagedSourceError, FormatNotFoundError
from .export_format import ExportFormat
from .protocol import KNOWN_CAPABILITIES, BackendEntrypoint
from .source import FormatEntrypoint

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "replaybuf"
_BUILTIN_ORDER = ("numpy", "zarr", "formats", "exports")


@dataclass(frozen=True)
class BackendInfo:
    """One installed backend: its name, the entry-point object, and where it came from."""

    name: str
    entrypoint: BackendEntrypoint
    plugin: str
    distribution: str | None
    version: str | None

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset(self.entrypoint.capabilities)

    @property
    def description(self) -> str:
        return self.entrypoint.description


_dist_of_plugin: dict[str, tuple[str | None, str | None]] = {}


@functools.cache
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with every loadable ``replaybuf`` entry point registered."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    eps = sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
        key=lambda ep: (ep.name not in _BUILTIN_ORDER, ep.name),
    )
    with _interrupts_noted() as interrupts:
        for ep in eps:
            if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            dist_version = dist.version if dist is not None else None
            try:
                module = ep.load()
            except Exception as exc:  # a broken plugin must not break the others
                _reraise_interrupt(exc, interrupts)
                warnings.warn(
                    f"replaybuf backend plugin {ep.name!r} ({ep.value}, distribution {dist_name}) failed "
                    f"to load and is skipped: {type(exc).__name__}: {exc}",
                    RuntimeWarning,
                    stacklevel=2,
                )
                continue
            _reraise_interrupt(None, interrupts)  # an interrupt the module caught and went on after
            pm.register(module, name=ep.name)
            _dist_of_plugin[ep.name] = (dist_name, dist_version)
    return pm


#: The signals whose Python handler raises an interrupt in a command: SIGINT (Ctrl-C) and SIGTERM (the
#: CLI raises it like Ctrl-C, as a KeyboardInterrupt subclass).
_NOTED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _interrupts_noted() -> Iterator[list[KeyboardInterrupt]]:
    """Run the block with the installed SIGINT/SIGTERM handlers wrapped so that every
    ``KeyboardInterrupt`` they raise is also appended to the yielded list.

    A Ctrl-C while a plugin's module imports can be swallowed by the module: numba's C extension
    prints the interrupt and raises ``ImportError: numba._devicearray failed to import`` with no
    ``__cause__``/``__context__`` (a CI run of the Ctrl-C test hit it), and a module may also catch it
    and go on.  The list says that the user did press Ctrl-C, whatever the import made of it.  Main
    thread only (signals are delivered there; ``signal.signal`` raises elsewhere); non-callable
    handlers (SIG_DFL, SIG_IGN) are left alone; the previous handlers are restored at the end."""
    noted: list[KeyboardInterrupt] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = {sig: signal.getsignal(sig) for sig in _NOTED_SIGNALS}
    previous = {sig: h for sig, h in previous.items() if callable(h)}

    def noting(handler: Any) -> Any:
        def handle(signum: int, frame: Any) -> Any:
            try:
                return handler(signum, frame)
            except KeyboardInterrupt as exc:
                noted.append(exc)
                raise
        return handle

    installed = {}
    try:
        for sig, handler in previous.items():
            installed[sig] = signal.signal(sig, noting(handler))
        yield noted
    finally:
        for sig, handler in installed.items():
            signal.signal(sig, handler)


def _reraise_interrupt(exc: BaseException | None, noted: list[KeyboardInterrupt] = ()) -> None:
    """Raise KeyboardInterrupt when ``exc`` was caused by one, or when ``noted`` (from
    :func:`_interrupts_noted`) holds one: a Ctrl-C while a plugin's module is imported can surface
    wrapped (e.g. ``RuntimeError: Error calling __set_name__``), or as an unrelated error with no chain
    (numba's ``ImportError``), or not at all, and must stop the command as Ctrl-C does, not skip
    the plugin as broken nor be lost.  The interrupt raised keeps the type of the one noted (the CLI's
    SIGTERM interrupt is a subclass)."""
    if noted:
        interrupt = noted[0]
        raise type(interrupt)(*interrupt.args) from exc
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            raise KeyboardInterrupt from exc
        seen.add(id(e))
        e = e.__cause__ or e.__context__


def _collect(hook_name: str, base: type, what: str) -> dict[str, tuple[Any, str, str | None, str | None]]:
    """name → (entry-point object, plugin, distribution, version) of every class the ``hook_name``
    hook of the loaded plugins returns that is a named ``base``; broken plugins and duplicate names
    warn (the first loaded wins)."""
    pm = get_plugin_manager()
    found: dict[str, tuple[Any, str, str | None, str | None]] = {}
    # get_hookimpls() lists implementations in registration order (built-ins first)
    with _interrupts_noted() as interrupts:
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            try:
                classes = impl.function()
            except Exception as exc:
                _reraise_interrupt(exc, interrupts)
                warnings.warn(
                    f"replaybuf plugin {impl.plugin_name!r} raised in {hook_name}() and is "
                    f"skipped: {type(exc).__name__}: {exc}",
                    RuntimeWarning,
                    stacklevel=3,
                )
                continue
            _reraise_interrupt(None, interrupts)
            dist_name, dist_version = _dist_of_plugin.get(impl.plugin_name, (None, None))
            for cls in classes or ():
                entry = cls() if isinstance(cls, type) else cls
                if not isinstance(entry, base) or not entry.name:
                    warnings.warn(
                        f"replaybuf plugin {impl.plugin_name!r} returned {cls!r}, which is not a named "
                        f"{base.__name__}; skipped",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    continue
                if entry.name in found:
                    warnings.warn(
                        f"two replaybuf {what}s are named {entry.name!r} (plugins "
                        f"{found[entry.name][1]!r} and {impl.plugin_name!r}); using the first",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    continue
                found[entry.name] = (entry, impl.plugin_name, dist_name, dist_version)
    return found


@functools.cache
def _backends() -> dict[str, BackendInfo]:
    found: dict[str, BackendInfo] = {}
    for name, (entry, plugin, dist_name, dist_version) in _collect("replaybuf_backends", BackendEntrypoint,
                                                                    "backend").items():
        unknown = set(entry.capabilities) - KNOWN_CAPABILITIES
        if unknown:
            logger.debug("backend %s declares unknown capabilities %s", name, sorted(unknown))
        found[name] = BackendInfo(name, entry, plugin, dist_name, dist_version)
    return found


def list_backends() -> dict[str, BackendInfo]:
    """Installed backends by name (cached per process), built-ins first."""
    return dict(_backends())


def reload_backends() -> None:
    """Forget the cached plugin manager, backends and formats (tests; after installing a plugin in-process)."""
    _backends.cache_clear()
    _formats.cache_clear()
    _export_formats.cache_clear()
    get_plugin_manager.cache_clear()
    _dist_of_plugin.clear()


def _installed_text() -> str:
    names = ", ".join(sorted(_backends())) or "none"
    hint = "" if "hdf5" in _backends() else " (e.g. `pip install ./plugins/replaybuf-hdf5`)"
    return (
        f"installed backends: {names}; backends come from the 'replaybuf' entry-point group — install "
        f"a backend package{hint} to add one"
    )


def get_backend(name: str) -> BackendEntrypoint:
    """The entry point of the backend called ``name``.

    Raises:
        TypeError: ``name`` is not a string.
        BackendNotFoundError: no installed backend has that name (the message lists those installed).
    """
    return _lookup(_backends(), name, "backend", BackendNotFoundError, _installed_text)


def _lookup(found: dict, name: Any, what: str, error: type, installed) -> Any:
    if not isinstance(name, str):
        raise TypeError(f"{what} name must be a str, got {type(name).__name__} {name!r}")
    try:
        return found[name].entrypoint
    except KeyError:
        raise error(f"no replaybuf {what} named {name!r}; {installed()}") from None


def guess_backend(obj: Any) -> BackendEntrypoint:
    """The first installed backend whose ``guess_can_open(obj)`` is true.

    Raises:
        BackendNotFoundError: none claims ``obj`` (the message lists the installed backends).
    """
    for info in _backends().values():
        try:
            if info.entrypoint.guess_can_open(obj):
                return info.entrypoint
        except Exception as exc:  # a buggy guess must not hide the other backends
            logger.warning("backend %s raised in guess_can_open: %s", info.name, exc)
    from .locations import url_scheme

    scheme = url_scheme(obj)
    if scheme is not None:
        what = (f"{os.fspath(obj)}: no installed backend opens {scheme}:// URLs (object storage: s3://, gs://, "
                "az:// with the zarr backend)")
    elif isinstance(obj, (str, os.PathLike)):
        what = f"{os.fspath(obj)}: not a store any installed backend recognises"
        if not os.path.exists(os.path.expanduser(os.fspath(obj))):
            what = f"{os.fspath(obj)}: no such file or directory"
    else:
        what = f"no replaybuf backend can open a {type(obj).__name__} ({obj!r:.120})"
    raise BackendNotFoundError(f"{what}; {_installed_text()}")


def open_backend(obj: Any, *, backend: str | None = None, read_only: bool = False,
                 storage_options: dict | None = None):
    """Open ``obj`` (a native root, store, path or object-storage URL) with the named backend, or the
    one that claims it; ``storage_options`` (credentials, endpoint ... of an object-storage URL) go
    to the backend's ``open``.

    An object that already is a :class:`~replaybuf_core.protocol.StorageBackend` is returned as is.
    """
    from .protocol import StorageBackend

    if isinstance(obj, StorageBackend) and not isinstance(obj, (dict, str)):
        return obj
    entry = get_backend(backend) if backend is not None else guess_backend(obj)
    if storage_options is None:
        return entry.open(obj, read_only=read_only)
    return entry.open(obj, read_only=read_only, storage_options=storage_options)


# ------------------------------------------------------------------------------------------ formats
@dataclass(frozen=True)
class FormatInfo:
    """One installed source format (``replaybuf import``): its name, entry point and origin."""

    name: str
    entrypoint: FormatEntrypoint
    plugin: str
    distribution: str | None
    version: str | None

    @property
    def description(self) -> str:
        return self.entrypoint.description


@functools.cache
def _formats() -> dict[str, FormatInfo]:
    return {name: FormatInfo(name, *rest)
            for name, rest in _collect("replaybuf_formats", FormatEntrypoint, "format").items()}


def list_formats() -> dict[str, FormatInfo]:
    """Installed source formats by name (cached per process), built-ins first."""
    return dict(_formats())


#: the modules each pip extra of replaybuf brings (to say whether a format can run here)
EXTRA_MODULES = {"lerobot": ("pyarrow", "av"), "hdf5": ("h5py", "hdf5plugin"), "rlds": ("google.protobuf",)}


def extra_ready(extra: str | None) -> bool:
    """True when the modules of the pip extra ``extra`` (e.g. ``"lerobot"``) are importable here."""
    import importlib.util

    def found(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a dotted name whose parent package is missing (google.protobuf)
            return False

    return all(found(m) for m in EXTRA_MODULES.get(extra or "", ()))


def _formats_text() -> str:
    names = ", ".join(sorted(_formats())) or "none"
    return (f"installed formats: {names} (`replaybuf formats` describes them); formats come from the "
            "'replaybuf' entry-point group's replaybuf_formats hook")


def _might(info: FormatInfo, path: str) -> bool:
    try:
        return bool(info.entrypoint.might_open(path))
    except Exception:
        return False


def get_format(name: str) -> FormatEntrypoint:
    """The entry point of the source format called ``name``.

    Raises:
        TypeError: ``name`` is not a string.
        FormatNotFoundError: no installed format has that name (the message lists those installed).
    """
    return _lookup(_formats(), name, "import format", FormatNotFoundError, _formats_text)


def guess_format(path: str | os.PathLike) -> FormatEntrypoint:
    """The first installed format whose ``guess_can_open(path)`` is true.

    Raises:
        FileNotFoundError: nothing exists at ``path``.
        FormatNotFoundError: no format claims it (the message lists the installed formats and what
            each needs installed).
        DamagedSourceError: a format recognises the file's signature but cannot read it (truncated).
    """
    p = os.path.expanduser(os.fspath(path))
    if "://" in p:
        raise FormatNotFoundError(f"{p}: URLs are not import sources yet (only local files and directories); "
                                  f"{_formats_text()}")
    if not os.path.exists(p):
        raise FileNotFoundError(f"{p}: no such file or directory")
    for info in _formats().values():
        try:
            if info.entrypoint.guess_can_open(p):
                return info.entrypoint
        except DamagedSourceError:  # a format's own file, unreadable: say so, not "nothing recognises it"
            raise
        except Exception as exc:  # a buggy guess must not hide the other formats
            logger.warning("format %s raised in guess_can_open: %s", info.name, exc)
    wanting = [i for i in _formats().values() if not extra_ready(i.entrypoint.requires) and _might(i, p)]
    if wanting:
        extras = sorted({i.entrypoint.requires for i in wanting})
        raise FormatNotFoundError(f"{p} looks like a {' or '.join(i.name for i in wanting)} dataset, whose reader "
                                  f"is not installed: pip install 'replaybuf[{','.join(extras)}]'")
    needs = "; ".join(f"{i.name}: {i.description}" + (f" (needs `pip install replaybuf[{i.entrypoint.requires}]`)"
                                                      if not extra_ready(i.entrypoint.requires) else "")
                      for i in _formats().values())
    raise FormatNotFoundError(f"{p}: no installed import format recognises it; name the format "
                              f"(`replaybuf import FORMAT SRC DST`) or install one. {_formats_text()}. "
                              f"Formats: {needs}")


# ------------------------------------------------------------------------------------ export formats
@dataclass(frozen=True)
class ExportFormatInfo:
    """One installed export format (``replaybuf export``): its name, class instance and origin."""

    name: str
    entrypoint: ExportFormat
    plugin: str
    distribution: str | None
    version: str | None

    @property
    def description(self) -> str:
        return self.entrypoint.description


@functools.cache
def _export_formats() -> dict[str, ExportFormatInfo]:
    return {name: ExportFormatInfo(name, *rest)
            for name, rest in _collect("replaybuf_export_formats", ExportFormat, "export format").items()}


def list_export_formats() -> dict[str, ExportFormatInfo]:
    """Installed export formats by name (cached per process), built-ins first."""
    return dict(_export_formats())


def get_export_format(name: str) -> ExportFormat:
    """The export format called ``name``.

    Raises:
        TypeError: ``name`` is not a string.
        FormatNotFoundError: no installed export format has that name (the message lists those
            installed).
    """
    def installed() -> str:
        return (f"installed export formats: {', '.join(sorted(_export_formats())) or 'none'} (from the 'replaybuf' "
                "entry-point group's replaybuf_export_formats hook)")

    return _lookup(_export_formats(), name, "export format", FormatNotFoundError, installed)
