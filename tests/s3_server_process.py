"""moto's S3 server in its own process, for the test session (see ``tests/conftest.py``).

Run as ``python tests/s3_server_process.py``: starts ``moto.server.ThreadedMotoServer`` on 127.0.0.1
at an ephemeral port, prints ``PORT <n>`` on stdout, and serves until its stdin closes (the test
session ending, or dying, closes it).  In its own process the server competes with no test for the
GIL: in the test process itself it once stopped answering midway through the hypothesis state
machine on Python 3.13.
"""

from __future__ import annotations

import logging
import sys


def main() -> None:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log lines
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    print(f"PORT {port}", flush=True)
    try:
        sys.stdin.read()  # until the parent closes the pipe
    finally:
        server.stop()


if __name__ == "__main__":
    main()
