"""Recording a gymnasium environment: every ``step`` of :class:`RecordEpisodes` becomes a frame of a
:class:`~replaybuf_core.recording.Recorder`.

The keys are the Minari import's (Farama Minari's dataset layout): ``observations`` (a Dict space's
members as ``observations.<key>``, a Tuple's as ``observations._index_<i>``, nested alike),
``actions`` (flattened the same way), ``rewards`` (float64), ``terminations`` and ``truncations``
(bool), and ``infos.<key>`` for the ``info_keys`` asked for.  Row ``t`` holds the observation the
action was chosen from, the action, and what the step returned; the observation after the last step
goes to ``meta/final.observations...`` as the Minari import keeps it.  An episode is saved when a step
returns ``terminated or truncated``, and when ``reset`` is called with an episode in progress (it
ended early: recorded with ``truncations`` false on its last row, as it happened); saving does not
wait for the commit (:meth:`Recorder.save_episode` ``wait=False``: the episode is durable within
about a second).  ``close()`` discards an episode that never ended, waits for the others and closes
the store.

Vector environments (``gymnasium.vector.VectorEnv``) are refused: wrap each sub-environment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .recorder import Recorder

__all__ = ["RecordEpisodes", "flatten"]


def _gym():
    try:
        import gymnasium
    except ImportError:
        raise ImportError("RecordEpisodes wraps gymnasium environments: pip install 'replaybuf[gym]'") from None
    return gymnasium


def flatten(prefix: str, value: Any) -> dict[str, np.ndarray]:
    """``value`` (a dict, tuple or array-like) as keys ``prefix``, ``prefix.<key>``,
    ``prefix._index_<i>`` (nested alike), each an ndarray."""
    if isinstance(value, Mapping):
        out: dict[str, np.ndarray] = {}
        for k, v in value.items():
            out.update(flatten(f"{prefix}.{k}", v))
        return out
    if isinstance(value, tuple):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(f"{prefix}._index_{i}", v))
        return out
    return {prefix: np.asarray(value)}


def _wrapper_base():
    return _gym().Wrapper


class RecordEpisodes:
    """Wrap ``env`` so that its episodes are recorded into ``store`` (a path or a writable
    ReplayBuffer; see the module docstring).  Behaves as ``env`` (``step``, ``reset``, spaces,
    ``render``...): it is a ``gymnasium.Wrapper``.

    Args:
        env: a gymnasium ``Env`` (not a ``VectorEnv``).
        store: where to record (created if absent).
        fps: the data attributes' ``fps`` (default the env's ``metadata["render_fps"]``, else 1).
        info_keys: ``info`` entries recorded each step (as ``infos.<key>``; they must be in every
            step's info).
        frames, queue_seconds: passed to :class:`Recorder` (camera observations' codec).

    Raises:
        TypeError: ``env`` is a vector environment.
        ImportError: gymnasium is not installed.
    """

    def __new__(cls, env, store, **kwargs):
        gym = _gym()
        if isinstance(env, gym.vector.VectorEnv) or hasattr(env, "num_envs") and getattr(env, "num_envs", 1) > 1:
            raise TypeError("RecordEpisodes records one environment; for a vector env wrap each sub-environment "
                            "(e.g. gymnasium.vector.SyncVectorEnv([lambda: RecordEpisodes(gym.make(...), path_i)]))")
        wrapper = type("RecordEpisodes", (_RecordEpisodes, gym.Wrapper), {"__doc__": cls.__doc__})
        return wrapper(env, store, **kwargs)


class _RecordEpisodes:
    def __init__(self, env, store, *, fps: float | None = None, info_keys: Iterable[str] = (), frames: Any = None,
                 queue_seconds: float = 2.0):
        super().__init__(env)  # gymnasium.Wrapper
        fps = fps or (getattr(env, "metadata", None) or {}).get("render_fps") or 1
        # a simulator outruns the writer by design: add_frame then blocks (back-pressure), without a warning
        self.recorder = Recorder(store, fps=float(fps), frames=frames, queue_seconds=queue_seconds, warn_lag=False)
        self.info_keys = list(info_keys)
        self._obs: Any = None
        self._t = 0
        self._steps = 0

    def reset(self, **kwargs):
        if self.recorder.frames_in_episode:  # reset mid-episode: it ended there
            self.recorder.save_episode(final=flatten("observations", self._obs), wait=False)
        obs, info = self.env.reset(**kwargs)
        self._obs, self._t = obs, 0
        return obs, info

    def step(self, action):
        if self._obs is None:
            raise RuntimeError("RecordEpisodes: call reset() before step()")
        obs, reward, terminated, truncated, info = self.env.step(action)
        frame = {**flatten("observations", self._obs), **flatten("actions", action),
                 "rewards": np.float64(reward), "terminations": np.bool_(terminated),
                 "truncations": np.bool_(truncated)}
        for k in self.info_keys:
            if k not in info:
                raise KeyError(f"RecordEpisodes: step {self._t} of the episode: info has no {k!r} (info_keys asks for it; "
                               f"info holds {sorted(info)})")
            frame.update(flatten(f"infos.{k}", info[k]))
        self.recorder.add_frame(frame, timestamp=self._t / self.recorder.fps)
        self._t += 1
        self._steps += 1
        self._obs = obs
        if terminated or truncated:
            self.recorder.save_episode(final=flatten("observations", obs), wait=False)
            self._obs = None  # the next step needs a reset
        return obs, reward, terminated, truncated, info

    def close(self):
        try:
            self.recorder.close()
        finally:
            self.env.close()
