"""pluggy plugin module of the built-in export formats (named in ``[project.entry-points.replaybuf]``
as ``exports``, found exactly like a third-party export format)."""

from replaybuf_core.hookspecs import hookimpl


@hookimpl
def replaybuf_export_formats():
    """Hook: the export formats this package provides (their writers load only when one writes)."""
    from .diffusion_policy import DiffusionPolicyExport
    from .lerobot import LeRobotExport
    from .robomimic import RobomimicExport

    return [LeRobotExport, DiffusionPolicyExport, RobomimicExport]
