"""``replaybuf serve`` refusing what it must (issue 47): a save of marks made on episodes the store no
longer has (another process deleted and appended: the count is the same), a request addressed to a
foreign ``Host`` (DNS rebinding), and a store deleted or shrunk under a running viewer (410 / 404
with the reason, never invented pixels).  Over HTTP against a real server thread; the other
process is a real one."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replaybuf_core import ReplayBuffer

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from replaybuf_core.cli import main  # noqa: E402
from replaybuf_core.viewer.app import create_app  # noqa: E402
from replaybuf_core.viewer.hosts import allowed_names, host_allowed  # noqa: E402
from replaybuf_core.viewer.server import ServerThread  # noqa: E402
from replaybuf_core.viewer.state import HTTPProblem, Viewer  # noqa: E402


def _request(url: str, body=None, headers=None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    req = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET",
                                 headers={**hdrs, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _json(url: str, body=None, headers=None) -> tuple[int, dict]:
    status, raw = _request(url, body, headers)
    return status, json.loads(raw)


def _episode(ident: int, n: int, seed: int = 0) -> dict:
    """An episode that says who it is: ``ident`` in every row of ``who``; frames random (never one value)."""
    rng = np.random.default_rng(1000 * seed + ident)
    return {"who": np.full((n,), ident, np.int64), "obs": rng.normal(size=(n, 2)).astype(np.float32),
            "img": rng.integers(1, 255, size=(n, 8, 8, 3), dtype=np.uint8)}


def _ids_store(path, idents, lengths=None):
    rb = ReplayBuffer.create_empty("zarr", str(path))
    for i, ident in enumerate(idents):
        rb.add_episode(_episode(ident, 3 if lengths is None else lengths[i]))
    rb.close()
    return path


def _save_body(page: dict, episodes: list) -> dict:
    """What the page sends with a save: the marks and the state it showed (``state``; the page before
    issue 47 sent ``n_episodes`` and ``generation``, sent too so the old code is tried on its terms)."""
    return {"episodes": episodes, "state": page.get("state"), "n_episodes": page["n_episodes"],
            "generation": page["generation"]}


def _zarr_marked_idents(path, name):
    """The ``who`` of each episode ``meta/mask.<name>`` marks, read with zarr-python (not replaybuf)."""
    import zarr

    g = zarr.open_group(str(path), mode="r")
    ends = np.asarray(g["meta/episode_ends"][:])
    who = np.asarray(g["data/who"][:])
    mask = np.asarray(g[f"meta/mask.{name}"][:])
    assert mask.dtype == np.bool_ and mask.size == ends.size
    starts = np.concatenate([[0], ends[:-1]])
    return [int(who[starts[i]]) for i in np.flatnonzero(mask)]


# ------------------------------------------------------------------ item 3: saves on stale episodes
_DELETE_THEN_APPEND = """
import sys
import numpy as np
from replaybuf_core import ReplayBuffer
with ReplayBuffer(sys.argv[1]) as rb:
    rb.delete_episodes([0])
    rb.add_episode({"who": np.full((3,), 9, np.int64), "obs": np.zeros((3, 2), np.float32),
                    "img": np.full((3, 8, 8, 3), 77, np.uint8)})
    print(rb.n_episodes, flush=True)
