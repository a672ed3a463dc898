"""The catalog reads what the real stages wrote: dates, published runs, every gate verdict, the registry."""

import dataclasses

import pytest

from aigc.catalog import DEPLOY_GATE, GATES, STAGES, Catalog, report_key
from aigc.config import CuratedGateThresholds, PrepareConfig, TrainingGateThresholds
from aigc.generate.run import MANIFEST as GENERATION_MANIFEST
from aigc.lake.publish import resolve
from aigc.quality.curated import validate_curated
from aigc.quality.evaluation import promote_and_publish, validate_evaluation
from aigc.quality.gate import GateFailed
from aigc.quality.generation import validate_generation
from aigc.quality.training import validate_training
from aigc.workloads.image import IMAGE, prepare_image
from tests.training_fixtures import DATE, publish_day
from tests.unit.evaluate.test_evaluate import LENIENT, config, evaluate, generate

TRAINING_RUN = "20261120T000000000000Z-model1"  # the run tests.training_fixtures trains and publishes
EVALUATION_RUN = "20261120T000000000000Z-eval01"


def publish_everything(lake) -> dict:
    """On ``deployed_lake`` (curated, trained, registered, gate 3 passed): gates 1 and 2 on the published runs,
    a second curated run that fails gate 1 (so it is not published), then generate, gate 4, evaluate, gate 5,
    promote and publish, all with the real stage functions. Returns what the stages returned."""
    curated = resolve(lake, f"curated/shapes/dt={DATE}")["run_id"]
    lenient_gate1 = CuratedGateThresholds(min_rows=100)
    validate_curated(lake, "shapes", DATE, curated, lenient_gate1, PrepareConfig(workers=1), IMAGE.records(None))
    rejected = prepare_image(lake.sub("raw/shapes"), lake, DATE, PrepareConfig(workers=1))["run_id"]
    with pytest.raises(GateFailed) as failed:
        validate_curated(lake, "shapes", DATE, rejected, dataclasses.replace(lenient_gate1, min_rows=100_000),
                         PrepareConfig(workers=1), IMAGE.records(None))
    validate_training(lake, "shapes-cvae", DATE, TRAINING_RUN, TrainingGateThresholds(max_final_val_loss=1.0))
    cfg = config()
    generated = generate(lake, cfg)
    validate_generation(lake, generated, cfg, IMAGE)
    evaluated = evaluate(lake, generated, cfg, run_id=EVALUATION_RUN)
    validate_evaluation(lake, evaluated, LENIENT, IMAGE)
    return {"curated": curated, "rejected": rejected, "rejected_failures": failed.value.failures,
            "generated": generated, "evaluated": evaluated, "published": promote_and_publish(lake, evaluated, cfg)}


def test_the_catalogs_names_are_the_ones_the_stages_write():
    from aigc.prepare.run import MANIFEST as CURATED_MANIFEST
    from aigc.quality import curated, deploy, evaluation, generation, training
    from aigc.train.artifacts import SUMMARY

    assert GATES == (curated.GATE, training.GATE, deploy.GATE, generation.GATE, evaluation.GATE)
    assert DEPLOY_GATE == deploy.GATE
    assert [s.summary for s in STAGES] == [CURATED_MANIFEST, SUMMARY, GENERATION_MANIFEST, "metrics.json"]


