"""Each stage's tasks, defined once: the stage DAGs (``dags/aigc_<stage>.py``) and the all-stages
``aigc_pipeline`` build them from here.

Every task body calls the core's stage API (aigc.stages), importing it when it runs, so the
dag-processor parses the DAG files in milliseconds and with no I/O. A stage finds its input the
same way in every DAG: in the asset event that started its run (a stage DAG), else in the
upstream stage's task of the same run (aigc_pipeline), else in the lake or the form.

Each builder returns the stage's tasks for chaining (``Ends``); ``leased`` wraps a DAG's stages in
the date's lease (a setup that claims it, a teardown that gives it back).
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import Any, NamedTuple

import pendulum
from airflow.sdk import PokeReturnValue, TaskGroup, get_current_context, task

from aigc_airflow.assets import (
    CURATED,
    EVALUATIONS,
    GENERATED_FOR_EVALUATION,
    GENERATIONS,
    MODEL_CANDIDATE,
    MODEL_DEPLOYABLE,
)
from aigc_airflow.evaluate_operator import EvaluateOperator
from aigc_airflow.operations import DATE_LEASE_TTL, DEFAULT_TASK_TIMEOUT, MAX_RETRY_DELAY, task_timeout
from aigc_airflow.operators import QualityGateOperator
from aigc_airflow.params import params_for
from aigc_airflow.runtime import newest_event, run_params
from aigc_airflow.train_operator import DistributedTrainOperator

log = logging.getLogger(__name__)
# Tasks that want an accelerator go to this queue; with one local worker (or LocalExecutor) it is ignored.
GPU_QUEUE = os.environ.get("AIGC_GPU_QUEUE", "default")
# …and take a slot of this pool (one slot per GPU: `airflow pools set gpu <n> …`, made by `make install`, the
# compose file's airflow-init and the test deployments), so they wait their turn instead of sharing a device.
GPU_POOL = os.environ.get("AIGC_GPU_POOL", "gpu")
# Generation with a variant that runs on the CPU goes here, in Airflow's default pool.
CPU_QUEUE = os.environ.get("AIGC_CPU_QUEUE", "default")
CPU_POOL = "default_pool"
# How long a run waits for another run of its date to finish: past the lease's expiry.
PARTITION_WAIT = DATE_LEASE_TTL + timedelta(hours=1)
STAGE_ORDER = ("prepare", "train", "deploy", "generate", "evaluate")


def dag_args(*stages: str) -> dict:
    """What every aigc DAG shares (retries, timeouts, start date) and its trigger form: ``stages``' fields."""
    return {
        "start_date": pendulum.datetime(2026, 1, 1, tz="UTC"),
        "catchup": False,
        # Unpaused from the start: the nightly chain runs with no user action (and aigc_pipeline, which has no
        # schedule, runs what a user triggers instead of queueing it).
        "is_paused_upon_creation": False,
        "params": params_for(*stages),
        "tags": ["aigc", *(f"stage-{n}-{s}" for n, s in enumerate(STAGE_ORDER, start=1) if s in stages)],
        "default_args": {
            "owner": "aigc-platform",
            "retries": 2,
            "retry_delay": timedelta(minutes=1),
            "retry_exponential_backoff": True,
            "max_retry_delay": MAX_RETRY_DELAY,
            "execution_timeout": DEFAULT_TASK_TIMEOUT,  # the heavy tasks set theirs (aigc_airflow.operations)
        },
    }


class Ends(NamedTuple):
    """A stage's entry task, the task the next stage follows, and any other task that ends it (a branch)."""

    first: Any
    last: Any
    others: tuple = ()


def run_config(hold: bool = True):
    """(context, typed config, lake, date) for the running task.

    ``hold`` renews this run's lease on the date first, so a run that lost it (another run took it over
    after it expired) fails here, before it writes anything; every task that writes does so.
    """
    from aigc_airflow.runtime import hold_partition_or_fail, open_task_lake, partition_date, pipeline_config, run_params

    context = get_current_context()
    cfg = pipeline_config(run_params(context))  # first: a refused trigger reads and writes nothing
    lake = open_task_lake()
    if hold:
        hold_partition_or_fail(context, lake)
    return context, cfg, lake, partition_date(context)


def announced(context, summary: dict) -> dict:
    """``summary``, after writing what it published into this task's asset events."""
    from aigc_airflow.runtime import annotate_outlets

    annotate_outlets(context, summary)
    return summary


