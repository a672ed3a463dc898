"""`aigc <stage>` and the stage's DAG publish the same objects at the same point: the lake is compared after
each stage, one lake driven by the CLI, the other by `airflow dags test aigc_<stage>`."""

from __future__ import annotations

import io
import re
import uuid

import pytest

from aigc.cli import main
from aigc.lake import open_lake

pytestmark = pytest.mark.airflow
DATE = "2026-11-27"
STAGES = [  # (stage, the CLI's arguments, the DAG run's conf)
    ("prepare", ["prepare"], {}),
    ("train", ["train"], {}),
    ("deploy", ["deploy"], {}),
    ("generate", ["generate", "--demo-prompts", "--model-ref", "candidate"], {"model_ref": "candidate"}),
    ("evaluate", ["evaluate"], {}),
]
RUN = re.compile(r"run=[^/]+")


def published(lake) -> dict:
    """What readers can see: every published pointer's run folders (run ids masked: each side makes its own),
    the registry's aliases and each version's gate-3 verdict."""
    state: dict = {}
    for key in lake.list(""):
        if key.endswith("/_PUBLISHED.json"):
            pointer = lake.get_json(key)
            folders = [pointer["run_prefix"], *pointer.get("companions", {}).values()]
            state[key] = sorted(RUN.sub("run=*", k) for folder in folders for k in lake.list(folder))
        elif key.endswith("/aliases.json"):
            state[key] = lake.get_json(key)["aliases"]
        elif re.search(r"/v\d+/version\.json$", key):
            state[key] = (lake.get_json(key).get("smoke_test") or {}).get("eligible_variants")
    return state


def test_each_stage_publishes_the_same_objects_from_the_cli_and_from_its_dag(airflow_env, dags_test, tmp_path,
                                                                             capsys):
    cli_lake, dag_lake = open_lake(str(tmp_path / "cli")), open_lake(str(tmp_path / "dag"))
    env = {**airflow_env, "AIGC_LAKE_URI": dag_lake.uri}
    common = ["--preset", "smoke", "--lake", cli_lake.uri, "--date", DATE]
    assert main(["make-raw", *common]) == 0
    for stage, args, conf in STAGES:
        assert main([*args, *common]) == 0, capsys.readouterr().err[-3000:]
        rc, log = dags_test(env, DATE, {"preset": "smoke", **conf}, dag_id=f"aigc_{stage}", name="stage-dag")
        assert rc == 0 and "state=failed" not in log, log[-4000:]
        cli, dag = published(cli_lake), published(dag_lake)
        assert cli == dag, (stage, {k: (cli.get(k), dag.get(k)) for k in cli.keys() | dag.keys()
                                    if cli.get(k) != dag.get(k)})
    # The candidate's generations are its evaluation set, published with its evaluation after gate 5; the
    # generations pointer is production's content, and nothing made content here.
    assert "evaluations/shapes-cvae/dt=2026-11-27/_PUBLISHED.json" in dag
    assert "generations/shapes-cvae/dt=2026-11-27/_PUBLISHED.json" not in dag
    assert all(lake.get_json(k)["owner"] is None for lake in (cli_lake, dag_lake) for k in lake.list("leases"))


def test_the_text_workload_chosen_in_the_form_runs_all_five_stages_on_s3(airflow_env, dags_test, s3_server):
    """The trigger form's ``workload`` reaches every stage: aigc_pipeline (what ``make demo WORKLOAD=text`` runs)
    takes the text workload through gates 1–5 to publication and promotion, on the S3 server (tasks and the
    torchrun workers reach it only through the aws_default connection, as docker-compose gives it: no AWS_*
    variables), with `make demo`'s console."""
    uri = f"s3://{s3_server.bucket}/text-{uuid.uuid4().hex[:8]}"
    lake = open_lake(uri, s3_server.options())
    env = {**airflow_env, "AIGC_LAKE_URI": uri, "AIRFLOW_CONN_AWS_DEFAULT": s3_server.env()["AIRFLOW_CONN_AWS_DEFAULT"]}
    console = io.StringIO()
    # 20 steps on one process: the loss is a third of its start by then, far under gate 2's bars (40 steps took
    # 35 s of this test); two ranks over torchrun are tests/integration/test_training_torchrun.py's.
    rc, log = dags_test(env, DATE, {"preset": "smoke", "workload": "text", "train_steps": 20, "nproc": 1},
                        console=console, timeout=900, name="pipeline-text")
    assert rc == 0 and "state=failed" not in log, log[-4000:]
    # `make demo`'s console: a line as each task starts and ends, training's progress, the gates' verdicts.
    shown = console.getvalue()
    for task in ("make_demo_drop", "prepare_part[0]", "merge_parts", "train", "gate_training", "generate_shard[1]",
                 "evaluate", "publish_content"):
        assert f"▶ {task}\n" in shown and f"✔ {task} success (" in shown, (task, shown)
    assert "step 20/20" in shown and "gate evaluation: PASS" in shown
    assert len(shown.splitlines()) < 120  # the few lines a person watches, not the task log
    state = published(lake)
    for partition in ("curated/logs", "training/logs-gpt", "evaluations/logs-gpt"):
        assert f"{partition}/dt={DATE}/_PUBLISHED.json" in state, partition
    assert state["models/logs-gpt/aliases.json"]["production"] == "v0001"
    pointer = lake.get_json(f"evaluations/logs-gpt/dt={DATE}/_PUBLISHED.json")
    metrics = lake.get_json(f"{pointer['run_prefix']}/metrics.json")
    assert metrics["workload"] == "text" and metrics["gates"]["evaluation"]["success"]
    assert not lake.list(f"curated/shapes/dt={DATE}")  # nothing of the image workload's
