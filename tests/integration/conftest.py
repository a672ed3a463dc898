"""The Airflow the DAG tests here run on: one home (SQLite, LocalExecutor, this repo's dags/ and plugins/) and one
process that runs each test's `airflow dags test` (tests/integration/dag_runs.py), for a whole test session."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from aigc_airflow.operations import ASSET_MANAGER
from tests.integration.dag_runs import ROOT, DagRuns

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIRFLOW", "AIGC_"))}
    env.update({
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "GX_ANALYTICS_ENABLED": "False",
        "NO_PROXY": "127.0.0.1,localhost",
        **ASSET_MANAGER,  # as `make demo` sets it: its asset events are queued through the same manager
    })
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


@pytest.fixture(scope="session")
def dag_runs(airflow_env):
    runs = DagRuns(airflow_env, ARTIFACTS)
    yield runs
    runs.close()


@pytest.fixture
def dags_test(dag_runs):
    """``dags_test(env, date, conf, dag_id=…, console=…, timeout=…) -> (rc, log)``: the DAG run as `make demo` runs
    it (the full log to a file, the progress lines to ``console``); the log is kept under test-artifacts/ for
    whoever debugs it."""
    def run(env: dict, date: str, conf: dict, *, dag_id: str = "aigc_pipeline", console: io.StringIO | None = None,
            timeout: float = 600, name: str = "dags-test") -> tuple[int, str]:
        ARTIFACTS.mkdir(exist_ok=True)
        log = ARTIFACTS / f"{name}-{dag_id}-{date}-{uuid.uuid4().hex[:6]}.log"
        rc = dag_runs.run(date, conf, env, log, out=console or io.StringIO(), timeout_s=timeout, dag_id=dag_id)
        return rc, log.read_text(errors="replace")
    return run