# -- the date's lease ----------------------------------------------------------------------------------
LEASE_POKE_S = float(os.environ.get("AIGC_LEASE_POKE_S", "60"))
"""How often a run waiting for its date asks again (seconds): each ask is a task start (about a second of CPU), and
a lease held by a nightly chain lasts minutes. Test deployments ask more often (``AirflowStack``)."""


def leased(first, ends: list):
    """claim_partition >> first … ends >> release_partition: one run at a time writes a date. A second run of
    the date (a manual run beside the scheduled one, another stage's run, a backfill over a running date)
    waits in claim_partition until the first releases it, instead of interleaving its publishes."""

    @task.sensor(poke_interval=LEASE_POKE_S, timeout=PARTITION_WAIT.total_seconds(), mode="reschedule",
                 execution_timeout=task_timeout("claim_partition"))
    def claim_partition() -> PokeReturnValue:
        from aigc.lake.lease import LeaseHeld
        from aigc_airflow.runtime import hold_partition

        context, _cfg, lake, date = run_config(hold=False)
        try:
            return PokeReturnValue(is_done=True, xcom_value=hold_partition(context, lake, date))
        except LeaseHeld as e:
            log.info("%s", e)
            return PokeReturnValue(is_done=False)

    @task
    def release_partition() -> bool:
        from aigc_airflow.runtime import lease_owner, open_task_lake, partition_date, partition_lease

        # Not run_config: giving the date back needs no form value, and must not fail if the deployment's limits
        # changed while the run held it (the lease would stay taken until it expires).
        context = get_current_context()
        return partition_lease(open_task_lake(), partition_date(context)).release(lease_owner(context))

    claim = claim_partition()
    claim >> first
    ends >> release_partition().as_teardown(setups=claim)
    return claim


def leased_stage(ends: Ends):
    """A stage DAG's stage inside the date's lease."""
    return leased(ends.first, [ends.last, *ends.others])


@task.short_circuit
def wanted() -> bool:
    """A stage DAG started by asset events runs only if one of them asks for the chain to go on: a backfill's
    or aigc_pipeline's publications start nothing (see runtime.starts_the_chain). A run started for dropped
    prompt files acknowledges them first."""
    from aigc_airflow.runtime import triggering_events

    context = get_current_context()
    events = triggering_events(context)
    if events and not any(e["extra"].get("chain", True) for e in events):
        log.info("started by %d event(s) of backfills or of aigc_pipeline: nothing to do", len(events))
        return False
    _acknowledge_prompt_files(context, events)
    return True


def _acknowledge_prompt_files(context, events: list[dict]) -> None:
    """Tell the watcher that the prompt files this run was started for reached Airflow (else it fires again)."""
    from aigc.generate.prompts import acknowledge_prompt_file
    from aigc_airflow.runtime import lease_owner, open_task_lake

    files = [e["extra"] for e in events if e["extra"].get("prompts_key") and e["extra"].get("sha256")]
    lake = open_task_lake() if files else None
    for f in files:
        acknowledge_prompt_file(lake, f["prompts_key"], f["sha256"], lease_owner(context))


# -- stage 1 -------------------------------------------------------------------------------------------
def _raw_lake(lake, cfg, params):
    """The drop's root: a producer's (the form's raw URI, else <lake>/raw/<source>), only ever read; or, for a
    synthetic drop (the demo and smoke presets), <lake>/raw/_synthetic/<source>."""
    from aigc.prepare.drop import raw_root
    from aigc_airflow.runtime import open_task_lake

    return raw_root(lake, cfg.raw.drop, cfg.raw.source, params.get("raw_uri"), open_task_lake)


