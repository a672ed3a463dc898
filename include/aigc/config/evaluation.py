"""Stage 5 settings: evaluation, the Pareto rule, and gate 5."""

from __future__ import annotations

from dataclasses import dataclass

from aigc.config._checks import _check_range


@dataclass(frozen=True)
class EvaluateConfig:
    """Stage 5: what to measure and how the configuration to promote is chosen."""

    checker_images: int = 512
    """Held-out real images (the curated validation split) the checker is scored on."""
    pareto_prompts: int = 128
    """Scorable prompts of the day each configuration of the Pareto grid generates."""
    batch_policies: str = "batch1,adaptive"
    """Comma-separated: batch1 (one item at a time), adaptive (the stage-4 batcher)."""
    epsilon: float = 0.02
    """Recommend the cheapest configuration whose alignment is within this of the best."""
    review_items: int = 32
    """The least certain outputs exported for human review."""
    seed: int = 0

    def __post_init__(self) -> None:
        _check_range(self, "checker_images", 1, 1_000_000)
        _check_range(self, "pareto_prompts", 1, 1_000_000)
        _check_range(self, "epsilon", 0.0, 1.0)
        _check_range(self, "review_items", 0, 1_000_000)
        unknown = set(self.policy_list) - {"batch1", "adaptive"}
        if unknown or not self.policy_list:
            raise ValueError(
                f"EvaluateConfig.batch_policies must list batch1 and/or adaptive, got {self.batch_policies!r}")

    @property
    def policy_list(self) -> list[str]:
        return [p.strip() for p in self.batch_policies.split(",") if p.strip()]


@dataclass(frozen=True)
class EvaluationGateThresholds:
    """Gate 5 (evaluate → publish and promote)."""

    min_alignment: float = 0.8
    """All-attributes-correct fraction of the day's generated images."""
    min_checker_accuracy: float = 0.97
    """The checker's own all-attributes accuracy on real images: below it, alignment means little."""
    max_fid: float = 0.25
    """Fréchet distance between real and generated checker features (not Inception-FID). Measured here:
    ≈ 0.03 between two halves of real images, 0.005 for the demo model, 3.8 for noise images."""
    max_regression: float = 0.02
    """Alignment may not fall more than this below the current production model's on the same prompts."""

    def __post_init__(self) -> None:
        _check_range(self, "min_alignment", 0.0, 1.0)
        _check_range(self, "min_checker_accuracy", 0.0, 1.0)
        _check_range(self, "max_fid", 0.0, 1e9)
        _check_range(self, "max_regression", 0.0, 1.0)
