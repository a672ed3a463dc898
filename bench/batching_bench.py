"""B1, stage 4's batching: ours against the best fixed batch found in hindsight, on two workloads.

    python bench/batching_bench.py [--repeats 3] [--image-items 4000] [--attention-items 2000]

Workloads, compute only (what a batch size changes):

* ``image``: the shipped demo model (tests/fixtures/demo_model) as the demo deploys it, the int8
  variant at 32 px, generating the evaluation prompts; every prompt costs the same.
* ``attention``: self-attention (width 64) over long-tailed sequences (lengths 8–1,024, Pareto),
  each batch padded to its longest item, so memory and time grow with length (at 2,048 a fixed
  batch of 512 would need 17 GB: more than this machine has).

Policies, each over the same order (longest first: padding stays small): fixed batches of 8, 32,
128 and 512 (a batch that runs out of memory is split in two and retried, as a careful user
would); the oracle, the best of those in hindsight; and ours, ``AdaptiveBatcher``. Conditions:
no budget, and 2 % injected out-of-memory errors (``SimulatedOOM``, the same seed for every
policy; no backoff sleep in either: the fixed baseline has none). Repeats alternate the policies
in one process; each cell is the median items/s with its range. Every policy is checked to
answer every item exactly once and in input order.

The last line is one JSON object, also written to ``bench/results/batching.json``.
Not yet here (issue 15): a budget enforced by an accountant whose truth differs from the
batcher's prior by ±30 %, the seed's trial-and-error batcher and the planner alone as baselines,
and a GPU section.
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

from aigc.batching import AdaptiveBatcher, MemoryModel  # noqa: E402
from aigc.batching.adaptive import is_oom  # noqa: E402
from aigc.batching.faults import SimulatedOOM  # noqa: E402

FIXED = (8, 32, 128, 512)
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


def runner(lengths: list[int], compute: Callable, oom_rate: float, answered: list[int]):
    faults = SimulatedOOM(rate=oom_rate, seed=7) if oom_rate else None

    def run(batch: list[int]) -> list[int]:
        if faults:
            faults.check([lengths[i] for i in batch])
        compute(batch)
        answered.extend(batch)
        return list(batch)
    return run


def fixed(run: Callable, order: list[int], size: int) -> list[int]:
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

    for lo in range(0, len(order), size):
        attempt(order[lo:lo + size])
    return [out[i] for i in range(len(order))]


def ours(run: Callable, lengths: list[int]) -> list[int]:
    results, _ = AdaptiveBatcher(run, lengths, MemoryModel(width=WIDTH), lambda: float(1 << 40),
                                 backoff_s=0.0)()
    return results


def measure(lengths: list[int], compute: Callable, oom_rate: float, repeats: int) -> dict:
    n = len(lengths)
    order = sorted(range(n), key=lambda i: (-lengths[i], i))
    policies = {f"fixed_{s}": (lambda run, s=s: fixed(run, order, s)) for s in FIXED}
    policies["ours"] = lambda run: ours(run, lengths)
    rates: dict[str, list[float]] = {name: [] for name in policies}
    for repeat in range(repeats):
        for name, policy in policies.items():
            answered: list[int] = []
            t0 = time.perf_counter()
            results = policy(runner(lengths, compute, oom_rate, answered))
            rate = n / (time.perf_counter() - t0)
            assert results == list(range(n)), f"{name}: not every item in input order"
            assert sorted(answered) == list(range(n)), f"{name}: an item answered twice or never"
            rates[name].append(rate)
            print(f"  repeat {repeat + 1}: {name:10s} {rate:9.0f} items/s", file=sys.stderr, flush=True)
    cells = {k: {"median": round(statistics.median(v), 1), "range": [round(min(v), 1), round(max(v), 1)]}
             for k, v in rates.items()}
    oracle = max((k for k in cells if k.startswith("fixed_")), key=lambda k: cells[k]["median"])
    return {"items": n, "oom_rate": oom_rate, "items_per_s": cells, "oracle": oracle,
            "ours_vs_oracle": round(cells["ours"]["median"] / cells[oracle]["median"], 3),
            "ours_vs_fixed_32": round(cells["ours"]["median"] / cells["fixed_32"]["median"], 3),
            "exactly_once_in_order": True}


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
            for oom_rate in (0.0, 0.02):
                print(f"{name}, {len(lengths)} items, injected OOM rate {oom_rate}:", file=sys.stderr)
                rows.append({"workload": name, **measure(lengths, compute, oom_rate, args.repeats)})
    print(f"\nitems/s, median of {args.repeats}; ours / the best fixed batch in hindsight:", file=sys.stderr)
    for r in rows:
        cells = ", ".join(f"{k} {v['median']:.0f}" for k, v in r["items_per_s"].items())
        print(f"  {r['workload']:9s} OOM {r['oom_rate']:.0%}: {cells}; oracle {r['oracle']}; "
              f"ours/oracle {r['ours_vs_oracle']:.2f}, ours/fixed_32 {r['ours_vs_fixed_32']:.2f}", file=sys.stderr)
    summary = {"bench": "batching", "repeats": args.repeats, "rows": rows}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
