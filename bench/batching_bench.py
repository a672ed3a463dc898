"""B1, stage 4's batching: ours against the best fixed batch found in hindsight, on two workloads.

    python bench/batching_bench.py [--repeats 3] [--image-items 4000] [--attention-items 2000]

Workloads, compute only (what a batch size changes):

* ``image``: the shipped demo model (tests/fixtures/demo_model) as the demo deploys it, the int8
  variant at 32 px, generating the evaluation prompts; every prompt costs the same.
* ``attention``: self-attention (width 64) over long-tailed sequences (lengths 8–1,024, Pareto),
  each batch padded to its longest item, so memory and time grow with length (at 2,048 a fixed
  batch of 512 would need 17 GB: more than this machine has).

Policies, each over the same order (longest first: padding stays small): fixed batches of every
power of two from 4 to 512 (a batch that runs out of memory is split in two and retried, as a
careful user would); the oracle, the best of those in hindsight; where lengths differ, the
planner alone (``plan_batches``: batches filled up to a token budget of 8 to 512 items of length
64, or up to the real budget where there is one), retried the same way; and ours,
``AdaptiveBatcher``. The report says when a sweep's best is at its end. Conditions:
no budget, and 2 % injected out-of-memory errors (``SimulatedOOM``, the same seed for every
policy; no backoff sleep in either: the fixed baseline has none); and, on the attention workload,
a budget (two of the longest items) enforced by an accountant whose per-item truth is up to ±30 %
off the batcher's prior, which learns from the peaks the accountant reports (a device's
``max_memory_allocated``); a batch over the budget counts as a violation and is retried smaller.
Repeats alternate the policies in one process; each cell is the median items/s with its range.
Every policy is checked to answer every item exactly once and in input order.

The last line is one JSON object, also written to ``bench/results/batching.json``.
Not yet here (issue 15): the seed's trial-and-error batcher as a baseline, more than one data
size, and a GPU section.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.training_fixtures: the shipped demo model, registered

from aigc.batching import AdaptiveBatcher, MemoryModel, plan_batches  # noqa: E402
from aigc.batching.adaptive import is_oom  # noqa: E402
from aigc.batching.faults import SimulatedOOM  # noqa: E402

# Sweeps that bracket the best on both workloads (a best at either end would mean a stronger baseline
# was left untried): every power of two.
FIXED = (4, 8, 16, 32, 64, 128, 256, 512)
PLANNED = (8, 16, 32, 64, 128, 512)  # the planner's token budgets: this many items of length 64
WIDTH = 64
RESULTS = ROOT / "bench" / "results" / "batching.json"


def image_workload(n: int, lake_root: Path):
    from aigc.evaluate.reference import evaluation_prompts
    from aigc.registry.loader import Generator
    from tests.training_fixtures import install_demo_model

    gen = Generator.load(install_demo_model(lake_root), "shapes-cvae", "v0001", "int8")
    prompts = (evaluation_prompts(648, 0) * (n // 648 + 1))[:n]
    texts, seeds = [p["prompt"] for p in prompts], list(range(n))
    gen.generate(texts[:4], seeds[:4])  # warm-up

    def compute(batch: list[int]) -> None:
        gen.generate([texts[i] for i in batch], [seeds[i] for i in batch])
    return [gen.config.resolution] * n, compute


def attention_workload(n: int):
    rng = random.Random(0)
    lengths = [min(1024, int(8 + rng.paretovariate(1.2) * 8)) for _ in range(n)]
    data = [torch.randn(length, WIDTH, generator=torch.Generator().manual_seed(i)) for i, length in enumerate(lengths)]

    def compute(batch: list[int]) -> None:
        x = torch.zeros(len(batch), max(lengths[i] for i in batch), WIDTH)
        for row, i in enumerate(batch):
            x[row, : lengths[i]] = data[i]
        torch.softmax(x @ x.transpose(1, 2) / WIDTH**0.5, dim=-1) @ x
    return lengths, compute


class Accountant:
    """A device's memory, simulated: a batch's true peak is the prior's shape (``b · (d² + L²)``, 4 B a unit)
    times each item's own factor, drawn once in [1 − spread, 1 + spread]. A batch over the budget is
    a violation and raises out-of-memory; ``last`` is the peak a device would report after a batch."""

    def __init__(self, lengths: list[int], budget: float, spread: float = 0.3, seed: int = 11):
        rng = random.Random(seed)
        self.lengths, self.budget = lengths, budget
        self.factor = [rng.uniform(1 - spread, 1 + spread) for _ in lengths]
        self.violations, self.last, self.max_peak = 0, 0.0, 0.0

    def check(self, batch: list[int]) -> None:
        longest = max(self.lengths[i] for i in batch)
        peak = 4.0 * sum(self.factor[i] for i in batch) * (WIDTH**2 + longest**2)
        if peak > self.budget:
            self.violations += 1
            raise torch.OutOfMemoryError(f"simulated: {peak:.0f} B over the budget {self.budget:.0f} B")
        self.last, self.max_peak = peak, max(self.max_peak, peak)


def runner(lengths: list[int], compute: Callable, oom_rate: float, answered: list[int],
           accountant: Accountant | None = None):
    faults = SimulatedOOM(rate=oom_rate, seed=7) if oom_rate else None

    def run(batch: list[int]) -> list[int]:
        if accountant:
            accountant.check(batch)
        if faults:
            faults.check([lengths[i] for i in batch])
        compute(batch)
        answered.extend(batch)
        return list(batch)
    return run


def batches_with_retry(run: Callable, batches: list[list[int]], n: int) -> list[int]:
    """Each batch in turn; one that runs out of memory is split in two and retried, as a careful user would."""
    out: dict[int, int] = {}

    def attempt(batch: list[int]) -> None:
        try:
            rows = run(batch)
        except BaseException as e:
            if not is_oom(e):
                raise
            if len(batch) == 1:
                attempt(batch)  # one item: again (an injected fault passes on a retry)
                return
            attempt(batch[: len(batch) // 2])
            attempt(batch[len(batch) // 2:])
            return
        out.update(zip(batch, rows, strict=True))

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


def ours(run: Callable, lengths: list[int], budget: float, accountant: Accountant | None) -> list[int]:
    peak = (lambda: accountant.last) if accountant else None
    results, _ = AdaptiveBatcher(run, lengths, MemoryModel(width=WIDTH), lambda: budget, backoff_s=0.0,
                                 measure_peak=peak)()
    return results


def measure(lengths: list[int], compute: Callable, oom_rate: float, repeats: int,
            budget: float | None = None) -> dict:
    n = len(lengths)
    order = sorted(range(n), key=lambda i: (-lengths[i], i))
    policies = {f"fixed_{s}": (lambda run, acc, s=s: fixed(run, order, s)) for s in FIXED}
    if len(set(lengths)) > 1:  # where lengths differ: the planner alone, at each token budget (or the real one)
        for k in (PLANNED if budget is None else PLANNED[:1]):
            policies["planner" if budget else f"planner_{k}"] = lambda run, acc, k=k: planned(run, lengths, k, budget)
    policies["ours"] = lambda run, acc: ours(run, lengths, budget or float(1 << 40), acc)
    rates: dict[str, list[float]] = {name: [] for name in policies}
    memory: dict[str, dict] = {}
    for repeat in range(repeats):
        for name, policy in policies.items():
            answered: list[int] = []
            accountant = Accountant(lengths, budget) if budget else None
            t0 = time.perf_counter()
            results = policy(runner(lengths, compute, oom_rate, answered, accountant), accountant)
            rate = n / (time.perf_counter() - t0)
            assert results == list(range(n)), f"{name}: not every item in input order"
            assert sorted(answered) == list(range(n)), f"{name}: an item answered twice or never"
            rates[name].append(rate)
            if accountant:
                memory[name] = {"violations": accountant.violations,
                                "peak_over_budget": round(accountant.max_peak / budget, 3)}
            print(f"  repeat {repeat + 1}: {name:10s} {rate:9.0f} items/s"
                  + (f", {accountant.violations} over budget" if accountant else ""), file=sys.stderr, flush=True)
    cells = {k: {"median": round(statistics.median(v), 1), "range": [round(min(v), 1), round(max(v), 1)]}
             for k, v in rates.items()}
    fixed_names = [k for k in cells if k.startswith("fixed_")]
    oracle = max(fixed_names, key=lambda k: cells[k]["median"])
    planners = [k for k in cells if k.startswith("planner")]
    best_planner = max(planners, key=lambda k: cells[k]["median"]) if planners else None
    at_end = [best for best, sweep in ((oracle, fixed_names), (best_planner, planners))
              if len(sweep) > 1 and best in (sweep[0], sweep[-1])]
    return {"items": n, "oom_rate": oom_rate, "budget_bytes": budget, "items_per_s": cells, "oracle": oracle,
            "ours_vs_oracle": round(cells["ours"]["median"] / cells[oracle]["median"], 3),
            "best_planner": best_planner, "ours_vs_best_planner":
                round(cells["ours"]["median"] / cells[best_planner]["median"], 3) if best_planner else None,
            "ours_vs_fixed_32": round(cells["ours"]["median"] / cells["fixed_32"]["median"], 3),
            "memory": memory or None, "best_at_sweep_end": at_end, "exactly_once_in_order": True}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--image-items", type=int, default=4000)
    ap.add_argument("--attention-items", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workloads = {"image": image_workload(args.image_items, Path(tmp) / "lake"),
                     "attention": attention_workload(args.attention_items)}
        for name, (lengths, compute) in workloads.items():
            conditions = [(0.0, None), (0.02, None)]
            if name == "attention":  # memory that grows with length: also under a budget two longest items fit
                conditions.append((0.0, 4.0 * 1.3 * 2 * (WIDTH**2 + max(lengths) ** 2)))
            for oom_rate, budget in conditions:
                print(f"{name}, {len(lengths)} items, injected OOM rate {oom_rate}, budget {budget}:", file=sys.stderr)
                rows.append({"workload": name, **measure(lengths, compute, oom_rate, args.repeats, budget)})
    print(f"\nitems/s, median of {args.repeats}; ours / the best fixed batch in hindsight:", file=sys.stderr)
    for r in rows:
        cells = ", ".join(f"{k} {v['median']:.0f}" for k, v in r["items_per_s"].items())
        budget = f", budget {r['budget_bytes'] / 2**20:.1f} MiB {r['memory']}" if r["budget_bytes"] else ""
        print(f"  {r['workload']:9s} OOM {r['oom_rate']:.0%}{budget}: {cells}; oracle {r['oracle']}; "
              f"ours/oracle {r['ours_vs_oracle']:.2f}, ours/fixed_32 {r['ours_vs_fixed_32']:.2f}, "
              f"ours/best planner {r['ours_vs_best_planner']}; best at a sweep's end: {r['best_at_sweep_end']}",
              file=sys.stderr)
    summary = {"bench": "batching", "repeats": args.repeats, "rows": rows}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
