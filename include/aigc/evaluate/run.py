"""``aigc evaluate``: the day's generated content measured, the Pareto grid, the review queue, the report.

    evaluations/<model>/dt=<date>/run=<id>/metrics.json     every figure gate 5 judges
    evaluations/<model>/dt=<date>/run=<id>/pareto.json|png  the grid, its front, the recommendation
    evaluations/<model>/dt=<date>/run=<id>/review/          queue.jsonl + images/ (least certain outputs)
    evaluations/<model>/dt=<date>/run=<id>/report.html      metrics, Pareto plot, gallery, loss curve, lineage
    evaluations/<model>/labels/*.jsonl                     reviewers' labels (see review.py), read every run
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import logging
import time

import numpy as np
from PIL import Image

from aigc.config import PipelineConfig
from aigc.evaluate.checker import ATTRIBUTES
from aigc.evaluate.metrics import assess, diversity, frechet_distance, pareto_front, recommend
from aigc.evaluate.report import write_report
from aigc.evaluate.review import agreement, export_queue
from aigc.generate.run import MANIFEST as GENERATION_MANIFEST
from aigc.generate.run import generation_prefix, generation_rows
from aigc.lake import Lake
from aigc.lake.keys import join, parse_date, partition, run_prefix
from aigc.plots import line_chart
from aigc.registry import Registry, VersionNotFound

log = logging.getLogger(__name__)


def evaluation_prefix(model: str, date: str | dt.date, run_id: str) -> str:
    return run_prefix(partition("evaluations", model, date), run_id)


def latest_generation(lake: Lake, model: str, date: str, run_id: str | None = None) -> dict:
    """The manifest of a generation run of ``date``: the one named, else the newest finished one."""
    part = partition("generations", model, date)
    runs = sorted({k.split("/")[3] for k in lake.list(part) if k.endswith("/" + GENERATION_MANIFEST)})
    if run_id:
        runs = [r for r in runs if r == f"run={run_id}"]
    if not runs:
        raise LookupError(f"no finished generation run{' ' + run_id if run_id else ''} under {lake.url(part)} "
                          "(run aigc generate first)")
    return lake.get_json(join(part, runs[-1], GENERATION_MANIFEST))


def _decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def real_images(lake: Lake, dataset: str, date: str, n: int) -> tuple[list[np.ndarray], list[str]]:
    """Held-out real images of the day (the curated validation split), with their captions."""
    from aigc.train.data import load_window

    index = load_window(lake, dataset, date, 1)
    _train, held_out = index.split(0.05, n)
    if len(held_out) < 16:  # a tiny partition: take what there is
        held_out = np.arange(min(n, len(index)))
    images, captions = [], []
    for s in sorted(set(index.shard_of[held_out].tolist())):
        column = lake.parquet_file(index.shards[s]).read(columns=["image"]).column("image")
        for i in held_out[index.shard_of[held_out] == s]:
            images.append(_decode(column[int(index.row_of[i])].as_py()))
            captions.append(index.captions[i])
    return images, captions


def _generated(lake: Lake, generation: dict) -> list[dict]:
    prefix = generation_prefix(generation["model"], generation["date"], generation["run_id"])
    manifest = lake.get_json(join(prefix, GENERATION_MANIFEST))
    return generation_rows(lake, manifest).to_pylist()


def _grid(lake: Lake, cfg: PipelineConfig, version: str, record: dict, prompts: list[dict],
          real_features: np.ndarray) -> list[dict]:
    """Every eligible variant × batch policy on the same prompts: quality and cost, measured."""
    from aigc.batching import AdaptiveBatcher, MemoryModel
    from aigc.registry.loader import Generator

    eligible = (record.get("smoke_test") or {}).get("eligible_variants") or ["fp32"]
    texts, seeds = [p["prompt"] for p in prompts], [p["seed"] for p in prompts]
    points = []
    for variant in eligible:
        gen = Generator.load(lake, cfg.model.name, version, variant)
        gen.generate(texts[:2], seeds[:2])  # warm-up
        for policy in cfg.evaluate.policy_list:
            t0 = time.perf_counter()
            if policy == "batch1":
                images = [gen.generate([t], [s])[0].numpy() for t, s in zip(texts, seeds, strict=True)]
            else:
                def run(batch: list[int], gen=gen) -> list:
                    return list(gen.generate([texts[i] for i in batch], [seeds[i] for i in batch]).numpy())

                batcher = AdaptiveBatcher(run, [len(t.split()) for t in texts], MemoryModel(width=256),
                                          lambda: 1 << 34, max_batch=cfg.batching.max_batch)
                images, _ = batcher()
            latency = (time.perf_counter() - t0) * 1000 / len(texts)
            quality = assess(images, texts)
            points.append({"variant": variant, "policy": policy, "alignment": quality["alignment"]["all"],
                           "fid": frechet_distance(real_features, quality["features"]),
                           "latency_ms": round(latency, 4),
                           "size_bytes": record["variants"].get(variant, {}).get("size_bytes")})
            log.info("pareto grid: %-6s %-8s alignment %.3f  %.3f ms/sample", variant, policy,
                     points[-1]["alignment"] or 0, latency)
    return points


def evaluate(lake: Lake, generation: dict, cfg: PipelineConfig, *, run_id: str) -> dict:
    """Measure the generation run ``generation`` (stage 4's summary: model, version, date, run_id)."""
    started = time.perf_counter()
    date, model, version = parse_date(generation["date"]).isoformat(), generation["model"], generation["version"]
    prefix = evaluation_prefix(model, date, run_id)
    registry = Registry(lake, model)
    record = registry.get(version)
    e = cfg.evaluate

    # The checker's own accuracy, on real images it has never been tuned on.
    real, real_captions = real_images(lake, cfg.prepare.dataset, date, e.checker_images)
    checker = assess(real, real_captions)

    rows = _generated(lake, generation)
    generated = [r for r in rows if r["status"] == "generated"]
    quality = assess([_decode(r["image"]) for r in generated], [r["prompt"] for r in generated])
    from aigc.prepare.checks import blocked_term

    violations = sum(blocked_term(r["prompt"], cfg.prepare.blocklist) is not None for r in generated)

    scorable = [r for r, q in zip(generated, quality["rows"], strict=True) if q["scorable"]][: e.pareto_prompts]
    points = _grid(lake, cfg, version, record, scorable, checker["features"])
    front = pareto_front([p for p in points if p["alignment"] is not None], "alignment", "latency_ms")
    chosen = recommend(front, "alignment", "latency_ms", e.epsilon) if front else None

    regression, production = None, None
    with contextlib.suppress(VersionNotFound):
        production = registry.resolve("production")
    if production and production != version:
        # Like for like: both models' fp32 (always eligible: gate 3 requires it) under one policy.
        policy = e.policy_list[-1]
        (prod,) = _grid(lake, cfg.override({"evaluate": {"batch_policies": policy}}), production,
                        {**registry.get(production), "smoke_test": {"eligible_variants": ["fp32"]}},
                        scorable, checker["features"])
        cand = next(p for p in points if p["variant"] == "fp32" and p["policy"] == policy)
        regression = round(prod["alignment"] - cand["alignment"], 4)

    metrics = {
        "date": date, "model": model, "version": version, "generation_run": generation["run_id"],
        "alignment": quality["alignment"], "scored": quality["scored"], "generated": len(generated),
        "refused": sum(r["status"] == "refused" for r in rows), "safety_violations": violations,
        "checker_accuracy": checker["alignment"], "checker_images": len(real),
        "fid": frechet_distance(checker["features"], quality["features"]),
        "diversity": diversity(quality["features"], [r["prompt"] for r in generated]),
        "recommended": chosen, "production_before": production, "regression_vs_production": regression,
        "fid_note": "Fréchet distance on the checker's 12 features (colour, background, centre, extent, "
                    "coverage), not Inception-FID",
    }
    lake.put_json(join(prefix, "pareto.json"), {"points": points, "front": front, "recommended": chosen,
                                                "rule": f"cheapest latency within {e.epsilon} alignment of the best"})
    lake.put_bytes(join(prefix, "pareto.png"), line_chart(
        {"grid": ([p["latency_ms"] for p in points], [p["alignment"] or 0 for p in points]),
         "front": ([p["latency_ms"] for p in front], [p["alignment"] for p in front])},
        title="alignment (all attributes) against latency per sample", xlabel="ms per sample",
        ylabel="alignment", points=True))
    queue = export_queue(lake, prefix, generated, quality["rows"], e.review_items, run_id)
    metrics["review"] = {"queued": queue, **agreement(lake, model)}
    metrics["seconds"] = round(time.perf_counter() - started, 2)
    lake.put_json(join(prefix, "metrics.json"), metrics)
    write_report(lake, prefix, metrics, points, front, record, generation)
    log.info("evaluation %s: alignment %.3f (checker %.3f on %d real images), FID %.4f, %d safety violation(s); "
             "recommended %s", run_id, quality["alignment"]["all"] or 0, checker["alignment"]["all"] or 0, len(real),
             metrics["fid"], violations, chosen)
    return {"stage": "evaluate", "date": date, "run_id": run_id, "model": model, "version": version,
            "generation_run": generation["run_id"], "alignment": quality["alignment"]["all"],
            "checker_accuracy": checker["alignment"]["all"], "fid": metrics["fid"],
            "safety_violations": violations, "recommended": chosen, "report_uri": lake.url(join(prefix, "report.html")),
            "run_uri": lake.url(prefix), "attributes": {a: quality["alignment"][a] for a in ATTRIBUTES}}
