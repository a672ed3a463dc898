"""aigc_generate (stage 4): content on demand.

Runs for a newly deployable model (its version, for evaluation), for a prompt file dropped in the lake at
prompts/<dataset>/dt=<date>/prompts.jsonl (a watcher claims it; the production model), and from the UI
(choose the model alias and a prompt file's URI).

    wanted ── claim_partition ── plan_generation ── generate_shard × N ── finish_generation ── gate_generate
                                                 └─ generate_shard_cpu × N ─┘  (a variant that serves on the CPU)
      ── route_content ─┬─ publish_generations (production: the content is published after gate 4)
                        └─ hand_off_for_evaluation (a candidate: aigc_evaluate judges it, then publishes)
    release_partition
"""

from __future__ import annotations

from airflow.sdk import dag

from aigc_airflow.assets import MODEL_DEPLOYABLE, PROMPT_FILES
from aigc_airflow.stage_tasks import dag_args, generate_tasks, leased_stage, wanted


@dag(dag_id="aigc_generate", schedule=(MODEL_DEPLOYABLE | PROMPT_FILES), max_active_runs=4, doc_md=__doc__,
     description="Stage 4: generate for a deployed model, a dropped prompt file or a request (gate 4).",
     **dag_args("generate"))
def aigc_generate():
    wanted() >> leased_stage(generate_tasks())


aigc_generate()
