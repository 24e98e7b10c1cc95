"""pluggy plugin module of the built-in import formats (named in ``[project.entry-points.replaybuf]``,
found exactly like a third-party format)."""

from replaybuf_core.hookspecs import hookimpl


@hookimpl
def replaybuf_formats():
    """Hook: the import formats this package provides (their readers load only when one opens)."""
    from .diffusion_policy import DiffusionPolicyFormat
    from .hdf5.d3rlpy import D3rlpyFormat
    from .hdf5.maniskill import ManiSkillFormat
    from .hdf5.minari import MinariFormat
    from .hdf5.robomimic import RobomimicFormat
    from .lerobot import LeRobotFormat
    from .rlds import RldsFormat

    return [DiffusionPolicyFormat, LeRobotFormat, RobomimicFormat, MinariFormat, ManiSkillFormat, D3rlpyFormat,
            RldsFormat]
