"""Stored statistics (``replaybuf_core.store.stored_stats``): kept up to date through appends and edits,
reading only the episodes that changed, never trusted when damaged or stale, checked by verify.

Expected values come from NumPy over a plain list of the episodes kept (the model), never from the
code under test; which episodes get read is observed by wrapping ``summarize``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.store import stored_stats as stats_store
from replaybuf_core.cli import main
from replaybuf_core.stats.quantiles import ALPHA
from replaybuf_core.stats.summaries import QUANTILES
from replaybuf_core.store.stored_stats import RECORD
from replaybuf_core.inspection.verify import verify_store


def _episode(rng, n):
    return {"pos": (rng.standard_normal((n, 2)) * 10).astype(np.float32),
            "count": rng.integers(-5, 6, (n,), dtype=np.int16),
            "img": rng.integers(0, 256, (n, 3, 4, 3), dtype=np.uint8)}


def _check_against_numpy(stats, eps):
    """Every statistic against NumPy on the concatenated episodes of the model."""
    for key in ("pos", "count"):
        x = np.concatenate([e[key] for e in eps]).astype(np.float64).reshape(-1, *eps[0][key].shape[1:])
        d = stats[key]
        np.testing.assert_allclose(d["mean"], x.mean(0), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(d["std"], x.std(0), rtol=1e-9, atol=1e-12)
        assert d["min"].tolist() == x.min(0).tolist() and d["max"].tolist() == x.max(0).tolist()
        assert d["count"].tolist() == [len(x)]
        for name, q in QUANTILES.items():
            lo, hi = np.quantile(x, q, axis=0, method="lower"), np.quantile(x, q, axis=0, method="higher")
            if key == "count":  # int16: exact
                assert d[name].tolist() == lo.tolist(), name
            else:
                assert np.all((d[name] >= lo - ALPHA * np.abs(lo)) & (d[name] <= hi + ALPHA * np.abs(hi))), name
    px = np.concatenate([e["img"] for e in eps]).reshape(-1, 3).astype(np.float64) / 255
    for name, q in QUANTILES.items():
        assert stats["img"][name].ravel().tolist() == np.quantile(px, q, axis=0, method="lower").tolist()
    np.testing.assert_allclose(stats["img"]["mean"].ravel(), px.mean(0), rtol=1e-12)


OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(1, 9)),
    st.tuples(st.just("delete"), st.integers(0, 2**16)),
    st.tuples(st.just("trim"), st.integers(0, 2**16)),
    st.tuples(st.just("drop"), st.just(0)),
    st.tuples(st.just("keep"), st.integers(0, 2**16)),
    st.tuples(st.just("stats"), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0)),
), min_size=1, max_size=10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, seed=st.integers(0, 2**32 - 1))
def test_stored_stats_equal_numpy_over_the_model_after_any_operations(tmp_path_factory, ops, seed):
    rng = np.random.default_rng(seed)
    path = str(tmp_path_factory.mktemp("s") / "s.zarr")
    rb = ReplayBuffer.create_empty("zarr", path)
    model = [_episode(rng, 4), _episode(rng, 6)]
    for ep in model:
        rb.add_episode(ep)
    rb.get_stats()
    try:
        for op, arg in ops:
            n = len(model)
            if op == "add":
                ep = _episode(rng, arg)
                rb.add_episode(ep)
                model.append(ep)
            elif op == "delete" and n > 1:
                i = arg % n
                rb.delete_episodes([i])
                model.pop(i)
            elif op == "trim" and n:
                i = arg % n
                length = len(model[i]["pos"])
                a = arg % length
                b = a + 1 + (arg // 7) % (length - a)
                rb.trim_episode(i, a, b)
                model[i] = {k: v[a:b] for k, v in model[i].items()}
            elif op == "drop" and n > 1:
                rb.drop_episode()
                model.pop()
            elif op == "keep" and n > 1:
                mask = np.array([(arg >> j) & 1 for j in range(n)], dtype=bool)
                mask[arg % n] = True  # keep at least one
                rb.keep_episodes(mask)
                model = [e for e, m in zip(model, mask) if m]
            elif op == "stats":
                _check_against_numpy(rb.get_stats(), model)
            elif op == "reopen":
                rb.close()
                rb = ReplayBuffer(path)
        _check_against_numpy(rb.get_stats(), model)
        entry = rb.store.get_attrs("meta")[RECORD]["keys"]["pos"]
        assert entry["n_episodes"] == len(model)
    finally:
        rb.close()
    assert [p for p in verify_store(path) if p.level == "error"] == []


@pytest.fixture
def spied(monkeypatch):
    """Record the episode ranges ``(first, stop)`` the statistics read."""
    calls = []
    real = stats_store.summarize

    def summarize(buffer, keys, first, stop):
        calls.append((first, stop))
        return real(buffer, keys, first, stop)

    monkeypatch.setattr(stats_store, "summarize", summarize)
    return calls


def _filled(tmp_path, n=6, seed=0):
    rng = np.random.default_rng(seed)
    rb = ReplayBuffer.create_empty("zarr", str(tmp_path / "s.zarr"))
    eps = [_episode(rng, 3 + i) for i in range(n)]
    for ep in eps:
        rb.add_episode(ep)
    return rb, eps, rng


def test_an_update_reads_only_the_new_episodes(tmp_path, spied):
    rb, eps, rng = _filled(tmp_path)
    rb.get_stats()
    assert spied == [(0, 6)]
    spied.clear()
    rb.get_stats()
    assert spied == []  # stored and current: nothing read
    for _ in range(2):
        ep = _episode(rng, 5)
        rb.add_episode(ep)
        eps.append(ep)
    _check_against_numpy(rb.get_stats(), eps)
    assert spied == [(6, 8)]
    rb.close()


def test_edits_read_only_the_episodes_they_change(tmp_path, spied):
    rb, eps, _ = _filled(tmp_path)
    rb.get_stats()
    spied.clear()
    rb.delete_episodes([1, 2, 4])
    assert spied == [(1, 3), (4, 5)]  # read before the edit, subtracted after
    eps = [eps[0], eps[3], eps[5]]
    spied.clear()
    rb.trim_episode(1, 1, 4)
    assert spied == [(1, 2), (1, 2)]  # the old episode before, its kept steps after
    eps[1] = {k: v[1:4] for k, v in eps[1].items()}
    spied.clear()
    _check_against_numpy(rb.get_stats(), eps)
    assert spied == []
    rb.close()


def test_deleting_most_steps_summarises_the_kept_ones_afresh(tmp_path, spied):
    rb, eps, _ = _filled(tmp_path)
    rb.get_stats()
    spied.clear()
    rb.keep_episodes(np.array([True] + [False] * 5))
    assert spied == [(0, 1)]
    _check_against_numpy(rb.get_stats(), eps[:1])
    rb.close()


def test_a_read_only_buffer_brings_stats_up_to_date_without_writing(tmp_path, spied):
    rb, eps, rng = _filled(tmp_path)
    rb.get_stats()
    ep = _episode(rng, 4)
    rb.add_episode(ep)
    rb.close()
    path = tmp_path / "s.zarr"
    before = json.loads((path / "meta" / "zarr.json").read_text())
    spied.clear()
    with ReplayBuffer.create_from_path(path) as ro:
        _check_against_numpy(ro.get_stats(), eps + [ep])
    assert spied == [(6, 7)]
    assert json.loads((path / "meta" / "zarr.json").read_text()) == before


def test_damaged_or_stale_stats_are_never_used_and_verify_names_them(tmp_path):
    rb, eps, _ = _filled(tmp_path)
    rb.get_stats()
    m = rb.store.read("meta", "_stats.pos.moments", 0, 6)
    m[2, 0, 0] += 100.0  # a changed byte the record's hash catches
    rb.store.write("meta", "_stats.pos.moments", 0, m)
    rb.close()
    path = str(tmp_path / "s.zarr")
    errors = [p for p in verify_store(path) if p.level == "error"]
    assert len(errors) == 1 and "'pos'" in errors[0].message and "sha256" in errors[0].message
    with ReplayBuffer.create_from_path(path) as ro:
        _check_against_numpy(ro.get_stats(), eps)  # recomputed, not the damaged numbers
    with ReplayBuffer(path) as rw:
        rw.get_stats()  # writable: saved afresh
    assert [p for p in verify_store(path) if p.level == "error"] == []
    # a record that claims other episodes (e.g. written by a foreign tool) is stale: a note, and unused
    with ReplayBuffer(path) as rw:
        rec = rw.store.get_attrs("meta")[RECORD]
        rec["keys"]["count"]["ends_sha256"] = "0" * 64
        rw.store.set_attrs("meta", {RECORD: rec})
    found = verify_store(path)
    assert [p.level for p in found if "'count'" in p.message] == ["note"]
    with ReplayBuffer.create_from_path(path) as ro:
        _check_against_numpy(ro.get_stats(), eps)


def test_stats_that_disagree_with_the_data_are_an_error_and_recomputed_on_request(tmp_path):
    rb, eps, _ = _filled(tmp_path)
    rb.get_stats()
    rb.store.write("data", "count", 0, np.full(3, 5, dtype=np.int16))  # data changed behind the stats' back
    rb.close()
    path = str(tmp_path / "s.zarr")
    errors = [p for p in verify_store(path) if p.level == "error"]
    assert len(errors) == 1 and "disagree" in errors[0].message and "'count'" in errors[0].message
    assert "--recompute --save" in errors[0].message
    eps[0]["count"] = np.full(3, 5, dtype=np.int16)
    assert main(["stats", path, "--recompute", "--save", "--json"]) == 0
    assert [p for p in verify_store(path) if p.level == "error"] == []
    with ReplayBuffer.create_from_path(path) as ro:
        _check_against_numpy(ro.get_stats(), eps)


def test_an_interrupted_save_costs_a_recomputation_only(tmp_path, monkeypatch):
    rb, eps, rng = _filled(tmp_path)
    rb.get_stats()
    ep = _episode(rng, 5)
    rb.add_episode(ep)
    real = rb.store.set_attrs

    def dies(group, attrs):
        if RECORD in attrs:
            raise KeyboardInterrupt  # killed after the arrays, before the record
        return real(group, attrs)

    monkeypatch.setattr(rb.store, "set_attrs", dies)
    with pytest.raises(KeyboardInterrupt):
        rb.get_stats()
    monkeypatch.setattr(rb.store, "set_attrs", real)
    rb.close()
    path = str(tmp_path / "s.zarr")
    with ReplayBuffer(path) as rw:
        _check_against_numpy(rw.get_stats(), eps + [ep])
    assert [p for p in verify_store(path) if p.level == "error"] == []


@pytest.mark.parametrize("edit", ["delete_first", "drop_last", "pop_last"])
def test_an_edit_killed_before_its_stats_update_never_serves_stale_stats(tmp_path, monkeypatch, edit):
    """Kill trial's case (1 in 36): the edit is committed, its statistics update is not; an append of
    an episode of the removed one's length then makes episode_ends read as the entry's again.  Drops
    and pops of the last episode are edits too (they ran at the same generation before)."""
    rng = np.random.default_rng(3)
    path = str(tmp_path / "s.zarr")
    rb = ReplayBuffer.create_empty("zarr", path)
    eps = [_episode(rng, 4) for _ in range(3)]  # equal lengths: the ends say nothing of content
    for ep in eps:
        rb.add_episode(ep)
    rb.get_stats()  # stored, covering all three
    monkeypatch.setattr(stats_store.EditPlan, "apply", lambda self: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # committed; killed before the stats follow
        {"delete_first": lambda: rb.delete_episodes([0]), "drop_last": rb.drop_episode,
         "pop_last": rb.pop_episode}[edit]()
    monkeypatch.undo()
    rb.close()
    kept = eps[1:] if edit == "delete_first" else eps[:2]
    with ReplayBuffer(path) as rw:
        new = _episode(rng, 4)
        rw.add_episode(new)  # episode_ends is [4, 8, 12] again
        _check_against_numpy(rw.get_stats(), [*kept, new])
    assert [p for p in verify_store(path) if p.level == "error"] == []


def test_another_version_is_ignored_and_named(tmp_path):
    rb, eps, _ = _filled(tmp_path)
    rb.store.set_attrs("meta", {RECORD: {"version": 99, "keys": {}}})
    rb.close()
    path = str(tmp_path / "s.zarr")
    notes = [p for p in verify_store(path) if "version 99" in p.message]
    assert [p.level for p in notes] == ["note"]
    with ReplayBuffer.create_from_path(path) as ro:
        _check_against_numpy(ro.get_stats(), eps)


def test_the_command_saves_only_when_asked(tmp_path, capsys):
    rb, eps, _ = _filled(tmp_path)
    rb.close()
    path = str(tmp_path / "s.zarr")
    assert main(["stats", path, "--json"]) == 0
    capsys.readouterr()
    with ReplayBuffer.create_from_path(path) as ro:
        assert RECORD not in ro.store.get_attrs("meta")
    assert main(["stats", path, "--json", "--save"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["count"]["count"] == [sum(len(e["count"]) for e in eps)]
    with ReplayBuffer.create_from_path(path) as ro:
        assert ro.store.get_attrs("meta")[RECORD]["keys"]["pos"]["n_episodes"] == 6


def test_merge_keeps_the_first_sources_stats_and_adds_the_others(tmp_path, spied):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, eps_a, _ = _filled(tmp_path / "a", n=3, seed=1)
    a.get_stats()
    a.close()
    b, eps_b, _ = _filled(tmp_path / "b", n=2, seed=2)
    b.close()
    out = ReplayBuffer.merge([tmp_path / "a" / "s.zarr", tmp_path / "b" / "s.zarr"], tmp_path / "m.zarr")
    out.close()
    spied.clear()
    with ReplayBuffer(str(tmp_path / "m.zarr")) as m:
        _check_against_numpy(m.get_stats(), eps_a + eps_b)
    assert spied == [(3, 5)]


@pytest.mark.parametrize("backend", ["numpy", "zarr"])
def test_stats_behind_the_store_are_not_trusted_after_an_edit(tmp_path, backend):
    # equal-length episodes: deleting one leaves the covered episode_ends reading the same
    rb = ReplayBuffer.create_empty(backend, str(tmp_path / "s.zarr")) if backend == "zarr" \
        else ReplayBuffer.create_empty(backend)
    eps = [{"x": np.full((5, 2), float(i), np.float32)} for i in range(10)]
    for ep in eps:
        rb.add_episode(ep)
    rb.get_stats()
    eps.append({"x": np.full((5, 2), 100.0, np.float32)})
    rb.add_episode(eps[-1])  # the stored stats are now one episode behind
    rb.delete_episodes([0])
    x = np.concatenate([e["x"] for e in eps[1:]]).astype(np.float64)
    got = rb.get_stats()["x"]
    np.testing.assert_allclose(got["mean"], x.mean(0), rtol=1e-12)
    assert got["max"].tolist() == x.max(0).tolist()


def test_wide_steps_infinities_and_huge_values_match_numpy():
    rb = ReplayBuffer.create_empty("numpy")
    wide = (np.arange(2 * (2**21 + 3), dtype=np.float32).reshape(2, -1) % 1000) + 1
    rb.add_episode({"w": wide, "i": np.array([[np.inf, 1.0], [2.0, -np.inf]])})
    rb.add_episode({"w": wide[::-1].copy(), "i": np.array([[3.0, 4.0], [5.0, 6.0]])})
    s = rb.get_stats()
    w = np.concatenate([wide, wide[::-1]]).astype(np.float64)
    assert np.isfinite(s["w"]["q50"]).all()
    lo, hi = np.quantile(w, 0.5, axis=0, method="lower"), np.quantile(w, 0.5, axis=0, method="higher")
    assert np.all((s["w"]["q50"] >= lo * (1 - ALPHA)) & (s["w"]["q50"] <= hi * (1 + ALPHA)))
    x = np.array([[np.inf, 1.0], [2.0, -np.inf], [3.0, 4.0], [5.0, 6.0]])
    with np.errstate(invalid="ignore"):
        assert s["i"]["mean"].tolist() == x.mean(0).tolist()  # [inf, -inf]
        assert np.isnan(s["i"]["std"]).all() and np.isnan(x.std(0)).all()
    big = ReplayBuffer.create_empty("numpy")
    big.add_episode({"b": np.array([1e300, -1e300, 1e300])})
    with np.errstate(over="ignore", invalid="ignore"):
        assert float(big.get_stats()["b"]["std"]) == np.array([1e300, -1e300, 1e300]).std() == np.inf


def test_quantiles_stay_within_min_and_max_and_subnormals_within_their_absolute_bound():
    rng = np.random.default_rng(0)
    rb = ReplayBuffer.create_empty("numpy")
    x = rng.standard_normal((500, 4))
    rb.add_episode({"x": x, "tiny": np.array([5e-324, 1e-310, 2e-310, 1.5e-309] * 125)})
    s = rb.get_stats()
    for name in QUANTILES:
        assert np.all(s["x"][name] >= s["x"]["min"]) and np.all(s["x"][name] <= s["x"]["max"])
        t = np.array([5e-324, 1e-310, 2e-310, 1.5e-309] * 125)
        q = QUANTILES[name]
        lo, hi = np.quantile(t, q, method="lower"), np.quantile(t, q, method="higher")
        assert lo - 2.3e-308 <= s["tiny"][name] <= hi + 2.3e-308


def test_string_keys_are_refused_by_name_and_a_malformed_record_is_a_note(tmp_path, capsys):
    path = str(tmp_path / "s.zarr")
    with ReplayBuffer.create_empty("zarr", path) as rb:
        rb.add_episode({"s": np.array(["a", "b"], dtype=object), "x": np.zeros(2)})
        with pytest.raises(ValueError, match="'s' holds object"):
            rb.get_stats(["s"])
        rb.store.set_attrs("meta", {RECORD: {"version": 1, "keys": []}})
    assert main(["stats", path, "--key", "s"]) == 2
    assert "'s'" in capsys.readouterr().err
    found = [p for p in verify_store(path) if RECORD in p.where]
    assert [p.level for p in found] == ["note"]
    with ReplayBuffer.create_from_path(path) as ro:
        assert float(ro.get_stats()["x"]["mean"]) == 0.0


def test_verify_skips_the_unused_rows_of_grown_statistics_arrays(tmp_path):
    """Statistics arrays grow geometrically; rows past those in use were never written and zarr leaves
    their chunks out — not a missing chunk (found by the property test above: 2, 1, 1 episodes, stats,
    1 more; meta/_stats.*.moments then has 8 rows, 5 in use, and its last chunk absent)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "s.zarr"
    rb = ReplayBuffer.create_empty("zarr", path)
    for n in (4, 6):
        rb.add_episode(_episode(rng, n))
    rb.get_stats()
    for _ in range(2):
        rb.add_episode(_episode(rng, 1))
    rb.get_stats()
    rb.add_episode(_episode(rng, 1))
    rb.get_stats()
    rb.close()
    import os

    moments = path / "meta" / "_stats.pos.moments"
    assert len(os.listdir(moments / "c")) < 4  # the grown array's last chunk was never written
    assert [p for p in verify_store(str(path)) if p.level == "error"] == []


