"""aigc_airflow.asset_manager: each event that queues a DAG moves its queue row forward, so the scheduler's next run
consumes it, on SQLite and on PostgreSQL, where it also survives the scheduler consuming the row meanwhile. Airflow's
own manager is run through the same steps, to show what the class changes. (The end-to-end proof, a real scheduler
consuming events posted while it was stopped: tests/e2e/test_local_stack.py.)"""

from __future__ import annotations

import datetime as dt
import inspect
import threading
import time
from collections import namedtuple
from pathlib import Path

import pytest
from airflow.assets.manager import AssetManager
from airflow.models import DagModel, import_all_models
from airflow.models.asset import AssetDagRunQueue, AssetModel
from airflow.models.dagbundle import DagBundleModel
from sqlalchemy import create_engine, delete, select, text
from sqlalchemy.orm import Session

from aigc.devtools.airflow_stack import AirflowStack
from aigc_airflow import asset_manager
from aigc_airflow.asset_manager import REPLACED, EveryEventAssetManager
from aigc_airflow.operations import ASSET_MANAGER
from tests.postgres import POSTGRES, admin_connection, scratch_database

ROOT = Path(__file__).resolve().parents[2]
Dag = namedtuple("Dag", "dag_id")
ASSET = 7
T0 = dt.datetime(2026, 12, 1, 2, 0, tzinfo=dt.UTC)


def queue_table(engine) -> None:
    """asset_dag_run_queue from Airflow's own ORM schema, with the tables its foreign keys name (asset, dag and the
    dag's bundle), and the rows they point at: the constraints hold as in a deployment's metadata database."""
    import_all_models()
    table = AssetDagRunQueue.__table__
    needed, todo = {table}, [table]
    while todo:
        for fk in todo.pop().foreign_keys:
            if fk.column.table not in needed:
                needed.add(fk.column.table)
                todo.append(fk.column.table)
    table.metadata.create_all(engine, tables=list(needed))
    with Session(engine) as session:
        session.add(DagBundleModel(name="aigc"))
        session.flush()
        session.add(AssetModel(id=ASSET, name="aigc-curated", uri="aigc://curated"))
        session.add_all(DagModel(dag_id=d, bundle_name="aigc", max_active_tasks=16, max_consecutive_failed_dag_runs=0,
                                 has_task_concurrency_limits=False) for d in ("aigc_evaluate", "aigc_train"))
        session.commit()


def queued(session) -> dict[str, dt.datetime]:
    return {r.target_dag_id: r.created_at for r in session.execute(select(AssetDagRunQueue.__table__))}


@pytest.fixture
def clock(monkeypatch):
    """The manager's clock, set by the test."""
    now = [T0]
    monkeypatch.setattr(asset_manager.timezone, "utcnow", lambda: now[0])
    return now


def queue(manager, session, *dag_ids, postgres=False):
    method = manager._queue_dagruns_nonpartitioned_postgres if postgres else \
        manager._queue_dagruns_nonpartitioned_slow_path
    method(ASSET, {Dag(d) for d in dag_ids}, session)
    session.commit()


def test_on_sqlite_a_later_event_moves_the_queued_row_forward_and_never_back(clock, tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'airflow.db'}")
    queue_table(engine)
    with Session(engine) as session:
        queue(EveryEventAssetManager, session, "aigc_evaluate", "aigc_train")
        assert queued(session) == {"aigc_evaluate": T0, "aigc_train": T0}
        clock[0] = T0 + dt.timedelta(seconds=3)  # a second event of the asset, before the scheduler's loop
        queue(EveryEventAssetManager, session, "aigc_evaluate")
        assert queued(session) == {"aigc_evaluate": T0 + dt.timedelta(seconds=3), "aigc_train": T0}
        clock[0] = T0 - dt.timedelta(hours=1)  # a late clock (another host's api-server) moves nothing back
        queue(EveryEventAssetManager, session, "aigc_evaluate", "aigc_train")
        assert queued(session) == {"aigc_evaluate": T0 + dt.timedelta(seconds=3), "aigc_train": T0}


