"""Helpers of the object-storage tests: moto's S3 server in a process of its own, and a SIGKILL
timed by what a store has committed.  (A module of its own, not conftest.py: the HDF5 plugin's tests
have a conftest too, and ``from conftest import`` would find either.)"""

from __future__ import annotations

import os

from replaybuf_core import ReplayBuffer


def start_s3_server_process(env: dict | None = None):
    """``(process, endpoint)``: moto's S3 server started in its own process (tests/s3_server_process.py)
    with ``env`` added to its environment; it serves until its stdin is closed."""
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "s3_server_process.py")
    proc = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"moto's S3 server did not start (said {line!r})")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def stop_s3_server_process(proc) -> None:
    import subprocess

    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def kill_when_committed(proc, url: str, n_episodes: int, timeout: float = 180) -> None:
    """SIGKILL the importing process ``proc`` once the store at ``url`` has committed ``n_episodes``
    (polled read-only; AssertionError if the import ends first)."""
    import signal
    import time
    import warnings

    from replaybuf_core.errors import CorruptStoreError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the rows staged past the committed ones
                with ReplayBuffer.create_from_path(url) as ro:
                    if ro.n_episodes >= n_episodes:
                        break
        except (FileNotFoundError, OSError, CorruptStoreError):  # not created yet, or being created
            pass
        time.sleep(0.2)
    assert proc.poll() is None, "the import ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
