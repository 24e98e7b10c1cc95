"""The viewer's HTTP routes (Starlette, the optional extra ``replaybuf[viewer]``): one HTML page
(``static/``) and a JSON API it calls, answered by :class:`.state.Viewer`.  Every read goes through
one read-only :class:`~replaybuf_core.store.buffer.ReplayBuffer` (any backend, ``s3://`` included)
and its chunk reader; nothing loads a whole array.  Errors are JSON ``{"error": message}`` with a 4xx
status (the page shows the message), never a traceback; a store deleted or moved while shown answers
410 naming the reason (never values the reads invent).  Every request must name this viewer in its
``Host`` header (:mod:`.hosts`: a guard against DNS rebinding), else 403.

Routes (all GET unless said):
    ``/``                                   the page (``#/`` list, ``#/episode/I``, ``#/stats``, ``#/info``)
    ``/episodes/I``                         a link to an episode: redirects to ``/#/episode/I`` (404 page if none)
    ``/api/summary``                        store, keys, cameras, masks, edit generation, state, whether marking is on
    ``/api/episodes?offset&limit&min_length&max_length&q&mask&marked``   one page of the list (and the state)
    ``/api/episodes/I``                     one episode: its list row, full per-episode meta, cameras
    ``/api/episodes/I/series``              its numeric keys (:func:`.series.episode_series`)
    ``/api/episodes/I/frames/KEY/STEP?format=png|jpeg``   one frame (step of the episode)
    ``/api/stats`` · ``/api/info``          statistics per key · ``replaybuf info``'s summary
    ``/api/masks/NAME``                     the marked episodes of ``meta/mask.NAME``
    POST ``/api/masks/NAME``                save marks (``--writable`` only; ``Content-Type:
                                            application/json`` from this page's origin only): body
                                            ``{"episodes": [...], "state": S}``, S the summary's
                                            ``state`` when the page loaded (409 when the store's
                                            episodes changed since: :func:`.marking.store_state`)
    ``/api/commands?name&episodes=3,17``    the ``replaybuf edit`` commands for marks
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from replaybuf_core.inspection.summary import buffer_info, jsonable

from .catalog import MASK_PREFIX
from .frames import FORMATS
from .hosts import HostCheck, allowed_names
from .series import episode_series
from .state import HTTPProblem, Viewer

log = logging.getLogger(__name__)


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


def _page(viewer: Viewer, q: Any) -> dict[str, Any]:
    marked, mask = q.get("marked"), q.get("mask") or None
    if mask is not None and mask not in viewer.catalog.masks:  # here: a KeyError below is the store's
        raise HTTPProblem(404, f"no mask {mask!r} (meta/{MASK_PREFIX}{mask}); masks: {viewer.catalog.masks}")
    try:
        return {"state": viewer.state, **viewer.catalog.page(
            offset=_int_arg(q, "offset", 0), limit=_int_arg(q, "limit", 50),
            min_length=_int_arg(q, "min_length"), max_length=_int_arg(q, "max_length"),
            text=q.get("q") or None, mask=mask,
            marked=None if marked in (None, "") else marked not in ("0", "false", "no"))}
    except ValueError as exc:
        raise HTTPProblem(400, str(exc)) from None


def _check_same_origin(request: Any) -> None:
    """Saves come from this viewer's own page: a JSON body (a cross-site form or ``text/plain`` POST
    cannot send one without a CORS preflight, which this server never answers) and, when the browser
    names an Origin, this server's own.  HTTPProblem 403 otherwise."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise HTTPProblem(403, f"saving marks needs Content-Type: application/json (got {ctype or 'none'!r})")
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise HTTPProblem(403, f"saving marks is allowed from this viewer's page only, not from {origin}")


