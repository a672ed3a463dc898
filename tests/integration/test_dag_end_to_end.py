"""The DAGs in real Airflow (`airflow dags test`) on the paths where they stop: the default preset's scheduled
prepare of a producer's drop, a missing prompt file, a failing gate. The whole pipeline on S3 through the
``aws_default`` connection runs in test_stage_dags_match_the_cli.py (the text workload, as `make demo
WORKLOAD=text` shows it), and the image workload's through a live deployment in tests/e2e/.
"""

import io
import json

import pytest

from aigc.lake import open_lake
from aigc.lake.keys import partition
from aigc.lake.publish import NotPublished, resolve

pytestmark = pytest.mark.airflow


# The smoke preset: every stage for real at check size (a 40-step model draws blobs, so gates 2 and 5
# have lowered bars there; the demo keeps them).
CONF = {"preset": "smoke"}


def _drop_bytes(raw, date: str) -> dict[str, tuple[bytes, str]]:
    """Every object of a date's drop: its bytes and its version (a local file's modification time)."""
    return {key: (raw.get_bytes(key), version) for key, _size, version in raw.list_versions(f"dt={date}")}


def test_a_scheduled_prepare_with_the_default_preset_reads_a_producers_drop_and_writes_nothing_there(
        airflow_env, dags_test, tmp_path):
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


def test_missing_prompts_fail_planning_at_once_with_the_reason(airflow_env, dags_test, deployed_lake):
    """aigc_generate for a date whose producer dropped no prompt file: the candidate (registered, its fp32 variant
    through gate 3) is not asked to answer demo prompts in its place (the run's drop is the producer's), and
    planning fails at once.
    (The stage DAG rather than aigc_pipeline: the pipeline's planning task is the same task, after minutes of
    stages 1–3 that change nothing here.)"""
    from tests.training_fixtures import DATE

    env = {**airflow_env, "AIGC_LAKE_URI": str(deployed_lake.root)}
    rc, log = dags_test(env, DATE, {**CONF, "drop": "producer", "variant": "fp32"}, dag_id="aigc_generate")
    assert rc != 0 or "state=failed" in log
    assert "no prompt file at" in log and f"prompts/shapes/dt={DATE}/prompts.jsonl" in log
    assert "up_for_retry" not in log  # a missing input is not retried
    assert not deployed_lake.list("generations")  # nothing generated, nothing published


def test_a_failing_gate_fails_the_run_and_publishes_nothing(airflow_env, dags_test, tmp_path):
    """Gate 1 in aigc_prepare (the same task group as aigc_pipeline's: there, every later task waits on it too, and
    `dags test` then spends a second per level of the graph marking them upstream-failed)."""
    env = {**airflow_env, "AIGC_LAKE_URI": str(tmp_path / "lake")}
    console = io.StringIO()
    rc, log = dags_test(env, "2026-11-26", {**CONF, "min_rows": 100_000}, console=console, dag_id="aigc_prepare")
    assert rc != 0 or "state=failed" in log
    assert "partition: expect_column_values_to_be_between(column='rows', min_value=100000" in log
    assert "fewer than the minimum 100000" in log and "the trigger form's 'min_rows' field" in log
    assert "✘ gate_curated failed (" in console.getvalue() and "gate curated: FAIL" in console.getvalue()
    lake = open_lake(str(tmp_path / "lake"))
    with pytest.raises(NotPublished):
        resolve(lake, partition("curated", "shapes", "2026-11-26"))
    results = [k for k in lake.list("quality/curated/dt=2026-11-26") if k.endswith("result.json")]
    assert results and not lake.get_json(results[0])["success"]  # the failed audit is kept
