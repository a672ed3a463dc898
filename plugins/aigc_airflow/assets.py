"""The assets that link the stage DAGs: each stage's publication is the next one's schedule.

    aigc_prepare ─ CURATED ─▶ aigc_train ─ MODEL_CANDIDATE ─▶ aigc_deploy ─ MODEL_DEPLOYABLE ─▶ aigc_generate
    PROMPT_FILES (a watcher on the lake's prompts/ prefix) ─────────────────────────────────────▶ aigc_generate
    aigc_generate ─ GENERATED_FOR_EVALUATION ─▶ aigc_evaluate ─ GENERATIONS, EVALUATIONS
    aigc_generate (production) ─ GENERATIONS

Named, not keyed by the lake's URI or a dataset: an asset's identity must not change when the lake moves or another
workload runs (Airflow would mark the old one inactive and fail the producing task). Every event's ``extra`` says
what was published (date, run id, version, URIs) and whether it starts the next stage (``chain``).
"""

from __future__ import annotations

import os

from airflow.sdk import Asset, AssetWatcher

from aigc.config.form import STAGES
from aigc_airflow.runtime import access_policy
from aigc_airflow.triggers import PromptFileTrigger


def watched_workloads() -> list[str]:
    """The workloads whose prompt files the watcher claims: those the deployment allows (its default among them)."""
    return list(access_policy().workloads)


ALL_STAGES_DAG = "aigc_pipeline"
"""The DAG that runs every stage in one run (make demo, a one-off run of a date): its events start nothing."""
STAGE_DAGS = {stage: f"aigc_{stage}" for stage in STAGES}
"""Each stage's own DAG (dags/aigc_<stage>.py)."""
AIGC_DAGS = frozenset({*STAGE_DAGS.values(), ALL_STAGES_DAG})
"""The DAGs whose tasks publish the pipeline's asset events."""

CURATED = Asset(name="aigc_curated")
MODEL_CANDIDATE = Asset(name="aigc_model_candidate")
MODEL_DEPLOYABLE = Asset(name="aigc_model_deployable")
GENERATED_FOR_EVALUATION = Asset(name="aigc_generations_for_evaluation")
GENERATIONS = Asset(name="aigc_generations")
EVALUATIONS = Asset(name="aigc_evaluations")
PROMPT_FILES = Asset(name="aigc_prompt_files", watchers=[
    # How often the triggerer lists the prompt prefixes (seconds; AIGC_PROMPT_POLL_S): a list call a poll.
    AssetWatcher(name="aigc_prompt_files_in_the_lake", trigger=PromptFileTrigger(
        workloads=watched_workloads(), poll_s=float(os.environ.get("AIGC_PROMPT_POLL_S", "15")))),
])
