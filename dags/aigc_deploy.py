"""aigc_deploy (stage 3): runs when a candidate model is published.

    wanted ── claim_partition ── register_model (alias candidate) ── build_variants ── gate_deploy ── release
gate_deploy updates aigc_model_deployable (with the version), which starts aigc_generate.
"""

from __future__ import annotations

from airflow.sdk import dag

from aigc_airflow.assets import MODEL_CANDIDATE
from aigc_airflow.stage_tasks import dag_args, deploy_tasks, leased_stage, wanted


@dag(dag_id="aigc_deploy", schedule=MODEL_CANDIDATE, max_active_runs=4, doc_md=__doc__,
     description="Stage 3: register the candidate, build its variants, smoke-test them (gate 3).",
     **dag_args("deploy"))
def aigc_deploy():
    wanted() >> leased_stage(deploy_tasks())


aigc_deploy()
