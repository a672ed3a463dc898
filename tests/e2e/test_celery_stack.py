"""Distributed mode: the same DAGs on CeleryExecutor, Redis as broker, PostgreSQL as metadata DB.

Two Celery workers, as a cluster would have them: one on the ``default`` queue (CPU tasks)
and one on ``gpu`` (training and the mapped generation shards, routed there by
``AIGC_GPU_QUEUE=gpu``, one at a time through the ``gpu`` pool). The test gets its own database
and an empty Redis database, and drops and empties them afterwards.

Dates are backfilled with aigc_prepare alone: it curates each date and trains nothing (the stage DAGs are
unpaused from the start, so the backfill's asset events do reach aigc_train, which skips them). Then one
all-stages run trains on the backfilled window. aigc_prepare also gets its nightly run of yesterday as the
deployment starts: with the default preset, as a deployment runs it, it waits for a producer's drop that
never comes here, in reschedule mode (holding no worker between pokes). The nightly chain itself runs on
the LocalExecutor stack (test_local_stack.py); here it would be a second whole pipeline on the same two cores.

Backfills are tested here, on PostgreSQL: on SQLite, Airflow 3.3 creates a backfill's runs one
savepoint (one commit) at a time, and when another component holds the write lock it deletes the
runs it made, under a scheduler that may already have loaded them (the scheduler then exits with
ObjectDeletedError; seen in a run of the local stack). docs/airflow.md says so.
"""

from __future__ import annotations

import json
import os
import re
from urllib.parse import quote

import pytest

