"""The image workload's stage 5: the day's generated content measured, the Pareto grid, the review queue, the report.

    evaluations/<model>/dt=<date>/run=<id>/metrics.json     every figure gate 5 judges
    evaluations/<model>/dt=<date>/run=<id>/pareto.json|png  the grid, its front, the recommendation
    evaluations/<model>/dt=<date>/run=<id>/review/          queue.jsonl + images/ (least certain outputs)
    evaluations/<model>/dt=<date>/run=<id>/report.html      metrics, Pareto plot, gallery, loss curve, lineage
    evaluations/<model>/labels/*.jsonl                     reviewers' labels (see review.py), read every run
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time

import numpy as np
from PIL import Image

from aigc.config import PipelineConfig
from aigc.evaluate.metrics import pareto_front, recommend
from aigc.evaluate.review import agreement
from aigc.evaluate.runs import evaluation_prefix, generated_rows
from aigc.evaluate.stats import paired_difference, wilson
from aigc.lake import Lake
from aigc.lake.keys import join, parse_date
from aigc.plots import pareto_chart
from aigc.registry import Registry, VersionNotFound
from aigc.workloads.image.checker import ATTRIBUTES
from aigc.workloads.image.config import image_settings
from aigc.workloads.image.grid import measure_grid, variant_quality
from aigc.workloads.image.metrics import alignment_estimate, assess, diversity, frechet_estimate, require_scorable
from aigc.workloads.image.reference import checker_reference, evaluation_prompts
from aigc.workloads.image.report import write_report

log = logging.getLogger(__name__)


def _decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def real_images(lake: Lake, dataset: str, date: str, n: int) -> tuple[list[np.ndarray], list[str]]:
    """Held-out real images of the day (the curated validation split), with their captions."""
    from aigc.train.data import load_window

    index = load_window(lake, dataset, date, 1, ("caption",))
    _train, held_out = index.split(0.05, n)
    if len(held_out) < 16:  # a tiny partition: take what there is
        held_out = np.arange(min(n, len(index)))
    images, captions = [], []
    for s in sorted(set(index.shard_of[held_out].tolist())):
        column = index.shard(lake, s).read(columns=["image"]).column("image")
        for i in held_out[index.shard_of[held_out] == s]:
            images.append(_decode(column[int(index.row_of[i])].as_py()))
            captions.append(index.columns["caption"][i])
    return images, captions


def export_queue(lake: Lake, prefix: str, generated: list[dict], readings: list[dict], n: int, run_id: str) -> int:
    """The ``n`` least certain outputs (lowest checker margin) to ``review/queue.jsonl``, each with its image under
    ``review/images/`` and the checker's reading, for reviewers to label (``aigc.evaluate.review``)."""
    ranked = sorted(range(len(generated)), key=lambda i: (readings[i]["margin"], generated[i]["prompt_id"]))[:n]
    lines = []
    for i in ranked:
        row, reading = generated[i], readings[i]
        image_key = join(prefix, "review", "images", f"{row['prompt_id']}.png")
        lake.put_bytes(image_key, row["image"])
        lines.append({"run_id": run_id, "prompt_id": row["prompt_id"], "prompt": row["prompt"], "seed": row["seed"],
                      "image": lake.url(image_key), "checker_margin": round(reading["margin"], 4),
                      "checker_read": reading["read"], "checker_correct": reading.get("all_correct"),
                      "human_correct": None})
    lake.put_bytes(join(prefix, "review", "queue.jsonl"), "".join(json.dumps(x) + "\n" for x in lines).encode())
    return len(lines)


