"""Mixtures of stores: the key-map, fill, padding, dtype and fps rules against a simple model
(hypothesis), exactly-once epochs, refusals of bad input (each naming the store and the key, before
anything is read), pooled and per-store statistics, the TOML file and ``replaybuf mixture check``.

Expected values come from the stores' raw episodes (every value encodes its store, step and column:
``tests/mixture_helpers.py``) and from plain-Python rules written from the docs, never from the code
under test; pooled statistics from NumPy over the concatenated steps.
"""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from mixture_helpers import anchors, make_store, value

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.mixture import Mixture, MixtureKey, MixtureSource
from replaybuf_core.stats.quantiles import ALPHA

# ---------------------------------------------------------------------------- the model
_RANK = {"b": 0, "i": 1, "f": 2}


def _model(sources, specs, deltas):
    """``(errors, keys)``: the exception types a mixture must raise (empty: none), else per mixture key
    ``{"dtype", "dim", "feeds": [store key or None per source], "dims": [...], "fill", "pad"}``."""
    errors, renamed = set(), []
    for s in sources:
        r = {}
        for k in s["dims"]:
            if k in s["drop"]:
                continue
            m = s["renames"].get(k, k)
            if m in r.values():
                errors.add(ValueError)
            r[k] = m
        renamed.append(r)
    if errors:
        return errors, None
    if any(k in s["renames"] and m not in specs for s, r in zip(sources, renamed) for k, m in r.items()):
        return {KeyError}, None  # a renamed key the keys leave out: never dropped silently
    out = {}
    for name, spec in specs.items():
        feeds = [next((k for k, m in r.items() if m == name), None) for r in renamed]
        dims = [s["dims"][k] if k else None for s, k in zip(sources, feeds)]
        kinds = [np.dtype(s["dtypes"][k]).kind for s, k in zip(sources, feeds) if k]
        sizes = [np.dtype(s["dtypes"][k]) for s, k in zip(sources, feeds) if k]
        if spec["fill"] is None and None in feeds:
            errors.add(KeyError)
            continue
        if not kinds:
            if spec["shape"] is None or spec["dtype"] is None:
                errors.add(ValueError)
                continue
            dtype, dim = np.dtype(spec["dtype"]), spec["shape"]
        else:
            if spec["dtype"] is not None:
                dtype = np.dtype(spec["dtype"])
                if any(_RANK[k] > _RANK[dtype.kind] for k in kinds):
                    errors.add(TypeError)
                    continue
            elif len(set(kinds)) > 1:
                errors.add(TypeError)
                continue
            else:
                dtype = max(sizes, key=lambda d: d.itemsize)
            present = [d for d in dims if d is not None]
            if spec["pad"]:
                dim = spec["shape"] if spec["shape"] is not None else max(present)
                if max(present) > dim:
                    errors.add(ValueError)
                    continue
            else:
                dim = spec["shape"] if spec["shape"] is not None else (present[0] if len(set(present)) == 1 else None)
                if dim is None or any(d != dim for d in present):
                    errors.add(ValueError)
                    continue
        fill = spec["fill"]
        if fill is not None and dtype.kind != "f" and fill not in (0, 1):
            errors.add(ValueError)
            continue
        out[name] = {"dtype": dtype, "dim": dim, "feeds": feeds, "dims": dims, "fill": fill, "pad": spec["pad"]}
    return errors, out


_dtype = st.sampled_from(["float32", "float64", "int16", "int32", "bool"])