@pytest.mark.parametrize("edit", ["delete_last", "delete_first", "keep"])
def test_an_edit_leaves_no_rows_of_deleted_episodes_in_the_stored_moments(tmp_path, edit):
    """README: edits "drop the deleted episodes' rows".  The per-episode moments array holds exactly
    the kept episodes' rows afterwards — each equal to that episode's mean, min and max by NumPy —
    not the old rows past the ones in use (the tail kept the deleted episodes' moments)."""
    import zarr

    rb, eps, _ = _filled(tmp_path, n=6)
    rb.get_stats()
    if edit == "delete_last":
        rb.delete_episodes([4, 5])
        kept = eps[:4]
    elif edit == "delete_first":
        rb.delete_episodes([0])
        kept = eps[1:]
    else:
        rb.keep_episodes(np.array([False, True, False, True, True, False]))
        kept = [eps[1], eps[3], eps[4]]
    rb.get_stats()
    rb.close()
    moments = np.asarray(zarr.open_group(str(tmp_path / "s.zarr"), mode="r")["meta"]["_stats.pos.moments"][:])
    assert moments.shape[0] == len(kept)
    for row, ep in zip(moments, kept):
        pos = ep["pos"].astype(np.float64)
        np.testing.assert_allclose(row[0], pos.mean(axis=0), rtol=1e-12)
        np.testing.assert_array_equal(row[2], pos.min(axis=0))
        np.testing.assert_array_equal(row[3], pos.max(axis=0))
