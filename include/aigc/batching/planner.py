"""Grouping items into batches under a memory budget, longest first, so nothing is padded far."""

from __future__ import annotations

from aigc.batching.memory import MemoryModel


def plan_batches(lengths: list[int], model: MemoryModel, budget_bytes: float, max_batch: int) -> list[list[int]]:
    """Index lists, each predicted to fit ``budget_bytes``: items sorted by length (longest first,
    ties in input order), a batch closed when the next item would break the budget or
    ``max_batch``. An item too large even alone gets a batch of its own (the batcher reports it)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        trial = [*current, i]
        if current and (len(trial) > max_batch or model.predict([lengths[j] for j in trial]) > budget_bytes):
            batches.append(current)
            trial = [i]
        current = trial
    if current:
        batches.append(current)
    return batches


def restore_order(batches: list[list[int]], results: list[list]) -> list:
    """Per-batch results back in the items' input order."""
    out: list = [None] * sum(len(b) for b in batches)
    for batch, rows in zip(batches, results, strict=True):
        for i, row in zip(batch, rows, strict=True):
            out[i] = row
    return out