def prepare_tasks():
    with TaskGroup("stage_1_prepare", prefix_group_id=False, tooltip="Stage 1: prepare the date's raw drop"):

        @task.branch
        def choose_drop() -> str:
            """A synthetic drop (demo, smoke) is written first; a producer's is waited for, never written."""
            _context, cfg, _lake, _date = run_config(hold=False)
            return "make_demo_drop" if cfg.raw.drop == "synthetic" else "wait_for_drop"

        @task
        def make_demo_drop() -> dict:
            from aigc.stages import PREPARE

            context, cfg, lake, date = run_config()
            return PREPARE.make_raw(_raw_lake(lake, cfg, run_params(context)), date, cfg)

        @task.sensor(poke_interval=300, timeout=6 * 3600, mode="reschedule")
        def wait_for_drop():
            from aigc.lake.keys import join
            from aigc.prepare.drop import SUCCESS, drop_prefix

            context, cfg, lake, date = run_config()
            return _raw_lake(lake, cfg, run_params(context)).exists(join(drop_prefix(date), SUCCESS))

        @task(trigger_rule="none_failed_min_one_success")
        def plan_drop() -> dict:
            """Cut the drop into the run's parts (``prepare.parts``), each a mapped task below."""
            from aigc.stages import PREPARE
            from aigc_airflow.runtime import dag_run_scoped_id

            context, cfg, lake, date = run_config()
            return PREPARE.plan(_raw_lake(lake, cfg, run_params(context)), lake, date, cfg,
                                run_id=dag_run_scoped_id(context, cfg, "prepare"))

        @task
        def parts_of(plan: dict) -> list[dict]:
            return plan["parts"]  # mapping needs a list-valued XCom of its own

        @task(execution_timeout=task_timeout("prepare_part"))
        def prepare_part(plan: dict, part: dict) -> dict:
            """Decode, verify, normalise and sign one part's records (any Celery worker; a retry redoes the part)."""
            from aigc.stages import PREPARE

            context, cfg, lake, _date = run_config()
            done = PREPARE.part(_raw_lake(lake, cfg, run_params(context)), lake, plan, part, cfg)
            return {k: done[k] for k in ("index", "lines", "candidates", "rejected", "seconds")}

        @task(execution_timeout=task_timeout("merge_parts"))
        def merge_parts(plan: dict, _parts: list) -> dict:
            """Deduplicate the parts in drop order and write the curated shards and the quarantine."""
            from aigc.stages import PREPARE

            context, cfg, lake, _date = run_config()
            return PREPARE.merge(_raw_lake(lake, cfg, run_params(context)), lake, plan, cfg)

        @task(outlets=[CURATED])
        def publish_curated(prepared: dict) -> dict:
            from aigc.stages import PREPARE

            context, cfg, lake, _date = run_config()
            return announced(context, PREPARE.publish(lake, cfg, prepared))

        branch = choose_drop()
        plan = plan_drop()
        branch >> [make_demo_drop(), wait_for_drop()] >> plan
        prepared = merge_parts(plan, prepare_part.partial(plan=plan).expand(part=parts_of(plan)))
        gate = QualityGateOperator(task_id="gate_curated", gate="curated", prepared=prepared)
        published = publish_curated(prepared)
        gate >> published
    return Ends(branch, published)


# -- stage 2 -------------------------------------------------------------------------------------------
def train_tasks():
    with TaskGroup("stage_2_train", prefix_group_id=False, tooltip="Stage 2: train on the curated window"):

        @task(outlets=[MODEL_CANDIDATE])
        def publish_model(trained: dict) -> dict:
            from aigc.stages import TRAIN

            context, cfg, lake, _date = run_config()
            return announced(context, TRAIN.publish(lake, cfg, trained))

        @task
        def training_nodes() -> list[int]:
            """Nodes 1…N-1 of the form's "Training nodes" (none for one node): each a ``train_node`` task."""
            _context, cfg, _lake, _date = run_config(hold=False)
            return list(range(1, cfg.train.max_nodes))

        # A GPU worker serves queue "gpu" in the distributed set-up; with one local worker every queue is served.
        # Node 0 trains here, announces the rendezvous and hands its summary to gate 2; the other nodes, mapped,
        # start beside it on other workers and join (all at once: the gpu pool needs a slot per node).
        nodes = training_nodes()
        trained = DistributedTrainOperator(task_id="train", queue=GPU_QUEUE, pool=GPU_POOL,
                                           execution_timeout=task_timeout("train"))
        nodes >> trained
        joined = DistributedTrainOperator.partial(task_id="train_node", queue=GPU_QUEUE, pool=GPU_POOL,
                                         execution_timeout=task_timeout("train_node")).expand(node_rank=nodes)
        gate = QualityGateOperator(task_id="gate_training", gate="training", prepared=trained.output)
        published = publish_model(trained.output)
        gate >> published
    return Ends(nodes, published, (joined,))


# -- stage 3 -------------------------------------------------------------------------------------------
def deploy_tasks():
    with TaskGroup("stage_3_deploy", prefix_group_id=False, tooltip="Stage 3: register, build variants, gate"):

        @task
        def register_model() -> dict:
            from aigc.stages import DEPLOY

            _context, cfg, lake, date = run_config()
            return DEPLOY.register(lake, date, cfg)

        # On the GPU queue: variants are timed on the device they will serve on (the recommendation compares them).
        @task(queue=GPU_QUEUE, pool=GPU_POOL, execution_timeout=task_timeout("build_variants"))
        def build_variants(registered: dict) -> dict:
            from aigc.stages import DEPLOY

            _context, cfg, lake, _date = run_config()
            built = DEPLOY.build(lake, cfg, registered["version"])
            # XCom: each variant's figures (size, latency, the workload's agreement with fp32 …), not its weights.
            figures = {k: {m: x for m, x in v.items() if isinstance(x, int | float) and not isinstance(x, bool)}
                       for k, v in built["variants"].items()}
            return {**built, "variants": figures}

        registered = register_model()
        gate = QualityGateOperator(task_id="gate_deploy", gate="deploy", prepared=registered,
                                   outlets=[MODEL_DEPLOYABLE])
        build_variants(registered) >> gate
    return Ends(registered, gate)