@st.composite
def _mixtures(draw):
    n_src = draw(st.integers(1, 3))
    sources = []
    for _ in range(n_src):
        keys = draw(st.lists(st.sampled_from(["x", "y", "z"]), min_size=1, max_size=3, unique=True))
        sources.append({
            "dims": {k: draw(st.integers(1, 4)) for k in keys},
            "dtypes": {k: draw(_dtype) for k in keys},
            "lengths": draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)),
            "fps": draw(st.sampled_from([5.0, 10.0, 20.0])),
            "renames": {k: draw(st.sampled_from(["a", "b", "c"])) for k in keys if draw(st.integers(0, 2)) == 0},
            "drop": [k for k in keys if draw(st.integers(0, 4)) == 0],
        })
    fed = sorted({s["renames"].get(k, k) for s in sources for k in s["dims"] if k not in s["drop"]})
    names = draw(st.lists(st.sampled_from(fed * 4 + ["x", "y", "z", "a", "b", "c"]), min_size=1, max_size=3,
                          unique=True))
    # weighted towards mixtures that resolve (about half do), every refusal still drawn
    specs = {n: {"fill": draw(st.sampled_from([None, 0, 0, 0, 1, 0.5])),
                 "pad": draw(st.sampled_from([True, True, True, False])),
                 "dtype": draw(st.sampled_from([None, "float32", "float64", "float64", "int32", "bool"])),
                 "shape": draw(st.sampled_from([None, None, None, 5, 3, 1]))} for n in names}
    deltas = {n: draw(st.sampled_from([[0.0], [-0.2, 0.0, 0.4]])) for n in names if draw(st.booleans())}
    return sources, specs, deltas


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_mixtures())
def test_key_map_fill_and_padding_follow_the_model(case):
    sources, specs, deltas = case
    bufs = [make_store(None, i, s["lengths"], s["dims"], s["fps"], s["dtypes"], backend="numpy")
            for i, s in enumerate(sources)]
    msources = [MixtureSource((lambda b=b: b), name=f"s{i}", keys=s["renames"], drop=s["drop"])
                for i, (s, b) in enumerate(zip(sources, bufs))]
    mkeys = {n: MixtureKey(shape=None if sp["shape"] is None else (sp["shape"],), dtype=sp["dtype"], fill=sp["fill"],
                           pad_dims=sp["pad"]) for n, sp in specs.items()}
    errors, expected = _model(sources, specs, deltas)
    event("refused" if errors else "resolved")
    if errors:
        with pytest.raises((KeyError, TypeError, ValueError)) as info:
            Mixture(msources, mkeys, delta_timestamps=deltas)
        assert type(info.value) in errors, (errors, info.value)
        return
    mix = Mixture(msources, mkeys, delta_timestamps=deltas)
    batch = mix.sample_batch(np.arange(len(mix)))
    want = {(i, e, j) for i, s in enumerate(sources) for e, j in anchors(s["lengths"])}
    got = list(zip(batch["source_index"].tolist(), batch["source_episode"].tolist(), batch["source_frame"].tolist()))
    assert len(got) == len(want) and set(got) == want  # every anchor of every store once
    flags = set()
    for name, k in expected.items():
        if name in deltas or None in k["feeds"]:
            flags.add(name + "_is_pad")
        if k["pad"]:
            flags.add(name + "_dim_is_pad")
    assert set(batch) == set(expected) | flags | {"source_index", "source_episode", "source_frame", "mixture_position"}
    for row, (s, e, j) in enumerate(got):
        lengths = sources[s]["lengths"]
        start, n = sum(lengths[:e]), lengths[e]
        for name, k in expected.items():
            offs = [round(d * sources[s]["fps"]) for d in deltas[name]] if name in deltas else [0]
            fill = np.asarray(0 if k["fill"] is None else k["fill"]).astype(k["dtype"])
            want_v = np.empty((len(offs), k["dim"]), dtype=k["dtype"])
            want_pad = np.array([not 0 <= j + o < n for o in offs])
            store_key = k["feeds"][s]
            if store_key is None:
                want_v[:] = fill
                want_pad[:] = True
                d_s = 0
            else:
                d_s = k["dims"][s]
                src_dt = np.dtype(sources[s]["dtypes"][store_key])
                for i, o in enumerate(offs):
                    t = start + min(max(j + o, 0), n - 1)
                    raw = np.array([value(s, t, c) for c in range(d_s)])
                    raw = (raw % 2 == 1) if src_dt.kind == "b" else raw.astype(src_dt)
                    want_v[i, :d_s] = raw.astype(k["dtype"])
                    want_v[i, d_s:] = fill
            got_v = batch[name][row]
            if name not in deltas:
                want_v = want_v[0]
            np.testing.assert_array_equal(got_v, want_v, err_msg=f"{name} row {row} ({s},{e},{j})")
            assert got_v.dtype == k["dtype"]
            if name in deltas:
                assert batch[name + "_is_pad"][row].tolist() == want_pad.tolist()
            elif store_key is None or None in k["feeds"]:
                assert bool(batch[name + "_is_pad"][row]) == (store_key is None)
            if k["pad"]:
                assert batch[name + "_dim_is_pad"][row].tolist() == [c >= d_s for c in range(k["dim"])]


