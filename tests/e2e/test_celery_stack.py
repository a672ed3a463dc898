"""Distributed mode: the same DAG on CeleryExecutor, Redis as broker, PostgreSQL as metadata DB.

Two Celery workers, as a cluster would have them: one on the ``default`` queue (CPU tasks)
and one on ``gpu`` (training and the mapped generation shards, routed there by
``AIGC_GPU_QUEUE=gpu``). The test gets its own database and an empty Redis database, and
drops and empties them afterwards.

Backfills are tested here, on PostgreSQL: on SQLite, Airflow 3.3 creates a backfill's runs one
savepoint (one commit) at a time, and when another component holds the write lock it deletes the
runs it made, under a scheduler that may already have loaded them (the scheduler then exits with
ObjectDeletedError; seen in a run of the local stack). The README says so.
"""

from __future__ import annotations

import json
import os
import re
import uuid

import pytest

from aigc.lake import open_lake
from aigc.lake.keys import partition
from aigc.lake.publish import resolve
from tests.e2e.stack import DAG_ID, SMOKE_CONF, STAGES, AirflowStack, published_runs, run_date

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1800)]
POSTGRES = os.environ.get("AIGC_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("AIGC_TEST_REDIS", "redis://127.0.0.1:6379")
GPU_TASKS = {"train", "generate_shard"}
HOW = ("set AIGC_TEST_POSTGRES (an admin URL: the test creates its own database) and AIGC_TEST_REDIS "
       "to servers it may use, e.g. `docker run -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres` "
       "and `docker run -p 6379:6379 redis`")


def _postgres():
    import psycopg2

    connection = psycopg2.connect(POSTGRES, connect_timeout=5)
    connection.autocommit = True
    return connection


def _empty_redis_db():
    """A Redis database number nobody uses (no keys), so the test's broker traffic is its own."""
    import redis

    for number in range(15, 0, -1):
        client = redis.Redis.from_url(f"{REDIS}/{number}", socket_connect_timeout=5)
        if client.dbsize() == 0:
            return number, client
    raise RuntimeError(f"no empty database on {REDIS}")


@pytest.fixture(scope="module")
def celery_stack(tmp_path_factory):
    try:
        admin = _postgres()
        redis_db, broker = _empty_redis_db()
    except Exception as e:  # noqa: BLE001 - any reason the servers are unusable
        pytest.skip(f"PostgreSQL at {POSTGRES} or Redis at {REDIS} unavailable ({e}); to run it, {HOW}")
    database = f"aigc_e2e_{uuid.uuid4().hex[:10]}"
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{database}"')
    # psycopg2 named explicitly: SQLAlchemy 2.1's default PostgreSQL driver is psycopg 3.
    db_url = POSTGRES.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://", 1) + f"/{database}"
    base = tmp_path_factory.mktemp("celery-stack")
    stack = AirflowStack(
        "celery", home=base / "airflow", lake_uri=str(base / "lake"), executor="CeleryExecutor",
        celery_queues=["default", "gpu"],
        extra_env={
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
            "AIRFLOW__CELERY__BROKER_URL": f"{REDIS}/{redis_db}",
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + db_url,
            "AIGC_GPU_QUEUE": "gpu",
        },
    )
    try:
        yield stack.start()
    finally:
        stack.stop()
        broker.flushdb()
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.close()


DATES = ["2026-11-01", "2026-11-02"]  # a range, then one date redone while the other stays


def backfill(stack: AirflowStack, behavior: str, first: str, last: str) -> dict:
    """`airflow backfill create` over [first, last] with ``behavior``; the backfill as the REST API shows it.

    The CLI makes the backfill's runs before it returns; the caller waits for them (wait_for_runs).
    Airflow allows one unfinished backfill per DAG, and the scheduler marks a backfill complete only
    every 30 s after its runs end: the previous one is waited for here, just before it matters."""
    def backfills() -> list[dict]:
        return stack.api("GET", f"/api/v2/backfills?dag_id={DAG_ID}")["backfills"]

    stack.wait_until(lambda: all(b["completed_at"] for b in backfills()), 120,
                     "the previous backfill to be marked complete", interval=2)
    before = {b["id"] for b in backfills()}
    stack.cli("backfill", "create", "--dag-id", DAG_ID, "--from-date", first, "--to-date", last,
              "--reprocess-behavior", behavior, "--max-active-runs", "2", "--dag-run-conf", json.dumps(SMOKE_CONF))
    (new,) = [b for b in backfills() if b["id"] not in before]
    return new


def backfill_runs(stack: AirflowStack) -> dict[str, dict]:
    """date → the latest backfill run of it."""
    return {run_date(r): r for r in stack.runs() if r["run_type"] == "backfill"}


@pytest.fixture(scope="module")
def backfilled(celery_stack):
    """A backfill of DATES, two runs at once (--max-active-runs 2): date → its run (asserted a success)."""
    backfill(celery_stack, "none", DATES[0], DATES[-1])
    runs = backfill_runs(celery_stack)
    assert sorted(runs) == DATES
    states = celery_stack.wait_for_runs([r["dag_run_id"] for r in runs.values()], timeout=1200)
    assert set(states.values()) == {"success"}, f"{states}; logs in {celery_stack.logs}"
    return runs


def test_the_pipeline_runs_on_celery_workers_with_gpu_tasks_on_the_gpu_queue(celery_stack, backfilled):
    tis = [t for r in backfilled.values() for t in celery_stack.task_instances(r["dag_run_id"])]
    queues = {t["task_id"]: t["queue"] for t in tis if t["state"] == "success"}
    assert {q for task, q in queues.items() if task in GPU_TASKS} == {"gpu"}
    assert {q for task, q in queues.items() if task not in GPU_TASKS} == {"default"}
    # Only the gpu worker listens on "gpu": it ran training and both shards of each run, the other the rest.
    received = {queue: len(re.findall(r"Task .*execute_workload.* received",
                                      (celery_stack.logs / f"celery-worker-{queue}.log").read_text()))
                for queue in ("default", "gpu")}
    ran_on_gpu = sum(1 for t in tis if t["task_id"] in GPU_TASKS and t["state"] == "success")
    assert received["gpu"] == ran_on_gpu == 3 * len(DATES), received
    assert received["default"] >= sum(1 for t in tis if t["state"] == "success") - ran_on_gpu, received
    lake = open_lake(celery_stack.lake_uri)
    for date in DATES:
        assert set(published_runs(lake, date)) == {"curated", "training", "generations", "evaluations"}
    assert lake.list("leases") == []


def test_backfill_makes_one_partition_per_date_under_every_reprocess_behavior(celery_stack, backfilled):
    lake = open_lake(celery_stack.lake_uri)
    runs = backfilled
    first = {d: published_runs(lake, d) for d in DATES}
    for d in DATES:  # exactly one run folder per stage and date: nothing appended
        assert [k for k in lake.list(f"curated/shapes/dt={d}") if k.endswith("_manifest.json")] == [
            f"curated/shapes/dt={d}/run={first[d]['curated']}/_manifest.json"]

    # Nothing to redo: `none` skips dates that have runs, `failed` finds no failed ones; no run is made.
    for behavior in ("none", "failed"):
        backfill(celery_stack, behavior, DATES[0], DATES[-1])
        assert {d: r["dag_run_id"] for d, r in backfill_runs(celery_stack).items()} == {
            d: runs[d]["dag_run_id"] for d in DATES}
        assert {r["state"] for r in celery_stack.runs()} == {"success"}
    assert {d: published_runs(lake, d) for d in DATES} == first

    # `completed` redoes a date: its partitions are replaced whole, the other dates untouched.
    backfill(celery_stack, "completed", DATES[-1], DATES[-1])
    redo = backfill_runs(celery_stack)[DATES[-1]]["dag_run_id"]
    assert celery_stack.wait_for_runs([redo], timeout=1200)[redo] == "success"
    again = {d: published_runs(lake, d) for d in DATES}
    assert again[DATES[0]] == first[DATES[0]]
    for stage, dataset in STAGES:
        pointer = resolve(lake, partition(stage, dataset, DATES[-1]))
        assert pointer["run_id"] != first[DATES[-1]][stage] and pointer["previous_run_id"] == first[DATES[-1]][stage]
    manifest = lake.get_json(f"curated/shapes/dt={DATES[-1]}/run={again[DATES[-1]]['curated']}/_manifest.json")
    assert manifest["input_records"] == 300  # the same drop, prepared again: not appended to the first
    assert lake.list("leases") == []
