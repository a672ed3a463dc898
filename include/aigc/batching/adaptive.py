"""AdaptiveBatcher: run items in batches that grow while they pay and shrink when memory runs out.

Per length bucket (lengths rounded up to a power of two) it keeps a batch size that

* starts from the learned size of an earlier shard, else 1, and never exceeds what the memory
  model predicts fits the budget (memory is a ceiling, not a target);
* grows ×``grow`` after a success while measured items/s improves, and settles on the best
  size once it stops improving (bigger batches are not always faster on a CPU);
* on out-of-memory shrinks ×``shrink``, tells the memory model the batch did not fit, waits
  an exponential backoff with jitter, and retries the same items; at one item that still
  does not fit it raises ``ItemTooLarge`` naming the item and its estimate.

Every item is answered exactly once and results come back in input order; an item is only
marked done when its batch returned, so nothing is lost or repeated across retries.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from aigc.batching.memory import MemoryModel


class ItemTooLarge(RuntimeError):
    """One item alone does not fit the memory available."""


def is_oom(error: BaseException) -> bool:
    if isinstance(error, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def bucket_of(length: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, length))))


@dataclass
class BatchReport:
    items: int = 0
    batches: int = 0
    ooms: int = 0
    seconds: float = 0.0
    sizes: list[int] = field(default_factory=list)
    learned: dict[int, int] = field(default_factory=dict)
    """Bucket → the batch size it settled on; pass it to the next shard's batcher."""
    prediction_error: float | None = None

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict:
        return {"items": self.items, "batches": self.batches, "ooms": self.ooms, "seconds": round(self.seconds, 4),
                "items_per_s": round(self.items_per_s, 2), "max_batch_used": max(self.sizes, default=0),
                "learned_sizes": {str(k): v for k, v in sorted(self.learned.items())},
                "memory_prediction_error": self.prediction_error}


@dataclass
class _Bucket:
    size: int
    best_size: int = 0
    best_rate: float = 0.0
    settled: bool = False


class AdaptiveBatcher:
    """``run(indices) → results`` (one per index, in order) over every item, adaptively batched."""

    def __init__(self, run: Callable[[list[int]], Sequence], lengths: Sequence[int], model: MemoryModel,
                 budget_bytes: Callable[[], float], *, grow: float = 1.2, shrink: float = 0.7, max_batch: int = 256,
                 max_retries: int = 8, backoff_s: float = 0.05, backoff_max_s: float = 2.0, jitter: float = 0.5,
                 tolerance: float = 0.03, learned: dict[int, int] | None = None,
                 measure_peak: Callable[[], float | None] | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.perf_counter,
                 seed: int = 0):
        self.run, self.lengths, self.model, self.budget_bytes = run, list(lengths), model, budget_bytes
        self.grow, self.shrink, self.max_batch, self.max_retries = grow, shrink, max_batch, max_retries
        self.backoff_s, self.backoff_max_s, self.jitter, self.tolerance = backoff_s, backoff_max_s, jitter, tolerance
        self.measure_peak, self.sleep, self.clock, self.rng = measure_peak, sleep, clock, random.Random(seed)
        self.buckets = {b: _Bucket(size=s) for b, s in (learned or {}).items()}

    def _ceiling(self, lengths: list[int]) -> int:
        return max(1, min(self.max_batch, self.model.max_items(max(lengths), self.budget_bytes())))

    def __call__(self, indices: Sequence[int] | None = None) -> tuple[list, BatchReport]:
        indices = list(range(len(self.lengths))) if indices is None else list(indices)
        results: dict[int, object] = {}
        report = BatchReport()
        started = self.clock()
        by_bucket: dict[int, list[int]] = {}
        for i in sorted(indices, key=lambda i: (-self.lengths[i], i)):  # longest first: padding stays small
            by_bucket.setdefault(bucket_of(self.lengths[i]), []).append(i)
        for key, pending in by_bucket.items():
            state = self.buckets.setdefault(key, _Bucket(size=1))
            self._drain(key, state, pending, results, report)
        missing = set(indices) - set(results)
        if missing:  # cannot happen unless run() misbehaves: say so rather than return holes
            raise RuntimeError(f"{len(missing)} item(s) were never answered, e.g. {sorted(missing)[:5]}")
        report.items, report.seconds = len(indices), self.clock() - started
        report.learned = {k: (b.best_size or b.size) for k, b in self.buckets.items()}
        report.prediction_error = self.model.mean_relative_error
        return [results[i] for i in indices], report

    def _drain(self, key: int, state: _Bucket, pending: list[int], results: dict, report: BatchReport) -> None:
        position, failures = 0, 0
        while position < len(pending):
            ceiling = self._ceiling([self.lengths[i] for i in pending[position:position + state.size]])
            size = max(1, min(state.size, ceiling, len(pending) - position))
            batch = pending[position:position + size]
            lengths = [self.lengths[i] for i in batch]
            t0 = self.clock()
            try:
                rows = self.run(batch)
            except BaseException as e:
                if not is_oom(e):
                    raise
                report.ooms += 1
                failures += 1
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                # It did not fit: the true peak is above the budget it was planned for.
                self.model.observe(lengths, max(self.budget_bytes(), self.model.predict(lengths)) * 1.1)
                if size == 1 and failures > self.max_retries:
                    raise ItemTooLarge(
                        f"item {batch[0]} (length {lengths[0]}) does not fit alone: estimated "
                        f"{self.model.predict(lengths):.0f} B against a budget of {self.budget_bytes():.0f} B "
                        f"after {failures} attempts; raise the budget or shorten the item") from e
                if failures > self.max_retries and size > 1:
                    failures = 0  # keep shrinking: a smaller batch is a new attempt
                state.size = max(1, math.floor(size * self.shrink))
                state.settled = state.settled and state.size >= state.best_size
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** (failures - 1))
                self.sleep(delay * (1 + self.jitter * self.rng.uniform(-1, 1)))
                continue
            if len(rows) != len(batch):
                raise RuntimeError(f"run() returned {len(rows)} results for a batch of {len(batch)}")
            for i, row in zip(batch, rows, strict=True):
                if i in results:
                    raise RuntimeError(f"item {i} answered twice")
                results[i] = row
            position += size
            failures = 0
            report.batches += 1
            report.sizes.append(size)
            peak = self.measure_peak() if self.measure_peak else None
            if peak:
                self.model.observe(lengths, peak)
            self._adapt(state, size, size / max(self.clock() - t0, 1e-9))

    def _adapt(self, state: _Bucket, size: int, rate: float) -> None:
        """Hill-climb on measured items/s: grow while it improves, settle on the best size when it does not."""
        if rate > state.best_rate * (1 + self.tolerance):
            state.best_rate, state.best_size = rate, size
            if not state.settled:
                state.size = min(self.max_batch, max(size + 1, math.ceil(size * self.grow)))
        elif size > state.best_size and rate < state.best_rate * (1 - self.tolerance):
            state.size, state.settled = state.best_size, True  # bigger was slower: go back and stay
        elif not state.settled:
            state.size = min(self.max_batch, max(size + 1, math.ceil(size * self.grow)))
