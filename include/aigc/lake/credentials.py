"""Credentials for child processes that renew themselves and were never long-lived keys.

A training task assumes the lake's role (``S3Options.role_arn``) with the connection's keys. Its torchrun workers
need S3 too, for hours; handing them the connection's keys would put long-lived secrets in every worker's
environment (readable in ``/proc/<pid>/environ`` by anything running as that user, and kept in core dumps),
and handing them the role's credentials of the moment would fail when those expire. Instead the task serves its
own renewed role credentials on loopback, only to holders of a random token, for as long as the workers run
(``serve_role_credentials``); each worker's lake fetches them from there and fetches again before they expire
(``S3Options.credentials_uri``: botocore's refreshable credentials, as for a role).

The reply is the container-credentials shape botocore and the AWS SDKs know (AccessKeyId, SecretAccessKey, Token,
Expiration).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hmac
import json
import secrets
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aigc.lake.s3 import S3Lake

URI_ENV, TOKEN_ENV = "AIGC_S3_CREDENTIALS_URI", "AIGC_S3_CREDENTIALS_TOKEN"
LONG_LIVED = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AIGC_S3_ROLE_ARN", "AWS_ROLE_ARN",
              "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE")
"""What a child never receives while credentials are served: the keys, the role and whatever would assume it."""
NEVER_FOR_CHILDREN = ("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIGC_RDZV_SECRET")
"""Prefixes no training worker needs and none should hold: Airflow's settings (the Fernet key, the JWT secret, the
metadata DB's password), its connections and variables, and the rendezvous secret (the launcher signs)."""


@contextlib.contextmanager
def serve_role_credentials(lake: S3Lake) -> Iterator[dict[str, str]]:
    """While open: the lake's assumed-role credentials (renewed by botocore as they near expiry) at a loopback URL;
    yields the variables a child sets to use them (the URL, its token, the endpoint and region)."""
    token = secrets.token_urlsafe(32)
    session = lake._role_session

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            if not hmac.compare_digest(self.headers.get("Authorization", ""), token):
                self.send_error(403, "wrong or missing token")
                return
            creds = session.get_credentials()
            frozen = creds.get_frozen_credentials()  # renews them when they are near expiry
            # A child fetches again before this (botocore's refreshable credentials): the role's own expiry.
            expiry = getattr(creds, "_expiry_time", None) or dt.datetime.now(dt.UTC) + dt.timedelta(minutes=15)
            body = json.dumps({"AccessKeyId": frozen.access_key, "SecretAccessKey": frozen.secret_key,
                               "Token": frozen.token, "Expiration": expiry.isoformat()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # a request per refresh: not worth a log line each
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="lake-credentials", daemon=True)
    thread.start()
    o = lake.options
    env = {URI_ENV: f"http://127.0.0.1:{server.server_address[1]}/credentials", TOKEN_ENV: token,
           "AWS_DEFAULT_REGION": o.region}
    if o.endpoint_url:
        env["AWS_ENDPOINT_URL"] = o.endpoint_url
    try:
        yield env
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def fetch(uri: str, token: str, timeout_s: float = 10.0) -> dict:
    """The served credentials, as botocore's RefreshableCredentials wants them."""
    import urllib.request

    request = urllib.request.Request(uri, headers={"Authorization": token})
    # No proxy, whatever HTTP_PROXY says (as botocore's container provider): the token and the credentials stay on
    # this host.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=timeout_s) as reply:
        c = json.loads(reply.read())
    return {"access_key": c["AccessKeyId"], "secret_key": c["SecretAccessKey"], "token": c["Token"],
            "expiry_time": c["Expiration"]}


@contextlib.contextmanager
def children_credentials(lake, base: dict[str, str]) -> Iterator[dict[str, str]]:
    """The environment for child processes that open ``lake``: ``base`` without Airflow's secrets
    (``NEVER_FOR_CHILDREN``), and for an S3 lake with a role also without any long-lived key, with the role's
    credentials served for as long as this is open."""
    base = {k: v for k, v in base.items() if not k.startswith(NEVER_FOR_CHILDREN)}
    if not getattr(getattr(lake, "options", None), "role_arn", None):  # an S3 lake with a role (S3Options)
        yield base
        return
    with serve_role_credentials(lake) as served:
        yield child_env(base, served)


def child_env(base: dict[str, str], served: dict[str, str]) -> dict[str, str]:
    """``base`` (the parent's environment) without any long-lived key, plus the served credentials' variables."""
    return {**{k: v for k, v in base.items() if k not in LONG_LIVED}, **served}
