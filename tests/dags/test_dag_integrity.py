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


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert "aigc_pipeline" in dagbag.dags


def test_owner_tags_retries_and_schedule(dagbag):
    dag = dagbag.dags["aigc_pipeline"]
    assert dag.tags and "aigc" in dag.tags
    assert not dag.catchup
    assert dag.timetable.expression == "0 0 * * *" and str(dag.timetable.timezone) == "UTC"
    for task in dag.tasks:
        assert task.owner == "aigc-platform", task.task_id
        assert task.retries >= 2, task.task_id


def test_a_lease_on_the_date_wraps_the_whole_run(dagbag):
    """claim_partition is the setup, release_partition the teardown, of every other task."""
    dag = dagbag.dags["aigc_pipeline"]
    claim, release = dag.get_task("claim_partition"), dag.get_task("release_partition")
    assert claim.is_setup and release.is_teardown
    assert claim.downstream_task_ids == {"choose_drop", "release_partition"}
    assert claim.mode == "reschedule"
    inner = {t.task_id for t in dag.tasks} - {"claim_partition", "release_partition"}
    assert inner <= claim.get_flat_relative_ids(upstream=False)
    assert inner <= release.get_flat_relative_ids(upstream=True)
    assert release.trigger_rule == "all_done_setup_success"  # gives the date back on failure too


def test_stage_one_is_wired_drop_prepare_gate_publish(dagbag):
    dag = dagbag.dags["aigc_pipeline"]
    down = {t.task_id: set(t.downstream_task_ids) for t in dag.tasks}
    assert down["choose_drop"] == {"make_demo_drop", "wait_for_drop"}
    assert down["make_demo_drop"] == down["wait_for_drop"] == {"prepare"}
    assert down["prepare"] >= {"gate_curated", "publish_curated"}
    assert down["gate_curated"] == {"publish_curated"}
    publish = dag.get_task("publish_curated")
    assert [a.name for a in publish.outlets] == ["aigc_curated_shapes"]
    assert dag.get_task("prepare").trigger_rule == "none_failed_min_one_success"


def test_stage_two_trains_after_publication_then_gates_then_hands_off(dagbag):
    dag = dagbag.dags["aigc_pipeline"]
    down = {t.task_id: set(t.downstream_task_ids) for t in dag.tasks}
    assert down["publish_curated"] == {"train"}
    assert down["train"] == {"gate_training", "publish_model"}
    assert down["gate_training"] == {"publish_model"}
    assert type(dag.get_task("train")).__name__ == "DistributedTrainOperator"
    assert [a.name for a in dag.get_task("publish_model").outlets] == ["aigc_model_candidate"]


def test_stage_three_registers_builds_variants_then_smoke_tests(dagbag):
    dag = dagbag.dags["aigc_pipeline"]
    down = {t.task_id: set(t.downstream_task_ids) for t in dag.tasks}
    assert down["publish_model"] == {"register_model"}
    # plan_generation takes the version registered here (not the alias another date's run may move).
    assert down["register_model"] == {"build_variants", "gate_deploy", "plan_generation"}
    assert down["build_variants"] == {"gate_deploy"}
    assert [a.name for a in dag.get_task("gate_deploy").outlets] == ["aigc_model_deployable"]


def test_stage_four_fans_out_generation_as_mapped_tasks(dagbag):
    dag = dagbag.dags["aigc_pipeline"]
    down = {t.task_id: set(t.downstream_task_ids) for t in dag.tasks}
    assert down["gate_deploy"] == {"plan_generation"}
    assert down["plan_generation"] >= {"shards_of", "generate_shard", "finish_generation"}
    assert down["generate_shard"] == {"finish_generation"}
    assert down["finish_generation"] == {"gate_generate", "evaluate"}
    assert down["gate_generate"] == {"evaluate"}
    assert type(dag.get_task("generate_shard")).__name__.endswith("MappedOperator")


