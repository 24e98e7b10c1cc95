"""Which ``Host`` headers the viewer answers: a guard against DNS rebinding.

A page on ``attacker.example`` can make its own name resolve to 127.0.0.1 and then read (and, with
``--writable``, write) a local viewer as "same origin" — except that the browser still sends
``Host: attacker.example:PORT``.  So every request whose Host is not a name the viewer was started
for is refused with 403 (as Jupyter, webpack-dev-server and Vite do): ``localhost``, any IP
address literal (rebinding needs a DNS name: an address typed in the address bar names itself), the
``--host`` name the server was bound as, and the names given with ``--allow-host``.

The port is not compared: an ``ssh -L 9000:localhost:8765`` tunnel or an editor's port forwarding
reaches the viewer as ``localhost:9000``, and a rebinding attacker controls the name, not the port.

Starlette's ``TrustedHostMiddleware`` is not used: it answers 400 ``Invalid host header`` with no
reason (the page could not say what to do), matches IP addresses only by listing each one (a
``--host 0.0.0.0`` viewer is reached by the machine's addresses), and before Starlette 1.x parsed
``[::1]:PORT`` as ``[``.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable
from typing import Any

#: the names every viewer answers to besides IP addresses
LOCAL_NAMES = ("localhost",)
#: a Host header: ``name[:port]`` or ``[IPv6][:port]`` (RFC 9110 §7.2; no user info, no path)
_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::[0-9]{0,5})?")
#: a host name as ``--host`` / ``--allow-host`` give it
_NAME = re.compile(r"[A-Za-z0-9._-]+")


def host_name(header: str | None) -> str | None:
    """The host of a ``Host`` header, lower-case, without brackets or port: ``"[::1]:8765"`` →
    ``"::1"``, ``"LocalHost:80"`` → ``"localhost"``; None when missing or malformed."""
    if not header:
        return None
    m = _HOST.fullmatch(header.strip())
    if m is None:
        return None
    return (m["v6"] or m["name"]).lower()


def is_ip_address(name: str) -> bool:
    """True when ``name`` is an IPv4 or IPv6 address literal (dotted quad, or IPv6 without brackets)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def allowed_names(bound_host: str | None = None, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a viewer answers to besides IP addresses: :data:`LOCAL_NAMES`, the name the
    server was bound as (``--host``; an address adds nothing: every address is accepted) and
    ``extra`` (``--allow-host``), lower-case.

    Raises ValueError naming an ``extra`` entry that is not a host name (a port, a scheme, a path)."""
    names = set(LOCAL_NAMES)
    if bound_host and not is_ip_address(bound_host) and _NAME.fullmatch(bound_host):
        names.add(bound_host.lower())
    for raw in extra:
        if not _NAME.fullmatch(raw):
            raise ValueError(f"--allow-host {raw!r} is not a host name: give the name alone, as in "
                             "--allow-host gpubox.lan (no scheme, port or path; IP addresses need none)")
        names.add(raw.lower())
    return frozenset(names)


def host_allowed(header: str | None, names: frozenset[str]) -> bool:
    """True when the ``Host`` header ``header`` names one of ``names`` or an IP address (any port)."""
    name = host_name(header)
    return name is not None and (name in names or is_ip_address(name))


class HostCheck:
    """ASGI middleware refusing requests whose ``Host`` header is not allowed (:func:`host_allowed`):
    403 with a JSON ``{"error": message}`` naming the host and ``--allow-host``, before any route
    runs (the page, the API and the static files alike)."""

    def __init__(self, app: Any, names: frozenset[str]):
        self.app = app
        self.names = names

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), None)
        if host_allowed(header, self.names):
            await self.app(scope, receive, send)
            return
        shown = sorted(self.names)
        message = (f"Host {header!r} is not a name this viewer answers to ({', '.join(shown)} or an IP address): "
                   "refused as a guard against DNS rebinding; to open the viewer by that name, start it with "
                   f"`replaybuf serve STORE --allow-host {host_name(header) or 'NAME'}`")
        body = json.dumps({"error": message}).encode()
        if scope["type"] == "websocket":  # no websocket routes: close before accepting
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
