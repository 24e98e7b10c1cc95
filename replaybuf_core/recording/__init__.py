"""Recording live sessions into a store: :class:`Recorder` (frame by frame, encoding in the
background) and, with gymnasium installed, :class:`~replaybuf_core.recording.gym.RecordEpisodes`."""

from .recorder import EpisodeReport, Recorder, RecorderLagWarning

__all__ = ["EpisodeReport", "Recorder", "RecorderLagWarning"]