def test_stage_five_evaluates_gates_then_publishes_and_promotes(dagbag):
    dag = dagbag.dags["aigc_pipeline"]
    down = {t.task_id: set(t.downstream_task_ids) for t in dag.tasks}
    assert down["evaluate"] == {"gate_evaluation", "publish_content"}
    assert down["gate_evaluation"] == {"publish_content"}
    assert down["publish_content"] == {"release_partition"}
    assert [a.name for a in dag.get_task("publish_content").outlets] == ["aigc_generations", "aigc_evaluations"]


def test_params_default_to_a_runnable_form_and_refuse_bad_values(dagbag):
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dagbag.dags["aigc_pipeline"].params)
    params.validate()  # pressing Trigger with the form unchanged is valid
    assert params["preset"] == os.environ.get("AIGC_DEFAULT_PRESET", "default")  # `make` sets demo
    assert params["synthetic_drop"] is True
    form = dagbag.dags["aigc_pipeline"].params.dump()
    untitled = [n for n, p in dagbag.dags["aigc_pipeline"].params.items() if not p.schema.get("title")]
    assert not untitled and set(form) >= {"preset", "n_records", "train_steps", "nproc", "variant", "budget_fraction"}
    unsectioned = [n for n, p in dagbag.dags["aigc_pipeline"].params.items() if not p.schema.get("section")]
    assert unsectioned == ["preset"]  # the form groups the knobs: data, training, generation, gates
    for name, bad in (("resolution", 33), ("dirt_rate", 1.5), ("preset", "huge"), ("n_records", 0),
                      ("nproc", 0), ("precision", "fp8"), ("train_steps", 0), ("variant", "fp64"),
                      ("budget_fraction", 0), ("generate_shards", 0)):
        with pytest.raises(ParamValidationError):
            params[name] = bad


def test_the_forms_choices_name_an_empty_choice_instead_of_null_and_map_to_config_fields(dagbag):
    from aigc.config import PipelineConfig
    from aigc.config.form import FORM_FIELDS

    params = dagbag.dags["aigc_pipeline"].params
    for name, param in params.items():
        enum = param.schema.get("enum") or []
        if None in enum:  # the UI shows a choice's label from values_display, else its JSON: "null"
            assert (param.schema.get("values_display") or {}).get(None) == "(the preset's value)", name
    # Every form field but the preset and the drop switches sets exactly one configuration field.
    assert set(params) - set(FORM_FIELDS) == {"preset", "synthetic_drop", "raw_uri"}
    config = PipelineConfig()
    for param, (section, field) in FORM_FIELDS.items():
        assert hasattr(getattr(config, section), field), param


def test_dag_file_parses_fast_without_io_or_heavy_imports():
    """Parse in a fresh interpreter, the way the dag-processor does, and look at what it loaded."""
    probe = f"""
import json, sys, time, builtins
opened = []
real_open = builtins.open
def spy(file, *a, **k):
    opened.append(str(file))
    return real_open(file, *a, **k)
import airflow.sdk  # the framework's own import cost is not the DAG file's
sys.path[:0] = [{str(ROOT / 'plugins')!r}]
builtins.open = spy
start = time.process_time()  # CPU time: the parse's own cost, not a busy host's
import importlib.util
spec = importlib.util.spec_from_file_location("aigc_pipeline_dag", {str(ROOT / 'dags' / 'aigc_pipeline.py')!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
elapsed = time.process_time() - start
builtins.open = real_open
print(json.dumps({{"seconds": elapsed, "heavy": [m for m in {HEAVY!r} if m in sys.modules],
                  "opened": [f for f in opened if not f.endswith((".py", ".pyc"))]}}))
"""
    env = {**os.environ, "AIGC_LAKE_URI": "/nonexistent/lake"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["heavy"] == [], f"DAG parse imported {report['heavy']}: move those imports into task bodies"
    assert report["opened"] == [], f"DAG parse opened files: {report['opened']}"
    assert report["seconds"] < 0.5, report
    assert not Path("/nonexistent/lake").exists()
