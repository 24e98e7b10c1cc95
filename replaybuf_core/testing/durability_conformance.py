"""Conformance of durability: SIGKILL trials of a persistent backend and the hypothesis state
machine.  Part of :class:`~replaybuf_core.testing.conformance.BufferConformance`."""

from __future__ import annotations

import os
import shutil
import warnings

import numpy as np
import pytest
from hypothesis import settings

from . import crash
from .stateful import DEFAULT_SETTINGS, run_state_machine


class CrashConformance:
    """The promise of a ``"persistent"`` backend: SIGKILL a process appending (``add_episode``, an
    ``EpisodeWriter``) or removing episodes at a random moment, and the store opens again holding
    exactly the committed episodes, bit-exact, losing at most the one in flight, and appending goes
    on (:mod:`replaybuf_core.testing.crash`; ``benchmarks.soak`` runs the same trials by the
    hundred).  Needs :meth:`BackendHarness.crash_path`; skipped when it returns None."""

    #: kill trials per kind (each starts a Python process: about a second)
    crash_trials = 3

    @pytest.mark.parametrize("kind", crash.BACKEND_KINDS)
    def test_sigkill(self, harness, kind):
        path = harness.crash_path()
        if path is None:
            pytest.skip("the harness has no crash_path (not a persistent backend)")
        crash.create(path, kind=kind, backend=harness.name)
        rng = np.random.default_rng(sum(map(ord, kind)))
        for _ in range(harness.crash_trials or self.crash_trials):
            r = crash.run_trial(kind, path, rng, max_delay=0.6)
            if not harness.kill_safe and not r.clean_open and (r.error or "").startswith("open failed"):
                # best effort: the damage is refused at open, never read as data; start afresh
                if os.path.isfile(path):
                    os.remove(path)
                else:
                    shutil.rmtree(path, ignore_errors=True)
                crash.create(path, kind=kind, backend=harness.name)
                continue
            assert r.clean_open and r.lost == 0, f"{kind}: {r.error} (lost {r.lost}, {r.done} calls done)"


class StatefulConformance:
    """The hypothesis state machine (see :func:`~replaybuf_core.testing.make_state_machine`)."""

    def test_state_machine(self, harness):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no interrupted-append traces expected
            n = harness.state_machine_examples
            run_state_machine(harness, None if n is None else settings(DEFAULT_SETTINGS, max_examples=n))