from aigc.cli import main
from aigc.lake import open_lake
from aigc.lake.keys import partition
from aigc.lake.lease import date_lease
from aigc.lake.publish import NotPublished, resolve
from aigc.registry import Registry
from tests.e2e.stack import (
    DAG_IDS,
    SMOKE_CONF,
    AirflowStack,
    holds_pytorch,
    preloaded_children,
    published_runs,
    run_date,
)
from tests.postgres import POSTGRES, admin_connection, scratch_database

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(1800)]
REDIS = os.environ.get("AIGC_TEST_REDIS", "redis://127.0.0.1:6379")
GPU_TASKS = {"train", "build_variants", "generate_shard", "time_on_gpu"}
HOW = ("set AIGC_TEST_POSTGRES (an admin URL: the test creates its own database) and AIGC_TEST_REDIS "
       "to servers it may use, e.g. `docker run -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres` "
       "and `docker run -p 6379:6379 redis`")


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
        admin = admin_connection()
        redis_db, broker = _empty_redis_db()
    except Exception as e:  # noqa: BLE001 - any reason the servers are unusable
        pytest.skip(f"PostgreSQL at {POSTGRES} or Redis at {REDIS} unavailable ({e}); to run it, {HOW}")
    base = tmp_path_factory.mktemp("celery-stack")
    with scratch_database(admin, "aigc_e2e") as db_url:
        stack = AirflowStack(
            "celery", home=base / "airflow", lake_uri=str(base / "lake"), executor="CeleryExecutor",
            celery_queues=["default", "gpu"],
            extra_env={
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
                "AIRFLOW__CELERY__BROKER_URL": f"{REDIS}/{redis_db}",
                "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + db_url,
                "AIGC_GPU_QUEUE": "gpu",
                "AIGC_DEFAULT_PRESET": "default",  # the nightly run waits for its producer (the module's docstring)
                # A task's supervisor holds its worker slot until its next heartbeat check after the task ends
                # (Airflow's default: 5 s): half the backfill's slot time was that idle hold. Not on the SQLite
                # stack, where a write a second per running task contends for the one lock.
                "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            },
        )
        try:
            yield stack.start()
        finally:
            stack.stop()
            broker.flushdb()


DATES = ["2026-11-01", "2026-11-02", "2026-11-03"]  # a range, then one date redone while the others stay
PREPARE = "aigc_prepare"
BACKFILL_CONF = {**SMOKE_CONF, "prepare_parts": 2}  # stage 1 as two mapped prepare_part tasks


def backfill(stack: AirflowStack, behavior: str, first: str, last: str) -> dict:
    """`airflow backfill create --dag-id aigc_prepare` over [first, last] with ``behavior``; the backfill as the
    REST API shows it.

    The CLI makes the backfill's runs before it returns; the caller waits for them (wait_for_runs).
    Airflow allows one unfinished backfill per DAG, and the scheduler marks a backfill complete only
    every 30 s after its runs end: the previous one is waited for here, just before it matters."""
    def backfills() -> list[dict]:
        return stack.api("GET", f"/api/v2/backfills?dag_id={PREPARE}")["backfills"]

    stack.wait_until(lambda: all(b["completed_at"] for b in backfills()), 120,
                     "the previous backfill to be marked complete", interval=2)
    before = {b["id"] for b in backfills()}
    stack.cli("backfill", "create", "--dag-id", PREPARE, "--from-date", first, "--to-date", last,
              "--reprocess-behavior", behavior, "--max-active-runs", "2", "--dag-run-conf", json.dumps(BACKFILL_CONF))
    (new,) = [b for b in backfills() if b["id"] not in before]
    return new


def backfill_dry_run(stack: AirflowStack, behavior: str, first: str, last: str) -> list[str]:
    """The dates a backfill of aigc_prepare over [first, last] with ``behavior`` would run (the REST API's dry run:
    nothing is made)."""
    answer = stack.api("POST", "/api/v2/backfills/dry_run", {
        "dag_id": PREPARE, "from_date": f"{first}T00:00:00Z", "to_date": f"{last}T00:00:00Z",
        "reprocess_behavior": behavior, "max_active_runs": 2, "dag_run_conf": BACKFILL_CONF})
    return sorted(b["logical_date"][:10] for b in answer["backfills"])


def backfill_runs(stack: AirflowStack) -> dict[str, dict]:
    """date → the latest backfill run of it."""
    return {run_date(r): r for r in stack.runs(PREPARE) if r["run_type"] == "backfill"}


def curated_runs(lake) -> dict[str, str]:
    return {d: resolve(lake, partition("curated", "shapes", d))["run_id"] for d in DATES}


@pytest.fixture(scope="module")
def backfilled(celery_stack):
    """A backfill of DATES with aigc_prepare, two runs at once, the whole chain unpaused: date → its run."""
    backfill(celery_stack, "none", DATES[0], DATES[-1])
    runs = backfill_runs(celery_stack)
    assert sorted(runs) == DATES
    states = celery_stack.wait_for_runs([r["dag_run_id"] for r in runs.values()], timeout=1200, dag_id=PREPARE)
    assert set(states.values()) == {"success"}, f"{states}; logs in {celery_stack.logs}"
    return runs


def test_a_backfill_of_aigc_prepare_curates_each_date_and_trains_nothing(celery_stack, backfilled, tmp_path):
    lake = open_lake(celery_stack.lake_uri)
    first = curated_runs(lake)
    # Stage 1 ran as two mapped parts on the Celery workers and wrote the bytes one host writes from the same drop
    # (the first date: no earlier date was published to deduplicate against, whatever order the runs took).
    tis = celery_stack.task_instances(backfilled[DATES[0]]["dag_run_id"], PREPARE)
    parts = [t for t in tis if t["task_id"] == "prepare_part"]
    assert sorted(t["map_index"] for t in parts) == [0, 1] and {t["state"] for t in parts} == {"success"}, parts
    one_host = tmp_path / "one-host"
    # The smoke preset's synthetic drop, read where the DAG wrote it, as a producer's root (read only).
    assert main(["prepare", "--preset", "smoke", "--drop", "producer", "--lake", str(one_host),
                 "--raw", lake.url("raw/_synthetic/shapes"), "--date", DATES[0], "--no-gate", "--workers", "1"]) == 0
    (local_manifest,) = [k for k in open_lake(str(one_host)).list("curated") if k.endswith("_manifest.json")]
    mapped = lake.get_json(f"curated/shapes/dt={DATES[0]}/run={first[DATES[0]]}/_manifest.json")
    alone = open_lake(str(one_host)).get_json(local_manifest)
    for what in ("shards", "dedup_keys"):
        assert [(s["sha256"], s["rows"]) for s in mapped[what]] == [(s["sha256"], s["rows"]) for s in alone[what]]
    assert [s["sha256"] for s in mapped["quarantine"]["shards"]] == [s["sha256"] for s in alone["quarantine"]["shards"]]
    assert mapped["fanout"]["parts"] == 2 and alone["fanout"] is None
    for d in DATES:  # exactly one run folder per date: nothing appended
        assert [k for k in lake.list(f"curated/shapes/dt={d}") if k.endswith("_manifest.json")] == [
            f"curated/shapes/dt={d}/run={first[d]}/_manifest.json"]
        with pytest.raises(NotPublished):
            resolve(lake, partition("training", "shapes-cvae", d))
    # The backfill's events reached aigc_train, which ran and skipped: no model for those dates.
    backfill_run_ids = {r["dag_run_id"] for r in backfilled.values()}

    def started_by_the_backfill() -> list[dict]:
        found, runs = [], celery_stack.runs("aigc_train")
        if any(r["state"] not in ("success", "failed") for r in runs):
            return []  # not yet; and upstreamAssetEvents answers 500 while an event's run has not started
        for run in runs:
            events = celery_stack.api("GET", f"/api/v2/dags/aigc_train/dagRuns/{quote(run['dag_run_id'])}"
                                             "/upstreamAssetEvents")["asset_events"]
            if events and {e["source_run_id"] for e in events} <= backfill_run_ids:
                found.append(run)
        return found if found and all(r["state"] == "success" for r in found) else []

    for run in celery_stack.wait_until(started_by_the_backfill, 300, "aigc_train to take the backfill's events"):
        states = {t["task_id"]: t["state"] for t in celery_stack.task_instances(run["dag_run_id"], "aigc_train")}
        assert states["wanted"] == "success" and states["train"] == "skipped", states
    assert not {v["date"] for v in Registry(lake, "shapes-cvae").versions()} & set(DATES)

    # Nothing to redo: `none` skips dates that have runs, `failed` finds no failed ones; `completed` would redo all.
    # Asked as a dry run, Airflow's own answer from the same rule its backfills apply (models/backfill.py), so no
    # empty backfill holds the DAG's one unfinished-backfill slot until the scheduler's next 30 s sweep.
    for behavior, redone in (("none", []), ("failed", []), ("completed", DATES)):
        assert backfill_dry_run(celery_stack, behavior, DATES[0], DATES[-1]) == redone, behavior
    assert {d: r["dag_run_id"] for d, r in backfill_runs(celery_stack).items()} == {
        d: backfilled[d]["dag_run_id"] for d in DATES}
    assert curated_runs(lake) == first

    # `completed` redoes a date: its partition is replaced whole, the other dates untouched.
    backfill(celery_stack, "completed", DATES[0], DATES[0])
    redo = backfill_runs(celery_stack)[DATES[0]]["dag_run_id"]
    assert celery_stack.wait_for_runs([redo], timeout=1200, dag_id=PREPARE)[redo] == "success"
    again = curated_runs(lake)
    assert {d: again[d] for d in DATES[1:]} == {d: first[d] for d in DATES[1:]}
    pointer = resolve(lake, partition("curated", "shapes", DATES[0]))
    assert pointer["run_id"] != first[DATES[0]] and pointer["previous_run_id"] == first[DATES[0]]
    manifest = lake.get_json(f"{pointer['run_prefix']}/_manifest.json")
    assert manifest["input_records"] == 300  # the same drop, prepared again: not appended to the first


def test_training_after_the_backfill_uses_its_window_with_gpu_tasks_on_the_gpu_queue(celery_stack, backfilled):
    """One all-stages run of the last date, three days' window: it trains on the backfilled partitions, its
    training, its variants' timing and its generation shards on the gpu worker, everything else on the default
    one."""
    # fp32, a torch variant: its shards take the GPU queue (int8 serves on the CPU and would not).
    run_id = celery_stack.trigger({**SMOKE_CONF, "window_days": 3, "variant": "fp32"},
                                  logical_date=f"{DATES[-1]}T00:00:00Z")
    state = celery_stack.wait_for_runs([run_id], timeout=1200)[run_id]
    assert state == "success", f"{run_id} ended {state}; logs in {celery_stack.logs}"
    # Every run on the stack but the nightly one, which waits for its producer, finished: count where each task ran.
    (nightly,) = [r for r in celery_stack.runs(PREPARE) if r["run_type"] == "scheduled"]
    waiting = {t["task_id"]: t["state"] for t in celery_stack.task_instances(nightly["dag_run_id"], PREPARE)}
    assert waiting["wait_for_drop"] in ("up_for_reschedule", "running", "queued", "scheduled"), waiting
    celery_stack.wait_until(lambda: all(r["state"] in ("success", "failed") for d in DAG_IDS
                                        for r in celery_stack.runs(d) if r["dag_run_id"] != nightly["dag_run_id"]),
                            1200, "every run to finish", interval=2)
    tis = [t for d in DAG_IDS for r in celery_stack.runs(d) for t in celery_stack.task_instances(r["dag_run_id"], d)
           if t["state"] == "success"]
    assert {t["queue"] for t in tis if t["task_id"] in GPU_TASKS} == {"gpu"}
    assert {t["queue"] for t in tis if t["task_id"] not in GPU_TASKS} == {"default"}
    assert {t["pool"] for t in tis if t["task_id"] in GPU_TASKS} == {"gpu"}
    # Only the gpu worker listens on "gpu": it ran every training and generation shard, the other the rest.
    received = {queue: len(re.findall(r"Task .*execute_workload.* received",
                                      (celery_stack.logs / f"celery-worker-{queue}.log").read_text()))
                for queue in ("default", "gpu")}
    ours = [t for t in celery_stack.task_instances(run_id) if t["task_id"] in GPU_TASKS]
    skipped = {t["task_id"] for t in celery_stack.task_instances(run_id) if t["state"] == "skipped"}
    assert "generate_shard_cpu" in skipped and "generate_shard" not in skipped
    assert len(ours) == 5 and received["gpu"] == sum(1 for t in tis if t["task_id"] in GPU_TASKS), received
    assert received["default"] >= len(tis) - received["gpu"], received
    lake = open_lake(celery_stack.lake_uri)
    published = published_runs(lake, DATES[-1])
    summary = lake.get_json(f"training/shapes-cvae/dt={DATES[-1]}/run={published['training']}/_SUMMARY.json")
    assert summary["partitions"] == 3  # the backfilled days and its own
    # Every date given back, but the one the nightly run holds while it waits for its drop.
    held = {k for k in lake.list("leases") if lake.get_json(k)["owner"] is not None}
    assert held <= {date_lease(lake, run_date(nightly)).key}, held


def test_each_celery_worker_forks_its_tasks_from_a_pool_that_already_imported_pytorch(celery_stack):
    """CELERY_TASK_PRELOAD (aigc_airflow.operations): every worker imports aigc_airflow.preload in worker_init,
    before it forks its pool; the pool processes, which fork a process per task, hold PyTorch from the start."""
    for queue in celery_stack.celery_queues:
        worker = celery_stack.processes[f"celery-worker-{queue}"].pid
        # A pool process is titled ForkPoolWorker-N by Celery, or "airflow supervisor: <task>" by Airflow while it
        # runs one; the pool starts once worker_init (the preload, seconds) is done.
        pool = celery_stack.wait_until(lambda w=worker: preloaded_children(w, "ForkPoolWorker|airflow supervisor"),
                                       180, f"the {queue} worker's pool to start")
        assert holds_pytorch(worker), queue  # the main process, which forked the pool
        assert all(loaded for _, loaded in pool), (queue, pool)
