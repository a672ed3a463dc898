"""How long each rank works in a step, measured, so that a straggler shows as time and not as an estimate.

DDP all-reduces once per optimizer step and the fastest rank waits there for the slowest. The plan
(``balance.py``) balances an *estimate* of cost; these figures are what the ranks actually spent:
waiting for their data, the forward passes and the backward passes of the micro-steps that do not
synchronise. The last micro-step's backward is left out on purpose: DDP overlaps its all-reduce
with it, so it would contain the wait for the slowest rank and make every rank look alike.

What is timed is the device's time, not the wall clock's: on a GPU the spans are CUDA events read after
the step's own synchronisation (the loss read-back), so measuring adds no host synchronisation; on a
CPU they are the process's CPU time (all its threads, the intra-op pool among them) less the prefetch
thread's, whose building of each batch is counted once, when the rank takes the batch (``add``): what a
scheduler ran of it during the timed spans depends on how long the rank waited at the last all-reduce
(the rank that waited built its next batch there, untimed), which made a rank that was slower by chance
look slower still. A rank descheduled because its host is busy with other work (another
task, the Airflow services, more ranks than cores) is not slower at its share of the training, and the
wall clock would say it was: on this 2-core machine, running next to another test, it read 14%.
A host that computes slower (a slower CPU or GPU, throttling) still shows, as does work that differs.
"""

from __future__ import annotations

import contextlib
import math
import time

import numpy as np
import torch


class BusyClock:
    """Sums the spans of one rank's own work in the current step; ``take()`` returns seconds and resets."""

    def __init__(self, device: torch.device, cpu_clock=time.process_time):
        self.cuda = device.type == "cuda"
        self.cpu_clock = cpu_clock
        self.background = _none  # CPU seconds of threads whose work is counted apart (``add``), left out of spans
        self._host = 0.0
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def host(self):
        """Host-side work (getting the next batch ready): the process's CPU time, less the background's."""
        t0, b0 = self.cpu_clock(), self.background()
        try:
            yield
        finally:
            self._host += (self.cpu_clock() - t0) - (self.background() - b0)

    def add(self, seconds: float) -> None:
        """Work measured elsewhere (a batch's building, timed on its own thread) that belongs to this step."""
        self._host += seconds

    @contextlib.contextmanager
    def device(self):
        """Device work (forward, local backward): CPU time on a CPU, CUDA events on a GPU."""
        if not self.cuda:
            with self.host():
                yield
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        try:
            yield
        finally:
            end.record()
            self._events.append((start, end))

    def take(self) -> float:
        """Seconds of this step's work; call once the device has finished it (after the loss read-back)."""
        seconds = self._host + sum(s.elapsed_time(e) for s, e in self._events) / 1000.0
        self._host, self._events = 0.0, []
        return seconds


def _none() -> float:
    return 0.0


def measured_imbalance(busy: list[list[float]] | np.ndarray, z: float = 1.645) -> dict:
    """What the slowest rank cost the others, from per-step, per-rank busy seconds ``(steps, world)``.

    - ``waste``: Σ_steps max_rank / Σ_steps mean_rank − 1, the share of time the ranks spent waiting for the
      step's slowest rank at each all-reduce. Timing jitter alone makes it a little positive.
    - ``imbalance``: the slowest rank over the run, max_r(Σ_s busy_r) / mean_r(Σ_s busy_r) − 1: a rank that is
      slower step after step (a slow host, a skewed split). Jitter averages out of it.
    - ``imbalance_low``/``imbalance_high``: its one-sided confidence bounds at the normal quantile ``z`` (a ratio
      estimator, delta method, Student's t): gate 2 passes a run only when the upper bound is within its limit
      and fails it when the lower bound is above (``aigc.quality.training.imbalance_outcome``). The steps are
      taken in ``batches`` of consecutive steps (batch means, about √steps of them): a neighbour that slows one
      rank for a few seconds slows a run of steps together, and steps taken one by one would pass those for
      independent evidence.
    """
    b = np.asarray(busy, dtype=np.float64)
    if b.ndim != 2 or not len(b) or b.shape[1] < 2:
        return {"steps": int(len(b)), "batches": 0, "waste": 0.0, "imbalance": 0.0, "imbalance_low": 0.0,
                "imbalance_high": 0.0, "slowest_rank": 0}
    mean = b.mean(axis=1)
    slowest = int(np.argmax(b.sum(axis=0)))
    extra = b[:, slowest] - mean
    ratio = float(extra.sum() / mean.sum())
    n = len(b)
    k = min(n, max(3, round(math.sqrt(n))))
    half = math.inf
    if k >= 3:
        edges = np.linspace(0, n, k + 1).round().astype(int)
        extra_k, mean_k = np.add.reduceat(extra, edges[:-1]), np.add.reduceat(mean, edges[:-1])
        se = math.sqrt(float(((extra_k - ratio * mean_k) ** 2).sum()) / (k * (k - 1))) / float(mean_k.mean())
        half = t_quantile(z, k - 1) * se
    return {"steps": n, "batches": k if k >= 3 else 0, "waste": float(b.max(axis=1).sum() / mean.sum() - 1),
            "imbalance": ratio, "imbalance_low": ratio - half, "imbalance_high": ratio + half,
            "slowest_rank": slowest}


def t_quantile(z: float, df: int) -> float:
    """Student's t quantile at the normal quantile ``z`` (Cornish-Fisher: 1.2% short of the table at 2 degrees of
    freedom, within 0.3% from 3 on; 2.130 for z=1.645 and 4 against 2.132, 1.697 for 30)."""
    z3, z5, z7 = z ** 3, z ** 5, z ** 7
    return (z + (z3 + z) / (4 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96 * df ** 2)
            + (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * df ** 3))


def busy_matrix(steps: list[int], busy: list, world: int) -> np.ndarray:
    """(steps, world) busy seconds of the trained steps that ran with ``world`` ranks, the first left out (it
    carries the warm-up: allocations, the first prefetch). Steps logged before the figure existed have none."""
    rows = [list(b) for s, b in zip(steps, busy, strict=True) if s > 1 and b is not None and len(b) == world]
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), world)