# -- stage 4 -------------------------------------------------------------------------------------------
def _generation_inputs(context, lake, cfg) -> tuple[str, str | None]:
    """(model ref, prompt file key or None) for this run: the form's values win; then the event that started
    it (a deployment: the version it deployed; a dropped prompt file: production); then the version this run
    registered (aigc_pipeline); else, by hand, the CLI's rule (aigc.stages.GenerateStage.model_for)."""
    from aigc.generate.prompts import prompts_key_of
    from aigc.stages import GENERATE, PRODUCTION
    from aigc_airflow.runtime import run_params

    params, event = run_params(context), newest_event(context)
    ref = params.get("model_ref")
    key = prompts_key_of(lake, params["prompts_uri"]) if params.get("prompts_uri") else None
    if event and event.get("version"):
        return ref or event["version"], key
    if event and event.get("prompts_key"):
        return ref or PRODUCTION, key or event["prompts_key"]
    registered = context["ti"].xcom_pull(task_ids="register_model")
    if registered:  # This run's version, not the `candidate` alias: a concurrent run of another date moves it.
        return ref or registered["version"], key
    return GENERATE.model_for(cfg, ref, prompt_file=key is not None), key


def _demo_prompts(cfg, ref: str, key: str | None) -> bool:
    """Draw a demo prompt set when no file is named and none was dropped for the date: for a candidate (it is
    evaluated on held-out captions), unless the run prepares a producer's drop (``raw.drop``, carried from
    aigc_prepare's run), whose prompts must be dropped too. Production answers dropped prompts only."""
    from aigc.stages import PRODUCTION

    return key is None and ref != PRODUCTION and cfg.raw.drop == "synthetic"


def _unclaim_folded(context, lake, used_key: str | None) -> None:
    """Prompt files whose events Airflow folded into this run, other than the one it generates for: their claims
    are dropped (if still the claim of the file that event named), so the watcher fires for each again and every
    dropped file gets its own run."""
    from aigc.generate.prompts import CLAIM
    from aigc.lake.base import ObjectNotFound
    from aigc.lake.keys import join
    from aigc_airflow.runtime import triggering_events

    for e in triggering_events(context):
        key = e["extra"].get("prompts_key")
        if not key or key == used_key:
            continue
        claim_key = join(key.rsplit("/", 1)[0], CLAIM)
        try:
            current = lake.get_json(claim_key)
        except ObjectNotFound:
            continue
        if current.get("sha256") == e["extra"].get("sha256"):
            log.warning("prompt file %s arrived with %s in one run: handing it back to the watcher", key, used_key)
            lake.delete(claim_key)


