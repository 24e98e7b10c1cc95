"""A hypothesis state machine driving a buffer against a plain list-of-episodes model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from replaybuf_core.protocol import CAP_CHUNKS, CAP_CODECS

from .data import assert_episode_equal, make_episode
from .harness import BackendHarness

DEFAULT_SETTINGS = settings(
    max_examples=25,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def make_state_machine(harness: BackendHarness | Callable[[], BackendHarness]) -> type[RuleBasedStateMachine]:
    """A ``RuleBasedStateMachine`` class testing ``harness``'s backend.

    Rules: add_episode, drop_episode, pop_episode, get_episode (also negative indices and out of
    range), get_steps_slice, update_meta, set_chunks / set_compressors (only when the backend has the
    ``"chunks"`` / ``"codecs"`` capability), reopen.  After every step the buffer must match a plain
    list of episode dicts (episode_ends, n_steps, keys, the last episode's content).

    ``harness`` is a harness instance or a zero-argument factory.  Use it either as a pytest test
    class (``TestMine = make_state_machine(MyHarness(...)).TestCase``) or, with a fixture-made
    harness, through :func:`run_state_machine`.
    """

    class BufferMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.harness = harness() if callable(harness) and not isinstance(harness, BackendHarness) \
                else harness
            self.buf = self.harness.make_empty()
            self.strings = self.harness.supports_strings
            self.model: list[dict[str, np.ndarray]] = []
            self.meta: dict[str, np.ndarray] = {}
            self.seed = 0
            # 0-row arrays of every key: arrays stay (with 0 rows) after the last episode is dropped
            self.template: dict[str, np.ndarray] = {}

        # -- helpers
        def _ends(self) -> np.ndarray:
            return np.cumsum([len(e["action"]) for e in self.model], dtype=np.int64)

        def _flat(self) -> dict[str, np.ndarray]:
            return {k: np.concatenate([v] + [e[k] for e in self.model]) for k, v in self.template.items()}

        # -- rules
        @rule(length=st.integers(1, 6))
        def add_episode(self, length: int) -> None:
            self.seed += 1
            ep = make_episode(length, self.seed, strings=self.strings)
            self.buf.add_episode(ep)
            self._append(ep)

        def _append(self, ep: dict[str, np.ndarray]) -> None:
            self.model.append(ep)
            if not self.template:
                self.template = {k: v[:0] for k, v in ep.items()}

        @rule(length=st.integers(1, 4))
        def extend(self, length: int) -> None:
            self.seed += 1
            ep = make_episode(length, self.seed, strings=self.strings)
            self.buf.extend(ep)
            self._append(ep)

        @rule()
        def drop_episode(self) -> None:
            if not self.model:
                try:
                    self.buf.drop_episode()
                except IndexError:
                    return
                raise AssertionError("drop_episode on an empty buffer did not raise IndexError")
            self.buf.drop_episode()
            self.model.pop()

        @rule()
        def pop_episode(self) -> None:
            if not self.model:
                try:
                    self.buf.pop_episode()
                except IndexError:
                    return
                raise AssertionError("pop_episode on an empty buffer did not raise IndexError")
            got = self.buf.pop_episode()
            assert_episode_equal(got, self.model.pop())

        @rule(data=st.data())
        def get_episode(self, data: st.DataObject) -> None:
            n = len(self.model)
            idx = data.draw(st.integers(-n - 2, n + 1), label="idx")
            if -n <= idx < n:
                assert_episode_equal(self.buf.get_episode(idx, copy=data.draw(st.booleans())), self.model[idx])
                sl = self.buf.get_episode_slice(idx)
                ends = self._ends()
                i = idx % n
                assert (sl.start, sl.stop) == ((int(ends[i - 1]) if i else 0), int(ends[i]))
            else:
                try:
                    self.buf.get_episode(idx)
                except IndexError as exc:
                    assert str(idx) in str(exc) and str(n) in str(exc), str(exc)
                else:
                    raise AssertionError(f"get_episode({idx}) with {n} episodes did not raise")

        @rule(start=st.none() | st.integers(-30, 30), stop=st.none() | st.integers(-30, 30),
              step=st.none() | st.integers(1, 4))
        def get_steps_slice(self, start: Any, stop: Any, step: Any) -> None:
            got = self.buf.get_steps_slice(start, stop, step)
            flat = self._flat()
            assert_episode_equal(got, {k: v[start:stop:step] for k, v in flat.items()})

        @rule(key=st.sampled_from(["alpha", "beta"]),
              value=st.one_of(st.integers(-5, 5), st.lists(st.floats(-1, 1, width=32), max_size=4),
                              st.text("abc", max_size=3)))
        def update_meta(self, key: str, value: Any) -> None:
            self.buf.update_meta({key: value})
            self.meta[key] = np.asarray(value)

        @precondition(lambda self: bool(self.model))
        @rule(length=st.integers(1, 8))
        def set_chunks(self, length: int) -> None:
            if CAP_CHUNKS not in self.buf.store.capabilities:
                return
            self.buf.set_chunks({"obs": (length, 3), "action": (length,)})
            ck = self.buf.get_chunks()
            assert ck["obs"] == (length, 3) and ck["action"] == (length,)
            assert self.buf.chunk_size == ck[self.buf.keys()[0]][0]

        @precondition(lambda self: bool(self.model))
        @rule(name=st.sampled_from(["default", "disk", None]))
        def set_compressors(self, name: Any) -> None:
            if CAP_CODECS not in self.buf.store.capabilities:
                return
            self.buf.set_compressors({"obs": name})

        @rule()
        def reopen(self) -> None:
            self.buf = self.harness.reopen(self.buf)

        # -- invariants
        @invariant()
        def matches_model(self) -> None:
            b = self.buf
            assert b.backend == self.harness.name
            assert b.n_episodes == len(self.model)
            ends = self._ends()
            assert b.episode_ends.dtype == np.int64
            np.testing.assert_array_equal(b.episode_ends, ends)
            assert b.n_steps == (int(ends[-1]) if ends.size else 0) == len(b)
            np.testing.assert_array_equal(b.episode_lengths, np.diff(ends, prepend=0))
            idxs = b.get_episode_idxs()
            assert idxs.shape == (b.n_steps,)
            assert b.keys() == sorted(self.template)
            for k in b.keys():
                assert b.store.shape("data", k)[0] == b.n_steps
            if self.model:
                assert_episode_equal(b.get_episode(-1), self.model[-1])
            for k, v in self.meta.items():
                got = b.meta[k][...]
                if v.dtype.kind == "U":
                    assert np.asarray(got, dtype=object).tolist() == v.astype(object).tolist()
                else:
                    np.testing.assert_array_equal(got, v)

        def teardown(self) -> None:
            try:
                self.buf.store.close()
            except Exception:
                pass

    BufferMachine.__name__ = BufferMachine.__qualname__ = f"BufferMachine_{getattr(harness, 'name', '')}"
    return BufferMachine


def run_state_machine(harness: BackendHarness, settings_: settings | None = None) -> None:
    """Run :func:`make_state_machine` for ``harness`` now (inside a test body), with modest default
    settings (25 examples x 15 steps, no deadline)."""
    run_state_machine_as_test(make_state_machine(harness), settings=settings_ or DEFAULT_SETTINGS)