# ---------------------------------------------------------------------------- stores on disk
@pytest.fixture
def stores(tmp_path):
    """Three zarr stores of different schemas: state 3 / 5 / 2 dims, fps 10 / 20 / none."""
    a = make_store(tmp_path / "a.zarr", 0, [5, 7, 3], {"state": 3, "act": 3}, fps=10)
    b = make_store(tmp_path / "b.zarr", 1, [4, 6], {"state": 5, "act": 5, "img": 2}, fps=20,
                   dtypes={"img": "uint8"})
    c = make_store(tmp_path / "c.zarr", 2, [9], {"obs": 2}, dtypes={"obs": "float64"})
    return a, b, c


def _mix(stores, **kw):
    a, b, c = stores
    return Mixture([MixtureSource(a, keys={"act": "action"}), MixtureSource(b, keys={"act": "action"}, drop=["img"]),
                    MixtureSource(c, keys={"obs": "state"}, fps=5)],
                   {"state": {"pad_dims": True, "dtype": "float32"}, "action": {"fill": 0, "pad_dims": True}},
                   delta_timestamps={"action": [0.0, 0.2, 0.4]}, **kw)


def test_a_mixture_pickles_small_and_reads_the_same_after_a_round_trip(stores):
    mix = _mix(stores)
    before = mix.sample_batch(np.arange(len(mix)), epoch=1)
    blob = pickle.dumps(mix)
    assert len(blob) < 20_000
    again = pickle.loads(blob)
    assert again.fingerprint == mix.fingerprint
    after = again.sample_batch(np.arange(len(mix)), epoch=1)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])


def test_the_fingerprint_follows_the_definition_not_the_path(stores, tmp_path):
    import shutil

    mix = _mix(stores)
    moved = tmp_path / "moved"
    moved.mkdir()
    for p in stores:
        shutil.copytree(p, moved / p.name)
    assert _mix([moved / p.name for p in stores]).fingerprint == mix.fingerprint
    assert _mix(stores, seed=1).fingerprint != mix.fingerprint
    a, b, c = stores
    other = Mixture([MixtureSource(a, keys={"act": "action"}, weight=1.0),
                     MixtureSource(b, keys={"act": "action"}, drop=["img"], weight=2.0),
                     MixtureSource(c, keys={"obs": "state"}, fps=5, weight=1.0)],
                    {"state": {"pad_dims": True, "dtype": "float32"}, "action": {"fill": 0, "pad_dims": True}},
                    delta_timestamps={"action": [0.0, 0.2, 0.4]})
    assert other.fingerprint != mix.fingerprint


def test_a_store_that_changed_after_the_mixture_was_made_is_named(stores):
    mix = _mix(stores)
    from replaybuf_core import ReplayBuffer

    with ReplayBuffer(stores[0]) as rb:
        rb.add_episode({"state": np.zeros((2, 3), np.float32), "act": np.zeros((2, 3), np.float32)})
    with pytest.raises(RuntimeError, match="'a' changed"):
        mix.sample_batch([0])


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("weight,match", [(0, "> 0"), (-1.0, "> 0"), (float("nan"), "> 0"), (float("inf"), "> 0"),
                                          ("half", "'size'"), (True, "number")])
