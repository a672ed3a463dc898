"""aigc_evaluate (stage 5): runs when a candidate's generation run is handed off for evaluation.

    wanted ── claim_partition ── find_generation ── time_on_gpu ── evaluate ── gate_evaluation ── publish_content
                                                                                                   ── release
time_on_gpu times the version's variants on the GPU queue's worker (nothing without a GPU), so the evaluation
recommends per device class; publish_content publishes the day's generations and evaluation and moves production
to the version, unless it is significantly worse than production.
"""

from __future__ import annotations

from airflow.sdk import dag

from aigc_airflow.assets import GENERATED_FOR_EVALUATION
from aigc_airflow.stage_tasks import dag_args, evaluate_tasks, leased_stage, wanted


@dag(dag_id="aigc_evaluate", schedule=GENERATED_FOR_EVALUATION, max_active_runs=4, doc_md=__doc__,
     description="Stage 5: evaluate a candidate's content, gate 5, promote and publish.", **dag_args("evaluate"))
def aigc_evaluate():
    wanted() >> leased_stage(evaluate_tasks())


aigc_evaluate()
