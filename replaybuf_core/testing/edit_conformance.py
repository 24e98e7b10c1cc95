"""Conformance of the in-place edits (``delete_episodes``, ``trim_episode``, ``keep_episodes``) on
any backend: the result equals the episodes kept, per-episode meta rows follow, refused edits
change nothing, the edited store reopens clean and takes appends.  Part of
:class:`~replaybuf_core.testing.conformance.BufferConformance`."""

from __future__ import annotations

import numpy as np
import pytest

from .data import assert_buffer_equal, make_episode
from .harness import BackendHarness, filled


def _filled(harness: BackendHarness, lengths):
    buf, eps = filled(harness, lengths, strings=True)
    buf.update_meta({"tag": np.arange(len(lengths), dtype=np.int64) * 7})
    return buf, eps


class EditConformance:
    """Edits on the harness's backend, checked against the list of episodes kept."""

    def test_delete_trim_keep(self, harness: BackendHarness):
        buf, eps = _filled(harness, (3, 5, 2, 6, 4))
        tags = [0, 7, 14, 21, 28]
        buf.delete_episodes([1, -1])
        eps, tags = [eps[0], eps[2], eps[3]], [0, 14, 21]
        assert_buffer_equal(buf, eps)
        buf.trim_episode(2, 1, 4)
        eps[2] = {k: v[1:4] for k, v in eps[2].items()}
        assert_buffer_equal(buf, eps)
        buf.keep_episodes(np.array([True, False, True]))
        eps, tags = [eps[0], eps[2]], [0, 21]
        assert_buffer_equal(buf, eps)
        assert np.asarray(buf.meta["tag"][:]).tolist() == tags
        again = harness.reopen(buf)
        assert again.recovery.clean
        assert_buffer_equal(again, eps)
        extra = make_episode(3, seed=9, strings=True)
        again.add_episode(extra)
        assert_buffer_equal(again, eps + [extra])

    def test_delete_everything_and_record_again(self, harness: BackendHarness):
        buf, eps = _filled(harness, (2, 3))
        buf.delete_episodes([0, 1])
        assert buf.n_episodes == 0 and buf.n_steps == 0
        ep = make_episode(4, seed=5, strings=True)
        buf.add_episode(ep)
        assert_buffer_equal(buf, [ep])

    @pytest.mark.parametrize("call, error", [
        (lambda b: b.delete_episodes([3]), IndexError),
        (lambda b: b.delete_episodes([0, 0]), ValueError),
        (lambda b: b.trim_episode(0, 0, 0), ValueError),
        (lambda b: b.trim_episode(1, 0, 6), ValueError),
        (lambda b: b.keep_episodes(np.ones(4, bool)), ValueError),
    ])
    def test_refused_edits_change_nothing(self, harness: BackendHarness, call, error):
        buf, eps = _filled(harness, (3, 5, 2))
        with pytest.raises(error):
            call(buf)
        assert_buffer_equal(buf, eps)
        assert np.asarray(buf.meta["tag"][:]).tolist() == [0, 7, 14]


def _numpy_stats(eps, key):
    """Mean / std / min / max / count of ``key`` over ``eps``, by NumPy on the concatenated rows."""
    x = np.concatenate([ep[key] for ep in eps]).astype(np.float64)
    return {"mean": x.mean(0), "std": x.std(0), "min": x.min(0), "max": x.max(0), "count": [len(x)]}


class StatsConformance:
    """Stored statistics on the harness's backend: saved by a writable ``get_stats``, found again on
    reopening, and following appends and edits, each time equal to NumPy over the episodes kept."""

    def test_stored_stats_follow_appends_and_edits(self, harness: BackendHarness):
        from replaybuf_core.store.stored_stats import RECORD

        buf, eps = _filled(harness, (4, 6, 3, 5))

        def check(b, kept):
            stats = b.get_stats()
            assert sorted(stats) == ["action", "obs"]
            for key in ("action", "obs"):
                for name, want in _numpy_stats(kept, key).items():
                    np.testing.assert_allclose(stats[key][name], want, rtol=1e-9, atol=1e-12, err_msg=(key, name))
            entry = b.store.get_attrs("meta")[RECORD]["keys"]["obs"]
            assert entry["n_episodes"] == len(kept)

        check(buf, eps)
        extra = make_episode(7, seed=11, strings=True)
        buf.add_episode(extra)
        eps = eps + [extra]
        check(buf, eps)
        buf.delete_episodes([1])
        eps = [eps[0]] + eps[2:]
        check(buf, eps)
        buf.trim_episode(0, 1, 3)
        eps[0] = {k: v[1:3] for k, v in eps[0].items()}
        check(buf, eps)
        buf.drop_episode()
        eps = eps[:-1]
        again = harness.reopen(buf)
        check(again, eps)
