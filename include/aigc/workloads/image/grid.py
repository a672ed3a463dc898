"""The Pareto grid: every eligible variant × batch policy, quality and cost measured on the evaluation set.

Quality is a property of the variant: a (prompt, seed) gives the same image whatever the batch, to
one grey level (``Generator.generate``), so each variant generates the whole evaluation set once and every
image is read by the checker; its per-prompt verdicts pair up with every other variant's and
with production's. Cost is timed separately: ``latency_rounds`` rounds, every configuration in
turn in each, on the first ``latency_prompts`` prompts; the fastest round is the latency (other
work on the host only ever adds time, so the minimum is the steadiest estimate of the cost). The
first round's images are compared with the quality pass, so a policy that changed the images
would show (``max_pixel_diff``).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from aigc.evaluate.stats import wilson
from aigc.lake import Lake
from aigc.workloads.image.metrics import assess, frechet_distance

log = logging.getLogger(__name__)
_QUALITY_BATCH = 64


def variant_quality(gen, prompts: list[dict], real_features: np.ndarray | None, confidence: float) -> dict:
    """One variant on every evaluation prompt: its verdicts, alignment with interval, Fréchet distance (None
    without real images' features to compare with)."""
    texts, seeds = [p["prompt"] for p in prompts], [p["seed"] for p in prompts]
    images = []
    for lo in range(0, len(texts), _QUALITY_BATCH):
        images += list(gen.generate(texts[lo:lo + _QUALITY_BATCH], seeds[lo:lo + _QUALITY_BATCH]).numpy())
    quality = assess(images, texts)
    verdicts = [bool(r.get("all_correct")) for r in quality["rows"]]
    return {"images": images, "verdicts": verdicts, "assessed": quality,
            "alignment": wilson(sum(verdicts), len(verdicts), confidence),
            "fid": None if real_features is None else frechet_distance(real_features, quality["features"])}


def _timed(gen, policy: str, texts: list[str], seeds: list[int], max_batch: int) -> tuple[float, list]:
    """(ms per sample, images) for one configuration on ``texts``."""
    from aigc.batching import AdaptiveBatcher, MemoryModel

    started = time.perf_counter()
    if policy == "batch1":
        images = [gen.generate([t], [s])[0].numpy() for t, s in zip(texts, seeds, strict=True)]
    else:
        def run(batch: list[int]) -> list:
            return list(gen.generate([texts[i] for i in batch], [seeds[i] for i in batch]).numpy())

        # Every prompt costs the same to this model (one resolution): one bucket, one learned size.
        images, _ = AdaptiveBatcher(run, [gen.config.resolution] * len(texts), MemoryModel(width=256),
                                    lambda: 1 << 34, max_batch=max_batch)()
    return (time.perf_counter() - started) * 1000 / len(texts), images


def measure_grid(lake: Lake, model: str, version: str, record: dict, prompts: list[dict], real_features: np.ndarray,
                 cfg) -> tuple[list[dict], dict[str, list[bool]]]:
    """(points, verdicts by variant): each eligible variant × policy with quality and measured cost."""
    from aigc.workloads.image.serving import Generator

    e = cfg.evaluate
    eligible = (record.get("smoke_test") or {}).get("eligible_variants") or ["fp32"]
    generators = {v: Generator.load(lake, model, version, v) for v in eligible}
    quality = {}
    for variant, gen in generators.items():
        quality[variant] = variant_quality(gen, prompts, real_features, e.confidence)
        log.info("pareto grid: %-6s alignment %s", variant, quality[variant]["alignment"])
    timing = prompts[: e.latency_prompts]
    texts, seeds = [p["prompt"] for p in timing], [p["seed"] for p in timing]
    rounds: dict[tuple[str, str], list[float]] = {(v, p): [] for v in generators for p in e.policy_list}
    pixel_diff: dict[tuple[str, str], int] = {}
    for gen in generators.values():
        gen.generate(texts[:2], seeds[:2])  # warm-up: first-call allocations are not latency
    for round_ in range(e.latency_rounds):
        for (variant, policy), times in rounds.items():
            ms, images = _timed(generators[variant], policy, texts, seeds, cfg.batching.max_batch)
            times.append(ms)
            if round_ == 0:
                reference = quality[variant]["images"][: len(images)]
                pixel_diff[(variant, policy)] = int(max(
                    (np.abs(a.astype(np.int16) - b.astype(np.int16)).max() for a, b in zip(images, reference,
                                                                                           strict=True)), default=0))
    points = []
    for (variant, policy), times in rounds.items():
        q = quality[variant]
        points.append({"variant": variant, "policy": policy, "alignment": q["alignment"].value,
                       "alignment_ci": q["alignment"].to_dict(), "fid": q["fid"],
                       "latency_ms": round(min(times), 4),
                       "latency_range_ms": [round(min(times), 4), round(max(times), 4)],
                       "latency_rounds_ms": [round(t, 4) for t in times],
                       "size_bytes": record["variants"].get(variant, {}).get("size_bytes"),
                       "max_pixel_diff": pixel_diff[(variant, policy)]})
        log.info("pareto grid: %-6s %-8s %.3f ms/sample (rounds %s)", variant, policy, points[-1]["latency_ms"],
                 ", ".join(f"{t:.3f}" for t in times))
    return points, {v: q["verdicts"] for v, q in quality.items()}
