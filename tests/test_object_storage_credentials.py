"""Wrong credentials against an S3 server that checks them: moto's server with IAM authentication on
(``INITIAL_NO_AUTH_ACTION_COUNT``: the first requests, which create an IAM user, its access key, its
policy and the bucket, go unchecked; every later one is checked).  Each failure must name the URL
and write nothing, which the bucket's listing (made with the good key) shows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from s3_helpers import start_s3_server_process, stop_s3_server_process
from replaybuf_core import ReplayBuffer
from replaybuf_core.cli import main
from shared_data import PUSHT

obstore = pytest.importorskip("obstore")
pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")

SETUP_ACTIONS = 4  # CreateUser, PutUserPolicy, CreateAccessKey, CreateBucket
BUCKET = "checked"


@pytest.fixture(scope="module")
def checked_server():
    proc, endpoint = start_s3_server_process({"INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_ACTIONS)})
    try:
        kw = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup",
                  aws_secret_access_key="setup")
        iam = boto3.client("iam", **kw)
        iam.create_user(UserName="robot")
        iam.put_user_policy(UserName="robot", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="robot")["AccessKey"]
        boto3.client("s3", **kw).create_bucket(Bucket=BUCKET)
        good = {"endpoint": endpoint, "region": "us-east-1", "client_options": {"allow_http": True},
                "access_key_id": key["AccessKeyId"], "secret_access_key": key["SecretAccessKey"]}
        yield good
    finally:
        stop_s3_server_process(proc)


def _listing(options):
    from obstore.store import S3Store

    store = S3Store(BUCKET, **options)
    return sorted(m["path"] for batch in obstore.list(store) for m in batch)


def test_the_good_key_works_and_a_wrong_one_is_refused_by_name(checked_server, tmp_path, monkeypatch, capsys):
    good = checked_server
    bad = {**good, "secret_access_key": "not-the-secret"}
    url = f"s3://{BUCKET}/store.zarr"
    with ReplayBuffer.create_empty("zarr", url, storage_options=good) as rb:
        rb.add_episode({"obs": np.arange(8, dtype=np.float32).reshape(4, 2)})
    before = _listing(good)
    assert "store.zarr/meta/episode_ends/c/0" in before

    with pytest.raises(OSError, match=f"{url}: the object store cannot be read") as exc:
        ReplayBuffer.create_from_path(url, storage_options=bad)
    assert "403" in str(exc.value) or "Forbidden" in str(exc.value) or "Signature" in str(exc.value), str(exc.value)
    with pytest.raises(OSError, match=f"{url}: the object store cannot be read"):
        ReplayBuffer(url, storage_options=bad)  # writable: no lease is taken
    new = f"s3://{BUCKET}/new.zarr"
    with pytest.raises(OSError, match=f"{new}: the object store cannot be read"):
        ReplayBuffer.create_empty("zarr", new, storage_options=bad)
    assert _listing(good) == before

    # the CLI, configured by the environment as users do
    for k, v in {"AWS_ENDPOINT_URL": good["endpoint"], "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
                 "AWS_ACCESS_KEY_ID": good["access_key_id"], "AWS_SECRET_ACCESS_KEY": "wrong"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    assert main(["info", url]) == 2
    assert url in capsys.readouterr().err
    if PUSHT.is_dir():
        assert main(["import", "diffusion-policy", str(PUSHT), new, "--episodes", "0", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert new in err and "cannot be read" in err
    assert _listing(good) == before
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", good["secret_access_key"])
    assert main(["info", url]) == 0
