"""AdaptiveBatcher: find the fastest batch size by measurement, under a memory ceiling, answering every item once.

Items are taken longest first, in batches of consecutive items (so padding stays small), and each
batch's size is learned for the bucket of its first, longest item (``bucket_of(length)``: what drives
its cost; a caller whose items all cost the same gives them one length, so they share one learned
size). A batch does not stop at a bucket's end: the last batch of a bucket is filled from the next
one, as fixed batches over sorted items would be. Per bucket:

* **Start** from the size an earlier shard learned; else from the best size of the nearest bucket
  that settled, scaled to this bucket's per-item cost (the same work per batch), capped at an
  eighth of the items left so there is room to compare; else, while the bucket before it (longer
  items) was still climbing when its items ran out, from that bucket's best size so far, scaled
  the same way, climbing on (a run of few items per bucket would otherwise restart from one item
  in every bucket and spend itself exploring); else from ``start_batch`` items of the shard's
  cheapest kind, scaled the same way (a token budget), at most an eighth of the items left; with
  ``start_batch=None`` (stage 4 on a GPU) from the memory plan itself, at most an eighth of the items left.
  Always capped by the memory plan (the most items the memory model says fit the budget). Memory
  is a ceiling throughout; until a measured peak has calibrated the memory model, only
  ``prior_trust`` (70 %) of the budget is planned on.
  A budget smaller than one item's estimate fails at once (``ItemTooLarge``, naming the item, its
  estimate and the budget).
* **Explore** geometrically: each size is judged by its work per second (items × the length they
  are padded to: items come longest first) on ``judge_s`` seconds of measured compute, on
  ``judge_batches`` batches once they last a fifth of that, or on twice as many once they last a
  fiftieth, so timer noise cannot crown a size and a bucket of quick batches still moves. Sizes ×
  ``grow`` are tried while they pay more than ``tolerance``, and one step past a size that does not
  (a flat stretch of the curve is not its top) where that costs at most an eighth of the items left;
  when the first steps up do not pay, sizes ÷ ``grow`` are tried the same way. The best size
  measured is kept.
* **Re-probe**: once settled, one neighbour (up, then down, in turn) is judged against the best
  size's latest rate after 4 judgements of it, then 8, 16 … up to every ``reprobe_every``: a
  neighbour that pays resumes exploring, so a change in load is followed, and a bucket that
  settled on one unlucky comparison (a pause in one of two batches) finds out within a few.
* **Out of memory**: the batch is retried after an exponential backoff with jitter. A size that
  failed once is retried at the same size (a transient OOM says nothing about capacity); a second
  failure in a row makes it a ceiling (×``shrink``); the memory model learns from measured peaks
  (``peaks``, a ``PeakMeter``) only. Ceilings decay after ``ceiling_ttl`` successful batches (the next
  confirmed one lasts twice as long), so one bad minute does not cap a shard for good. One item that still fails after
  ``max_retries`` attempts raises ``ItemTooLarge``.

``run(indices)`` should be the compute alone (encode and write outside it, or on a thread): its
duration is what the batcher climbs on. Every item is answered exactly once and results come
back in input order; an item is marked done only when its batch returned.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from aigc.batching.memory import MemoryModel
from aigc.batching.peaks import PeakMeter


class ItemTooLarge(RuntimeError):
    """One item alone does not fit the memory available."""


def is_oom(error: BaseException) -> bool:
    if isinstance(error, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


FIRST_REPROBE = 4
"""Judgements of a newly settled size before its first re-probe (then twice as many each time)."""


def bucket_of(length: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, length))))


@dataclass
class BatchReport:
    items: int = 0
    batches: int = 0
    ooms: int = 0
    seconds: float = 0.0
    compute_seconds: float = 0.0
    """Time inside ``run()`` on batches that returned: what the batcher optimises."""
    sizes: list[int] = field(default_factory=list)
    learned: dict[int, int] = field(default_factory=dict)
    """Bucket → the batch size it settled on; pass it to the next shard's batcher."""
    prediction_error: float | None = None
    measured_peaks: int = 0
    """Batches whose peak memory was measured and fed to the memory model."""

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict:
        return {"items": self.items, "batches": self.batches, "ooms": self.ooms, "seconds": round(self.seconds, 4),
                "compute_seconds": round(self.compute_seconds, 4), "items_per_s": round(self.items_per_s, 2),
                "max_batch_used": max(self.sizes, default=0),
                "learned_sizes": {str(k): v for k, v in sorted(self.learned.items())},
                "memory_prediction_error": self.prediction_error, "measured_peaks": self.measured_peaks}


