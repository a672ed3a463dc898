"""Quality figures over a set of images with their captions: alignment, Fréchet distance, diversity.

The Fréchet distance is computed on the checker's continuous features (colour, background,
centre, extent, coverage), not on Inception features: it says whether generated images are
distributed like real ones in the terms this world is made of, and it needs no download.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from aigc.evaluate.checker import ATTRIBUTES, read, score
from aigc.shapes import parse_caption


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


def pareto_front(points: list[dict], quality: str, cost: str) -> list[dict]:
    """Points not dominated: no other point has quality ≥ and cost ≤ with one of them strict."""
    front = []
    for p in points:
        dominated = any(q[quality] >= p[quality] and q[cost] <= p[cost] and (q[quality] > p[quality]
                        or q[cost] < p[cost]) for q in points)
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: p[cost])


def recommend(front: list[dict], quality: str, cost: str, epsilon: float) -> dict:
    """The cheapest point of the front whose quality is within ``epsilon`` of the best."""
    best = max(p[quality] for p in front)
    return min((p for p in front if p[quality] >= best - epsilon), key=lambda p: p[cost])
