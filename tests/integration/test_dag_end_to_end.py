"""The DAG end to end in real Airflow (`airflow dags test`), on a folder lake and on S3.

On S3 the tasks reach the server only through the ``aws_default`` connection (given as
AIRFLOW_CONN_AWS_DEFAULT, as docker-compose does): no AWS_* variables are set.
"""

import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from aigc.devtools.demo import run_dag_test
from aigc.lake import open_lake
from aigc.lake.keys import partition
from aigc.lake.publish import NotPublished, resolve
from aigc_airflow.operations import ASSET_MANAGER

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIRFLOW", "AIGC_"))}
    env.update({
        "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "GX_ANALYTICS_ENABLED": "False",
        "NO_PROXY": "127.0.0.1,localhost",
        **ASSET_MANAGER,  # as `make demo` sets it: its asset events are queued through the same manager
    })
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    return env


def dags_test(env, date, conf, timeout=600, console: io.StringIO | None = None, dag_id: str = "aigc_pipeline"):
    """Run the DAG for ``date`` as `make demo` does (aigc.devtools.demo: the full log to a file, the progress
    lines to ``console``); the log is kept under test-artifacts/ for whoever debugs it."""
    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    log = artifacts / f"dags-test-{date}-{uuid.uuid4().hex[:6]}.log"
    rc = run_dag_test(date, conf, env, log, out=console or io.StringIO(), timeout_s=timeout, dag_id=dag_id)
    return rc, log.read_text()


def assert_published(lake, date):
    pointer = resolve(lake, partition("curated", "shapes", date))
    manifest = lake.get_json(f"{pointer['run_prefix']}/_manifest.json")
    assert manifest["rows"] >= 200 and manifest["input_records"] == 300
    assert manifest["input_records"] == manifest["rows"] + sum(manifest["quarantined"].values())
    assert pointer["companions"] == {partition("quarantine", "shapes", date):
                                     f"{partition('quarantine', 'shapes', date)}/run={pointer['run_id']}"}
    gate = lake.get_json(f"quality/curated/dt={date}/run={pointer['run_id']}/result.json")
    assert gate["success"] and lake.exists(f"quality/curated/dt={date}/run={pointer['run_id']}/data_docs/index.html")
    return pointer


# The smoke preset: every stage for real at check size (a 40-step model draws blobs, so gates 2 and 5
# have lowered bars there; the demo keeps them).
CONF = {"preset": "smoke"}


def assert_model_published(lake, date, prompts):
    """Stage 2: a gated training run, handed to stage 3 through its published pointer; then stages 3-5."""
    pointer = resolve(lake, partition("training", "shapes-cvae", date))
    summary = lake.get_json(f"{pointer['run_prefix']}/_SUMMARY.json")
    assert summary["steps"] == 40 and summary["world_size"] == 2
    assert summary["final_val_loss"] < summary["initial_val_loss"]
    assert lake.exists(f"{pointer['run_prefix']}/model.safetensors")
    gate = lake.get_json(f"quality/training/dt={date}/run={pointer['run_id']}/result.json")
    assert gate["success"]
    # Stage 3: registered as the candidate, the smoke preset's variants measured, smoke-tested (every
    # variant kind is built in tests/unit/registry/test_deploy.py).
    from aigc.registry import Registry

    record = Registry(lake, "shapes-cvae").get("candidate")
    assert record["training_run"].endswith(pointer["run_prefix"])
    assert set(record["variants"]) == {"fp32", "int8"}
    assert record["smoke_test"]["passed"] and "fp32" in record["smoke_test"]["eligible_variants"]
    # Stage 4: two mapped shards, every one of the producer's prompts answered once, the blocked ones refused. The
    # candidate's generations are its evaluation set: published with its evaluation, not as content for users.
    with pytest.raises(NotPublished):
        resolve(lake, partition("generations", "shapes-cvae", date))
    evaluation = resolve(lake, partition("evaluations", "shapes-cvae", date))
    generated = {"run_prefix": evaluation["generations"], "run_id": evaluation["generations"].rsplit("run=", 1)[1]}
    manifest = lake.get_json(f"{generated['run_prefix']}/_MANIFEST.json")
    blocked = sum(1 for p in prompts if "gore" in p["prompt"])
    assert len(manifest["shards"]) == 2 and manifest["rows"] == manifest["prompts"] == len(prompts)
    assert (manifest["refused"], manifest["generated"]) == (blocked, len(prompts) - blocked)
    shards = [k for k in lake.list(generated["run_prefix"]) if k.rsplit("/", 1)[-1].startswith("shard-")]
    answered = lake.read_parquet(shards, columns=["prompt_id"]).column("prompt_id").to_pylist()
    assert sorted(answered) == sorted(p["prompt_id"] for p in prompts)  # each once, by its own id
    assert lake.get_json(f"quality/generate/dt={date}/run={generated['run_id']}/result.json")["success"]
    assert lake.get_bytes(f"{generated['run_prefix']}/gallery.png").startswith(b"\x89PNG")
    # Stage 5: evaluated, gate 5 passed (lowered bars, see CONF), promoted, report published.
    assert "Pareto" in lake.get_bytes(f"{evaluation['run_prefix']}/report.html").decode()
    assert Registry(lake, "shapes-cvae").aliases()["aliases"]["production"] == record["version"]


