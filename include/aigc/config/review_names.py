"""The choices of the review loop's settings, apart from the dataclasses: the trigger form's table names them too,
and the dataclasses' checks read the form (a module of their own keeps the imports from going round)."""

from __future__ import annotations

REVIEW_FEEDBACK = ("off", "upweight", "drop")
"""``TrainConfig.review_feedback``: what reviewers' labels do to a training window (``aigc.train.feedback``)."""
REVIEW_SELECTIONS = ("uncertain", "random")
"""``EvaluateConfig.review_selection``: how a review queue is drawn (``aigc.evaluate.stage.review_pool``)."""
