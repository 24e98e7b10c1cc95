"""pluggy hook specifications of the ``replaybuf`` project: backends, import and export formats and CLI
commands.

A backend package exposes a module with a ``@hookimpl``-decorated ``replaybuf_backends`` function
and names that module in its ``[project.entry-points.replaybuf]`` table, e.g.::

    [project.entry-points.replaybuf]
    hdf5 = "replaybuf_hdf5.plugin"
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "replaybuf"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def replaybuf_backends() -> list[type]:
    """Return the backend entry-point classes this plugin provides.

    Each is a subclass of :class:`replaybuf_core.protocol.BackendEntrypoint` with a unique ``name``.
    The hook is called once per process (the registry caches it); it must be cheap and must not
    open any store.
    """


@hookspec
def replaybuf_formats() -> list[type]:
    """Return the import-format entry-point classes this plugin provides (``replaybuf import``).

    Each is a subclass of :class:`replaybuf_core.source.FormatEntrypoint` with a unique
    ``name``.  Called once per process; it must be cheap: import a format's readers (pyarrow, PyAV,
    h5py) only when it opens a source.
    """


@hookspec
def replaybuf_export_formats() -> list[type]:
    """Return the export-format classes this plugin provides (``replaybuf export``).

    Each is a subclass of :class:`replaybuf_core.export_format.ExportFormat` with a unique ``name``.
    Called once per process; it must be cheap: import a format's writers (pyarrow, PyAV, h5py) only
    when it writes.
    """


@hookspec
def replaybuf_register_commands(subparsers) -> None:
    """Add ``replaybuf`` CLI sub-commands (the pattern of datasette's ``register_commands``).

    ``subparsers`` is the ``argparse`` sub-parser action of the ``replaybuf`` command; a plugin calls
    ``subparsers.add_parser(name, help=...)`` and sets ``func`` with ``parser.set_defaults(func=f)``,
    where ``f(args) -> int`` returns the exit code.  Backends contribute commands that need them
    (e.g. the zarr backend's ``synth`` and ``import``) so the core CLI never imports a backend.
    """