def test_a_bad_weight_is_refused_naming_the_source(stores, weight, match):
    with pytest.raises((TypeError, ValueError), match=match) as info:
        MixtureSource(stores[0], weight=weight, name="pusht")
    assert "'pusht'" in str(info.value)


def test_bad_input_is_refused_before_anything_is_read_naming_the_store_and_the_key(stores, tmp_path):
    a, b, c = stores
    # a store without a key that has no fill rule
    with pytest.raises(KeyError, match=r"source 'c'.*'action'.*fill"):
        Mixture([MixtureSource(a, keys={"act": "action"}), MixtureSource(c, keys={"obs": "state"})],
                {"state": {"pad_dims": True}, "action": None})
    # keys mapping to incompatible dtypes: uint8 frames and float32 values
    with pytest.raises(TypeError, match=r"'state'.*'a': float32.*'b': uint8"):
        Mixture([MixtureSource(a), MixtureSource(b, keys={"img": "state"}, drop=["state"])], ["state"])
    # shapes that differ without an explicit padding rule, and a pad that would truncate
    with pytest.raises(ValueError, match=r"'state'.*'a': \(3,\).*'b': \(5,\).*pad_dims"):
        Mixture([MixtureSource(a), MixtureSource(b)], ["state"])
    with pytest.raises(ValueError, match=r"'state': source 'b' has 5 entries.*never truncated"):
        Mixture([MixtureSource(a), MixtureSource(b)], {"state": {"pad_dims": True, "shape": [4]}})
    # fps that cannot give the deltas: 0.1 s at 5 fps; and a store with no fps at all
    with pytest.raises(ValueError, match=r"source 'c' at 5 fps.*'state'"):
        Mixture([MixtureSource(c, keys={"obs": "state"}, fps=5)], delta_timestamps={"state": [0.0, 0.1]})
    with pytest.raises(ValueError, match=r"source 'c'.*no 'fps'"):
        Mixture([MixtureSource(c, keys={"obs": "state"})], delta_timestamps={"state": [0.0]})
    # a key map naming a key the store lacks; two store keys on one mixture key
    with pytest.raises(KeyError, match=r"source 'a'.*\['nope'\]"):
        Mixture([MixtureSource(a, keys={"nope": "state"})])
    with pytest.raises(ValueError, match=r"source 'a': store keys .* both feed mixture key 'state'"):
        Mixture([MixtureSource(a, keys={"act": "state"})])
    # a mixture key clashing with the keys batches hold; names, weights, episodes
    with pytest.raises(ValueError, match="'source_index' clashes"):
        Mixture([MixtureSource(a, keys={"act": "source_index"})])
    with pytest.raises(ValueError, match="unique"):
        Mixture([MixtureSource(a), MixtureSource(a)])
    with pytest.raises(ValueError, match=r"\['a'\] are weighted 'size' and \['b'\] by number"):
        Mixture([MixtureSource(a), MixtureSource(b, weight=1.0)], ["state"])
    with pytest.raises(IndexError, match="source 'a': episode 3 out of range"):
        Mixture([MixtureSource(a, episodes=[0, 3])])
    with pytest.raises(FileNotFoundError, match="'gone'"):
        Mixture([MixtureSource(tmp_path / "gone.zarr")])
    with pytest.raises(TypeError, match="int"):
        Mixture([MixtureSource(a)], {"state": {"fill": 0.5, "dtype": "int32"}})