@dataclass
class _Bucket:
    size: int
    best_size: int = 0
    best_rate: float = 0.0
    direction: int = 1
    """+1 while trying bigger sizes, -1 smaller, 0 settled on ``best_size``."""
    start_size: int = 0
    tried_down: bool = False
    leapt: bool = False
    """Whether the climb has gone past a step that did not pay (once, since the last size that paid)."""
    trial_size: int = 0
    trial_work: float = 0.0
    """The work of the trial's batches so far: their items × the length each batch is padded to."""
    trial_seconds: float = 0.0
    trial_batches: int = 0
    since_probe: int = 0
    probe_in: int = FIRST_REPROBE
    """Judgements of the best size before the next re-probe: FIRST_REPROBE after settling, doubling up to
    ``reprobe_every``."""
    next_probe: int = 1
    """Direction of the next re-probe: up, then down, in turn."""
    ceiling: int | None = None
    ceiling_ttl: int = 0
    ceiling_left: int = 0
    strikes: int = 0
    """Consecutive OOMs at the current size."""


class AdaptiveBatcher:
    """``run(indices) → results`` (one per index, in order) over every item, adaptively batched."""

    def __init__(self, run: Callable[[list[int]], Sequence], lengths: Sequence[int], model: MemoryModel,
                 budget_bytes: Callable[[], float], *, grow: float = 2.0, shrink: float = 0.7,
                 max_batch: int | None = None, max_retries: int = 8, backoff_s: float = 0.05,
                 backoff_max_s: float = 2.0, jitter: float = 0.5, tolerance: float = 0.03, judge_s: float = 0.1,
                 judge_batches: int = 2, start_batch: int | None = 32, reprobe_every: int = 32,
                 ceiling_ttl: int = 16,
                 prior_trust: float = 0.7, learned: dict[int, int] | None = None,
                 peaks: PeakMeter | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.perf_counter,
                 seed: int = 0):
        if grow <= 1 or not 0 < shrink < 1:
            raise ValueError(f"grow must be > 1 and shrink in (0, 1), got grow={grow}, shrink={shrink}")
        self.run, self.lengths, self.model, self.budget_bytes = run, list(lengths), model, budget_bytes
        self.grow, self.shrink, self.max_batch, self.max_retries = grow, shrink, max_batch or None, max_retries
        self.backoff_s, self.backoff_max_s, self.jitter, self.tolerance = backoff_s, backoff_max_s, jitter, tolerance
        self.judge_s, self.judge_batches, self.start_batch = judge_s, judge_batches, start_batch
        self.prior_trust = prior_trust
        self.reprobe_every, self.ceiling_ttl = reprobe_every, ceiling_ttl
        self.peaks, self.sleep, self.clock, self.rng = peaks, sleep, clock, random.Random(seed)
        self.learned = dict(learned or {})
        self.buckets: dict[int, _Bucket] = {}

    # -- sizes ------------------------------------------------------------------------------
    def _memory_cap(self, index: int) -> int:
        """The most items like ``index`` (the longest of its batch) the memory model says fit the budget.

        Until a measured peak has calibrated the model, only ``prior_trust`` of the budget is planned
        on: a prior may be that far off. A single item is always checked against the whole budget."""
        length, budget = self.lengths[index], self.budget_bytes()
        if self.model.max_items(length, budget) < 1:
            raise self._too_large(index, budget, "")
        if not self.model.calibrated:
            budget *= self.prior_trust
        return self._capped(max(1, self.model.max_items(length, budget)))

    def _too_large(self, index: int, budget: float, after: str) -> ItemTooLarge:
        length = self.lengths[index]
        return ItemTooLarge(f"item {index} (length {length}) does not fit alone: estimated "
                            f"{self.model.predict([length]):.0f} B against a budget of {budget:.0f} B{after}; "
                            f"raise the budget or shorten the item")

    def _capped(self, fits: int) -> int:
        return fits if self.max_batch is None else min(fits, self.max_batch)

    def _step(self, size: int, direction: int) -> int:
        return max(size + 1, math.ceil(size * self.grow)) if direction > 0 else max(1, math.floor(size / self.grow))

    def _start(self, key: int, first: int, left: int, shortest: int, before: int | None) -> _Bucket:
        """The state of bucket ``key`` when its first item (``first``) comes up with ``left`` items to go (this
        bucket's and the shorter ones'); ``before``: the bucket whose items came just before, if any."""
        if key in self.learned:
            return _Bucket(size=max(1, self.learned[key]), best_size=self.learned[key], direction=0)
        # What a settled neighbour measured beats a default: ``start_batch`` items of the shard's cheapest
        # kind, in this bucket's items of the same work (a token budget: one item of length 1,024 where 32
        # of length 8 fit). Either way an eighth of what is left at most, so there is room to explore from it.
        settled = self._from_nearest(key)
        climbing = self.buckets.get(before) if before is not None else None
        if settled is None and climbing is not None and climbing.direction > 0 and climbing.best_size:
            # The bucket before ran out of items while its sizes still paid: go on from where it got to.
            size = max(climbing.best_size, self._same_work(climbing.best_size, before, key))
            return _Bucket(size=max(1, min(self._memory_cap(first), size)), start_size=0)
        size = settled or (self._same_work(self.start_batch, shortest, key) if self.start_batch
                           else self._memory_cap(first))
        size = max(1, min(self._memory_cap(first), math.ceil(left / 8), size))
        return _Bucket(size=size, start_size=size)

    def _same_work(self, size: int, length: int, key: int) -> int:
        """How many items of bucket ``key`` cost what ``size`` items of ``length`` do (the model's ``d² + L²``)."""
        return max(1, round(size * self.model.units([length]) / self.model.units([key])))

    def _from_nearest(self, key: int) -> int | None:
        """The best size of the nearest bucket that settled (this run's, or an earlier shard's), scaled to this
        bucket's per-item cost. A bucket still exploring when it ran out of items says nothing yet."""
        known = {k: b.best_size for k, b in self.buckets.items() if b.best_size and b.direction == 0} | self.learned
        if not known:
            return None
        nearest = min(known, key=lambda k: (abs(math.log2(k) - math.log2(key)), k))
        return self._same_work(known[nearest], nearest, key)

    def _allowed(self, state: _Bucket, size: int, cap: int) -> int:
        return max(1, min(size, cap, state.ceiling or size))

    # -- the loop ---------------------------------------------------------------------------
    def __call__(self, indices: Sequence[int] | None = None) -> tuple[list, BatchReport]:
        indices = list(range(len(self.lengths))) if indices is None else list(indices)
        results: dict[int, object] = {}
        report = BatchReport()
        started = self.clock()
        order = sorted(indices, key=lambda i: (-self.lengths[i], i))  # longest first: padding stays small
        shortest = min((self.lengths[i] for i in indices), default=1)
        position, before = 0, None
        while position < len(order):
            key = bucket_of(self.lengths[order[position]])
            if key not in self.buckets:
                self.buckets[key] = self._start(key, order[position], len(order) - position, shortest, before)
            position = self._drain(key, order, position, results, report)
            before = key
        missing = set(indices) - set(results)
        if missing:  # cannot happen unless run() misbehaves: say so rather than return holes
            raise RuntimeError(f"{len(missing)} item(s) were never answered, e.g. {sorted(missing)[:5]}")
        report.items, report.seconds = len(indices), self.clock() - started
        # What the next shard starts from: each bucket's best measured size (one that ran out of items while
        # exploring passes on its best so far, not the step it was about to try).
        report.learned = {**self.learned, **{k: (b.best_size or b.size) for k, b in self.buckets.items()}}
        report.prediction_error = self.model.mean_relative_error
        return [results[i] for i in indices], report

    def _drain(self, key: int, order: list[int], position: int, results: dict, report: BatchReport) -> int:
        """Batches from ``order[position]`` on while they start in bucket ``key`` (the last one filled from the
        buckets after it); → the position of the first item of the next bucket's first batch."""
        state, failures = self.buckets[key], 0
        while position < len(order) and bucket_of(self.lengths[order[position]]) == key:
            cap = self._memory_cap(order[position])  # the longest of the batch: it is padded to that
            state.size = self._allowed(state, state.size, cap)
            size = min(state.size, len(order) - position)
            batch = order[position:position + size]
            metered = self.peaks is not None and self.peaks.due(report.batches)
            t0 = self.clock()
            oom = None
            try:
                with self.peaks.measuring() if metered else contextlib.nullcontext():
                    rows = self.run(batch)
            except BaseException as e:
                if not is_oom(e):
                    raise
                oom = e.with_traceback(None)  # its frames would pin the failed batch's tensors
            if oom is not None:
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()  # outside the except block: nothing pins the tensors any more
                report.ooms += 1
                failures += 1
                self._on_oom(state, batch, failures, oom)
                delay = min(self.backoff_max_s, self.backoff_s * 2 ** (failures - 1))
                self.sleep(delay * (1 + self.jitter * self.rng.uniform(-1, 1)))
                continue
            seconds = max(self.clock() - t0, 1e-9)
            if len(rows) != len(batch):
                raise RuntimeError(f"run() returned {len(rows)} results for a batch of {len(batch)}")
            for i, row in zip(batch, rows, strict=True):
                if i in results:
                    raise RuntimeError(f"item {i} answered twice")
                results[i] = row
            position += size
            failures, state.strikes = 0, 0
            report.batches += 1
            report.compute_seconds += seconds
            report.sizes.append(size)
            peak = self.peaks.peak() if metered else None
            if peak:
                self.model.observe([self.lengths[i] for i in batch], peak)
                report.measured_peaks += 1
            self._decay_ceiling(state)
            # A batch cut short by the shard's end or a ceiling is not a judgement, nor is one slowed by its meter.
            if size == state.size and not (metered and self.peaks.intrusive):
                work = size * self.lengths[batch[0]]  # padded to its first, longest item
                self._measure(state, size, seconds, work, cap, len(order) - position)
        return position

    def _on_oom(self, state: _Bucket, batch: list[int], failures: int, error: BaseException) -> None:
        size = len(batch)
        state.strikes += 1
        if size == 1 and failures > self.max_retries:
            raise self._too_large(batch[0], self.budget_bytes(), f" after {failures} attempts") from error
        if state.strikes < 2 or size == 1:
            return  # once may be transient: the same size again, after the backoff
        # Twice in a row: this size does not fit now. It becomes a ceiling that decays. (The memory model
        # learns from measured peaks only: an OOM says "more than the budget", not how much, and fed in as
        # a peak it would cap the bucket for good.)
        if state.ceiling is None:  # a new episode: after an earlier ceiling decayed, this one lasts twice as long
            state.ceiling_ttl = state.ceiling_ttl * 2 if state.ceiling_ttl else self.ceiling_ttl
        state.ceiling = max(1, math.floor(size * self.shrink))
        state.ceiling_left = state.ceiling_ttl
        state.size, state.strikes, state.trial_size = state.ceiling, 0, 0
        if state.best_size > state.ceiling:
            state.best_size, state.best_rate = state.ceiling, 0.0
        state.direction = 0 if state.direction > 0 else state.direction

    def _decay_ceiling(self, state: _Bucket) -> None:
        if state.ceiling is not None:
            state.ceiling_left -= 1
            if state.ceiling_left <= 0:
                state.ceiling = None

    def _measure(self, state: _Bucket, size: int, seconds: float, work: float, cap: int, left: int) -> None:
        """Accumulate this size's trial (``work``: the batch's items × the length they are padded to);
        when it has lasted ``judge_s``, judge it and pick the next size (``left``: the items still to answer).

        Work, not items: items come longest first, so the later trials of a bucket would look faster per item
        for their shorter items alone (up to twice in a bucket of lengths 513 to 1,024) and crown sizes that are
        not; where every item has one length the two are the same."""
        if state.trial_size != size:
            state.trial_size, state.trial_work, state.trial_seconds, state.trial_batches = size, 0.0, 0.0, 0
        state.trial_work += work
        state.trial_seconds += seconds
        state.trial_batches += 1
        # Judged on judge_s of compute, on judge_batches batches once those last a fifth of it, or on
        # twice as many once they last a fiftieth (a bucket of quick batches must not stay at its start):
        # enough that a timer's jitter cannot crown a size, without spending long on a bad one.
        judged = (state.trial_seconds >= self.judge_s
                  or (state.trial_batches >= self.judge_batches and state.trial_seconds >= self.judge_s / 5)
                  or (state.trial_batches >= 2 * self.judge_batches and state.trial_seconds >= self.judge_s / 50))
        if not judged:
            return
        rate = state.trial_work / state.trial_seconds
        state.trial_work, state.trial_seconds, state.trial_batches = 0.0, 0.0, 0
        pays = state.best_size == 0 or rate > state.best_rate * (1 + self.tolerance)
        if state.direction == 0:
            self._judge_settled(state, size, rate, pays, cap)
            return
        if pays:
            state.best_size, state.best_rate, state.leapt = size, rate, False
            nxt = self._allowed(state, self._step(size, state.direction), cap)
            if nxt != size:
                state.size = nxt  # keep going while it pays
                return
        elif state.direction > 0 and not state.leapt and size > state.best_size:
            # A step up that does not pay may be a flat stretch, not the top: one more step before concluding, where
            # its trial costs at most an eighth of what is left. (Measured on a 2-layer Llama, prompts near 1,000
            # tokens: 2 padded prompts a batch are no faster per prompt than 1, the padding mask costing the fused
            # attention kernel, and 4 to 16 are 15-25 % faster.)
            nxt = self._allowed(state, self._step(size, 1), cap)
            if nxt != size and nxt * self.judge_batches <= left / 8:
                state.leapt, state.size = True, nxt
                return
        if state.direction > 0 and state.best_size == state.start_size and not state.tried_down:
            # The first step up did not pay, or cannot be taken: try smaller sizes the same way.
            state.tried_down, state.direction = True, -1
            nxt = self._allowed(state, self._step(state.best_size, -1), cap)
            if nxt != state.best_size:
                state.size = nxt
                return
        state.direction, state.size, state.since_probe, state.probe_in = 0, state.best_size, 0, FIRST_REPROBE

    def _judge_settled(self, state: _Bucket, size: int, rate: float, pays: bool, cap: int) -> None:
        if size == state.best_size:
            state.best_rate = rate  # its latest rate: a re-probe is compared with the load of now
            state.since_probe += 1
            if state.since_probe >= min(state.probe_in, self.reprobe_every):
                state.since_probe, state.probe_in = 0, 2 * state.probe_in
                probe = self._allowed(state, self._step(state.best_size, state.next_probe), cap)
                if probe != state.best_size:  # (a probe up that a ceiling stops is tried again next time)
                    state.next_probe = -state.next_probe
                state.size = probe
            return
        if pays:  # a neighbour pays now: explore onwards in its direction
            state.direction = 1 if size > state.best_size else -1
            state.best_size, state.best_rate = size, rate
            nxt = self._allowed(state, self._step(size, state.direction), cap)
            state.size = nxt
            if nxt == size:
                state.direction = 0
            return
        state.size = state.best_size
