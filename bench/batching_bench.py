"""B1, stage 4's batching: ours against the best fixed batch found in hindsight, on two workloads.

    python -m bench.batching_bench [--repeats 3] [--image-items 1000 4000] [--attention-items 2000 20000]
                                   [--workloads image attention gpu]

Workloads, compute only (what a batch size changes), each at two data sizes:

* ``image``: the shipped demo model (tests/fixtures/demo_model) as the demo deploys it, the int8
  variant at 32 px, generating the evaluation prompts; every prompt costs the same. Ours measures
  peaks with the engine's CPU meter (``CpuPeaks``).
* ``attention``: self-attention (width 64) over long-tailed sequences (lengths 8–1,024, Pareto),
  each batch padded to its longest item, so memory and time grow with length (at 2,048 a fixed
  batch of 512 would need 17 GB: more than this machine has; the GPU section goes to 4,096).

Policies (``bench/batching_policies.py``), each over the same order (longest first: padding stays
small): one item at a time and fixed batches of every power of two up to 512 (a batch that runs
out of memory is split in two and retried, as a careful user would); the oracle, the best of those
in hindsight; where lengths differ, the planner alone (``plan_batches``: batches filled up to a
token budget of 8 to 512 items of length 64, or up to the real budget where there is one),
retried the same way; the seed article's batcher (×1.2 after a batch that fits, ×0.7 after an
OOM, from 32, at most 512); and ours, ``AdaptiveBatcher``, cold (a run's first shard, learning from
nothing) and warm (a later shard, starting from the sizes the shard before it learned). On the
attention workload the fixed sweep stops at 128: its best is a batch of 2 to 64; 256 and 512 pad
hundreds of items to the longest (a fortieth of the best rate at 2,000 items, minutes a run at 8,000),
and they took two thirds of that workload's time. The report says when a sweep's best is at its end
(it would have to go on), and after what share of the items ours first ran the size it settled on (one
bucket).
Conditions: no budget, and 2 % injected out-of-memory errors (``SimulatedOOM``, the same seed for
every policy; no backoff sleep in any: the fixed baseline has none); and, on the attention
workload, a budget (two of the longest items) enforced by an accountant whose per-item truth is
up to ±30 % off the batcher's prior, which learns from the peaks the accountant reports (a
device's ``max_memory_allocated``); a batch over the budget counts as a violation and is retried
smaller. Where CUDA is present, a GPU section runs the attention workload there under a budget the
allocator itself enforces (real OOMs, real peaks); elsewhere the JSON says why it was skipped.
Repeats alternate the policies in one process; each cell is the median items/s with its range.
Every policy is checked to answer every item exactly once and in input order.

The last line is one JSON object, also written to ``bench/results/batching.json`` (or ``$AIGC_BENCH_RESULTS``).
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

from aigc.batching import CpuPeaks, CudaPeaks, PeakMeter, ReportedPeaks
from aigc.batching.adaptive import is_oom
from aigc.batching.faults import SimulatedOOM
from bench.batching_policies import WIDTH, fixed, ours, planned, seed_batcher
from bench.paths import results_path
from bench.provenance import write_results

ROOT = Path(__file__).resolve().parents[1]

# Sweeps that bracket the best on both workloads (a best at either end would mean a stronger baseline
# was left untried): every power of two.
FIXED = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # 1: one item at a time
PLANNED = (8, 16, 32, 64, 128, 512)  # the planner's token budgets: this many items of length 64
RESULTS = results_path("batching.json")  # bench/results, or $AIGC_BENCH_RESULTS


def image_workload(n: int, lake):
    """``lake``: one holding the shipped demo model (``install_demo_model``), shared by every size."""
    from aigc.workloads.image.reference import evaluation_prompts
    from aigc.workloads.image.serving import Generator

    gen = Generator.load(lake, "shapes-cvae", "v0001", "int8")
    prompts = (evaluation_prompts(648, 0) * (n // 648 + 1))[:n]
    texts, seeds = [p["prompt"] for p in prompts], list(range(n))
    gen.generate(texts[:4], seeds[:4])  # warm-up

    def compute(batch: list[int]) -> None:
        gen.generate([texts[i] for i in batch], [seeds[i] for i in batch])
    return [gen.config.resolution] * n, compute


def attention_workload(n: int, longest: int = 1024, device: str = "cpu"):
    rng = random.Random(0)
    lengths = [min(longest, int(8 + rng.paretovariate(1.2) * 8)) for _ in range(n)]
    data = [torch.randn(length, WIDTH, generator=torch.Generator().manual_seed(i)).to(device)
            for i, length in enumerate(lengths)]

    def compute(batch: list[int]) -> None:
        x = torch.zeros(len(batch), max(lengths[i] for i in batch), WIDTH, device=device)
        for row, i in enumerate(batch):
            x[row, : lengths[i]] = data[i]
        torch.softmax(x @ x.transpose(1, 2) / WIDTH**0.5, dim=-1) @ x
        if device == "cuda":
            # A batch is done when its results could be read, as a generation's are: without this the GPU
            # queues the work and every policy's clock (ours judges sizes by it) reads launch time alone.
            torch.cuda.synchronize()
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

    def failed(self) -> None:
        """The compute itself ran out of memory (never here: the check comes first)."""

    def done(self) -> None:
        """The batch returned: ``last`` is already its peak."""


class DeviceAccount:
    """On a GPU the allocator itself enforces the budget: ``torch.cuda.set_per_process_memory_fraction`` caps
    it, a batch over the cap raises a real out-of-memory error (a violation), and ``last`` is the batch's
    ``max_memory_allocated``."""

    def __init__(self, budget: float):
        self.budget, self.violations, self.last, self.max_peak = budget, 0, 0.0, 0.0
        torch.cuda.reset_peak_memory_stats()

    def check(self, batch: list[int]) -> None:
        pass

    def failed(self) -> None:
        self.violations += 1

    def done(self) -> None:
        torch.cuda.synchronize()
        self.last = float(torch.cuda.max_memory_allocated())
        self.max_peak = max(self.max_peak, self.last)
        torch.cuda.reset_peak_memory_stats()


def runner(lengths: list[int], compute: Callable, oom_rate: float, answered: list[int],
           accountant: Accountant | DeviceAccount | None = None):
    faults = SimulatedOOM(rate=oom_rate, seed=7) if oom_rate else None

    def run(batch: list[int]) -> list[int]:
        if accountant:
            accountant.check(batch)
        if faults:
            faults.check([lengths[i] for i in batch])
        try:
            compute(batch)
        except BaseException as e:
            if accountant and is_oom(e):
                accountant.failed()
            raise
        if accountant:
            accountant.done()
        answered.extend(batch)
        return list(batch)
    return run


def measure(lengths: list[int], compute: Callable, oom_rate: float, repeats: int,
            budget: float | None = None, meter: Callable[[], PeakMeter] | None = None,
            on_device: bool = False, largest_fixed: int = FIXED[-1]) -> dict:
    """``meter``: how ours measures peaks where no accountant reports them (the engine's CPU meter);
    ``on_device``: the GPU's allocator enforces ``budget`` (else a simulated accountant does);
    ``largest_fixed``: where the sweep stops (the report says if its best is at that end)."""
    n = len(lengths)
    order = sorted(range(n), key=lambda i: (-lengths[i], i))
    policies = {f"fixed_{s}": (lambda run, acc, s=s: fixed(run, order, s)) for s in FIXED if s <= largest_fixed}
    if len(set(lengths)) > 1:  # where lengths differ: the planner alone, at each token budget (or the real one)
        for k in (PLANNED if budget is None else PLANNED[:1]):
            policies["planner" if budget else f"planner_{k}"] = lambda run, acc, k=k: planned(run, lengths, k, budget)
    policies["seed"] = lambda run, acc: seed_batcher(run, order)
    stats: dict = {}
    def peaks(acc) -> PeakMeter | None:
        return ReportedPeaks(lambda: acc.last) if acc else (meter() if meter else None)

    # Cold: a run's first shard, which learns from nothing. Warm: its later shards, which start from the
    # sizes the shard before them learned (here: the cold run's of the same repeat).
    # On the GPU ours starts as stage 4 does there: from the memory plan, not from 32 (generate.engine).
    start = None if on_device else 32
    policies["ours"] = lambda run, acc: ours(run, lengths, budget or float(1 << 40), peaks(acc), stats,
                                             start_batch=start)
    policies["ours_warm"] = lambda run, acc: ours(run, lengths, budget or float(1 << 40), peaks(acc),
                                                  learned=stats["settled_on"], start_batch=start)
    rates: dict[str, list[float]] = {name: [] for name in policies}
    memory: dict[str, dict] = {}
    settling: list[float | None] = []
    for repeat in range(repeats):
        for name, policy in policies.items():
            answered: list[int] = []
            accountant = (DeviceAccount(budget) if on_device else Accountant(lengths, budget)) if budget else None
            t0 = time.perf_counter()
            results = policy(runner(lengths, compute, oom_rate, answered, accountant), accountant)
            rate = n / (time.perf_counter() - t0)
            assert results == list(range(n)), f"{name}: not every item in input order"
            assert sorted(answered) == list(range(n)), f"{name}: an item answered twice or never"
            rates[name].append(rate)
            if name == "ours":
                settling.append(stats.get("settled_after"))
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
            "ours_warm_vs_oracle": round(cells["ours_warm"]["median"] / cells[oracle]["median"], 3),
            "best_planner": best_planner, "ours_vs_best_planner":
                round(cells["ours"]["median"] / cells[best_planner]["median"], 3) if best_planner else None,
            "ours_vs_fixed_32": round(cells["ours"]["median"] / cells["fixed_32"]["median"], 3),
            "ours_vs_seed": round(cells["ours"]["median"] / cells["seed"]["median"], 3),
            "ours_vs_one_at_a_time": round(cells["ours"]["median"] / cells["fixed_1"]["median"], 3),
            "ours_settled_on": stats.get("settled_on"), "ours_settled_after_share_of_items": settling,
            "memory": memory or None, "best_at_sweep_end": at_end, "exactly_once_in_order": True}


def gpu_rows(n: int, repeats: int) -> list[dict] | str:
    """The attention workload on the GPU, lengths 8-4,096, under a budget its allocator enforces (a quarter
    of the card, at most 16 GiB); ours measures peaks with ``max_memory_allocated``. Each batch waits for its
    GPU work (``synchronized``), as a generation that reads its results does."""
    if not torch.cuda.is_available():
        return "skipped: no CUDA device on this machine (the section runs wherever torch.cuda.is_available())"
    total = torch.cuda.get_device_properties(0).total_memory
    cap = min(total // 4, 16 << 30)
    torch.cuda.set_per_process_memory_fraction(cap / total)
    lengths, compute = attention_workload(n, longest=4096, device="cuda")
    compute(list(range(8)))  # warm-up: kernels and the allocator's first blocks
    budget = cap - torch.cuda.memory_allocated()
    rows = []
    for oom_rate, limit in ((0.0, None), (0.0, budget), (0.02, budget)):
        print(f"gpu attention, {n} items, injected OOM rate {oom_rate}, budget {limit}:", file=sys.stderr)
        cell = measure(lengths, compute, oom_rate, repeats, limit, meter=CudaPeaks, on_device=True)
        rows.append({"workload": "attention_gpu", "synchronized": True, **cell})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--image-items", type=int, nargs="+", default=[1000, 4000])
    ap.add_argument("--attention-items", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--workloads", nargs="+", default=["image", "attention", "gpu"],
                    choices=["image", "attention", "gpu"], help="run only these (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workloads = []
        if "image" in args.workloads:
            from bench.demo_model import install_demo_model

            lake = install_demo_model(Path(tmp) / "lake")  # installed once (its calibration takes seconds)
            workloads += [("image", image_workload(n, lake)) for n in args.image_items]
        workloads += [("attention", attention_workload(n)) for n in args.attention_items
                      if "attention" in args.workloads]
        for name, (lengths, compute) in workloads:
            conditions = [(0.0, None), (0.02, None)]
            if name == "attention":  # memory that grows with length: also under a budget two longest items fit
                conditions.append((0.0, 4.0 * 1.3 * 2 * (WIDTH**2 + max(lengths) ** 2)))
            # Fixed batches of 256 and 512 pad hundreds of items to the longest: on the attention workload they
            # run at a fortieth of the best rate (minutes a run on the larger set), and the sweep still brackets
            # its best (``best_at_sweep_end`` would say otherwise).
            largest = 128 if name == "attention" else FIXED[-1]
            for oom_rate, budget in conditions:
                print(f"{name}, {len(lengths)} items, injected OOM rate {oom_rate}, budget {budget}:", file=sys.stderr)
                rows.append({"workload": name, **measure(lengths, compute, oom_rate, args.repeats, budget,
                                                         meter=CpuPeaks, largest_fixed=largest)})
    gpu = gpu_rows(max(args.attention_items), args.repeats) if "gpu" in args.workloads else "not asked for"
    print(f"\nitems/s, median of {args.repeats}; ours / the best fixed batch in hindsight:", file=sys.stderr)
    for r in rows + (gpu if isinstance(gpu, list) else []):
        cells = ", ".join(f"{k} {v['median']:.0f}" for k, v in r["items_per_s"].items())
        budget = f", budget {r['budget_bytes'] / 2**20:.1f} MiB {r['memory']}" if r["budget_bytes"] else ""
        print(f"  {r['workload']:9s} {r['items']} items, OOM {r['oom_rate']:.0%}{budget}: {cells}; "
              f"oracle {r['oracle']}; ours/oracle {r['ours_vs_oracle']:.2f} (warm {r['ours_warm_vs_oracle']:.2f}), "
              f"ours/fixed_32 {r['ours_vs_fixed_32']:.2f}, ours/seed {r['ours_vs_seed']:.2f}, "
              f"ours/best planner {r['ours_vs_best_planner']}; settled after "
              f"{r['ours_settled_after_share_of_items']}; best at a sweep's end: {r['best_at_sweep_end']}",
              file=sys.stderr)
    if isinstance(gpu, str):
        print(f"  gpu: {gpu}", file=sys.stderr)
    summary = {"bench": "batching", "repeats": args.repeats, "rows": rows, "gpu": gpu}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_results(RESULTS, summary, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