def _reading(viewer: Viewer, fn: Callable[[], Any]) -> Any:
    """``fn()``; when it fails, HTTPProblem 410 if the store is gone or 409 if it changed meanwhile
    (:meth:`Viewer.explain_failure`), else its own error (a 500)."""
    try:
        return fn()
    except HTTPProblem:
        raise
    except Exception:
        viewer.explain_failure()
        raise


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def create_app(path: Any, writable: bool = False, storage_options: dict | None = None,
               hosts: frozenset[str] | None = None) -> Any:
    """The Starlette application serving the store at ``path`` (opened read-only now: raises what
    :meth:`ReplayBuffer.create_from_path` raises — FileNotFoundError, CorruptStoreError).
    ``writable`` enables saving marks (each save takes the writer lock for its write only).
    ``hosts``: the host names requests may carry besides IP addresses (:func:`.hosts.allowed_names`;
    None: ``localhost`` only); any other ``Host`` header is refused with 403.

    Raises ImportError naming the ``viewer`` extra when Starlette is missing."""
    _import_starlette()
    import anyio
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    viewer = Viewer(path, writable=writable, storage_options=storage_options)
    static = resources.files("replaybuf_core.viewer") / "static"

    def answer(fn, refresh=False, plain=False):
        """A route whose body is ``fn(request)`` as JSON, under the read lock (``refresh``: first
        follow other processes' commits, :meth:`Viewer.refresh`; ``plain``: the answer is JSON-safe
        already — the series, whose NaNs are None — else NaN/inf become null)."""
        def endpoint(request):
            with viewer.lock:
                if refresh:
                    viewer.refresh()
                body = _reading(viewer, lambda: fn(request))
            return JSONResponse(body if plain else jsonable(body))
        return endpoint

    def page(request):
        return HTMLResponse((static / "index.html").read_text(encoding="utf-8"))

    def episode_page(request):  # /episodes/I: the page at #/episode/I, or a 404 page naming the problem
        try:
            with viewer.lock:
                viewer.refresh()
                ep = viewer.episode(request.path_params["ep"])
        except HTTPProblem as exc:
            return HTMLResponse(f"<!doctype html><title>not found</title><p id=error>{_html(str(exc))}</p>"
                                f'<p><a href="/">the episode list</a></p>', status_code=exc.status)
        return RedirectResponse(f"/#/episode/{ep}")

    def frame(request):
        p = request.path_params
        fmt = request.query_params.get("format", "png")
        with viewer.lock:
            data = _reading(viewer, lambda: viewer.frame(p["ep"], p["key"], p["step"], fmt))
        return Response(data, media_type=FORMATS[fmt], headers={"Cache-Control": "no-cache"})

    def stats(request):  # outside the read lock: a first computation does not stall the list and player
        return JSONResponse(_reading(viewer, viewer.stats))

    async def save(request):
        _check_same_origin(request)
        try:
            body = await request.json()
        except ValueError:
            raise HTTPProblem(400, "the body is not JSON") from None

        def run():
            with viewer.lock:
                return _reading(viewer, lambda: viewer.save(request.path_params["name"], body))
        return JSONResponse(await anyio.to_thread.run_sync(run))

    def on_problem(request, exc: HTTPProblem):
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    def on_http(request, exc: HTTPException):
        return JSONResponse({"error": f"{request.url.path}: {exc.detail}"}, status_code=exc.status_code)

    def on_error(request, exc: Exception):
        log.error("viewer: %s failed", request.url.path, exc_info=exc)
        return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)

    routes = [
        Route("/", page),
        Route("/favicon.ico", lambda r: Response(status_code=204)),
        Route("/episodes/{ep}", episode_page),
        Route("/api/summary", answer(lambda r: viewer.summary(), refresh=True)),
        Route("/api/episodes", answer(lambda r: _page(viewer, r.query_params), refresh=True)),
        Route("/api/episodes/{ep}", answer(lambda r: viewer.episode_detail(viewer.episode(r.path_params["ep"])),
                                           refresh=True)),
        Route("/api/episodes/{ep}/series",
              answer(lambda r: episode_series(viewer.rb, viewer.episode(r.path_params["ep"])),
                     refresh=True, plain=True)),
        Route("/api/episodes/{ep}/frames/{key}/{step}", frame),
        Route("/api/stats", stats),
        Route("/api/info", answer(lambda r: {**buffer_info(viewer.rb), "path": str(viewer.path)}, refresh=True)),
        Route("/api/masks/{name:path}", answer(lambda r: viewer.mask(r.path_params["name"]), refresh=True),
              methods=["GET"]),
        Route("/api/masks/{name:path}", save, methods=["POST"]),
        Route("/api/commands", answer(lambda r: viewer.commands(r.query_params))),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(HostCheck, names=hosts or allowed_names())],
                    exception_handlers={HTTPProblem: on_problem, HTTPException: on_http, Exception: on_error})
    app.state.viewer = viewer
    return app