def evaluate(lake: Lake, generation: dict, cfg: PipelineConfig, *, run_id: str) -> dict:
    """Measure the generation run ``generation`` (stage 4's summary: model, version, date, run_id).

    Every figure a decision reads comes with its interval and sample size (``stats.py``): the
    checker on its reference set and on the day's real images, the day's content, each grid
    configuration on the evaluation set, and the candidate against production on the same prompts.
    """
    started = time.perf_counter()
    date, model, version = parse_date(generation["date"]).isoformat(), generation["model"], generation["version"]
    prefix = evaluation_prefix(model, date, run_id)
    registry = Registry(lake, model)
    record = registry.get(version)
    e, s = cfg.evaluate, image_settings(cfg)

    # The checker's own accuracy: on its fixed reference set, and on the day's held-out real images.
    real, real_captions = real_images(lake, cfg.prepare.dataset, date, s.checker_images)
    require_scorable(real_captions, f"held-out captions of curated/{cfg.prepare.dataset}/dt={date}")
    resolution = real[0].shape[0] if real else s.resolution
    reference = checker_reference(lake, resolution, s.reference_seeds, e.confidence)
    checker = assess(real, real_captions)

    # The day's content: the generation run gate 5 publishes if it passes.
    rows = generated_rows(lake, generation)
    generated = [r for r in rows if r["status"] == "generated"]
    require_scorable([r["prompt"] for r in generated], f"generated prompts of run {generation['run_id']}")
    quality = assess([_decode(r["image"]) for r in generated], [r["prompt"] for r in generated])
    from aigc.safety import blocked_term

    violations = sum(blocked_term(r["prompt"], cfg.prepare.blocklist) is not None for r in generated)

    # The grid on the evaluation set: the same prompts and seeds for every configuration.
    prompts = evaluation_prompts(e.eval_prompts, e.seed)
    points, verdicts = measure_grid(lake, model, version, record, prompts, checker["features"], cfg)
    chosen, points = recommend(points, verdicts, epsilon=e.epsilon, confidence=e.confidence,
                               latency_tolerance=e.latency_tolerance)
    front = pareto_front([p for p in points if p["alignment"] is not None], "alignment", "latency_ms")

    regression, production = None, None
    with contextlib.suppress(VersionNotFound):
        production = registry.resolve("production")
    if production and production != version:
        # Like for like: both models' fp32 (always eligible: gate 3 requires it) on the same prompts and seeds.
        from aigc.workloads.image.serving import Generator  # torch: only when there is a production to compare

        prod = variant_quality(Generator.load(lake, model, production, "fp32"), prompts, checker["features"],
                               e.confidence)
        regression = paired_difference(prod["verdicts"], verdicts["fp32"], e.confidence)

    content = alignment_estimate(quality, e.confidence)
    model_alignment = wilson(sum(verdicts[chosen["variant"]]), len(prompts), e.confidence) if chosen else None
    fid = frechet_estimate(checker["features"], quality["features"], e.confidence)
    metrics = {
        "date": date, "model": model, "version": version, "generation_run": generation["run_id"],
        "alignment": quality["alignment"], "scored": quality["scored"], "generated": len(generated),
        "refused": sum(r["status"] == "refused" for r in rows), "safety_violations": violations,
        "checker_accuracy": {a: v["value"] for a, v in reference["accuracy"].items()},
        "checker_accuracy_real": checker["alignment"], "checker_images": len(real),
        "checker_reference": {k: reference[k] for k in ("scenes", "resolution", "seeds", "misread", "uri")},
        "fid": fid.value, "diversity": diversity(quality["features"], [r["prompt"] for r in generated]),
        "eval_prompts": len(prompts), "recommended": chosen, "recommendation_rule": None,
        "production_before": production,
        "regression_vs_production": round(regression.value, 4) if regression else None,
        "intervals": {
            "alignment": content.to_dict(),
            "model_alignment": model_alignment.to_dict() if model_alignment else None,
            "checker_reference": reference["accuracy"]["all"],
            "checker_real": wilson(sum(r["all_correct"] for r in checker["rows"] if r["scorable"]),
                                   checker["scored"], e.confidence).to_dict(),
            "fid": fid.to_dict(),
            "regression_vs_production": regression.to_dict() if regression else None,
        },
        "fid_note": "Fréchet distance on the checker's 12 features (colour, background, centre, extent, "
                    "coverage), not Inception-FID",
    }
    rule = (f"the cheapest configuration whose alignment is not significantly worse than the best's by more than "
            f"{e.epsilon} (paired {e.confidence:.0%} interval on the same {len(prompts)} prompts and seeds); "
            f"a configuration is cheaper only when faster by more than {e.latency_tolerance:.0%} in every one of "
            f"{e.latency_rounds} timing rounds, and the smallest on disk of those no other is cheaper than wins")
    metrics["recommendation_rule"] = rule
    lake.put_json(join(prefix, "pareto.json"), {"points": points, "front": front, "recommended": chosen,
                                                "rule": rule, "eval_prompts": len(prompts)})
    lake.put_bytes(join(prefix, "pareto.png"), pareto_chart(points, front, chosen))
    queue = export_queue(lake, prefix, generated, quality["rows"], e.review_items, run_id)
    metrics["review"] = {"queued": queue, **agreement(lake, model)}
    metrics["seconds"] = round(time.perf_counter() - started, 2)
    lake.put_json(join(prefix, "metrics.json"), metrics)
    write_report(lake, prefix, metrics, points, front, record, generation)
    log.info("evaluation %s: alignment %s (content), %s (recommended %s on the evaluation set); checker %s on its "
             "reference set, %s on %d real images; FID %.4f; %d safety violation(s)", run_id, content,
             model_alignment, chosen and f"{chosen['variant']}/{chosen['policy']}",
             reference["accuracy"]["all"]["value"], checker["alignment"]["all"], len(real), metrics["fid"], violations)
    return {"stage": "evaluate", "date": date, "run_id": run_id, "model": model, "version": version,
            "generation_run": generation["run_id"], "alignment": quality["alignment"]["all"],
            "checker_accuracy": metrics["checker_accuracy"]["all"], "fid": metrics["fid"],
            "safety_violations": violations, "recommended": chosen, "report_uri": lake.url(join(prefix, "report.html")),
            "run_uri": lake.url(prefix), "attributes": {a: quality["alignment"][a] for a in ATTRIBUTES}}
