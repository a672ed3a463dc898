"""Shared fixtures: every lake test runs on a local folder and on a real S3 HTTP server."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from aigc.devtools.s3server import local_s3
from aigc.lake import LocalLake, S3Lake

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["tests.training_fixtures"]
# What `make` exports for Airflow, for a bare `pytest` run too: this repo's dags/ and plugins/.
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")  # the test S3 server is on loopback: never via a proxy
sys.path.insert(0, str(ROOT / "plugins"))  # Airflow puts plugins/ on sys.path; so do the tests


LIVE = ("tests/e2e/", "tests/integration/")


def pytest_itemcollected(item):
    """Live deployments and torchrun process groups are marked ``live``: `make test` runs the rest on
    two xdist workers, then these one at a time (two at once would only fight for the same two cores)."""
    if item.nodeid.startswith(LIVE):
        item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on a free loopback port, for the whole session."""
    with local_s3() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def lake(request, tmp_path):
    """An empty lake: a temporary folder, or a fresh prefix in the local S3 server's bucket."""
    if request.param == "local":
        return LocalLake(tmp_path / "lake")
    server = request.getfixturevalue("s3_server")
    return S3Lake(f"s3://{server.bucket}/t-{uuid.uuid4().hex[:12]}", server.options())
