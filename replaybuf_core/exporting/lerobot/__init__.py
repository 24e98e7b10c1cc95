"""The ``lerobot`` export format (LeRobot v3.0): :class:`~.format.LeRobotExport`; its features
(:mod:`.features`), statistics (:mod:`.stats`) and videos (:mod:`.video`)."""

from .format import LeRobotExport

__all__ = ["LeRobotExport"]
