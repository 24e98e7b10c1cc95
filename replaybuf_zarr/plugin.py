"""pluggy plugin module of the built-in Zarr backend (named in ``[project.entry-points.replaybuf]``)."""

from replaybuf_core.hookspecs import hookimpl

from .backend import ZarrEntrypoint


@hookimpl
def replaybuf_backends():
    """Hook: the backend entry-point classes of this package."""
    return [ZarrEntrypoint]


@hookimpl
def replaybuf_register_commands(subparsers):
    """Hook: the CLI command that needs zarr (``synth``)."""
    from .cli_commands import register_synth

    register_synth(subparsers)
