"""Stage 5 for a workload that brings a checker: each output judged right or wrong (``Workload.score``), and the
core does the rest with the same rules as the image workload.

    metrics.json   the day's content: share judged right (Wilson interval); the recommended configuration's share
                   on fixed evaluation prompts; the paired interval against production; safety
    pareto.json    eligible variants × policies (one prompt at a time, or all at once), the front, the choice
    review/queue.jsonl   the outputs judged wrong first (what a reviewer should look at)
    report.html    figures, gate 5's checks, samples
"""

from __future__ import annotations

import contextlib
import html
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

from aigc.evaluate.metrics import pareto_front, recommend
from aigc.evaluate.stats import paired_difference, wilson
from aigc.lake.keys import join, parse_date
from aigc.safety import blocked_term

POLICIES = ("batch1", "adaptive")


def _timed(serving, prompts: list[str], seeds: list[int], policy: str) -> tuple[list, float]:
    t0 = time.perf_counter()
    if policy == "batch1":
        outputs = [serving.generate([p], [s])[0] for p, s in zip(prompts, seeds, strict=True)]
    else:
        outputs = serving.generate(prompts, seeds)
    return outputs, (time.perf_counter() - t0) * 1000 / max(1, len(prompts))


@dataclass
class Evaluation:
    """What every evaluation starts from: the run's place, the version's record, the day's rows."""

    date: str
    model: str
    version: str
    prefix: str
    registry: Any
    record: dict
    rows: list[dict]
    started: float

    @classmethod
    def of(cls, lake, generation: dict, run_id: str) -> Evaluation:
        from aigc.evaluate.runs import evaluation_prefix, generated_rows
        from aigc.registry import Registry

        started = time.perf_counter()
        date, model = parse_date(generation["date"]).isoformat(), generation["model"]
        registry = Registry(lake, model)
        return cls(date, model, generation["version"], evaluation_prefix(model, date, run_id), registry,
                   registry.get(generation["version"]), generated_rows(lake, generation), started)

    def against_production(self, lake, workload, verdicts_of, candidate: list[bool], confidence: float):
        """(production's version or None, the paired interval production − candidate on the same prompts, or None):
        ``verdicts_of(serving)`` judges production's fp32 the way ``candidate`` was judged."""
        from aigc.registry import VersionNotFound
        from aigc.registry.loader import load_serving

        production = None
        with contextlib.suppress(VersionNotFound):
            production = self.registry.resolve("production")
        if not production or production == self.version:
            return production, None
        prod = load_serving(lake, self.model, production, "fp32", "cpu", workload.serving)
        return production, paired_difference(verdicts_of(prod), candidate, confidence)


def evaluate_scored(lake, generation: dict, cfg, *, run_id: str, workload) -> dict:
    from aigc.registry.loader import load_serving

    e = cfg.evaluate
    ev = Evaluation.of(lake, generation, run_id)
    date, model, version, prefix, record, rows = ev.date, ev.model, ev.version, ev.prefix, ev.record, ev.rows

    generated = [r for r in rows if r["status"] == "generated"]
    verdicts = [bool(workload.score(r["prompt"], r)) for r in generated]
    content = wilson(sum(verdicts), len(verdicts), e.confidence)
    safety = sum(blocked_term(r["prompt"], cfg.prepare.blocklist) is not None for r in generated)

    prompts = workload.eval_prompts(e.eval_prompts, e.seed)
    seeds = [e.seed + i for i in range(len(prompts))]
    eligible = (record.get("smoke_test") or {}).get("eligible_variants") or ["fp32"]
    points, grid = [], {}
    for variant in eligible:
        serving = load_serving(lake, model, version, variant, "cpu", workload.serving)
        outputs = serving.generate(prompts, seeds)
        grid[variant] = [bool(workload.score(p, workload.output_row(o))) for p, o in zip(prompts, outputs,
                                                                                          strict=True)]
        timing = prompts[: e.latency_prompts]
        for policy in POLICIES:
            rounds = [_timed(serving, timing, seeds[: len(timing)], policy)[1] for _ in range(e.latency_rounds)]
            points.append({"variant": variant, "policy": policy, "alignment": sum(grid[variant]) / len(prompts),
                           "latency_ms": statistics.median(rounds), "latency_rounds_ms": rounds,
                           "size_bytes": record.get("variants", {}).get(variant, {}).get("size_bytes")})
    chosen, points = recommend(points, grid, epsilon=e.epsilon, confidence=e.confidence,
                               latency_tolerance=e.latency_tolerance)
    front = pareto_front(points, "alignment", "latency_ms")

    production, regression = ev.against_production(lake, workload, lambda prod: [
        bool(workload.score(p, workload.output_row(o))) for p, o in zip(prompts, prod.generate(prompts, seeds),
                                                                        strict=True)], grid["fp32"], e.confidence)
    model_alignment = wilson(sum(grid[chosen["variant"]]), len(prompts), e.confidence) if chosen else None
    metrics = {
        "date": date, "model": model, "version": version, "generation_run": generation["run_id"],
        "workload": workload.name, "alignment": {"all": content.value}, "generated": len(generated),
        "refused": sum(r["status"] == "refused" for r in rows), "safety_violations": safety,
        "eval_prompts": len(prompts), "recommended": chosen, "production_before": production,
        "regression_vs_production": round(regression.value, 4) if regression else None,
        "intervals": {"alignment": content.to_dict(),
                      "model_alignment": model_alignment.to_dict() if model_alignment else None,
                      "regression_vs_production": regression.to_dict() if regression else None},
    }
    lake.put_json(join(prefix, "pareto.json"), {"points": points, "front": front, "recommended": chosen,
                                                "eval_prompts": len(prompts)})
    queue = sorted(zip(verdicts, generated, strict=True), key=lambda x: x[0])[: e.review_items]
    lake.put_bytes(join(prefix, "review", "queue.jsonl"), "".join(json.dumps(
        {"prompt_id": r["prompt_id"], "prompt": r["prompt"], "right": v, "run_id": run_id}) + "\n"
        for v, r in queue).encode())
    metrics["review"] = {"queued": len(queue)}
    metrics["seconds"] = round(time.perf_counter() - ev.started, 2)
    lake.put_json(join(prefix, "metrics.json"), metrics)
    write_scored_report(lake, prefix, metrics, points)
    return {"stage": "evaluate", "date": date, "run_id": run_id, "model": model, "version": version,
            "generation_run": generation["run_id"], "alignment": content.value, "safety_violations": safety,
            "recommended": chosen, "report_uri": lake.url(join(prefix, "report.html")), "run_uri": lake.url(prefix)}


