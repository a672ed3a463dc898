"""Predicting a batch's peak memory from its items, calibrated online from measured peaks.

The prior is the seeds' shape: ``mem ≈ base + k · b · (d² + L²)`` for a batch of ``b`` items
padded to the longest length ``L`` in a model of width ``d``. Items describe themselves by
``length`` (sequence length, pixels per side × steps, …); ``k`` starts from bytes per element
and is re-fitted from every measured peak, conservatively (by default the largest of the last
``window`` observed ratios, so the model errs towards smaller batches). Its relative prediction
error is kept. Until it has measured a peak the model is only a prior: ``calibrated`` says which.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class MemoryModel:
    width: int
    """d: the model dimension that sets per-item activation size."""
    bytes_per_unit: float = 4.0
    """k before any measurement: bytes per (d² + L²) unit per item (4 = one fp32 element)."""
    base_bytes: int = 0
    """Memory held whatever the batch (weights, workspace)."""
    window: int = 64
    quantile: float = 1.0
    _ratios: deque = field(default_factory=deque, repr=False)
    _errors: deque = field(default_factory=lambda: deque(maxlen=256), repr=False)

    def __post_init__(self) -> None:
        self._ratios = deque(self._ratios, maxlen=self.window)  # the last `window` measured ratios

    def units(self, lengths: list[int]) -> float:
        """b · (d² + L_max²): the batch is padded to its longest item."""
        if not lengths:
            return 0.0
        return len(lengths) * (self.width**2 + max(lengths) ** 2)

    @property
    def k(self) -> float:
        if not self._ratios:
            return self.bytes_per_unit
        ordered = sorted(self._ratios)
        return ordered[min(len(ordered) - 1, int(self.quantile * len(ordered)))]

    @property
    def calibrated(self) -> bool:
        """Whether any measured peak has re-fitted ``k`` (otherwise it is the prior ``bytes_per_unit``)."""
        return bool(self._ratios)

    def predict(self, lengths: list[int]) -> float:
        return self.base_bytes + self.k * self.units(lengths)

    def observe(self, lengths: list[int], peak_bytes: float) -> None:
        """Record a measured peak; the prediction made before it counts towards the error."""
        units = self.units(lengths)
        if units <= 0 or peak_bytes <= 0:
            return
        predicted = self.predict(lengths)
        self._errors.append(abs(predicted - peak_bytes) / peak_bytes)
        self._ratios.append(max(peak_bytes - self.base_bytes, 1.0) / units)

    @property
    def mean_relative_error(self) -> float | None:
        return sum(self._errors) / len(self._errors) if self._errors else None

    def max_items(self, length: int, budget_bytes: float) -> int:
        """The most items of ``length`` whose predicted peak fits ``budget_bytes`` (0 if none). A subclass that
        charges items otherwise overrides ``units`` (linear in the number of items) and this follows."""
        per_item = self.k * self.units([length])
        return max(0, int((budget_bytes - self.base_bytes) // per_item)) if per_item > 0 else 0
