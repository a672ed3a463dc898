"""An asset manager under which no asset event waits for the next one (Airflow 3.3; ``[core] asset_manager_class``).

Airflow 3.3 queues a DAG that an asset schedules as one row per (asset, DAG) in ``asset_dag_run_queue``, and the
row keeps the ``created_at`` of the event that made it. A second event of the same asset that comes before the
scheduler has made the run finds the row there and leaves it as it is. The scheduler then makes a run that
consumes the events up to that ``created_at`` (the first one only) and deletes the row: the second event is
consumed by nothing until a third event of the asset comes, which for the nightly chain may be never. Seen in the
end-to-end suite: aigc_pipeline's hand-off for evaluation (an event that starts nothing) and the nightly chain's
came seconds apart, and aigc_evaluate never ran for the chain's.

Here every event that queues a DAG moves its row's ``created_at`` forward to now (never back), so the run the
scheduler makes next consumes every event queued before it; the stage DAGs then act on the newest that asks for
the chain to go on (aigc_airflow.runtime.newest_event). One upsert, in the transaction that records the event:
on PostgreSQL it waits for the scheduler's lock on the row (``FOR UPDATE``) and, once the scheduler has consumed
and deleted it, queues the event afresh. On SQLite (the laptop default) one window stays open: an event committed
between the scheduler's read of the queue and its first write (milliseconds) still waits for the next event.

Airflow 3.4 queues one row per event (apache/airflow#70972) and no longer calls the two methods replaced here:
under it this class is Airflow's own manager (tests/plugins/test_asset_manager.py fails on the upgrade, to say
this module can go).
"""

from __future__ import annotations

from airflow._shared.timezones import timezone
from airflow.assets.manager import AssetManager
from airflow.models.asset import AssetDagRunQueue
from airflow.utils.sqlalchemy import get_dialect_name
from sqlalchemy import func

REPLACED = ("_queue_dagruns_nonpartitioned_postgres", "_queue_dagruns_nonpartitioned_slow_path")
"""What Airflow 3.3's AssetManager._queue_dagruns calls to queue the DAGs an event schedules."""


class EveryEventAssetManager(AssetManager):
    @classmethod
    def _queue_dagruns_nonpartitioned_postgres(cls, asset_id, dags_to_queue, session) -> None:
        from sqlalchemy.dialects.postgresql import insert

        _queue_and_advance(insert, func.greatest, asset_id, dags_to_queue, session)

    @classmethod
    def _queue_dagruns_nonpartitioned_slow_path(cls, asset_id, dags_to_queue, session) -> None:
        if get_dialect_name(session) != "sqlite":  # MySQL: Airflow's own (not a backend this project deploys)
            return super()._queue_dagruns_nonpartitioned_slow_path(asset_id, dags_to_queue, session)
        from sqlalchemy.dialects.sqlite import insert

        _queue_and_advance(insert, func.max, asset_id, dags_to_queue, session)  # SQLite's max(a, b): the later
        return None


def _queue_and_advance(insert, later_of, asset_id: int, dags_to_queue, session) -> None:
    """Queue each DAG for the asset, or move its queued row's created_at forward to now."""
    if not dags_to_queue:
        return
    now = timezone.utcnow()
    # In dag_id order: two events of the asset queueing the same DAGs lock their rows in one order (no deadlock).
    stmt = insert(AssetDagRunQueue).values([{"asset_id": asset_id, "target_dag_id": dag_id, "created_at": now}
                                            for dag_id in sorted({dag.dag_id for dag in dags_to_queue})])
    session.execute(stmt.on_conflict_do_update(
        index_elements=[AssetDagRunQueue.asset_id, AssetDagRunQueue.target_dag_id],
        set_={"created_at": later_of(AssetDagRunQueue.created_at, stmt.excluded.created_at)}))