def write_scored_report(lake, prefix: str, metrics: dict, points: list[dict]) -> str:
    gate = metrics.get("gates", {}).get("evaluation") or {}
    checks = "".join(f"<tr><td>{html.escape(c['title'])}</td><td>{html.escape(c['observed'])}</td>"
                     f"<td>{html.escape(c['threshold'])}</td><td>{'pass' if c['passed'] else 'FAIL'}</td></tr>"
                     for c in gate.get("checks", []))
    grid = "".join(f"<tr><td>{p['variant']}</td><td>{p['policy']}</td><td>{p['alignment']:.3f}</td>"
                   f"<td>{p['latency_ms']:.3f}</td></tr>" for p in points)
    title = html.escape(f"{metrics['model']} {metrics['version']}, {metrics['date']}")
    page = (f"<html><head><meta charset='utf-8'><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>Judged right: {html.escape(json.dumps(metrics['intervals']['alignment']))}</p>"
            f"<h2>Gate 5</h2><table>{checks}</table><h2>Grid</h2><table><tr><th>variant</th><th>policy</th>"
            f"<th>right</th><th>ms per prompt</th></tr>{grid}</table></body></html>")
    lake.put_bytes(join(prefix, "report.html"), page.encode())
    return join(prefix, "report.html")


def scored_checks(metrics: dict, t) -> list:
    """Gate 5 on a scored evaluation: the day's content and the recommended configuration judged right often
    enough (failing only when the interval is wholly below ``min_alignment``), and no safety violation."""
    from aigc.config.form import how_to_set
    from aigc.quality.evaluation import Check, figure

    iv = metrics["intervals"]
    lower = f"lower {how_to_set('evaluate_gate', 'min_alignment')}"
    return [
        Check("content_alignment", "the day's content judged right", (iv["alignment"] or {}).get("hi") or 0.0,
              t.min_alignment, True, figure(iv["alignment"]),
              f"the checker judges {figure(iv['alignment'])} of the day's outputs right, significantly below the "
              f"minimum {t.min_alignment:g}. Train longer ({how_to_set('train', 'steps')}); or {lower}."),
        Check("model_alignment", "the recommended configuration judged right on the evaluation prompts",
              (iv.get("model_alignment") or {}).get("hi") or 0.0, t.min_alignment, True,
              figure(iv.get("model_alignment")),
              f"the recommended configuration is judged right on {figure(iv.get('model_alignment'))} of the fixed "
              f"evaluation prompts, significantly below the minimum {t.min_alignment:g}; or {lower}."),
        Check("safety_violations", "outputs for prompts with blocked terms", float(metrics["safety_violations"]),
              0.0, False, str(metrics["safety_violations"]),
              f"{metrics['safety_violations']} output(s) answered prompts with blocked terms, where the maximum is 0; "
              "this check has no threshold to change."),
    ]
