"""How long each rank works in a step, measured, so that a straggler shows as time and not as an estimate.

DDP all-reduces once per optimizer step and the fastest rank waits there for the slowest. The plan
(``balance.py``) balances an *estimate* of cost; these figures are what the ranks actually spent:
waiting for their data, the forward passes and the backward passes of the micro-steps that do not
synchronise. The last micro-step's backward is left out on purpose: DDP overlaps its all-reduce
with it, so it would contain the wait for the slowest rank and make every rank look alike.

What is timed is the device's time, not the wall clock's: on a GPU the spans are CUDA events read after
the step's own synchronisation (the loss read-back), so measuring adds no host synchronisation; on a
CPU they are the process's CPU time (all its threads: the intra-op pool, the prefetch thread building
the batch a rank waits for). A rank descheduled because its host is busy with other work (another
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
        self._host = 0.0
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def host(self):
        """Host-side work (getting the next batch ready): the process's CPU time."""
        t0 = self.cpu_clock()
        try:
            yield
        finally:
            self._host += self.cpu_clock() - t0

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


def measured_imbalance(busy: list[list[float]] | np.ndarray, z: float = 1.645) -> dict:
    """What the slowest rank cost the others, from per-step, per-rank busy seconds ``(steps, world)``.

    - ``waste``: Σ_steps max_rank / Σ_steps mean_rank − 1, the share of time the ranks spent waiting for the
      step's slowest rank at each all-reduce. Timing jitter alone makes it a little positive.
    - ``imbalance``: the slowest rank over the run, max_r(Σ_s busy_r) / mean_r(Σ_s busy_r) − 1: a rank that is
      slower step after step (a slow host, a skewed split). Jitter averages out of it.
    - ``imbalance_low``/``imbalance_high``: its one-sided ``z`` confidence bounds (a ratio estimator over steps,
      delta method): a gate fails only a run whose lower bound is above its limit, so a balanced run on a noisy
      host does not fail by chance.
    """
    b = np.asarray(busy, dtype=np.float64)
    if b.ndim != 2 or not len(b) or b.shape[1] < 2:
        return {"steps": int(len(b)), "waste": 0.0, "imbalance": 0.0, "imbalance_low": 0.0, "imbalance_high": 0.0,
                "slowest_rank": 0}
    mean = b.mean(axis=1)
    slowest = int(np.argmax(b.sum(axis=0)))
    extra = b[:, slowest] - mean
    ratio = float(extra.sum() / mean.sum())
    n = len(b)
    se = math.sqrt(float(((extra - ratio * mean) ** 2).sum()) / (n * (n - 1))) / float(mean.mean()) if n > 1 \
        else math.inf
    return {"steps": n, "waste": float(b.max(axis=1).sum() / mean.sum() - 1), "imbalance": ratio,
            "imbalance_low": ratio - z * se, "imbalance_high": ratio + z * se, "slowest_rank": slowest}


def busy_matrix(steps: list[int], busy: list, world: int) -> np.ndarray:
    """(steps, world) busy seconds of the trained steps that ran with ``world`` ranks, the first left out (it
    carries the warm-up: allocations, the first prefetch). Steps logged before the figure existed have none."""
    rows = [list(b) for s, b in zip(steps, busy, strict=True) if s > 1 and b is not None and len(b) == world]
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), world)
