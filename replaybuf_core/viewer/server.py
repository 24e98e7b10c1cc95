"""Running the viewer: bind the port (a taken port is a clear error before anything starts), then
serve the app with uvicorn — in the foreground (``replaybuf serve``) or on a background thread
(:class:`ServerThread`: notebooks and the browser tests)."""

from __future__ import annotations

import errno
import socket
import threading
import time
from typing import Any

#: the default port of ``replaybuf serve``
DEFAULT_PORT = 8765


class PortInUseError(OSError):
    """The port asked for is taken (another server, or another ``replaybuf serve``)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``(host, port)`` (port 0: a free one).

    Raises PortInUseError naming the port and the way out, OSError for another failure (a host that
    is not this machine's)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        if getattr(exc, "errno", None) == errno.EADDRINUSE:
            raise PortInUseError(errno.EADDRINUSE, f"port {port} on {host} is in use (another server?): "
                                                   "pick another with --port, or --port 0 for any free one") from None
        reason = getattr(exc, "strerror", None) or str(exc)
        raise OSError(getattr(exc, "errno", None), f"cannot listen on {host} port {port}: {reason} "
                                                   "(--host must be an address of this machine)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port/`` of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def _server(app: Any) -> Any:
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))


def serve_forever(app: Any, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until Ctrl-C / SIGTERM (uvicorn's own handling)."""
    _server(app).run(sockets=[sock])


class ServerThread:
    """The app served on a daemon thread: ``with ServerThread(app) as url: ...`` (port 0 by default).

    Raises PortInUseError as :func:`bind`, RuntimeError when uvicorn did not start in ``timeout``
    seconds."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, timeout: float = 20.0):
        self.sock = bind(host, port)
        self.url = url_of(self.sock)
        self._server = _server(app)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.sock]},
                                        name="replaybuf-viewer", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the viewer did not start at {self.url}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Ask uvicorn to stop and wait for it (up to 10 s)."""
        self._server.should_exit = True
        self._thread.join(10)
        self.sock.close()

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *exc: Any) -> None:
        self.stop()
