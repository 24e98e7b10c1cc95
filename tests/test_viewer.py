"""``replaybuf serve`` without a browser: the episode list against a simple model (hypothesis), the
JSON API and the frames it serves against the source read another way, the errors (404 / 409 / 403
with a message, nothing written), and the command itself (a port in use, not a store, a real run).
The browser tests are in test_viewer_browser.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from replaybuf_core.viewer.catalog import EpisodeCatalog
from shared_data import PUSHT, requires_pusht

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from replaybuf_core.viewer.app import create_app  # noqa: E402
from replaybuf_core.viewer.server import ServerThread  # noqa: E402


def _get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def _post(url: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _state(url: str) -> str:
    """The store state the page is given (and sends back with a save)."""
    return json.loads(_get(url + "api/summary")[1])["state"]


def _store(path, lengths, tasks=None, good=None):
    rb = ReplayBuffer.create_empty("zarr", str(path))
    rng = np.random.default_rng(0)
    for i, n in enumerate(lengths):
        rb.add_episode({"obs": rng.normal(size=(n, 3)).astype(np.float32),
                        "img": rng.integers(0, 256, size=(n, 16, 16, 3), dtype=np.uint8),
                        "action_is_pad": np.arange(n) >= n - 2})
    meta = {}
    if tasks is not None:
        meta["episode_attrs"] = np.array([json.dumps({"tasks": [t]}) for t in tasks], dtype=object)
    if good is not None:
        meta["mask.good"] = np.asarray(good, dtype=bool)
    if meta:
        rb.update_meta({k: v for k, v in meta.items() if k != "episode_attrs"})
        if "episode_attrs" in meta:  # a string per episode, as an import writes it
            rb.store.create_array("meta", "episode_attrs", shape=(len(lengths),), dtype=np.dtype(object), chunks=None, codec=None)
            rb.store.write("meta", "episode_attrs", 0, meta["episode_attrs"])
    rb.close()
    return path


# ------------------------------------------------------------------ the list against a model
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=40), data=st.data())
def test_the_episode_list_filters_and_pages_like_a_simple_model(lengths, data):
    n = len(lengths)
    words = ["pick red", "push blue", "stack"]
    tasks = [data.draw(st.sampled_from(words)) for _ in range(n)]
    good = [data.draw(st.booleans()) for _ in range(n)]
    rb = ReplayBuffer.create_empty_numpy()
    for length in lengths:
        rb.add_episode({"x": np.zeros((length, 2), np.float32)})
    rb.update_meta({"mask.good": np.array(good), "task": np.array(tasks)})
    cat = EpisodeCatalog(rb)
    lo = data.draw(st.none() | st.integers(0, 30))
    hi = data.draw(st.none() | st.integers(0, 30))
    text = data.draw(st.none() | st.sampled_from(["RED", "blue", "st", "zzz", "3"]))
    marked = data.draw(st.none() | st.booleans())
    use_mask = data.draw(st.booleans())
    offset, limit = data.draw(st.integers(0, 45)), data.draw(st.integers(1, 20))

    expect = [i for i in range(n)
              if (lo is None or lengths[i] >= lo) and (hi is None or lengths[i] <= hi)
              and (not use_mask or good[i] == (True if marked is None else marked))
              and (text is None or text.lower() in tasks[i].lower() or (text.isdigit() and int(text) == i))]
    page = cat.page(offset, limit, min_length=lo, max_length=hi, text=text,
                    mask="good" if use_mask else None, marked=marked)
    assert page["total"] == n and page["matched"] == len(expect)
    rows = page["episodes"]
    assert [r["index"] for r in rows] == expect[offset:offset + limit]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    for r in rows:
        i = r["index"]
        assert (r["length"], r["start"], r["task"]) == (lengths[i], starts[i], tasks[i])
        assert r["meta"]["mask.good"] == good[i]


def test_page_arguments_and_unknown_masks_are_refused_by_name():
    rb = ReplayBuffer.create_empty_numpy()
    rb.add_episode({"x": np.zeros((3, 1))})
    cat = EpisodeCatalog(rb)
    with pytest.raises(ValueError, match="offset"):
        cat.page(-1, 10)
    with pytest.raises(ValueError, match="limit"):
        cat.page(0, 0)
    with pytest.raises(KeyError, match="no mask 'bad'"):
        cat.page(0, 10, mask="bad")


# ------------------------------------------------------------------ the API on a real store
@pytest.fixture
def small_store(tmp_path):
    return _store(tmp_path / "s.zarr", [5, 7, 4], tasks=["pick the cube", "push", "pick the ball"],
                  good=[True, False, True])


def test_api_answers_on_a_small_store(small_store):
    app = create_app(str(small_store))
    with ServerThread(app) as url:
        st_, body, ctype = _get(url + "api/summary")
        s = json.loads(body)
        assert st_ == 200 and s["n_episodes"] == 3 and s["n_steps"] == 16 and s["cameras"] == ["img"]
        assert s["masks"] == ["good"] and s["writable"] is False
        page = json.loads(_get(url + "api/episodes?q=pick")[1])
        assert [e["index"] for e in page["episodes"]] == [0, 2]
        assert [e["task"] for e in page["episodes"]] == ["pick the cube", "pick the ball"]
        page = json.loads(_get(url + "api/episodes?mask=good&marked=0")[1])
        assert [e["index"] for e in page["episodes"]] == [1]
        series = json.loads(_get(url + "api/episodes/1/series")[1])
        by_key = {s["key"]: s for s in series["series"]}
        assert set(by_key) == {"obs", "action_is_pad"} and by_key["action_is_pad"]["pad"] is True
        obs = np.asarray(ReplayBuffer.create_from_path(str(small_store)).store.read("data", "obs", 5, 12))
        np.testing.assert_allclose(np.array(by_key["obs"]["values"]).T, obs, rtol=1e-6)
        assert by_key["action_is_pad"]["values"][0] == [0, 0, 0, 0, 0, 1, 1]
        detail = json.loads(_get(url + "api/episodes/2")[1])
        assert detail["meta_full"]["episode_attrs"] == {"tasks": ["pick the ball"]}
        assert json.loads(_get(url + "api/masks/good")[1])["episodes"] == [0, 2]
        cmds = json.loads(_get(url + "api/commands?name=bad&episodes=2,0")[1])
        assert cmds["delete"] == f"replaybuf edit delete {small_store} 0 2"
        assert cmds["keep"] == f"replaybuf edit keep {small_store} --mask mask.bad"
        st_, body, ctype = _get(url)
        assert st_ == 200 and b"replaybuf viewer" in body and ctype.startswith("text/html")
        assert _get(url + "static/viewer.js")[0] == 200


@requires_pusht
def test_a_served_frame_is_the_source_frame_pixel_for_pixel(tmp_path):
    import imagecodecs
    import zarr

    dst = tmp_path / "pusht.zarr"
    assert main(["import", str(PUSHT), str(dst), "--episodes", "0:4", "--no-progress"]) == 0
    src = zarr.open_group(str(PUSHT), mode="r")  # the diffusion_policy source, read with zarr-python
    ends = np.asarray(src["meta/episode_ends"][:4])
    with ServerThread(create_app(str(dst))) as url:
        for ep, step in [(0, 0), (2, 17), (3, int(ends[3] - ends[2]) - 1)]:
            row = (0 if ep == 0 else int(ends[ep - 1])) + step
            expect = np.asarray(src["data/img"][row]).astype(np.uint8)
            st_, png, ctype = _get(url + f"api/episodes/{ep}/frames/img/{step}")
            assert st_ == 200 and ctype == "image/png"
            np.testing.assert_array_equal(imagecodecs.png_decode(png), expect)
            st_, jpg, ctype = _get(url + f"api/episodes/{ep}/frames/img/{step}?format=jpeg")
            assert st_ == 200 and ctype == "image/jpeg"
            assert np.abs(imagecodecs.jpeg8_decode(jpg).astype(int) - expect).mean() < 8
        page = json.loads(_get(url + "api/episodes")[1])
        assert [e["length"] for e in page["episodes"]] == np.diff(ends, prepend=0).tolist()


def test_bad_urls_are_404_or_400_with_a_message(small_store):
    with ServerThread(create_app(str(small_store))) as url:
        cases = {
            "api/episodes/3": (404, "episode 3 is out of range: the store has 3 episodes"),
            "api/episodes/-1/series": (404, "episode -1 is out of range"),
            "api/episodes/x": (404, "episode 'x' is not an index"),
            "api/episodes/1_0": (404, "episode '1_0' is not an index"),
            "api/episodes/0/frames/img/%201": (404, "step ' 1' is not an index"),
            "api/commands?episodes=99999999999999999999999": (400, "is not an index"),
            "api/commands?episodes=2,9": (400, "episode 9 is out of range"),
            "api/episodes?q=%C2%B2": (200, None),
            "api/episodes/0/frames/img/5": (404, "step 5 is out of range: episode 0 has 5 steps"),
            "api/episodes/0/frames/obs/0": (404, "'obs' is not a camera"),
            "api/episodes/0/frames/img/0?format=gif": (400, "format 'gif' is unknown"),
            "api/episodes?offset=x": (400, "offset='x' is not an integer"),
            "api/episodes?mask=nope": (404, "no mask 'nope'"),
            "api/masks/nope": (404, "no mask 'nope'"),
            "api/nothing": (404, "Not Found"),
        }
        for path, (status, message) in cases.items():
            st_, body, ctype = _get(url + path)
            assert st_ == status, path
            assert "application/json" in ctype and (message is None or message in json.loads(body)["error"]), path
            assert b"Traceback" not in body
        st_, body, _ = _get(url + "episodes/7")
        assert st_ == 404 and b"episode 7 is out of range" in body


def _meta_listing(path):
    rb = ReplayBuffer.create_from_path(str(path))
    out = {k: np.asarray(rb.store.read("meta", k, 0, rb.store.shape("meta", k)[0])).tolist()
           for k in rb.store.list_arrays("meta") if not k.startswith("_")}
    rb.close()
    return out


def test_saving_marks_needs_writable_and_writes_a_bool_mask(small_store):
    before = _meta_listing(small_store)
    with ServerThread(create_app(str(small_store))) as url:
        st_, body = _post(url + "api/masks/bad", {"episodes": [1], "state": _state(url)})
        assert st_ == 403 and "--writable" in body["error"]
    assert _meta_listing(small_store) == before
    with ServerThread(create_app(str(small_store), writable=True)) as url:
        state = _state(url)
        for bad, status, message in [
            ({"episodes": [3], "state": state}, 400, "episode 3 is out of range"),
            ({"episodes": ["1"], "state": state}, 400, "list of integers"),
            ({"episodes": [1]}, 400, "the body must be JSON"),
            ({"episodes": [1], "n_episodes": 3, "generation": 0}, 400, "the body must be JSON"),
            ({"episodes": [1], "state": 3}, 400, "state must be the string"),
            (b"not json", 400, "not JSON"),
            ({"episodes": [1], "state": "g0-e4-0123456789abcdef"}, 409, "reload the page"),
        ]:
            st_, body = _post(url + "api/masks/bad", bad)
            assert st_ == status and message in body["error"], bad
        st_, body = _post(url + "api/masks/a%2Fb", {"episodes": [1], "state": state})
        assert st_ in (400, 404)
        assert _meta_listing(small_store) == before
        st_, body = _post(url + "api/masks/bad", {"episodes": [2, 0], "state": state})
        assert st_ == 200 and body["saved"] == "meta/mask.bad" and body["marked"] == 2
        assert json.loads(_get(url + "api/masks/bad")[1])["episodes"] == [0, 2]
    import zarr  # read back another way: zarr-python on the store directory

    mask = zarr.open_array(str(small_store / "meta" / "mask.bad"), mode="r")[:]
    assert mask.dtype == np.bool_ and mask.tolist() == [True, False, True]
    after = _meta_listing(small_store)
    assert {k: v for k, v in after.items() if k != "mask.bad"} == before


_HOLD_WRITER = """
import sys, time
from replaybuf_core import ReplayBuffer
rb = ReplayBuffer(sys.argv[1])
print("holding", flush=True)
time.sleep(120)
"""


def test_a_concurrent_writer_is_409_and_nothing_is_written(small_store):
    before = _meta_listing(small_store)
    with ServerThread(create_app(str(small_store), writable=True)) as url:
        holder = subprocess.Popen([sys.executable, "-c", _HOLD_WRITER, str(small_store)], stdout=subprocess.PIPE,
                                  text=True)
        state = _state(url)
        try:
            assert holder.stdout.readline().strip() == "holding"
            st_, body = _post(url + "api/masks/bad", {"episodes": [1], "state": state})
            assert st_ == 409 and "nothing was written" in body["error"] and str(holder.pid) in body["error"]
        finally:
            holder.kill()
            holder.wait()
        # another writer appended an episode since the page was loaded: the marks would be off by it
        rb = ReplayBuffer(str(small_store))
        rb.add_episode({"obs": np.zeros((2, 3), np.float32), "img": np.zeros((2, 16, 16, 3), np.uint8),
                        "action_is_pad": np.zeros(2, bool)})
        rb.close()
        st_, body = _post(url + "api/masks/bad", {"episodes": [1], "state": state})
        assert st_ == 409 and "the store now has 4 episodes at edit generation 0" in body["error"]
    after = _meta_listing(small_store)
    assert "mask.bad" not in after and after["mask.good"][:3] == before["mask.good"]


def test_serve_on_an_s3_store(s3_server):
    url_store = s3_server.new_url()
    rb = ReplayBuffer.create_empty("zarr", url_store)
    rb.add_episode({"img": np.full((3, 8, 8, 3), 7, np.uint8), "x": np.arange(3.0)})
    rb.close()
    import imagecodecs

    with ServerThread(create_app(url_store)) as url:
        assert json.loads(_get(url + "api/summary")[1])["n_episodes"] == 1
        png = _get(url + "api/episodes/0/frames/img/2")[1]
        assert (imagecodecs.png_decode(png) == 7).all()


# ------------------------------------------------------------------ the command
def test_serve_refuses_a_port_in_use_and_a_non_store_by_name(small_store, tmp_path, capsys):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        assert main(["serve", str(small_store), "--port", str(port)]) == 2
        assert f"port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
    finally:
        taken.close()
    (tmp_path / "plain").mkdir()
    assert main(["serve", str(tmp_path / "plain"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "replaybuf serve: error:" in err and "plain" in err
    assert main(["serve", str(tmp_path / "missing"), "--port", "0"]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["serve", str(small_store), "--port", "70000"]) == 2
    assert "not a TCP port" in capsys.readouterr().err


def test_the_serve_command_serves_until_interrupted(small_store):
    proc = subprocess.Popen([sys.executable, "-m", "replaybuf_core.cli", "serve", str(small_store), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline()
        assert "3 episodes, read-only" in line and "http://127.0.0.1:" in line, line + proc.stderr.read()
        url = line.split(" at ")[1].split()[0]
        assert json.loads(_get(url + "api/summary")[1])["n_episodes"] == 3
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode in (0, 130), proc.stderr.read()


def test_the_viewer_follows_another_writers_commits(small_store, monkeypatch):
    import replaybuf_core.viewer.state as app_module

    monkeypatch.setattr(app_module, "REFRESH_SECONDS", 0.0)
    with ServerThread(create_app(str(small_store), writable=True)) as url:
        first = json.loads(_get(url + "api/summary")[1])
        assert first["n_episodes"] == 3
        with ReplayBuffer(str(small_store)) as rb:
            rb.add_episode({"obs": np.ones((6, 3), np.float32), "img": np.full((6, 16, 16, 3), 9, np.uint8),
                            "action_is_pad": np.zeros(6, bool)})
        page = json.loads(_get(url + "api/episodes")[1])
        assert page["total"] == 4 and page["episodes"][3]["length"] == 6
        import imagecodecs

        assert (imagecodecs.png_decode(_get(url + "api/episodes/3/frames/img/5")[1]) == 9).all()
        with ReplayBuffer(str(small_store)) as rb:
            rb.delete_episodes([0])  # an edit: the generation moves on, the count goes back to 3
        summary = json.loads(_get(url + "api/summary")[1])
        assert summary["n_episodes"] == 3 and summary["generation"] == 1
        st_, body = _post(url + "api/masks/bad", {"episodes": [0], "state": first["state"]})
        assert st_ == 409 and "reload the page" in body["error"]
        assert json.loads(_get(url + "api/episodes/0")[1])["length"] == 7  # old episode 1
    assert "mask.bad" not in _meta_listing(small_store)


def test_nan_meta_depth_and_float_cameras_are_shown_not_500(tmp_path):
    import imagecodecs

    path = tmp_path / "odd.zarr"
    rb = ReplayBuffer.create_empty("zarr", str(path))
    depth = np.full((4, 8, 8), 3000, np.uint16)
    depth[:, 0, 0], depth[:, 0, 1] = 1000, 51400  # every frame spans 1000..51400 (the sampled range)
    depth[2, 4, 4] = 26200
    dark = np.full((4, 8, 8, 3), 1.0, np.float32)  # a 0..255 float camera with a near-black frame
    dark[0, 0, 0] = 200.0
    dark[3] = 250.0
    rb.add_episode({"depth": depth, "rgbf": dark, "x": np.arange(4.0)})
    rb.add_episode({"depth": depth, "rgbf": dark, "x": np.arange(4.0)})
    rb.update_meta({"score": np.array([0.5, np.nan])})
    rb.close()
    with ServerThread(create_app(str(path))) as url:
        page = json.loads(_get(url + "api/episodes")[1])
        assert [e["meta"]["score"] for e in page["episodes"]] == [0.5, None]
        detail = json.loads(_get(url + "api/episodes/1")[1])
        ranges = {c["key"]: c["display_range"] for c in detail["cameras"]}
        assert ranges == {"depth": [1000.0, 51400.0], "rgbf": [0.0, 255.0]}
        shown = imagecodecs.png_decode(_get(url + "api/episodes/0/frames/depth/2")[1])
        expect = np.clip(np.rint((depth[2].astype(float) - 1000) * 255 / 50400), 0, 255).astype(np.uint8)
        np.testing.assert_array_equal(shown, expect)
        assert shown[4, 4] == 128 and shown[0, 0] == 0 and shown[0, 1] == 255
        shown = imagecodecs.png_decode(_get(url + "api/episodes/1/frames/rgbf/1")[1])
        assert (shown == 1).all()  # 1.0 of 0..255 stays dark: one range per camera, not per frame


def test_saves_from_another_origin_or_without_json_are_refused(small_store):
    before = _meta_listing(small_store)
    with ServerThread(create_app(str(small_store), writable=True)) as url:
        state = _state(url)
        body = json.dumps({"episodes": [1], "state": state}).encode()
        for headers, message in [({"Content-Type": "text/plain"}, "Content-Type: application/json"),
                                 ({"Content-Type": "application/json", "Origin": "http://evil.example"},
                                  "not from http://evil.example")]:
            req = urllib.request.Request(url + "api/masks/csrf", data=body, method="POST", headers=headers)
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=30)
            assert err.value.code == 403 and message in json.loads(err.value.read())["error"]
        same = url.rstrip("/")
        req = urllib.request.Request(url + "api/masks/ok", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Origin": same})
        assert urllib.request.urlopen(req, timeout=30).status == 200
        for name, bad, message in [("a%2Fb", {"episodes": [1], "state": state}, "mask name 'a/b' is invalid"),
                                   ("ok", {"episodes": [1], "state": None}, "state must be the string"),
                                   ("ok", {"episodes": [10 ** 30], "state": state}, "out of range")]:
            st_, answer = _post(url + f"api/masks/{name}", bad)
            assert st_ == 400 and message in answer["error"], (name, bad)
    after = _meta_listing(small_store)
    assert set(after) - set(before) == {"mask.ok"} and after["mask.ok"] == [False, True, False]


def test_statistics_name_components_and_do_not_hold_up_the_list(small_store, monkeypatch):
    import threading
    import time

    import replaybuf_core.store.buffer as buffer_module

    started, release = threading.Event(), threading.Event()
    real = buffer_module.ReplayBuffer.get_stats

    def slow_stats(self, *a, **k):
        started.set()
        release.wait(20)
        return real(self, *a, **k)

    monkeypatch.setattr(buffer_module.ReplayBuffer, "get_stats", slow_stats)
    with ServerThread(create_app(str(small_store))) as url:
        got = {}
        t = threading.Thread(target=lambda: got.update(json.loads(_get(url + "api/stats")[1])))
        t.start()
        assert started.wait(20)
        t0 = time.monotonic()
        assert _get(url + "api/episodes")[0] == 200  # served while the statistics are computed
        assert time.monotonic() - t0 < 10
        release.set()
        t.join(30)
    rb = ReplayBuffer.create_from_path(str(small_store))
    expect = rb.get_stats()
    assert set(got["keys"]) == set(expect) and got["cameras"] == ["img"]
    np.testing.assert_allclose(got["keys"]["obs"]["mean"], expect["obs"]["mean"])
    assert got["shapes"]["obs"] == [3]


def test_a_long_episode_is_decimated_with_its_spikes_kept(tmp_path, monkeypatch):
    import replaybuf_core.viewer.series as series

    monkeypatch.setattr(series, "MAX_POINTS", 10)
    rb = ReplayBuffer.create_empty_numpy()
    x = np.zeros((95, 2), np.float32)
    x[37, 0], x[81, 1] = 9.0, -4.0  # one-step spikes that a stride of 10 steps skips
    rb.add_episode({"x": x})
    got = series.episode_series(rb, 0)
    s = got["series"][0]
    assert got["stride"] == 10 and got["steps"] == list(range(0, 95, 10))
    assert s["values"][0] == x[::10, 0].tolist()  # the samples miss the spikes ...
    assert max(s["high"][0]) == 9.0 and s["high"][0][3] == 9.0  # ... the envelope keeps them
    assert min(s["low"][1]) == -4.0 and s["low"][1][8] == -4.0
    assert s["low"][0][3] == 0.0 and len(s["high"][0]) == 10


def test_component_names_in_each_form_lerobot_writes():
    """Names as LeRobot's info.json has them: a list, ``{"motors": [...]}``, and v2.1's nested
    ``[[...]]`` (the Unitree G1 data's ``observation.state``, shown as indices before)."""
    from replaybuf_core.viewer.series import component_names

    flat = ["kLeftShoulderPitch", "kLeftShoulderRoll"]
    for names in (flat, {"motors": flat}, [flat]):
        assert component_names({"names": names}, 2) == flat
    assert component_names({"names": [flat]}, 3) is None  # not exactly n: no names (indices)
    assert component_names({"names": [flat, flat]}, 2) is None
    assert component_names(None, 2) is None
