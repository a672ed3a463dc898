"""Promotion on evidence, with the real decision code over simulated checker verdicts: the verdicts of two models on
the same prompts are drawn from known rates (a prompt's difficulty shared by both, plus each model's own noise),
paired as the evaluation pairs them, and ``promotion`` decides."""

import numpy as np

from aigc.config import EvaluationGateThresholds
from aigc.evaluate.stats import paired_difference
from aigc.quality.evaluation import promotion

GATE = EvaluationGateThresholds()  # max_regression 0.02


def verdicts(rate: float, difficulty: np.ndarray, rng: np.random.Generator, noise: float = 0.05) -> list[bool]:
    """Right where the prompt is easier than ``rate``, each verdict flipped with probability ``noise``."""
    right = difficulty < rate
    return list(right ^ (rng.random(len(difficulty)) < noise))


def decide(candidate: list[bool], production: list[bool], best: list[bool] | None = None) -> dict:
    metrics = {"version": "cand", "production_before": "prod", "best_before": "best" if best else "prod",
               "intervals": {"regression_vs_production": paired_difference(production, candidate, 0.95).to_dict(),
                             "regression_vs_best": paired_difference(best, candidate, 0.95).to_dict()
                             if best else None}}
    return promotion(metrics, GATE)


def test_a_chain_of_slightly_worse_candidates_cannot_walk_production_down():
    """Each night a candidate one point worse than the last: production may follow only within the margin of the
    best version that was production, so it never ends far below where it started."""
    ends = []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        difficulty = rng.random(648)  # the evaluation set, the same every night
        rates = {"v1": 0.85}
        production = best = "v1"
        judged = {"v1": verdicts(0.85, difficulty, rng)}
        for night in range(2, 12):
            name, rates[f"v{night}"] = f"v{night}", 0.85 - 0.01 * (night - 1)
            judged[name] = verdicts(rates[name], difficulty, rng)
            decision = decide(judged[name], judged[production], judged[best] if best != production else None)
            if decision["promote"]:
                production = name
                best = name if decision["best"] else best
        ends.append(rates[production])
    print(f"\nproduction's true alignment after 10 nights of candidates 0.01 worse each: min {min(ends):.2f}, "
          f"mean {np.mean(ends):.3f} (started at 0.85, the margin is {GATE.max_regression})")
    assert min(ends) >= 0.85 - GATE.max_regression - 0.01  # never more than the margin (and a step) below the start
    assert np.mean(ends) >= 0.84


def test_a_candidate_equal_to_production_within_noise_is_not_promoted_on_absence_of_evidence():
    """On 40 prompts the interval of the difference is far wider than the margin: an equal candidate is promoted
    only where it measured better by chance, which the interval then shows."""
    promoted = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        difficulty = rng.random(40)
        decision = decide(verdicts(0.85, difficulty, rng), verdicts(0.85, difficulty, rng))
        if decision["promote"]:
            promoted.append(decision["regression"]["value"])
    print(f"\nequal models on 40 prompts: promoted {len(promoted)} of 200, each measured better by "
          f"{sorted(-v for v in promoted)}")
    assert len(promoted) <= 20 and all(v < 0 for v in promoted)


def test_a_candidate_worse_by_the_margin_is_promoted_at_most_at_the_designed_rate():
    """Worse by exactly ``max_regression``: promotion would be wrong, and the one-sided 97.5 % bound holds it to
    2.5 % (with slack for 400 draws)."""
    promoted = 0
    for seed in range(400):
        rng = np.random.default_rng(seed)
        difficulty = rng.random(648)
        production = verdicts(0.85, difficulty, rng)
        promoted += decide(verdicts(0.85 - GATE.max_regression, difficulty, rng), production)["promote"]
    print(f"\na candidate worse by the margin on 648 prompts: promoted {promoted} of 400 (designed: ≤ 2.5 %)")
    assert promoted / 400 <= 0.04


def test_a_better_candidate_is_promoted_and_becomes_best_and_an_equal_one_with_enough_prompts_is_promoted():
    better = equal = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        difficulty = rng.random(648)
        production = verdicts(0.85, difficulty, rng, noise=0.01)
        decision = decide(verdicts(0.90, difficulty, rng, noise=0.01), production)
        better += decision["promote"] and decision["best"]
        equal += decide(verdicts(0.85, difficulty, rng, noise=0.01), production)["promote"]
    print(f"\nof 100: a candidate 0.05 better promoted (and best) {better}; an equal one promoted {equal}")
    assert better >= 95 and equal >= 50


def test_the_first_model_is_promoted_and_production_is_not_compared_with_itself():
    first = promotion({"version": "v0001", "production_before": None, "intervals": {}}, GATE)
    assert first["promote"] and first["best"] and "first version" in first["reason"]
    again = promotion({"version": "v0002", "production_before": "v0002", "intervals": {}}, GATE)
    assert again["promote"] and "production already" in again["reason"]
