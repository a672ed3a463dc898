"""aigc_pipeline: every stage for one date in one run (make demo, a one-off run of a date by hand).

    claim_partition (setup: this run's lease on the date; another run of the date waits here)
    stage 1  choose_drop ─┬─ make_demo_drop ─┐
                          └─ wait_for_drop ──┴─ plan_drop ── prepare_part × N (mapped) ── merge_parts ── gate_curated
                                                 ── publish_curated
    stage 2  training_nodes ─┬─ train (torchrun, node 0) ── gate_training ── publish_model
                             └─ train_node × (nodes − 1) (mapped: the other nodes, joining through the lake)
    stage 3  register_model (alias candidate) ── build_variants ── gate_deploy
    stage 4  plan_generation ── generate_shard × N (mapped; GPU queue, or generate_shard_cpu for a variant that
             serves on the CPU) ── finish_generation ── gate_generate ── route_content
             ─┬─ hand_off_for_evaluation (a candidate: this run's model)
              └─ publish_generations (production only: skipped here)
    stage 5  find_generation ── time_on_gpu ── evaluate ── gate_evaluation ── publish_content (production → this
             version)
    release_partition (teardown: runs whatever happened, gives the date back)

The same task groups as the stage DAGs (aigc_prepare … aigc_evaluate, which run nightly as a chain linked
by assets), built once in aigc_airflow.stage_tasks. Its asset events start no stage DAG: it runs them all.
Not scheduled: the nightly work is the chain's.
"""

from __future__ import annotations

from airflow.sdk import dag

from aigc_airflow.assets import ALL_STAGES_DAG
from aigc_airflow.stage_tasks import (
    STAGE_ORDER,
    dag_args,
    deploy_tasks,
    evaluate_tasks,
    generate_tasks,
    leased,
    prepare_tasks,
    train_tasks,
)


@dag(dag_id=ALL_STAGES_DAG, schedule=None, max_active_runs=2, doc_md=__doc__,
     description="Every stage for one date: prepare → train → deploy → generate → evaluate, gated at each step.",
     **dag_args(*STAGE_ORDER))
def aigc_pipeline():
    stages = [build() for build in (prepare_tasks, train_tasks, deploy_tasks, generate_tasks, evaluate_tasks)]
    for before, after in zip(stages, stages[1:], strict=False):
        before.last >> after.first
    leased(stages[0].first, [s.last for s in stages[-1:]] + [t for s in stages for t in s.others])


aigc_pipeline()
