"""Quality figures over a set of images with their captions: alignment, Fréchet distance, diversity.

The Fréchet distance is computed on the checker's continuous features (colour, background,
centre, extent, coverage), not on Inception features: it says whether generated images are
distributed like real ones in the terms this world is made of, and it needs no download.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from aigc.evaluate.metrics import NoScorer
from aigc.evaluate.stats import Estimate, bootstrap, wilson
from aigc.workloads.image.checker import ATTRIBUTES, read, score
from aigc.workloads.world import parse_caption


def require_scorable(captions: Sequence[str], what: str) -> None:
    """NoScorer naming how many of ``captions`` (``what``: whose they are) the checker cannot read, with examples."""
    unread = [c for c in captions if parse_caption(c) is None]
    if unread:
        examples = ", ".join(repr(c[:80]) for c in unread[:3])
        raise NoScorer(f"{len(unread)} of {len(captions)} {what} are outside what the image workload's checker "
                       f"judges (captions of the shapes world: size, colour, shape, position), e.g. {examples}: "
                       "no alignment can be measured for them, and scoring them 0 would fail a good model. "
                       "Evaluate prompts the checker reads, or plug in a workload whose scorer reads these")


def assess(images: list[np.ndarray], captions: list[str]) -> dict:
    """Per-image readings and the alignment figures; captions outside the grammar are not scored."""
    rows, features = [], []
    for image, caption in zip(images, captions, strict=True):
        expected = parse_caption(caption)
        reading = read(image)
        features.append(reading.features)
        if expected is None:
            rows.append({"scorable": False, "margin": reading.margin, "read": reading.attributes})
            continue
        verdict = score(expected, reading)
        rows.append({"scorable": True, "margin": reading.margin, "read": reading.attributes,
                     "expected": expected, **verdict, "all_correct": all(verdict.values())})
    scored = [r for r in rows if r["scorable"]]
    n = len(scored)
    alignment = {a: sum(r[a] for r in scored) / n if n else None for a in ATTRIBUTES}
    alignment["all"] = sum(r["all_correct"] for r in scored) / n if n else None
    return {"rows": rows, "features": np.array(features, dtype=np.float64).reshape(len(rows), -1),
            "alignment": alignment, "scored": n}


def alignment_estimate(assessed: dict, confidence: float) -> Estimate:
    """The all-attributes alignment of an ``assess`` result with its Wilson interval."""
    scored = [r for r in assessed["rows"] if r["scorable"]]
    return wilson(sum(r["all_correct"] for r in scored), len(scored), confidence)


def frechet_estimate(a: np.ndarray, b: np.ndarray, confidence: float, resamples: int = 200) -> Estimate:
    """The Fréchet distance with a bootstrap interval (both sets resampled, a fixed seed)."""
    def once(rng: np.random.Generator) -> float:
        return frechet_distance(a[rng.integers(0, len(a), len(a))], b[rng.integers(0, len(b), len(b))])

    return bootstrap(once, frechet_distance(a, b), min(len(a), len(b)), resamples=resamples, confidence=confidence)


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """‖μa − μb‖² + Tr(Σa + Σb − 2 (Σa Σb)^½), with the matrix square root by eigen-decomposition."""
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    # (Σa Σb)^½ via the symmetric form Σa^½ Σb Σa^½, whose square root has the same trace.
    w, v = np.linalg.eigh(cov_a)
    root_a = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    inner = np.linalg.eigvalsh(root_a @ cov_b @ root_a)
    trace_root = float(np.sqrt(np.clip(inner, 0, None)).sum())
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(cov_a) + np.trace(cov_b) - 2 * trace_root)


def diversity(features: np.ndarray, captions: list[str]) -> float | None:
    """Mean pairwise feature distance between images of the same caption (different seeds)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(captions):
        groups[c].append(i)
    distances = []
    for idx in groups.values():
        if len(idx) < 2:
            continue
        f = features[idx]
        d = np.sqrt(((f[:, None, :] - f[None, :, :]) ** 2).sum(-1))
        distances.append(d[np.triu_indices(len(idx), 1)].mean())
    return float(np.mean(distances)) if distances else None