def test_the_whole_pipelines_date_as_people_read_it(deployed_lake):
    done = publish_everything(deployed_lake)
    catalog = Catalog(deployed_lake, "shapes", "shapes-cvae")
    assert catalog.dates() == [DATE]  # evaluations/<model>/labels/ and the like are not dates

    (runs,) = catalog.runs()
    assert runs["published"]["curated"]["run_id"] == done["curated"]
    assert runs["published"]["training"]["run_id"] == TRAINING_RUN
    assert runs["published"]["generations"]["run_id"] == done["generated"]["run_id"]
    assert runs["published"]["evaluations"]["run_id"] == EVALUATION_RUN
    verdicts = {v["run_id"]: v for v in runs["gates"]["curated"]}
    assert set(verdicts) == {done["curated"], done["rejected"]}
    assert verdicts[done["curated"]]["success"] and verdicts[done["curated"]]["failures"] == []
    rejected = verdicts[done["rejected"]]
    assert not rejected["success"] and rejected["failures"] == done["rejected_failures"]
    assert any("min_value=100000" in f and "1 of 1 rows unexpected" in f for f in rejected["failures"])
    assert deployed_lake.exists(rejected["result_key"]) and deployed_lake.exists(rejected["data_docs_key"])
    assert [v["run_id"] for v in runs["gates"][DEPLOY_GATE]] == ["v0001"]
    assert all(runs["gates"][g] and all(v["success"] for v in runs["gates"][g]) for g in GATES if g != "curated")

    day = catalog.day(DATE)
    manifest = day["published"]["curated"]["summary"]
    assert manifest["run_id"] == done["curated"] and manifest["rows"] + sum(manifest["quarantined"].values()) == 500
    assert day["published"]["training"]["summary"]["steps"] == 30
    assert day["published"]["generations"]["summary"]["generated"] == done["generated"]["generated"]
    assert day["published"]["evaluations"]["summary"]["gates"]["evaluation"]["success"] is True
    (version,) = day["versions"]
    assert version["version"] == "v0001" and version["aliases"] == ["best", "candidate", "production"]
    # deployed_lake builds fp32 and bf16 and judges only fp32 fast and faithful enough
    assert {n: v["eligible"] for n, v in version["variants"].items()} == {"fp32": True, "bf16": False}

    registry = catalog.registry()
    assert registry["aliases"] == {"candidate": "v0001", "production": "v0001", "best": "v0001"}  # the first
    assert [(h["alias"], h["to"]) for h in registry["history"]] == [("candidate", "v0001"), ("best", "v0001"),
                                                                     ("production", "v0001")]
    assert registry["history"][-1]["reason"].startswith(f"gate 5 passed for {DATE}")

    latest = catalog.latest_evaluation()
    assert latest["date"] == DATE and latest["summary"]["version"] == "v0001"
    assert set(latest["files"]) == {"report.html", "pareto.png", "gallery.png"}
    assert report_key(done["published"]["report_uri"]) == latest["files"]["report.html"]


def test_a_curated_only_lake_on_each_backend(lake):
    catalog = Catalog(lake, "shapes", "shapes-cvae")
    assert catalog.dates() == [] and catalog.runs() == [] and catalog.latest_evaluation() is None
    assert catalog.registry() == {"model": "shapes-cvae", "aliases": {}, "history": [], "versions": []}
    summary = publish_day(lake, DATE, n=200)
    validate_curated(lake, "shapes", DATE, summary["run_id"], CuratedGateThresholds(min_rows=10),
                     PrepareConfig(workers=1), IMAGE.records(None))
    lake.put_bytes("evaluations/shapes-cvae/labels/reviewer.jsonl", b"{}\n")  # not a partition

    assert catalog.dates() == [DATE]
    assert catalog.published("curated", DATE)["summary"]["input_records"] == 200
    assert catalog.published("training", DATE) is None and catalog.published("curated", "2026-11-21") is None
    verdict = catalog.gate_result("curated", DATE, summary["run_id"])
    assert verdict["success"] and catalog.gate_results("curated", DATE) == [verdict]
    assert catalog.gate_result("training", DATE, summary["run_id"]) is None
    (day,) = catalog.runs()
    assert day["published"]["curated"]["run_id"] == summary["run_id"] and day["published"]["evaluations"] is None
    assert day["gates"]["training"] == []


def test_report_keys_come_only_from_evaluation_report_uris():
    key = "evaluations/shapes-cvae/dt=2026-11-28/run=20261128T000000000000Z-abc123/report.html"
    assert report_key(f"s3://bucket/lake/{key}") == key
    assert report_key(f"file:///srv/lake/{key}") == key
    assert report_key(key) == key
    for uri in ("", "s3://b/curated/shapes/dt=2026-11-28/run=x/_manifest.json",
                "s3://b/evaluations/shapes-cvae/dt=2026-11-28/run=../report.html",
                "s3://b/evaluations/shapes-cvae/dt=2026-11-28/run=x/report.html.png"):
        assert report_key(uri) is None, uri
