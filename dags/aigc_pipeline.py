"""aigc_pipeline: the nightly AI-generated-content pipeline, one partition per logical date.

    claim_partition (setup: this run's lease on the date; a second run of the date waits here)
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
    release_partition (teardown: runs whatever happened, gives the date back)

This file only wires tasks: every task body imports the ``aigc`` core when it runs, so the
scheduler parses this file in milliseconds and with no I/O.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta

import pendulum
from airflow.sdk import Asset, CronDataIntervalTimetable, Param, PokeReturnValue, dag, get_current_context, task

from aigc.config import DATE_LEASE_TTL
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
# How long a run waits for another run of its date to finish: past the lease's expiry.
PARTITION_WAIT = DATE_LEASE_TTL + timedelta(hours=1)
log = logging.getLogger(__name__)

# The form's preset when a user presses Trigger unchanged (and for scheduled runs): a deployment
# sets it (a laptop: demo; a CI cluster: smoke); the full-size "default" otherwise.
DEFAULT_PRESET = os.environ.get("AIGC_DEFAULT_PRESET", "default")
DATA, TRAINING, SERVING, GATES = "Data", "Training", "Deployment and generation", "Quality gates"
PRESETS_VALUE = {None: "(the preset's value)"}  # what an empty choice means, instead of a bare "null"

PARAMS = {
    "preset": Param(DEFAULT_PRESET, enum=["default", "demo", "smoke"], title="Preset",
                    description="Named configuration: 'demo' is small enough for a laptop in minutes; 'smoke' checks "
                                "a deployment end to end in about one (its model is not meant to be good). "
                                "The fields below override it."),
    "synthetic_drop": Param(True, type="boolean", title="Generate a synthetic raw drop", section=DATA,
                            description="On: write a demo drop for this date first. Off: wait for a producer's drop "
                                        "(its _SUCCESS marker) under the raw URI."),
    "raw_uri": Param(None, type=["null", "string"], title="Raw drop root URI", section=DATA,
                     description="Where drops land, e.g. s3://bucket/raw/shapes. Empty: <lake>/raw/shapes."),
    "n_records": Param(None, type=["null", "integer"], minimum=1, maximum=5_000_000, title="Synthetic records",
                       section=DATA, description="Records in the synthetic drop (empty: the preset's)."),
    "resolution": Param(None, type=["null", "integer"], enum=[None, 32, 64, 128, 256], values_display=PRESETS_VALUE,
                        title="Image resolution", section=DATA,
                        description="Side of the square images, in pixels (empty: the preset's)."),
    "dirt_rate": Param(None, type=["null", "number"], minimum=0, maximum=1, title="Dirt rate", section=DATA,
                       description="Fraction of synthetic records with planted defects (empty: the preset's)."),
    "near_dup_threshold": Param(None, type=["null", "number"], minimum=0.05, maximum=1, section=DATA,
                                title="Near-duplicate similarity threshold",
                                description="Caption Jaccard similarity above which records are near duplicates."),
    "train_steps": Param(None, type=["null", "integer"], minimum=1, maximum=1_000_000, title="Training steps",
                         section=TRAINING, description="Optimizer steps (empty: the preset's)."),
    "nproc": Param(None, type=["null", "integer"], minimum=1, maximum=64, title="Training processes per node",
                   section=TRAINING,
                   description="torchrun --nproc-per-node: CPU processes here, one per GPU on a GPU worker."),
    "precision": Param(None, type=["null", "string"], enum=[None, "auto", "fp32", "bf16", "fp16"], section=TRAINING,
                       values_display=PRESETS_VALUE, title="Training precision",
                       description="auto: bf16 on a GPU that has it, else fp32."),
    "variant": Param(None, type=["null", "string"], enum=[None, "fp32", "bf16", "pruned", "onnx", "int8"],
                     values_display=PRESETS_VALUE, section=SERVING, title="Generation variant",
                     description="A variant that passed gate 3 (empty: the preset's)."),
    "prompts": Param(None, type=["null", "integer"], minimum=1, maximum=1_000_000, title="Demo prompts",
                     section=SERVING,
                     description="Held-out captions to generate for when no prompt file was dropped."),
    "generate_shards": Param(None, type=["null", "integer"], minimum=1, maximum=256, title="Generation shards",
                             section=SERVING, description="Mapped generate_shard tasks."),
    "budget_fraction": Param(None, type=["null", "number"], minimum=0.01, maximum=1, section=SERVING,
                             title="Memory budget fraction", description="Of free device memory, per batch."),
    "budget_mb": Param(None, type=["null", "integer"], minimum=0, title="Memory budget (MiB)", section=SERVING,
                       description="A fixed per-batch budget instead of the probe's fraction."),
    "min_rows": Param(None, type=["null", "integer"], minimum=0, title="Gate 1: minimum curated rows", section=GATES),
    "max_quarantine_ratio": Param(None, type=["null", "number"], minimum=0, maximum=1, section=GATES,
                                  title="Gate 1: maximum quarantined fraction"),
    "max_final_val_loss": Param(None, type=["null", "number"], minimum=0, section=GATES,
                                title="Gate 2: maximum final validation loss"),
    "eval_prompts": Param(None, type=["null", "integer"], minimum=1, maximum=1_000_000, section=GATES,
                          title="Gate 5: evaluation prompts",
                          description="Prompts every configuration generates for the Pareto grid and the regression "
                                      "check (648: every attribute combination once); more narrows the intervals."),
    "min_alignment": Param(None, type=["null", "number"], minimum=0, maximum=1, section=GATES,
                           title="Gate 5: minimum alignment",
                           description="All-attributes-correct fraction; fails only when significantly below."),
    "min_checker_accuracy": Param(None, type=["null", "number"], minimum=0, maximum=1, section=GATES,
                                  title="Gate 5: minimum checker accuracy",
                                  description="The checker's own accuracy on its reference set and on the day's "
                                              "real images; fails only when significantly below."),
    "max_fid": Param(None, type=["null", "number"], minimum=0, title="Gate 5: maximum Fréchet distance",
                     section=GATES),
    "max_regression": Param(None, type=["null", "number"], minimum=0, maximum=1, section=GATES,
                            title="Gate 5: maximum regression against production",
                            description="Alignment points the candidate may lose to production on the same prompts "
                                        "and seeds; fails only when the loss is significantly larger."),
}


def _run_config(hold: bool = True):
    """(context, typed config, lake, date) for the running task.

    ``hold`` renews this run's lease on the date first, so a run that lost it (another run
    took it over after it expired) fails here, before it writes anything.
    """
    from airflow.sdk.exceptions import AirflowFailException

    from aigc.lake.lease import LeaseHeld
    from aigc_airflow.runtime import hold_partition, open_task_lake, partition_date, pipeline_config

    context = get_current_context()
    lake, date = open_task_lake(), partition_date(context)
    if hold:
        try:
            hold_partition(context, lake, date)
        except LeaseHeld as e:
            raise AirflowFailException(f"this run no longer holds its date: {e}") from e
    return context, pipeline_config(context["params"]), lake, date


def _announced(context, summary: dict) -> dict:
    """``summary``, after writing what it published into this task's asset events."""
    from aigc_airflow.runtime import annotate_outlets

    annotate_outlets(context, summary)
    return summary


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
    # One run at a time writes a date: a second run of the same date (a manual run beside the
    # scheduled one, a backfill over a running date, another deployment on the same lake)
    # waits here until the first releases the date, instead of interleaving its publishes.
    @task.sensor(poke_interval=60, timeout=PARTITION_WAIT.total_seconds(), mode="reschedule")
    def claim_partition() -> PokeReturnValue:
        from aigc.lake.lease import LeaseHeld
        from aigc_airflow.runtime import hold_partition

        context, _cfg, lake, date = _run_config(hold=False)
        try:
            return PokeReturnValue(is_done=True, xcom_value=hold_partition(context, lake, date))
        except LeaseHeld as e:
            log.info("%s", e)
            return PokeReturnValue(is_done=False)

    @task
    def release_partition() -> bool:
        from aigc_airflow.runtime import partition_lease

        context, _cfg, lake, date = _run_config(hold=False)
        return partition_lease(context, lake, date).release(context["dag_run"].run_id)

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

        context, cfg, lake, _date = _run_config()
        return _announced(context, publish_prepared(lake, cfg.prepare.dataset, prepared["date"], prepared["run_id"]))

    claim = claim_partition()
    branch = choose_drop()
    claim >> branch
    prepared = prepare()
    branch >> [make_demo_drop(), wait_for_drop()] >> prepared
    gate = QualityGateOperator(task_id="gate_curated", gate="curated", prepared=prepared)
    curated = publish_curated(prepared)
    gate >> curated

    @task(outlets=[MODEL_CANDIDATE])
    def publish_model(trained: dict) -> dict:
        from aigc.quality.training import publish_trained

        context, cfg, lake, _date = _run_config()
        return _announced(context, publish_trained(lake, cfg.model.name, trained["date"], trained["run_id"]))

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
    def plan_generation(registered: dict) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from aigc.generate.prompts import BadPrompts
        from aigc.generate.run import VariantNotEligible
        from aigc.generate.run import plan_generation as plan_run
        from aigc_airflow.runtime import dag_run_scoped_id

        context, cfg, lake, date = _run_config()
        try:
            # This run's version, not the `candidate` alias: a concurrent run of another date (a backfill
            # with --max-active-runs 2) registers its own model and moves the alias meanwhile.
            return plan_run(lake, date, cfg, run_id=dag_run_scoped_id(context, cfg, "generate"),
                            demo_prompts=context["params"]["synthetic_drop"], model_ref=registered["version"])
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

        context, cfg, lake, _date = _run_config()
        return _announced(context, promote_and_publish(lake, evaluated, cfg))

    plan = plan_generation(registered)
    gate_deploy >> plan
    shards = generate_shard.partial(plan=plan).expand(shard=shards_of(plan))
    finished = finish_generation(plan, shards)
    gate_generate = QualityGateOperator(task_id="gate_generate", gate="generate", prepared=finished)
    evaluate = EvaluateOperator(task_id="evaluate", generation=finished)
    evaluated = evaluate.output
    gate_generate >> evaluate
    gate_evaluation = QualityGateOperator(task_id="gate_evaluation", gate="evaluation", prepared=evaluated)
    gate_evaluation >> publish_content(evaluated) >> release_partition().as_teardown(setups=claim)


aigc_pipeline()
