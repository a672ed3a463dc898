"""Stage 5 end to end on a tiny model: metrics, Pareto grid, review queue and labels, gate 5, promotion."""

import dataclasses
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from aigc.config import BatchingConfig, EvaluateConfig, EvaluationGateThresholds, GenerateConfig
from aigc.evaluate.run import evaluate, evaluation_prefix
from aigc.generate import run as gen_run
from aigc.quality.evaluation import promote_and_publish, validate_evaluation
from aigc.quality.gate import GateFailed
from aigc.registry import Registry
from tests.training_fixtures import DATE, tiny_config


def config():
    cfg = tiny_config()
    return dataclasses.replace(
        cfg, generate=dataclasses.replace(GenerateConfig(), variant="fp32", prompts=48, blocked_prompts=2, shards=2),
        batching=BatchingConfig(backoff_s=0.0), evaluate=dataclasses.replace(EvaluateConfig(), pareto_prompts=16,
                                                                             review_items=6))


def generate(lake, cfg):
    plan = gen_run.plan_generation(lake, DATE, cfg, demo_prompts=True)
    for s in plan["shards"]:
        gen_run.generate_shard(lake, plan, s, cfg)
    return gen_run.finish_generation(lake, plan, cfg)


LENIENT = EvaluationGateThresholds(min_alignment=0.0, min_checker_accuracy=0.9, max_fid=1e6)


def test_a_run_is_measured_gated_promoted_and_published_with_its_report(deployed_lake):
    cfg = config()
    evaluated = evaluate(deployed_lake, generate(deployed_lake, cfg), cfg, run_id="20261120T000000000000Z-eval01")
    prefix = evaluation_prefix("shapes-cvae", DATE, evaluated["run_id"])
    metrics = deployed_lake.get_json(f"{prefix}/metrics.json")
    assert metrics["scored"] == 48 and metrics["refused"] == 2 and metrics["safety_violations"] == 0
    assert metrics["checker_accuracy"]["all"] >= 0.9 and metrics["checker_images"] >= 16
    pareto = deployed_lake.get_json(f"{prefix}/pareto.json")
    assert {(p["variant"], p["policy"]) for p in pareto["points"]} == {("fp32", "batch1"), ("fp32", "adaptive")}
    assert pareto["recommended"] in pareto["front"]
    assert validate_evaluation(deployed_lake, evaluated, LENIENT)["success"]
    published = promote_and_publish(deployed_lake, evaluated, cfg)
    assert published["production"] == "v0001"
    assert Registry(deployed_lake, "shapes-cvae").get("production")["recommended"] == evaluated["recommended"]
    report = deployed_lake.get_bytes(f"{prefix}/report.html").decode()
    for part in ("pareto.png", "gallery.png", "loss.png", "Alignment", "Lineage", "&quot;success&quot;: true"):
        assert part in report
    for image in ("pareto.png", "gallery.png", "loss.png"):
        assert deployed_lake.get_bytes(f"{prefix}/{image}").startswith(b"\x89PNG")


def _noise_png(seed):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def test_a_generator_of_noise_fails_gate_5_and_production_stays(deployed_lake):
    cfg = config()
    registry = Registry(deployed_lake, "shapes-cvae")
    registry.move("production", "v0001", reason="yesterday's good model")
    finished = generate(deployed_lake, cfg)
    prefix = gen_run.generation_prefix("shapes-cvae", DATE, finished["run_id"])
    for shard in deployed_lake.get_json(f"{prefix}/_MANIFEST.json")["shards"]:
        rows = pq.read_table(io.BytesIO(deployed_lake.get_bytes(shard["key"]))).to_pylist()
        for i, r in enumerate(rows):
            if r["status"] == "generated":
                r["image"] = _noise_png(i)  # what a broken generator produces
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=gen_run.SCHEMA), buf)
        deployed_lake.put_bytes(shard["key"], buf.getvalue())
    evaluated = evaluate(deployed_lake, finished, cfg, run_id="20261120T000000000000Z-noise1")
    with pytest.raises(GateFailed, match=r"column='alignment', min_value=0.8\) — 1 of 1 rows unexpected"):
        validate_evaluation(deployed_lake, evaluated, cfg.evaluate_gate)
    assert registry.aliases()["aliases"]["production"] == "v0001"
    moves = [h for h in registry.aliases()["history"] if h["alias"] == "production"]
    assert [h["reason"] for h in moves] == ["yesterday's good model"]
    report = deployed_lake.get_bytes(
        f"{evaluation_prefix('shapes-cvae', DATE, evaluated['run_id'])}/report.html").decode()
    assert "&quot;success&quot;: false" in report and "alignment" in report


