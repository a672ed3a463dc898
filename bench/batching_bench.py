"""Stage 4 benchmark: per-item, fixed-batch and adaptive batching on a long-tailed workload under a budget.

    python bench/batching_bench.py [--items 600] [--repeats 3] [--fixed 32]

The workload is real CPU compute: self-attention over each item's sequence (length from a
Pareto tail, 8 to 512 tokens, width 64), padded to the longest item of its batch. Memory is a
simulated accountant (``mem = b · (d² + L²) · 4 B``, capacity = the budget), so out-of-memory
happens where it would on a device of that size. Strategies, side by side in each repeat:

* per-item: batch size 1;
* fixed: batches of ``--fixed`` in input order; a batch that does not fit is retried item by item;
* adaptive: ``AdaptiveBatcher`` (longest first, memory ceiling, throughput hill-climb, backoff).

The last line is one JSON object with the medians.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

import torch

from aigc.batching import AdaptiveBatcher, MemoryModel
from aigc.batching.faults import SimulatedOOM

WIDTH = 64


def workload(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [min(512, int(8 + rng.paretovariate(1.2) * 8)) for _ in range(n)]


def make_run(lengths: list[int], accountant: SimulatedOOM):
    data = {i: torch.randn(length, WIDTH, generator=torch.Generator().manual_seed(i))
            for i, length in enumerate(lengths)}

    def run(batch: list[int]) -> list[float]:
        accountant.check([lengths[i] for i in batch])
        longest = max(lengths[i] for i in batch)
        x = torch.zeros(len(batch), longest, WIDTH)  # (B, L, d), padded
        for row, i in enumerate(batch):
            x[row, : lengths[i]] = data[i]
        attn = torch.softmax(x @ x.transpose(1, 2) / WIDTH**0.5, dim=-1) @ x
        return attn.sum(dim=(1, 2)).tolist()
    return run


def per_item(run, n: int) -> int:
    for i in range(n):
        run([i])
    return 0


def fixed(run, n: int, size: int) -> int:
    ooms = 0
    for start in range(0, n, size):
        batch = list(range(start, min(n, start + size)))
        try:
            run(batch)
        except torch.OutOfMemoryError:
            ooms += 1
            for i in batch:
                run([i])
    return ooms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fixed", type=int, default=32)
    ap.add_argument("--budget-items", type=int, default=24,
                    help="budget = this many items of length 128 (so long items must go in small batches)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    lengths = workload(args.items, 0)
    truth = MemoryModel(width=WIDTH)
    budget = truth.predict([128] * args.budget_items)
    results: dict[str, list[float]] = {"per_item": [], "fixed": [], "adaptive": []}
    extra: dict[str, list] = {"fixed_ooms": [], "adaptive_ooms": [], "adaptive_max_batch": []}
    for r in range(args.repeats):
        for name in results:
            accountant = SimulatedOOM(truth=truth, capacity_bytes=budget)
            run = make_run(lengths, accountant)
            t0 = time.perf_counter()
            if name == "per_item":
                per_item(run, len(lengths))
            elif name == "fixed":
                extra["fixed_ooms"].append(fixed(run, len(lengths), args.fixed))
            else:
                batcher = AdaptiveBatcher(run, lengths, MemoryModel(width=WIDTH), lambda: budget, sleep=lambda s: None)
                _, report = batcher()
                extra["adaptive_ooms"].append(report.ooms)
                extra["adaptive_max_batch"].append(max(report.sizes))
            rate = len(lengths) / (time.perf_counter() - t0)
            results[name].append(rate)
            print(f"repeat {r + 1}: {name:9s} {rate:8.0f} items/s", file=sys.stderr)
    medians = {k: round(statistics.median(v), 1) for k, v in results.items()}
    print(f"\nitems/s (median of {args.repeats}): " + ", ".join(f"{k} {v:.0f}" for k, v in medians.items())
          + f"; adaptive / fixed = {medians['adaptive'] / medians['fixed']:.2f}×, "
          f"adaptive / per-item = {medians['adaptive'] / medians['per_item']:.2f}×", file=sys.stderr)
    print(json.dumps({"bench": "batching", "items": args.items, "budget_bytes": budget, "items_per_s": medians,
                      "fixed_batch": args.fixed, **{k: v[-1] for k, v in extra.items()}}))


if __name__ == "__main__":
    main()
