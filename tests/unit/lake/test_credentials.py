"""Child processes of a task with a lake role get the role's renewed credentials from their parent, never keys."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from aigc.lake import S3Lake, S3Options
from aigc.lake.credentials import LONG_LIVED, TOKEN_ENV, URI_ENV, children_credentials

ROLE = "arn:aws:iam::123456789012:role/aigc-lake"
CHILD = """
import json, os, sys
from aigc.lake import open_lake
lake = open_lake(sys.argv[1])
print(json.dumps({"read": lake.get_json("x.json"), "env": sorted(k for k in os.environ if "AWS" in k or "AIGC" in k)}))
"""


def test_a_child_reads_the_lake_with_served_role_credentials_and_holds_no_long_lived_key(s3_server):
    uri = f"s3://{s3_server.bucket}/child-role"
    lake = S3Lake(uri, S3Options(endpoint_url=s3_server.endpoint_url, access_key=s3_server.options().access_key,
                                 secret_key=s3_server.options().secret_key, role_arn=ROLE))
    lake.put_json("x.json", {"ok": True})
    base = {**s3_server.env(), "AIGC_S3_ROLE_ARN": ROLE, "PATH": "/usr/bin:/bin",
            "AIRFLOW__API_AUTH__JWT_SECRET": "forge-admin-tokens-with-me", "AIGC_RDZV_SECRET": "signs-endpoints"}
    with children_credentials(lake, base) as env:
        assert not set(LONG_LIVED) & env.keys() and env[URI_ENV].startswith("http://127.0.0.1:")
        out = subprocess.run([sys.executable, "-c", CHILD, uri], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        assert seen["read"] == {"ok": True}
        held = set(seen["env"])
        assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AIGC_S3_ROLE_ARN", "AIGC_RDZV_SECRET"} & held
        assert not [k for k in env if k.startswith("AIRFLOW")]
        for token in ("", "guess"):  # only the token's holder gets the credentials
            request = urllib.request.Request(env[URI_ENV], headers={"Authorization": token})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(request, timeout=10)
            assert e.value.code == 403
        served = json.loads(urllib.request.urlopen(urllib.request.Request(
            env[URI_ENV], headers={"Authorization": env[TOKEN_ENV]}), timeout=10).read())
        assert served["AccessKeyId"] != s3_server.options().access_key and served["Expiration"]
    with pytest.raises(urllib.error.URLError):  # served for as long as the children run, not after
        urllib.request.urlopen(env[URI_ENV], timeout=5)


def test_the_credentials_never_go_through_a_proxy(s3_server, monkeypatch):
    """A cluster's HTTP_PROXY must not carry the token and the role's credentials off the host."""
    from aigc.lake.credentials import fetch, serve_role_credentials

    lake = S3Lake(f"s3://{s3_server.bucket}/proxy", S3Options(
        endpoint_url=s3_server.endpoint_url, access_key=s3_server.options().access_key,
        secret_key=s3_server.options().secret_key, role_arn=ROLE))
    with serve_role_credentials(lake) as env:
        for name in ("HTTP_PROXY", "http_proxy"):
            monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there: a proxied request fails
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert fetch(env[URI_ENV], env[TOKEN_ENV])["access_key"]


def test_without_a_role_the_children_get_the_environment_as_it_is(s3_server, tmp_path):
    from aigc.lake import LocalLake

    base = {"AWS_ACCESS_KEY_ID": "k", "PATH": "/bin"}
    for lake in (LocalLake(tmp_path / "lake"), S3Lake(f"s3://{s3_server.bucket}/x", s3_server.options())):
        with children_credentials(lake, {**base, "AIRFLOW__CORE__FERNET_KEY": "x", "AIRFLOW_CONN_X": "y"}) as env:
            assert env == base  # the keys it opens the lake with, never Airflow's secrets
