"""The viewer's HTTP routes (Starlette, the optional extra ``replaybuf[viewer]``): one HTML page
(``static/``) and a JSON API it calls.  Every read goes through one read-only
:class:`~replaybuf_core.store.buffer.ReplayBuffer` (any backend, ``s3://`` included) and its chunk
reader; nothing loads a whole array.  Errors are JSON ``{"error": message}`` with a 4xx status (the
page shows the message), never a traceback.

Routes (all GET unless said):
    ``/``                                   the page (``#/`` list, ``#/episode/I``, ``#/stats``)
    ``/api/summary``                        store, keys, cameras, masks, whether marking is on
    ``/api/episodes?offset&limit&min_length&max_length&q&mask&marked``   one page of the list
    ``/api/episodes/I``                     one episode: its list row and full per-episode meta
    ``/api/episodes/I/series``              its numeric keys (:func:`.series.episode_series`)
    ``/api/episodes/I/frames/KEY/STEP?format=png|jpeg``   one frame (step of the episode)
    ``/api/stats`` · ``/api/info``          statistics per key · ``replaybuf info``'s summary
    ``/api/masks/NAME``                     the marked episodes of ``meta/mask.NAME``
    POST ``/api/masks/NAME``                save marks (``--writable`` only): body
                                            ``{"episodes": [...], "n_episodes": N}``
    ``/api/commands?name&episodes=3,17``    the ``replaybuf edit`` commands for marks
"""

from __future__ import annotations

import json
import logging
import threading
import time
from importlib import resources
from typing import Any

import numpy as np

from replaybuf_core.errors import ReadOnlyError, StoreLockedError
from replaybuf_core.inspection.summary import buffer_info, jsonable
from replaybuf_core.inspection.view import image_keys
from replaybuf_core.store.buffer import ReplayBuffer
from replaybuf_core.store.commit import read_generation

from .catalog import MASK_PREFIX, EpisodeCatalog
from .frames import FORMATS, encode_frame
from .marking import StoreChangedError, check_episodes, check_mask_name, edit_commands, save_mask
from .series import episode_series

log = logging.getLogger(__name__)

#: the read-only buffer's chunk cache: scrubbing back and forth decodes each chunk once
CACHE_BYTES = 256 << 20
#: how often (s, at most) the list, summary and episode pages look for commits by other processes
REFRESH_SECONDS = 2.0


