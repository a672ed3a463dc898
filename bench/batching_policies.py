"""B1's policies: what a user would write instead of ours (fixed batches, a token-budget planner, the seed
article's batcher), and ours, each over the same longest-first order and answering every item once."""

from __future__ import annotations

from collections.abc import Callable

import torch

from aigc.batching import AdaptiveBatcher, MemoryModel, PeakMeter
from aigc.batching.adaptive import is_oom

WIDTH = 64


# The token-budget planner a user would write (the strongest simple baseline on long-tailed lengths): a baseline,
# so it lives here, not in aigc.batching, which serves the pipeline.
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


def batches_with_retry(run: Callable, batches: list[list[int]], n: int) -> list[int]:
    """Each batch in turn; one that runs out of memory is split in two and retried, as a careful user would."""
    out: dict[int, int] = {}

    def attempt(batch: list[int]) -> None:
        try:
            out.update(zip(batch, run(batch), strict=True))
            return
        except BaseException as e:
            if not is_oom(e):
                raise
        # Retried outside the except block, whose traceback would pin the failed batch's tensors.
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if len(batch) == 1:
            attempt(batch)  # one item: again (an injected fault passes on a retry)
            return
        attempt(batch[: len(batch) // 2])
        attempt(batch[len(batch) // 2:])

    for batch in batches:
        attempt(batch)
    return [out[i] for i in range(n)]


def fixed(run: Callable, order: list[int], size: int) -> list[int]:
    return batches_with_retry(run, [order[lo:lo + size] for lo in range(0, len(order), size)], len(order))


def planned(run: Callable, lengths: list[int], items_of_64: int, budget: float | None) -> list[int]:
    """The planner alone: longest first, each batch filled until the memory model's estimate reaches a
    budget (the real one, or with none, what ``items_of_64`` items of length 64 would need): a token
    budget, the usual simple answer to long-tailed lengths."""
    model = MemoryModel(width=WIDTH)
    limit = budget if budget else model.predict([64] * items_of_64)
    return batches_with_retry(run, plan_batches(lengths, model, limit, max_batch=1 << 20), len(lengths))


def seed_batcher(run: Callable, order: list[int], start: int = 32, max_batch: int = 512) -> list[int]:
    """The seed article's ``AdaptiveBatcher`` over the same order: ×1.2 after a batch that fits, ×0.7 after
    one that runs out of memory (then retried), capped at ``max_batch``. As for every policy here, its
    backoff sleep is off; its growth is rounded up, so it can leave sizes below 5 (``int(1.2·4)`` is 4)."""
    out: dict[int, int] = {}
    position, size = 0, start
    while position < len(order):
        batch = order[position:position + size]
        try:
            rows = run(batch)
        except BaseException as e:
            if not is_oom(e):
                raise
            size = max(1, int(size * 0.7))
            continue
        out.update(zip(batch, rows, strict=True))
        position += len(batch)
        size = min(max_batch, max(size + 1, int(size * 1.2)))
    return [out[i] for i in range(len(order))]


def ours(run: Callable, lengths: list[int], budget: float, peaks: PeakMeter | None,
         stats: dict | None = None, learned: dict[int, int] | None = None, start_batch: int | None = 32) -> list[int]:
    """``learned``: the sizes a previous shard settled on (a generation run's second shard onwards);
    ``start_batch``: None on a GPU, where stage 4 starts from the memory plan (``generate.engine``)."""
    results, report = AdaptiveBatcher(run, lengths, MemoryModel(width=WIDTH), lambda: budget, backoff_s=0.0,
                                      peaks=peaks, learned=learned, start_batch=start_batch)()
    if stats is not None:
        stats.update(settled_on=report.learned, settled_after=settled_after(report.sizes, report.learned))
    return results


def settled_after(sizes: list[int], learned: dict[int, int]) -> float | None:
    """With one bucket: the share of items run before the first batch of the size it settled on."""
    if len(learned) != 1:
        return None
    final = next(iter(learned.values()))
    before = 0
    for size in sizes:
        if size == final:
            return round(before / sum(sizes), 4)
        before += size
    return None