def producer_prompts(n: int) -> list[dict]:
    """A producer's prompt file: ``n`` requests, one in four asking for what the safety filter refuses."""
    kinds = ["a small red circle on the left", "a large blue square at the top",
             "a medium green triangle in the center", "a small black square with gore"]
    return [{"prompt_id": f"req-{i}", "prompt": kinds[i % 4], "seed": i} for i in range(n)]


def _drop_bytes(raw, date: str) -> dict[str, tuple[bytes, str]]:
    """Every object of a date's drop: its bytes and its version (a local file's modification time)."""
    return {key: (raw.get_bytes(key), version) for key, _size, version in raw.list_versions(f"dt={date}")}


def test_a_scheduled_prepare_with_the_default_preset_reads_a_producers_drop_and_writes_nothing_there(
        airflow_env, tmp_path):
    """Fails on d70b129: the form's "synthetic drop" was on by default, so the scheduled run deleted the producer's
    drop and trained on synthetic shapes. Now the default preset waits for the producer's _SUCCESS, curates
    exactly its records, and leaves every file of it as it was (bytes and modification times)."""
    from aigc.config import RawDropConfig
    from aigc.workloads.image.rawdrop import make_raw_drop

    date = "2026-11-23"
    lake = open_lake(str(tmp_path / "lake"))
    producer = lake.sub("raw/shapes")
    made = make_raw_drop(producer, date, RawDropConfig(n=1100, seed=8, dirt_rate=0.0, source="shapes"))
    producer.delete(f"dt={date}/_planted.json")  # a producer's drop: records, images, _SUCCESS
    before = _drop_bytes(producer, date)
    env = {**airflow_env, "AIGC_LAKE_URI": str(tmp_path / "lake"), "AIGC_DEFAULT_PRESET": "default"}
    rc, log = dags_test(env, date, {}, dag_id="aigc_prepare")  # the form unchanged, as the schedule runs it
    assert rc == 0, log[-4000:]
    assert "Skipping tasks [('make_demo_drop', -1)]" in log  # the branch took the producer's way
    assert _drop_bytes(producer, date) == before
    assert not lake.list("raw/_synthetic")
    pointer = resolve(lake, partition("curated", "shapes", date))
    manifest = lake.get_json(f"{pointer['run_prefix']}/_manifest.json")
    assert manifest["input_records"] == manifest["rows"] == made["records"]  # exactly its records, all clean
    curated = lake.read_parquet([s["key"] for s in manifest["shards"]], columns=["id"]).column("id").to_pylist()
    dropped = [json.loads(line)["id"] for key in sorted(before) if key.endswith(".jsonl")
               for line in before[key][0].splitlines()]
    assert sorted(curated) == sorted(dropped)
    assert manifest["drop"]["objects"] == len(before)


