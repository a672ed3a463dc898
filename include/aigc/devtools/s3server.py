"""A real S3 HTTP endpoint on loopback (moto's S3 service over HTTP), for tests and ``make demo-s3``.

No MinIO binary or Docker engine runs on the development machines; moto speaks the S3 REST API
over HTTP, so boto3, pyarrow's C++ client and Airflow's hooks all talk to it as they would to
MinIO. ``python -m aigc.devtools.s3server PORT`` serves moto's S3 application, and its STS one for
the role the lake may assume: moto's own server (``python -m moto.server``) works out which of its
services each request is for, scanning its package folder every time, which took about half of
each request here (a PUT 8.2 → 3.8 ms, a GET 5.0 → 3.0 ms with the applications called directly).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

ACCESS_KEY = "aigc-test"
SECRET_KEY = "aigc-test-secret"  # moto accepts any credentials; these only have to be consistent


@dataclass(frozen=True)
class LocalS3:
    endpoint_url: str
    bucket: str

    def env(self) -> dict[str, str]:
        """The standard AWS variables, plus the Airflow connection, pointing at this server."""
        import json

        conn = {"conn_type": "aws", "login": ACCESS_KEY, "password": SECRET_KEY,
                "extra": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"}}
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1",
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(conn),
        }

    def options(self):
        from aigc.lake import S3Options

        return S3Options(endpoint_url=self.endpoint_url, access_key=ACCESS_KEY, secret_key=SECRET_KEY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def local_s3(bucket: str = "aigc-lake") -> Iterator[LocalS3]:
    """Start moto's S3 server on a free loopback port with ``bucket`` created; stop it after.

    The server runs in its own process: a client that blocks while holding the GIL (pyarrow's
    C++ S3 client does, closing a multipart upload) would otherwise stall a server thread in
    the same interpreter.
    """
    import boto3

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aigc.devtools.s3server", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto S3 server did not start on 127.0.0.1:{port}") from None
                time.sleep(0.1)
        s3 = LocalS3(f"http://127.0.0.1:{port}", bucket)
        boto3.client("s3", endpoint_url=s3.endpoint_url, aws_access_key_id=ACCESS_KEY,
                     aws_secret_access_key=SECRET_KEY, region_name="us-east-1").create_bucket(Bucket=bucket)
        yield s3
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def serve(port: int) -> None:
    """moto's S3 and STS applications on 127.0.0.1:``port``, one thread a request, until the process is stopped.

    STS speaks AWS's query protocol (a form POSTed to ``/``); S3 never POSTs to the root (its POSTs name a bucket)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    s3, sts = create_backend_app("s3"), create_backend_app("sts")

    def app(environ, start_response):
        form = environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded")
        to_sts = environ["REQUEST_METHOD"] == "POST" and environ.get("PATH_INFO", "/") == "/" and form
        return (sts if to_sts else s3)(environ, start_response)

    run_simple("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
