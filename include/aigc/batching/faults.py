"""Out-of-memory on demand, for tests and benchmarks on a CPU: at a rate, or above a simulated capacity."""

from __future__ import annotations

import random

import torch

from aigc.batching.memory import MemoryModel


class SimulatedOOM:
    """A memory accountant: raises ``torch.OutOfMemoryError`` when a batch's true peak (by ``truth``)
    exceeds ``capacity_bytes``, and also at random with probability ``rate``. Records every peak."""

    def __init__(self, truth: MemoryModel | None = None, capacity_bytes: float = float("inf"), rate: float = 0.0,
                 seed: int = 0):
        self.truth, self.capacity_bytes, self.rate = truth, capacity_bytes, rate
        self.rng = random.Random(seed)
        self.peaks: list[float] = []
        self.raised = 0

    def check(self, lengths: list[int]) -> float:
        """The batch's simulated peak; raises if it does not fit or if the dice say so."""
        peak = self.truth.predict(lengths) if self.truth else 0.0
        if peak > self.capacity_bytes:
            self.raised += 1
            raise torch.OutOfMemoryError(f"simulated: batch of {len(lengths)} needs {peak:.0f} B, "
                                         f"capacity {self.capacity_bytes:.0f} B")
        if self.rate and self.rng.random() < self.rate:
            self.raised += 1
            raise torch.OutOfMemoryError(f"simulated: injected at rate {self.rate}")
        self.peaks.append(peak)
        return peak
