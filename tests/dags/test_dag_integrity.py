"""DAG integrity: imports cleanly, parses fast with no I/O or heavy imports, and is wired as documented."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "pandas", "pyarrow", "great_expectations", "PIL", "datasketch", "boto3")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


STAGE_DAGS = {"aigc_prepare": "prepare", "aigc_train": "train", "aigc_deploy": "deploy",
              "aigc_generate": "generate", "aigc_evaluate": "evaluate"}
LEASE = {"wanted", "claim_partition", "release_partition"}


def downstream(dag) -> dict[str, set[str]]:
    return {t.task_id: set(t.downstream_task_ids) for t in dag.tasks}


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dags) == {"aigc_pipeline", "aigc_review", *STAGE_DAGS}


def test_every_task_has_an_owner_retries_and_a_timeout_within_the_date_lease(dagbag):
    from aigc_airflow.operations import DATE_LEASE_TTL, MAX_RETRY_DELAY, TASK_QUEUED_TIMEOUT

    longest = DATE_LEASE_TTL - TASK_QUEUED_TIMEOUT - MAX_RETRY_DELAY
    for dag in dagbag.dags.values():
        assert "aigc" in dag.tags and not dag.catchup, dag.dag_id
        for task in dag.tasks:
            where = f"{dag.dag_id}.{task.task_id}"
            assert task.owner == "aigc-platform" and task.retries >= 2, where
            assert task.execution_timeout is not None and task.execution_timeout < longest, where
            assert task.max_retry_delay <= MAX_RETRY_DELAY, where
    gpu = {(d.dag_id, t.task_id) for d in dagbag.dags.values() for t in d.tasks if t.pool == "gpu"}
    assert gpu == {("aigc_pipeline", "train"), ("aigc_pipeline", "train_node"), ("aigc_pipeline", "build_variants"),
                   ("aigc_pipeline", "generate_shard"), ("aigc_train", "train"), ("aigc_train", "train_node"),
                   ("aigc_deploy", "build_variants"), ("aigc_generate", "generate_shard"),
                   ("aigc_pipeline", "time_on_gpu"), ("aigc_evaluate", "time_on_gpu")}


def test_the_stage_dags_form_one_chain_linked_by_assets(dagbag):
    """Each stage DAG is scheduled on what the stage before it publishes; prepare runs nightly."""
    prepare = dagbag.dags["aigc_prepare"]
    assert prepare.timetable.expression == "0 0 * * *" and str(prepare.timetable.timezone) == "UTC"
    # aigc_pipeline runs by hand: the nightly work is the chain's.
    assert type(dagbag.dags["aigc_pipeline"].timetable).__name__ == "NullTimetable"
    producers = {a.name: (d.dag_id, t.task_id) for d_id, d in dagbag.dags.items() if d_id != "aigc_pipeline"
                 for t in d.tasks for a in t.outlets}
    assert producers == {"aigc_curated": ("aigc_prepare", "publish_curated"),
                         "aigc_model_candidate": ("aigc_train", "publish_model"),
                         "aigc_model_deployable": ("aigc_deploy", "gate_deploy"),
                         "aigc_generations_for_evaluation": ("aigc_generate", "hand_off_for_evaluation"),
                         "aigc_generations": ("aigc_evaluate", "publish_content"),
                         "aigc_evaluations": ("aigc_evaluate", "publish_content")}
    assert [a.name for a in dagbag.dags["aigc_generate"].get_task("publish_generations").outlets] == [
        "aigc_generations"]  # production's content, published by the generate stage itself
    def scheduled_on(dag) -> set[str] | None:
        condition = getattr(dag.timetable, "asset_condition", None)
        if condition is None:
            return None
        return {a.name for a in getattr(condition, "objects", (condition,))}

    schedules = {d: scheduled_on(dagbag.dags[d]) for d in STAGE_DAGS}
    assert schedules == {"aigc_prepare": None, "aigc_train": {"aigc_curated"},
                         "aigc_deploy": {"aigc_model_candidate"},
                         "aigc_generate": {"aigc_model_deployable", "aigc_prompt_files"},
                         "aigc_evaluate": {"aigc_generations_for_evaluation"}}


def test_the_prompt_files_asset_is_watched_by_the_lake_trigger(dagbag):
    from aigc_airflow.assets import PROMPT_FILES

    (watcher,) = PROMPT_FILES.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath == "aigc_airflow.triggers.PromptFileTrigger"
    # the deployment's (here: the built-in ones), not a dataset
    assert set(kwargs["workloads"]) == {"image", "text", "hf-causal-lm", "hf-diffusion"}


def test_the_review_dag_imports_reviewers_exports_every_quarter_hour_one_run_at_a_time(dagbag):
    review = dagbag.dags["aigc_review"]
    assert review.timetable.expression == "*/15 * * * *" and review.max_active_runs == 1
    assert [t.task_id for t in review.tasks] == ["import_labels"]
    assert set(review.params) == {"preset", "workload", "settings"}  # which model's inbox; nothing else to set


@pytest.mark.parametrize("dag_id", ["aigc_pipeline", *STAGE_DAGS])
def test_a_lease_on_the_date_wraps_every_run(dagbag, dag_id):
    """claim_partition is the setup, release_partition the teardown, of every task of the stage."""
    dag = dagbag.dags[dag_id]
    claim, release = dag.get_task("claim_partition"), dag.get_task("release_partition")
    assert claim.is_setup and release.is_teardown and claim.mode == "reschedule"
    inner = {t.task_id for t in dag.tasks} - LEASE
    assert inner <= claim.get_flat_relative_ids(upstream=False)
    assert inner <= release.get_flat_relative_ids(upstream=True)
    assert release.trigger_rule == "all_done_setup_success"  # gives the date back on failure too
    if dag_id != "aigc_pipeline" and dag_id != "aigc_prepare":  # asset-started: skipped for backfills' events
        assert downstream(dag)["wanted"] == {"claim_partition"}


def test_each_stage_is_defined_once_and_the_pipeline_runs_them_all_in_order(dagbag):
    pipeline = dagbag.dags["aigc_pipeline"]
    tasks = {}
    for dag_id in STAGE_DAGS:
        tasks[dag_id] = {t.task_id for t in dagbag.dags[dag_id].tasks} - LEASE
        for task_id in tasks[dag_id]:  # the same task, built by the same code (aigc_airflow.stage_tasks)
            assert type(pipeline.get_task(task_id)) is type(dagbag.dags[dag_id].get_task(task_id)), task_id
    assert set().union(*tasks.values()) == {t.task_id for t in pipeline.tasks} - LEASE
    down = downstream(pipeline)
    assert down["claim_partition"] == {"choose_drop", "release_partition"}
    assert down["publish_curated"] == {"training_nodes"}
    assert down["publish_model"] == {"register_model"}
    assert down["gate_deploy"] == {"plan_generation"}
    assert down["hand_off_for_evaluation"] == {"find_generation"}
    assert down["publish_content"] == {"release_partition"}


def test_stage_one_is_wired_drop_plan_mapped_parts_merge_gate_publish(dagbag):
    dag = dagbag.dags["aigc_prepare"]
    down = downstream(dag)
    assert down["choose_drop"] == {"make_demo_drop", "wait_for_drop"}
    assert down["make_demo_drop"] == down["wait_for_drop"] == {"plan_drop"}
    assert down["plan_drop"] == {"parts_of", "prepare_part", "merge_parts"}
    assert down["parts_of"] == {"prepare_part"} and down["prepare_part"] == {"merge_parts"}
    assert down["merge_parts"] >= {"gate_curated", "publish_curated"}
    assert down["gate_curated"] == {"publish_curated"}
    assert dag.get_task("plan_drop").trigger_rule == "none_failed_min_one_success"
    assert type(dag.get_task("prepare_part")).__name__.endswith("MappedOperator")  # over the plan's parts


def test_stage_two_trains_then_gates_then_hands_off(dagbag):
    dag = dagbag.dags["aigc_train"]
    down = downstream(dag)
    assert down["training_nodes"] == {"train", "train_node"}  # node 0 and the others start together
    assert down["train"] == {"gate_training", "publish_model"}  # node 0's summary is what gate 2 reads
    assert down["gate_training"] == {"publish_model"} and down["train_node"] == {"release_partition"}
    assert type(dag.get_task("train")).__name__ == "DistributedTrainOperator"
    assert type(dag.get_task("train_node")).__name__.endswith("MappedOperator")  # over nodes 1…N-1


def test_stage_three_registers_builds_variants_then_smoke_tests(dagbag):
    down = downstream(dagbag.dags["aigc_deploy"])
    assert down["register_model"] == {"build_variants", "gate_deploy"}
    assert down["build_variants"] == {"gate_deploy"}


def test_stage_four_fans_out_generation_then_publishes_production_or_hands_a_candidate_on(dagbag):
    dag = dagbag.dags["aigc_generate"]
    down = downstream(dag)
    assert down["plan_generation"] >= {"gpu_shards", "cpu_shards", "generate_shard", "generate_shard_cpu",
                                       "finish_generation"}
    assert down["generate_shard"] == down["generate_shard_cpu"] == {"finish_generation"}
    assert down["finish_generation"] >= {"gate_generate", "route_content"}
    # One of the two mapped tasks is skipped (its variant serves elsewhere): finishing waits for the other only.
    assert dag.get_task("finish_generation").trigger_rule == "none_failed"
    cpu = dag.get_task("generate_shard_cpu")
    assert (cpu.queue, cpu.pool, cpu.retries) == ("default", "default_pool", 3)
    assert down["gate_generate"] == {"route_content"}
    assert down["route_content"] == {"publish_generations", "hand_off_for_evaluation"}
    for mapped in ("generate_shard", "generate_shard_cpu"):
        assert type(dag.get_task(mapped)).__name__.endswith("MappedOperator"), mapped


def test_stage_five_evaluates_gates_then_publishes_and_promotes(dagbag):
    dag = dagbag.dags["aigc_evaluate"]
    down = downstream(dag)
    # The variants are timed on the GPU queue's worker, in its slot, before the evaluation recommends per class.
    assert down["find_generation"] == {"time_on_gpu", "evaluate"} and down["time_on_gpu"] == {"evaluate"}
    timing = dag.get_task("time_on_gpu")
    assert (timing.queue, timing.pool) == (os.environ.get("AIGC_GPU_QUEUE", "default"), "gpu")
    assert down["evaluate"] == {"gate_evaluation", "publish_content"}
    assert down["gate_evaluation"] == {"publish_content"}


def test_params_default_to_a_runnable_form_and_refuse_bad_values(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dagbag.dags["aigc_pipeline"].params)
    params.validate()  # pressing Trigger with the form unchanged is valid
    assert params["preset"] == os.environ.get("AIGC_DEFAULT_PRESET", "default")  # `make` sets demo
    assert params["drop"] is None  # the preset's: a producer's drop in the default preset, synthetic in the demo
    for dag in dagbag.dags.values():
        untitled = [n for n, p in dag.params.items() if not p.schema.get("title")]
        unsectioned = [n for n, p in dag.params.items() if not p.schema.get("section")]
        assert not untitled and unsectioned == ["preset", "workload", "settings"], dag.dag_id  # grouped knobs
        copy.deepcopy(dag.params).validate()
    assert params["workload"] == os.environ.get("AIGC_DEFAULT_WORKLOAD", "image")
    for name, bad in (("dirt_rate", 1.5), ("preset", "huge"), ("n_records", 0),
                      ("workload", "my model; rm -rf"), ("workload", "pkg.mod:"),
                      ("nproc", -1), ("precision", "fp8"), ("train_steps", 0), ("variant", "fp64"),
                      ("budget_fraction", 0), ("generate_shards", 0), ("drop", "yes"), ("settings", "2048")):
        with pytest.raises(ParamValidationError):
            params[name] = bad
    generate = copy.deepcopy(dagbag.dags["aigc_generate"].params)
    with pytest.raises(ParamValidationError):
        generate["model_ref"] = "staging"


def test_each_dag_shows_only_its_own_stages_fields_from_the_one_table(dagbag):
    from aigc.config import PipelineConfig
    from aigc.config.form import FORM, FORM_FIELDS

    for dag_id, stage in STAGE_DAGS.items():
        assert set(dagbag.dags[dag_id].params) == {"preset", "workload", "settings"} | {f.param for f in FORM
                                                                             if f.stage == stage}, dag_id
    assert set(dagbag.dags["aigc_pipeline"].params) == {"preset", "workload", "settings"} | {f.param for f in FORM
                                                                                  if f.in_all_stages}
    for dag in dagbag.dags.values():
        for name, param in dag.params.items():
            enum = param.schema.get("enum") or []
            if None in enum:  # the UI shows a choice's label from values_display, else its JSON: "null"
                assert (param.schema.get("values_display") or {}).get(None), name
    config = PipelineConfig()
    for param, (section, field) in FORM_FIELDS.items():  # every config field the form names exists
        assert hasattr(getattr(config, section), field), param
    switches = {f.param for f in FORM if f.config is None}
    assert switches == {"raw_uri", "prompts_uri"}


def test_dag_file_parses_fast_without_io_or_heavy_imports():
    """Parse every DAG file in a fresh interpreter, the way the dag-processor does, and look at what it loaded.
    Its cost is counted in modules imported beyond Airflow's own, not in seconds: a timing would fail on a busy
    host, while a parse that grows slow does so by importing (the heavy ones are named below)."""
    probe = f"""