"""


def test_a_save_for_episodes_deleted_and_appended_since_the_page_loaded_is_409(tmp_path, monkeypatch):
    path = _ids_store(tmp_path / "s.zarr", [0, 1, 2, 3, 4])
    with ServerThread(create_app(str(path), writable=True)) as url:
        page = json.loads(_request(url + "api/summary")[1])  # the page, loaded at generation 0
        assert page["n_episodes"] == 5 and page["generation"] == 0
        done = subprocess.run([sys.executable, "-c", _DELETE_THEN_APPEND, str(path)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == "5", done.stderr  # the count is unchanged
        # the user marked what the page showed as episodes 1 and 3 (ids 1 and 3): they are now 0 and 2
        status, body = _json(url + "api/masks/m", _save_body(page, [1, 3]))
        assert status == 409, body
        assert "changed since the page was loaded" in body["error"] and "nothing was written" in body["error"]
        assert "5 episodes at edit generation 0" in body["error"] and "edit generation 1" in body["error"]
        # the viewer has caught up (the list refreshed it): the stale page is still refused
        import replaybuf_core.viewer.state as state_module

        monkeypatch.setattr(state_module, "REFRESH_SECONDS", 0.0)
        listed = json.loads(_request(url + "api/episodes")[1])
        assert listed["state"] != page["state"] and listed["total"] == 5
        status, body = _json(url + "api/masks/m", _save_body(page, [1, 3]))
        assert status == 409 and "reload the page" in body["error"]
        import zarr

        assert "mask.m" not in zarr.open_group(str(path / "meta"), mode="r")  # nothing was written
        # reloaded: the page now shows ids 1 2 3 4 9; marking 0 and 2 marks ids 1 and 3
        fresh = json.loads(_request(url + "api/summary")[1])
        status, body = _json(url + "api/masks/m", _save_body(fresh, [0, 2]))
        assert status == 200 and body["marked"] == 2
    assert _zarr_marked_idents(path, "m") == [1, 3]


_OPS = st.lists(st.sampled_from(["append", "delete_first", "delete_last", "drop", "meta", "append_same"]),
                max_size=3)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, marks=st.lists(st.integers(0, 3), max_size=4))
@example(ops=["delete_first", "append_same"], marks=[1, 3])  # the issue's: the ends read the same again
@example(ops=["drop", "append"], marks=[0])
def test_a_save_lands_only_on_the_episodes_the_page_showed(tmp_path_factory, ops, marks):
    """Against a simple model: the store is a list of episode ids; the page showed the list at load.
    A save must never succeed once the list differs, and then mark exactly the ids the page showed
    at those indices; it must succeed when no episode was appended or removed (only meta written).
    (Appending then removing the same episode may be refused: the edit generation moved.)"""
    path = _ids_store(tmp_path_factory.mktemp("p") / "s.zarr", [10, 11, 12, 13])
    viewer = Viewer(str(path), writable=True)
    page = viewer.summary()
    shown = [10, 11, 12, 13]
    model = list(shown)
    episodes_touched = any(op != "meta" for op in ops)
    with ReplayBuffer(str(path)) as rb:
        for k, op in enumerate(ops):
            if op == "append":
                rb.add_episode(_episode(20 + k, 2))
                model.append(20 + k)
            elif op == "append_same":  # an episode of the same length as the one deleted before
                rb.add_episode(_episode(30 + k, 3))
                model.append(30 + k)
            elif op == "delete_first" and model:
                rb.delete_episodes([0])
                model.pop(0)
            elif op == "delete_last" and model:
                rb.delete_episodes([len(model) - 1])
                model.pop()
            elif op == "drop" and model:
                rb.drop_episode()
                model.pop()
            elif op == "meta":
                rb.update_meta({"score": np.arange(len(model), dtype=np.float64)})
    try:
        viewer.save("m", _save_body(page, marks))
    except HTTPProblem as exc:
        assert episodes_touched, f"refused although only meta was written: {exc}"
        assert exc.status == 409 and "nothing was written" in str(exc)
        import zarr

        assert "mask.m" not in zarr.open_group(str(path / "meta"), mode="r")
    else:
        assert model == shown, f"saved after {ops}: the marks landed on {model}, not on {shown}"
        assert _zarr_marked_idents(path, "m") == [shown[i] for i in sorted(set(marks))]
    finally:
        viewer.rb.close()


# ------------------------------------------------------------------ item 4: DNS rebinding
def test_a_foreign_host_header_is_refused_before_anything_is_read_or_written(tmp_path):
    path = _ids_store(tmp_path / "s.zarr", [0, 1, 2])
    with ServerThread(create_app(str(path), writable=True)) as url:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        page = json.loads(_request(url + "api/summary")[1])
        evil = {"Host": f"attacker.example:{port}"}
        for route in ["api/info", "api/summary", "", "static/viewer.js", "api/episodes/0/frames/img/0"]:
            status, raw = _request(url + route, headers=evil)
            assert status == 403, route
            error = json.loads(raw)["error"]
            assert "'attacker.example:" in error and "DNS rebinding" in error and "--allow-host" in error
            assert str(tmp_path) not in raw.decode()  # the store's path is not given away
        status, body = _json(url + "api/masks/evil", _save_body(page, [1]),
                             {**evil, "Origin": f"http://attacker.example:{port}"})
        assert status == 403 and "DNS rebinding" in body["error"]
        for bad in ["127.0.0.1.attacker.example", "localhost.", "evil@127.0.0.1", "127.0.0.1/x", ""]:
            assert _request(url + "api/summary", headers={"Host": f"{bad}:{port}" if bad else ""})[0] in (400, 403), bad
        # the names the server was bound as, in any case, any port (an ssh -L tunnel), and IP addresses
        for good in [f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}", "localhost:9000", "localhost",
                     f"[::1]:{port}", "10.1.2.3:8765"]:
            assert _request(url + "api/summary", headers={"Host": good})[0] == 200, good
        status, body = _json(url + "api/masks/ok", _save_body(page, [1]),
                             {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"})
        assert status == 200
    import zarr

    meta = zarr.open_group(str(path / "meta"), mode="r")
    assert "mask.evil" not in meta and "mask.ok" in meta


def test_host_names_a_viewer_answers_to():
    names = allowed_names("gpubox.lan", ["Other-Name"])
    assert names == {"localhost", "gpubox.lan", "other-name"}
    assert allowed_names("0.0.0.0") == allowed_names("::") == allowed_names() == {"localhost"}
    for header, ok in [("gpubox.lan:8765", True), ("GPUBOX.LAN", True), ("other-name:1", True),
                       ("[::1]:80", True), ("[fe80::1]", True), ("192.168.0.7:8765", True),
                       ("gpubox.lan.evil.example:8765", False), ("[::1]x", False), ("[gpubox.lan]:80", False),
                       ("a b", False), (None, False), ("localhost:99999x", False)]:
        assert host_allowed(header, names) is ok, header
    with pytest.raises(ValueError, match="--allow-host 'gpubox:8765' is not a host name"):
        allowed_names(None, ["gpubox:8765"])


def test_the_serve_command_refuses_a_foreign_host_and_a_bad_allow_host(tmp_path, capsys):
    path = _ids_store(tmp_path / "s.zarr", [0])
    assert main(["serve", str(path), "--port", "0", "--allow-host", "http://x"]) == 2
    assert "--allow-host 'http://x' is not a host name" in capsys.readouterr().err
    proc = subprocess.Popen([sys.executable, "-m", "replaybuf_core.cli", "serve", str(path), "--port", "0",
                             "--allow-host", "gpubox.lan"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = line.split(" at ")[1].split()[0]
        assert _request(url + "api/info", headers={"Host": "attacker.example"})[0] == 403
        assert _request(url + "api/info", headers={"Host": "gpubox.lan:8765"})[0] == 200
        assert _request(url + "api/info")[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ------------------------------------------------------------------ the store deleted or shrunk under it
def test_a_store_deleted_under_the_viewer_answers_410_never_zero_pixels(tmp_path):
    import shutil

    import imagecodecs

    path = _ids_store(tmp_path / "s.zarr", [0, 1, 2], lengths=[40, 40, 40])
    with ServerThread(create_app(str(path))) as url:
        assert _request(url + "api/episodes")[0] == 200
        shown = imagecodecs.png_decode(_request(url + "api/episodes/0/frames/img/0")[1])
        assert shown.max() > 0
        shutil.rmtree(path)
        # a frame never read before (its chunk is not in the cache) first: before any refresh
        for route in ["api/episodes/2/frames/img/39", "api/episodes/1/series", "api/stats", "api/info",
                      "api/episodes", "api/summary", "api/episodes/1", "api/masks/x",
                      "api/episodes/2/frames/img/38"]:
            status, raw = _request(url + route)
            assert status == 410, (route, status, raw[:80])
            error = json.loads(raw)["error"]
            assert f"the store {path} is gone" in error and "deleted or moved" in error, route
        status, raw = _request(url + "episodes/1")
        assert status == 410 and b"is gone" in raw


def test_a_frame_of_an_episode_deleted_by_another_process_is_404_not_zero_pixels(tmp_path):
    path = _ids_store(tmp_path / "s.zarr", [0, 1, 2], lengths=[6, 6, 6])
    with ServerThread(create_app(str(path))) as url:
        assert json.loads(_request(url + "api/summary")[1])["n_episodes"] == 3
        with ReplayBuffer(str(path)) as rb:
            rb.delete_episodes([1])
        status, raw = _request(url + "api/episodes/2/frames/img/3")
        assert status == 404, raw[:80]  # not a PNG of fill values
        assert "episode 2 is out of range: the store has 2 episodes" in json.loads(raw)["error"]


def test_a_store_deleted_from_object_storage_answers_410(s3_server):
    import obstore
    from obstore.store import S3Store

    url_store = s3_server.new_url()
    rb = ReplayBuffer.create_empty("zarr", url_store)
    for ident in range(3):
        rb.add_episode(_episode(ident, 40))
    rb.close()
    with ServerThread(create_app(url_store)) as url:
        assert json.loads(_request(url + "api/summary")[1])["n_episodes"] == 3
        bucket, prefix = url_store[len("s3://"):].split("/", 1)
        objects = S3Store(bucket)  # the endpoint and keys from the AWS_* variables the fixture set
        paths = [m["path"] for batch in obstore.list(objects, prefix=prefix) for m in batch]
        assert paths
        obstore.delete(objects, paths)
        for route in ["api/episodes/2/frames/img/39", "api/episodes/1/series", "api/episodes"]:
            status, raw = _request(url + route)
            assert status == 410, (route, status, raw[:80])
            assert "is gone" in json.loads(raw)["error"]