class HTTPProblem(Exception):
    """An error the page shows: ``status`` (4xx) and a message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _import_starlette():
    try:
        import starlette  # noqa: F401
    except ImportError:
        raise ImportError("replaybuf serve needs Starlette and uvicorn: pip install 'replaybuf[viewer]'") from None


def _int_arg(params: Any, name: str, default: int | None = None) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise HTTPProblem(400, f"query parameter {name}={raw!r} is not an integer") from None


class Viewer:
    """The state behind the routes: the read-only buffer, its :class:`EpisodeCatalog`, and a lock
    that serialises reads (the page asks for frames, series and pages at once)."""

    def __init__(self, path: Any, writable: bool = False, storage_options: dict | None = None):
        self.path = path
        self.writable = bool(writable)
        self.storage_options = storage_options
        self.lock = threading.RLock()
        self._open(self._read_only())
        self._checked = time.monotonic()

    def _read_only(self) -> ReplayBuffer:
        if self.storage_options:
            return ReplayBuffer(self.path, read_only=True, storage_options=self.storage_options)
        return ReplayBuffer.create_from_path(self.path)

    def _open(self, rb: ReplayBuffer) -> None:
        rb.cache_bytes = CACHE_BYTES
        self.rb = rb
        self.version = (rb.n_episodes, rb.n_steps, read_generation(rb.store))
        self.catalog = EpisodeCatalog(rb)
        self.cameras = image_keys(rb)
        self._stats: dict | None = None

    def refresh(self) -> None:
        """Follow the store when another process committed since (appended, dropped, edited): at
        most every :data:`REFRESH_SECONDS`, reopen it read-only and, when its episodes or edit
        generation differ, serve the new state (the page's saves then refuse stale marks)."""
        if time.monotonic() - self._checked < REFRESH_SECONDS:
            return
        self._checked = time.monotonic()
        rb = self._read_only()
        if (rb.n_episodes, rb.n_steps, read_generation(rb.store)) != self.version:
            old = self.rb
            self._open(rb)
            old.close()
        else:
            rb.close()

    # ------------------------------------------------------------------ checks
    def episode(self, raw: str) -> int:
        """The episode index in a URL, 0-based; HTTPProblem 404 naming it and the count."""
        try:
            ep = int(raw)
        except ValueError:
            raise HTTPProblem(404, f"episode {raw!r} is not an episode index") from None
        n = self.catalog.n_episodes
        if not 0 <= ep < n:
            raise HTTPProblem(404, f"episode {ep} is out of range: the store has {n} episodes (0 to {n - 1})")
        return ep

    # ------------------------------------------------------------------ answers
    def summary(self) -> dict[str, Any]:
        s = self.rb.store
        keys = [{"key": k, "shape": list(s.shape("data", k)[1:]), "dtype": str(np.dtype(s.dtype("data", k))),
                 "camera": k in self.cameras} for k in self.rb.keys()]
        return {"path": str(self.path), "backend": self.rb.backend, "n_episodes": self.catalog.n_episodes,
                "n_steps": self.rb.n_steps, "fps": self.catalog.fps, "keys": keys, "cameras": self.cameras,
                "masks": self.catalog.masks, "episode_meta": list(self.catalog.numeric) + self.catalog.text_names,
                "generation": self.version[2], "writable": self.writable}

    def episode_detail(self, ep: int) -> dict[str, Any]:
        row = self.catalog.rows(np.array([ep]))[0]
        s = self.rb.store
        full = {}
        for name in self.catalog.text_names:
            value = np.asarray(s.read("meta", name, ep, ep + 1), dtype=object)[0]
            value = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            try:
                full[name] = json.loads(value) if name == "episode_attrs" else value
            except ValueError:
                full[name] = value
        row["meta_full"] = jsonable(full)
        row["cameras"] = [{"key": k, "shape": list(s.shape("data", k)[1:])} for k in self.cameras]
        return row

    def frame(self, ep: int, key: str, raw_step: str, fmt: str) -> bytes:
        if key not in self.cameras:
            raise HTTPProblem(404, f"{key!r} is not a camera of this store (cameras: {self.cameras})")
        if fmt not in FORMATS:
            raise HTTPProblem(400, f"format {fmt!r} is unknown; use one of {sorted(FORMATS)}")
        length = int(self.catalog.lengths[ep])
        try:
            step = int(raw_step)
        except ValueError:
            raise HTTPProblem(404, f"step {raw_step!r} is not a step index") from None
        if not 0 <= step < length:
            raise HTTPProblem(404, f"step {step} is out of range: episode {ep} has {length} steps")
        row = int(self.catalog.starts[ep]) + step
        frame = self.rb.read_rows(key, np.array([row]), dtypes="stored")[0]
        return encode_frame(frame, fmt)

    def stats(self) -> dict[str, Any]:
        if self._stats is None:
            self._stats = {k: jsonable(v) for k, v in self.rb.get_stats().items()}
        return self._stats

    def mask(self, name: str) -> dict[str, Any]:
        values = self.catalog.numeric.get(MASK_PREFIX + name)
        if values is None or values.dtype != np.bool_:
            raise HTTPProblem(404, f"no mask {name!r} (meta/{MASK_PREFIX}{name}); masks: {self.catalog.masks}")
        return {"name": name, "episodes": np.flatnonzero(values).tolist(), "n_episodes": int(values.size)}

    def save(self, name: str, body: Any) -> dict[str, Any]:
        if not self.writable:
            raise HTTPProblem(403, "this viewer is read-only: start it with `replaybuf serve STORE --writable` "
                                   "to save marks (or run the edit command shown)")
        if not isinstance(body, dict) or "episodes" not in body or "n_episodes" not in body:
            raise HTTPProblem(400, 'the body must be JSON {"episodes": [...], "n_episodes": N}')
        try:
            check_mask_name(name)
            episodes = check_episodes(body["episodes"], self.catalog.n_episodes).tolist()
            if body["n_episodes"] != self.catalog.n_episodes or body.get("generation", self.version[2]) != self.version[2]:
                raise StoreChangedError(f"the store changed since the page was loaded (it showed {body['n_episodes']} "
                                        f"episodes; the store has {self.catalog.n_episodes}, edit generation "
                                        f"{self.version[2]}): reload the page (nothing was written)")
            mask = save_mask(self.path, name, episodes, self.catalog.n_episodes, self.storage_options)
        except (ValueError, TypeError, IndexError) as exc:
            raise HTTPProblem(400, str(exc)) from None
        except (StoreLockedError, StoreChangedError, ReadOnlyError) as exc:
            raise HTTPProblem(409, f"nothing was written: {exc}") from None
        self.catalog.set_mask(name, mask)
        return {"saved": f"meta/{MASK_PREFIX}{name}", "marked": int(mask.sum()), "n_episodes": int(mask.size),
                "commands": edit_commands(str(self.path), name, episodes)}

    def commands(self, params: Any) -> dict[str, str]:
        name = params.get("name") or "marked"
        raw = params.get("episodes") or ""
        try:
            check_mask_name(name)
            episodes = [int(e) for e in raw.split(",") if e.strip()]
            check_episodes(episodes, self.catalog.n_episodes)
        except (ValueError, TypeError, IndexError) as exc:
            raise HTTPProblem(400, str(exc)) from None
        return edit_commands(str(self.path), name, episodes)


def create_app(path: Any, writable: bool = False, storage_options: dict | None = None) -> Any:
    """The Starlette application serving the store at ``path`` (opened read-only now: raises what
    :meth:`ReplayBuffer.create_from_path` raises — FileNotFoundError, CorruptStoreError).
    ``writable`` enables saving marks (each save takes the writer lock for its write only).

    Raises ImportError naming the ``viewer`` extra when Starlette is missing."""
    _import_starlette()
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    viewer = Viewer(path, writable=writable, storage_options=storage_options)
    static = resources.files("replaybuf_core.viewer") / "static"

    def answer(fn, refresh=False):
        """A route whose body is ``fn(request)`` as JSON, under the read lock (``refresh``: first
        follow commits of other processes, :meth:`Viewer.refresh`)."""
        def endpoint(request):
            with viewer.lock:
                if refresh:
                    viewer.refresh()
                return JSONResponse(fn(request))
        return endpoint

    def page(request):
        return HTMLResponse((static / "index.html").read_text(encoding="utf-8"))

    def episode_page(request):  # /episodes/I: the page at #/episode/I, or a 404 page naming the problem
        try:
            ep = viewer.episode(request.path_params["ep"])
        except HTTPProblem as exc:
            return HTMLResponse(f"<!doctype html><title>not found</title><p id=error>{_html(str(exc))}</p>"
                                f'<p><a href="/">the episode list</a></p>', status_code=exc.status)
        return RedirectResponse(f"/#/episode/{ep}")

    def frame(request):
        p = request.path_params
        with viewer.lock:
            ep = viewer.episode(p["ep"])
            fmt = request.query_params.get("format", "png")
            data = viewer.frame(ep, p["key"], p["step"], fmt)
        return Response(data, media_type=FORMATS[fmt], headers={"Cache-Control": "max-age=3600"})

    async def save(request):
        try:
            body = await request.json()
        except ValueError:
            raise HTTPProblem(400, "the body is not JSON") from None
        import anyio

        def run():
            with viewer.lock:
                return viewer.save(request.path_params["name"], body)
        return JSONResponse(await anyio.to_thread.run_sync(run))

    def on_problem(request, exc: HTTPProblem):
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    def on_http(request, exc: HTTPException):
        return JSONResponse({"error": f"{request.url.path}: {exc.detail}"}, status_code=exc.status_code)

    def on_error(request, exc: Exception):
        log.exception("viewer: %s failed", request.url.path)
        return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)

    routes = [
        Route("/", page),
        Route("/episodes/{ep}", episode_page),
        Route("/api/summary", answer(lambda r: viewer.summary(), refresh=True)),
        Route("/api/episodes", answer(lambda r: _page(viewer, r.query_params), refresh=True)),
        Route("/api/episodes/{ep}", answer(lambda r: viewer.episode_detail(viewer.episode(r.path_params["ep"])),
                                           refresh=True)),
        Route("/api/episodes/{ep}/series",
              answer(lambda r: episode_series(viewer.rb, viewer.episode(r.path_params["ep"])))),
        Route("/api/episodes/{ep}/frames/{key}/{step}", frame),
        Route("/api/stats", answer(lambda r: viewer.stats())),
        Route("/api/info", answer(lambda r: jsonable({**buffer_info(viewer.rb), "path": str(viewer.path)}))),
        Route("/api/masks/{name}", answer(lambda r: viewer.mask(r.path_params["name"])), methods=["GET"]),
        Route("/api/masks/{name}", save, methods=["POST"]),
        Route("/api/commands", answer(lambda r: viewer.commands(r.query_params))),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPProblem: on_problem, HTTPException: on_http,
                                                       Exception: on_error})
    app.state.viewer = viewer
    return app


def _page(viewer: Viewer, q: Any) -> dict[str, Any]:
    marked = q.get("marked")
    try:
        return viewer.catalog.page(
            offset=_int_arg(q, "offset", 0), limit=_int_arg(q, "limit", 50),
            min_length=_int_arg(q, "min_length"), max_length=_int_arg(q, "max_length"),
            text=q.get("q") or None, mask=q.get("mask") or None,
            marked=None if marked in (None, "") else marked not in ("0", "false", "no"))
    except ValueError as exc:
        raise HTTPProblem(400, str(exc)) from None
    except KeyError as exc:
        raise HTTPProblem(404, exc.args[0]) from None


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
