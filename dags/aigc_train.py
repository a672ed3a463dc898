"""aigc_train (stage 2): runs when a curated partition is published; trains on the window ending at its date.

    wanted ── claim_partition ── training_nodes ─┬─ train (torchrun, node 0) ── gate_training ── publish_model
                                                └─ train_node × (nodes − 1), mapped: the other nodes
    ── release
publish_model updates aigc_model_candidate, which starts aigc_deploy. Started by a backfill's or by
aigc_pipeline's publication, it does nothing (``wanted``). Retrain on a window by hand: trigger it with a
logical date and the window's length (window_days).
"""

from __future__ import annotations

from airflow.sdk import dag

from aigc_airflow.assets import CURATED
from aigc_airflow.stage_tasks import dag_args, leased_stage, train_tasks, wanted


@dag(dag_id="aigc_train", schedule=CURATED, max_active_runs=4, doc_md=__doc__,
     description="Stage 2: torchrun on the curated window → a candidate model (gate 2).", **dag_args("train"))
def aigc_train():
    wanted() >> leased_stage(train_tasks())


aigc_train()
