"""Fixtures for end-to-end tests against a running Airflow deployment (aigc.devtools.airflow_stack)."""

from __future__ import annotations

import pytest

from tests.e2e.stack import SMOKE_CONF, AirflowStack


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
def api_run(local_stack):
    """A run of today triggered through the REST API (no logical date, as a user's script would), returned
    once it holds the date's lease: its run id. The browser test triggers a run of the same date from the
    form while it holds it."""
    # The deployment's scheduled aigc_prepare run (the nightly chain's first stage) starts with the stack; this run
    # starts once it has published, not beside it. (Not for the asset queue any more: aigc_airflow.asset_manager has
    # every publication reach a run.) Started together, the two runs' first tasks and the
    # browser's trigger stacked on one SQLite file: in one fresh-clone run every component then waited about 60 s
    # on its lock (the scheduler's heartbeat, the api-server's requests, reads included) and the form's trigger
    # answered 500.
    local_stack.wait_for_a_run("aigc_prepare", lambda r: r["run_type"] == "scheduled",
                               "the scheduled aigc_prepare run to publish before the API run starts", timeout=600)
    run_id = local_stack.trigger(SMOKE_CONF, logical_date=None)
    local_stack.wait_until(lambda: local_stack.task_state(run_id, "claim_partition") == "success", 600,
                           "the API run to take its date's lease")
    return run_id