def test_a_renamed_key_left_out_of_the_keys_and_frames_made_float_are_refused(stores, tmp_path):
    """From a new-user trial: a camera mapped to a new name, with only the padded keys listed, vanished
    from the mixture without a word; uint8 frames became a float32 key although the docs say never."""
    a, b, c = stores
    with pytest.raises(KeyError, match=r"source 'a' maps store key 'act' to 'action', which is not among the "
                                       r"mixture's keys \['state'\]: add 'action' to keys.*or drop 'act'"):
        Mixture([MixtureSource(a, keys={"act": "action"})], {"state": None})
    assert [k.name for k in Mixture([MixtureSource(a)], {"state": None}).keys] == ["state"]  # not renamed: left out
    with pytest.raises(KeyError, match=r"source 'a': drop names \['nope'\], not keys of the store"):
        Mixture([MixtureSource(a, drop=["nope"])])
    frames = ReplayBuffer.create_empty("zarr", str(tmp_path / "frames.zarr"))
    frames.add_episode({"cam": np.zeros((3, 6, 8, 3), "u1"), "small": np.zeros((3, 4, 4, 3), "u1")})
    frames.close()
    with pytest.raises(TypeError, match=r"'cam': source 'frames' holds camera frames \(uint8\), which never become a "
                                        r"float32 key"):
        Mixture([MixtureSource(tmp_path / "frames.zarr", name="frames", drop=["small"])], {"cam": {"dtype": "float32"}})
    with pytest.raises(ValueError, match=r"different step shapes.*map the key apart: they differ in more than their "
                                         r"last axis"):
        Mixture([MixtureSource(tmp_path / "frames.zarr", name="f1", drop=["small"]),
                 MixtureSource(tmp_path / "frames.zarr", name="f2", keys={"small": "cam"}, drop=["cam"])], ["cam"])


def test_a_weighted_mixture_draws_its_shares(stores):
    a, b, c = stores
    mix = Mixture([MixtureSource(a, keys={"act": "action"}, weight=1.0),
                   MixtureSource(b, keys={"act": "action"}, drop=["img"], weight=3.0)],
                  {"state": {"pad_dims": True}, "action": {"pad_dims": True}}, samples_per_epoch=8192)
    batch = mix.locate(np.arange(8192))
    assert np.bincount(batch["source_index"]).tolist() == [2048, 6144]
    lengths = {0: [5, 7, 3], 1: [4, 6]}
    for s in (0, 1):  # every window of a store drawn equally often (within one)
        pairs = [(e, j) for src, e, j in zip(batch["source_index"], batch["source_episode"], batch["source_frame"])
                 if src == s]
        counts = {p: pairs.count(p) for p in anchors(lengths[s])}
        assert max(counts.values()) - min(counts.values()) <= 1


def test_episodes_choose_a_stores_samples(stores):
    a = stores[0]
    mix = Mixture([MixtureSource(a, episodes=[2, 0])])
    got = mix.locate(np.arange(len(mix)))
    assert sorted(zip(got["source_episode"].tolist(), got["source_frame"].tolist())) == \
        [(0, j) for j in range(5)] + [(2, j) for j in range(3)]


# ---------------------------------------------------------------------------- statistics
def test_pooled_and_per_store_statistics_equal_numpy_over_the_steps(stores):
    from replaybuf_core import ReplayBuffer

    mix = _mix(stores)
    pooled = mix.stats()
    per = mix.stats(per_source=True)
    cols = [[] for _ in range(5)]
    for p, key in zip(stores, ["state", "state", "obs"]):
        with ReplayBuffer.create_from_path(p) as rb:
            x = np.asarray(rb[key][:], dtype=np.float64)
        for c in range(x.shape[1]):
            cols[c].append(x[:, c])
    for c, parts in enumerate(cols):
        x = np.concatenate(parts)
        assert math.isclose(pooled["state"]["mean"][c], x.mean(), rel_tol=1e-12)
        assert math.isclose(pooled["state"]["std"][c], x.std(), rel_tol=1e-9)
        assert pooled["state"]["min"][c] == x.min() and pooled["state"]["max"][c] == x.max()
        lo, hi = np.quantile(x, 0.5, method="lower"), np.quantile(x, 0.5, method="higher")
        assert lo - ALPHA * abs(lo) <= pooled["state"]["q50"][c] <= hi + ALPHA * abs(hi)
    assert pooled["state"]["count"].tolist() == [15 + 10 + 9]
    with ReplayBuffer.create_from_path(stores[0]) as rb:
        own = rb.get_stats(["state"])["state"]
    np.testing.assert_allclose(per["a"]["state"]["mean"][:3], own["mean"])
    assert np.isnan(per["a"]["state"]["mean"][3:]).all()  # entries store a pads are nobody's statistic
    assert "action" not in per["c"]  # c has no action: filled samples count for nothing
    with pytest.raises(KeyError, match="'nope'"):
        mix.stats(keys=["nope"])


