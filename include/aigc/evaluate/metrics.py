"""Quality figures over a set of images with their captions: alignment, Fréchet distance, diversity.

The Fréchet distance is computed on the checker's continuous features (colour, background,
centre, extent, coverage), not on Inception features: it says whether generated images are
distributed like real ones in the terms this world is made of, and it needs no download.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from aigc.evaluate.checker import ATTRIBUTES, read, score
from aigc.evaluate.stats import Estimate, bootstrap, paired_difference, wilson
from aigc.shapes import parse_caption


class NoScorer(ValueError):
    """Content the evaluation cannot judge: no scorer reads its prompts. Scoring it 0 would fail a good model."""


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


def pareto_front(points: list[dict], quality: str, cost: str) -> list[dict]:
    """Points not dominated: no other point has quality ≥ and cost ≤ with one of them strict."""
    front = []
    for p in points:
        dominated = any(q[quality] >= p[quality] and q[cost] <= p[cost] and (q[quality] > p[quality]
                        or q[cost] < p[cost]) for q in points)
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: p[cost])


# Between cost-tied configurations of one size: adaptive first (the same cost, and it survives an OOM).
POLICY_PREFERENCE = ("adaptive", "batch1")


def _preference(policy: str | None) -> int:
    """Points without a batch policy (bench B8's training configurations) come after those with one."""
    return POLICY_PREFERENCE.index(policy) if policy in POLICY_PREFERENCE else len(POLICY_PREFERENCE)


def recommend(points: list[dict], verdicts: dict[str, Sequence[bool]], *, epsilon: float, confidence: float,
              latency_tolerance: float) -> tuple[dict | None, list[dict]]:
    """The cheapest configuration not significantly worse than the best, and every point annotated.

    ``points``: one per (variant, policy) with ``alignment``, ``latency_ms``, ``size_bytes`` and its
    timing rounds ``latency_rounds_ms``; ``verdicts[variant]``: its all-attributes verdict per
    evaluation prompt (the same prompts and seeds for every variant). The best is the highest
    alignment. A point is *as good* unless the paired interval of (best − it) lies wholly above
    ``epsilon``: 3 prompts in 128 apart is not a win. Cost gets the same care: an as-good point is
    *beaten* when another is faster by more than ``latency_tolerance`` in every timing round (timing
    noise is one-sided and bursty, so one slow round proves nothing); of the unbeaten, the smallest on
    disk is recommended, and between two of one size a fixed order decides (the adaptive policy first:
    it also backs off on OOM), never their measured latencies, which the unbeaten are tied on by
    definition. A re-run with another seed, or on a busier host, recommends the same.
    """
    scored = [p for p in points if p.get("alignment") is not None]
    if not scored:
        return None, points
    best = max(scored, key=lambda p: (p["alignment"], -p["latency_ms"]))
    annotated = []
    for p in points:
        if p.get("alignment") is None:
            annotated.append({**p, "as_good": False, "cost_tie": False})
            continue
        gap = paired_difference(verdicts[best["variant"]], verdicts[p["variant"]], confidence)
        annotated.append({**p, "vs_best": gap.to_dict(), "as_good": gap.lo is not None and gap.lo <= epsilon})
    good = [p for p in annotated if p["as_good"]]

    def rounds(p: dict) -> list[float]:
        return p.get("latency_rounds_ms") or [p["latency_ms"]]

    def beats(q: dict, p: dict) -> bool:
        return all(a * (1 + latency_tolerance) < b for a, b in zip(rounds(q), rounds(p), strict=True))

    for p in annotated:
        p["cost_tie"] = p["as_good"] and not any(beats(q, p) for q in good)
    chosen = min((p for p in annotated if p["cost_tie"]),
                 key=lambda p: (p.get("size_bytes") or 0, _preference(p.get("policy")), p["variant"]))
    return chosen, annotated
