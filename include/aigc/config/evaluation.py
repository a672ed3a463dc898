"""Stage 5 settings: evaluation, the Pareto rule, and gate 5."""

from __future__ import annotations

from dataclasses import dataclass

from aigc.config._checks import _check_range
from aigc.config.review_names import REVIEW_SELECTIONS


@dataclass(frozen=True)
class EvaluateConfig:
    """Stage 5: what to measure and how the configuration to promote is chosen."""

    eval_prompts: int = 648
    """Prompts of the fixed evaluation set (every attribute combination once at 648) that each
    configuration of the Pareto grid, and production in the regression check, generates with the
    same seeds. 648 puts a 95 % interval of about ±0.03 around an alignment of 0.85."""
    batch_policies: str = "batch1,adaptive"
    """Comma-separated: batch1 (one item at a time), adaptive (the stage-4 batcher)."""
    epsilon: float = 0.02
    """A configuration is as good as the best only when its loss is shown to be below this."""
    max_rounds: int = 3
    """Looks at an alignment that is undecided against gate 5's minimum: the recommended configuration's on the
    evaluation set (each look doubles the prompts: ``eval_prompts``, then 2×, 4× …) and the day's content's (the
    day's prompts answered again with new seeds); the error rates hold over all looks
    (``aigc.evaluate.stats.sequential_rate``)."""
    confidence: float = 0.95
    """Of every interval the decisions read (the recommendation, and gate 5's checks)."""
    latency_prompts: int = 32
    """Prompts each configuration generates per timing round (latency only; quality uses all)."""
    latency_rounds: int = 5
    """Timing rounds, every configuration in turn in each; the fastest is its latency (a busy host only
    ever adds time)."""
    latency_tolerance: float = 0.25
    """A configuration beats another on cost only when it is faster by more than this fraction in every
    timing round (this host's noise is ±30 %, in bursts); of those no other beats, the smallest on
    disk is recommended."""
    review_items: int = 32
    """The outputs exported for human review."""
    review_selection: str = "uncertain"
    """Which: uncertain (the ones the judge is least sure of: active learning) or random (as many drawn at random,
    seeded by the run: the baseline ``bench/review_loop.py`` measures the active choice against)."""
    seed: int = 0
    """Seeds of the evaluation set's images: another seed draws other images of the same prompts."""

    def __post_init__(self) -> None:
        _check_range(self, "eval_prompts", 1, 1_000_000)
        _check_range(self, "epsilon", 0.0, 1.0)
        _check_range(self, "max_rounds", 1, 10)
        _check_range(self, "confidence", 0.5, 0.9999)
        _check_range(self, "latency_prompts", 1, 1_000_000)
        _check_range(self, "latency_rounds", 1, 100)
        _check_range(self, "latency_tolerance", 0.0, 10.0)
        _check_range(self, "review_items", 0, 1_000_000)
        if self.review_selection not in REVIEW_SELECTIONS:
            raise ValueError(f"EvaluateConfig.review_selection must be one of {REVIEW_SELECTIONS}, got "
                             f"{self.review_selection!r}")
        unknown = set(self.policy_list) - {"batch1", "adaptive"}
        if unknown or not self.policy_list:
            raise ValueError(
                f"EvaluateConfig.batch_policies must list batch1 and/or adaptive, got {self.batch_policies!r}")

    @property
    def policy_list(self) -> list[str]:
        return [p.strip() for p in self.batch_policies.split(",") if p.strip()]


@dataclass(frozen=True)
class EvaluationGateThresholds:
    """Gate 5 (evaluate → publish and promote).

    Every check reads a figure's interval (``EvaluateConfig.confidence``) with three outcomes: a minimum passes only
    when the interval's lower end clears it (a maximum: its upper end), fails when the whole interval is on the
    wrong side, and is otherwise undecided, which draws more samples where it can (the alignments: up to
    ``EvaluateConfig.max_rounds`` looks) and fails the gate as "not enough evidence" where it cannot. So a model at
    a threshold passes by chance with probability at most (1 − confidence) / 2 (Clopper–Pearson's exact interval
    for the alignments). Each alignment check states the two rates it is designed for, computed exactly for its
    sample (``aigc.evaluate.stats.design``): that false pass, and the false failure of a model at
    ``expected_alignment``. A workload's own checks (its checker's accuracy, a Fréchet distance, a perplexity) take
    their bounds from its settings (``cfg.workload.settings``).
    """

    min_alignment: float = 0.8
    """Share of outputs the workload's checker judges right: of the day's content, and of the recommended
    configuration on the evaluation set. Passes only when the interval's lower end clears it."""
    expected_alignment: float = 0.95
    """The alignment the preset's model usually has: the false-failure rate each alignment check reports is that of
    a model this good (the image demo's models are at 0.97–1.0; the text workload sets its own)."""
    max_regression: float = 0.02
    """Non-inferiority margin of promotion: a candidate moves production only when the upper end of the paired
    interval (production − candidate, on the same prompts and seeds) is below this, and it is not significantly
    worse than the best version that was production."""

    min_checker_agreement: float = 0.6
    """How often the workload's checker must agree with reviewers' labels (``evaluations/<model>/labels``), overall
    and per attribute reviewers judged: gate 5 fails when the interval's upper end is below it (the checker is then
    shown to be wrong too often for its verdicts to decide promotion; recalibrate it or check the labels). Few
    labels leave the interval wide and pass; no labels, no check. 0 turns it off."""

    calibrate_alignment: bool = True
    """Where reviewers labelled randomly drawn outputs (``evaluate.review_selection=random``), also hold the
    recommended configuration's alignment corrected by the checker's measured sensitivity and specificity to
    min_alignment (Rogan–Gladen, ``aigc.evaluate.review.calibrated``): a failure only when shown below it."""

    def __post_init__(self) -> None:
        _check_range(self, "min_alignment", 0.0, 1.0)
        _check_range(self, "expected_alignment", 0.0, 1.0)
        _check_range(self, "max_regression", 0.0, 1.0)
        _check_range(self, "min_checker_agreement", 0.0, 1.0)
        if not isinstance(self.calibrate_alignment, bool):
            raise ValueError(f"EvaluationGateThresholds.calibrate_alignment must be true or false, got "
                             f"{self.calibrate_alignment!r}")