import json, sys, builtins
opened = []
real_open = builtins.open
def spy(file, *a, **k):
    opened.append(str(file))
    return real_open(file, *a, **k)
import airflow.sdk  # the framework's own import cost is not the DAG file's
sys.path[:0] = [{str(ROOT / 'plugins')!r}]
builtins.open = spy
before = set(sys.modules)
import importlib.util
for path in {sorted(str(p) for p in (ROOT / 'dags').glob('aigc_*.py'))!r}:
    spec = importlib.util.spec_from_file_location(path.rsplit("/", 1)[-1][:-3] + "_dag", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
imported = sorted(set(sys.modules) - before)
builtins.open = real_open
print(json.dumps({{"imported": imported, "heavy": [m for m in {HEAVY!r} if m in sys.modules],
                  "opened": [f for f in opened if not f.endswith((".py", ".pyc"))]}}))
"""
    env = {**os.environ, "AIGC_LAKE_URI": "/nonexistent/lake"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["heavy"] == [], f"DAG parse imported {report['heavy']}: move those imports into task bodies"
    assert report["opened"] == [], f"DAG parse opened files: {report['opened']}"
    assert len(report["imported"]) <= 120, report["imported"]  # 86 on Airflow 3.3 at 0e50136
    assert not Path("/nonexistent/lake").exists()
