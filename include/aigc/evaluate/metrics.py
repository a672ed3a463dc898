"""What every workload's evaluation shares: the Pareto front of quality against cost and the recommendation rule
(the cheapest configuration not significantly worse than the best), and ``NoScorer`` for content no scorer reads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aigc.evaluate.stats import paired_difference, paired_mean_difference


class NoScorer(ValueError):
    """Content the evaluation cannot judge: no scorer reads its prompts. Scoring it 0 would fail a good model."""


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


def beats(q: dict, p: dict, tolerance: float) -> bool:
    """Whether ``q`` is cheaper than ``p``: faster by more than ``tolerance`` in every timing round."""
    def rounds(x: dict) -> list[float]:
        return x.get("latency_rounds_ms") or [x["latency_ms"]]

    return all(a * (1 + tolerance) < b for a, b in zip(rounds(q), rounds(p), strict=True))


def recommend(points: list[dict], verdicts: dict[str, Sequence[bool]], *, epsilon: float, confidence: float,
              latency_tolerance: float, scores: dict[str, Sequence[float]] | None = None,
              score_epsilon: float | None = None) -> tuple[dict | None, list[dict]]:
    """The cheapest configuration shown to be as good as the best, and every point annotated.

    ``points``: one per (variant, policy) with ``alignment``, ``latency_ms``, ``size_bytes`` and its
    timing rounds ``latency_rounds_ms``; ``verdicts[variant]``: its all-attributes verdict per
    evaluation prompt (the same prompts and seeds for every variant). The best is the highest
    alignment. A point is *as good* only on evidence: the upper end of the paired interval of
    (best − it) is below ``epsilon`` (non-inferiority); an interval too wide to tell keeps the better
    configuration, so a cheaper variant is never chosen for a loss nobody measured. Cost gets the same
    care: an as-good point is *beaten* when another is faster by more than ``latency_tolerance`` in
    every timing round (timing noise is one-sided and bursty, so one slow round proves nothing); of
    the unbeaten, the smallest on disk is recommended, and between two of one size a fixed order
    decides (the adaptive policy first: it also backs off on OOM), never their measured latencies,
    which the unbeaten are tied on by definition. A re-run with another seed, or on a busier host, recommends the same.

    ``scores[variant]``, where a workload gives them: a second quality axis, one score per evaluation prompt (higher
    is better, the same prompts and seeds; the hf-diffusion workload's CLIP score). A point is then as good only if
    it is also shown no worse than the variant of the highest mean score by ``score_epsilon`` (the upper end of the
    paired interval of the mean difference below it): a configuration that keeps the alignment but loses the score
    is not chosen for its cost. Where the best in alignment and the best in score differ and neither is shown as
    good as the other, the configurations of the best mean score among those as good in alignment are the as-good
    ones.
    """
    scored = [p for p in points if p.get("alignment") is not None]
    if not scored:
        return None, points
    scores = {v: s for v, s in (scores or {}).items() if s} if score_epsilon is not None else {}
    mean = {v: float(np.mean(s)) for v, s in scores.items()}
    top = max(sorted(scores), key=mean.__getitem__) if scores else None
    # Tied in alignment, the better score is the reference (then the faster)
    best = max(scored, key=lambda p: (p["alignment"], mean.get(p["variant"], 0.0), -p["latency_ms"]))
    annotated = []
    for p in points:
        if p.get("alignment") is None:
            annotated.append({**p, "as_good": False, "cost_tie": False})
            continue
        # Paired on the prompts both answered (a longer look extends some variants: ``stage.recommend_on_evidence``).
        mine, theirs = verdicts[best["variant"]], verdicts[p["variant"]]
        common = min(len(mine), len(theirs))
        gap = paired_difference(mine[:common], theirs[:common], confidence)
        shown = p["variant"] == best["variant"] or (gap.hi is not None and gap.hi < epsilon)
        extra = {}
        if top is not None and p["variant"] in scores:
            common = min(len(scores[top]), len(scores[p["variant"]]))
            lost = paired_mean_difference(scores[top][:common], scores[p["variant"]][:common], confidence)
            extra = {"score_vs_best": lost.to_dict(), "as_good_in_alignment": shown}
            shown = shown and (p["variant"] == top or (lost.hi is not None and lost.hi < score_epsilon))
        annotated.append({**p, "vs_best": gap.to_dict(), **extra, "as_good": shown,
                          "reference": p["variant"] in (best["variant"], top)})
    good = [p for p in annotated if p["as_good"]]
    if not good:  # the best in alignment and the best in score differ, and neither is shown as good as the other:
        # of those as good in alignment, the configurations of the best mean score (the quality nobody showed lost).
        kept = [p for p in annotated if p.get("as_good_in_alignment") and p["variant"] in scores]
        highest = max((mean[p["variant"]] for p in kept), default=None)
        for p in kept:
            p["as_good"] = mean[p["variant"]] == highest
        good = [p for p in annotated if p["as_good"]]
    for p in annotated:
        p["cost_tie"] = p["as_good"] and not any(beats(q, p, latency_tolerance) for q in good)
    chosen = min((p for p in annotated if p["cost_tie"]),
                 key=lambda p: (p.get("size_bytes") or 0, _preference(p.get("policy")), p["variant"]))
    return chosen, annotated
