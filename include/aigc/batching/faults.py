"""Out-of-memory on demand, for tests and benchmarks on a CPU: at a rate, above a simulated capacity, or when the
tensors a batch really allocates exceed a budget (``BudgetedMemory``)."""

from __future__ import annotations

import random

import torch

from aigc.batching.memory import MemoryModel
from aigc.batching.peaks import _StorageCounter


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


class BudgetedMemory:
    """A device of ``capacity_bytes`` on the CPU: the bytes of tensor storages a batch creates (counted as they are
    allocated and freed, as ``CpuPeaks`` does) may not exceed it; the allocation that would raises
    ``torch.OutOfMemoryError`` there and then, as a GPU's allocator does. Its truth is what the batch allocates,
    not any model of it. Use ``with budget.batch(): run()``; ``violations`` counts batches that hit the wall,
    ``peak`` is the last completed batch's highest total and ``highest`` the highest of all."""

    def __init__(self, capacity_bytes: float):
        self.capacity_bytes = capacity_bytes
        self.violations, self.batches, self.peak, self.highest = 0, 0, 0.0, 0.0

    def batch(self) -> _Wall:
        return _Wall(self)


class _Wall(_StorageCounter):
    def __init__(self, budget: BudgetedMemory):
        super().__init__()
        self.budget = budget

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.live > self.budget.capacity_bytes:
            self.budget.violations += 1
            raise torch.OutOfMemoryError(f"simulated device: {self.live / 2**20:.1f} MiB live after {func}, "
                                         f"capacity {self.budget.capacity_bytes / 2**20:.1f} MiB")
        return out

    def __exit__(self, *exc):
        result = super().__exit__(*exc)
        if exc[0] is None:
            self.budget.batches += 1
            self.budget.peak = float(self.highest)
            self.budget.highest = max(self.budget.highest, self.budget.peak)
        return result