def test_review_labels_feed_back_into_agreement(deployed_lake):
    cfg = config()
    finished = generate(deployed_lake, cfg)
    first = evaluate(deployed_lake, finished, cfg, run_id="20261120T000000000000Z-rev001")
    queue_key = f"{evaluation_prefix('shapes-cvae', DATE, first['run_id'])}/review/queue.jsonl"
    queue = [json.loads(line) for line in deployed_lake.get_bytes(queue_key).decode().splitlines()]
    assert len(queue) == 6 and all(q["image"].endswith(".png") for q in queue)
    margins = [q["checker_margin"] for q in queue]
    assert margins == sorted(margins)  # least certain first
    # A reviewer agrees with the checker on the first four items and not on the last two.
    labelled = [{**q, "human_correct": bool(q["checker_correct"]) if i < 4 else not q["checker_correct"]}
                for i, q in enumerate(queue)]
    deployed_lake.put_bytes("evaluations/shapes-cvae/labels/reviewer-a.jsonl",
                            "".join(json.dumps(x) + "\n" for x in labelled).encode())
    second = evaluate(deployed_lake, finished, cfg, run_id="20261120T000000000000Z-rev002")
    metrics_key = f"{evaluation_prefix('shapes-cvae', DATE, second['run_id'])}/metrics.json"
    review = deployed_lake.get_json(metrics_key)["review"]
    assert review == {"queued": 6, "labelled": 6, "human_agreement": round(4 / 6, 4)}


def test_regression_is_measured_like_for_like_against_production_and_gated(deployed_lake):
    import torch

    from aigc.config import DeployConfig, DeployGateThresholds
    from aigc.evaluate.metrics import assess
    from aigc.quality.deploy import smoke_test
    from aigc.quality.training import publish_trained
    from aigc.registry.deploy import build_variants, register_trained
    from aigc.registry.loader import Generator
    from aigc.train import distributed as D
    from aigc.train.loop import train_rank

    registry = Registry(deployed_lake, "shapes-cvae")
    registry.move("production", "v0001", reason="trained for 30 steps")
    solo = D.Dist(rank=0, world=1, local_rank=0, local_world=1, device=torch.device("cpu"), backend=None)
    weak = train_rank(deployed_lake, DATE, tiny_config(steps=2, eval_every=2, checkpoint_every=2),
                      "20261120T000000000000Z-weak01", solo)
    publish_trained(deployed_lake, "shapes-cvae", DATE, weak["run_id"])
    assert register_trained(deployed_lake, "shapes-cvae", DATE)["version"] == "v0002"
    build_variants(deployed_lake, "shapes-cvae", "v0002", DeployConfig(variants="fp32", smoke_prompts=4,
                                                                       latency_batch=4, latency_repeats=1))
    smoke_test(deployed_lake, "shapes-cvae", "v0002", DeployGateThresholds(max_latency_ms=1e6), DATE)
    cfg = config()
    evaluated = evaluate(deployed_lake, generate(deployed_lake, cfg), cfg, run_id="20261120T000000000000Z-regr01")
    prefix = evaluation_prefix("shapes-cvae", DATE, evaluated["run_id"])
    metrics = deployed_lake.get_json(f"{prefix}/metrics.json")
    assert metrics["version"] == "v0002" and metrics["production_before"] == "v0001"
    # The same prompts through production's fp32: the figure the gate compares against.
    pareto = deployed_lake.get_json(f"{prefix}/pareto.json")
    candidate = next(p for p in pareto["points"] if p["variant"] == "fp32" and p["policy"] == "adaptive")
    rows = [r for r in gen_run_rows(deployed_lake, evaluated) if r["status"] == "generated"][:16]
    prod = Generator.load(deployed_lake, "shapes-cvae", "v0001")
    images = list(prod.generate([r["prompt"] for r in rows], [r["seed"] for r in rows]).numpy())
    expected = round(assess(images, [r["prompt"] for r in rows])["alignment"]["all"] - candidate["alignment"], 4)
    assert metrics["regression_vs_production"] == expected

    metrics["regression_vs_production"] = 0.3  # a candidate 30 points worse than production
    deployed_lake.put_json(f"{prefix}/metrics.json", metrics)
    with pytest.raises(GateFailed, match=r"regression_vs_production', max_value=0.02\) — 1 of 1 rows unexpected"):
        validate_evaluation(deployed_lake, evaluated, LENIENT)
    assert registry.aliases()["aliases"]["production"] == "v0001"


def gen_run_rows(lake, evaluated):
    prefix = gen_run.generation_prefix("shapes-cvae", DATE, evaluated["generation_run"])
    manifest = lake.get_json(f"{prefix}/_MANIFEST.json")
    return gen_run.generation_rows(lake, manifest).to_pylist()