# ---------------------------------------------------------------------------- the file and the command
def _toml(tmp_path, body: str):
    f = tmp_path / "mix.toml"
    f.write_text(body)
    return f


MIX_TOML = """
seed = 0
[delta_timestamps]
action = [0.0, 0.2, 0.4]
[keys.state]
pad_dims = true
dtype = "float32"
[keys.action]
fill = 0
pad_dims = true
[[sources]]
path = "a.zarr"
keys = { act = "action" }
[[sources]]
path = "b.zarr"
keys = { act = "action" }
drop = ["img"]
[[sources]]
path = "c.zarr"
fps = 5
keys = { obs = "state" }
"""


def test_the_toml_file_defines_the_same_mixture_as_the_python_api(stores, tmp_path):
    f = _toml(tmp_path, MIX_TOML)
    assert Mixture.from_toml(f).fingerprint == _mix(stores).fingerprint


def test_mixture_check_prints_keys_shapes_weights_steps_and_padding(stores, tmp_path, capsys):
    f = _toml(tmp_path, MIX_TOML)
    assert main(["mixture", "check", str(f)]) == 0
    out = capsys.readouterr().out
    assert "3 sources, 34 samples an epoch (every window once)" in out
    assert "block 1, span all," in out  # the default: one permutation of every block (was "span None")
    assert "action: float32 (5,), 3 steps" in out and "state: float32 (5,), anchor step" in out
    assert "a: state, 3 of 5 entries, padded with 0 (state_dim_is_pad)" in out
    assert "c: filled with 0 (action_is_pad)" in out
    assert "action: steps [0, 4, 8]" in out and "action: steps [0, 2, 4]" in out  # b at 20 fps, a at 10
    assert main(["mixture", "check", str(f), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [s["windows"] for s in d["sources"]] == [15, 10, 9]
    assert sum(s["probability"] for s in d["sources"]) == pytest.approx(1)


def test_mixture_check_refuses_with_the_store_and_the_key(stores, tmp_path, capsys):
    with_state = MIX_TOML.replace("action = [0.0, 0.2, 0.4]", "action = [0.0, 0.2, 0.4]\nstate = [0.0, 0.2]")
    f = _toml(tmp_path, with_state.replace("fps = 5", "fps = 15"))  # 0.2 s is 3 steps at 15 fps: fine
    assert main(["mixture", "check", str(f)]) == 0
    assert "state: steps [0, 3]" in capsys.readouterr().out
    f = _toml(tmp_path, with_state.replace("fps = 5", "fps = 4"))  # 0.2 s at 4 fps: 0.8 steps
    assert main(["mixture", "check", str(f)]) == 2
    assert "source 'c' at 4 fps cannot give the offsets of key 'state'" in capsys.readouterr().err
    f = _toml(tmp_path, MIX_TOML.replace("[keys.action]\nfill = 0", "[keys.action]"))
    assert main(["mixture", "check", str(f)]) == 2
    assert "source 'c' has no key feeding mixture key 'action'" in capsys.readouterr().err
    f = _toml(tmp_path, MIX_TOML + "\nbogus = 1\n")
    assert main(["mixture", "check", str(f)]) == 2
    assert "unknown settings ['bogus']" in capsys.readouterr().err


def test_index_and_sampler_state_stay_under_100_bytes_an_episode(tmp_path):
    """Measured in a fresh process: tracemalloc counts every thread's allocations, and threads an
    earlier test left in this pytest worker (a cluster client's, a server's) were counted too."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")  # the state measured is the torch dataset's
    from benchmarks.mixture_bench import metadata_only_store

    n = 200_000
    path = metadata_only_store(tmp_path / "big.zarr", n, 100 * n)  # bookkeeping only: no chunk written
    code = ("import json, sys; from benchmarks.mixture_bench import state_bytes\n"
            "print(json.dumps(state_bytes(sys.argv[1], int(sys.argv[2]))))")
    run = subprocess.run([sys.executable, "-c", code, str(path), str(n)], capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert run.returncode == 0, run.stderr
    retained, pickled = json.loads(run.stdout.splitlines()[-1])  # tracemalloc: what a rank keeps after a batch
    assert retained / n <= 100
    assert pickled / n <= 40  # what each DataLoader worker is sent: the window index, not a table of windows


def test_prefetch_and_read_ahead_change_nothing_in_the_stream(stores):
    pytest.importorskip("torch")
    from replaybuf_core.torch import MixtureDataset

    mix = _mix(stores, block=4, span=2)
    streams = []
    for kw in ({"prefetch": 0, "read_ahead": False}, {"prefetch": 1}, {"prefetch": 3, "read_ahead": True}):
        ds = MixtureDataset(mix, 5, rank=1, world_size=2, **kw)
        streams.append([(b["mixture_position"].tolist(), b["state"].numpy().tolist()) for b in ds])
    assert streams[0] == streams[1] == streams[2]
    assert [p for ps, _ in streams[0] for p in ps] == [p for j in range(0, len(mix), 10)
                                                      for p in range(j + 5, min(j + 10, len(mix)))]


@pytest.mark.parametrize("n_stores", [2, 3])
def test_stores_sharing_a_camera_sized_key_reuse_the_arenas_arrays_batch_after_batch(n_stores):
    """Each store's share of a batch is read into an arena array of the batch's size while the others'
    reads run (all are started before any is finished): with the batch being built and the one the
    caller holds, that is more arrays of one shape and dtype at once than the arena kept (3), so one
    or more were fresh every batch (fresh pages faulted in: ~13 us a 4 KiB page, a camera batch's
    worth each time).  Counted through the arena itself: what it hands out must be an array it keeps."""
    def store(s):
        rb = ReplayBuffer.create_empty_numpy()
        rb.add_episode({"img": np.full((40, 32, 32, 3), s, np.float32), "state": np.full((40, 2), s, np.float32)})
        return rb

    bufs = [store(s) for s in range(n_stores)]
    mix = Mixture([MixtureSource((lambda b=b: b), name=f"s{i}") for i, b in enumerate(bufs)], {"img": {}, "state": {}})
    arena, handed = mix._arena, []
    empty = arena.empty

    def counted(shape, dtype):
        got = empty(shape, dtype)
        if got.nbytes >= arena.min_bytes:
            handed.append(any(got is a for a in arena._kept[(tuple(shape), np.dtype(dtype).str)]))
        return got

    arena.empty = counted
    batch = None
    for i in range(8):  # the caller holds the last batch while the next is made, as a training loop does
        batch = mix.sample_batch((np.arange(96) + i) % len(mix))
        assert batch["img"].nbytes >= arena.min_bytes and len(set(batch["source_index"].tolist())) == n_stores
        np.testing.assert_array_equal(batch["img"][:, 0, 0, 0], batch["source_index"].astype(np.float32))
        if i == 2:
            handed.clear()  # the arena has made what it keeps
    assert handed and all(handed), f"{handed.count(False)} of {len(handed)} arrays were new"