def generate_tasks():
    with TaskGroup("stage_4_generate", prefix_group_id=False, tooltip="Stage 4: generate, mapped over shards"):

        @task
        def plan_generation() -> dict:
            from airflow.sdk.exceptions import AirflowFailException

            from aigc.generate.prompts import BadPrompts
            from aigc.generate.run import VariantNotEligible
            from aigc.stages import GENERATE
            from aigc_airflow.runtime import dag_run_scoped_id

            context, cfg, lake, date = run_config()
            try:
                ref, key = _generation_inputs(context, lake, cfg)
                plan = GENERATE.plan(lake, date, cfg, run_id=dag_run_scoped_id(context, cfg, "generate"),
                                     demo_prompts=_demo_prompts(cfg, ref, key), model_ref=ref,
                                     prompts_key=key)
            except (BadPrompts, VariantNotEligible, ValueError) as e:  # a retry would find the same: say why
                raise AirflowFailException(str(e)) from e
            _unclaim_folded(context, lake, key)
            return plan

        @task
        def shards_of(plan: dict, serves_on: str) -> list[dict]:
            """The plan's shards if its variant serves on ``serves_on`` ("gpu" or "cpu"), else none (that mapped task
            is then skipped): mapping needs a list-valued XCom of its own."""
            return plan["shards"] if plan.get("serves_on", "gpu") == serves_on else []

        @task(queue=GPU_QUEUE, pool=GPU_POOL, retries=3, max_active_tis_per_dagrun=4,
              execution_timeout=task_timeout("generate_shard"))
        def generate_shard(plan: dict, shard: dict) -> dict:
            from aigc.stages import GENERATE

            _context, cfg, lake, _date = run_config()
            entry = GENERATE.shard(lake, plan, shard, cfg)
            return {k: entry[k] for k in ("shard", "rows", "generated", "refused", "cached")}

        # none_failed: one of the two mapped tasks is skipped (no shards of its kind), the other must succeed.
        @task(trigger_rule="none_failed")
        def finish_generation(plan: dict) -> dict:
            from aigc.stages import GENERATE

            _context, cfg, lake, _date = run_config()
            return GENERATE.finish_run(lake, plan, cfg)

        @task.branch
        def route_content(generated: dict) -> str:
            from aigc.stages import GENERATE

            return "publish_generations" if GENERATE.publishes_content(generated) else "hand_off_for_evaluation"

        @task(outlets=[GENERATIONS])
        def publish_generations(generated: dict) -> dict:
            from aigc.stages import GENERATE

            context, cfg, lake, _date = run_config()
            return announced(context, {**generated, **GENERATE.publish(lake, cfg, generated)})

        @task(outlets=[GENERATED_FOR_EVALUATION])
        def hand_off_for_evaluation(generated: dict) -> dict:
            """A candidate's content waits for gate 5: aigc_evaluate judges it and publishes it."""
            return announced(get_current_context(), generated)

        plan = plan_generation()
        # A variant that serves on the CPU (ONNX Runtime without its CUDA provider: int8 by default) generates on the
        # CPU queue, not in a GPU slot it would leave idle; the others on the GPU queue. Same code, two queues.
        on_gpu = generate_shard.partial(plan=plan).expand(shard=shards_of.override(task_id="gpu_shards")(plan, "gpu"))
        on_cpu = generate_shard.override(task_id="generate_shard_cpu", queue=CPU_QUEUE, pool=CPU_POOL).partial(
            plan=plan).expand(shard=shards_of.override(task_id="cpu_shards")(plan, "cpu"))
        finished = finish_generation(plan)
        [on_gpu, on_cpu] >> finished
        gate = QualityGateOperator(task_id="gate_generate", gate="generate", prepared=finished)
        handed, published = hand_off_for_evaluation(finished), publish_generations(finished)
        gate >> route_content(finished) >> [published, handed]
    return Ends(plan, handed, (published,))


# -- stage 5 -------------------------------------------------------------------------------------------
def evaluate_tasks():
    with TaskGroup("stage_5_evaluate", prefix_group_id=False, tooltip="Stage 5: evaluate, gate 5, promote"):

        @task
        def find_generation() -> dict:
            """The generation run to judge: the one the newest event names, else this run's own (aigc_pipeline),
            else the date's newest (a run started by hand)."""
            from aigc.evaluate.runs import latest_generation

            context, cfg, lake, date = run_config()
            if event := newest_event(context):
                return latest_generation(lake, event["model"], event["date"], event["run_id"])
            return (context["ti"].xcom_pull(task_ids="hand_off_for_evaluation")
                    or latest_generation(lake, cfg.model.name, date.isoformat()))

        @task(outlets=[GENERATIONS, EVALUATIONS])
        def publish_content(evaluated: dict) -> dict:
            from aigc.stages import EVALUATE

            context, cfg, lake, _date = run_config()
            return announced(context, EVALUATE.publish(lake, cfg, evaluated))

        # Cost is a property of a variant on a device: the GPU queue's worker times them on its GPU (nothing to do
        # on a worker without one), the evaluation on its CPU; a recommendation per device class follows.
        @task(queue=GPU_QUEUE, pool=GPU_POOL, execution_timeout=task_timeout("time_on_gpu"))
        def time_on_gpu(generation: dict) -> dict:
            from aigc.stages import EVALUATE

            _context, cfg, lake, _date = run_config(hold=False)  # it reads only
            return EVALUATE.time_here(lake, generation, cfg)

        generation = find_generation()
        evaluate = EvaluateOperator(task_id="evaluate", generation=generation, timings=time_on_gpu(generation),
                                    execution_timeout=task_timeout("evaluate"))
        gate = QualityGateOperator(task_id="gate_evaluation", gate="evaluation", prepared=evaluate.output)
        published = publish_content(evaluate.output)
        gate >> published
    return Ends(generation, published)
