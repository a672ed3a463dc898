"""aigc_pipeline: the nightly AI-generated-content pipeline, one partition per logical date.

    raw drop ─┬─ make_demo_drop ─┐
              └─ wait_for_drop ──┴─ prepare ── gate_curated ── publish_curated ─┐
    ┌───────────────────────────────────────────────────────────────────────────┘
    └─ train (torchrun) ── gate_training ── publish_model ─┐
    ┌──────────────────────────────────────────────────────┘
    └─ register_model (alias candidate) ── build_variants ── gate_deploy ─┐
    ┌──────────────────────────────────────────────────────────────────────┘
    └─ plan_generation ── shards_of ── generate_shard × N (mapped) ── finish_generation ── gate_generate ─┐
    ┌─────────────────────────────────────────────────────────────────────────────────────────────────┘
    └─ evaluate ── gate_evaluation ── publish_content (production → this version; the day's content published)

This file only wires tasks: every task body imports the ``aigc`` core when it runs, so the
scheduler parses this file in milliseconds and with no I/O.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import Asset, CronDataIntervalTimetable, Param, dag, get_current_context, task

from aigc_airflow.evaluate_operator import EvaluateOperator
from aigc_airflow.operators import QualityGateOperator
from aigc_airflow.train_operator import DistributedTrainOperator

# Named, not keyed by the lake's URI: an asset's identity must not change when the lake moves
# (Airflow would mark the old one inactive and fail the producing task).
CURATED = Asset(name="aigc_curated_shapes")
MODEL_CANDIDATE = Asset(name="aigc_model_candidate")
MODEL_DEPLOYABLE = Asset(name="aigc_model_deployable")
GENERATIONS = Asset(name="aigc_generations")
EVALUATIONS = Asset(name="aigc_evaluations")
# Tasks that want an accelerator go to this queue; with one local worker (or LocalExecutor) it is ignored.
GPU_QUEUE = os.environ.get("AIGC_GPU_QUEUE", "default")

PARAMS = {
    "preset": Param("default", enum=["default", "demo"], title="Preset",
                    description="Named configuration: 'demo' is small enough for a laptop in minutes."),
    "synthetic_drop": Param(True, type="boolean", title="Generate a synthetic raw drop",
                            description="On: write a demo drop for this date first. Off: wait for a producer's drop "
                                        "(its _SUCCESS marker) under the raw URI."),
    "raw_uri": Param("", type="string", title="Raw drop root URI",
                     description="Where drops land, e.g. s3://bucket/raw/shapes. Empty: <lake>/raw/shapes."),
    "n_records": Param(None, type=["null", "integer"], minimum=1, maximum=5_000_000, title="Synthetic records",
                       description="Records in the synthetic drop (empty: the preset's)."),
    "resolution": Param(None, type=["null", "integer"], enum=[None, 32, 64, 128, 256], title="Image resolution",
                        description="Side of the square images, in pixels (empty: the preset's)."),
    "dirt_rate": Param(None, type=["null", "number"], minimum=0, maximum=1, title="Dirt rate",
                       description="Fraction of synthetic records with planted defects."),
    "near_dup_threshold": Param(None, type=["null", "number"], minimum=0.05, maximum=1,
                                title="Near-duplicate similarity threshold"),
    "min_rows": Param(None, type=["null", "integer"], minimum=0, title="Gate 1: minimum curated rows"),
    "max_quarantine_ratio": Param(None, type=["null", "number"], minimum=0, maximum=1,
                                  title="Gate 1: maximum quarantined fraction"),
    "train_steps": Param(None, type=["null", "integer"], minimum=1, maximum=1_000_000, title="Training steps",
                         description="Optimizer steps (empty: the preset's)."),
    "nproc": Param(None, type=["null", "integer"], minimum=1, maximum=64, title="Training processes per node",
                   description="torchrun --nproc-per-node: CPU processes here, one per GPU on a GPU worker."),
    "precision": Param(None, type=["null", "string"], enum=[None, "auto", "fp32", "bf16", "fp16"],
                       title="Training precision", description="auto: bf16 on a GPU that has it, else fp32."),
    "max_final_val_loss": Param(None, type=["null", "number"], minimum=0,
                                title="Gate 2: maximum final validation loss"),
    "variant": Param(None, type=["null", "string"], enum=[None, "fp32", "bf16", "pruned", "onnx", "int8"],
                     title="Generation variant", description="A variant that passed gate 3 (empty: the preset's)."),
    "prompts": Param(None, type=["null", "integer"], minimum=1, maximum=1_000_000, title="Demo prompts",
                     description="Held-out captions to generate for when no prompt file was dropped."),
    "generate_shards": Param(None, type=["null", "integer"], minimum=1, maximum=256, title="Generation shards",
                             description="Mapped generate_shard tasks."),
    "budget_fraction": Param(None, type=["null", "number"], minimum=0.01, maximum=1,
                             title="Memory budget fraction", description="Of free device memory, per batch."),
    "budget_mb": Param(None, type=["null", "integer"], minimum=0, title="Memory budget (MiB)",
                       description="A fixed per-batch budget instead of the probe's fraction."),
    "min_alignment": Param(None, type=["null", "number"], minimum=0, maximum=1,
                           title="Gate 5: minimum alignment", description="All-attributes-correct fraction."),
    "max_fid": Param(None, type=["null", "number"], minimum=0, title="Gate 5: maximum Fréchet distance"),
}


def _run_config():
    """(context, typed config, lake, date) for the running task."""
    from aigc_airflow.runtime import open_task_lake, partition_date, pipeline_config

    context = get_current_context()
    return context, pipeline_config(context["params"]), open_task_lake(), partition_date(context)


def _raw_lake(lake, cfg, params):
    from aigc.lake.keys import join
    from aigc_airflow.runtime import open_task_lake

    return open_task_lake(params["raw_uri"]) if params.get("raw_uri") else lake.sub(join("raw", cfg.raw.source))


@dag(
    dag_id="aigc_pipeline",
    description="Nightly AIGC pipeline: prepare → train → deploy → generate → evaluate, gated at each step.",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),  # day D runs once D has ended
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=2,
    params=PARAMS,
    tags=["aigc", "stage-1-prepare", "stage-2-train", "stage-3-deploy", "stage-4-generate", "stage-5-evaluate"],
    default_args={
        "owner": "aigc-platform",
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=15),
    },
    doc_md=__doc__,
)
def aigc_pipeline():
    @task.branch
    def choose_drop() -> str:
        return "make_demo_drop" if get_current_context()["params"]["synthetic_drop"] else "wait_for_drop"

    @task
    def make_demo_drop() -> dict:
        from aigc.prepare import make_raw_drop

        context, cfg, lake, date = _run_config()
        return make_raw_drop(_raw_lake(lake, cfg, context["params"]), date, cfg.raw)

    @task.sensor(poke_interval=300, timeout=6 * 3600, mode="reschedule")
    def wait_for_drop():
        from aigc.lake.keys import join
        from aigc.prepare.drop import SUCCESS, drop_prefix

        context, cfg, lake, date = _run_config()
        return _raw_lake(lake, cfg, context["params"]).exists(join(drop_prefix(date), SUCCESS))

    @task(trigger_rule="none_failed_min_one_success")
    def prepare() -> dict:
        from aigc.prepare import prepare as prepare_drop

        context, cfg, lake, date = _run_config()
        return prepare_drop(_raw_lake(lake, cfg, context["params"]), lake, date, cfg.prepare)

    @task(outlets=[CURATED])
    def publish_curated(prepared: dict) -> dict:
        from aigc.prepare import publish_prepared

        _context, cfg, lake, _date = _run_config()
        return publish_prepared(lake, cfg.prepare.dataset, prepared["date"], prepared["run_id"])

    branch = choose_drop()
    prepared = prepare()
    branch >> [make_demo_drop(), wait_for_drop()] >> prepared
    gate = QualityGateOperator(task_id="gate_curated", gate="curated", prepared=prepared)
    curated = publish_curated(prepared)
    gate >> curated

    @task(outlets=[MODEL_CANDIDATE])
    def publish_model(trained: dict) -> dict:
        from aigc.quality.training import publish_trained

        _context, cfg, lake, _date = _run_config()
        return publish_trained(lake, cfg.model.name, trained["date"], trained["run_id"])

    # A GPU worker serves queue "gpu" in the distributed set-up; with one local worker every queue is served.
    trained = DistributedTrainOperator(task_id="train", curated=curated, queue=GPU_QUEUE,
                                       execution_timeout=timedelta(hours=8))
    gate_training = QualityGateOperator(task_id="gate_training", gate="training", prepared=trained.output)
    published_model = publish_model(trained.output)
    gate_training >> published_model

    @task
    def register_model(_published: dict) -> dict:
        from aigc.registry.deploy import register_trained

        _context, cfg, lake, date = _run_config()
        return register_trained(lake, cfg.model.name, date)

    @task
    def build_variants(registered: dict) -> dict:
        from aigc.registry.deploy import build_variants as build

        _context, cfg, lake, _date = _run_config()
        built = build(lake, cfg.model.name, registered["version"], cfg.deploy)
        keep = ("size_bytes", "latency_ms_b1", "pixel_mae_vs_fp32")  # XCom: numbers, not weights
        return {**built, "variants": {k: {m: v[m] for m in keep} for k, v in built["variants"].items()}}

    registered = register_model(published_model)
    gate_deploy = QualityGateOperator(task_id="gate_deploy", gate="deploy", prepared=registered,
                                      outlets=[MODEL_DEPLOYABLE])
    build_variants(registered) >> gate_deploy

    @task
    def plan_generation() -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from aigc.generate.prompts import BadPrompts
        from aigc.generate.run import VariantNotEligible
        from aigc.generate.run import plan_generation as plan_run
        from aigc_airflow.runtime import dag_run_scoped_id

        context, cfg, lake, date = _run_config()
        try:
            return plan_run(lake, date, cfg, run_id=dag_run_scoped_id(context, cfg, "generate"),
                            demo_prompts=context["params"]["synthetic_drop"])
        except (BadPrompts, VariantNotEligible) as e:  # a retry would find the same: fail now, say why
            raise AirflowFailException(str(e)) from e

    @task
    def shards_of(plan: dict) -> list[dict]:
        return plan["shards"]  # mapping needs a list-valued XCom of its own

    @task(queue=GPU_QUEUE, retries=3, max_active_tis_per_dagrun=4)
    def generate_shard(plan: dict, shard: dict) -> dict:
        from aigc.generate.run import generate_shard as generate

        _context, cfg, lake, _date = _run_config()
        entry = generate(lake, plan, shard, cfg)
        return {k: entry[k] for k in ("shard", "rows", "generated", "refused", "cached")}

    @task
    def finish_generation(plan: dict, _shards: list) -> dict:
        from aigc.generate.run import finish_generation as finish

        _context, cfg, lake, _date = _run_config()
        return finish(lake, plan, cfg)

    @task(outlets=[GENERATIONS, EVALUATIONS])
    def publish_content(evaluated: dict) -> dict:
        from aigc.quality.evaluation import promote_and_publish

        _context, cfg, lake, _date = _run_config()
        return promote_and_publish(lake, evaluated, cfg)

    plan = plan_generation()
    gate_deploy >> plan
    shards = generate_shard.partial(plan=plan).expand(shard=shards_of(plan))
    finished = finish_generation(plan, shards)
    gate_generate = QualityGateOperator(task_id="gate_generate", gate="generate", prepared=finished)
    evaluate = EvaluateOperator(task_id="evaluate", generation=finished)
    evaluated = evaluate.output
    gate_generate >> evaluate
    gate_evaluation = QualityGateOperator(task_id="gate_evaluation", gate="evaluation", prepared=evaluated)
    gate_evaluation >> publish_content(evaluated)


aigc_pipeline()
