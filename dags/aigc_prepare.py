"""aigc_prepare (stage 1): nightly (AIGC_NIGHTLY_CRON), one partition per logical date; the DAG to backfill.

    claim_partition ── choose_drop ─┬─ make_demo_drop ─┐
                                    └─ wait_for_drop ──┴─ plan_drop ── prepare_part × N (mapped over the
    drop's parts) ── merge_parts ── gate_curated ── publish_curated ── release
publish_curated updates the asset aigc_curated, which starts aigc_train, except in a backfill:
`airflow backfill create --dag-id aigc_prepare` re-curates a range of dates and trains nothing.
"""

from __future__ import annotations

from airflow.sdk import dag

from aigc_airflow.runtime import nightly_schedule
from aigc_airflow.stage_tasks import dag_args, leased_stage, prepare_tasks


@dag(dag_id="aigc_prepare", schedule=nightly_schedule(),  # D runs once D ended (AIGC_NIGHTLY_CRON)
     max_active_runs=2, doc_md=__doc__, description="Stage 1: the date's raw drop → curated partition (gate 1).",
     **dag_args("prepare"))
def aigc_prepare():
    leased_stage(prepare_tasks())


aigc_prepare()
