"""The hf-diffusion workload through Airflow: `make demo WORKLOAD=hf-diffusion` as a DAG run of the smoke preset on
the pixel demo base (IFPipeline), the five stages as tasks, torchrun training one process. The stages' own checks
(variants over precision × steps × scheduler, the served options, the scorers) run from the stage API and the CLI in
tests/unit/workloads/test_hf_diffusion*.py."""

from __future__ import annotations

import io

import pytest

from aigc.lake import open_lake
from aigc.registry import Registry

pytestmark = pytest.mark.airflow
DATE = "2026-11-29"


def test_the_demo_pipeline_goes_through_the_five_stages_as_a_dag_run(airflow_env, dags_test, tmp_path):
    lake = open_lake(str(tmp_path / "lake"))
    env = {**airflow_env, "AIGC_LAKE_URI": lake.uri}
    # The smoke preset at the unit test's sizes (test_hf_diffusion.py): the tasks and their wiring are what this
    # test adds, not more images.
    conf = {"preset": "smoke", "workload": "hf-diffusion", "nproc": 1, "n_records": 80, "min_rows": 40,
            "train_steps": 6, "prompts": 8, "eval_prompts": 16, "generate_shards": 1}
    console = io.StringIO()
    rc, log = dags_test(env, DATE, conf, console=console, timeout=900, name="pipeline-hf-diffusion")
    assert rc == 0 and "state=failed" not in log, log[-4000:]
    assert "gate evaluation: PASS" in console.getvalue()
    (card_key,) = [k for k in lake.list("training/hf-diffusion") if k.endswith("/model.json")]
    assert lake.get_json(card_key)["diffusion"]["base_uri"] == "demo:pixel"
    (metrics_key,) = [k for k in lake.list("evaluations/hf-diffusion") if k.endswith("/metrics.json")]
    metrics = lake.get_json(metrics_key)
    assert metrics["judged_by"] == "checker" and set(metrics["unscored"]) == {"clip", "features", "safety"}
    assert lake.get_json("models/hf-diffusion/aliases.json")["aliases"]["production"] == "v0001"
    assert set(Registry(lake, "hf-diffusion").get("v0001")["variants"]) == {"fp32", "fp32-s4-dpm"}  # the smoke's
