"""Shared pytest fixtures.  Keep additions grouped by owner/topic under a header comment."""

from __future__ import annotations

import itertools
import os

import pytest

# ---------------------------------------------------------------------------------------------
# Backend harnesses for the conformance suite (replaybuf_core.testing); used by
# test_conformance.py and test_roundtrip.py.  `harness` runs one test body on every backend.
# ---------------------------------------------------------------------------------------------
from replaybuf_core import ReplayBuffer
from replaybuf_core.testing import BackendHarness


class NumpyHarness(BackendHarness):
    """In-memory dict root; reopen re-reads the same dict."""

    name = "numpy"

    def make_empty(self) -> ReplayBuffer:
        return ReplayBuffer.create_empty_numpy()

    def new_store(self):
        return {}

    def remove_group(self, buffer, group):
        del buffer.root[group]


class ZarrMemoryHarness(BackendHarness):
    """zarr v3 on a fresh MemoryStore; reopen opens the store again."""

    name = "zarr"

    def make_empty(self) -> ReplayBuffer:
        return ReplayBuffer.create_empty_zarr()

    def reopen(self, buffer):
        import zarr

        return ReplayBuffer(zarr.open_group(buffer.root.store, mode="r+"))

    def reopen_read_only(self, buffer):
        import zarr

        return ReplayBuffer(zarr.open_group(buffer.root.store, mode="r+"), read_only=True)

    def new_store(self):
        from zarr.storage import MemoryStore

        return MemoryStore()

    def remove_group(self, buffer, group):
        del buffer.root[group]


class ZarrLocalHarness(ZarrMemoryHarness):
    """zarr v3 on a LocalStore directory under ``base``; reopen opens the path again."""

    def __init__(self, base):
        self.base = base
        self._n = itertools.count()

    def make_empty(self) -> ReplayBuffer:
        from zarr.storage import LocalStore

        return ReplayBuffer.create_empty_zarr(LocalStore(self.base / f"buf{next(self._n)}.zarr"))

    def new_store(self):
        from zarr.storage import LocalStore

        return LocalStore(self.base / f"store{next(self._n)}.zarr")

    def _path(self, buffer):
        return str(buffer.root.store.root)

    def crash_path(self):
        return str(self.base / f"crash{next(self._n)}.zarr")

    def reopen(self, buffer):
        return ReplayBuffer(self._path(buffer))

    def reopen_read_only(self, buffer):
        return ReplayBuffer.create_from_path(self._path(buffer))


class ZarrS3Harness(ZarrMemoryHarness):
    """zarr v3 on object storage: ``s3://`` URLs on the session's local S3 server (moto).  Every call
    is a few HTTP requests, so its kill trials and state machine run fewer rounds (CI's time)."""

    crash_trials = 1
    state_machine_examples = 10

    def __init__(self, server):
        self.server = server

    def make_empty(self) -> ReplayBuffer:
        return ReplayBuffer.create_empty("zarr", self.server.new_url())

    def new_store(self):
        return self.server.new_url()

    def _path(self, buffer):
        return buffer.root.store.replaybuf_url

    def crash_path(self):
        return self.server.new_url()

    def reopen(self, buffer):
        return ReplayBuffer(self._path(buffer))  # (this process's writable opens share the lease)

    def reopen_read_only(self, buffer):
        return ReplayBuffer.create_from_path(self._path(buffer))


from s3_helpers import start_s3_server_process, stop_s3_server_process  # noqa: E402

HARNESSES = {
    "numpy": lambda request: NumpyHarness(),
    "zarr-memory": lambda request: ZarrMemoryHarness(),
    "zarr-local": lambda request: ZarrLocalHarness(request.getfixturevalue("tmp_path")),
}
HARNESSES["zarr-s3"] = lambda request: ZarrS3Harness(request.getfixturevalue("s3_server"))


@pytest.fixture(params=list(HARNESSES))
def harness(request) -> BackendHarness:
    """A BackendHarness for each built-in backend/store: numpy, zarr MemoryStore, zarr LocalStore,
    zarr on a local S3 server."""
    return HARNESSES[request.param](request)


# ---------------------------------------------------------------------------------------------
# Object storage: one moto S3 server per test session (a real HTTP endpoint on 127.0.0.1, an
# ephemeral port), configured through the usual AWS_* variables so that subprocesses reach it too.
# ---------------------------------------------------------------------------------------------
class S3Server:
    """The session's S3 endpoint: ``new_url()`` is a fresh prefix in its bucket."""

    bucket = "replaybuf-test"

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self._n = itertools.count()

    def new_url(self) -> str:
        return f"s3://{self.bucket}/store{next(self._n)}.zarr"

    def create_bucket(self, name: str) -> None:
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")).read()


@pytest.fixture(scope="session")
def s3_server():
    pytest.importorskip("moto.server")
    pytest.importorskip("obstore")
    proc, endpoint = start_s3_server_process()
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s3 = S3Server(env["AWS_ENDPOINT_URL"])
    s3.create_bucket(S3Server.bucket)
    try:
        yield s3
    finally:
        import gc

        from replaybuf_zarr.lease import release_all_leases

        gc.collect()  # buffers the tests left open release their leases while the server is up
        release_all_leases()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        stop_s3_server_process(proc)



# ---------------------------------------------------------------------------------------------
# Dask: one local cluster of two worker processes per test session (imports, copies, rechunks and
# statistics on a cluster; test_import_distributed.py, test_cluster_copy.py).
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def client():
    pytest.importorskip("distributed")
    from replaybuf_core.cluster.clients import cluster_client

    with cluster_client(workers=2) as c:
        yield c
