"""A TCP proxy on loopback that adds a fixed delay to every request a client sends: an object
store's round trip (20–50 ms to a bucket in another zone) in front of a local S3 server.

Each client connection gets its own upstream connection; every chunk the client sends waits
``latency`` seconds before it is forwarded (an HTTP GET or HEAD is one chunk, so one delay a
request); responses flow back at once.  ``latency`` may be changed while the proxy runs (0 while
a store is uploaded).
"""

from __future__ import annotations

import socket
import threading
import time

__all__ = ["LatencyProxy"]


class LatencyProxy:
    """``LatencyProxy(upstream_host, upstream_port, latency)``; ``.endpoint`` is its URL; ``close()``."""

    def __init__(self, host: str, port: int, latency: float = 0.03):
        self.upstream = (host, port)
        self.latency = float(latency)
        self.requests = 0
        #: ``(method, path, ranged)`` of every request seen (a chunk that starts with an HTTP method)
        self.log: list[tuple[str, str, bool]] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self._closed = False
        self.endpoint = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=30)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, up, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, delay: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if delay:
                    self.requests += 1
                    head = data[:4096].split(b"\r\n\r\n", 1)[0].decode("latin-1", "replace")
                    method, _, rest = head.partition(" ")
                    if method in ("GET", "HEAD", "PUT", "POST", "DELETE"):
                        ranged = "\r\nrange:" in head.lower()
                        self.log.append((method, rest.split(" ", 1)[0].split("?", 1)[0], ranged))
                    if self.latency:
                        time.sleep(self.latency)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._closed = True
        self._server.close()