def test_dag_prepares_a_producers_drop_on_s3_through_the_airflow_connection_as_make_demo_shows_it(
        airflow_env, s3_server):
    """The whole DAG on S3, on a producer's drop and prompt file, through `make demo`'s runner and console
    (the synthetic drop's runs are tests/e2e/)."""
    from aigc.config import RawDropConfig
    from aigc.workloads.image.rawdrop import make_raw_drop

    date = "2026-11-25"
    uri = f"s3://{s3_server.bucket}/e2e-{uuid.uuid4().hex[:8]}"
    lake = open_lake(uri, s3_server.options())
    make_raw_drop(lake.sub("raw/shapes"), date, RawDropConfig(n=300, seed=5))  # the "producer"
    prompts = producer_prompts(12)
    lake.put_bytes(f"prompts/shapes/dt={date}/prompts.jsonl", "".join(json.dumps(p) + "\n" for p in prompts).encode())
    marker = lake.get_bytes(f"raw/shapes/dt={date}/_SUCCESS")
    env = {**airflow_env, "AIGC_LAKE_URI": uri, "AIRFLOW_CONN_AWS_DEFAULT": s3_server.env()["AIRFLOW_CONN_AWS_DEFAULT"]}
    console = io.StringIO()
    rc, log = dags_test(env, date, {**CONF, "drop": "producer"}, console=console)
    assert rc == 0, log[-4000:]
    # `make demo`'s console: a line as each task starts and ends, training's progress, the gates' verdicts.
    shown = console.getvalue()
    for task in ("wait_for_drop", "prepare_part[0]", "merge_parts", "train", "gate_training",
                 "generate_shard_cpu[1]", "evaluate", "publish_content"):
        assert f"▶ {task}\n" in shown and f"✔ {task} success (" in shown, (task, shown)
    assert "▶ generate_shard[" not in shown  # int8 serves on the CPU: no shard took a GPU slot
    assert "step 40/40" in shown and "gate evaluation: PASS" in shown
    assert len(shown.splitlines()) < 120  # the few lines a person watches, not the task log
    assert "state=success" in log
    assert lake.get_bytes(f"raw/shapes/dt={date}/_SUCCESS") == marker  # prepared as dropped, not regenerated
    assert_published(lake, date)
    assert_model_published(lake, date, prompts)  # torchrun's workers got the connection's credentials too


def test_missing_prompts_fail_planning_at_once_with_the_reason(airflow_env, tmp_path):
    from aigc.config import RawDropConfig
    from aigc.workloads.image.rawdrop import make_raw_drop

    lake = open_lake(str(tmp_path / "lake"))
    make_raw_drop(lake.sub("raw/shapes"), "2026-11-24", RawDropConfig(n=300, seed=6))
    env = {**airflow_env, "AIGC_LAKE_URI": str(tmp_path / "lake")}
    rc, log = dags_test(env, "2026-11-24", {**CONF, "drop": "producer"})
    assert rc != 0 or "state=failed" in log
    assert "no prompt file at" in log and "prompts/shapes/dt=2026-11-24/prompts.jsonl" in log
    assert "up_for_retry" not in log  # a missing input is not retried


def test_a_failing_gate_fails_the_run_and_publishes_nothing(airflow_env, tmp_path):
    env = {**airflow_env, "AIGC_LAKE_URI": str(tmp_path / "lake")}
    console = io.StringIO()
    rc, log = dags_test(env, "2026-11-26", {**CONF, "min_rows": 100_000}, console=console)
    assert rc != 0 or "state=failed" in log
    assert "partition: expect_column_values_to_be_between(column='rows', min_value=100000" in log
    assert "fewer than the minimum 100000" in log and "the trigger form's 'min_rows' field" in log
    assert "✘ gate_curated failed (" in console.getvalue() and "gate curated: FAIL" in console.getvalue()
    lake = open_lake(str(tmp_path / "lake"))
    with pytest.raises(NotPublished):
        resolve(lake, partition("curated", "shapes", "2026-11-26"))
    results = [k for k in lake.list("quality/curated/dt=2026-11-26") if k.endswith("result.json")]
    assert results and not lake.get_json(results[0])["success"]  # the failed audit is kept
