"""Which samples each rank trains on, step by step: equal counts, balanced by estimated compute.

DDP all-reduces at every optimizer step, so a rank that got heavier samples *in that step*
keeps the others waiting: balance must hold per step, not only per epoch. Each rank gets the
same number of samples per step (DDP needs equal step counts), and the *cost* (the workload's estimate
of compute per sample, ``Workload.sample_costs``: pixels and tokens, sequence length, not a row count) is
balanced:

1. samples are sorted by cost (ties in a seeded random order), so a global step holds samples
   of similar cost (length bucketing);
2. inside a step they are dealt in rounds of ``world``: the heaviest left goes to the rank with
   the least cost so far;
3. the order of steps is shuffled.

Everything is a function of (costs, world size, micro batch, seed, epoch): every rank computes
the same plan without talking, and a resumed run recomputes the plan of its epoch.
"""

from __future__ import annotations

import numpy as np


def _rng(seed: int, epoch: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch, salt])


def balanced_plan(costs: np.ndarray, world: int, micro: int, seed: int, epoch: int) -> np.ndarray:
    """(steps, world, micro) sample indices; ``len(costs) // (world·micro)`` steps.

    The remainder is left out of this epoch; the seeded shuffle before the stable sort picks
    which samples, so no sample is left out every epoch.
    """
    per_step = world * micro
    steps = len(costs) // per_step
    if steps == 0:
        return np.empty((0, world, micro), dtype=np.int64)
    shuffled = _rng(seed, epoch, 0).permutation(len(costs))
    by_cost = shuffled[np.argsort(-costs[shuffled], kind="stable")]
    # Leave out a random remainder rather than always the cheapest samples.
    keep = np.sort(_rng(seed, epoch, 1).choice(len(costs), steps * per_step, replace=False))
    rounds = by_cost[keep].reshape(steps, micro, world)  # per step, rounds of `world` samples, heaviest first
    plan = np.empty((steps, world, micro), dtype=np.int64)
    for s in range(steps):
        load = np.zeros(world)
        for r in range(micro):
            ranks = np.argsort(load, kind="stable")  # the lightest rank takes the heaviest sample of the round
            plan[s, ranks, r] = rounds[s, r]
            load[ranks] += costs[rounds[s, r]]
    return plan[_rng(seed, epoch, 2).permutation(steps)]


def naive_plan(n: int, world: int, micro: int, seed: int, epoch: int) -> np.ndarray:
    """A row-count split (DistributedSampler-style): shuffle, then each rank takes an equal slice."""
    per_step = world * micro
    steps = n // per_step
    return _rng(seed, epoch, 0).permutation(n)[: steps * per_step].reshape(steps, world, micro)


def round_robin_plan(n: int, world: int, micro: int) -> np.ndarray:
    """DistributedSampler without shuffling: the stored order, rank r takes samples r, r + world, r + 2·world…"""
    steps = n // (world * micro)
    return np.arange(steps * world * micro).reshape(steps, micro, world).transpose(0, 2, 1)


def contiguous_plan(n: int, world: int, micro: int) -> np.ndarray:
    """Each rank one contiguous block of the stored order, read from its start."""
    steps = n // (world * micro)
    return np.arange(steps * world * micro).reshape(world, steps, micro).transpose(1, 0, 2)


def length_grouped_plan(costs: np.ndarray, world: int, micro: int, seed: int, epoch: int,
                        mega: int = 50) -> np.ndarray:
    """Hugging Face's ``group_by_length`` (LengthGroupedSampler and its distributed form): shuffle, cut into
    megabatches of ``mega`` steps, sort each by cost, heaviest first, and deal each step round-robin. The steps
    then run in a seeded random order (Hugging Face keeps them heaviest first): the same work over an epoch, and a
    run shorter than an epoch sees a fair sample of it rather than only the heaviest steps."""
    per_step = world * micro
    steps = len(costs) // per_step
    order = _rng(seed, epoch, 0).permutation(len(costs))[: steps * per_step]
    chunks = [order[i:i + mega * per_step] for i in range(0, len(order), mega * per_step)]
    order = np.concatenate([c[np.argsort(-costs[c], kind="stable")] for c in chunks]) if chunks else order
    return order.reshape(steps, micro, world).transpose(0, 2, 1)[_rng(seed, epoch, 2).permutation(steps)]


def plan_for(split: str, costs: np.ndarray, world: int, micro: int, seed: int, epoch: int) -> np.ndarray:
    """The (steps, world, micro) plan of ``TrainConfig.split``: ours, or a simple alternative to compare with."""
    if split == "balanced":
        return balanced_plan(costs, world, micro, seed, epoch)
    if split == "shuffled":
        return naive_plan(len(costs), world, micro, seed, epoch)
    if split == "length_grouped":
        return length_grouped_plan(costs, world, micro, seed, epoch)
    if split == "round_robin":
        return round_robin_plan(len(costs), world, micro)
    if split == "contiguous":
        return contiguous_plan(len(costs), world, micro)
    raise ValueError(f"unknown split {split!r}")


def imbalance(costs: np.ndarray, plan: np.ndarray) -> float:
    """max / mean − 1 of the cost assigned to each rank over the plan: 0 is perfect."""
    loads = costs[plan].sum(axis=(0, 2)) if plan.size else np.zeros(1)
    return float(loads.max() / loads.mean() - 1) if loads.mean() > 0 else 0.0


def step_imbalance(costs: np.ndarray, plan: np.ndarray) -> float:
    """The same per step, averaged over steps: how long the others wait for the slowest rank at each all-reduce."""
    if not plan.size:
        return 0.0
    loads = costs[plan].sum(axis=2)  # (steps, world)
    return float(np.mean(loads.max(axis=1) / loads.mean(axis=1) - 1))