def test_airflows_own_manager_keeps_the_first_events_time_which_is_what_strands_the_second(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'airflow.db'}")
    queue_table(engine)
    with Session(engine) as session:
        queue(AssetManager, session, "aigc_evaluate")
        first = queued(session)["aigc_evaluate"]
        wait_for(lambda: dt.datetime.now(dt.UTC) > first, "the clock to pass the first event", 5.0)
        queue(AssetManager, session, "aigc_evaluate")
        assert queued(session)["aigc_evaluate"] == first


@pytest.fixture
def postgres_engine():
    try:
        admin = admin_connection()
    except Exception as e:  # noqa: BLE001 - any reason the server is unusable
        pytest.skip(f"PostgreSQL at {POSTGRES} unavailable ({e}): set AIGC_TEST_POSTGRES to an admin URL")
    with scratch_database(admin, "aigc_adrq") as url:
        engine = create_engine(url)
        try:
            queue_table(engine)
            yield engine
        finally:
            engine.dispose()


@pytest.mark.parametrize("manager", [EveryEventAssetManager, AssetManager], ids=["ours", "airflows"])
def test_on_postgresql_an_event_queued_while_the_scheduler_consumes_the_row_is_queued_again(
        manager, postgres_engine, clock):
    """The scheduler locks the DAG's queue rows (FOR UPDATE), makes the run, deletes them and commits; an event
    recorded meanwhile must leave a row behind for the next run. Airflow's manager leaves none (the event waits
    for the next one); ours waits for the lock and queues the DAG afresh."""
    with Session(postgres_engine) as session:
        queue(manager, session, "aigc_evaluate", postgres=True)
    scheduler = postgres_engine.connect()
    transaction = scheduler.begin()
    rows = scheduler.execute(select(AssetDagRunQueue.__table__).with_for_update()).all()
    assert [r.target_dag_id for r in rows] == ["aigc_evaluate"]
    clock[0] = T0 + dt.timedelta(seconds=2)
    errors = []

    def second_event():
        try:
            with Session(postgres_engine) as session:
                queue(manager, session, "aigc_evaluate", postgres=True)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    producer = threading.Thread(target=second_event)
    producer.start()
    if manager is EveryEventAssetManager:  # it must wait for the scheduler's lock (polled, not slept for)
        wait_for(lambda: lock_waiters(postgres_engine) >= 1 or not producer.is_alive(), "the upsert to wait")
        assert producer.is_alive(), "the upsert did not wait for the scheduler's lock"
    else:
        producer.join(timeout=30)  # DO NOTHING: it sees the row, still there, and returns at once
    scheduler.execute(delete(AssetDagRunQueue.__table__))
    transaction.commit()
    scheduler.close()
    producer.join(timeout=30)
    assert not producer.is_alive() and not errors, errors
    with Session(postgres_engine) as session:
        left = queued(session)
    if manager is EveryEventAssetManager:
        assert left == {"aigc_evaluate": T0 + dt.timedelta(seconds=2)}
    else:
        assert left == {}  # Airflow 3.3: the second event is consumed by nothing until a third comes


def lock_waiters(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                       "AND datname = current_database()")).scalar()


def wait_for(condition, what: str, deadline_s: float = 30.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_the_methods_it_replaces_are_the_ones_airflow_calls():
    """Airflow 3.4 queues one row per event and calls neither: this fails on that upgrade, to say the class (and
    its setting in every deployment) can go."""
    source = inspect.getsource(AssetManager._queue_dagruns)
    for name in REPLACED:
        assert hasattr(AssetManager, name) and f"cls.{name}(" in source, name
        assert name in vars(EveryEventAssetManager), name
    assert not hasattr(AssetDagRunQueue, "asset_event_id")  # Airflow 3.4's row per event


def test_every_deployment_sets_it():
    """In every deployment's settings (make's and compose's env files, tests/dags/test_task_preload.py checks they
    take them), and in the test stacks'."""
    from aigc_airflow.operations import environment

    (name, value), = ASSET_MANAGER.items()
    for executor in ("LocalExecutor", "CeleryExecutor"):
        assert environment(executor)[name] == value, executor
        env = AirflowStack("asset-manager-check", home=ROOT / "unused", lake_uri="", executor=executor).env
        assert env[name] == value, executor
    module, _, cls = value.rpartition(".")
    assert module == asset_manager.__name__ and getattr(asset_manager, cls) is EveryEventAssetManager
