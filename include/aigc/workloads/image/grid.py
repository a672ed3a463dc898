"""The image workload's part of the grid (``aigc.evaluate.stage.measure_grid``): a variant's quality on the
evaluation set, and its images by a batch policy.

A (prompt, seed) gives the same image whatever the batch, to one grey level (``Generator.generate``), so each
variant generates the whole evaluation set once and every image is read by the checker. The first timed round's
images are compared with the quality pass, so a policy that changed the images would show (``max_pixel_diff``).
"""

from __future__ import annotations

import numpy as np

from aigc.evaluate.stats import wilson
from aigc.workloads.image.metrics import assess, frechet_distance

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


def answer_images(gen, policy: str, prompts: list[dict], max_batch: int) -> list:
    """Images for ``prompts`` by a batch policy (what the grid times): one at a time, or the adaptive batcher."""
    from aigc.batching import AdaptiveBatcher, MemoryModel

    texts, seeds = [p["prompt"] for p in prompts], [p["seed"] for p in prompts]
    if policy == "batch1":
        return [gen.generate([t], [s])[0].numpy() for t, s in zip(texts, seeds, strict=True)]

    def run(batch: list[int]) -> list:
        return list(gen.generate([texts[i] for i in batch], [seeds[i] for i in batch]).numpy())

    # Every prompt costs the same to this model (one resolution): one bucket, one learned size.
    images, _ = AdaptiveBatcher(run, [gen.config.resolution] * len(texts), MemoryModel(width=256), lambda: 1 << 34,
                                max_batch=max_batch)()
    return images
