"""Shared fixtures: every lake test runs on a local folder and on a real S3 HTTP server."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

# Two test processes share two cores (`make test`: -n 2), and every process PyTorch starts (the tests', torchrun's,
# Airflow's tasks) would otherwise run a team of a thread a core that spins while it waits for the other process's:
# one thread each, and no spinning. Measured on the unit tests of stages 2 and 5 (-n 2, 2 cores): 110-116 s wall
# and 193-213 CPU-s by default, 96 s and 173 CPU-s with one thread. A test that times threads sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from aigc.devtools.s3server import local_s3  # noqa: E402 - after the thread settings, which PyTorch reads once
from aigc.lake import LocalLake, S3Lake

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["tests.training_fixtures"]
# What `make` exports for Airflow, for a bare `pytest` run too: this repo's dags/ and plugins/.
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(ROOT / "dags"))
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(ROOT / "plugins"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")  # the test S3 server is on loopback: never via a proxy
# The hf-causal-lm workload's demo bases and copied bases: built in a folder of the test session's, not the user's
# ~/.cache (inherited by every process a test starts).
os.environ.setdefault("AIGC_HF_CACHE", tempfile.mkdtemp(prefix="aigc-hf-cache-"))
sys.path.insert(0, str(ROOT / "plugins"))  # Airflow puts plugins/ on sys.path; so do the tests


LIVE = ("tests/e2e/",)


def pytest_itemcollected(item):
    """Tests of live Airflow deployments (scheduler, api-server, workers: long-lived processes that poll)
    are marked ``live``, so that ``-m live`` / ``-m "not live"`` pick them out."""
    if item.nodeid.startswith(LIVE):
        item.add_marker(pytest.mark.live)


def pytest_xdist_make_scheduler(config, log):
    """Under xdist (`make test`: ``-n 2``), the live tests are one unit of work, sent first to one worker
    and run there in order, one deployment at a time (two at once would only fight for the same two
    cores); every other test is a unit of its own, so the other worker, and this one once the live tests
    are done, take the rest as they free up. The live tests use about one core, the rest the other."""
    from xdist.scheduler import LoadScopeScheduling

    class LiveTestsOnOneWorker(LoadScopeScheduling):
        # xdist sends the units with the most tests first: "live" (4 tests) before every single test.
        def _split_scope(self, nodeid: str) -> str:
            return "live" if nodeid.startswith(LIVE) else nodeid

    return LiveTestsOnOneWorker(config, log)


# -- the reliability suite's summary line (tests/reliability): each test records what it injected and
# compared; the controller adds the records of every worker up and prints one line at the end.
RELIABILITY_LOG = "AIGC_RELIABILITY_LOG"
RELIABILITY_FIELDS = ("faults_injected", "faults_survived", "objects_compared", "rows_compared", "rows_lost",
                      "half_published")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist): workers inherit the path
        os.environ[RELIABILITY_LOG] = str(Path(tempfile.mkdtemp(prefix="aigc-reliability-")) / "records.jsonl")


@pytest.fixture
def reliability_record():
    """``record(faults_injected=…, …)``: one line of the reliability summary's sums."""
    def record(**counts: int) -> None:
        unknown = set(counts) - set(RELIABILITY_FIELDS)
        assert not unknown, f"unknown reliability fields {unknown}"
        with open(os.environ[RELIABILITY_LOG], "a") as f:
            f.write(json.dumps(counts) + "\n")
    return record


def pytest_terminal_summary(terminalreporter, config):
    path = Path(os.environ.get(RELIABILITY_LOG, "/nonexistent"))
    if hasattr(config, "workerinput") or not path.exists():
        return
    totals = dict.fromkeys(RELIABILITY_FIELDS, 0)
    for line in path.read_text().splitlines():
        for k, v in json.loads(line).items():
            totals[k] += v
    terminalreporter.write_line(
        f"reliability: {totals['faults_injected']} faults injected, {totals['faults_survived']} survived; "
        f"{totals['objects_compared']} objects and {totals['rows_compared']} rows compared with fault-free runs; "
        f"{totals['rows_lost']} rows lost, {totals['half_published']} half-published states seen")


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
