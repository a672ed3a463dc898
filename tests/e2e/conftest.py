"""Fixtures for end-to-end tests against a running Airflow deployment (see stack.py)."""

from __future__ import annotations

import pytest

from tests.e2e.stack import AirflowStack


@pytest.fixture(scope="module")
def local_stack(tmp_path_factory):
    """api-server, scheduler, dag-processor and triggerer with LocalExecutor on SQLite, a folder lake."""
    base = tmp_path_factory.mktemp("local-stack")
    stack = AirflowStack("local", home=base / "airflow", lake_uri=str(base / "lake"))
    try:
        yield stack.start()
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def primed_run(local_stack):
    """The first run of the deployment, triggered through the REST API; (run id, final state)."""
    run_id = local_stack.prime()
    return run_id, local_stack.wait_for_runs([run_id])[run_id]
